"""What every adapter describes: :class:`Block` (one block of a model, as latopt sees it), made from a block's
named parts by :func:`make_block` through its layout's anatomy (:mod:`latopt.adapters.block_layouts`, whose
checks decide whether the parts have the shapes the fold algebra takes). Re-exported by
:mod:`latopt.nets.blocks`, whose ``find_blocks`` is the walk over a model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from latopt.adapters.block_layouts import (  # noqa: F401 - the checks, re-exported for the adapters
    MBCONV,
    BlockLayout,
    acts_reason,
    check_bn,
    check_conv,
    conv_padding,
    is_identity,
)
from latopt.nets.layers import activation_kind
from latopt.nets.variants import allowed


@dataclass(frozen=True)
class Block:
    """One block. ``layout`` is its anatomy (:mod:`latopt.adapters.block_layouts`): ``mbconv`` (``convs``/``bns``
    are expand 1x1, depthwise k×k, project 1x1, or depthwise, project for t = 1; ``acts`` the activations after
    expand and depthwise), ``dense`` (a dense k×k middle: a ResNet Bottleneck, or an EdgeResidual without
    expansion) or ``basic`` (k×k, k×k; ``kernel``/``stride``/``padding`` are those of the one convolution the
    two compose into, exact only away from the border: ``fold_modes`` is ``("paper",)``).

    ``residual`` is an identity skip (cin == cout, stride 1: the block can be dropped); ``shortcut`` names the
    (conv, bn) of a 1x1 projection shortcut instead (folded into the centre tap); ``post_act`` is the path of an
    activation after the residual addition (ResNet), which every fold keeps.

    ``drop_only``: a block that does not fold but may be dropped: a residual block whose one obstacle is
    squeeze-excitation (it gates by its own input, so no fold of it is exact, while the identity that replaces a
    dropped block is). It is not ``foldable``, its ``variants`` are ``("drop",)``, and it lists no activations
    (``acts`` is empty), so σ_α and the folds never touch them."""

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
    padding: int | str = 0  # the middle convolution's padding: symmetric int, or "same" (TF SAME, timm Conv2dSame)
    layout: BlockLayout = MBCONV
    shortcut: tuple[str, ...] = ()
    post_act: str = ""
    drop_only: bool = False

    @property
    def has_expand(self) -> bool:
        return len(self.convs) == 3

    @property
    def fold_modes(self) -> tuple[str, ...]:
        """The fold modes this block folds in (its layout's: a ``basic`` block's two k×k convolutions compose
        into one only away from the border, so only ``paper`` mode)."""
        return self.layout.fold_modes

    @property
    def variants(self) -> tuple[str, ...]:
        """The variants this block allows (:func:`latopt.nets.variants.allowed`: each variant says which blocks it
        applies to): "full" for every foldable block; for an ``mbconv`` block "pw" too and the partial folds with
        an expansion conv; "drop" for a residual block (the identity needs cin == cout and stride 1), also one
        that does not fold when it is ``drop_only``."""
        return allowed(self)


def se_reason(drop: bool) -> str:
    """Why a squeeze-excitation block does not fold; ``drop``: it may still be dropped (``Block.drop_only``)."""
    return (f"squeeze-excitation ({'drop only' if drop else 'as-is only'}: an SE block gates by its input, "
            "a fold of it is not exact)")


def make_block(index: int, path: str, kind: str, mods: dict[str, Any], names: dict[str, str],
               residual: bool, extra_reason: str, *, layout: BlockLayout = MBCONV, se: bool = False) -> Block:
    """A Block from a block's named parts. ``mods``/``names`` (module, path inside the block) have the keys
    ``layout``'s anatomy reads (:mod:`latopt.adapters.block_layouts`); optional sc_conv / sc_bn (a projection
    shortcut) and post (the activation after the residual addition). ``extra_reason``: what the adapter already
    found unfoldable ('' when nothing) besides squeeze-excitation; ``se``: the block has squeeze-excitation. An
    SE block never folds and lists no activations; it is ``drop_only`` when it is residual and SE is all that
    keeps it from folding."""
    sc = ("sc_conv", "sc_bn") if mods.get("sc_conv") is not None else ()
    post = names["post"] if mods.get("post") is not None else ""
    parts = layout.anatomy(mods, extra_reason)
    stride, pad, reason = parts.stride, parts.padding, parts.reason
    for k in parts.bns:
        reason = reason or check_bn(mods[k], k)
    reason = reason or acts_reason([mods[k] for k in parts.acts])
    if sc and not reason:
        c, bn = mods["sc_conv"], mods["sc_bn"]
        if (type(c) is not nn.Conv2d or c.kernel_size != (1, 1) or c.groups != 1 or c.padding != (0, 0)
                or c.stride != (stride, stride)):
            reason = "the shortcut is not a 1x1 convolution with the block's stride"
        elif pad == "same":
            reason = "a projection shortcut with TF SAME padding"
        else:
            reason = check_bn(bn, "shortcut")
    if post and not reason and activation_kind(mods["post"]) is None:
        reason = f"unsupported activation after the residual addition ({type(mods['post']).__name__})"
    drop_only = se and residual and not reason
    if se:
        reason = se_reason(drop_only) + (f"; {reason}" if reason else "")
    return Block(
        index=index, path=path, kind=kind, cin=parts.cin, cout=parts.cout, hidden=parts.hidden,
        expansion=parts.hidden / parts.cin if parts.cin else 0.0, kernel=parts.kernel, stride=stride,
        residual=residual, convs=tuple(f"{path}.{names[k]}" for k in parts.convs),
        bns=tuple(f"{path}.{names[k]}" for k in parts.bns),
        acts=() if se else tuple(f"{path}.{names[k]}" for k in parts.acts),
        foldable=not reason, reason=reason, padding=pad if pad is not None else 0, layout=layout,
        shortcut=tuple(f"{path}.{names[k]}" for k in sc), post_act=f"{path}.{post}" if post else "",
        drop_only=drop_only,
    )
