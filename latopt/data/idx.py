"""The IDX format of MNIST and Fashion-MNIST: :func:`read_idx` (one file, gzipped or not) and
:func:`read_mnist_files` (the four files of a data set, found in a directory).

An IDX file is a 4-byte magic number (two zero bytes, a type byte, the number of dimensions), one big-endian
uint32 per dimension, then the data. MNIST-like sets use type 0x08 (unsigned byte): images ``N x 28 x 28``
(magic 0x00000803), labels ``N`` (0x00000801). A file is gzipped when it starts with gzip's magic (1f 8b),
whatever its name. Everything that can be wrong with a file (a bad magic, a wrong type or rank, images of
another size than 28x28 (:data:`IMAGE_SIZE`), a truncated or over-long body, images and labels of different
counts, labels out of range) is one :class:`~latopt.errors.LatoptError` line naming the file. The header is
checked before the body is read, and no more of the body than the header declares is read (a gzip bomb is
not inflated past it).

The four files are looked for under their distributed names, with or without ``.gz``
(:data:`MNIST_FILES`), in the directory given, in its ``raw/`` and in torchvision's layout
(``<dir>/FashionMNIST/raw``, ``<dir>/MNIST/raw``).
"""

from __future__ import annotations

import gzip
import struct
import zlib
from io import BufferedReader
from pathlib import Path

import numpy as np

from latopt.errors import LatoptError

IDX_UBYTE = 0x08
MNIST_FILES = {"train_images": "train-images-idx3-ubyte", "train_labels": "train-labels-idx1-ubyte",
               "test_images": "t10k-images-idx3-ubyte", "test_labels": "t10k-labels-idx1-ubyte"}
MAX_IDX_BYTES = 1 << 31   # an MNIST-like file is tens of MB; a header promising more is malformed


IMAGE_SIZE = (28, 28)     # the images of MNIST and Fashion-MNIST: every other size is refused


def _damaged(path: Path, e: BaseException) -> LatoptError:
    return LatoptError(f"IDX file {path} is a damaged or truncated gzip file ({type(e).__name__}); "
                       "re-install or re-download it")


def _read_at_most(f: gzip.GzipFile | BufferedReader, n: int, path: Path) -> bytes:
    """Up to ``n`` bytes of ``f`` (fewer at its end): a gzipped file is inflated no further than that."""
    try:
        return f.read(n)
    except (OSError, EOFError, zlib.error) as e:   # gzip.BadGzipFile is an OSError
        if isinstance(f, gzip.GzipFile):
            raise _damaged(path, e) from None
        raise LatoptError(f"cannot read IDX file {path} ({getattr(e, 'strerror', None) or type(e).__name__})") from None


def read_idx(path: str | Path, ndim: int, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """The unsigned-byte array of IDX file ``path`` (gzipped or not), which must have ``ndim`` dimensions (and,
    given ``shape``, those trailing dimensions: ``IMAGE_SIZE`` for images). The header is read and checked first;
    then no more than the size it declares (and one byte, to tell an over-long body) is read, so a gzipped file
    that inflates past it is refused without being inflated in full."""
    path = Path(path)
    try:
        raw = path.open("rb")
    except OSError as e:
        raise LatoptError(f"cannot read IDX file {path} ({e.strerror or type(e).__name__})") from None
    with raw:
        gzipped = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        f: gzip.GzipFile | BufferedReader = gzip.GzipFile(fileobj=raw) if gzipped else raw
        head = _read_at_most(f, 4, path)
        if len(head) < 4 or head[0] != 0 or head[1] != 0:
            raise LatoptError(f"IDX file {path} has a bad magic number (first bytes {head.hex() or 'none'}; an IDX "
                              f"file starts 0000080{ndim}): it is not an IDX file")
        kind, rank = head[2], head[3]
        if kind != IDX_UBYTE or rank != ndim:
            raise LatoptError(f"IDX file {path} holds type 0x{kind:02x} with {rank} dimension(s); expected unsigned "
                              f"bytes (0x08) with {ndim} (magic 0000080{ndim})")
        packed = _read_at_most(f, 4 * rank, path)
        if len(packed) < 4 * rank:
            raise LatoptError(f"IDX file {path} is truncated inside its header ({4 + len(packed)} bytes)")
        dims = struct.unpack(f">{rank}I", packed)
        shown = "x".join(map(str, dims))
        if shape is not None and dims[rank - len(shape):] != shape:
            raise LatoptError(f"IDX file {path} holds images of {'x'.join(map(str, dims[1:]))} pixels ({shown}); "
                              f"MNIST and Fashion-MNIST images are {'x'.join(map(str, shape))}: give the data set's "
                              "own files")
        size = int(np.prod(dims, dtype=np.int64))
        if size > MAX_IDX_BYTES:
            raise LatoptError(f"IDX file {path} claims dimensions {shown}, {size} bytes: malformed")
        data = _read_at_most(f, size + 1, path)
    if len(data) != size:
        what = "truncated" if len(data) < size else "longer than its header says"
        has = len(data) if len(data) < size else "more"
        raise LatoptError(f"IDX file {path} is {what}: dimensions {shown} need {size} bytes of data, it has {has}")
    return np.frombuffer(data, dtype=np.uint8).reshape(dims)


def find_mnist_dir(root: Path, layout: str) -> Path | None:
    """The directory under ``root`` that holds the four files (``root``, ``root/raw``, ``root/<layout>/raw``),
    or None when none holds all four."""
    for d in (root, root / "raw", root / layout / "raw", root / layout):
        if all(_file(d, name) is not None for name in MNIST_FILES.values()):
            return d
    return None


def missing_files(root: Path, layout: str) -> list[str]:
    """The files of the four that the most complete of ``root``'s places (see :func:`find_mnist_dir`) lacks."""
    places = (root, root / "raw", root / layout / "raw", root / layout)
    return min(([n for n in MNIST_FILES.values() if _file(d, n) is None] for d in places), key=len)


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
        images = key.endswith("images")
        arrays[key] = read_idx(p, 3 if images else 1, IMAGE_SIZE if images else None)
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
    return (arrays["train_images"], arrays["train_labels"].astype(np.int64), arrays["test_images"],
            arrays["test_labels"].astype(np.int64))


__all__ = ["IMAGE_SIZE", "MNIST_FILES", "find_mnist_dir", "missing_files", "read_idx", "read_mnist_files"]
