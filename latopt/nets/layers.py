"""The ``nn.Module`` types latopt puts into networks.

- :class:`AlphaActivation`: the parametric activation σ_α(x) = (1 − α)·σ(x) + α·x of Layer Folding,
  σ ∈ {ReLU, ReLU6, hard-swish, SiLU} (``ACTIVATIONS``: kind → function and plain module; ``activation_kind``
  reads the kind of a module); ``alpha`` is a 0-dim ``nn.Parameter``, shared by both activations of a block
  with granularity ``block`` (the paper's choice) or one per activation with ``activation``. α = 0 is σ; α = 1
  is the identity whatever σ is, which is all a fold needs.
- :class:`FoldedBlock`: the plain module that replaces an MBConv block after folding. Its layout depends
  only on :class:`FoldInfo` (JSON-able), so a folded model is rebuilt from the architecture description and
  loaded with ``load_state_dict(strict=True)``:

  - ``full``:       ``conv`` (k×k, cin → cout, bias = interior bias) [+ ``bias_map`` buffer in exact mode]
                    — the residual is inside ``conv`` as a centre tap;
  - ``expand_dw``:  ``conv`` (k×k, cin → hidden) [+ ``bias_map``] → ``act`` (the kept σ/σ_α) →
                    ``project`` (1x1, BN folded) [+ x];
  - ``dw_project``: ``expand`` (1x1, BN folded) → ``act`` → ``conv`` (k×k, hidden → cout) [+ x];
  - ``pw``:         ``conv`` (1x1 with the block's stride, cin → cout; the residual is inside as an identity
                    matrix): the block without its depthwise convolution, that BN and both activations;
  - ``drop``:       nothing: the identity (a residual block dropped).

  A block whose activation follows its residual addition (a ResNet block, ``FoldInfo.post_act``) keeps it:
  ``post`` after ``conv``. ``FoldInfo.layout`` records the original block's anatomy (``mbconv``: a depthwise
  middle convolution; ``dense``: a dense one, EdgeResidual / Bottleneck; ``basic``: two k×k convolutions,
  composed into one larger k×k — see :mod:`latopt.adapters`).

  ``bias_map`` (1, C, Ho, Wo) holds the exact bias minus the interior bias: zero away from the border.
  The ``paper`` mode has no buffer (constant bias, any input size). ``pw`` and ``drop`` need none in
  either mode (a 1x1 convolution has no padding); they hold one only as the end of a chain whose maps
  export defers (:mod:`latopt.rewrite.defer`).
- :class:`PointwiseBlock`: the ``pw`` *variant network* of a block before folding (what ``linearize`` puts
  in place of the block, the reference a ``pw`` fold is checked against): the block's own expansion + BN
  and projection + BN, with the depthwise convolution, its BN and both activations removed. A stride-s
  block keeps its stride by sampling its input at (s·y, s·x), which is what a stride-s 1x1 convolution
  does. For symmetric padding that is the centre of the depthwise window; for TF "SAME" padding of an
  even size it is one pixel before it (a definition, not an approximation: the variant network is this).

This module sits below :mod:`latopt.nets.blocks` (which recognises both types) and :mod:`latopt.rewrite` (which
installs and creates them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from timm.layers import Conv2dSame
from torch import nn

from latopt.constants import ACT_KINDS, FOLD_MODES
from latopt.errors import LatoptError
from latopt.nets.variants import VARIANTS


def _relu6(x: torch.Tensor) -> torch.Tensor:
    return torch.clamp(x, 0.0, 6.0)


# kind -> (σ as a function, the plain module that computes it); keys are constants.ACT_KINDS
ACTIVATIONS: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], type[nn.Module]]] = {
    "relu": (torch.relu, nn.ReLU), "relu6": (_relu6, nn.ReLU6),
    "hardswish": (F.hardswish, nn.Hardswish), "silu": (F.silu, nn.SiLU),
}
assert tuple(ACTIVATIONS) == ACT_KINDS


def activation_kind(m: nn.Module) -> str | None:
    """The σ_α kind of an activation module (an installed σ_α included), None when σ_α does not support it.
    timm's own HardSwish / Swish / SiLU modules (its non-native fallbacks) count as the same functions."""
    if isinstance(m, AlphaActivation):
        return m.kind
    for kind, (_, cls) in ACTIVATIONS.items():
        if isinstance(m, cls):
            return kind
    name = type(m).__name__
    if type(m).__module__.startswith("timm.") and name in ("HardSwish", "Swish", "SiLU"):
        return "hardswish" if name == "HardSwish" else "silu"
    return None


