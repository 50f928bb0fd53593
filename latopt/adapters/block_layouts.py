"""Block layouts: one object per block anatomy, carrying what latopt knows of it in one place.

A :class:`BlockLayout` says which parts a block of that anatomy has and what each must be for the fold algebra
to take it (its ``anatomy``: from the adapter's named modules to :class:`Parts`), the fold modes it folds in,
whether the MBConv variants beyond ``full`` and ``drop`` apply (``mbconv``: ``pw`` and the partial folds,
composed by the variant records of :mod:`latopt.nets.variants`), and otherwise the algebra of its one fold,
``full`` (``whole``: its BN-fused convolutions composed into one convolution, with the primitives of
:mod:`latopt.rewrite.compose`). :class:`latopt.adapters.anatomy.Block` holds its block's layout;
:data:`LAYOUTS` finds one by name (a checkpoint's ``FoldInfo.layout``).

The layouts:

- ``mbconv`` (:data:`MBCONV`): expand 1x1 → depthwise k×k → project 1x1, or depthwise → project for t = 1;
- ``dense`` (:data:`DENSE`): the same with a dense k×k middle convolution: a ResNet Bottleneck (1x1 → k×k →
  1x1), or an EdgeResidual (k×k cin → hidden → 1x1, no expansion);
- ``basic`` (:data:`BASIC`): k×k → k×k, a ResNet BasicBlock (and a VGG conv pair); the two compose into one
  convolution of size k_a + s·(k_b − 1), exact only away from the border, so ``paper`` mode only.

Adding a layout: a :class:`BlockLayout` passed to :func:`register_layout` (its anatomy, and its algebra unless it
is an MBConv), in the module of the adapter that recognises its blocks, and its tests. The checks a layout's
anatomy uses are here too (:func:`check_conv`, :func:`check_bn`, ...), shared by every layout and adapter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from timm.layers import Conv2dSame
from torch import nn

from latopt.constants import ACT_KINDS, FOLD_MODES
from latopt.nets.layers import activation_kind

if TYPE_CHECKING:
    import torch

    from latopt.rewrite.compose import AffineConv

FusedConv = tuple["torch.Tensor", "torch.Tensor"]   # a convolution with its BN fused: (weight, bias)


@dataclass(frozen=True)
class Parts:
    """What a layout's anatomy found in one block: the keys (into the adapter's ``mods`` / ``names``) of its
    convolutions, BNs and activations, in order; its channels and the geometry of the one convolution it folds
    into; and why it does not fold ('' when it does)."""

    convs: tuple[str, ...]
    bns: tuple[str, ...]
    acts: tuple[str, ...]
    cin: int
    hidden: int
    cout: int
    kernel: int
    stride: int
    padding: int | str | None
    reason: str


# the algebra of a layout's full fold: (its convolutions' BN-fused (weight, bias) and modules, in the order of
# Block.convs; the block; the fused projection shortcut, if any) -> the one convolution
WholeFold = Callable[[Sequence[FusedConv], Sequence[nn.Module], Any, "FusedConv | None"], "AffineConv"]


@dataclass(frozen=True)
class BlockLayout:
    """One block anatomy (module docstring)."""

    name: str
    anatomy: Callable[[Mapping[str, Any], str], Parts]   # (the adapter's named modules, its reason) -> Parts
    fold_modes: tuple[str, ...]
    mbconv: bool                 # the MBConv variants (pw, the partial folds) apply, by their records' algebra
    whole: WholeFold | None      # the full fold's algebra; None for an MBConv (the variant records compose)

    def __str__(self) -> str:
        return self.name


LAYOUTS: dict[str, BlockLayout] = {}


def register_layout(layout: BlockLayout) -> BlockLayout:
    """Add ``layout`` to :data:`LAYOUTS` (its name once); returns it."""
    if layout.name in LAYOUTS:
        raise RuntimeError(f"block layout {layout.name!r} registered twice")
    if layout.mbconv == (layout.whole is not None):
        raise RuntimeError(f"block layout {layout.name!r}: an MBConv composes by the variants' records, any other "
                           "layout by its own whole-block algebra")
    LAYOUTS[layout.name] = layout
    return layout


# ---------------------------------------------------------------------------------------------- checks
def is_identity(m: nn.Module | None) -> bool:
    return m is None or isinstance(m, nn.Identity)


def conv_padding(conv: nn.Conv2d) -> int | str | None:
    """Symmetric int padding, "same" for timm Conv2dSame, None when unsupported."""
    if isinstance(conv, Conv2dSame):
        return "same"
    if type(conv) is not nn.Conv2d or conv.padding_mode != "zeros" or isinstance(conv.padding, str):
        return None
    ph, pw = conv.padding
    return ph if ph == pw else None


def check_conv(c: nn.Module, name: str, *, pointwise: bool = False, depthwise: bool = False) -> str:
    """'' when ``c`` has a shape the fold algebra takes, else the reason: ``pointwise`` a 1x1, stride-1,
    ungrouped, unpadded Conv2d; ``depthwise`` a depthwise k×k; otherwise an ungrouped k×k. A k×k convolution
    is square, odd, undilated, with a square stride and symmetric k//2 or TF SAME padding."""
    if not isinstance(c, nn.Conv2d):
        return f"{name} convolution is {type(c).__name__}, not a Conv2d"
    if pointwise:
        if type(c) is not nn.Conv2d:
            return f"{name} convolution is {type(c).__name__}, not a plain Conv2d"
        if c.kernel_size != (1, 1) or c.stride != (1, 1) or c.groups != 1 or c.padding not in ((0, 0), "valid"):
            return f"{name} convolution is not a 1x1, stride-1, ungrouped convolution"
        return ""
    if depthwise and (c.groups != c.in_channels or c.out_channels != c.in_channels):
        return f"{name} convolution is grouped with a channel multiplier or is not depthwise"
    if not depthwise and c.groups != 1:
        return f"{name} convolution is grouped ({c.groups} groups)"
    kh, kw = c.kernel_size
    if kh != kw or kh % 2 == 0:
        return f"{name} kernel {kh}x{kw} is not square and odd"
    if c.dilation != (1, 1):
        return f"dilated {name} convolution"
    sh, sw = c.stride
    if sh != sw:
        return f"non-square stride {sh}x{sw}"
    pad = conv_padding(c)
    if pad is None:
        return f"{name} padding {getattr(c, 'padding', '?')} is not symmetric zero padding or TF SAME"
    if isinstance(pad, int) and pad != kh // 2:
        return f"{name} padding {pad} is not k//2 = {kh // 2}"
    return ""


