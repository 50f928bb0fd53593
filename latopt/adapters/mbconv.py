"""Block adapters for inverted residuals: timm ``InvertedResidual``, ``DepthwiseSeparableConv`` (t = 1),
``EdgeResidual`` (a fused k×k dense expansion + 1x1 projection: layout ``dense``) and ``UniversalInvertedResidual``
(MobileNetV4: an MBConv without its start depthwise, else layout ``uir``, defined here), torchvision
``InvertedResidual``. Squeeze-excitation, anti-aliasing, a space-to-depth stem and an activation after the
projection followed by a residual addition make a block unfoldable (listed with the reason): an SE block gates
by its own input, so removing its activations does not make it affine. A residual block whose one obstacle is
SE may still be dropped (``Block.drop_only``: variants ``("drop",)``). An activation after the projection of a
block without a skip (MobileNetV1, LCNet) is kept after the fold (``Block.post_act``), as a ResNet's is."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from latopt.adapters import BlockAdapter, from_library, register_block
from latopt.adapters.anatomy import Block, is_identity, make_block
from latopt.adapters.block_layouts import (
    DENSE,
    MBCONV,
    BlockLayout,
    FusedConv,
    Parts,
    check_conv,
    conv_padding,
    register_layout,
)
from latopt.errors import LatoptError

if TYPE_CHECKING:
    from latopt.rewrite.compose import AffineConv


def _act(bn: nn.Module) -> nn.Module:
    return getattr(bn, "act", None) or nn.Identity()


def _timm_reasons(m: nn.Module, last_bn: nn.Module) -> list[str]:
    reasons = []
    if getattr(m, "conv_s2d", None) is not None:
        reasons.append("space-to-depth stem in the block")
    if not is_identity(getattr(m, "aa", None)):
        reasons.append("anti-aliasing layer")
    if not is_identity(getattr(last_bn, "act", None)) and m.has_skip:
        reasons.append("activation after the projection, before the residual addition")
    return reasons


def _timm_describe(index: int, path: str, m: Any) -> Block:
    cls = type(m).__name__
    if cls == "InvertedResidual":
        mods = {"expand": m.conv_pw, "dw": m.conv_dw, "project": m.conv_pwl, "bn1": m.bn1, "bn2": m.bn2,
                "bn3": m.bn3, "act1": _act(m.bn1), "act2": _act(m.bn2)}
        names = {"expand": "conv_pw", "dw": "conv_dw", "project": "conv_pwl",
                 "bn1": "bn1", "bn2": "bn2", "bn3": "bn3", "act1": "bn1.act", "act2": "bn2.act"}
        last, layout = m.bn3, MBCONV
    elif cls == "DepthwiseSeparableConv":  # t = 1
        mods = {"dw": m.conv_dw, "project": m.conv_pw, "bn2": m.bn1, "bn3": m.bn2, "act2": _act(m.bn1)}
        names = {"dw": "conv_dw", "project": "conv_pw", "bn2": "bn1", "bn3": "bn2", "act2": "bn1.act"}
        last, layout = m.bn2, MBCONV
    else:  # EdgeResidual: conv_exp (k×k dense, cin -> hidden) -> bn1(+act) -> conv_pwl -> bn2
        mods = {"dw": m.conv_exp, "project": m.conv_pwl, "bn2": m.bn1, "bn3": m.bn2, "act2": _act(m.bn1)}
        names = {"dw": "conv_exp", "project": "conv_pwl", "bn2": "bn1", "bn3": "bn2", "act2": "bn1.act"}
        last, layout = m.bn2, DENSE
    if not is_identity(getattr(last, "act", None)) and not m.has_skip:
        # MobileNetV1 / LCNet: an activation after the projection and no skip: kept after the fold, as a ResNet's
        mods["post"] = last.act
        names["post"] = f"{names['bn3']}.act"
    return make_block(index, path, f"timm.{cls}", mods, names, bool(m.has_skip), "; ".join(_timm_reasons(m, last)),
                      layout=layout, se=not is_identity(getattr(m, "se", None)))


def _tv_describe(index: int, path: str, m: Any) -> Block:
    seq = m.conv
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
    return make_block(index, path, "torchvision.InvertedResidual", mods, names, bool(m.use_res_connect), "")


def _v3_parts(m: nn.Module) -> tuple[list[Any], list[Any]] | None:
    """(Conv2dNormActivation parts, SqueezeExcitation parts) of a torchvision MobileNetV3 block, None when its
    ``block`` is anything else."""
    parts = list(getattr(m, "block", ()))
    se = [p for p in parts if type(p).__name__ == "SqueezeExcitation"]
    cnas = [p for p in parts if type(p).__name__ == "Conv2dNormActivation" and len(p) in (2, 3)]
    if len(cnas) not in (2, 3) or len(cnas) + len(se) != len(parts) or len(se) > 1:
        return None
    return cnas, se


def _tv_v3_describe(index: int, path: str, m: Any) -> Block:
    """torchvision MobileNetV3's InvertedResidual (``block``: [expand CNA], depthwise CNA, [SqueezeExcitation],
    project CN)."""
    parts = _v3_parts(m)
    assert parts is not None, "the adapter's match (_match_tv_v3) checked the parts"
    cnas, se = parts
    idx = {id(p): i for i, p in enumerate(m.block)}
    d, pr = cnas[-2], cnas[-1]
    di, pi = idx[id(d)], idx[id(pr)]
    mods: dict[str, Any] = {"dw": d[0], "bn2": d[1], "act2": d[2] if len(d) > 2 else nn.Identity(),
                                         "project": pr[0], "bn3": pr[1]}
    names = {"dw": f"block.{di}.0", "bn2": f"block.{di}.1", "act2": f"block.{di}.2",
             "project": f"block.{pi}.0", "bn3": f"block.{pi}.1"}
    if len(cnas) == 3:
        e = cnas[0]
        ei = idx[id(e)]
        mods.update(expand=e[0], bn1=e[1], act1=e[2] if len(e) > 2 else nn.Identity())
        names.update(expand=f"block.{ei}.0", bn1=f"block.{ei}.1", act1=f"block.{ei}.2")
    reason = "activation after the projection" if len(pr) > 2 else ""
    return make_block(index, path, "torchvision.InvertedResidual", mods, names, bool(m.use_res_connect), reason,
                      se=bool(se))


def _match_timm(m: nn.Module) -> bool:
    return from_library(m, "timm", "InvertedResidual", "DepthwiseSeparableConv", "EdgeResidual")


def _match_tv(m: nn.Module) -> bool:
    return from_library(m, "torchvision", "InvertedResidual") and hasattr(m, "conv")


def _match_tv_v3(m: nn.Module) -> bool:
    return from_library(m, "torchvision", "InvertedResidual") and _v3_parts(m) is not None


register_block(BlockAdapter("timm-mbconv", "timm", _match_timm, _timm_describe))
register_block(BlockAdapter("torchvision-mbconv", "torchvision", _match_tv, _tv_describe))
register_block(BlockAdapter("torchvision-mbconv-v3", "torchvision", _match_tv_v3, _tv_v3_describe))


def _tv_mnas_describe(index: int, path: str, m: Any) -> Block:
    """torchvision MNASNet's ``_InvertedResidual``: ``layers`` = 1x1, BN, ReLU, depthwise, BN, ReLU, 1x1, BN."""
    L = m.layers
    mods = {"expand": L[0], "bn1": L[1], "act1": L[2], "dw": L[3], "bn2": L[4], "act2": L[5],
            "project": L[6], "bn3": L[7]}
    names = {k: f"layers.{i}" for i, k in enumerate(("expand", "bn1", "act1", "dw", "bn2", "act2", "project", "bn3"))}
    return make_block(index, path, "torchvision._InvertedResidual", mods, names, bool(m.apply_residual), "")


