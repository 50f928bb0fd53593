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
  resized crop + flip for training with ``augment``), ImageNet mean/std. The first image of each split
  is verified up front; any other file that cannot be decoded stops training when it is read, with one
  line naming the file and its split (:class:`UnreadableImage`; no up-front scan of a large folder).
- ``cifar10:PATH``: CIFAR-10 as distributed, never downloaded: the python batches
  (``cifar-10-batches-py``: ``data_batch_1..5``, ``test_batch``, ``batches.meta``) or the binary ones
  (``cifar-10-batches-bin``: ``data_batch_1..5.bin``, ``test_batch.bin``, ``batches.meta.txt``; a label
  byte and 3072 image bytes per record); PATH is that directory or its parent. The python batches are
  pickles: they are read with an unpickler that allows only the numpy globals an array needs, so a
  file that would run code is refused with one line naming the global. 10 % of the training batches
  (seeded) are held out as the validation split.

A missing, empty or malformed dataset directory raises :class:`LatoptError` with one line saying
what is wrong.

Public API: :class:`Task`, :func:`get_task`, :func:`load_task` (the task of a run config), :func:`limit_task`,
:func:`make_loaders`, :class:`ShardSampler`, :func:`data_meta` (what a checkpoint records about its data),
:func:`split_indices` (the one digits split), :data:`TASKS`.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, UnidentifiedImageError
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler, Subset
from torchvision import transforms as T
from torchvision.datasets import ImageFolder
from torchvision.datasets.folder import IMG_EXTENSIONS, has_file_allowed_extension

from latopt.accel import Accel
from latopt.config import RunConfig
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


def load_task(cfg: RunConfig) -> Task:
    """The task of a run config (``data`` section): split, resolution, augmentation, ``max_samples``."""
    task = get_task(cfg.data.task, cfg.data.resolution, cfg.data.split_seed, augment=cfg.data.augment)
    return limit_task(task, cfg.data.max_samples)


def data_meta(cfg: RunConfig) -> dict[str, Any]:
    """What a checkpoint records about its data, checked again when it is folded."""
    return {"task": cfg.data.task, "split_seed": cfg.data.split_seed, "resolution": cfg.data.resolution,
            "max_samples": cfg.data.max_samples}


def data_fingerprint(spec: str) -> str:
    """What a task's data is, for deciding whether a training state may be resumed: the bundled tasks by
    name; a directory task (``imagefolder:``, ``cifar10:``) by the SHA-256 of its listing (every file's
    relative path, size and modification time; links not followed), so data changed in place is seen."""
    kind, sep, path = spec.partition(":")
    if not (sep and kind in ("imagefolder", "cifar10")):
        return spec
    root = Path(path).expanduser()
    h = hashlib.sha256(spec.encode())
    for top, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            p = Path(top) / name
            try:
                st = p.lstat()
            except OSError:
                continue
            h.update(f"{p.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode(errors="surrogateescape"))
    return h.hexdigest()


def limit_task(task: Task, max_samples: int | None) -> Task:
    """The same task with every split cut to its first ``max_samples`` samples (None = unchanged)."""
    if max_samples is None:
        return task

    def cut(ds: Dataset) -> Dataset:
        n = len(ds)  # type: ignore[arg-type]
        return ds if n <= max_samples else Subset(ds, range(max_samples))

    return Task(task.name, task.num_classes, task.classes, task.resolution, cut(task.train), cut(task.val),
                cut(task.test))


def make_loaders(task: Task, batch_size: int, seed: int = 0, *, accel: Accel | None = None
                 ) -> tuple[DataLoader, DataLoader, DataLoader]:
    """(train, val, test) loaders of this process (``accel``: its rank, world size and loader settings;
    default one CPU process, no workers).

    Training: ``batch_size`` is the global batch, ``batch_size / world_size`` per process (it must
    divide); a :class:`DistributedSampler` shuffles every epoch with the seed ``seed + epoch``
    (:func:`latopt.engine.fit` calls ``set_epoch``), one permutation of which each process takes every
    W-th index — so step k of W processes sees the samples step k of one process sees (when W does not
    divide the training set, the sampler repeats up to W−1 samples per epoch to even the shards), and a
    resumed run sees the order it would have seen. The loader's generator, which seeds the random numbers
    of its worker processes (augmentation), is seeded with ``seed + rank``: each process draws its own.
    Evaluation: each process takes every W-th sample, without padding (:class:`ShardSampler`);
    :func:`latopt.engine.evaluate` sums the counts."""
    accel = accel or Accel()
    world, rank = accel.world_size, accel.rank
    if batch_size % world:
        raise LatoptError(f"data.batch_size {batch_size} does not split over {world} processes; "
                          f"use a multiple of {world} (it is the global batch)")
    per_process = batch_size // world
    loader = {"num_workers": accel.workers, "pin_memory": accel.pin_memory,
              "persistent_workers": accel.persistent_workers and accel.workers > 0}
    train = DataLoader(task.train, batch_size=per_process,
                       sampler=DistributedSampler(task.train, num_replicas=world, rank=rank, shuffle=True, seed=seed),
                       generator=torch.Generator().manual_seed(seed + rank), **loader)  # it seeds the workers
    val, test = (DataLoader(ds, batch_size=max(per_process, 256), sampler=ShardSampler(len(ds), world, rank),  # type: ignore[arg-type]
                            **loader) for ds in (task.val, task.test))
    return train, val, test


class ShardSampler(Sampler[int]):
    """Indices ``rank, rank + world, ...`` of ``range(n)``: every sample once over all processes, no padding."""

    def __init__(self, n: int, world: int = 1, rank: int = 0) -> None:
        self.n, self.world, self.rank = int(n), int(world), int(rank)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.n, self.world))

    def __len__(self) -> int:
        return len(range(self.rank, self.n, self.world))


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
    return Task(name, 10, [str(i) for i in range(10)], resolution, ds["train"], ds["val"], ds["test"])


