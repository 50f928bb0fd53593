"""Installing and reading σ_α (:class:`latopt.nets.layers.AlphaActivation`) in a model.

``install_alpha`` replaces the activations of foldable blocks (in place) by :class:`AlphaActivation`
(ReLU, ReLU6, hard-swish or SiLU: σ_α of the block's own σ; an activation after a residual addition is not
the block's to remove and keeps σ);
with ``granularity="block"`` both activations of a block share ONE ``nn.Parameter`` (the paper's
choice, folds the whole block), with ``"activation"`` each has its own (allows partial folds).
α starts at 0, so the network starts as the original.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from latopt.constants import ACT_KINDS, GRANULARITIES
from latopt.errors import LatoptError
from latopt.nets.blocks import find_blocks, resolve_blocks
from latopt.nets.layers import AlphaActivation, activation_kind, make_activation


def _act_kind_of(m: nn.Module) -> str:
    if isinstance(m, AlphaActivation):
        raise LatoptError("σ_α is already installed there; install it once, on the original model")
    kind = activation_kind(m)
    if kind is None:
        raise LatoptError(f"cannot install σ_α over {type(m).__name__}: the supported activations are "
                          f"{', '.join(ACT_KINDS)}")
    return kind


def install_alpha(model: nn.Module, blocks: Sequence[int] | str = "all",
                  granularity: str = "block") -> dict[int, list[nn.Parameter]]:
    """Replace the activations of ``blocks`` ("all" = every foldable block) by σ_α, in place.

    Returns ``{block index: [α parameters]}`` (one shared parameter per block for "block", one per
    activation for "activation")."""
    if granularity not in GRANULARITIES:
        raise LatoptError(f"granularity must be one of {GRANULARITIES}, not {granularity!r}")
    out: dict[int, list[nn.Parameter]] = {}
    ref = next(model.parameters(), None)
    dtype, device = (ref.dtype, ref.device) if ref is not None else (None, None)  # None: torch's defaults
    for b in resolve_blocks(model, blocks):
        kinds = [_act_kind_of(model.get_submodule(p)) for p in b.acts]
        shared = nn.Parameter(torch.zeros((), dtype=dtype, device=device)) if granularity == "block" else None
        params: list[nn.Parameter] = []
        for path, kind in zip(b.acts, kinds, strict=True):
            alpha = shared if shared is not None else nn.Parameter(torch.zeros((), dtype=dtype, device=device))
            model.set_submodule(path, AlphaActivation(kind, alpha, granularity=granularity))
            if not any(alpha is p for p in params):
                params.append(alpha)
        out[b.index] = params
    return out


def _block_alpha_params(model: nn.Module) -> dict[int, list[nn.Parameter]]:
    out: dict[int, list[nn.Parameter]] = {}
    for b in find_blocks(model):
        params: list[nn.Parameter] = []
        for p in b.acts:
            m = model.get_submodule(p)
            if isinstance(m, AlphaActivation) and not any(m.alpha is q for q in params):
                params.append(m.alpha)
        if params:
            out[b.index] = params
    return out


def get_alphas(model: nn.Module) -> dict[int, list[float]]:
    """α values per block index: one value (shared) or one per activation; blocks without σ_α omitted."""
    return {i: [float(p.detach()) for p in ps] for i, ps in _block_alpha_params(model).items()}


def alpha_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Every distinct α parameter of the model (for an optimizer parameter group)."""
    seen: list[nn.Parameter] = []
    for m in model.modules():
        if isinstance(m, AlphaActivation) and not any(m.alpha is q for q in seen):
            seen.append(m.alpha)
    return seen


@torch.no_grad()
def clamp_alphas_(model: nn.Module) -> None:
    """Clip every α to [0, 1] in place (call after each optimizer step)."""
    for p in alpha_parameters(model):
        p.clamp_(0.0, 1.0)


def alpha_spec(model: nn.Module) -> dict | None:
    """The JSON-able ``arch.alpha`` entry describing where σ_α is installed (None if nowhere)."""
    per_block = _block_alpha_params(model)
    if not per_block:
        return None
    grans = {m.granularity for m in model.modules() if isinstance(m, AlphaActivation)}
    if len(grans) != 1:
        raise LatoptError(f"σ_α installed with mixed granularities {sorted(grans)}; cannot describe it")
    return {"granularity": grans.pop(), "blocks": sorted(per_block)}


@torch.no_grad()
def plain_activations_(model: nn.Module) -> int:
    """Give back the plain σ (nn.ReLU, nn.ReLU6, nn.Hardswish, nn.SiLU) wherever σ_α is exactly σ, in place.

    σ_α with α = 0 *is* σ, but it costs extra element-wise ops in an exported graph (and so latency).
    A block is restored only when every σ_α module in it has α = 0 (so the checkpoint's ``arch.alpha``
    stays block-granular and rebuildable). Returns the number of activations replaced."""
    paths = [b.path for b in find_blocks(model)]
    groups: dict[str, list[tuple[str, AlphaActivation]]] = {}
    for name, m in model.named_modules():
        if isinstance(m, AlphaActivation):
            owners = [p for p in paths if name.startswith(p + ".")]
            groups.setdefault(max(owners, key=len) if owners else name, []).append((name, m))
    n = 0
    for members in groups.values():
        if all(float(m.alpha) == 0.0 for _, m in members):
            for name, m in members:
                model.set_submodule(name, make_activation(m.kind))
                n += 1
    return n
