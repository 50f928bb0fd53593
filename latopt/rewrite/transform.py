"""Model surgery: the variant network of a plan, its fold into convolutions, and a numeric check of the fold.

**The variant network** of a plan {block index: variant} is ``linearize(model, plan)``: the model with each
planned block changed as its variant says, before any fine-tuning. ``full`` / ``expand_dw`` /
``dw_project`` replace both / the first / the second activation by the identity (σ_α at α = 1); ``pw``
replaces the block by a :class:`~latopt.nets.layers.PointwiseBlock` (its depthwise conv, that conv's BN and both
activations removed; the stride kept by sampling the input at (s·y, s·x)); ``drop`` replaces a residual
block by the identity. Every variant changes the function of the network; the *fold* of a plan does not
change it any further: it computes the variant network with fewer, larger convolutions, exactly (float64
algebra, checked by ``verify_fold``). ``full`` and the partial folds are Layer Folding's moves; ``pw`` and
``drop`` are depth-compression moves (DepthShrinker / LayerMerge).

- ``linearize(model, blocks)``: that deep copy; ``blocks`` as for ``fold_blocks``.
- ``fold_blocks(model, blocks, mode="exact", input_size=(H, W))``: deep copy in which each planned
  block is replaced by a :class:`FoldedBlock` computing the same function as ``linearize(model, blocks)``
  (exact: everywhere, borders included, for that input size; paper: away from the border, any size;
  ``pw`` and ``drop`` are exact in both modes: a 1x1 convolution and the identity have no border).
  ``blocks``: list of indices | "all" | {index: variant}. Blocks not in the plan are untouched.
- ``fold_spec(model, *, mode=None, input_size=None)``: what was folded, read from the FoldedBlocks; the caller
  that folded with an empty plan says so with ``mode`` and ``input_size`` (the network holds no trace of it).
- ``fold_block_module(model, block, variant, mode, input_size)``: the replacement for ONE block
  (``input_size`` = that block's own input H, W).
- ``verify_fold(reference, folded, input_size)``: errors overall and per folded block.

The algebra runs in float64 (``compose.py``) and the result is cast back to the model's dtype.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import torch
from torch import nn

from latopt.constants import FOLD_MODES, FOLD_VARIANTS
from latopt.errors import LatoptError
from latopt.nets.blocks import (
    Block,
    block_input_shapes,
    conv_output_size,
    find_blocks,
    input_channels,
    resolve_blocks,
)
from latopt.nets.layers import FoldedBlock, FoldInfo, PointwiseBlock, activation_kind
from latopt.nets.variants import VARIANTS
from latopt.rewrite import compose

BlockPlan = Sequence[int] | str | Mapping[int, str] | Mapping[str, str] | Mapping[int | str, str]


def normalize_plan(model: nn.Module, blocks: BlockPlan) -> dict[int, str]:
    """{block index: variant} for list / "all" / "1,3" / dict specs; LatoptError on bad entries."""
    if isinstance(blocks, Mapping):
        items: dict[int, str] = {}
        for k, v in blocks.items():
            try:
                items[int(k)] = v
            except (TypeError, ValueError):
                raise LatoptError(f"bad block index {k!r} in fold plan") from None
        resolved = resolve_blocks(model, list(items))
        plan = {b.index: items[b.index] for b in resolved}
    else:
        plan = {b.index: "full" for b in resolve_blocks(model, blocks)}
    by_index = {b.index: b for b in find_blocks(model)}
    for i, v in plan.items():
        if v not in FOLD_VARIANTS:
            raise LatoptError(f"unknown fold variant {v!r} for block {i}; choose one of {FOLD_VARIANTS}")
        check_variant(by_index[i], v)
    return dict(sorted(plan.items()))


def check_variant(block: Block, variant: str) -> None:
    """LatoptError when ``variant`` does not apply to the (foldable) ``block``, saying why."""
    if variant in block.variants:
        return
    why = VARIANTS[variant].why_not(block) if variant in VARIANTS else "unknown variant"
    raise LatoptError(f"variant {variant!r} does not apply to block {block.index} ({block.path}): {why}; "
                      f"it allows {', '.join(block.variants)}")


def _info(block: Block, variant: str, mode: str, in_size: tuple[int, int] | None,
          net_input_size: tuple[int, int] | None, post_act: str = "") -> FoldInfo:
    out_size = None if in_size is None else (
        conv_output_size(in_size[0], block.kernel, block.stride, block.padding),
        conv_output_size(in_size[1], block.kernel, block.stride, block.padding))
    return FoldInfo(variant=variant, mode=mode, kind=block.kind, cin=block.cin, hidden=block.hidden,
                    cout=block.cout, kernel=block.kernel, stride=block.stride, padding=block.padding,
                    residual=block.residual, has_expand=block.has_expand, in_size=in_size,
                    out_size=out_size, net_input_size=net_input_size, layout=block.layout.name, post_act=post_act)


def _post_act(model: nn.Module, block: Block) -> str:
    """The kind of the activation ``block`` keeps after its residual addition ('' when it has none)."""
    if not block.post_act:
        return ""
    kind = activation_kind(model.get_submodule(block.post_act))
    if kind is None:
        raise LatoptError(f"block {block.index} ({block.path}): unsupported activation after the residual addition")
    return kind


def linearize(model: nn.Module, blocks: BlockPlan) -> nn.Module:
    """The variant network of the plan ``blocks`` (module docstring), as each variant's record says
    (:attr:`latopt.nets.variants.Variant.reference`): a deep copy of ``model`` with the planned blocks' removed
    activations replaced by the identity, a ``pointwise`` one (``pw``) by its :class:`PointwiseBlock` and an
    ``identity`` one (``drop``) by the identity (a FoldedBlock, so that the block keeps its index)."""
    plan = normalize_plan(model, blocks)
    out = copy.deepcopy(model)
    by_index = {b.index: b for b in find_blocks(out)}
    for i, v in plan.items():
        b = by_index[i]
        for path in VARIANTS[v].removed_acts(b.acts):  # first: timm's activations live inside its BN modules
            out.set_submodule(path, nn.Identity())
        if VARIANTS[v].reference == "identity":
            out.set_submodule(b.path, FoldedBlock(_info(b, v, "exact", None, None)))
        elif VARIANTS[v].reference == "pointwise":
            get = out.get_submodule
            expand, bn1 = (get(b.convs[0]), get(b.bns[0])) if b.has_expand else (None, None)
            pw = PointwiseBlock(_info(b, v, "exact", None, None), expand, bn1, get(b.convs[-1]), get(b.bns[-1]))
            pw.train(get(b.path).training)
            out.set_submodule(b.path, pw)
    return out


def _fused(model: nn.Module, conv_path: str, bn_path: str) -> tuple[torch.Tensor, torch.Tensor]:
    conv, bn = model.get_submodule(conv_path), model.get_submodule(bn_path)
    # a foldable block's (latopt.adapters): a Conv2d, a BatchNorm2d with running statistics
    assert isinstance(conv, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d)
    assert bn.running_mean is not None and bn.running_var is not None
    return compose.fuse_bn(conv.weight, conv.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias)


def _set_conv(conv: nn.Conv2d, weight: torch.Tensor, bias: torch.Tensor, like: torch.Tensor) -> None:
    assert conv.bias is not None  # a FoldedBlock's convolutions have a bias
    with torch.no_grad():
        conv.weight.copy_(weight.to(like.dtype))
        conv.bias.copy_(bias.to(like.dtype))


class _Fused(NamedTuple):
    """An MBConv block's three convolutions with their BNs fused (:class:`latopt.nets.variants.Fused`)."""

    expand: tuple[torch.Tensor | None, torch.Tensor | None]
    dw: tuple[torch.Tensor, torch.Tensor]
    project: tuple[torch.Tensor, torch.Tensor]


