"""Safe checkpoints: a model's architecture, metadata and tensors, with the SHA-256 of all three.

Checkpoints (``latopt.checkpoint/2``) are ``torch.save`` of a dict of JSON-able values and tensors
only — ``{"schema", "arch", "meta", "state_dict", "sha256"}`` — read back with
``torch.load(weights_only=True)``. The module is rebuilt from ``arch`` (:func:`latopt.nets.models.build_model`
→ ``install_alpha`` → ``fold_blocks``) and the state dict loaded strictly; no pickled modules::

    arch = {"model": name, "num_classes": int in [1, MAX_CLASSES],
            "alpha": None | {"granularity": "block" | "activation", "blocks": [index, ...]},
            "fold":  None | {"mode": "exact" | "paper", "input_size": [H, W] | None (paper mode only),
                             "plan": {"<index>": "full" | "expand_dw" | "dw_project"}}}

``fold`` None means *unfolded*; a model that went through ``fold_blocks`` records its fold even when
the plan folded nothing (``"plan": {}``), so a checkpoint always says what it is. ``meta`` is a
:class:`CheckpointMeta`: the data, seed, accuracies and (for a fold) the plan and its pre-fold checkpoint.
Both are records, read in one place each (:func:`read_arch`, :func:`read_meta`) and handed to callers as
typed objects: every field is typed and bounded on save and load (a hand-edited field of the wrong type is
a one-line LatoptError naming it).

**Integrity.** ``sha256`` is :func:`checkpoint_digest` of arch, meta and every tensor (name, dtype,
shape, raw bytes), written by ``save_checkpoint`` and recomputed by ``load_checkpoint``: a mismatch
(a corrupted or edited file) is a one-line :class:`~latopt.errors.VerificationError` (exit 3). It
detects corruption, not forgery (anyone can recompute it). A file of any other schema is refused in one
line. A digest that matches proves nothing about the values, so both ends also check them
(:func:`check_weights`): a network with a NaN or Inf weight or a negative batch-norm variance is neither
written nor loaded.

Public API: ``CHECKPOINT_SCHEMA``, the records ``Arch`` (``AlphaArch``, ``FoldArch``) and ``CheckpointMeta``,
``FoldHow``, ``make_arch``, ``read_arch``, ``read_meta``, ``build_from_arch``, ``save_checkpoint``,
``load_checkpoint``, ``check_weights``, ``content_digest``, ``checkpoint_digest``, ``recorded_test_acc``.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import torch
from pydantic import AfterValidator, Field, model_validator
from pydantic_core import PydanticSerializationError
from torch import nn

from latopt.constants import MAX_CLASSES, FoldMode, FoldVariant, Granularity
from latopt.errors import LatoptError, VerificationError, first_line
from latopt.files.records import (
    Accuracies,
    Accuracy,
    BlockKey,
    Normalize,
    OpenRecord,
    Resolution,
    SplitSeed,
    StrictModel,
    validated,
)
from latopt.files.torchfile import TORCH_LOAD_ERRORS, write_torch_atomic
from latopt.nets.models import build_model, canonical_name, parse_name
from latopt.rewrite import alpha_spec, fold_blocks, fold_spec, install_alpha

CHECKPOINT_SCHEMA = "latopt.checkpoint/2"
IMPORT_HINT = "a weights file of your own becomes one with latopt import FILE --model NAME"


def make_arch(model: nn.Module, name: str, num_classes: int, *, fold: FoldHow | None = None) -> Arch:
    """The architecture record of ``model`` (σ_α and folds read from the model). ``fold``: how the
    ``fold_blocks`` call folded it (mode, input size, the merged spans) when the model was folded, so an empty
    plan is recorded as folded (:func:`latopt.rewrite.fold_spec`)."""
    spec = fold_spec(model) if fold is None else fold_spec(model, mode=fold.mode, input_size=fold.input_size)
    if spec is not None and fold is not None and fold.spans:
        spec["spans"] = [[int(x) for x in s] for s in fold.spans]  # merged at export (latopt.rewrite.merge)
    return read_arch({"model": canonical_name(name), "num_classes": int(num_classes),
                      "alpha": alpha_spec(model), "fold": spec})


def _distinct(blocks: list[int]) -> list[int]:
    if len(set(blocks)) != len(blocks):
        raise ValueError(f"= {blocks} repeats a block index")
    return blocks


class AlphaArch(StrictModel):
    """Where σ_α is installed (``latopt.rewrite.alpha_spec``)."""

    granularity: Granularity
    blocks: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1), AfterValidator(_distinct)]


class FoldArch(StrictModel):
    """What was folded (``latopt.rewrite.fold_spec``)."""

    mode: FoldMode
    input_size: Annotated[list[Resolution], Field(min_length=2, max_length=2)] | None  # [H, W]; required key
    plan: dict[BlockKey, FoldVariant]
    # [start, end, kernel]: runs of folded blocks export merges into one convolution each (latopt.rewrite.merge)
    spans: list[Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=3, max_length=3)]] = []

    @model_validator(mode="after")
    def _size_in_exact_mode(self) -> FoldArch:
        if self.mode == "exact" and self.input_size is None:
            raise ValueError("needs input_size [H, W] in exact mode (its bias maps are for one input size)")
        if self.spans and self.mode != "exact":
            raise ValueError("has spans, which are merged in exact mode only")
        return self


class Arch(StrictModel):
    """A checkpoint's architecture (see the module docstring); ``model`` is checked by :func:`parse_name`."""

    model: str
    num_classes: Annotated[int, Field(ge=1, le=MAX_CLASSES)]
    alpha: AlphaArch | None = None
    fold: FoldArch | None = None


