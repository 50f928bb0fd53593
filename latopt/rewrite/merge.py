"""Merged spans in a network: each span of consecutive folded blocks becomes one convolution.

A span ``(a, b)`` of a folded network (its blocks ``a..b`` FoldedBlocks whose composition is exact:
:func:`latopt.rewrite.span_exact`) is replaced by one :class:`~latopt.rewrite.span.SpanConv` at block ``a``'s place
and a :class:`MergedBlock` (the identity) at each of ``a+1..b``, so the network keeps its block numbering
(``latopt.nets.blocks.find_blocks`` sees both as latopt blocks, not foldable again) and a chain of ``full`` folds
for :func:`latopt.rewrite.defer_bias_maps` stops at a span. Spans are merged on the per-block exact network
(each block with its own bias map): the span's constant part, border map included, is computed from those
blocks in float64 (:func:`latopt.rewrite.compose_span`), so the merge is exact for the input size given.

    merge_spans(folded, spans, input_size) -> nn.Module     a copy; ``folded`` is unchanged
    span_info(blocks) -> FoldInfo                          what a SpanConv records of its blocks
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Iterable, Sequence

import torch
from torch import nn

from latopt.errors import LatoptError
from latopt.nets.blocks import block_input_shapes, find_blocks, input_channels
from latopt.nets.layers import FoldedBlock, FoldInfo
from latopt.rewrite.span import SpanConv, compose_span


class MergedBlock(nn.Module):
    """A block whose function is in the span before it (the identity here); ``info`` is the block's own,
    with variant ``merged``."""

    def __init__(self, info: FoldInfo) -> None:
        super().__init__()
        self.info = info

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def extra_repr(self) -> str:
        return f"merged into the span before it, was {self.info.kind}"


def span_info(blocks: Sequence[FoldedBlock], conv: nn.Conv2d) -> FoldInfo:
    """The FoldInfo of the span of ``blocks`` composed into ``conv`` (variant ``span``)."""
    first, last = blocks[0].info, blocks[-1].info
    full = next((b.info for b in blocks if b.info.variant == "full"), None)  # a k×k span takes its padding
    return FoldInfo(variant="span", mode=first.mode, kind=f"span of {len(blocks)} blocks",
                    cin=first.cin, hidden=0, cout=last.cout, kernel=int(conv.kernel_size[0]),
                    stride=math.prod(b.info.stride for b in blocks), padding=full.padding if full else 0,
                    residual=False, has_expand=False, in_size=first.in_size, out_size=last.out_size,
                    net_input_size=first.net_input_size)


@torch.no_grad()
def merge_spans(folded: nn.Module, spans: Iterable[tuple[int, int]], input_size: tuple[int, int]) -> nn.Module:
    """A copy of ``folded`` with every span ``(a, b)`` merged (module docstring). Spans must not overlap;
    each block of a span must be a FoldedBlock and the span exact, else LatoptError saying which and why."""
    spans = sorted((int(a), int(b)) for a, b in spans)
    out = copy.deepcopy(folded)
    if not spans:
        return out
    for (a0, b0), (a1, _) in zip(spans, spans[1:], strict=False):
        if a1 <= b0:
            raise LatoptError(f"spans {a0}-{b0} and {a1}-… overlap; a block belongs to at most one span")
    blocks = {b.index: b for b in find_blocks(out)}
    size = (int(input_size[0]), int(input_size[1]))
    shapes = block_input_shapes(out, (1, input_channels(out), *size))
    for a, b in spans:
        if a >= b or a not in blocks or b not in blocks:
            raise LatoptError(f"span {a}-{b}: a span is a run of at least two blocks of the network "
                              f"(blocks 0..{len(blocks) - 1})")
        mods = [out.get_submodule(blocks[i].path) for i in range(a, b + 1)]
        not_folded = [a + k for k, m in enumerate(mods) if not isinstance(m, FoldedBlock)]
        if not_folded:
            raise LatoptError(f"span {a}-{b}: block {not_folded[0]} is not folded; a span merges folded blocks")
        fmods = [m for m in mods if isinstance(m, FoldedBlock)]  # all of them
        try:
            conv = compose_span(fmods, (int(shapes[a][-2]), int(shapes[a][-1])))
        except LatoptError as e:
            raise LatoptError(f"span {a}-{b}: {e}") from None
        conv.info = span_info(fmods, conv.conv)
        out.set_submodule(blocks[a].path, conv)
        for k, m in enumerate(fmods[1:], start=a + 1):
            out.set_submodule(blocks[k].path, MergedBlock(dataclasses.replace(m.info, variant="merged")))
    return out


__all__ = ["MergedBlock", "SpanConv", "merge_spans", "span_info"]
