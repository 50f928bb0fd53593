"""The image transforms: torchvision's per image for the tasks read from disk as images (image folders, CIFAR):
resize (or resize and centre-crop) and normalise, with ``augment`` a random crop and flip for the training split;
:func:`random_crop_flip`, the same crop and flip on a whole batch of tensors (the in-memory tasks)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torchvision import transforms as T


def image_transforms(resolution: int, mean: tuple, std: tuple, augment: bool, crop: bool) -> tuple[Callable, Callable]:
    """(train, evaluate) transforms to ``resolution`` normalised with ``mean``/``std``; ``crop``: resize to 1.14x and
    centre-crop (random resized crop for training), else resize (random crop with padding for training)."""
    norm = [T.ToTensor(), T.Normalize(mean, std)]
    if crop:
        evaluate = T.Compose([T.Resize(int(round(resolution * 1.14))), T.CenterCrop(resolution), *norm])
    else:
        evaluate = T.Compose([T.Resize((resolution, resolution)), *norm])
    if not augment:
        return evaluate, evaluate
    if crop:
        train = T.Compose([T.RandomResizedCrop(resolution), T.RandomHorizontalFlip(), *norm])
    else:
        train = T.Compose([T.Resize((resolution, resolution)), T.RandomCrop(resolution, padding=resolution // 8),
                           T.RandomHorizontalFlip(), *norm])
    return train, evaluate



def random_crop_flip(x: torch.Tensor, pad: int, fill: float) -> torch.Tensor:
    """A batch ``x`` (N x C x H x W) randomly cropped back to H x W from its ``pad``-padded copy (padded with
    ``fill``), then each image flipped left-right with probability 1/2: torchvision's ``RandomCrop(padding=pad)``
    + ``RandomHorizontalFlip`` per image, drawn for the whole batch at once from the torch RNG (no per-image
    Python work)."""
    n, c, h, w = x.shape
    xp = F.pad(x, (pad, pad, pad, pad), value=fill) if pad else x
    oy = torch.randint(0, 2 * pad + 1, (n,))
    ox = torch.randint(0, 2 * pad + 1, (n,))
    flip = torch.rand(n) < 0.5
    rows = oy[:, None] + torch.arange(h)                      # N x H
    cols = ox[:, None] + torch.arange(w)                      # N x W
    cols = torch.where(flip[:, None], cols.flip(1), cols)
    return xp[torch.arange(n)[:, None, None, None], torch.arange(c)[None, :, None, None],
              rows[:, None, :, None], cols[:, None, None, :]]
