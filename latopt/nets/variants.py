"""The fold variants, one record each: what a variant does to a block, which blocks it applies to, what its
folded module is (its convolutions and the order its forward runs them in), how the profiler, the chains of
deferred bias maps, the merged spans and Layer Folding's uniform costs treat it. Every module that needs one
of these facts reads it here, and so does the fold: each record holds its fold algebra (``compose``: the block's
BN-fused convolutions composed into the folded module's weights, with the primitives of
:mod:`latopt.rewrite.compose`). The names are :data:`FoldVariant` (re-exported by :mod:`latopt.constants`, which
derives the LUT's vocabulary from it). Adding a variant is its name and its record here (its algebra, and its
variant network: ``reference``), and its test. A variant's name is still spelt elsewhere where it is a value
(a plan, a LUT key) or a role no record describes: ``full`` is Layer Folding's fold and c_l's reference, a span
composes around its one ``full``.

- ``full``: both activations linear: the block is one k×k convolution (the residual a centre-tap identity);
- ``expand_dw`` / ``dw_project``: the first / the second activation linear (Layer Folding with one α per
  activation): k×k (expand ∘ depthwise) → σ → 1x1, or 1x1 → σ → k×k (depthwise ∘ project) [+ x];
- ``pw``: the depthwise convolution, its BN and both activations removed: one 1x1 convolution (the input
  sampled with the block's stride); a different network, trained into (the DP);
- ``drop``: a residual block removed: the identity.

This module is a leaf (no torch when imported; a composer imports :mod:`latopt.rewrite.compose` when it runs): the
block adapters, the modules, the fold and the profiler all import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

if TYPE_CHECKING:
    import torch

    from latopt.rewrite.compose import AffineConv

# the fold variants, in the order every list of them follows (a LUT's columns, the DP's options)
FoldVariant = Literal["full", "expand_dw", "dw_project", "pw", "drop"]


class LayoutTraits(Protocol):
    """What a variant asks of a block's layout (:class:`latopt.adapters.block_layouts.BlockLayout`)."""

    @property
    def name(self) -> str: ...
    @property
    def mbconv(self) -> bool: ...


class BlockTraits(Protocol):
    """What a variant asks of a block (:class:`latopt.adapters.anatomy.Block` has it; declared here so that this
    module imports nothing of latopt's but its vocabularies)."""

    @property
    def foldable(self) -> bool: ...
    @property
    def drop_only(self) -> bool: ...
    @property
    def reason(self) -> str: ...
    @property
    def residual(self) -> bool: ...
    @property
    def layout(self) -> LayoutTraits: ...
    @property
    def post_act(self) -> str: ...
    @property
    def has_expand(self) -> bool: ...
    @property
    def stride(self) -> int: ...
    @property
    def padding(self) -> int | str: ...


class Fused(Protocol):
    """An MBConv block's three convolutions with their BNs fused: (weight, bias) each; no expansion: (None, None)."""

    @property
    def expand(self) -> tuple[torch.Tensor | None, torch.Tensor | None]: ...
    @property
    def dw(self) -> tuple[torch.Tensor, torch.Tensor]: ...
    @property
    def project(self) -> tuple[torch.Tensor, torch.Tensor]: ...


# a composer's result: the k×k (or 1x1) convolution composed in float64, and the 1x1 convolutions the folded module
# keeps as they are, by name
Composed = tuple["AffineConv", dict[str, tuple["torch.Tensor", "torch.Tensor"]]]
Composer = Callable[[Fused, BlockTraits], Composed]

# a folded module's convolution: (name, kernel: "kxk" | "1x1", input channels, output channels, strided), the
# channels named by FoldInfo's fields ("cin", "hidden", "cout")
ConvSpec = tuple[str, Literal["kxk", "1x1"], str, str, bool]
# the steps of a folded module's forward, in order: a convolution by name, "map" (the exact-mode bias map),
# "act" (the kept activation), "post" (an activation after the residual addition), "residual" (+ x)
ForwardStep = str


@dataclass(frozen=True)
class Variant:
    name: str
    removes: Literal["all", "first", "second"]   # the block's activations the variant makes linear
    mbconv_only: bool        # needs an MBConv block (1x1 → depthwise k×k → 1x1) with no activation after it
    needs_expand: bool       # needs the expansion 1x1 (a t = 1 block has none)
    needs_residual: bool     # needs an identity skip (cin == cout, stride 1)
    on_unfoldable: bool      # applies to a block whose activations cannot be folded (a residual SE block)
    timed: bool              # the profiler times it (a dropped block is gone: 0 ms)
    affine: bool             # its module is an affine map of its input: a chain's maps defer (export), spans
    span_inner: bool         # may stand in a merged span beside the span's one full fold
    uniform_time: float | None   # Layer Folding's uniform costs: the block's time in this variant (as-is = 1)
    convs: tuple[ConvSpec, ...]  # the folded module's convolutions
    steps: tuple[ForwardStep, ...]   # its forward
    kept_act: int | None         # the block activation the folded module keeps (index into Block.acts)
    bias_map: bool               # exact mode, with an expansion: a bias map after the k×k convolution
    compose: Composer | None     # its fold algebra on an MBConv block (None: no convolution, drop)
    # the variant network (what a fold of it is checked against, and what the DP fine-tunes into): the block with
    # its removed activations linear, the block as one pointwise map (latopt.nets.layers.PointwiseBlock: expand 1x1 →
    # project 1x1 on the strided input [+ x]), or the identity
    reference: Literal["linear", "pointwise", "identity"] = "linear"

    def removed_acts(self, acts: tuple[str, ...]) -> tuple[str, ...]:
        """The block's activations (paths) the variant makes linear."""
        if self.removes == "all":
            return acts
        return (acts[0],) if self.removes == "first" else (acts[1],)

    def why_not(self, block: BlockTraits) -> str | None:
        """Why the variant does not apply to ``block``; None when it does."""
        if not block.foldable and not (self.on_unfoldable and block.drop_only):
            return block.reason or "it cannot be folded"
        if self.needs_residual and not block.residual:
            return "it has no residual connection to become the identity"
        if self.mbconv_only and (not block.layout.mbconv or block.post_act):
            return (f"it is a {block.layout.name} block" if not block.layout.mbconv else
                    "it keeps an activation after its residual addition")
        if self.needs_expand and not block.has_expand:
            return "it is a t = 1 block (no expansion convolution)"
        return None