@dataclass(frozen=True)
class FoldHow:
    """How a network was folded, for :func:`make_arch`: ``fold_blocks``'s mode and input size ([H, W], None in
    paper mode) and the spans ([start, end, kernel]) export merges."""

    mode: str
    input_size: Sequence[int] | None = None
    spans: Sequence[Sequence[int]] = ()


class CheckpointMeta(OpenRecord):
    """What a checkpoint records beside its architecture: the data it was trained on (``latopt.data.data_meta``),
    the seed, its accuracies (``latopt train``: ``val_acc``, ``test_acc``; ``latopt fold``: ``acc`` and ``val`` by
    phase) and, for a fold, its plan, whether it was fine-tuned and the pre-fold checkpoint it came from (path and
    content digest). Every field is optional and typed; other JSON-able keys are kept as they are."""

    task: str | None = None
    split_seed: SplitSeed | None = None
    resolution: Resolution | None = None
    train_samples: Annotated[int, Field(ge=1)] | None = None
    max_samples: Annotated[int, Field(ge=1)] | None = None
    normalize: Normalize | None = None   # the input normalisation its weights expect (latopt.data.normalize)
    seed: int | None = None
    val_acc: Accuracy | None = None
    test_acc: Accuracy | None = None
    acc: Accuracies | None = None
    val: Accuracies | None = None
    plan: dict[BlockKey, FoldVariant] | None = None
    prefold_checkpoint: str | None = None
    prefold_sha256: str | None = None
    finetuned: bool | None = None


def _plain_arch(arch: Arch) -> dict[str, Any]:
    return arch.model_dump(mode="json", exclude_unset=True)


def read_arch(data: Any, where: str = "") -> Arch:
    """The :class:`Arch` record of plain data (a checkpoint's ``arch``); a one-line LatoptError naming the field
    otherwise (``where``: what the line names). What depends on the model (block indices in range, a variant that
    applies to that block) is checked when the model is built."""
    arch = validated(Arch, data, prefix=f"{where}: " if where else "", key="architecture field")
    parse_name(arch.model)
    return arch


def read_meta(data: Any, where: str = "") -> CheckpointMeta:
    """The :class:`CheckpointMeta` record of a checkpoint's plain ``meta``; a one-line LatoptError naming the field
    otherwise."""
    if not isinstance(data, Mapping):
        raise LatoptError(f"{where}: meta must be a mapping, got {type(data).__name__}")
    return validated(CheckpointMeta, data, prefix=f"{where}: " if where else "", key="meta field")


