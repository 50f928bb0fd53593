"""Fully connected ReLU networks: build, train on scikit-learn's bundled digits or on Fashion-MNIST / MNIST,
save and load checkpoints.

Checkpoint file (``torch.save``, read back with ``weights_only=True``)::

    {"schema": "latopt.mlp/1", "layers": [n_in, n_1, ..., n_out], "activation": "relu",
     "state_dict": <nn.Sequential(Linear, ReLU, ..., Linear) state dict>, "meta": {...}}

``meta`` records how the network was made (data set, split and split seed, l1, accuracy, ...), so that
``latopt compress`` can re-create the test split and report accuracy before/after (:func:`split_of`).
Training follows the seed paper's recipe scaled to digits: SGD (lr 0.01, classical momentum 0.9, no weight
decay), batch 64, Kaiming init with zero biases, an l1 penalty on the *first* layer's weights only, lr x0.1
every ``round(epochs * 50 / 120)`` epochs (50 of 120); it runs through :func:`latopt.training.loop.fit`.

The digits split is the CNN tasks' (:func:`latopt.data.split_indices`, stratified 60/20/20): the MLP has
no use for a validation split (a fixed recipe, no model selection), so it trains on train + val (80 %)
and tests on the same 20 % of the digits as every CNN run with that split seed.

``fashion-mnist[:PATH]`` / ``mnist[:PATH]`` (the IDX files, found by :func:`latopt.data.mnist.locate`): 784
inputs (28x28 pixels /255, flattened) in [0, 1]; it trains on the training split of the CNN tasks (the
training images outside the validation split of :func:`latopt.data.mnist.split_train_val`, 55,000 of 60,000;
the validation split is only measured, ``val_acc``) and tests on the 10,000 test images. ``meta`` records the
data set, :data:`IDX_SPLIT`, the split seed, the directory the files were read from and a digest of the test
split, so that ``latopt compress`` re-reads the same test images (or says why it cannot). Default epochs:
:data:`DEFAULT_EPOCHS` (the seed's 120 on these sets).
"""

from __future__ import annotations

import hashlib
import math
import pickle
import re
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import torch
from pydantic import Field
from sklearn.datasets import load_digits
from torch import nn

from latopt.config import TrainConfig
from latopt.data import split_indices
from latopt.errors import LatoptError, first_line
from latopt.exact.network import from_module
from latopt.files.records import Accuracy, OpenRecord, SplitSeed, validated
from latopt.files.torchfile import TORCH_LOAD_ERRORS, write_torch_atomic
from latopt.training.loop import (
    Report,
    Step,
    fit,
    make_optimizer,
    make_scheduler,
    seed_everything,
    tensor_loader,
)

SCHEMA = "latopt.mlp/1"
IDX_DATASETS = ("fashion-mnist", "mnist")   # read from IDX files: NAME or NAME:PATH
DATASETS = ("digits", *IDX_DATASETS)
DATA_FORMS = "digits, fashion-mnist[:PATH], mnist[:PATH]"
SPLIT = "digits-60/20/20"  # meta.split: train = train + val, test = test of latopt.data.split_indices
IDX_SPLIT = "idx-train-without-val/test"   # meta.split of fashion-mnist/mnist: train = the training images
# outside latopt.data.mnist.split_train_val's validation split, test = the test images
DEFAULT_EPOCHS = {"digits": 600, "fashion-mnist": 120, "mnist": 120}   # digits: ~45x fewer images than MNIST


class MlpMeta(OpenRecord):
    """How an MLP checkpoint was made (the ``meta`` of a ``latopt.mlp/1`` file): the data set, split and split
    seed, the recipe, the accuracies, the input box; for IDX sets the directory and test digest
    (:func:`split_of`); for a compressed or shallow network the file it came from. Every field is optional and
    typed; other JSON-able keys are kept as they are."""

    data: str | None = None
    split: str | None = None
    split_seed: SplitSeed | None = None
    seed: int | None = None
    l1: Annotated[float, Field(ge=0)] | None = None
    epochs: Annotated[int, Field(ge=1)] | None = None
    lr: float | None = None
    momentum: float | None = None
    batch: Annotated[int, Field(ge=1)] | None = None
    box: Annotated[list[float], Field(min_length=2, max_length=2)] | None = None
    train_acc: Accuracy | None = None
    val_acc: Accuracy | None = None
    test_acc: Accuracy | None = None
    train_seconds: float | None = None
    split_detail: str | None = None
    train_images: int | None = None
    test_images: int | None = None
    data_dir: str | None = None
    test_digest: str | None = None
    compressed_from: str | None = None
    shallow_from: str | None = None
    epsilon: float | None = None


