"""``fashion-mnist`` and ``mnist``: the 28x28 grey IDX data sets (:mod:`latopt.data.idx`), held in memory as
uint8 and served in batches (:class:`latopt.data.arrays.ArrayImages`).

``fashion-mnist`` reads ``$LATOPT_DATA/fashion-mnist``, then Debian's ``/usr/share/datasets/fashion-mnist``
(``apt-get install dataset-fashion-mnist``); ``mnist`` reads ``$LATOPT_DATA/mnist`` (Debian ships no MNIST
package). Where ``$LATOPT_DATA/<name>`` exists it is the only place read (missing files there are one line, never
Debian's copy instead), and ``$LATOPT_DATA`` set to a file or to a path that does not exist is one line.
``fashion-mnist:PATH`` / ``mnist:PATH`` read PATH (the four files flat, or torchvision's ``FashionMNIST/raw`` /
``MNIST/raw`` layout under it). Nothing is downloaded.

``fashion-mnist-mini`` is bundled: a stratified subset the package ships (``latopt/data/fashion-mnist-mini.npz``,
made by ``tools/make_fashion_mini.py``; Zalando's MIT licence beside it): 13,000 of the training images, of which
:data:`MINI_VAL_IMAGES` are the validation split (by ``split_seed``) and the other 8,000 the training split, and
5,000 of the test images, the test split.

Splits: :data:`VAL_IMAGES` of the 60,000 training images (a permutation seeded by ``split_seed``) are the
validation split, the other 55,000 the training split; the 10,000 test images are the test split, untouched:
every choice of a recipe or a hyper-parameter is made on the validation split. Images are scaled to [0, 1]
and normalised with the training split's mean and standard deviation, resized (bilinear) to the resolution;
``augment``: random crop (padding resolution/8) and horizontal flip, on whole batches.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from latopt.data.arrays import ArrayImages
from latopt.data.idx import MNIST_FILES, find_mnist_dir, missing_files, read_mnist_files
from latopt.data.registry import register_task
from latopt.data.task import Task
from latopt.errors import LatoptError

VAL_IMAGES = 5000
MINI_VAL_IMAGES = 5000
MINI_FILE = Path(__file__).with_name("fashion-mnist-mini.npz")   # package data (tools/make_fashion_mini.py)
MINI_LICENSE = "fashion-mnist-mini.LICENSE"
DATA_ENV = "LATOPT_DATA"
FASHION_CLASSES = ["t-shirt/top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag",
                   "ankle boot"]
# name -> (torchvision's folder, Debian's directory, the apt package, class names)
SETS = {"fashion-mnist": ("FashionMNIST", Path("/usr/share/datasets/fashion-mnist"), "dataset-fashion-mnist",
                          FASHION_CLASSES),
        "mnist": ("MNIST", None, None, [str(i) for i in range(10)])}


def locate(name: str, root: Path | None) -> Path:
    """The directory holding data set ``name``'s four IDX files: under ``root`` when given, else the default
    places (see module doc); one line naming the places, the files and the package when it is not found. A place
    the user configured (``root``, or ``$LATOPT_DATA/<name>`` when it exists) is used or refused, never replaced
    by another copy; ``$LATOPT_DATA`` set to anything but a directory is refused."""
    layout, debian, package, _ = SETS[name]
    files = ", ".join(f"{f}[.gz]" for f in MNIST_FILES.values())
    if root is not None:
        return _configured(name, root, "", files)
    env = os.environ.get(DATA_ENV)
    base = Path(env).expanduser() if env else None
    if base is not None and not base.is_dir():
        raise LatoptError(f"{name} not found in ${DATA_ENV}/{name}: ${DATA_ENV} is {base}, which "
                          f"{'is not a directory' if base.exists() else 'does not exist'}; point it at the directory "
                          f"that holds {name}/ (or unset it), or give {name}:PATH", param="spec")
    if base is not None and (base / name).exists():
        return _configured(name, base / name, f" (${DATA_ENV}/{name}; latopt uses no other copy while it exists)",
                           files)
    if debian is not None and debian.is_dir() and (found := find_mnist_dir(debian, layout)) is not None:
        return found
    places = ([base / name] if base is not None else []) + ([debian] if debian is not None else [])
    where = " or ".join(str(p) for p in places) or f"${DATA_ENV}/{name} (${DATA_ENV} is not set)"
    install = f"install it with `apt-get install {package}`, " if package else ""
    raise LatoptError(f"{name} not found in {where}: {install}put {files} in ${DATA_ENV}/{name}, or give "
                      f"{name}:PATH; latopt never downloads it", param="spec")


def _configured(name: str, root: Path, how: str, files: str) -> Path:
    """The directory under ``root`` (a place the user gave: ``how`` says which) that holds the four files; one line
    when ``root`` is not a directory or holds none of them."""
    layout = SETS[name][0]
    if not root.is_dir():
        raise LatoptError(f"{name} directory {root}{how} {'is not a directory' if root.exists() else 'does not exist'} "
                          f"(it must hold {files}, or {layout}/raw/ with them)", param="spec")
    found = find_mnist_dir(root, layout)
    if found is None:
        lacks = ", ".join(f"{f}[.gz]" for f in missing_files(root, layout))
        raise LatoptError(f"{name} directory {root}{how} lacks {lacks} (of {files}, there, in raw/ or in "
                          f"{layout}/raw/); latopt never downloads them", param="spec")
    return found


def split_train_val(n: int, seed: int, n_val: int = VAL_IMAGES, *, most: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, validation indices) of ``n`` training images: ``n_val`` of them (at most ``most`` of a
    small set) by a permutation seeded by ``seed``; both sorted."""
    n_val = min(n_val, max(1, int(n * most)))
    perm = np.random.default_rng([seed, 28]).permutation(n)
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