def make_activation(kind: str) -> nn.Module:
    """The plain module of an activation kind (``nn.ReLU()``, ...)."""
    if kind not in ACTIVATIONS:
        raise LatoptError(f"unknown activation kind {kind!r}; known: {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[kind][1]()


class AlphaActivation(nn.Module):
    """σ_α(x) = (1 − α)·σ(x) + α·x. ``alpha`` is a 0-dim ``nn.Parameter`` (possibly shared)."""

    def __init__(self, kind: str = "relu6", alpha: nn.Parameter | None = None, *,
                 granularity: str = "block") -> None:
        super().__init__()
        if kind not in ACT_KINDS:
            raise LatoptError(f"σ_α supports activations {ACT_KINDS}, not {kind!r}")
        self.kind = kind
        self.granularity = granularity
        self.alpha = alpha if alpha is not None else nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = ACTIVATIONS[self.kind][0](x)
        a = self.alpha.to(x.dtype)
        return (1 - a) * s + a * x  # this form: exactly σ at α = 0 and exactly x at α = 1 (s + α(x − s) is not)

    def extra_repr(self) -> str:
        return f"kind={self.kind}, alpha={float(self.alpha.detach()):.4f}"


@dataclass(frozen=True)
class FoldInfo:
    variant: str
    mode: str
    kind: str                 # the original block's kind, e.g. "timm.InvertedResidual"
    cin: int
    hidden: int
    cout: int
    kernel: int
    stride: int
    padding: int | str
    residual: bool
    has_expand: bool
    in_size: tuple[int, int] | None        # the block's input (H, W); required in exact mode
    out_size: tuple[int, int] | None       # the block's output (H, W)
    net_input_size: tuple[int, int] | None  # the network input (H, W) it was folded for
    layout: str = "mbconv"    # the original block's anatomy (latopt.nets.blocks.Block.layout)
    post_act: str = ""        # the kind of the activation after the residual addition, kept ("" = none)

    @property
    def has_bias_map(self) -> bool:
        spec = VARIANTS.get(self.variant)   # a span's or a merged block's info names no fold variant
        return self.mode == "exact" and self.has_expand and spec is not None and spec.bias_map

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def make_kxk(cin: int, cout: int, kernel: int, stride: int, padding: int | str) -> nn.Conv2d:
    if padding == "same":
        return Conv2dSame(cin, cout, kernel, stride, bias=True)
    return nn.Conv2d(cin, cout, kernel, stride, padding=int(padding), bias=True)


class FoldedBlock(nn.Module):
    """A folded MBConv block (see module docstring). ``act`` is the kept activation of a partial fold."""

    if TYPE_CHECKING:  # set by __init__ as the variant needs; for the type checker only (TorchScript reads
        info: FoldInfo  # class annotations)
        conv: nn.Conv2d
        expand: nn.Conv2d
        project: nn.Conv2d
        act: nn.Module
        post: nn.Module
        bias_map: torch.Tensor | None  # a buffer

    def __init__(self, info: FoldInfo, act: nn.Module | None = None) -> None:
        super().__init__()
        if info.variant not in VARIANTS or info.mode not in FOLD_MODES:
            raise LatoptError(f"bad fold variant/mode {info.variant!r}/{info.mode!r}")
        self.info = info
        i = info
        spec = VARIANTS[i.variant]   # its convolutions and its forward (latopt.nets.variants)
        if spec.needs_residual and not i.residual:
            raise LatoptError("only a residual block can be dropped (the identity needs cin == cout, stride 1)")
        channels = {"cin": i.cin, "hidden": i.hidden, "cout": i.cout}
        map_ch = 0
        for k, (name, kernel, c_in, c_out, strided) in enumerate(spec.convs):
            stride = i.stride if strided else 1
            setattr(self, name, make_kxk(channels[c_in], channels[c_out], i.kernel, stride, i.padding) if kernel == "kxk"
                    else nn.Conv2d(channels[c_in], channels[c_out], 1, stride, bias=True))
            if kernel == "kxk" and spec.bias_map:
                map_ch = channels[c_out]
            if k == 0 and spec.kept_act is not None:   # the kept activation sits between the two convolutions
                self.act = act if act is not None else nn.Identity()
        if i.post_act and spec.convs:
            if spec.mbconv_only:
                raise LatoptError(f"a block with an activation after its residual addition folds only in full, "
                                  f"not {i.variant!r}")
            self.post = make_activation(i.post_act)
        if i.has_bias_map:
            if i.out_size is None:
                raise LatoptError("exact fold mode needs the block's input size")
            self.register_buffer("bias_map", torch.zeros(1, map_ch, *i.out_size))
        else:
            self.register_buffer("bias_map", None)

    def _add_map(self, y: torch.Tensor) -> torch.Tensor:
        if self.bias_map is None:
            return y
        if not (torch.jit.is_tracing() or torch.compiler.is_compiling()) and y.shape[-2:] != self.bias_map.shape[-2:]:
            raise LatoptError(
                f"block folded in exact mode for a {tuple(self.bias_map.shape[-2:])} output got "
                f"{tuple(y.shape[-2:])}; use the input size it was folded for, or fold in paper mode")
        return y + self.bias_map

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        for step in VARIANTS[self.info.variant].steps:   # the variant's forward (latopt.nets.variants)
            if step == "map":
                y = self._add_map(y)
            elif step == "act":
                y = self.act(y)
            elif step == "post":
                y = self.post(y) if self.info.post_act else y
            elif step == "residual":
                y = y + x if self.info.residual else y
            else:
                y = getattr(self, step)(y)
        return y

    def extra_repr(self) -> str:
        i = self.info
        return (f"variant={i.variant}, mode={i.mode}, {i.cin}->{i.cout}, k={i.kernel}, s={i.stride}, "
                f"residual={i.residual}, was={i.kind}" + (f", then {i.post_act}" if i.post_act else ""))


class PointwiseBlock(nn.Module):
    """The ``pw`` variant network of one MBConv block (module docstring): ``expand`` + ``bn1`` (None for a
    t = 1 block) → ``project`` + ``bn3`` [+ x], on the input sampled with the block's stride. The modules
    are the block's own (not copied here). ``info`` describes the original block (variant ``pw``)."""

    def __init__(self, info: FoldInfo, expand: nn.Module | None, bn1: nn.Module | None, project: nn.Module,
                 bn3: nn.Module) -> None:
        super().__init__()
        if VARIANTS[info.variant].reference != "pointwise":
            raise LatoptError(f"a PointwiseBlock is a pointwise variant (pw), not {info.variant!r}")
        self.info = info
        self.expand, self.bn1, self.project, self.bn3 = expand, bn1, project, bn3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.info.stride
        h = x[..., ::s, ::s] if s > 1 else x
        if self.expand is not None:
            assert self.bn1 is not None  # given with expand
            h = self.bn1(self.expand(h))
        y = self.bn3(self.project(h))
        return y + x if self.info.residual else y

    def extra_repr(self) -> str:
        i = self.info
        return f"pw variant network, {i.cin}->{i.hidden}->{i.cout}, s={i.stride}, residual={i.residual}, was={i.kind}"