@dataclass(frozen=True)
class Split:
    """A train/test split as float32 arrays; the input box of the data set is ``box`` (lo, hi)."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    box: tuple[float, float]
    name: str
    x_val: np.ndarray | None = None   # fashion-mnist / mnist: the validation split (never trained on)
    y_val: np.ndarray | None = None
    description: str = ""
    data_dir: str | None = None      # IDX sets: the directory the files were read from (recorded in meta)
    test_digest: str | None = None   # IDX sets: a digest of the test split (recorded in meta)


def build_mlp(layers: list[int] | tuple[int, ...]) -> nn.Sequential:
    """``nn.Sequential(Linear, ReLU, ..., Linear)`` for widths ``[n_in, n_1, ..., n_out]``."""

    layers = [int(n) for n in layers]
    if len(layers) < 2 or any(n < 1 for n in layers):
        raise LatoptError(f"layer sizes {layers} are invalid: need [n_in, hidden..., n_out], all >= 1")
    mods: list[nn.Module] = []
    for k in range(len(layers) - 1):
        mods.append(nn.Linear(layers[k], layers[k + 1]))
        if k < len(layers) - 2:
            mods.append(nn.ReLU())
    return nn.Sequential(*mods)


def parse_data(data: str, others: str = "") -> tuple[str, Path | None]:
    """``digits`` | ``fashion-mnist[:PATH]`` | ``mnist[:PATH]`` -> (name, PATH or None); anything else is one line
    (``others``: more choices the caller takes, for that line)."""
    name, sep, path = str(data).partition(":")
    if name not in DATASETS or (sep and name not in IDX_DATASETS):
        raise LatoptError(f"unknown data set {data!r}; choose one of {DATA_FORMS}{others}", param="data")
    if sep and not path.strip():
        raise LatoptError(f"data set {data!r} names no directory: give {name}:PATH, or {name} for the default "
                          "places", param="data")
    return name, (Path(path).expanduser() if sep else None)


def load_split(data: str, seed: int, root: Path | None = None) -> Split:
    """The train/test split of ``data`` (see the module doc; ``root``: where the IDX files are, for
    ``fashion-mnist`` / ``mnist`` without a PATH in ``data``).

    digits (8x8 images, 64 inputs scaled to [0, 1] by /16): train = the train and val indices of
    :func:`latopt.data.split_indices` (``seed``), test = its test indices."""
    name, path = parse_data(data)
    if name in IDX_DATASETS:
        return _load_idx(name, path if path is not None else root, seed)
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    train, val, test = split_indices(y, seed)
    fit_idx = np.sort(np.concatenate([train, val]))
    return Split(x[fit_idx], y[fit_idx], x[test], y[test], (0.0, 1.0), name)


def _pixels(images: np.ndarray) -> np.ndarray:
    """uint8 images N x H x W -> float32 N x (H*W) in [0, 1] (/255)."""
    pixels: np.ndarray = images.reshape(len(images), -1).astype(np.float32) / np.float32(255.0)
    return pixels


def _digest(images: np.ndarray, labels: np.ndarray) -> str:
    h = hashlib.sha256(np.ascontiguousarray(images).tobytes())
    h.update(np.ascontiguousarray(labels, dtype=np.int64).tobytes())
    return h.hexdigest()[:16]


def _load_idx(name: str, root: Path | None, seed: int) -> Split:
    from latopt.data.idx import read_mnist_files
    from latopt.data.mnist import locate, split_train_val

    d = locate(name, root)
    xtr, ytr, xte, yte = read_mnist_files(d)
    if len(ytr) < 2:
        raise LatoptError(f"{name} in {d} has {len(ytr)} training image(s); a validation split needs 2 or more")
    tr, va = split_train_val(len(ytr), seed)
    desc = (f"train: the {len(tr)} of the {len(ytr)} training images outside the validation split ({len(va)} "
            f"images, latopt.data.mnist.split_train_val, split_seed {seed}); test: the {len(yte)} test images")
    return Split(_pixels(xtr[tr]), ytr[tr], _pixels(xte), yte, (0.0, 1.0), name,
                 x_val=_pixels(xtr[va]), y_val=ytr[va], description=desc, data_dir=str(d.resolve()),
                 test_digest=_digest(xte, yte))


def split_of(meta: MlpMeta) -> Split | None:
    """The split a checkpoint was trained on, from its ``meta``; None for random networks and for
    checkpoints made with another split (digits before ``SPLIT``: 75/25), whose test digits would overlap.

    fashion-mnist / mnist: the files are read from the directory ``meta`` records, else from the default
    places (``$LATOPT_DATA/<name>``, ...); a LatoptError when they are not found or their test split is not
    the one the checkpoint recorded (``test_digest``)."""
    data, seed = meta.data, meta.split_seed or 0
    if data == "digits":
        if meta.split != SPLIT:
            return None
        return load_split("digits", seed)
    if data not in IDX_DATASETS or meta.split != IDX_SPLIT:
        return None
    recorded = meta.data_dir
    root = Path(recorded) if recorded is not None and Path(recorded).is_dir() else None
    try:
        sp = load_split(data, seed, root=root)
    except LatoptError as e:
        gone = f"the directory it was trained from ({recorded}) is gone and " if recorded and root is None else ""
        raise LatoptError(f"cannot re-read the {data} test split: {gone}{e}") from None
    want = meta.test_digest
    if want and sp.test_digest != want:
        raise LatoptError(f"the {data} files in {sp.data_dir} are not the ones the network was trained "
                          f"on (test split digest {sp.test_digest}, recorded {want}); put the original "
                          f"files in $LATOPT_DATA/{data}")
    return sp


def accuracy(module: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    return float((predict(module, x) == y).mean())


def predict(module: nn.Module, x: np.ndarray) -> np.ndarray:
    module.eval()
    p = next(module.parameters())
    with torch.no_grad():
        out = module(torch.as_tensor(x, dtype=p.dtype))
    labels: np.ndarray = out.argmax(1).numpy()
    return labels


def train_mlp(
    hidden: list[int],
    *,
    data: str = "digits",
    l1: float = 0.003,
    epochs: int | None = None,
    lr: float = 0.01,
    momentum: float = 0.9,
    batch: int = 64,
    seed: int = 0,
    progress: bool = False,
) -> tuple[Any, MlpMeta]:
    """Train a Linear/ReLU classifier on ``data`` (``digits``, ``fashion-mnist[:PATH]``, ``mnist[:PATH]``) for
    ``epochs`` (None: :data:`DEFAULT_EPOCHS` of the data set); returns ``(model, meta)`` with accuracies in
    ``meta``."""
    name, _ = parse_data(data)
    if epochs is None:
        epochs = DEFAULT_EPOCHS[name]
    if l1 < 0 or not math.isfinite(l1):
        raise LatoptError(f"l1 {l1} must be a finite number >= 0", param="l1")
    if not (math.isfinite(lr) and lr > 0):
        raise LatoptError(f"lr {lr} must be a finite number > 0, e.g. 0.01", param="lr")
    if not (math.isfinite(momentum) and 0 <= momentum < 1):
        raise LatoptError(f"momentum {momentum} must be in [0, 1)", param="momentum")
    if epochs < 1 or batch < 1:
        raise LatoptError(f"invalid training settings: epochs={epochs}, batch={batch} (both must be >= 1)")
    if not hidden or any(h < 1 for h in hidden):
        raise LatoptError(f"hidden {hidden} must be a list of positive widths, e.g. [100, 100]", param="hidden")
    split = load_split(data, seed)
    seed_everything(seed)
    n_in = split.x_train.shape[1]
    n_out = 10 if name in IDX_DATASETS else int(split.y_train.max()) + 1   # IDX: labels 0..9
    layers = [n_in, *hidden, n_out]
    model = build_mlp(layers)
    for m in model:
        if isinstance(m, nn.Linear):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)
    recipe = TrainConfig(epochs=epochs, optimizer="sgd", lr=lr, momentum=momentum, weight_decay=0.0,
                         schedule="step", step_size=max(1, round(epochs * 50 / 120)), gamma=0.1)
    loader = tensor_loader(torch.from_numpy(split.x_train), torch.from_numpy(split.y_train), batch, seed)
    opt = make_optimizer(model, recipe, lr, nesterov=False)
    first = model[0]
    assert isinstance(first, nn.Linear)  # build_mlp's first layer

    def step_loss(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        logits = m(x)
        loss = nn.functional.cross_entropy(logits, y)
        return (loss + l1 * first.weight.abs().sum() if l1 > 0 else loss), logits, {}

    t0 = time.perf_counter()
    fit(model, loader, epochs, Step(step_loss, opt, make_scheduler(opt, recipe, epochs, len(loader))),
        report=Report(progress, "train-mlp", every=max(1, epochs // 10)))
    model.eval()
    meta = MlpMeta(data=name, split=SPLIT if name == "digits" else IDX_SPLIT, split_seed=seed, seed=seed, l1=float(l1),
                   epochs=epochs, lr=float(lr), momentum=float(momentum), batch=batch, box=[float(v) for v in split.box],
                   train_acc=accuracy(model, split.x_train, split.y_train),
                   test_acc=accuracy(model, split.x_test, split.y_test),
                   train_seconds=round(time.perf_counter() - t0, 2))
    if name in IDX_DATASETS:
        assert split.x_val is not None and split.y_val is not None  # an IDX set's split has a validation part
        meta = MlpMeta(**meta.plain(), split_detail=split.description, val_acc=accuracy(model, split.x_val, split.y_val),
                       train_images=len(split.y_train), test_images=len(split.y_test),
                       data_dir=split.data_dir, test_digest=split.test_digest)
    return model, meta


def save_mlp(path: str | Path, model: nn.Module, meta: MlpMeta | None = None) -> Path:
    """Write a ``latopt.mlp/1`` checkpoint atomically (temp file + rename)."""



    net = from_module(model)  # validates: Linear/ReLU only
    sd = {k: v.detach().cpu().clone() for k, v in net.to_module(next(model.parameters()).dtype).state_dict().items()}
    obj = {"schema": SCHEMA, "layers": list(net.sizes), "activation": "relu", "state_dict": sd, "meta": (meta or MlpMeta()).plain()}

    path = Path(path)
    write_torch_atomic(path, obj)
    return path


def load_mlp(path: str | Path) -> tuple[Any, MlpMeta]:
    """Load a ``latopt.mlp/1`` checkpoint -> ``(nn.Sequential, its MlpMeta)``; anything else is a LatoptError."""


    path = Path(path)
    if not path.is_file():
        raise LatoptError(f"checkpoint {path} does not exist (make one with `latopt train-mlp`)")
    try:
        with warnings.catch_warnings():   # torch warns about the pickle protocol etc. of files it then refuses
            warnings.simplefilter("ignore")
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        text = str(e)
        ref = re.search(r"GLOBAL ([\w.]+)", text)
        if ref:
            raise LatoptError(f"checkpoint {path} holds a pickled reference to {ref.group(1)}, which weights_only "
                              "loading refuses (a pickle can run code); it is not a latopt.mlp/1 file, which holds "
                              "only tensors and plain data") from None
        detail = next((line.strip() for line in text.splitlines() if "Unsupported" in line), first_line(e))
        raise LatoptError(f"checkpoint {path} cannot be read as a torch checkpoint (UnpicklingError: {detail[:100]}); "
                          "is it a latopt.mlp/1 file?") from None
    except TORCH_LOAD_ERRORS as e:  # torch's unpickler on arbitrary bytes
        first = first_line(e, 1000)
        why = type(e).__name__ + (f": {first}" if first and len(first) <= 100 else "")
        raise LatoptError(f"checkpoint {path} cannot be read as a torch checkpoint ({why}); is it a latopt.mlp/1 file?") from None
    if not isinstance(obj, dict) or obj.get("schema") != SCHEMA:
        got = obj.get("schema") if isinstance(obj, dict) else type(obj).__name__
        raise LatoptError(
            f"checkpoint {path} is not a fully connected ReLU network (schema {got!r}, expected {SCHEMA!r}); "
            "make one with `latopt train-mlp`"
        )
    act = obj.get("activation", "relu")
    if act != "relu":
        raise LatoptError(f"checkpoint {path} uses activation {act!r}; only ReLU networks are supported")
    layers = obj.get("layers")
    sd = obj.get("state_dict")
    if not isinstance(layers, list) or not all(isinstance(n, int) and n >= 1 for n in layers) or len(layers) < 2:
        raise LatoptError(f"checkpoint {path} has invalid 'layers' {layers!r}")
    if not isinstance(sd, dict):
        raise LatoptError(f"checkpoint {path} has no state_dict")
    for k, v in sd.items():
        if k.endswith("weight") and getattr(v, "ndim", 2) != 2:
            raise LatoptError(
                f"checkpoint {path}: {k} has shape {tuple(v.shape)} (a convolution?); only Linear layers are supported"
            )
    model = build_mlp(layers)
    dtype = next(iter(sd.values())).dtype if sd else torch.float32
    model = model.to(dtype)
    try:
        model.load_state_dict(sd, strict=True)
    except RuntimeError as e:
        first = first_line(e, 1000)
        raise LatoptError(f"checkpoint {path} does not match its layers {layers}: {first[:200]}") from None
    model.eval()
    meta = obj.get("meta") or {}
    if not isinstance(meta, dict):
        raise LatoptError(f"checkpoint {path}: meta must be a mapping, got {type(meta).__name__}")
    return model, validated(MlpMeta, meta, prefix=f"checkpoint {path}: ", key="meta field")
