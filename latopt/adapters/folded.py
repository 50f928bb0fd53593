"""Block adapter for latopt's own block modules: a block already folded (``FoldedBlock``, dropped ones
included), in its ``pw`` variant network (``PointwiseBlock``), or merged into a span (a module whose ``info``
is a span's or a merged block's :class:`~latopt.nets.layers.FoldInfo`). Kept in the numbering, never foldable
again; ``info`` describes the original block."""

from __future__ import annotations

from typing import Any

from torch import nn

from latopt.adapters import BlockAdapter, register_block
from latopt.adapters.anatomy import Block
from latopt.adapters.block_layouts import LAYOUTS
from latopt.nets.layers import FoldedBlock, FoldInfo, PointwiseBlock
from latopt.nets.variants import VARIANTS

_PARTS = {  # variant -> (convs, bns) of latopt's block modules: a fold variant's (latopt.nets.variants), a span's
    **{n: (tuple(c[0] for c in v.convs), ()) for n, v in VARIANTS.items()},
    "span": (("conv.conv",), ()), "merged": ((), ()),
}


def _match(m: nn.Module) -> bool:
    if isinstance(m, (FoldedBlock, PointwiseBlock)):
        return True
    info = getattr(m, "info", None)  # a merged span's convolution or a block merged into it (latopt.rewrite.merge)
    return isinstance(info, FoldInfo) and info.variant in ("span", "merged")


def _describe(index: int, path: str, m: Any) -> Block:
    i: FoldInfo = m.info
    names: tuple[tuple[str, ...], tuple[str, ...]]
    if isinstance(m, PointwiseBlock):
        names = (("expand", "project"), ("bn1", "bn3")) if m.expand is not None else (("project",), ("bn3",))
        acts: tuple[str, ...] = ()
        kind, reason = "latopt.PointwiseBlock", f"pw variant network before folding (was {i.kind})"
    else:
        names = _PARTS[i.variant]
        act = getattr(m, "act", None)
        acts = () if act is None or isinstance(act, nn.Identity) else (f"{path}.act",)
        what = "merged" if i.variant in ("span", "merged") else "folded"
        kind = {"span": "latopt.SpanConv", "merged": "latopt.MergedBlock"}.get(i.variant, "latopt.FoldedBlock")
        reason = f"already {what} ({i.variant}, {i.mode} mode; was {i.kind})"
    return Block(
        index=index, path=path, kind=kind, cin=i.cin, cout=i.cout, hidden=i.hidden,
        expansion=i.hidden / i.cin, kernel=i.kernel, stride=i.stride, residual=i.residual,
        convs=tuple(f"{path}.{c}" for c in names[0]), bns=tuple(f"{path}.{c}" for c in names[1]), acts=acts,
        foldable=False, reason=reason, padding=i.padding, layout=LAYOUTS[i.layout],
    )


register_block(BlockAdapter("latopt", "latopt", _match, _describe))
