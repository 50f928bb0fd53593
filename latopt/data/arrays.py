"""Grey images held in memory as uint8 and served a whole batch at a time: :class:`ArrayImages` and
:class:`Batch`, what its ``__getitems__`` returns (:func:`latopt.data.make_loaders` hands it on as it is).

A batch is made in one pass of tensor operations, never per image: the uint8 images are indexed, scaled to
[0, 1], resized (bilinear) to the resolution when they differ, normalised, augmented when asked
(:func:`latopt.data.transforms.random_crop_flip`: a random crop from the image padded by resolution/8, then a
left-right flip with probability 1/2, the random numbers drawn from the torch RNG) and expanded to 3
channels (a view). ``dataset[i]`` is the one-image batch ``[i]``: without augmentation a per-image loader and
the batched one serve the same tensors (with it they draw the random numbers in another order).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from latopt.data.transforms import random_crop_flip


class Batch(NamedTuple):
    """A batch made by a batched dataset's ``__getitems__``: images N x 3 x R x R (float32) and labels N (int64)."""

    x: torch.Tensor
    y: torch.Tensor


class ArrayImages(Dataset):
    """uint8 grey images ``N x H x W`` and int64 labels ``N`` served as normalised 3-channel float images at
    ``resolution``, ``augment``: random crop (padding resolution/8, filled with black) and flip."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, resolution: int, mean: float, std: float,
                 augment: bool = False) -> None:
        if images.dtype != torch.uint8 or images.dim() != 3 or len(images) != len(labels):
            raise ValueError("ArrayImages wants uint8 images N x H x W and N labels")
        self.images, self.labels = images, labels.to(torch.int64)
        self.resolution, self.mean, self.std, self.augment = int(resolution), float(mean), float(std), augment

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        idx = torch.as_tensor(indices, dtype=torch.int64)
        x = self.images[idx].unsqueeze(1).to(torch.float32).div_(255.0)
        r = self.resolution
        if x.shape[-2:] != (r, r):
            x = F.interpolate(x, size=(r, r), mode="bilinear", align_corners=False)
        x = x.sub_(self.mean).div_(self.std)
        if self.augment:
            x = random_crop_flip(x, max(1, r // 8), (0.0 - self.mean) / self.std)
        return Batch(x.expand(-1, 3, -1, -1), self.labels[idx])

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        b = self.__getitems__([int(i)])
        return b.x[0], int(b.y[0])


__all__ = ["ArrayImages", "Batch"]
