"""Datasets for training and folding, chosen by a task spec string.

Specs (``data.task`` in the config, ``--data`` on the command line):

- ``digits``: scikit-learn's bundled 8x8 handwritten digits (1797 images, offline), split 60/20/20 into
  train/val/test, stratified and deterministic in ``split_seed``; upsampled (bilinear) to the
  config resolution, 3 channels, normalised with the training split's mean/std.
- ``digits-clutter``: a harder task built from the same real digits: each digit is scaled to 24..36 px
  and placed at a random position on a 64x64 canvas cluttered with 4 fragments of *other* digits and
  Gaussian noise (3 canvases per source digit; the split is done on the source digits first, so no
  test digit is seen in training). Generated deterministically from ``split_seed``; resized to the
  config resolution. With ``augment`` the training canvases are generated afresh each time a digit is
  drawn (from the torch RNG, so a seeded run is still reproducible): far less over-fitting. Telling the digit from the fragments needs non-linear features, so folding costs
  accuracy here, where on plain digits almost any fold keeps it.
- ``imagefolder:PATH``: ``PATH/train/<class>/*`` and ``PATH/val/<class>/*`` (torchvision
  ``ImageFolder``); ``PATH/test/`` is used as the test split when present, otherwise ``val/`` doubles
  as the test split. Images are resized to the resolution (resize to 1.14x + centre crop; random
  resized crop + flip for training with ``augment``), ImageNet mean/std.
- ``cifar10:PATH``: the standard python batches directory (``cifar-10-batches-py``, or its parent),
  never downloaded; 10 % of the training batches (seeded) are held out as the validation split.

A missing, empty or malformed dataset directory raises :class:`LatoptError` with one line saying
what is wrong.

Public API: :class:`Task`, :func:`get_task`, :func:`limit_task`, :func:`make_loaders`, :data:`TASKS`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Subset

from latopt.errors import LatoptError

TASKS = ("digits", "digits-clutter", "imagefolder:PATH", "cifar10:PATH")
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
CLUTTER_CANVAS = 64
CLUTTER_DIGIT_SIZE = (24, 36)  # px on the 64x64 canvas, inclusive
CLUTTER_FRAGMENTS = 4


@dataclass
class Task:
    """A classification task: three splits of (image tensor 3xRxR, int label)."""

    name: str  # the spec, e.g. "digits" or "imagefolder:/data/x"
    num_classes: int
    classes: list[str]
    resolution: int
    train: Dataset
    val: Dataset
    test: Dataset

    def sizes(self) -> dict[str, int]:
        return {s: len(getattr(self, s)) for s in ("train", "val", "test")}  # type: ignore[arg-type]


def get_task(spec: str, resolution: int, seed: int = 0, *, augment: bool = False) -> Task:
    """Build the task named by ``spec`` at ``resolution``; ``seed`` fixes the split (and clutter)."""
    if not isinstance(spec, str) or not spec:
        raise LatoptError(f"data task must be one of {', '.join(TASKS)}")
    if spec == "digits":
        return _digits(resolution, seed, augment)
    if spec == "digits-clutter":
        return _digits_clutter(resolution, seed, augment)
    kind, sep, path = spec.partition(":")
    if sep and kind in ("imagefolder", "cifar10"):
        if not path:
            raise LatoptError(f"data task {spec!r} needs a directory: {kind}:PATH")
        if kind == "imagefolder":
            return _imagefolder(spec, Path(path).expanduser(), resolution, augment)
        return _cifar10(spec, Path(path).expanduser(), resolution, seed, augment)
    raise LatoptError(f"unknown data task {spec!r}; choose one of {', '.join(TASKS)}")


def limit_task(task: Task, max_samples: int | None) -> Task:
    """The same task with every split cut to its first ``max_samples`` samples (None = unchanged)."""
    if max_samples is None:
        return task

    def cut(ds: Dataset) -> Dataset:
        n = len(ds)  # type: ignore[arg-type]
        return ds if n <= max_samples else Subset(ds, range(max_samples))

    return Task(task.name, task.num_classes, task.classes, task.resolution, cut(task.train), cut(task.val),
                cut(task.test))


def make_loaders(
    task: Task, batch_size: int, workers: int = 0, seed: int = 0
) -> tuple[DataLoader, DataLoader, DataLoader]:
    """(train, val, test) loaders; the training order is shuffled reproducibly from ``seed``."""
    g = torch.Generator()
    g.manual_seed(seed)
    train = DataLoader(task.train, batch_size=batch_size, shuffle=True, num_workers=workers, generator=g)
    val = DataLoader(task.val, batch_size=max(batch_size, 256), shuffle=False, num_workers=workers)
    test = DataLoader(task.test, batch_size=max(batch_size, 256), shuffle=False, num_workers=workers)
    return train, val, test


# ------------------------------------------------------------------ in-memory digits tasks
class TensorImages(Dataset):
    """Grey images (N, 1, R, R) served as 3-channel tensors; optional random-shift augmentation."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, shift: int = 0, fill: float = 0.0):
        self.images, self.labels, self.shift, self.fill = images, labels, shift, fill

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x = self.images[i]
        if self.shift:
            dy, dx = (int(v) for v in torch.randint(-self.shift, self.shift + 1, (2,)))
            x = _translate(x, dy, dx, self.fill)
        return x.expand(3, -1, -1), int(self.labels[i])