def _digits(resolution: int, seed: int, augment: bool) -> Task:
    images, labels = _load_digits()
    x = _resize(torch.from_numpy(images)[:, None], resolution)
    y = torch.from_numpy(labels)
    tr, va, te = split_indices(labels, seed)
    splits = {s: (x[i], y[i]) for s, i in (("train", tr), ("val", va), ("test", te))}
    return _grey_task("digits", splits, resolution, augment)


def _digits_clutter(resolution: int, seed: int, augment: bool) -> Task:
    splits = _clutter_splits(resolution, seed)
    task = _grey_task("digits-clutter", splits, resolution, augment=False)
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


# ------------------------------------------------------------------ directories on disk
def _image_transforms(resolution: int, mean: tuple, std: tuple, augment: bool, crop: bool) -> tuple[Callable, Callable]:

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


class UnreadableImage(LatoptError):
    """An image of an image folder that cannot be decoded, named with its split (one line).

    Raised by the dataset's loader while a split is read, so a corrupt file anywhere in an ImageNet-sized
    folder costs no up-front scan. In a DataLoader worker torch re-raises it in the main process as
    ``UnreadableImage("Caught ... Original Traceback ...")``; the message is cut back to its own line."""

    def __init__(self, message: str) -> None:
        if "Original Traceback" in message:
            last = [line for line in message.strip().splitlines() if line.strip()][-1]
            message = last.split(f"{type(self).__name__}: ", 1)[-1]
        super().__init__(message)


def _load_image(split_dir: str, path: str) -> Any:

    try:
        with open(path, "rb") as f:
            img = Image.open(f)
            return img.convert("RGB")
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise UnreadableImage(f"image folder {split_dir}: {path} is not a readable image ({_one_line(e)}); "
                              "remove or replace it") from None


def _imagefolder(spec: str, root: Path, resolution: int, augment: bool) -> Task:

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
            splits[s] = ImageFolder(str(root / s), transform=train_tf if s == "train" else eval_tf,
                                    loader=functools.partial(_load_image, str(root / s)),
                                    is_valid_file=functools.partial(_image_file, str(root / s)))
        except (FileNotFoundError, OSError) as e:
            raise LatoptError(f"image folder {root / s} is empty or malformed: {_one_line(e)}") from None
        _check_no_loop(root / s, splits[s].samples)
        if splits[s].classes != splits["train"].classes:
            raise LatoptError(f"image folder {root / s} has classes {splits[s].classes} but {root / 'train'} has "
                              f"{splits['train'].classes}; every split needs the same class folders")
        _check_image(root / s, splits[s].samples[0][0])   # a wrong folder fails now; a later bad file when read
    classes = list(splits["train"].classes)
    if len(classes) < 2:
        raise LatoptError(f"image folder {root / 'train'} has {len(classes)} class folder(s); at least 2 are needed")
    return Task(spec, len(classes), classes, resolution, splits["train"], splits["val"], splits["test"])


