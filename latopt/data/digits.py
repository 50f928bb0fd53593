"""The bundled tasks, built in memory from scikit-learn's 8x8 handwritten digits (offline): ``digits`` and
``digits-clutter`` (see :mod:`latopt.data` for what each is), and :func:`split_indices`, the one split of
those digits, shared with the exact MLP tools."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import Dataset

from latopt.data.registry import register_task
from latopt.data.task import Task

CLUTTER_CANVAS = 64
CLUTTER_DIGIT_SIZE = (24, 36)  # px on the 64x64 canvas, inclusive
CLUTTER_FRAGMENTS = 4


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


def split_indices(labels: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stratified 60/20/20 train/val/test split of indices, deterministic in ``seed``: the one split of
    scikit-learn's digits, for the CNN tasks (digits, digits-clutter) and the exact MLP tools
    (:func:`latopt.exact.mlp.load_split`, which trains on train + val), so every tool tests on the same digits."""

    idx = np.arange(len(labels))
    train, rest = train_test_split(idx, test_size=0.4, random_state=seed, stratify=labels)
    val, test = train_test_split(rest, test_size=0.5, random_state=seed, stratify=labels[rest])
    return np.sort(train), np.sort(val), np.sort(test)


def _load_digits() -> tuple[np.ndarray, np.ndarray]:
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
    return Task(name, 10, [str(i) for i in range(10)], resolution, ds["train"], ds["val"], ds["test"],
                norm=((mean,) * 3, (std,) * 3))


@register_task("digits")
def digits(spec: str, root: Path | None, resolution: int, seed: int, augment: bool) -> Task:
    """``digits``: the digits split 60/20/20, upsampled to ``resolution``, random shifts with ``augment``."""
    images, labels = _load_digits()
    x = _resize(torch.from_numpy(images)[:, None], resolution)
    y = torch.from_numpy(labels)
    tr, va, te = split_indices(labels, seed)
    splits = {s: (x[i], y[i]) for s, i in (("train", tr), ("val", va), ("test", te))}
    return _grey_task(spec, splits, resolution, augment)


@register_task("digits-clutter")
def digits_clutter(spec: str, root: Path | None, resolution: int, seed: int, augment: bool) -> Task:
    """``digits-clutter``: each digit on cluttered 64x64 canvases; fresh training canvases with ``augment``."""
    splits = _clutter_splits(resolution, seed)
    task = _grey_task(spec, splits, resolution, augment=False)
    if augment:  # a fresh canvas every time a training digit is drawn (placement, size, clutter, noise)
        fixed: TensorImages = task.train  # type: ignore[assignment]
        images, labels = _load_digits()
        tr, _, _ = split_indices(labels, seed)
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
    tr, va, te = split_indices(labels, seed)
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