def build_from_arch(arch: Arch) -> nn.Module:
    """Rebuild the module structure described by ``arch`` (weights are random until a state_dict is
    loaded). The global RNG state is left untouched."""
    with torch.random.fork_rng(devices=[]):
        model = build_model(arch.model, arch.num_classes)
        if arch.alpha is not None:
            install_alpha(model, arch.alpha.blocks, arch.alpha.granularity)
        fold = arch.fold
        if fold is not None:  # folded, possibly with an empty plan (still recorded as folded)
            size = fold.input_size
            model = fold_blocks(model, {int(k): v for k, v in fold.plan.items()}, fold.mode,
                                None if size is None else (size[0], size[1]))
    return model.eval()


def _canonical_json(obj: Any) -> bytes:
    # through JSON once so that int keys / tuples read back from torch.load hash like what was saved
    return json.dumps(json.loads(json.dumps(obj)), sort_keys=True, separators=(",", ":")).encode()


def checkpoint_digest(arch: Mapping[str, Any], meta: Mapping[str, Any], state: dict[str, torch.Tensor]) -> str:
    """SHA-256 (hex) of a checkpoint's content: the canonical JSON of ``arch`` and ``meta``, then every
    tensor of ``state`` in name order as (name, dtype, shape, byte count) and its raw bytes. ``arch`` and
    ``meta`` are the plain data the file stores."""
    h = hashlib.sha256(b"latopt.checkpoint.digest/1\n")
    h.update(_canonical_json(arch) + b"\n" + _canonical_json(meta) + b"\n")
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous().reshape(-1)
        raw = t.view(torch.uint8) if t.numel() else t.new_empty(0, dtype=torch.uint8)
        h.update(json.dumps([name, str(t.dtype), list(state[name].shape), int(raw.numel())]).encode() + b"\n")
        # numpy's stubs give ndarray the buffer protocol (__buffer__) only for Python >= 3.12
        h.update(memoryview(raw.numpy()))  # type: ignore[arg-type]
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


def save_checkpoint(path: str | Path, model: nn.Module, arch: Arch, meta: CheckpointMeta | None = None) -> Path:
    """Write a ``latopt.checkpoint/2`` file atomically, with the SHA-256 of its content. ``arch`` must
    describe ``model`` (its σ_α and folds are checked against the model: build it with :func:`make_arch`);
    ``meta``'s extra keys must be JSON-able. A model with non-finite weights is refused (:func:`check_weights`)."""
    path = Path(path)
    check_weights(model, f"the model to be saved as {path}")
    fold = arch.fold
    how = None if fold is None else FoldHow(fold.mode, fold.input_size, fold.spans)
    actual = make_arch(model, arch.model, arch.num_classes, fold=how)
    for key in ("alpha", "fold"):
        if getattr(arch, key) != getattr(actual, key):
            raise LatoptError(f"arch[{key!r}] = {getattr(arch, key)} does not describe the model "
                              f"({getattr(actual, key)}); build it with latopt.files.checkpoint.make_arch(model, name, "
                              "num_classes)")
    try:
        plain_meta = (meta or CheckpointMeta()).plain()
        json.dumps(plain_meta)
    except (TypeError, ValueError, PydanticSerializationError) as e:
        raise LatoptError(f"checkpoint meta is not JSON-able ({first_line(e, 120)})") from None
    state = _cpu_state(model)
    plain_arch = _plain_arch(arch)
    payload = {"schema": CHECKPOINT_SCHEMA, "arch": plain_arch, "meta": plain_meta, "state_dict": state,
               "sha256": checkpoint_digest(plain_arch, plain_meta, state)}
    if path.is_dir():
        raise LatoptError(f"checkpoint path {path} is a directory; give a file name")
    write_torch_atomic(path, payload)
    return path


def _cpu_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """CPU tensors in the default memory format, whatever device / channels_last the model trained with."""
    return {k: v.detach().to("cpu", memory_format=torch.contiguous_format).clone() for k, v in model.state_dict().items()}


def content_digest(model: nn.Module, arch: Arch, meta: CheckpointMeta) -> str:
    """The SHA-256 that :func:`save_checkpoint` records for ``model`` with ``arch`` and ``meta`` (and that a
    loaded checkpoint reproduces): binds one checkpoint to another by content, not by path."""
    return checkpoint_digest(_plain_arch(arch), meta.plain(), _cpu_state(model))