def _check_image(where: Path, path: str) -> None:

    try:
        with Image.open(path) as im:
            im.verify()
    except (UnidentifiedImageError, OSError, SyntaxError, Image.DecompressionBombError) as e:
        raise LatoptError(f"image folder {where}: {path} is not a readable image ({_one_line(e)})") from None


def _image_file(split: str, path: str) -> bool:
    """ImageFolder's file filter (its own extensions), which also refuses in one line an image entry that is a
    broken link or not a regular file (a FIFO would block the first read for ever; a device): checked in
    ImageFolder's one scan of the folder, not in a second one."""
    if not has_file_allowed_extension(path, IMG_EXTENSIONS):
        return False
    try:
        mode = os.stat(path).st_mode
    except OSError:
        raise LatoptError(f"image folder {split}: {path} is a broken link or cannot be read; remove it") from None
    if not stat.S_ISREG(mode):
        raise LatoptError(f"image folder {split}: {path} is not a regular file (a FIFO, device or socket); remove it")
    return True


def _check_no_loop(split: Path, samples: list[tuple[str, int]]) -> None:
    """ImageFolder follows links: a link back up the tree makes it read the same images again and again (until
    the system's link depth stops it). Two of its directories that are one real directory are such a loop."""
    real: dict[str, str] = {}
    for d in sorted({os.path.dirname(p) for p, _ in samples}, key=len):
        r = os.path.realpath(d)
        if r in real:
            raise LatoptError(f"image folder {split}: {d} leads back to {real[r]} (a link loop); the same images "
                              "would be read again and again: remove the link")
        real[r] = d


