"""``imagefolder:PATH``: ``PATH/train/<class>/*``, ``PATH/val/<class>/*`` and optionally ``PATH/test/<class>/*``
through torchvision's ``ImageFolder``, with the checks that keep a bad folder to one line: missing or
mismatched splits, link loops, FIFOs and broken links (refused in ImageFolder's one scan), an unreadable
first image (verified up front) and an unreadable later one (:class:`UnreadableImage`, when it is read)."""

from __future__ import annotations

import functools
import os
import stat
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError
from torchvision.datasets import ImageFolder
from torchvision.datasets.folder import IMG_EXTENSIONS, has_file_allowed_extension

from latopt.data.registry import register_task
from latopt.data.task import Task
from latopt.data.transforms import image_transforms
from latopt.errors import LatoptError, first_line

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


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
        raise UnreadableImage(f"image folder {split_dir}: {path} is not a readable image ({first_line(e)}); "
                              "remove or replace it") from None


@register_task("imagefolder", directory=True)
def imagefolder(spec: str, root: Path | None, resolution: int, seed: int, augment: bool) -> Task:
    """The image folder ``root``: resize to 1.14x and centre crop, random resized crop + flip for training with
    ``augment``, ImageNet mean/std; ``val/`` doubles as the test split when there is no ``test/``."""
    assert root is not None  # a directory task: its spec names the folder
    if not root.is_dir():
        raise LatoptError(f"image folder {root} does not exist or is not a directory (expected {root}/train and "
                          f"{root}/val)", param="spec")
    missing = [s for s in ("train", "val") if not (root / s).is_dir()]
    if missing:
        raise LatoptError(f"image folder {root} has no {' or '.join(s + '/' for s in missing)} sub-folder; "
                          "expected PATH/train/<class>/*.jpg and PATH/val/<class>/*.jpg", param="spec")
    train_tf, eval_tf = image_transforms(resolution, IMAGENET_MEAN, IMAGENET_STD, augment, crop=True)
    splits: dict[str, Any] = {}  # torchvision's ImageFolder
    for s in ("train", "val", "test"):
        if s == "test" and not (root / s).is_dir():
            splits[s] = splits["val"]
            continue
        try:
            splits[s] = ImageFolder(str(root / s), transform=train_tf if s == "train" else eval_tf,
                                    loader=functools.partial(_load_image, str(root / s)),
                                    is_valid_file=functools.partial(_image_file, str(root / s)))
        except (FileNotFoundError, OSError) as e:
            raise LatoptError(f"image folder {root / s} is empty or malformed: {first_line(e)}") from None
        _check_no_loop(root / s, splits[s].samples)
        if splits[s].classes != splits["train"].classes:
            raise LatoptError(f"image folder {root / s} has classes {splits[s].classes} but {root / 'train'} has "
                              f"{splits['train'].classes}; every split needs the same class folders")
        _check_image(root / s, splits[s].samples[0][0])   # a wrong folder fails now; a later bad file when read
    classes = list(splits["train"].classes)
    if len(classes) < 2:
        raise LatoptError(f"image folder {root / 'train'} has {len(classes)} class folder(s); at least 2 are needed")
    return Task(spec, len(classes), classes, resolution, splits["train"], splits["val"], splits["test"],
                norm=(IMAGENET_MEAN, IMAGENET_STD))


def _check_image(where: Path, path: str) -> None:
    try:
        with Image.open(path) as im:
            im.verify()
    except (UnidentifiedImageError, OSError, SyntaxError, Image.DecompressionBombError) as e:
        raise LatoptError(f"image folder {where}: {path} is not a readable image ({first_line(e)})") from None


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


