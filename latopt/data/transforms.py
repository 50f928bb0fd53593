"""The torchvision transforms of the image tasks read from disk (image folders, CIFAR): resize (or resize and
centre-crop) and normalise; with ``augment`` a random crop and flip for the training split."""

from __future__ import annotations

from collections.abc import Callable

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