# CIFAR-10 on disk, in either of its two distributions (never downloaded):
CIFAR_PY = ("cifar-10-batches-py", tuple(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta")
CIFAR_BIN = ("cifar-10-batches-bin", tuple(f"data_batch_{i}.bin" for i in range(1, 6)), "test_batch.bin",
             "batches.meta.txt")
CIFAR_IMAGE_BYTES = 3 * 32 * 32


class _CifarUnpickler(pickle.Unpickler):
    """Unpickles CIFAR's python batches and nothing else: the only globals allowed are the three numpy needs
    to rebuild an array (``numpy.core.multiarray._reconstruct`` — ``numpy._core`` since numpy 2 —,
    ``numpy.ndarray``, ``numpy.dtype``); dicts, lists, bytes, str and int need none. Any other global (a
    pickle that would run code) is refused before it is looked up."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype")}

    def __init__(self, file: Any, where: Path) -> None:
        super().__init__(file, encoding="latin1")    # the batches were pickled by Python 2
        self.where = where

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.ALLOWED:
            raise LatoptError(f"CIFAR-10 file {self.where} refers to the Python global {module}.{name}, which a "
                              "CIFAR batch never needs; it was not loaded (a pickle can run code: use the "
                              "original cifar-10-python.tar.gz or the binary cifar-10-batches-bin)")
        if name == "_reconstruct":
            return np.ndarray.__reduce__(np.zeros(0, np.uint8))[0]   # numpy's own, whatever its module is called
        return getattr(np, name)


def _cifar_pickle(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            obj = _CifarUnpickler(f, path).load()
    except LatoptError:
        raise
    except Exception as e:  # truncated or garbage bytes: any unpickling error means a malformed file
        raise LatoptError(f"CIFAR-10 file {path} is malformed ({type(e).__name__}: {_one_line(e)})") from None
    if not isinstance(obj, dict):
        raise LatoptError(f"CIFAR-10 file {path} is malformed (a {type(obj).__name__}, not a dict)")
    return {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in obj.items()}


def _cifar_py_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    d = _cifar_pickle(path)
    data, labels = d.get("data"), d.get("labels")
    if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 2
            and data.shape[1] == CIFAR_IMAGE_BYTES):
        raise LatoptError(f"CIFAR-10 file {path} is malformed ('data' is not a uint8 array of N x 3072)")
    if not (isinstance(labels, list) and len(labels) == len(data)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in labels)):
        raise LatoptError(f"CIFAR-10 file {path} is malformed ('labels' is not a list of {len(data)} integers)")
    return data, np.asarray(labels, dtype=np.int64)


def _cifar_bin_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    raw = np.fromfile(path, dtype=np.uint8)
    record = 1 + CIFAR_IMAGE_BYTES
    if raw.size == 0 or raw.size % record:
        raise LatoptError(f"CIFAR-10 file {path} is malformed ({raw.size} bytes: not a whole number of "
                          f"{record}-byte records, a label byte and a 32x32x3 image each)")
    rows = raw.reshape(-1, record)
    return rows[:, 1:].copy(), rows[:, 0].astype(np.int64)


def _cifar_classes(meta: Path, binary: bool) -> list[str]:
    if binary:
        try:
            names = [line.strip() for line in meta.read_text().splitlines() if line.strip()]
        except UnicodeDecodeError:
            names = []
    else:
        names = _cifar_pickle(meta).get("label_names")
    if not (isinstance(names, list) and len(names) == 10 and all(isinstance(n, str) for n in names)):
        raise LatoptError(f"CIFAR-10 file {meta} is malformed (it must name the 10 classes)")
    return names


class CifarImages(Dataset):
    """CIFAR images (N x 3072 bytes, channel-major as the files store them) with labels, through a transform."""

    def __init__(self, data: np.ndarray, labels: np.ndarray, transform: Callable) -> None:
        self.images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)   # N x H x W x C for PIL
        self.labels, self.transform = labels, transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:

        return self.transform(Image.fromarray(self.images[i])), int(self.labels[i])


def _cifar10(spec: str, path: Path, resolution: int, seed: int, augment: bool) -> Task:
    if not path.is_dir():
        raise LatoptError(f"CIFAR-10 directory {path} does not exist (give the cifar-10-batches-py or "
                          "cifar-10-batches-bin directory, or its parent)")
    candidates = [(path, fmt) for fmt in (CIFAR_PY, CIFAR_BIN) if (path / fmt[3]).is_file() or path.name == fmt[0]]
    candidates += [(path / fmt[0], fmt) for fmt in (CIFAR_PY, CIFAR_BIN) if (path / fmt[0]).is_dir()]
    if not candidates:
        raise LatoptError(f"CIFAR-10 directory {path} lacks data_batch_1..5, test_batch and batches.meta (the python "
                          "batches) and data_batch_1..5.bin, test_batch.bin and batches.meta.txt (the binary ones), "
                          "there or in cifar-10-batches-py/ or cifar-10-batches-bin/; extract cifar-10-python.tar.gz "
                          "or cifar-10-binary.tar.gz there; latopt never downloads them")
    batches, (_, train_files, test_file, meta_file) = candidates[0]
    binary = train_files == CIFAR_BIN[1]
    missing = [f for f in (*train_files, test_file, meta_file) if not (batches / f).is_file()]
    if missing:
        kind = "binary" if binary else "python"
        raise LatoptError(f"CIFAR-10 directory {batches} lacks {', '.join(missing)}; it must hold the {kind} "
                          "batches (the extracted archive); latopt never downloads them")
    read = _cifar_bin_batch if binary else _cifar_py_batch
    train = [read(batches / f) for f in train_files]
    test_x, test_y = read(batches / test_file)
    classes = _cifar_classes(batches / meta_file, binary)
    x, y = np.concatenate([b[0] for b in train]), np.concatenate([b[1] for b in train])
    if len(y) < 2 or len(test_y) < 1 or min(y.min(), test_y.min()) < 0 or max(y.max(), test_y.max()) >= 10:
        raise LatoptError(f"CIFAR-10 directory {batches} is malformed (labels outside 0..9 or no images)")
    train_tf, eval_tf = _image_transforms(resolution, CIFAR_MEAN, CIFAR_STD, augment, crop=False)
    perm = np.random.default_rng([seed, 10]).permutation(len(y))
    n_val = max(1, len(y) // 10)
    val_idx, train_idx = np.sort(perm[:n_val]), np.sort(perm[n_val:])
    return Task(spec, 10, classes, resolution, CifarImages(x[train_idx], y[train_idx], train_tf),
                CifarImages(x[val_idx], y[val_idx], eval_tf), CifarImages(test_x, test_y, eval_tf))


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__
