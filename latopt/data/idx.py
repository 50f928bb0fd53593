"""The IDX format of MNIST and Fashion-MNIST: :func:`read_idx` (one file, gzipped or not) and
:func:`read_mnist_files` (the four files of a data set, found in a directory).

An IDX file is a 4-byte magic number (two zero bytes, a type byte, the number of dimensions), one big-endian
uint32 per dimension, then the data. MNIST-like sets use type 0x08 (unsigned byte): images ``N x 28 x 28``
(magic 0x00000803), labels ``N`` (0x00000801). A file is gzipped when it starts with gzip's magic (1f 8b),
whatever its name. Everything that can be wrong with a file (a bad magic, a wrong type or rank, a truncated
or over-long body, images and labels of different counts, labels out of range) is one
:class:`~latopt.errors.LatoptError` line naming the file.

The four files are looked for under their distributed names, with or without ``.gz``
(:data:`MNIST_FILES`), in the directory given, in its ``raw/`` and in torchvision's layout
(``<dir>/FashionMNIST/raw``, ``<dir>/MNIST/raw``).
"""

from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path

import numpy as np

from latopt.errors import LatoptError

IDX_UBYTE = 0x08
MNIST_FILES = {"train_images": "train-images-idx3-ubyte", "train_labels": "train-labels-idx1-ubyte",
               "test_images": "t10k-images-idx3-ubyte", "test_labels": "t10k-labels-idx1-ubyte"}
MAX_IDX_BYTES = 1 << 31   # an MNIST-like file is tens of MB; a header promising more is malformed


def _open_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise LatoptError(f"cannot read IDX file {path} ({e.strerror or type(e).__name__})") from None
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as e:
        raise LatoptError(f"IDX file {path} is a damaged or truncated gzip file ({type(e).__name__}); "
                          "re-install or re-download it") from None


def read_idx(path: str | Path, ndim: int) -> np.ndarray:
    """The unsigned-byte array of IDX file ``path`` (gzipped or not), which must have ``ndim`` dimensions."""
    path = Path(path)
    data = _open_bytes(path)
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise LatoptError(f"IDX file {path} has a bad magic number (first bytes {data[:4].hex() or 'none'}; an IDX "
                          f"file starts 0000080{ndim}): it is not an IDX file")
    kind, rank = data[2], data[3]
    if kind != IDX_UBYTE or rank != ndim:
        raise LatoptError(f"IDX file {path} holds type 0x{kind:02x} with {rank} dimension(s); expected unsigned "
                          f"bytes (0x08) with {ndim} (magic 0000080{ndim})")
    header = 4 + 4 * rank
    if len(data) < header:
        raise LatoptError(f"IDX file {path} is truncated inside its header ({len(data)} bytes)")
    dims = struct.unpack(f">{rank}I", data[4:header])
    size = int(np.prod(dims, dtype=np.int64))
    if size > MAX_IDX_BYTES:
        raise LatoptError(f"IDX file {path} claims dimensions {'x'.join(map(str, dims))}, {size} bytes: malformed")
    body = len(data) - header
    if body != size:
        what = "truncated" if body < size else "longer than its header says"
        raise LatoptError(f"IDX file {path} is {what}: dimensions {'x'.join(map(str, dims))} need {size} bytes "
                          f"of data, it has {body}")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def find_mnist_dir(root: Path, layout: str) -> Path | None:
    """The directory under ``root`` that holds the four files (``root``, ``root/raw``, ``root/<layout>/raw``),
    or None when none holds all four."""
    for d in (root, root / "raw", root / layout / "raw", root / layout):
        if all(_file(d, name) is not None for name in MNIST_FILES.values()):
            return d
    return None


def _file(d: Path, name: str) -> Path | None:
    for candidate in (d / f"{name}.gz", d / name):
        if candidate.is_file():
            return candidate
    return None


def read_mnist_files(d: Path, num_classes: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train images N x H x W, train labels N, test images, test labels) from the four files in ``d``
    (uint8 images, int64 labels), the counts and the label range checked (one line each)."""
    arrays = {}
    paths = {}
    for key, name in MNIST_FILES.items():
        p = _file(d, name)
        if p is None:
            raise LatoptError(f"{d} lacks {name} (or {name}.gz)")
        paths[key] = p
        arrays[key] = read_idx(p, 3 if key.endswith("images") else 1)
    for split in ("train", "test"):
        x, y = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        if len(x) != len(y):
            raise LatoptError(f"IDX files {paths[f'{split}_images']} and {paths[f'{split}_labels']} disagree: "
                              f"{len(x)} images but {len(y)} labels")
        if len(y) == 0:
            raise LatoptError(f"IDX file {paths[f'{split}_labels']} holds no labels")
        if int(y.max()) >= num_classes:
            raise LatoptError(f"IDX file {paths[f'{split}_labels']} holds label {int(y.max())}; labels must be "
                              f"0..{num_classes - 1}")
    xs = [arrays["train_images"], arrays["test_images"]]
    if xs[0].shape[1:] != xs[1].shape[1:]:
        raise LatoptError(f"IDX files {paths['train_images']} and {paths['test_images']} hold images of different "
                          f"sizes ({'x'.join(map(str, xs[0].shape[1:]))} and {'x'.join(map(str, xs[1].shape[1:]))})")
    return (arrays["train_images"], arrays["train_labels"].astype(np.int64), arrays["test_images"],
            arrays["test_labels"].astype(np.int64))


__all__ = ["MNIST_FILES", "find_mnist_dir", "read_idx", "read_mnist_files"]
