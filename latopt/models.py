"""Models by name (timm / torchvision, used as they are) and safe checkpoints.

Names (``SUPPORTED``)::

    mobilenetv2_035 mobilenetv2_050 mobilenetv2_075 mobilenetv2_100 mobilenetv2_140      timm
    efficientnet_lite0 .. efficientnet_lite4                                               timm
    tf_efficientnet_lite0 .. tf_efficientnet_lite4       timm, TF "SAME" padding (folds supported)
    torchvision/mobilenet_v2[?width=W]                   torchvision, width multiplier W (default 1.0)

A ``timm/`` prefix is accepted (``timm/mobilenetv2_100``). The torchvision width is part of the
name, e.g. ``torchvision/mobilenet_v2?width=0.75``; the canonical spelling drops ``?width=1.0``.

Checkpoints (``latopt.checkpoint/2``) are ``torch.save`` of a dict of JSON-able values and tensors
only — ``{"schema", "arch", "meta", "state_dict", "sha256"}`` — read back with
``torch.load(weights_only=True)``. The module is rebuilt from ``arch`` (``build_model`` →
``install_alpha`` → ``fold_blocks``) and the state dict loaded strictly; no pickled modules::

    arch = {"model": name, "num_classes": int in [1, MAX_CLASSES],
            "alpha": None | {"granularity": "block" | "activation", "blocks": [index, ...]},
            "fold":  None | {"mode": "exact" | "paper", "input_size": [H, W] | None (paper mode only),
                             "plan": {"<index>": "full" | "expand_dw" | "dw_project"}}}

``fold`` None means *unfolded*; a model that went through ``fold_blocks`` records its fold even when
the plan folded nothing (``"plan": {}``), so a checkpoint always says what it is. Every field is typed
and bounded on save and load (:class:`Arch`; a hand-edited field of the wrong type is a one-line
LatoptError naming it).

**Integrity.** ``sha256`` is :func:`checkpoint_digest` of arch, meta and every tensor (name, dtype,
shape, raw bytes), written by ``save_checkpoint`` and recomputed by ``load_checkpoint``: a mismatch
(a corrupted or edited file) is a one-line :class:`~latopt.errors.VerificationError` (exit 3). It
detects corruption, not forgery (anyone can recompute it). Checkpoints of the older schema
``latopt.checkpoint/1`` have no digest: they are loaded with a one-line warning on stderr (their
tensors are not verified); saving them again adds one. A digest that matches proves nothing about the
values, so both ends also check them (:func:`check_weights`): a network with a NaN or Inf weight or a
negative batch-norm variance is neither written nor loaded.

Public API: ``SUPPORTED``, ``canonical_name``, ``build_model``, ``make_arch``, ``build_from_arch``,
``save_checkpoint``, ``load_checkpoint``, ``check_weights``, ``content_digest``, ``checkpoint_digest``, ``recorded_test_acc``, ``count_flops`` (the
one FLOP counter), ``model_cost``.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import zipfile
from pathlib import Path
from typing import Annotated, Any

import timm
import torch
from pydantic import AfterValidator, Field, model_validator
from torch import nn
from torch.utils.flop_counter import FlopCounterMode
from torchvision.models import MobileNet_V2_Weights, mobilenet_v2

from latopt.artifacts import TORCH_LOAD_ERRORS, atomic_path
from latopt.config import Resolution, StrictModel, validated
from latopt.constants import (
    SUPPORTED_MODELS,
    TIMM_MODELS,
    TORCHVISION_MODEL,
    FoldMode,
    FoldVariant,
    Granularity,
)
from latopt.errors import LatoptError, VerificationError, first_line
from latopt.fold import alpha_spec, fold_blocks, fold_spec, install_alpha
from latopt.log import get_logger

CHECKPOINT_SCHEMA = "latopt.checkpoint/2"
LEGACY_SCHEMAS = ("latopt.checkpoint/1",)  # no digest: loaded with a warning line (see the module doc)
MAX_CLASSES = 100_000
_LOG = get_logger("models")
SUPPORTED: list[str] = list(SUPPORTED_MODELS)


def _unknown(name: str) -> LatoptError:
    return LatoptError(
        f"unknown model {name!r}; supported: {', '.join(SUPPORTED)} "
        f"(torchvision width: {TORCHVISION_MODEL}?width=0.75)")


def parse_name(name: str) -> tuple[str, str, float]:
    """(family, base name, width) for a model name; LatoptError listing the supported ones."""
    if not isinstance(name, str) or not name.strip():
        raise _unknown(str(name))
    n = name.strip()
    if n.startswith("timm/"):
        n = n[len("timm/"):]
    if n in TIMM_MODELS:
        return "timm", n, 1.0
    base, _, query = n.partition("?")
    if base != TORCHVISION_MODEL:
        raise _unknown(name)
    width = 1.0
    if query:
        key, _, val = query.partition("=")
        if key != "width" or not val:
            raise LatoptError(f"bad model option {query!r} in {name!r}: the only option is ?width=W, e.g. ?width=0.75")
        try:
            width = float(val)
        except ValueError:
            raise LatoptError(f"bad width {val!r} in {name!r}: give a number such as 0.75") from None
        if not 0.1 <= width <= 4.0:
            raise LatoptError(f"width {width} in {name!r} is out of range; use 0.1 .. 4.0")
    return "torchvision", base, width


def canonical_name(name: str) -> str:
    """The canonical spelling of a model name (what checkpoints and LUTs record)."""
    family, base, width = parse_name(name)
    if family == "timm" or width == 1.0:
        return base
    return f"{base}?width={width:g}"


def _pretrained_error(name: str, e: BaseException, cache: str) -> LatoptError:
    """One line from the library's own error: timm's RuntimeError ("No pretrained weights exist for ..."), or an
    OSError (huggingface_hub: not in the cache, offline mode on, hub unreachable; torchvision: download failed)."""
    msg = first_line(e, 120).split(". ")[0]
    why = f"; this needs internet access once, or the weights in {cache}" if isinstance(e, OSError) else ""
    return LatoptError(f"could not get pretrained weights for {name} ({type(e).__name__}: {msg}){why} — drop "
                       "--pretrained to start from random weights")


def _build_timm(base: str, num_classes: int, pretrained: bool) -> nn.Module:
    """timm's model; with ``pretrained`` its Hugging Face weights: cached, or downloaded unless huggingface_hub's
    own offline switch is on (``HF_HUB_OFFLINE=1`` in the environment, read when huggingface_hub is imported)."""
    if not pretrained:
        return timm.create_model(base, pretrained=False, num_classes=num_classes)
    try:
        return timm.create_model(base, pretrained=True, num_classes=num_classes)
    except (OSError, RuntimeError) as e:  # OSError: huggingface_hub's errors; RuntimeError: timm's own
        raise _pretrained_error(base, e, "the Hugging Face cache (with HF_HUB_OFFLINE=1 timm looks only there, "
                                         "without network retries)") from None


def _build_torchvision(width: float, num_classes: int, pretrained: bool) -> nn.Module:

    if not pretrained:
        return mobilenet_v2(weights=None, width_mult=width, num_classes=num_classes)
    if width != 1.0:
        raise LatoptError(f"torchvision has pretrained MobileNetV2 weights only for width 1.0, not {width:g}; "
                          "drop --pretrained or use width 1.0")
    try:
        model = mobilenet_v2(weights=MobileNet_V2_Weights.IMAGENET1K_V2)
    except (OSError, RuntimeError, ValueError) as e:
        raise _pretrained_error(TORCHVISION_MODEL, e, "the torch hub cache") from None
    if num_classes != 1000:
        last = model.classifier[-1]
        model.classifier[-1] = nn.Linear(last.in_features, num_classes)
    return model


def build_model(name: str, num_classes: int = 1000, *, pretrained: bool = False) -> nn.Module:
    """Build a supported model (see module docstring), returned in eval mode.

    ``pretrained`` loads the library's own ImageNet weights (timm: Hugging Face hub; torchvision:
    download.pytorch.org); a new classifier is created when ``num_classes`` != 1000. Offline and not
    cached: one-line LatoptError."""
    family, base, width = parse_name(name)
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise LatoptError(f"num_classes must be a positive integer, not {num_classes!r}")
    if family == "timm":
        model = _build_timm(base, num_classes, pretrained)
    else:
        model = _build_torchvision(width, num_classes, pretrained)
    return model.eval()


@torch.no_grad()
def count_flops(module: nn.Module, input_shape: tuple[int, ...]) -> int:
    """FLOPs of one forward of ``module`` on a zero input of ``input_shape``: torch's FlopCounterMode, 2 per
    multiply-add. The one FLOP counter of latopt (inspect, train and fold reports)."""
    p = next(module.parameters(), None)
    x = torch.zeros(input_shape, dtype=p.dtype if p is not None else torch.float32,
                    device=p.device if p is not None else None)
    was = module.training
    module.eval()
    try:
        with FlopCounterMode(display=False) as fc:
            module(x)
    finally:
        module.train(was)
    return int(fc.get_total_flops())


def model_cost(model: nn.Module, resolution: int) -> dict[str, int]:
    """FLOPs (2 per multiply-add) of one 3xRxR image, and the parameter count."""
    return {"flops": count_flops(model, (1, 3, resolution, resolution)),
            "params": int(sum(q.numel() for q in model.parameters()))}


# ------------------------------------------------------------------------------------------ checkpoints
def make_arch(model: nn.Module, name: str, num_classes: int) -> dict[str, Any]:
    """The JSON-able architecture description of ``model`` (σ_α and folds read from the model)."""
    return {"model": canonical_name(name), "num_classes": int(num_classes),
            "alpha": alpha_spec(model), "fold": fold_spec(model)}


def _distinct(blocks: list[int]) -> list[int]:
    if len(set(blocks)) != len(blocks):
        raise ValueError(f"= {blocks} repeats a block index")
    return blocks


def _block_key(key: str) -> str:
    if not (key.isascii() and key.isdigit()) or key != str(int(key)):
        raise ValueError(f"has the key {key!r}; its keys are block indices written as strings ('3')")
    return key


class AlphaArch(StrictModel):
    """Where σ_α is installed (``latopt.fold.alpha_spec``)."""

    granularity: Granularity
    blocks: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1), AfterValidator(_distinct)]


class FoldArch(StrictModel):
    """What was folded (``latopt.fold.fold_spec``)."""

    mode: FoldMode
    input_size: Annotated[list[Resolution], Field(min_length=2, max_length=2)] | None  # [H, W]; required key
    plan: dict[Annotated[str, AfterValidator(_block_key)], FoldVariant]

    @model_validator(mode="after")
    def _size_in_exact_mode(self) -> FoldArch:
        if self.mode == "exact" and self.input_size is None:
            raise ValueError("needs input_size [H, W] in exact mode (its bias maps are for one input size)")
        return self


class Arch(StrictModel):
    """A checkpoint's architecture (see the module docstring); ``model`` is checked by :func:`parse_name`."""

    model: str
    num_classes: Annotated[int, Field(ge=1, le=MAX_CLASSES)]
    alpha: AlphaArch | None = None
    fold: FoldArch | None = None


