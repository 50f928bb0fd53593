"""What every adapter describes: :class:`Block` (one block of a model, as latopt sees it) and the checks that
decide whether a block's parts have the shapes the fold algebra takes (:func:`make_block`). Re-exported by
:mod:`latopt.nets.blocks`, whose ``find_blocks`` is the walk over a model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from timm.layers import Conv2dSame
from torch import nn

from latopt.constants import ACT_KINDS, FOLD_MODES
from latopt.nets.layers import activation_kind
from latopt.nets.variants import allowed


@dataclass(frozen=True)
class Block:
    """One block. ``layout`` says its anatomy:

    - ``mbconv``: ``convs``/``bns`` are (expand 1x1, depthwise k×k, project 1x1), or (depthwise, project) for
      t = 1; ``acts`` are the activations after expand and depthwise (one for t = 1);
    - ``dense``: the same with a dense k×k middle convolution: (1x1, k×k, 1x1) for a ResNet Bottleneck, (k×k
      cin → hidden, 1x1 project) for an EdgeResidual (``has_expand`` False);
    - ``basic``: (k×k, k×k), a ResNet BasicBlock; ``kernel``/``stride``/``padding`` are those of the one
      convolution the two compose into (two 3x3 → one 5x5, or 7x7 with stride 2), exact only away from the
      border (``fold_modes`` is ``("paper",)``).

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
    layout: str = "mbconv"
    shortcut: tuple[str, ...] = ()
    post_act: str = ""
    drop_only: bool = False

    @property
    def has_expand(self) -> bool:
        return len(self.convs) == 3

    @property
    def fold_modes(self) -> tuple[str, ...]:
        """The fold modes this block folds in: a ``basic`` block's two k×k convolutions compose into one
        only away from the border, so only ``paper`` mode."""
        return ("paper",) if self.layout == "basic" else FOLD_MODES

    @property
    def variants(self) -> tuple[str, ...]:
        """The variants this block allows (:func:`latopt.nets.variants.allowed`: each variant says which blocks it
        applies to): "full" for every foldable block; for an ``mbconv`` block "pw" too and the partial folds with
        an expansion conv; "drop" for a residual block (the identity needs cin == cout and stride 1), also one
        that does not fold when it is ``drop_only``."""
        return allowed(self)


# ---------------------------------------------------------------------------------------------- helpers
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


def _acts_reason(acts: Sequence[nn.Module]) -> str:
    for a in acts:
        if activation_kind(a) is None:
            return (f"unsupported activation ({type(a).__name__}; σ_α takes "
                    f"{', '.join(ACT_KINDS)})")
    return ""


def se_reason(drop: bool) -> str:
    """Why a squeeze-excitation block does not fold; ``drop``: it may still be dropped (``Block.drop_only``)."""
    return (f"squeeze-excitation ({'drop only' if drop else 'as-is only'}: an SE block gates by its input, "
            "a fold of it is not exact)")


def make_block(index: int, path: str, kind: str, mods: dict[str, Any], names: dict[str, str],
               residual: bool, extra_reason: str, *, layout: str = "mbconv", se: bool = False) -> Block:
    """A Block from a block's named parts. ``mods``/``names`` (module, path inside the block) have the keys
    expand (None for t = 1) / dw / project, bn1..bn3, act1/act2 (``mbconv`` and ``dense`` layouts; ``dw`` is
    the middle k×k, depthwise or dense) or conv1 / conv2, bn1 / bn2, act1 (``basic``); optional sc_conv /
    sc_bn (a projection shortcut) and post (the activation after the residual addition). ``extra_reason``:
    what the adapter already found unfoldable ('' when nothing) besides squeeze-excitation; ``se``: the block
    has squeeze-excitation. An SE block never folds and lists no activations; it is ``drop_only`` when it is
    residual and SE is all that keeps it from folding."""
    sc = ("sc_conv", "sc_bn") if mods.get("sc_conv") is not None else ()
    post = names["post"] if mods.get("post") is not None else ""
    conv_keys: tuple[str, ...]
    bn_keys: tuple[str, ...]
    act_keys: tuple[str, ...]
    if layout == "basic":
        c1, c2 = mods["conv1"], mods["conv2"]
        conv_keys, bn_keys, act_keys = ("conv1", "conv2"), ("bn1", "bn2"), ("act1",)
        reason = extra_reason or check_conv(c1, "first") or check_conv(c2, "second")
        if not reason and (conv_padding(c1) == "same" or conv_padding(c2) == "same" or c2.stride != (1, 1)):
            reason = "TF SAME padding or a strided second convolution in a basic block"
        s1 = int(c1.stride[0])
        k1, k2 = int(c1.kernel_size[0]), int(c2.kernel_size[0])
        cin, hidden, cout = c1.in_channels, c1.out_channels, c2.out_channels
        kernel, stride = k1 + s1 * (k2 - 1), s1
        pad: int | str | None = kernel // 2
    else:
        expand: Any
        expand, dw, project = mods.get("expand"), mods["dw"], mods["project"]
        has_expand = expand is not None
        reason = extra_reason
        if has_expand:
            reason = reason or check_conv(expand, "expand", pointwise=True)
        reason = reason or check_conv(dw, "depthwise" if layout == "mbconv" else "middle",
                                      depthwise=layout == "mbconv")
        reason = reason or check_conv(project, "project", pointwise=True)
        conv_keys = ("expand", "dw", "project") if has_expand else ("dw", "project")
        bn_keys = ("bn1", "bn2", "bn3") if has_expand else ("bn2", "bn3")
        act_keys = ("act1", "act2") if has_expand else ("act2",)
        cout = getattr(project, "out_channels", 0)
        conv = isinstance(dw, nn.Conv2d)  # else not foldable (reason above); the figures are placeholders
        pad = conv_padding(dw) if conv else None
        kernel, stride = (int(dw.kernel_size[0]), int(dw.stride[0])) if conv else (0, 1)
        hidden = dw.out_channels if conv else getattr(dw, "out_channels", 0)
        cin = getattr(expand if has_expand else dw, "in_channels", 0)
    for k in bn_keys:
        reason = reason or check_bn(mods[k], k)
    reason = reason or _acts_reason([mods[k] for k in act_keys])
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
        index=index, path=path, kind=kind, cin=cin, cout=cout, hidden=hidden,
        expansion=hidden / cin if cin else 0.0, kernel=kernel, stride=stride, residual=residual,
        convs=tuple(f"{path}.{names[k]}" for k in conv_keys),
        bns=tuple(f"{path}.{names[k]}" for k in bn_keys),
        acts=() if se else tuple(f"{path}.{names[k]}" for k in act_keys),
        foldable=not reason, reason=reason, padding=pad if pad is not None else 0, layout=layout,
        shortcut=tuple(f"{path}.{names[k]}" for k in sc), post_act=f"{path}.{post}" if post else "",
        drop_only=drop_only,
    )
