"""Models by name (timm / torchvision, used as they are) and safe checkpoints.

Names (``SUPPORTED``)::

    mobilenetv2_035 mobilenetv2_050 mobilenetv2_075 mobilenetv2_100 mobilenetv2_140      timm
    efficientnet_lite0 .. efficientnet_lite4                                               timm
    tf_efficientnet_lite0 .. tf_efficientnet_lite4       timm, TF "SAME" padding (folds supported)
    torchvision/mobilenet_v2[?width=W]                   torchvision, width multiplier W (default 1.0)

A ``timm/`` prefix is accepted (``timm/mobilenetv2_100``). The torchvision width is part of the
name, e.g. ``torchvision/mobilenet_v2?width=0.75``; the canonical spelling drops ``?width=1.0``.

Checkpoints (``latopt.checkpoint/1``) are ``torch.save`` of a dict of JSON-able values and tensors
only — ``{"schema", "arch", "meta", "state_dict"}`` — read back with ``torch.load(weights_only=True)``.
The module is rebuilt from ``arch`` (``build_model`` → ``install_alpha`` → ``fold_blocks``) and the
state dict loaded strictly; no pickled modules::

    arch = {"model": name, "num_classes": int,
            "alpha": None | {"granularity": "block" | "activation", "blocks": [index, ...]},
            "fold":  None | {"mode": "exact" | "paper", "input_size": [H, W] | None,
                             "plan": {"<index>": "full" | "expand_dw" | "dw_project"}}}

Public API: ``SUPPORTED``, ``canonical_name``, ``build_model``, ``make_arch``, ``build_from_arch``,
``save_checkpoint``, ``load_checkpoint``.
"""

from __future__ import annotations

import contextlib
import json
import pickle
import socket
import zipfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from latopt.artifacts import atomic_path
from latopt.errors import LatoptError, first_line

CHECKPOINT_SCHEMA = "latopt.checkpoint/1"
TIMM_NAMES = (
    [f"mobilenetv2_{w}" for w in ("035", "050", "075", "100", "140")]
    + [f"efficientnet_lite{i}" for i in range(5)]
    + [f"tf_efficientnet_lite{i}" for i in range(5)]
)
TORCHVISION_NAME = "torchvision/mobilenet_v2"
SUPPORTED: list[str] = [*TIMM_NAMES, TORCHVISION_NAME]


def _unknown(name: str) -> LatoptError:
    return LatoptError(
        f"unknown model {name!r}; supported: {', '.join(SUPPORTED)} "
        f"(torchvision width: {TORCHVISION_NAME}?width=0.75)")


def parse_name(name: str) -> tuple[str, str, float]:
    """(family, base name, width) for a model name; LatoptError listing the supported ones."""
    if not isinstance(name, str) or not name.strip():
        raise _unknown(str(name))
    n = name.strip()
    if n.startswith("timm/"):
        n = n[len("timm/"):]
    if n in TIMM_NAMES:
        return "timm", n, 1.0
    base, _, query = n.partition("?")
    if base != TORCHVISION_NAME:
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