def _v(name: str, **kw: object) -> Variant:
    return Variant(name=name, **kw)  # type: ignore[arg-type]


def _need(wb: tuple[Any, Any]) -> tuple[Any, Any]:
    w, b = wb
    assert w is not None and b is not None  # the variant needs an expansion (why_not refused the block otherwise)
    return w, b


def _full(f: Fused, b: BlockTraits) -> Composed:
    from latopt.rewrite.compose import compose_full
    return compose_full(*f.expand, *f.dw, *f.project, residual=b.residual, stride=b.stride, padding=b.padding), {}


def _pw(f: Fused, b: BlockTraits) -> Composed:
    from latopt.rewrite.compose import compose_pw
    return compose_pw(*f.expand, *f.project, residual=b.residual, stride=b.stride), {}


def _expand_dw(f: Fused, b: BlockTraits) -> Composed:
    from latopt.rewrite.compose import compose_expand_dw
    return compose_expand_dw(*_need(f.expand), *f.dw, stride=b.stride, padding=b.padding), {"project": f.project}


def _dw_project(f: Fused, b: BlockTraits) -> Composed:
    from latopt.rewrite.compose import compose_dw_project
    return compose_dw_project(*f.dw, *f.project, stride=b.stride, padding=b.padding), {"expand": _need(f.expand)}


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    _v("full", removes="all", mbconv_only=False, needs_expand=False, needs_residual=False, on_unfoldable=False,
       timed=True, affine=True, span_inner=False, uniform_time=0.0,
       convs=(("conv", "kxk", "cin", "cout", True),), steps=("conv", "map", "post"), kept_act=None, bias_map=True,
       compose=_full),
    _v("expand_dw", removes="first", mbconv_only=True, needs_expand=True, needs_residual=False, on_unfoldable=False,
       timed=True, affine=False, span_inner=False, uniform_time=0.5,
       convs=(("conv", "kxk", "cin", "hidden", True), ("project", "1x1", "hidden", "cout", False)),
       steps=("conv", "map", "act", "project", "residual"), kept_act=1, bias_map=True, compose=_expand_dw),
    _v("dw_project", removes="second", mbconv_only=True, needs_expand=True, needs_residual=False,
       on_unfoldable=False, timed=True, affine=False, span_inner=False, uniform_time=0.5,
       convs=(("expand", "1x1", "cin", "hidden", False), ("conv", "kxk", "hidden", "cout", True)),
       steps=("expand", "act", "conv", "residual"), kept_act=0, bias_map=False, compose=_dw_project),
    _v("pw", removes="all", mbconv_only=True, needs_expand=False, needs_residual=False, on_unfoldable=False,
       timed=True, affine=True, span_inner=True, uniform_time=None,
       convs=(("conv", "1x1", "cin", "cout", True),), steps=("conv", "map", "post"), kept_act=None, bias_map=False,
       compose=_pw, reference="pointwise"),
    _v("drop", removes="all", mbconv_only=False, needs_expand=False, needs_residual=True, on_unfoldable=True,
       timed=False, affine=True, span_inner=True, uniform_time=None,
       convs=(), steps=("map",), kept_act=None, bias_map=False, compose=None, reference="identity"),
)}
assert tuple(VARIANTS) == get_args(FoldVariant), "FoldVariant lists the variants in this order"
assert all((v.compose is None) == (not v.convs) for v in VARIANTS.values()), "a variant with convolutions composes"

PARTIAL_VARIANTS: tuple[str, ...] = tuple(n for n, v in VARIANTS.items() if v.removes != "all")  # one α each
SPAN_INNER: tuple[str, ...] = tuple(n for n, v in VARIANTS.items() if v.span_inner)
UNIFORM_TIMES: dict[str, float] = {"none": 1.0, **{n: v.uniform_time for n, v in VARIANTS.items()
                                                   if v.uniform_time is not None}}


def allowed(block: BlockTraits) -> tuple[str, ...]:
    """The variants that apply to ``block``, in :data:`VARIANTS`' order."""
    return tuple(n for n, v in VARIANTS.items() if v.why_not(block) is None)