def _check_arch(arch: Any, where: str = "") -> dict[str, Any]:
    """``arch`` (a plain dict, returned as it is) when it is a valid :class:`Arch`; a one-line LatoptError
    naming the field otherwise. What depends on the model (block indices in range, a variant that applies
    to that block) is checked when the model is built."""
    validated(Arch, arch, prefix=f"{where}: " if where else "", key="architecture field")
    parse_name(arch["model"])
    return arch


def build_from_arch(arch: dict[str, Any]) -> nn.Module:
    """Rebuild the module structure described by ``arch`` (weights are random until a state_dict is
    loaded). The global RNG state is left untouched."""
    _check_arch(arch)
    with torch.random.fork_rng(devices=[]):
        model = build_model(arch["model"], arch["num_classes"])
        if arch.get("alpha"):
            install_alpha(model, arch["alpha"]["blocks"], arch["alpha"]["granularity"])
        fold = arch.get("fold")
        if fold is not None:  # folded, possibly with an empty plan (still recorded as folded)
            size = fold["input_size"]
            model = fold_blocks(model, {int(k): v for k, v in fold["plan"].items()}, fold["mode"],
                                None if size is None else (size[0], size[1]))
    return model.eval()


def _canonical_json(obj: Any) -> bytes:
    # through JSON once so that int keys / tuples read back from torch.load hash like what was saved
    return json.dumps(json.loads(json.dumps(obj)), sort_keys=True, separators=(",", ":")).encode()