def _match_tv_mnas(m: Any) -> bool:
    return (from_library(m, "torchvision", "_InvertedResidual") and isinstance(getattr(m, "layers", None), nn.Sequential)
            and len(m.layers) == 8)


register_block(BlockAdapter("torchvision-mnasnet", "torchvision", _match_tv_mnas, _tv_mnas_describe))


# ------------------------------------------------------------------ MobileNetV4's Universal Inverted Bottleneck
# timm's UniversalInvertedResidual: [dw_start k1] → pw_exp 1x1 → [dw_mid k2] → pw_proj 1x1 [+ x], each a
# ConvNormAct (the BN holds the activation). Without dw_start it is an MBConv (MNv4's "IB"); with dw_start it is
# layout ``uir`` (ExtraDW with dw_mid, ConvNext-like without): the start depthwise (no activation after it) and
# the expansion compose into one dense k1×k1 convolution, exactly; with dw_mid, that and the middle depthwise
# compose like a basic block's two convolutions (k1 + k2 − 1; exact only away from the border, so paper mode).

def _uir_anatomy(mods: Mapping[str, Any], reason: str) -> Parts:
    """``mods``: start (depthwise k1), bn0, expand, bn1, act1, dw (depthwise k2, or None), bn2, act2, project,
    bn3."""
    start, expand, dw, project = mods["start"], mods["expand"], mods.get("dw"), mods["project"]
    reason = (reason or check_conv(start, "start depthwise", depthwise=True)
              or check_conv(expand, "expand", pointwise=True)
              or (check_conv(dw, "middle depthwise", depthwise=True) if dw is not None else "")
              or check_conv(project, "project", pointwise=True))
    k1 = int(start.kernel_size[0]) if isinstance(start, nn.Conv2d) else 0
    s1 = int(start.stride[0]) if isinstance(start, nn.Conv2d) else 1
    p1 = conv_padding(start) if isinstance(start, nn.Conv2d) else None
    kernel, stride, pad = k1, s1, p1
    if dw is not None and isinstance(dw, nn.Conv2d) and not reason:
        p2 = conv_padding(dw)
        if s1 != 1 or not isinstance(p1, int) or not isinstance(p2, int):
            reason = "a strided or TF SAME start depthwise before a middle one"
        else:
            kernel, stride, pad = k1 + int(dw.kernel_size[0]) - 1, int(dw.stride[0]), p1 + p2
    mid = dw is not None
    return Parts(convs=("start", "expand", "dw", "project") if mid else ("start", "expand", "project"),
                 bns=("bn0", "bn1", "bn2", "bn3") if mid else ("bn0", "bn1", "bn3"),
                 acts=("act1", "act2") if mid else ("act1",),
                 cin=getattr(start, "in_channels", 0), hidden=getattr(expand, "out_channels", 0),
                 cout=getattr(project, "out_channels", 0), kernel=kernel, stride=stride, padding=pad, reason=reason)