def fold_block_module(model: nn.Module, block: Block, variant: str = "full", mode: str = "exact",
                      input_size: Sequence[int] | None = None, *,
                      net_input_size: tuple[int, int] | None = None) -> FoldedBlock:
    """The FoldedBlock replacing ``block`` of ``model`` (``input_size`` = the block's input H, W)."""
    if mode not in FOLD_MODES:
        raise LatoptError(f"fold mode must be one of {FOLD_MODES}, not {mode!r}")
    if not block.variants:
        raise LatoptError(f"block {block.index} ({block.path}) cannot be folded: {block.reason}")
    check_variant(block, variant)
    check_mode(block, mode)
    if mode == "exact" and input_size is None:
        raise LatoptError("exact fold mode needs the input size (H, W); or use mode='paper'")
    in_size = None if input_size is None else (int(input_size[0]), int(input_size[1]))
    info = _info(block, variant, mode, in_size, net_input_size, _post_act(model, block))
    like_conv = model.get_submodule(block.convs[-2])
    assert isinstance(like_conv, nn.Conv2d)  # a foldable block's
    like = like_conv.weight
    spec = VARIANTS[variant]
    if not spec.convs:   # drop: the identity
        return FoldedBlock(info).to(dtype=like.dtype, device=like.device).train(model.training)
    if block.layout.whole is not None:   # a layout with an algebra of its own: full is its one fold
        return _fold_whole(model, block, info, in_size, like)
    fused = _Fused(_fused(model, block.convs[0], block.bns[0]) if block.has_expand else (None, None),
                   _fused(model, block.convs[-2], block.bns[-2]), _fused(model, block.convs[-1], block.bns[-1]))
    assert spec.compose is not None   # a variant with convolutions composes (latopt.nets.variants)
    ac, convs = spec.compose(fused, block)
    kept_act = None if spec.kept_act is None else copy.deepcopy(model.get_submodule(block.acts[spec.kept_act]))
    fb = FoldedBlock(info, kept_act).to(dtype=like.dtype, device=like.device)
    _set_conv(fb.conv, ac.weight, ac.interior_bias, like)
    for name, (w, bias) in convs.items():   # the 1x1 a partial fold keeps beside its k×k
        _set_conv(getattr(fb, name), w, bias, like)
    if fb.bias_map is not None:
        assert in_size is not None  # a bias map: exact mode, which needs the input size (checked above)
        delta = compose.bias_map(ac, in_size) - ac.interior_bias[:, None, None]
        delta[:, ~compose.border_mask(in_size, block.kernel, block.stride, block.padding)] = 0.0  # exactly
        with torch.no_grad():
            fb.bias_map.copy_(delta[None].to(like.dtype))
    fb.train(model.training)
    return fb