def checkpoint_digest(arch: dict[str, Any], meta: dict[str, Any], state: dict[str, torch.Tensor]) -> str:
    """SHA-256 (hex) of a checkpoint's content: the canonical JSON of ``arch`` and ``meta``, then every
    tensor of ``state`` in name order as (name, dtype, shape, byte count) and its raw bytes."""
    h = hashlib.sha256(b"latopt.checkpoint.digest/1\n")
    h.update(_canonical_json(arch) + b"\n" + _canonical_json(meta) + b"\n")
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous().reshape(-1)
        raw = t.view(torch.uint8) if t.numel() else t.new_empty(0, dtype=torch.uint8)
        h.update(json.dumps([name, str(t.dtype), list(state[name].shape), int(raw.numel())]).encode() + b"\n")
        h.update(memoryview(raw.numpy()))
    return h.hexdigest()


def check_weights(model: nn.Module, what: str) -> None:
    """One :class:`LatoptError` line when a floating-point parameter or buffer of ``model`` is not finite or a
    batch-norm running variance is negative: such a network gives NaN or Inf (for some input, if not every
    one) and is never trained from, written or shipped. ``what`` names it (``checkpoint PATH``)."""
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise LatoptError(f"{what} holds non-finite values (NaN or Inf) in {name!r}; it cannot be used: "
                              "re-create it (a training run that diverged, or an edited file)")
    for name, m in model.named_modules():
        var = getattr(m, "running_var", None)
        if isinstance(m, nn.modules.batchnorm._NormBase) and var is not None and bool((var < 0).any()):
            raise LatoptError(f"{what} holds a negative batch-norm running variance in {name!r}; it cannot be "
                              "used: re-create it")