def _verify_digest(path: Path, recorded: Any, arch: Mapping[str, Any], meta: Mapping[str, Any],
                   state: dict[str, torch.Tensor]) -> None:
    if not isinstance(recorded, str):
        raise VerificationError(f"checkpoint {path} has no SHA-256 digest although its schema "
                                f"{CHECKPOINT_SCHEMA} requires one: the file was altered; re-create it")
    actual = checkpoint_digest(arch, meta, state)
    if actual != recorded:
        raise VerificationError(f"checkpoint {path} is corrupted or was edited: the SHA-256 of its content "
                                f"{actual[:16]}… differs from the recorded {recorded[:16]}…; re-create it "
                                "(latopt train / latopt fold)")


def load_checkpoint(path: str | Path, *, expect_model: str | None = None
                    ) -> tuple[nn.Module, Arch, CheckpointMeta]:
    """(model in eval mode, its :class:`Arch`, its :class:`CheckpointMeta`) from a latopt checkpoint; one-line LatoptError when the file
    is missing, unreadable, not a latopt checkpoint, malformed, or of another architecture than
    ``expect_model``; VerificationError when its content does not match its recorded SHA-256."""
    path = Path(path)
    if not path.is_file():
        raise LatoptError(f"checkpoint {path} does not exist" + (" (it is a directory)" if path.is_dir() else ""))
    if not zipfile.is_zipfile(path):
        raise LatoptError(f"{path} is not a latopt checkpoint (not a zip-format torch.save file); is the path right? "
                          f"{IMPORT_HINT}")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise LatoptError(f"{path} holds pickled objects that weights_only loading refuses; it is not a latopt "
                          "checkpoint (those hold only tensors and plain data)") from None
    except TORCH_LOAD_ERRORS as e:
        first = first_line(e, 120)
        raise LatoptError(f"{path} is not a readable latopt checkpoint ({first})") from None
    schema = data.get("schema") if isinstance(data, dict) else None
    if isinstance(schema, str) and schema.startswith("latopt.checkpoint/") and schema != CHECKPOINT_SCHEMA:
        raise LatoptError(f"checkpoint {path} has schema {schema!r}; this latopt reads only {CHECKPOINT_SCHEMA!r}: "
                          "re-create it (latopt train / latopt fold)")
    if schema != CHECKPOINT_SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise LatoptError(f"{path} is not a latopt checkpoint (schema {got!r}, expected {CHECKPOINT_SCHEMA!r}); "
                          f"{IMPORT_HINT}")
    raw_arch, raw_meta = data.get("arch"), data.get("meta") or {}
    arch = read_arch(raw_arch, f"checkpoint {path}")
    meta = read_meta(raw_meta, f"checkpoint {path}")
    state = data.get("state_dict")
    if not isinstance(state, dict):
        raise LatoptError(f"checkpoint {path} has no state_dict")
    bad = next((k for k, v in state.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)), None)
    if bad is not None:
        raise LatoptError(f"checkpoint {path}: state_dict entry {str(bad)[:60]!r} is not a named tensor")
    _verify_digest(path, data.get("sha256"), raw_arch, raw_meta, state)
    if expect_model is not None and canonical_name(expect_model) != canonical_name(arch.model):
        raise LatoptError(f"checkpoint {path} is for model {arch.model!r}, not {canonical_name(expect_model)!r}")
    model = build_from_arch(arch)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        detail = " ".join(str(e).split())[:200]
        raise LatoptError(f"checkpoint {path} does not match its architecture {arch.model!r}: {detail}") from None
    check_weights(model, f"checkpoint {path}")
    return model.eval(), arch, meta


def recorded_test_acc(meta: CheckpointMeta) -> tuple[float, str] | None:
    """(test accuracy, where) that a checkpoint records for the weights it holds, or None.

    ``latopt fold`` writes ``folded.pt`` with ``meta.acc`` = the accuracies of every stage; the saved weights
    are the fine-tuned ones, ``meta.acc.finetuned``. ``latopt train`` writes ``base.pt`` with ``meta.test_acc``.
    Both are measured on the test split that ``meta`` names (task, split_seed, max_samples) at
    ``meta.resolution``. ``prefold.pt`` records none."""
    value, where = ((meta.acc.finetuned, "meta.acc.finetuned") if meta.acc is not None
                    else (meta.test_acc, "meta.test_acc"))
    return None if value is None else (value, where)
