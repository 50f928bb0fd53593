"""Merged spans in the LUT: which spans of a model are exact, the module that times one, and the LUT entry.

A span ``(start, end)`` replaces the consecutive blocks ``start..end`` (2 ≤ length ≤ :data:`MAX_SPAN`) by
one convolution (:mod:`latopt.fold.span`, :mod:`latopt.fold.merge`). Its time depends only on that
convolution's shape: the span's input (block ``start``'s), ``cout`` of block ``end``, the product of the
blocks' strides, and the kernel, 1 when every block of the span is ``pw`` or ``drop`` and ``k`` when one of
them is a ``full`` fold of a k×k block (the others ``pw``/``drop``; only stride-1 blocks before it; TF SAME
padding checked as :func:`latopt.fold.span_exact` does). So the profiler times one module per
``(start, end, kernel)`` (:func:`span_candidates`), and the LUT records, for a k×k span, the blocks that may
be its ``full`` fold (``fulls``). In exact mode a k×k span of a block with an expansion carries a bias map
(its border correction): it is timed with it. A ``drop`` needs a residual block (stride 1), as alone.

    MAX_SPAN                                   longest span timed (blocks)
    SpanEntry                                  LUT record: start, end, kernel, fulls, raw (stats), ms
    span_candidates(blocks, shapes, variants, *, max_len=MAX_SPAN) -> list[(start, end, kernel, fulls)]
    span_module(blocks, start, end, kernel, fulls, input_shape, fold_mode) -> nn.Module   what is timed
    span_key(start, end, kernel) -> str        "span:3-5:k3" (the profiler's runner and the LUT's key)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, Any

import torch
from pydantic import Field

from latopt.fold import SpanConv, span_exact
from latopt.layers import make_kxk
from latopt.records import StrictModel

MAX_SPAN = 6
SPAN_INNER = ("pw", "drop")  # what the other blocks of a span may be (1x1 or the identity)


class SpanEntry(StrictModel):
    """One timed span: blocks ``start..end`` as one ``kernel``×``kernel`` convolution; ``fulls``: the blocks
    that may be its ``full`` fold (empty for a 1x1 span); ``raw``: the measured statistics (TimingStats'
    JSON form); ``ms``: calibrated (``scales["span"]`` × raw median)."""

    start: Annotated[int, Field(ge=0)]
    end: Annotated[int, Field(ge=1)]
    kernel: Annotated[int, Field(ge=1)]
    fulls: tuple[int, ...] = ()
    raw: dict[str, Any]
    ms: Annotated[float, Field(ge=0)]


def span_key(start: int, end: int, kernel: int) -> str:
    return f"span:{start}-{end}:k{kernel}"


def _inner_ok(b: Any, variants: Sequence[str]) -> bool:
    return any(v in b.variants and (v == "drop" or v in variants) for v in SPAN_INNER)


def span_candidates(blocks: Sequence[Any], shapes: dict[int, tuple[int, ...]], variants: Sequence[str], *,
                    max_len: int = MAX_SPAN) -> list[tuple[int, int, int, tuple[int, ...]]]:
    """Every exact span of ``blocks`` (``latopt.blocks.find_blocks``; ``shapes``: each block's input shape)
    whose blocks can take the variants it needs among the profiled ``variants`` (``drop`` is never timed and
    always available where the block allows it): ``(start, end, kernel, fulls)``, sorted."""
    out = []
    n = len(blocks)
    for a in range(n):
        for b in range(a + 1, min(n, a + max_len)):
            span = blocks[a:b + 1]
            if not all(x.foldable for x in span):
                break
            strides = [x.stride for x in span]
            if all(_inner_ok(x, variants) for x in span):
                out.append((a, b, 1, ()))
            by_kernel: dict[int, list[int]] = {}
            for f, x in enumerate(span):
                if "full" not in x.variants or not all(_inner_ok(y, variants) for k, y in enumerate(span) if k != f):
                    continue
                vs = ["pw"] * len(span)
                vs[f] = "full"
                ok, _ = span_exact(vs, strides, kernel=x.kernel, padding=x.padding,
                                   in_size=tuple(shapes[x.index][-2:]))
                if ok and x.kernel > 1:
                    by_kernel.setdefault(x.kernel, []).append(x.index)
            out.extend((a, b, k, tuple(fs)) for k, fs in sorted(by_kernel.items()))
    return sorted(out)


def span_module(blocks: Sequence[Any], start: int, end: int, kernel: int, fulls: Sequence[int],
                input_shape: tuple[int, ...], fold_mode: str) -> SpanConv:
    """The module a span ships as, with random weights: its one convolution (+ the bias map in exact mode for
    a k×k span of a block with an expansion). The first of ``fulls`` gives the padding (they agree: the
    span is exact for each)."""
    span = blocks[start:end + 1]
    stride = math.prod(x.stride for x in span)
    cin, cout = span[0].cin, span[-1].cout
    if kernel > 1:
        f = next(x for x in span if x.index == fulls[0])
        conv = make_kxk(cin, cout, kernel, stride, f.padding)
    else:
        conv = torch.nn.Conv2d(cin, cout, 1, stride, bias=True)
    with torch.no_grad():
        y = conv(torch.zeros(1, *input_shape[1:]))
    has_map = fold_mode == "exact" and kernel > 1 and any(x.has_expand for x in span if x.index in fulls)
    bias_map = torch.randn(1, *y.shape[1:]) * 0.01 if has_map else None
    return SpanConv(conv, bias_map).eval()