def save_checkpoint(path: str | Path, model: nn.Module, arch: dict[str, Any],
                    meta: dict[str, Any] | None = None) -> Path:
    """Write a ``latopt.checkpoint/2`` file atomically, with the SHA-256 of its content. ``arch`` must
    describe ``model`` (its σ_α and folds are checked against the model); ``meta`` is any JSON-able dict
    (metrics, config, ...). A model with non-finite weights is refused (:func:`check_weights`)."""
    path = Path(path)
    _check_arch(arch, f"checkpoint {path}")
    check_weights(model, f"the model to be saved as {path}")
    actual = make_arch(model, arch["model"], arch["num_classes"])
    for key in ("alpha", "fold"):
        if arch.get(key) != actual[key]:
            raise LatoptError(f"arch[{key!r}] = {arch.get(key)} does not describe the model ({actual[key]}); "
                              "build it with latopt.models.make_arch(model, name, num_classes)")
    meta = dict(meta or {})
    try:
        json.dumps(meta)
    except (TypeError, ValueError) as e:
        raise LatoptError(f"checkpoint meta is not JSON-able ({e})") from None
    state = _cpu_state(model)
    payload = {"schema": CHECKPOINT_SCHEMA, "arch": arch, "meta": meta, "state_dict": state,
               "sha256": checkpoint_digest(arch, meta, state)}
    if path.is_dir():
        raise LatoptError(f"checkpoint path {path} is a directory; give a file name")
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)
    return path


def _cpu_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """CPU tensors in the default memory format, whatever device / channels_last the model trained with."""
    return {k: v.detach().to("cpu", memory_format=torch.contiguous_format).clone() for k, v in model.state_dict().items()}


def content_digest(model: nn.Module, arch: dict[str, Any], meta: dict[str, Any]) -> str:
    """The SHA-256 that :func:`save_checkpoint` records for ``model`` with ``arch`` and ``meta`` (and that a
    loaded checkpoint reproduces): binds one checkpoint to another by content, not by path."""
    return checkpoint_digest(arch, meta, _cpu_state(model))