def _build(name: str, spec: str, root: Path | None, resolution: int, seed: int, augment: bool) -> Task:
    d = locate(name, root)
    train_x, train_y, test_x, test_y = read_mnist_files(d)
    if len(train_y) < 2:
        raise LatoptError(f"{name} in {d} has {len(train_y)} training image(s); a validation split needs 2 or more")
    return _task(name, spec, (train_x, train_y, test_x, test_y), split_train_val(len(train_y), seed), resolution,
                 seed, augment)


def _task(name: str, spec: str, arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
          split: tuple[np.ndarray, np.ndarray], resolution: int, seed: int, augment: bool) -> Task:
    """The task of the IDX arrays (train images and labels, test images and labels) cut into ``split``."""
    train_x, train_y, test_x, test_y = arrays
    tr, va = split
    x = torch.from_numpy(train_x.copy())
    y = torch.from_numpy(train_y)
    pixels = x[torch.from_numpy(tr)].to(torch.float64) / 255.0
    mean, std = float(pixels.mean()), float(pixels.std()) or 1.0
    del pixels

    def images(xs: torch.Tensor, ys: torch.Tensor, aug: bool) -> ArrayImages:
        return ArrayImages(xs, ys, resolution, mean, std, augment=aug)

    t, v = torch.from_numpy(tr), torch.from_numpy(va)
    return Task(spec, 10, list(SETS[name][3]), resolution, images(x[t], y[t], augment), images(x[v], y[v], False),
                images(torch.from_numpy(test_x.copy()), torch.from_numpy(test_y), False),
                split=f"validation: {len(va)} of the {len(train_y)} training images (split_seed {seed}); "
                      f"test: the {len(test_y)} test images", norm=((mean,) * 3, (std,) * 3))


@register_task("fashion-mnist", directory=None)
def fashion_mnist(spec: str, root: Path | None, resolution: int, seed: int, augment: bool) -> Task:
    """``fashion-mnist[:PATH]``: Fashion-MNIST (see module doc)."""
    return _build("fashion-mnist", spec, root, resolution, seed, augment)


@register_task("fashion-mnist-mini")
def fashion_mnist_mini(spec: str, root: Path | None, resolution: int, seed: int, augment: bool) -> Task:
    """``fashion-mnist-mini``: the bundled Fashion-MNIST subset (see module doc)."""
    if not MINI_FILE.is_file():
        raise LatoptError(f"the bundled Fashion-MNIST subset {MINI_FILE} is missing: reinstall latopt (or make it "
                          "with tools/make_fashion_mini.py)", param="spec")
    with np.load(MINI_FILE) as z:
        arrays = (z["train_x"], z["train_y"], z["test_x"], z["test_y"])
    split = split_train_val(len(arrays[1]), seed, MINI_VAL_IMAGES, most=0.5)
    return _task("fashion-mnist", spec, arrays, split, resolution, seed, augment)


@register_task("mnist", directory=None)
def mnist(spec: str, root: Path | None, resolution: int, seed: int, augment: bool) -> Task:
    """``mnist[:PATH]``: MNIST (see module doc)."""
    return _build("mnist", spec, root, resolution, seed, augment)
