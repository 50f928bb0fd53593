"""``cifar10:PATH``: CIFAR-10 as distributed, never downloaded, in either of its two forms (the python
batches, read by an unpickler that allows only the numpy globals an array needs, or the binary ones);
PATH is the batches' directory or its parent. 10 % of the training batches (seeded) are the validation split."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from latopt.data.registry import register_task
from latopt.data.task import Task
from latopt.data.transforms import image_transforms
from latopt.errors import LatoptError, first_line

CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
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
        raise LatoptError(f"CIFAR-10 file {path} is malformed ({type(e).__name__}: {first_line(e)})") from None
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
            names: Any = [line.strip() for line in meta.read_text().splitlines() if line.strip()]
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


@register_task("cifar10", directory=True)
def cifar10(spec: str, root: Path | None, resolution: int, seed: int, augment: bool) -> Task:
    """CIFAR-10 from ``root`` (the batches' directory or its parent), resized to ``resolution``, CIFAR mean/std;
    random crop + flip for training with ``augment``; ``seed`` picks the 10 % validation split."""
    assert root is not None  # a directory task: its spec names the directory
    if not root.is_dir():
        raise LatoptError(f"CIFAR-10 directory {root} does not exist (give the cifar-10-batches-py or "
                          "cifar-10-batches-bin directory, or its parent)", param="spec")
    candidates = [(root, fmt) for fmt in (CIFAR_PY, CIFAR_BIN) if (root / fmt[3]).is_file() or root.name == fmt[0]]
    candidates += [(root / fmt[0], fmt) for fmt in (CIFAR_PY, CIFAR_BIN) if (root / fmt[0]).is_dir()]
    if not candidates:
        raise LatoptError(f"CIFAR-10 directory {root} lacks data_batch_1..5, test_batch and batches.meta (the python "
                          "batches) and data_batch_1..5.bin, test_batch.bin and batches.meta.txt (the binary ones), "
                          "there or in cifar-10-batches-py/ or cifar-10-batches-bin/; extract cifar-10-python.tar.gz "
                          "or cifar-10-binary.tar.gz there; latopt never downloads them", param="spec")
    batches, (_, train_files, test_file, meta_file) = candidates[0]
    binary = train_files == CIFAR_BIN[1]
    missing = [f for f in (*train_files, test_file, meta_file) if not (batches / f).is_file()]
    if missing:
        kind = "binary" if binary else "python"
        raise LatoptError(f"CIFAR-10 directory {batches} lacks {', '.join(missing)}; it must hold the {kind} "
                          "batches (the extracted archive); latopt never downloads them", param="spec")
    read = _cifar_bin_batch if binary else _cifar_py_batch
    train = [read(batches / f) for f in train_files]
    test_x, test_y = read(batches / test_file)
    classes = _cifar_classes(batches / meta_file, binary)
    x, y = np.concatenate([b[0] for b in train]), np.concatenate([b[1] for b in train])
    if len(y) < 2 or len(test_y) < 1 or min(y.min(), test_y.min()) < 0 or max(y.max(), test_y.max()) >= 10:
        raise LatoptError(f"CIFAR-10 directory {batches} is malformed (labels outside 0..9 or no images)")
    train_tf, eval_tf = image_transforms(resolution, CIFAR_MEAN, CIFAR_STD, augment, crop=False)
    perm = np.random.default_rng([seed, 10]).permutation(len(y))
    n_val = max(1, len(y) // 10)
    val_idx, train_idx = np.sort(perm[:n_val]), np.sort(perm[n_val:])
    return Task(spec, 10, classes, resolution, CifarImages(x[train_idx], y[train_idx], train_tf),
                CifarImages(x[val_idx], y[val_idx], eval_tf), CifarImages(test_x, test_y, eval_tf),
                norm=(CIFAR_MEAN, CIFAR_STD))