def _whole_uir(fused: Sequence[FusedConv], convs: Sequence[nn.Module], block: Any,
               shortcut: FusedConv | None) -> AffineConv:
    """start ∘ expand: one dense k1×k1 convolution A[h,c] = E[h,c]·D1[c], bias E·b_D1 + b_E (exact); with a
    middle depthwise, A then it as a basic block's pair (its kernel as a diagonal dense one); then project and
    the skip (:func:`latopt.rewrite.compose.compose_dense` without an expansion)."""
    from latopt.rewrite.compose import compose_basic, compose_dense

    (wd1, bd1), (we, be) = fused[0], fused[1]
    e = we[:, :, 0, 0]
    wa, ba = e[:, :, None, None] * wd1[:, 0][None], e @ bd1 + be
    pad = int(convs[0].padding[0])  # type: ignore[index]   # checked by the anatomy: an int
    if len(fused) == 4:
        wd2, bd2 = fused[2]
        wb = torch.zeros(wd2.shape[0], wd2.shape[0], *wd2.shape[-2:], dtype=wd2.dtype, device=wd2.device)
        idx = torch.arange(wd2.shape[0])
        wb[idx, idx] = wd2[:, 0]
        ab = compose_basic(wa, ba, wb, bd2, residual=False, stride=1, padding_a=pad,
                           padding_b=int(convs[2].padding[0]))  # type: ignore[index]
        wa, ba, pad = ab.weight, ab.const, int(ab.padding)
    return compose_dense(None, None, wa, ba, *fused[-1], residual=block.residual, stride=block.stride,
                         padding=pad, shortcut=shortcut)


UIR = register_layout(BlockLayout("uir", _uir_anatomy, ("paper",), mbconv=False, whole=_whole_uir))


def _uir_describe(index: int, path: str, m: Any) -> Block:
    has_start, has_mid = not is_identity(m.dw_start), not is_identity(m.dw_mid)
    reasons = [why for why, bad in (("layer scale", not is_identity(m.layer_scale)),
                                    ("a depthwise convolution after the projection", not is_identity(m.dw_end)))
               if bad]
    mods: dict[str, Any] = {}
    names: dict[str, str] = {}
    mods.update(expand=m.pw_exp.conv, bn1=m.pw_exp.bn, act1=_act(m.pw_exp.bn), project=m.pw_proj.conv,
                bn3=m.pw_proj.bn)
    names.update(expand="pw_exp.conv", bn1="pw_exp.bn", act1="pw_exp.bn.act", project="pw_proj.conv", bn3="pw_proj.bn")
    if has_mid:
        mods.update(dw=m.dw_mid.conv, bn2=m.dw_mid.bn, act2=_act(m.dw_mid.bn))
        names.update(dw="dw_mid.conv", bn2="dw_mid.bn", act2="dw_mid.bn.act")
    if not is_identity(_act(m.pw_proj.bn)):
        reasons.append("activation after the projection")
    se = not is_identity(getattr(m, "se", None))
    if not has_start and has_mid:   # MNv4's IB: an MBConv whose parts have other names
        return make_block(index, path, "timm.UniversalInvertedResidual", mods, names, bool(m.has_skip),
                          "; ".join(reasons), se=se)
    if not has_start:               # FFN: two 1x1s, no spatial convolution
        e, p = m.pw_exp.conv, m.pw_proj.conv
        return Block(index=index, path=path, kind="timm.UniversalInvertedResidual", cin=e.in_channels,
                     cout=p.out_channels, hidden=e.out_channels, expansion=e.out_channels / e.in_channels, kernel=1,
                     stride=1, residual=bool(m.has_skip), convs=(), bns=(), acts=(), foldable=False,
                     reason="an FFN block (no depthwise convolution): no fold of it yet", layout=UIR)
    if not is_identity(_act(m.dw_start.bn)):
        reasons.append("activation after the start depthwise")
    mods.update(start=m.dw_start.conv, bn0=m.dw_start.bn)
    names.update(start="dw_start.conv", bn0="dw_start.bn")
    return make_block(index, path, "timm.UniversalInvertedResidual", mods, names, bool(m.has_skip),
                      "; ".join(reasons), layout=UIR, se=se)


register_block(BlockAdapter("timm-uir", "timm", lambda m: from_library(m, "timm", "UniversalInvertedResidual"),
                            _uir_describe))