def _fold_whole(model: nn.Module, block: Block, info: FoldInfo, in_size: tuple[int, int] | None,
                like: torch.Tensor) -> FoldedBlock:
    """The ``full`` fold of a block whose layout has an algebra of its own (``dense``, ``basic``: the only fold
    they allow besides ``drop``)."""
    assert block.layout.whole is not None   # fold_block's test
    shortcut = _fused(model, *block.shortcut) if block.shortcut else None
    fused = [_fused(model, c, b) for c, b in zip(block.convs, block.bns, strict=True)]
    ac = block.layout.whole(fused, [model.get_submodule(c) for c in block.convs], block, shortcut)
    fb = FoldedBlock(info).to(dtype=like.dtype, device=like.device)
    _set_conv(fb.conv, ac.weight, ac.interior_bias, like)
    if fb.bias_map is not None:
        assert in_size is not None  # a bias map: exact mode, which needs the input size
        delta = compose.bias_map(ac, in_size) - ac.interior_bias[:, None, None]
        delta[:, ~compose.border_mask(in_size, block.kernel, block.stride, block.padding)] = 0.0  # exactly
        with torch.no_grad():
            fb.bias_map.copy_(delta[None].to(like.dtype))
    return fb.train(model.training)


def check_mode(block: Block, mode: str) -> None:
    """LatoptError when ``block`` does not fold exactly in ``mode`` (a ResNet BasicBlock: paper mode only)."""
    if mode not in block.fold_modes:
        raise LatoptError(f"block {block.index} ({block.path}, {block.kind}) folds only in "
                          f"{' or '.join(block.fold_modes)} mode: its two k×k convolutions compose into one only "
                          "away from the border; fold it in paper mode")


def foldable_in(model: nn.Module, mode: str) -> list[int]:
    """The indices of the blocks of ``model`` that fold in ``mode`` (foldable, and ``mode`` in their
    ``fold_modes``): what a fold check of "every foldable block" folds."""
    return [b.index for b in find_blocks(model) if b.foldable and mode in b.fold_modes]


def fold_blocks(model: nn.Module, blocks: BlockPlan, mode: str = "exact",
                input_size: tuple[int, int] | None = None) -> nn.Module:
    """A new model with the planned blocks folded (see module docstring); ``model`` is unchanged."""
    if mode not in FOLD_MODES:
        raise LatoptError(f"fold mode must be one of {FOLD_MODES}, not {mode!r}")
    if mode == "exact" and input_size is None:
        raise LatoptError("exact fold mode needs input_size=(H, W) of the network input; or use mode='paper'")
    plan = normalize_plan(model, blocks)
    net_size = None if input_size is None else (int(input_size[0]), int(input_size[1]))
    shapes: dict[int, tuple[int, ...]] = {}
    if net_size is not None:
        shapes = block_input_shapes(model, (1, input_channels(model), *net_size))
    out = copy.deepcopy(model)
    by_index = {b.index: b for b in find_blocks(out)}
    for i, v in plan.items():
        b = by_index[i]
        size = (int(shapes[i][-2]), int(shapes[i][-1])) if i in shapes else None
        out.set_submodule(b.path, fold_block_module(out, b, v, mode, size, net_input_size=net_size))
    return out


