"""MBConv block discovery: one uniform view of every inverted-residual block of a model.

Recognised modules (matched by class, never re-implemented):

- timm ``InvertedResidual`` (``conv_pw → bn1(+act) → conv_dw → bn2(+act) → conv_pwl → bn3``) and
  ``DepthwiseSeparableConv`` (the t = 1 block ``conv_dw → bn1(+act) → conv_pw → bn2``); the activations
  live in ``BatchNormAct2d.act``;
- torchvision ``InvertedResidual`` (``Conv2dNormActivation`` children);
- latopt ``FoldedBlock`` (a block already folded, dropped ones included) and ``PointwiseBlock`` (a block in
  its ``pw`` variant network): kept in the numbering, not foldable again. So a block keeps the index it has
  in the original network whatever variant it is in: an index always names the same block.

Public API::

    Block                                    frozen dataclass (see fields below)
    find_blocks(model) -> list[Block]        forward order; Block.index is the position in that list
    block_kind(module) -> str | None         "timm" / "torchvision" / "latopt" for a block module
    resolve_blocks(model, spec) -> list[Block]   spec: "all" (every foldable block) or indices
    block_input_shapes(model, input_shape) -> dict[int, tuple[int, ...]]
    block_io(model, input_shape) -> {index: (input tensor, output tensor)}   one zero input, hooks
    conv_output_size(size, kernel, stride, padding) -> int   one axis of a convolution's output

The modules around the blocks (stem, head) are :mod:`latopt.stemhead`.

A block that cannot be folded (squeeze-excitation, non-ReLU activation, anti-aliasing, dilation, an
activation after the projection, ...) is listed with ``foldable=False`` and the reason.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from timm.layers import Conv2dSame
from torch import nn

from latopt.constants import PARTIAL_VARIANTS
from latopt.errors import LatoptError
from latopt.layers import AlphaActivation, FoldedBlock, FoldInfo, PointwiseBlock


@dataclass(frozen=True)
class Block:
    """One MBConv block. ``convs``/``bns`` are (expand, depthwise, project) or (depthwise, project) for
    t = 1; ``acts`` are the activation modules after expand and depthwise (one for t = 1)."""

    index: int
    path: str
    kind: str
    cin: int
    cout: int
    hidden: int
    expansion: float
    kernel: int
    stride: int
    residual: bool
    convs: tuple[str, ...]
    bns: tuple[str, ...]
    acts: tuple[str, ...]
    foldable: bool
    reason: str
    padding: int | str = 0  # the depthwise padding: symmetric int, or "same" (TF SAME, timm Conv2dSame)

    @property
    def has_expand(self) -> bool:
        return len(self.convs) == 3

    @property
    def variants(self) -> tuple[str, ...]:
        """Variants this block allows: "full" and "pw" always; the partial folds only with an expansion
        conv; "drop" only for a residual block (the identity needs cin == cout and stride 1)."""
        if not self.foldable:
            return ()
        return (("full",) + (PARTIAL_VARIANTS if self.has_expand else ()) + ("pw",)
                + (("drop",) if self.residual else ()))


# ---------------------------------------------------------------------------------------------- helpers
def _act_kind(m: nn.Module) -> str | None:
    """'relu' / 'relu6' for a foldable activation (incl. an installed σ_α), else None."""
    if isinstance(m, AlphaActivation):
        return m.kind
    if isinstance(m, nn.ReLU6):
        return "relu6"
    if isinstance(m, nn.ReLU):
        return "relu"
    return None


def _is_identity(m: nn.Module | None) -> bool:
    return m is None or isinstance(m, nn.Identity)


def _conv_padding(conv: nn.Conv2d) -> int | str | None:
    """Symmetric int padding, "same" for timm Conv2dSame, None when unsupported."""
    if isinstance(conv, Conv2dSame):
        return "same"
    if type(conv) is not nn.Conv2d or conv.padding_mode != "zeros" or isinstance(conv.padding, str):
        return None
    ph, pw = conv.padding
    return ph if ph == pw else None


def _check_convs(expand: nn.Module | None, dw: nn.Module, project: nn.Module) -> str:
    """'' when the three convolutions have the shapes the fold algebra needs, else the reason."""
    for name, c in (("expand", expand), ("project", project)):
        if c is None:
            continue
        if type(c) is not nn.Conv2d:
            return f"{name} convolution is {type(c).__name__}, not a plain Conv2d"
        if c.kernel_size != (1, 1) or c.stride != (1, 1) or c.groups != 1 or c.padding not in ((0, 0), "valid"):
            return f"{name} convolution is not a 1x1, stride-1, ungrouped convolution"
    if not isinstance(dw, nn.Conv2d):
        return f"depthwise convolution is {type(dw).__name__}"
    if dw.groups != dw.in_channels or dw.out_channels != dw.in_channels:
        return "depthwise convolution is grouped with a channel multiplier or is not depthwise"
    kh, kw = dw.kernel_size
    if kh != kw or kh % 2 == 0:
        return f"depthwise kernel {kh}x{kw} is not square and odd"
    if dw.dilation != (1, 1):
        return "dilated depthwise convolution"
    sh, sw = dw.stride
    if sh != sw:
        return f"non-square stride {sh}x{sw}"
    pad = _conv_padding(dw)
    if pad is None:
        return f"depthwise padding {getattr(dw, 'padding', '?')} is not symmetric zero padding or TF SAME"
    if isinstance(pad, int) and pad != kh // 2:
        return f"depthwise padding {pad} is not k//2 = {kh // 2}"
    return ""


def _check_bn(bn: nn.Module, name: str) -> str:
    if not isinstance(bn, nn.BatchNorm2d):
        return f"{name} normalisation is {type(bn).__name__}, not BatchNorm2d"
    if not bn.track_running_stats or bn.running_mean is None:
        return f"{name} BatchNorm has no running statistics"
    if not _is_identity(getattr(bn, "drop", None)):
        return f"{name} BatchNorm has dropout"
    return ""


def _acts_reason(acts: Sequence[nn.Module]) -> str:
    for a in acts:
        if _act_kind(a) is None:
            return f"non-ReLU activation ({type(a).__name__})"
    return ""


def _make(index: int, path: str, kind: str, mods: dict[str, nn.Module], names: dict[str, str],
          residual: bool, extra_reason: str) -> Block:
    """Assemble a Block from the sub-modules (keys expand/dw/project, bn1..bn3, act1/act2)."""
    expand, dw, project = mods.get("expand"), mods["dw"], mods["project"]
    has_expand = expand is not None
    reason = extra_reason or _check_convs(expand, dw, project)
    conv_keys = ("expand", "dw", "project") if has_expand else ("dw", "project")
    bn_keys = ("bn1", "bn2", "bn3") if has_expand else ("bn2", "bn3")
    act_keys = ("act1", "act2") if has_expand else ("act2",)
    for k in bn_keys:
        reason = reason or _check_bn(mods[k], k)
    reason = reason or _acts_reason([mods[k] for k in act_keys])
    cin = (expand if has_expand else dw).in_channels
    hidden = dw.in_channels
    cout = project.out_channels
    pad = _conv_padding(dw) if isinstance(dw, nn.Conv2d) else None
    return Block(
        index=index, path=path, kind=kind, cin=cin, cout=cout, hidden=hidden,
        expansion=hidden / cin, kernel=int(dw.kernel_size[0]), stride=int(dw.stride[0]),
        residual=residual,
        convs=tuple(f"{path}.{names[k]}" for k in conv_keys),
        bns=tuple(f"{path}.{names[k]}" for k in bn_keys),
        acts=tuple(f"{path}.{names[k]}" for k in act_keys),
        foldable=not reason, reason=reason, padding=pad if pad is not None else 0,
    )


def _timm_block(index: int, path: str, m: nn.Module) -> Block:
    cls = type(m).__name__
    reasons = []
    if getattr(m, "conv_s2d", None) is not None:
        reasons.append("space-to-depth stem in the block")
    if not _is_identity(getattr(m, "se", None)):
        reasons.append("squeeze-excitation")
    if not _is_identity(getattr(m, "aa", None)):
        reasons.append("anti-aliasing layer")
    if cls == "InvertedResidual":
        mods = {"expand": m.conv_pw, "dw": m.conv_dw, "project": m.conv_pwl,
                "bn1": m.bn1, "bn2": m.bn2, "bn3": m.bn3,
                "act1": getattr(m.bn1, "act", nn.Identity()), "act2": getattr(m.bn2, "act", nn.Identity())}
        names = {"expand": "conv_pw", "dw": "conv_dw", "project": "conv_pwl",
                 "bn1": "bn1", "bn2": "bn2", "bn3": "bn3", "act1": "bn1.act", "act2": "bn2.act"}
        last = m.bn3
    else:  # DepthwiseSeparableConv (t = 1)
        mods = {"dw": m.conv_dw, "project": m.conv_pw, "bn2": m.bn1, "bn3": m.bn2,
                "act2": getattr(m.bn1, "act", nn.Identity())}
        names = {"dw": "conv_dw", "project": "conv_pw", "bn2": "bn1", "bn3": "bn2", "act2": "bn1.act"}
        last = m.bn2
    if not _is_identity(getattr(last, "act", None)):
        reasons.append("activation after the projection")
    return _make(index, path, f"timm.{cls}", mods, names, bool(m.has_skip), "; ".join(reasons))


def _tv_block(index: int, path: str, m: nn.Module) -> Block:
    seq = m.conv
    reason = ""
    if len(seq) == 4:  # expand CNA, dw CNA, project conv, bn
        e, d = seq[0], seq[1]
        mods = {"expand": e[0], "bn1": e[1], "act1": e[2] if len(e) > 2 else nn.Identity(),
                "dw": d[0], "bn2": d[1], "act2": d[2] if len(d) > 2 else nn.Identity(),
                "project": seq[2], "bn3": seq[3]}
        names = {"expand": "conv.0.0", "bn1": "conv.0.1", "act1": "conv.0.2", "dw": "conv.1.0",
                 "bn2": "conv.1.1", "act2": "conv.1.2", "project": "conv.2", "bn3": "conv.3"}
    elif len(seq) == 3:
        d = seq[0]
        mods = {"dw": d[0], "bn2": d[1], "act2": d[2] if len(d) > 2 else nn.Identity(),
                "project": seq[1], "bn3": seq[2]}
        names = {"dw": "conv.0.0", "bn2": "conv.0.1", "act2": "conv.0.2", "project": "conv.1", "bn3": "conv.2"}
    else:
        raise LatoptError(f"torchvision InvertedResidual at {path} has an unexpected layout ({len(seq)} parts)")
    return _make(index, path, "torchvision.InvertedResidual", mods, names, bool(m.use_res_connect), reason)


def block_kind(m: nn.Module) -> str | None:
    """"timm" / "torchvision" / "latopt" when ``m`` is an MBConv block of that library, else None."""
    cls = type(m)
    mod = cls.__module__
    if mod.startswith("timm.") and cls.__name__ in ("InvertedResidual", "DepthwiseSeparableConv"):
        return "timm"
    if mod.startswith("torchvision.") and cls.__name__ == "InvertedResidual":
        return "torchvision"
    if isinstance(m, (FoldedBlock, PointwiseBlock)):
        return "latopt"
    info = getattr(m, "info", None)  # a merged span's convolution or a block merged into it (latopt.fold.merge)
    if isinstance(info, FoldInfo) and info.variant in ("span", "merged"):
        return "latopt"
    return None


_LATOPT_PARTS = {  # variant -> (convs, bns) of latopt's block modules
    "full": (("conv",), ()), "expand_dw": (("conv", "project"), ()), "dw_project": (("expand", "conv"), ()),
    "pw": (("conv",), ()), "drop": ((), ()), "span": (("conv.conv",), ()), "merged": ((), ()),
}


def _latopt_block(index: int, path: str, m: FoldedBlock | PointwiseBlock) -> Block:
    """A block latopt already folded, dropped, or put in its pw variant network: kept in the numbering, not
    foldable again. ``info`` describes the original block."""
    i: FoldInfo = m.info
    if isinstance(m, PointwiseBlock):
        names = (("expand", "project"), ("bn1", "bn3")) if m.expand is not None else (("project",), ("bn3",))
        acts: tuple[str, ...] = ()
        kind, reason = "latopt.PointwiseBlock", f"pw variant network before folding (was {i.kind})"
    else:
        names = _LATOPT_PARTS[i.variant]
        act = getattr(m, "act", None)
        acts = () if act is None or isinstance(act, nn.Identity) else (f"{path}.act",)
        what = "merged" if i.variant in ("span", "merged") else "folded"
        kind = {"span": "latopt.SpanConv", "merged": "latopt.MergedBlock"}.get(i.variant, "latopt.FoldedBlock")
        reason = f"already {what} ({i.variant}, {i.mode} mode; was {i.kind})"
    return Block(
        index=index, path=path, kind=kind, cin=i.cin, cout=i.cout, hidden=i.hidden,
        expansion=i.hidden / i.cin, kernel=i.kernel, stride=i.stride, residual=i.residual,
        convs=tuple(f"{path}.{c}" for c in names[0]), bns=tuple(f"{path}.{c}" for c in names[1]), acts=acts,
        foldable=False, reason=reason, padding=i.padding,
    )


def find_blocks(model: nn.Module) -> list[Block]:
    """Every MBConv block of ``model`` in forward order (module registration order)."""
    blocks: list[Block] = []
    skip_prefixes: list[str] = []
    for path, m in model.named_modules():
        if any(path.startswith(p) for p in skip_prefixes):
            continue
        kind = block_kind(m)
        if kind is None:
            continue
        skip_prefixes.append(path + ".")
        i = len(blocks)
        if kind == "timm":
            blocks.append(_timm_block(i, path, m))
        elif kind == "torchvision":
            blocks.append(_tv_block(i, path, m))
        else:
            blocks.append(_latopt_block(i, path, m))
    return blocks


def resolve_blocks(model: nn.Module, spec: Sequence[int] | str) -> list[Block]:
    """Blocks named by ``spec``: "all" = every foldable block, or a sequence of indices / a string
    like "1,3,5". A non-foldable or out-of-range index is a LatoptError naming the block and reason."""
    blocks = find_blocks(model)
    if not blocks:
        raise LatoptError(f"no MBConv blocks found in {type(model).__name__}; is it a MobileNetV2/EfficientNet?")
    if isinstance(spec, str):
        if spec.strip().lower() == "all":
            return [b for b in blocks if b.foldable]
        try:
            spec = [int(s) for s in spec.replace(" ", "").split(",") if s]
        except ValueError:
            raise LatoptError(f"bad block list {spec!r}: give 'all' or comma-separated indices like 1,3,5") from None
    out: list[Block] = []
    for item in spec:
        try:
            if isinstance(item, bool):
                raise TypeError
            i = int(item) if isinstance(item, str) else operator.index(item)
        except (TypeError, ValueError):
            raise LatoptError(f"bad block index {item!r}: indices are integers as `latopt inspect` prints them") from None
        if not 0 <= i < len(blocks):
            raise LatoptError(f"block index {i} is out of range: the model has blocks 0..{len(blocks) - 1}")
        b = blocks[i]
        if not b.foldable:
            raise LatoptError(f"block {i} ({b.path}, {b.kind}) cannot be folded: {b.reason}")
        if b not in out:
            out.append(b)
    return out


@torch.no_grad()
def block_io(model: nn.Module, input_shape: tuple[int, int, int, int]) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """Every block's input and output tensor (the tensor objects themselves, so ``io[j][0] is io[i][1]``
    says that block j consumes block i's output) for one zero input of ``input_shape`` (N, C, H, W)."""
    if len(input_shape) != 4 or any(int(s) <= 0 for s in input_shape):
        raise LatoptError(f"input shape {tuple(input_shape)} must be (N, C, H, W) with positive sizes")
    blocks = find_blocks(model)
    io: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    handles = []
    for b in blocks:
        mod = model.get_submodule(b.path)

        def hook(_m: nn.Module, args: tuple, out: torch.Tensor, idx: int = b.index) -> None:
            io[idx] = (args[0], out)

        handles.append(mod.register_forward_hook(hook))
    was_training = model.training
    model.eval()
    try:
        p = next(model.parameters(), None)
        dtype = p.dtype if p is not None else torch.float32
        device = p.device if p is not None else torch.device("cpu")
        with torch.no_grad():
            model(torch.zeros(tuple(int(s) for s in input_shape), dtype=dtype, device=device))
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return io


def input_channels(model: nn.Module) -> int:
    """The channels of the network's input: those of its first convolution."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            return int(m.in_channels)
    raise LatoptError("the model has no Conv2d; cannot infer its input channels")


def block_input_shapes(model: nn.Module, input_shape: tuple[int, int, int, int]) -> dict[int, tuple[int, ...]]:
    """The real input shape (N, C, H, W) of every block for a network input of ``input_shape``."""
    return {i: tuple(x.shape) for i, (x, _) in block_io(model, input_shape).items()}


def conv_output_size(size: int, kernel: int, stride: int, padding: int | str) -> int:
    """Output length of a convolution along one axis ("same" = TF SAME: ceil(size / stride))."""
    if padding == "same":
        return math.ceil(size / stride)
    return (size + 2 * int(padding) - kernel) // stride + 1