def _online(host: str, timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def _offline_error(name: str, e: BaseException) -> LatoptError:
    msg = first_line(e, 120).split(". ")[0]
    return LatoptError(
        f"could not get pretrained weights for {name} ({type(e).__name__}: {msg}); this needs internet access "
        "once (or the weights in the timm/torch cache) — drop --pretrained to start from random weights")


def _build_timm(base: str, num_classes: int, pretrained: bool) -> nn.Module:
    import timm

    if not pretrained:
        return timm.create_model(base, pretrained=False, num_classes=num_classes)
    ctx: contextlib.AbstractContextManager = contextlib.nullcontext()
    if not _online("huggingface.co"):  # no retries for a minute when offline: use the local cache only
        from unittest import mock

        import huggingface_hub.constants as hf_constants

        ctx = mock.patch.object(hf_constants, "HF_HUB_OFFLINE", True)
    try:
        with ctx:
            return timm.create_model(base, pretrained=True, num_classes=num_classes)
    except (OSError, RuntimeError, ValueError) as e:
        raise _offline_error(base, e) from None


def _build_torchvision(width: float, num_classes: int, pretrained: bool) -> nn.Module:
    from torchvision.models import MobileNet_V2_Weights, mobilenet_v2

    if not pretrained:
        return mobilenet_v2(weights=None, width_mult=width, num_classes=num_classes)
    if width != 1.0:
        raise LatoptError(f"torchvision has pretrained MobileNetV2 weights only for width 1.0, not {width:g}; "
                          "drop --pretrained or use width 1.0")
    try:
        model = mobilenet_v2(weights=MobileNet_V2_Weights.IMAGENET1K_V2)
    except (OSError, RuntimeError, ValueError) as e:
        raise _offline_error(TORCHVISION_NAME, e) from None
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


# ------------------------------------------------------------------------------------------ checkpoints
def make_arch(model: nn.Module, name: str, num_classes: int) -> dict[str, Any]:
    """The JSON-able architecture description of ``model`` (σ_α and folds read from the model)."""
    from latopt.fold import alpha_spec, fold_spec

    return {"model": canonical_name(name), "num_classes": int(num_classes),
            "alpha": alpha_spec(model), "fold": fold_spec(model)}


def _check_arch(arch: Any, where: str) -> dict[str, Any]:
    if not isinstance(arch, dict) or not {"model", "num_classes"} <= set(arch):
        raise LatoptError(f"{where}: architecture must be a dict with 'model' and 'num_classes'")
    try:
        json.dumps(arch)
    except (TypeError, ValueError) as e:
        raise LatoptError(f"{where}: architecture is not JSON-able ({e})") from None
    parse_name(arch["model"])
    alpha, fold = arch.get("alpha"), arch.get("fold")
    if alpha is not None and (not isinstance(alpha, dict) or alpha.get("granularity") not in ("block", "activation")
                              or not isinstance(alpha.get("blocks"), list)):
        raise LatoptError(f"{where}: arch['alpha'] must be None or {{'granularity': 'block'|'activation', 'blocks': [...]}}")
    if fold is not None and (not isinstance(fold, dict) or fold.get("mode") not in ("exact", "paper")
                             or not isinstance(fold.get("plan"), dict)):
        raise LatoptError(f"{where}: arch['fold'] must be None or {{'mode', 'input_size', 'plan'}}")
    return arch


def build_from_arch(arch: dict[str, Any]) -> nn.Module:
    """Rebuild the module structure described by ``arch`` (weights are random until a state_dict is
    loaded). The global RNG state is left untouched."""
    from latopt.fold import fold_blocks, install_alpha

    _check_arch(arch, "architecture")
    with torch.random.fork_rng(devices=[]):
        model = build_model(arch["model"], int(arch["num_classes"]))
        if arch.get("alpha"):
            install_alpha(model, [int(i) for i in arch["alpha"]["blocks"]], arch["alpha"]["granularity"])
        fold = arch.get("fold")
        if fold:
            size = fold.get("input_size")
            model = fold_blocks(model, {int(k): v for k, v in fold["plan"].items()}, fold["mode"],
                                None if size is None else (int(size[0]), int(size[1])))
    return model.eval()


def save_checkpoint(path: str | Path, model: nn.Module, arch: dict[str, Any],
                    meta: dict[str, Any] | None = None) -> Path:
    """Write a ``latopt.checkpoint/1`` file atomically. ``arch`` must describe ``model`` (its σ_α and
    folds are checked against the model); ``meta`` is any JSON-able dict (metrics, config, ...)."""
    path = Path(path)
    _check_arch(arch, f"checkpoint {path}")
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
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    payload = {"schema": CHECKPOINT_SCHEMA, "arch": arch, "meta": meta, "state_dict": state}
    if path.is_dir():
        raise LatoptError(f"checkpoint path {path} is a directory; give a file name")
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)
    return path


def load_checkpoint(path: str | Path, *, expect_model: str | None = None
                    ) -> tuple[nn.Module, dict[str, Any], dict[str, Any]]:
    """(model in eval mode, arch, meta) from a latopt checkpoint; one-line LatoptError when the file
    is missing, unreadable, not a latopt checkpoint, or of another architecture than ``expect_model``."""
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
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError, AttributeError,
            UnicodeDecodeError) as e:
        first = first_line(e, 120)
        raise LatoptError(f"{path} is not a readable latopt checkpoint ({first})") from None
    if not isinstance(data, dict) or data.get("schema") != CHECKPOINT_SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise LatoptError(f"{path} is not a latopt checkpoint (schema {got!r}, expected {CHECKPOINT_SCHEMA!r})")
    arch = _check_arch(data.get("arch"), f"checkpoint {path}")
    meta = data.get("meta") or {}
    state = data.get("state_dict")
    if not isinstance(state, dict):
        raise LatoptError(f"checkpoint {path} has no state_dict")
    if expect_model is not None and canonical_name(expect_model) != canonical_name(arch["model"]):
        raise LatoptError(f"checkpoint {path} is for model {arch['model']!r}, not {canonical_name(expect_model)!r}")
    model = build_from_arch(arch)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        detail = " ".join(str(e).split())[:200]
        raise LatoptError(f"checkpoint {path} does not match its architecture {arch['model']!r}: {detail}") from None
    return model.eval(), arch, meta