def check_bn(bn: nn.Module, name: str) -> str:
    if not isinstance(bn, nn.BatchNorm2d):
        return f"{name} normalisation is {type(bn).__name__}, not BatchNorm2d"
    if not bn.track_running_stats or bn.running_mean is None:
        return f"{name} BatchNorm has no running statistics"
    if not is_identity(getattr(bn, "drop", None)):
        return f"{name} BatchNorm has dropout"
    return ""


def acts_reason(acts: Sequence[nn.Module]) -> str:
    """'' when σ_α takes every activation of ``acts``, else why not."""
    for a in acts:
        if activation_kind(a) is None:
            return (f"unsupported activation ({type(a).__name__}; σ_α takes "
                    f"{', '.join(ACT_KINDS)})")
    return ""


# ---------------------------------------------------------------------------------------------- the layouts
def _three_parts(depthwise: bool) -> Callable[[Mapping[str, Any], str], Parts]:
    """The anatomy of MBConv (``depthwise``) and of a dense-middle block: ``mods`` has expand (None for t = 1),
    dw (the middle k×k), project, bn1 (with an expansion), bn2, bn3, act1 (with an expansion), act2."""

    def anatomy(mods: Mapping[str, Any], reason: str) -> Parts:
        expand: Any = mods.get("expand")
        dw, project = mods["dw"], mods["project"]
        has_expand = expand is not None
        if has_expand:
            reason = reason or check_conv(expand, "expand", pointwise=True)
        reason = reason or check_conv(dw, "depthwise" if depthwise else "middle", depthwise=depthwise)
        reason = reason or check_conv(project, "project", pointwise=True)
        conv = isinstance(dw, nn.Conv2d)  # else not foldable (reason above); the figures are placeholders
        return Parts(
            convs=("expand", "dw", "project") if has_expand else ("dw", "project"),
            bns=("bn1", "bn2", "bn3") if has_expand else ("bn2", "bn3"),
            acts=("act1", "act2") if has_expand else ("act2",),
            cin=getattr(expand if has_expand else dw, "in_channels", 0),
            hidden=dw.out_channels if conv else getattr(dw, "out_channels", 0),
            cout=getattr(project, "out_channels", 0),
            kernel=int(dw.kernel_size[0]) if conv else 0, stride=int(dw.stride[0]) if conv else 1,
            padding=conv_padding(dw) if conv else None, reason=reason)

    return anatomy


def _two_kxk(mods: Mapping[str, Any], reason: str) -> Parts:
    """The anatomy of a basic block: conv1, bn1, act1, conv2, bn2."""
    c1, c2 = mods["conv1"], mods["conv2"]
    reason = reason or check_conv(c1, "first") or check_conv(c2, "second")
    if not reason and (conv_padding(c1) == "same" or conv_padding(c2) == "same" or c2.stride != (1, 1)):
        reason = "TF SAME padding or a strided second convolution in a basic block"
    s1 = int(c1.stride[0])
    kernel = int(c1.kernel_size[0]) + s1 * (int(c2.kernel_size[0]) - 1)
    return Parts(convs=("conv1", "conv2"), bns=("bn1", "bn2"), acts=("act1",), cin=c1.in_channels,
                 hidden=c1.out_channels, cout=c2.out_channels, kernel=kernel, stride=s1, padding=kernel // 2,
                 reason=reason)


def _whole_dense(fused: Sequence[FusedConv], convs: Sequence[nn.Module], block: Any,
                 shortcut: FusedConv | None) -> AffineConv:
    from latopt.rewrite.compose import compose_dense

    w1, b1 = fused[0] if block.has_expand else (None, None)
    return compose_dense(w1, b1, *fused[-2], *fused[-1], residual=block.residual, stride=block.stride,
                         padding=block.padding, shortcut=shortcut)


def _whole_basic(fused: Sequence[FusedConv], convs: Sequence[nn.Module], block: Any,
                 shortcut: FusedConv | None) -> AffineConv:
    from latopt.rewrite.compose import compose_basic

    (wa, ba), (wb, bb) = fused
    ca, cb = convs
    assert isinstance(ca, nn.Conv2d) and isinstance(cb, nn.Conv2d)  # a foldable block's
    return compose_basic(wa, ba, wb, bb, residual=block.residual, stride=block.stride,
                         padding_a=int(ca.padding[0]), padding_b=int(cb.padding[0]), shortcut=shortcut)


MBCONV = register_layout(BlockLayout("mbconv", _three_parts(depthwise=True), FOLD_MODES, mbconv=True, whole=None))
DENSE = register_layout(BlockLayout("dense", _three_parts(depthwise=False), FOLD_MODES, mbconv=False,
                                    whole=_whole_dense))
BASIC = register_layout(BlockLayout("basic", _two_kxk, ("paper",), mbconv=False, whole=_whole_basic))