def fold_spec(model: nn.Module, *, mode: str | None = None,
              input_size: Sequence[int] | None = None) -> dict | None:
    """The JSON-able ``arch.fold`` entry of a model: ``{"mode", "input_size", "plan"}`` read from its
    FoldedBlocks. A model without one is unfolded (None) unless the caller folded it with an empty plan and
    says so (``mode``, ``input_size`` of that ``fold_blocks`` call): then ``plan == {}``, so a checkpoint of it
    says explicitly that it is folded with nothing folded. Given ``mode``/``input_size`` must agree with the
    blocks'."""
    plan: dict[str, str] = {}
    modes, sizes = set(), set()
    for b in find_blocks(model):
        m = model.get_submodule(b.path)
        if isinstance(m, FoldedBlock):
            plan[str(b.index)] = m.info.variant
            modes.add(m.info.mode)
            sizes.add(m.info.net_input_size)
    if mode is not None:
        modes.add(mode)
        sizes.add(None if input_size is None else (int(input_size[0]), int(input_size[1])))
    if not modes:
        return None
    if len(modes) != 1 or len(sizes) != 1:
        raise LatoptError("blocks were folded with different modes or input sizes; fold them in one call")
    size = sizes.pop()
    return {"mode": modes.pop(), "input_size": None if size is None else list(size), "plan": plan}


@dataclass(frozen=True)
class ErrorStat:
    """Outputs against their reference: the largest absolute difference, it over the reference's largest
    magnitude (``max_rel``), and that magnitude (``ref_max``)."""

    max_abs: float
    max_rel: float
    ref_max: float


@dataclass(frozen=True)
class BlockError:
    """One folded block against the reference block, fed the reference block's input: over all positions and away
    from the border ring (``*_interior``: what the paper mode guarantees)."""

    variant: str
    mode: str
    max_abs: float
    ref_max: float
    max_rel: float
    max_abs_interior: float
    max_rel_interior: float


@dataclass(frozen=True)
class FoldErrors:
    """What :func:`verify_fold` found: the worse of the network's output and its last block's features
    (``max_abs``, ``max_rel``, ``ref_max``), each of the two, and each folded block (by index)."""

    max_abs: float
    max_rel: float
    ref_max: float
    output: ErrorStat
    features: ErrorStat
    per_block: dict[int, BlockError]

    def worst_interior(self) -> BlockError:
        """The folded block with the largest relative error away from its border."""
        return max(self.per_block.values(), key=lambda e: e.max_rel_interior)

    def to_json(self) -> dict[str, Any]:
        """Plain data (a fold report's ``fold_check``): ``per_block`` keyed by the index as a string."""
        d = asdict(self)
        d["per_block"] = {str(k): v for k, v in d["per_block"].items()}
        return d