def _translate(x: torch.Tensor, dy: int, dx: int, fill: float) -> torch.Tensor:
    out = torch.full_like(x, fill)
    h, w = x.shape[-2:]
    ys, yd = (slice(0, h - dy), slice(dy, h)) if dy >= 0 else (slice(-dy, h), slice(0, h + dy))
    xs, xd = (slice(0, w - dx), slice(dx, w)) if dx >= 0 else (slice(-dx, w), slice(0, w + dx))
    out[..., yd, xd] = x[..., ys, xs]
    return out


def _split_indices(labels: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stratified 60/20/20 split of indices, deterministic in ``seed``."""
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(labels))
    train, rest = train_test_split(idx, test_size=0.4, random_state=seed, stratify=labels)
    val, test = train_test_split(rest, test_size=0.5, random_state=seed, stratify=labels[rest])
    return np.sort(train), np.sort(val), np.sort(test)


def _load_digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.images / 16.0).astype(np.float32), d.target.astype(np.int64)


def _resize(images: torch.Tensor, resolution: int) -> torch.Tensor:
    if images.shape[-1] == resolution and images.shape[-2] == resolution:
        return images
    return F.interpolate(images, size=(resolution, resolution), mode="bilinear", align_corners=False)


def _grey_task(name: str, splits: dict[str, tuple[torch.Tensor, torch.Tensor]], resolution: int,
               augment: bool) -> Task:
    train_x = splits["train"][0]
    mean, std = float(train_x.mean()), float(train_x.std()) or 1.0
    fill = (0.0 - mean) / std
    ds = {}
    for s, (x, y) in splits.items():
        x = ((x - mean) / std).contiguous()
        shift = max(1, resolution // 8) if (augment and s == "train") else 0
        ds[s] = TensorImages(x, y, shift=shift, fill=fill)
    return Task(name, 10, [str(i) for i in range(10)], resolution, ds["train"], ds["val"], ds["test"])


def _digits(resolution: int, seed: int, augment: bool) -> Task:
    images, labels = _load_digits()
    x = _resize(torch.from_numpy(images)[:, None], resolution)
    y = torch.from_numpy(labels)
    tr, va, te = _split_indices(labels, seed)
    splits = {s: (x[i], y[i]) for s, i in (("train", tr), ("val", va), ("test", te))}
    return _grey_task("digits", splits, resolution, augment)


def _digits_clutter(resolution: int, seed: int, augment: bool) -> Task:
    splits = _clutter_splits(resolution, seed)
    task = _grey_task("digits-clutter", splits, resolution, augment=False)
    if augment:  # a fresh canvas every time a training digit is drawn (placement, size, clutter, noise)
        fixed: TensorImages = task.train  # type: ignore[assignment]
        images, labels = _load_digits()
        tr, _, _ = _split_indices(labels, seed)
        mean = float(splits["train"][0].mean())
        std = float(splits["train"][0].std()) or 1.0
        task.train = ClutterImages(torch.from_numpy(images)[tr][:, None], fixed.labels, resolution, mean, std)
    return task


class ClutterImages(Dataset):
    """Training canvases of digits-clutter generated on the fly from the torch RNG (``augment``):
    sample ``i`` is source digit ``i // copies`` on a new random canvas each time it is drawn."""

    def __init__(self, src: torch.Tensor, labels: torch.Tensor, resolution: int, mean: float, std: float,
                 copies: int = 3) -> None:
        self.src, self.labels, self.resolution = src, labels, resolution
        self.mean, self.std, self.copies = mean, std, copies

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(int(torch.randint(0, 2**62, (1,))))
        canvas = _clutter_canvases(self.src, np.array([i // self.copies]), 1, rng, pool=np.arange(len(self.src)))
        x = (_resize(canvas, self.resolution)[0] - self.mean) / self.std
        return x.expand(3, -1, -1), int(self.labels[i])


@functools.lru_cache(maxsize=4)  # generation takes ~2 s; a search calls it once per trial
def _clutter_splits(resolution: int, seed: int, copies: int = 3) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    images, labels = _load_digits()
    src = torch.from_numpy(images)[:, None]
    tr, va, te = _split_indices(labels, seed)
    splits = {}
    for k, (s, idx) in enumerate((("train", tr), ("val", va), ("test", te))):
        rng = np.random.default_rng([seed, k, 7919])
        canvases = _clutter_canvases(src, idx, copies, rng)
        splits[s] = (_resize(canvases, resolution), torch.from_numpy(labels[np.repeat(idx, copies)]))
    return splits


def _clutter_canvases(src: torch.Tensor, idx: np.ndarray, copies: int, rng: np.random.Generator,
                      n_fragments: int | None = None, pool: np.ndarray | None = None) -> torch.Tensor:
    """One 64x64 canvas per (digit ``src[i]`` for i in ``idx``, copy): the digit, ``n_fragments`` crops of
    other digits (drawn from ``pool``, default ``idx``: the same split) dimmed to 0.5-0.9, noise."""
    c = CLUTTER_CANVAS
    lo, hi = CLUTTER_DIGIT_SIZE
    n_fragments = CLUTTER_FRAGMENTS if n_fragments is None else n_fragments
    pool = idx if pool is None else pool
    out = torch.zeros(len(idx) * copies, 1, c, c)
    cache: dict[tuple[int, int], torch.Tensor] = {}

    def scaled(i: int, size: int) -> torch.Tensor:
        key = (i, size)
        if key not in cache:
            cache[key] = F.interpolate(src[i : i + 1], size=(size, size), mode="bilinear", align_corners=False)[0, 0]
        return cache[key]

    n = 0
    for i in idx:
        for _ in range(copies):
            canvas = out[n, 0]
            for _f in range(n_fragments):
                j = int(pool[rng.integers(len(pool))])
                size = int(rng.integers(16, 29))
                frag_h, frag_w = (int(v) for v in rng.integers(6, 12, size=2))
                fy, fx = int(rng.integers(0, size - frag_h + 1)), int(rng.integers(0, size - frag_w + 1))
                frag = scaled(j, size)[fy : fy + frag_h, fx : fx + frag_w] * float(rng.uniform(0.5, 0.9))
                y, x = int(rng.integers(0, c - frag_h + 1)), int(rng.integers(0, c - frag_w + 1))
                region = canvas[y : y + frag_h, x : x + frag_w]
                torch.maximum(region, frag, out=region)
            size = int(rng.integers(lo, hi + 1))
            y, x = int(rng.integers(0, c - size + 1)), int(rng.integers(0, c - size + 1))
            region = canvas[y : y + size, x : x + size]
            torch.maximum(region, scaled(int(i), size), out=region)
            canvas += torch.from_numpy(rng.normal(0.0, 0.08, size=(c, c)).astype(np.float32))
            canvas.clamp_(0.0, 1.0)
            n += 1
    return out


# ------------------------------------------------------------------ directories on disk
def _image_transforms(resolution: int, mean: tuple, std: tuple, augment: bool, crop: bool) -> tuple[Callable, Callable]:
    from torchvision import transforms as T

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


def _imagefolder(spec: str, root: Path, resolution: int, augment: bool) -> Task:
    from torchvision.datasets import ImageFolder

    if not root.is_dir():
        raise LatoptError(f"image folder {root} does not exist or is not a directory (expected {root}/train and {root}/val)")
    missing = [s for s in ("train", "val") if not (root / s).is_dir()]
    if missing:
        raise LatoptError(f"image folder {root} has no {' or '.join(s + '/' for s in missing)} sub-folder; "
                          "expected PATH/train/<class>/*.jpg and PATH/val/<class>/*.jpg")
    train_tf, eval_tf = _image_transforms(resolution, IMAGENET_MEAN, IMAGENET_STD, augment, crop=True)
    splits = {}
    for s in ("train", "val", "test"):
        if s == "test" and not (root / s).is_dir():
            splits[s] = splits["val"]
            continue
        try:
            splits[s] = ImageFolder(str(root / s), transform=train_tf if s == "train" else eval_tf)
        except (FileNotFoundError, OSError) as e:
            raise LatoptError(f"image folder {root / s} is empty or malformed: {_one_line(e)}") from None
        if splits[s].classes != splits["train"].classes:
            raise LatoptError(f"image folder {root / s} has classes {splits[s].classes} but {root / 'train'} has "
                              f"{splits['train'].classes}; every split needs the same class folders")
        _check_image(root / s, splits[s].samples[0][0])
    classes = list(splits["train"].classes)
    if len(classes) < 2:
        raise LatoptError(f"image folder {root / 'train'} has {len(classes)} class folder(s); at least 2 are needed")
    return Task(spec, len(classes), classes, resolution, splits["train"], splits["val"], splits["test"])


def _check_image(where: Path, path: str) -> None:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im.verify()
    except (UnidentifiedImageError, OSError, SyntaxError) as e:
        raise LatoptError(f"image folder {where}: {path} is not a readable image ({_one_line(e)})") from None


CIFAR_FILES = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch", "batches.meta")


def _cifar10(spec: str, path: Path, resolution: int, seed: int, augment: bool) -> Task:
    from torchvision.datasets import CIFAR10

    if not path.is_dir():
        raise LatoptError(f"CIFAR-10 directory {path} does not exist (give the cifar-10-batches-py directory or its parent)")
    batches = path if (path / "batches.meta").exists() or path.name == CIFAR10.base_folder else path / CIFAR10.base_folder
    missing = [f for f in CIFAR_FILES if not (batches / f).is_file()]
    if missing:
        raise LatoptError(f"CIFAR-10 directory {batches} lacks {', '.join(missing)}; it must hold the python "
                          "batches (cifar-10-python.tar.gz extracted); latopt never downloads them")

    class _LocalCIFAR10(CIFAR10):  # files checked for presence above, not against the full set's MD5s
        train_list = [[n, None] for n, _ in CIFAR10.train_list]
        test_list = [[n, None] for n, _ in CIFAR10.test_list]
        meta = {**CIFAR10.meta, "md5": None}

    train_tf, eval_tf = _image_transforms(resolution, CIFAR_MEAN, CIFAR_STD, augment, crop=False)
    try:
        full_train = _LocalCIFAR10(str(batches.parent), train=True, transform=train_tf, download=False)
        full_eval = _LocalCIFAR10(str(batches.parent), train=True, transform=eval_tf, download=False)
        test = _LocalCIFAR10(str(batches.parent), train=False, transform=eval_tf, download=False)
    except Exception as e:  # unpickling errors, missing keys, bad array shapes: all mean a malformed file
        raise LatoptError(f"CIFAR-10 directory {batches} is malformed ({type(e).__name__}: {_one_line(e)})") from None
    targets = np.asarray(full_train.targets)
    if len(targets) < 2 or len(test) < 1 or targets.min() < 0 or targets.max() >= len(full_train.classes):
        raise LatoptError(f"CIFAR-10 directory {batches} is malformed (labels outside 0..9 or no images)")
    perm = np.random.default_rng([seed, 10]).permutation(len(targets))
    n_val = max(1, len(targets) // 10)
    val_idx, train_idx = np.sort(perm[:n_val]), np.sort(perm[n_val:])
    return Task(spec, 10, list(full_train.classes), resolution, Subset(full_train, train_idx.tolist()),
                Subset(full_eval, val_idx.tolist()), test)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__
