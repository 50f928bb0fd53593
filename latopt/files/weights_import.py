"""Your own weights: a state_dict or safetensors file of a zoo architecture turned into a latopt checkpoint
(``latopt import``), and a network moved to a task with another number of classes (transfer learning).

:func:`import_weights` reads a PyTorch file (``torch.load(weights_only=True)``: no pickled code) or a safetensors
file, takes its state_dict out of the usual containers (``state_dict``, ``model``, ``model_state_dict``,
``state_dict_ema``, ``model_ema``, ``net``; a ``module.`` or ``_orig_mod.`` prefix on every key is dropped) and
matches it to the named model (:func:`latopt.nets.models.build_model`):

- **by name** when the file's keys are the model's (timm's names for a timm model, torchvision's for
  ``torchvision/...``);
- **by position** otherwise (not for safetensors, which does not keep the order), when both hold as many
  tensors and every tensor's shape matches the one at its place: re-implementations keep the order of their layers and rename them (lukemelas-style ``_conv_stem``,
  ``_blocks.0._depthwise_conv`` for timm's ``conv_stem``, ``blocks.0.0.conv_dw``). A file without the
  batch-norm counters (``num_batches_tracked``, absent from files of older PyTorch) matches without them.

The classifier's size is the file's (the head is the one tensor pair whose first dimension may differ from the
model's default). Anything that does not fit is one :class:`~latopt.errors.LatoptError` line naming the key and
both shapes. The checkpoint records where the weights came from (file name and SHA-256) and, when given, the
input normalisation they expect (``data.normalize: null``, a run's default, serves the data so); it is written
atomically; it is refused before anything is written when a weight is NaN or Inf.

:func:`transfer` gives a network a new classifier for another class count (what timm's ``num_classes`` does at
creation): every tensor but the classifier's is kept; the classifier starts as latopt starts any new one.

Public API: ``import_weights``, ``ImportResult``, ``read_state_dict``, ``transfer``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from latopt.errors import LatoptError, first_line

CONTAINER_KEYS = ("state_dict", "model_state_dict", "model", "state_dict_ema", "model_ema", "net")
PREFIXES = ("module.", "_orig_mod.")
COUNTER = "num_batches_tracked"
MAX_FILE_BYTES = 4 << 30


@dataclass(frozen=True)
class ImportResult:
    """What :func:`import_weights` did: the checkpoint written, the classifier's size, how the keys were matched
    (``"by name"`` or ``"by position"``) and how many tensors the file gave."""

    path: Path
    num_classes: int
    matched: str
    tensors: int


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a weights file, by key, in the file's order (see the module docstring); a one-line
    LatoptError when it is not one."""
    from latopt.files.torchfile import TORCH_LOAD_ERRORS

    path = Path(path)
    if not path.is_file():
        raise LatoptError(f"weights file {path} {'is not a regular file' if path.exists() else 'does not exist'}")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise LatoptError(f"weights file {path} is {path.stat().st_size / 2**30:.1f} GiB, more than a mobile "
                          f"network's weights can be ({MAX_FILE_BYTES / 2**30:.0f} GiB); give the network's own file")
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            data: Any = load_file(str(path), device="cpu")
        except (SafetensorError, OSError, ValueError) as e:
            raise LatoptError(f"weights file {path} is not a safetensors file ({first_line(e, 100)})") from None
    else:
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
        except TORCH_LOAD_ERRORS as e:
            raise LatoptError(f"weights file {path} is not a PyTorch state_dict that loads without pickled code "
                              f"({type(e).__name__}: {first_line(e, 100)}); save it with "
                              "torch.save(model.state_dict(), FILE) or as .safetensors") from None
    if isinstance(data, dict) and str(data.get("schema", "")).startswith("latopt.checkpoint/"):
        raise LatoptError(f"{path} is already a latopt checkpoint; give it where a checkpoint is read "
                          "(--checkpoint, --base) without importing it")
    for _ in range(3):   # a training script's container: {"state_dict": {...}, "epoch": ...}, possibly nested
        if not isinstance(data, dict) or all(isinstance(v, torch.Tensor) for v in data.values()):
            break
        inner = next((data[k] for k in CONTAINER_KEYS if isinstance(data.get(k), dict)), None)
        if inner is None:
            raise LatoptError(f"weights file {path} holds a {type(data).__name__} whose values are not all tensors "
                              f"and none of its keys ({', '.join(map(str, list(data)[:6]))}) is a state_dict "
                              f"({', '.join(CONTAINER_KEYS)}); save the model's state_dict")
        data = inner
    if not isinstance(data, dict) or not data or not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise LatoptError(f"weights file {path} holds no state_dict (a mapping of names to tensors): it holds "
                          f"{type(data).__name__}{' (empty)' if isinstance(data, dict) and not data else ''}")
    keys = [str(k) for k in data]
    for prefix in PREFIXES:
        if all(k.startswith(prefix) for k in keys):
            keys = [k[len(prefix):] for k in keys]
    return dict(zip(keys, data.values(), strict=True))


def _head_keys(model: nn.Module) -> set[str]:
    """The state-dict keys of the classifier: timm's ``get_classifier()``, else the last ``nn.Linear``."""
    get = getattr(model, "get_classifier", None)
    head = get() if callable(get) else None
    names = {id(m): n for n, m in model.named_modules()}
    if not isinstance(head, nn.Linear):
        head = next((m for m in reversed(list(model.modules())) if isinstance(m, nn.Linear)), None)
    if head is None or id(head) not in names:
        return set()
    return {f"{names[id(head)]}.{p}" for p, _ in head.named_parameters(recurse=False)}