@torch.no_grad()
def verify_fold(reference: nn.Module, folded: nn.Module, input_size: tuple[int, int], batch: int = 2,
                seed: int = 0, inputs: torch.Tensor | None = None) -> FoldErrors:
    """Compare ``folded`` with ``reference`` (normally ``linearize(model, plan)``) on ``inputs`` (default: ``batch``
    random normal images): a :class:`FoldErrors`, where max_rel = max_abs / max|reference|. Each folded block is
    also checked alone, fed the reference block's input (:class:`BlockError`)."""
    g = torch.Generator().manual_seed(int(seed))
    p = next(reference.parameters())
    last = {m: find_blocks(m)[-1].path for m in (reference, folded)}
    feats: dict[str, torch.Tensor] = {}
    x = (torch.randn(batch, input_channels(reference), int(input_size[0]), int(input_size[1]),
                     generator=g, dtype=torch.float32) if inputs is None else inputs).to(dtype=p.dtype, device=p.device)
    folded_blocks = {b.index: b for b in find_blocks(folded) if b.kind == "latopt.FoldedBlock"}
    ref_blocks = {b.index: b for b in find_blocks(reference)}
    captured: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    handles = []
    for i in folded_blocks:
        if i not in ref_blocks:
            raise LatoptError(f"reference has no block {i}; is it the same architecture?")

        def hook(_m: nn.Module, args: tuple, out: torch.Tensor, idx: int = i) -> None:
            captured[idx] = (args[0].detach().clone(), out.detach().clone())

        handles.append(reference.get_submodule(ref_blocks[i].path).register_forward_hook(hook))
    for name, m in (("ref", reference), ("fold", folded)):
        def fhook(_m: nn.Module, _a: tuple, out: torch.Tensor, key: str = name) -> None:
            feats[key] = out.detach()

        handles.append(m.get_submodule(last[m]).register_forward_hook(fhook))
    modes = (reference.training, folded.training)
    reference.eval()
    folded.eval()
    try:
        ref = reference(x)
        out = folded(x)
        per_block: dict[int, BlockError] = {}
        for i, b in folded_blocks.items():
            fb = folded.get_submodule(b.path)
            assert isinstance(fb, FoldedBlock)  # its kind says so
            bx, by = captured[i]
            diff = (fb(bx) - by).abs()
            scale = float(by.abs().max()) or 1.0
            mask = compose.border_mask((int(bx.shape[-2]), int(bx.shape[-1])), b.kernel, b.stride, b.padding).to(diff.device)
            inner = diff[..., ~mask]
            interior = float(inner.max()) if inner.numel() else 0.0
            per_block[i] = BlockError(variant=fb.info.variant, mode=fb.info.mode, max_abs=float(diff.max()),
                                      ref_max=scale, max_rel=float(diff.max()) / scale, max_abs_interior=interior,
                                      max_rel_interior=interior / scale)
    finally:
        for h in handles:
            h.remove()
        reference.train(modes[0])
        folded.train(modes[1])
    def stat(got: torch.Tensor, want: torch.Tensor) -> ErrorStat:
        scale = float(want.abs().max()) or 1.0
        err = float((got - want).abs().max())
        return ErrorStat(max_abs=err, max_rel=err / scale, ref_max=scale)

    output, features = stat(out, ref), stat(feats["fold"], feats["ref"])
    worst = max((output, features), key=lambda r: r.max_rel)
    return FoldErrors(max_abs=worst.max_abs, max_rel=worst.max_rel, ref_max=worst.ref_max, output=output,
                      features=features, per_block=per_block)


@torch.no_grad()
def randomize_bn_(model: nn.Module, seed: int = 0, *, plan: BlockPlan | None = "all", batch: int = 4,
                  size: tuple[int, int] = (64, 64)) -> nn.Module:
    """Give every BatchNorm random statistics and affine parameters, in place (for fold checks).

    The running statistics are first calibrated on random inputs through ``linearize(model, plan)``
    (so the network compared against stays well scaled instead of growing by orders of magnitude per
    block), then perturbed per channel: mean shift ~ 0.2·σ·N(0,1), variance × exp(0.5·N(0,1)),
    γ ~ 1 + 0.3·N(0,1), β ~ 0.2·N(0,1). Returns ``model``."""
    g = torch.Generator().manual_seed(int(seed))
    calib = linearize(model, plan) if plan else copy.deepcopy(model)
    bns = {n: m for n, m in calib.named_modules() if isinstance(m, nn.BatchNorm2d)}
    for m in bns.values():
        m.reset_running_stats()
        m.momentum = None  # cumulative average
    calib.train()
    p = next(model.parameters())
    for _ in range(2):
        calib(torch.randn(batch, input_channels(model), *size, generator=g).to(p.dtype))
    for name, m in model.named_modules():
        if not isinstance(m, nn.BatchNorm2d) or name not in bns:
            continue
        n, c = m.num_features, bns[name]

        def r(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=g).to(p.dtype)

        # calibrated above: both track running statistics
        assert c.running_var is not None and c.running_mean is not None
        assert m.running_var is not None and m.running_mean is not None
        std = c.running_var.clamp_min(1e-6).sqrt()
        m.running_mean.copy_(c.running_mean + 0.2 * std * r(n))
        m.running_var.copy_(c.running_var * torch.exp(0.5 * r(n)))
        if m.weight is not None and m.bias is not None:  # affine (both or neither)
            m.weight.copy_(1.0 + 0.3 * r(n))
            m.bias.copy_(0.2 * r(n))
    return model