def _verify_digest(path: Path, data: dict[str, Any], arch: dict[str, Any], meta: dict[str, Any],
                   state: dict[str, torch.Tensor]) -> None:
    if data["schema"] in LEGACY_SCHEMAS:
        _LOG.warning(f"checkpoint {path} has no SHA-256 digest ({data['schema']}, written by an older latopt): its "
                     "tensors are not verified; save it again with this latopt to add one")
        return
    recorded = data.get("sha256")
    if not isinstance(recorded, str):
        raise VerificationError(f"checkpoint {path} has no SHA-256 digest although its schema "
                                f"{CHECKPOINT_SCHEMA} requires one: the file was altered; re-create it")
    actual = checkpoint_digest(arch, meta, state)
    if actual != recorded:
        raise VerificationError(f"checkpoint {path} is corrupted or was edited: the SHA-256 of its content "
                                f"{actual[:16]}… differs from the recorded {recorded[:16]}…; re-create it "
                                "(latopt train / latopt fold)")


def load_checkpoint(path: str | Path, *, expect_model: str | None = None
                    ) -> tuple[nn.Module, dict[str, Any], dict[str, Any]]:
    """(model in eval mode, arch, meta) from a latopt checkpoint; one-line LatoptError when the file
    is missing, unreadable, not a latopt checkpoint, malformed, or of another architecture than
    ``expect_model``; VerificationError when its content does not match its recorded SHA-256."""
    path = Path(path)
    if not path.is_file():
        raise LatoptError(f"checkpoint {path} does not exist" + (" (it is a directory)" if path.is_dir() else ""))
    if not zipfile.is_zipfile(path):
        raise LatoptError(f"{path} is not a latopt checkpoint (not a torch.save file); is the path right?")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise LatoptError(f"{path} holds pickled objects that weights_only loading refuses; it is not a latopt "
                          "checkpoint (those hold only tensors and plain data)") from None
    except TORCH_LOAD_ERRORS as e:
        first = first_line(e, 120)
        raise LatoptError(f"{path} is not a readable latopt checkpoint ({first})") from None
    if not isinstance(data, dict) or data.get("schema") not in (CHECKPOINT_SCHEMA, *LEGACY_SCHEMAS):
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise LatoptError(f"{path} is not a latopt checkpoint (schema {got!r}, expected {CHECKPOINT_SCHEMA!r})")
    arch = _check_arch(data.get("arch"), f"checkpoint {path}")
    meta = data.get("meta") or {}
    if not isinstance(meta, dict):
        raise LatoptError(f"checkpoint {path}: meta must be a dict, got {type(meta).__name__}")
    state = data.get("state_dict")
    if not isinstance(state, dict):
        raise LatoptError(f"checkpoint {path} has no state_dict")
    bad = next((k for k, v in state.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)), None)
    if bad is not None:
        raise LatoptError(f"checkpoint {path}: state_dict entry {str(bad)[:60]!r} is not a named tensor")
    _verify_digest(path, data, arch, meta, state)
    if expect_model is not None and canonical_name(expect_model) != canonical_name(arch["model"]):
        raise LatoptError(f"checkpoint {path} is for model {arch['model']!r}, not {canonical_name(expect_model)!r}")
    model = build_from_arch(arch)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        detail = " ".join(str(e).split())[:200]
        raise LatoptError(f"checkpoint {path} does not match its architecture {arch['model']!r}: {detail}") from None
    check_weights(model, f"checkpoint {path}")
    return model.eval(), arch, meta


def recorded_test_acc(meta: dict[str, Any]) -> tuple[float, str] | None:
    """(test accuracy, where) that a checkpoint records for the weights it holds, or None.

    ``latopt fold`` writes ``folded.pt`` with ``meta["acc"]`` = the accuracies of every stage; the
    saved weights are the fine-tuned ones, ``meta["acc"]["finetuned"]``. ``latopt train`` writes
    ``base.pt`` with ``meta["test_acc"]``. Both are measured on the test split that ``meta`` names
    (task, split_seed, max_samples) at ``meta["resolution"]``. ``prefold.pt`` records none."""
    acc = meta.get("acc")
    value, where = ((acc.get("finetuned"), "meta.acc.finetuned") if isinstance(acc, dict)
                    else (meta.get("test_acc"), "meta.test_acc"))
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
        raise LatoptError(f"the checkpoint's recorded test accuracy ({where}) is {value!r}, not a number in [0, 1]")
    return float(value), where