def _fits(a: torch.Tensor, b: torch.Tensor, head: bool) -> bool:
    """``a`` (the file's) fits ``b`` (the model's): the same shape, but for the classifier's class count."""
    return a.shape == b.shape or (head and a.dim() == b.dim() and a.shape[1:] == b.shape[1:])


def _shape(t: torch.Tensor) -> str:
    return "×".join(map(str, t.shape)) or "scalar"


def match_keys(src: dict[str, torch.Tensor], dst: dict[str, torch.Tensor], head: set[str], *,
               what: str, model: str, ordered: bool = True) -> tuple[dict[str, torch.Tensor], str]:
    """The file's tensors under the model's key names, and how they were matched (module docstring).
    ``ordered``: the file keeps the order of its tensors (a safetensors file does not: names only)."""
    plain = {k: v for k, v in dst.items() if not k.endswith(COUNTER)}   # an older PyTorch's file: no counters
    for want in (dst, plain):
        if set(src) == set(want):
            bad = next((k for k in want if not _fits(src[k], want[k], k in head)), None)
            if bad is not None:
                raise LatoptError(f"{what}: {bad} is {_shape(src[bad])} but {model} needs {_shape(want[bad])}: "
                                  f"these are not {model}'s weights (another width or variant?)")
            return {k: src[k] for k in want}, "by name"
    for want in (dst, plain):
        if ordered and len(src) == len(want):
            for i, ((ks, vs), (kd, vd)) in enumerate(zip(src.items(), want.items(), strict=True)):
                if not _fits(vs, vd, kd in head):
                    raise LatoptError(f"{what}: the names are not {model}'s and matching by position fails at "
                                      f"tensor {i + 1} of {len(src)}: {ks} is {_shape(vs)} where {model} has {kd} "
                                      f"{_shape(vd)}; are these {model}'s weights?")
            return {kd: vs for (_, vs), kd in zip(src.items(), want, strict=True)}, "by position"
    want = plain if not any(k.endswith(COUNTER) for k in src) else dst
    missing = [k for k in want if k not in src]
    extra = [k for k in src if k not in want]
    how = ("so neither names nor positions match" if ordered else
           "and a safetensors file does not keep its tensors' order, so only names can match")
    raise LatoptError(f"{what} holds {len(src)} tensors and {model} {len(want)}; the names differ (the model's "
                      f"{', '.join(missing[:2]) or '–'} are not in the file, the file's {', '.join(extra[:2]) or '–'} "
                      f"are not in the model), {how}: are these {model}'s weights?")


def import_weights(path: str | Path, model_name: str, out: str | Path, *, normalize: Any = None,
                   overwrite: bool = False) -> ImportResult:
    """Turn the weights file ``path`` of ``model_name`` into the latopt checkpoint ``out`` (module docstring);
    ``normalize``: the input normalisation the weights were trained with (a name of
    :data:`~latopt.constants.NORMALIZE_NAMES` or ``{mean, std}``), recorded for the runs that start from them."""
    from latopt.files.artifacts import file_sha256
    from latopt.files.checkpoint import CheckpointMeta, check_weights, make_arch, save_checkpoint
    from latopt.files.records import validated
    from latopt.nets.models import build_model

    path, out = Path(path), Path(out)
    if out.exists() and not overwrite:
        raise LatoptError(f"{out} exists; give another output file or remove it", param="out")
    if out.resolve() == path.resolve():
        raise LatoptError(f"the output {out} is the weights file itself; give another output file", param="out")
    src = read_state_dict(path)
    with torch.random.fork_rng(devices=[]):
        probe = build_model(model_name)
        mapped, how = match_keys(src, probe.state_dict(), _head_keys(probe), what=f"weights file {path}",
                                 model=model_name, ordered=path.suffix != ".safetensors")
        heads = sorted(_head_keys(probe))
        num_classes = int(mapped[heads[0]].shape[0]) if heads else 1000
        model = build_model(model_name, num_classes) if num_classes != 1000 else probe
    try:   # the counters a file without them lacks start at the model's (0)
        model.load_state_dict({**model.state_dict(), **mapped}, strict=True)
    except RuntimeError as e:   # a shape torch refuses where the probe's head took another one
        raise LatoptError(f"weights file {path} does not load into {model_name}: {first_line(e, 160)}") from None
    check_weights(model, f"weights file {path}")
    meta = validated(CheckpointMeta, {"imported_from": path.name, "imported_sha256": file_sha256(path),
                                      "imported_match": how, "normalize": normalize}, key="import option")
    save_checkpoint(out, model.eval(), make_arch(model, model_name, num_classes), meta)
    return ImportResult(out, num_classes, how, len(src))


@torch.no_grad()
def transfer(model: nn.Module, model_name: str, num_classes: int) -> nn.Module:
    """``model`` (an unfolded ``model_name``) with a new classifier for ``num_classes``: a fresh
    ``build_model(model_name, num_classes)`` holding every tensor of ``model`` but the classifier's. A
    LatoptError when more than the classifier differs."""
    from latopt.nets.models import build_model

    new = build_model(model_name, num_classes)
    head = _head_keys(new)
    old, fresh = model.state_dict(), new.state_dict()
    differ = [k for k in fresh if k not in old or old[k].shape != fresh[k].shape]
    if set(differ) - head or set(old) != set(fresh):
        raise LatoptError(f"cannot give {model_name} a new classifier for {num_classes} classes: besides the "
                          f"classifier ({', '.join(sorted(head)) or 'none found'}) "
                          f"{', '.join(sorted(set(differ) - head)[:3]) or 'its keys'} differ")
    new.load_state_dict({k: (fresh[k] if k in head else v) for k, v in old.items()}, strict=True)
    return new.train(model.training)
