"""Merged spans in the LUT: which spans of a model are exact, the module that times one, and the LUT entry.

A span ``(start, end)`` replaces the consecutive blocks ``start..end`` (2 ≤ length ≤ :data:`MAX_SPAN`) by
one convolution (:mod:`latopt.rewrite.span`, :mod:`latopt.rewrite.merge`). Its time depends only on that
convolution's shape: the span's input (block ``start``'s), ``cout`` of block ``end``, the product of the
blocks' strides, and the kernel, 1 when every block of the span is ``pw`` or ``drop`` and ``k`` when one of
them is a ``full`` fold of a k×k block (the others ``pw``/``drop``; only stride-1 blocks before it; TF SAME
padding checked as :func:`latopt.rewrite.span_exact` does). So the profiler times one module per
``(start, end, kernel)`` (:func:`span_candidates`), and the LUT records, for a k×k span, the blocks that may
be its ``full`` fold (``fulls``). In exact mode a k×k span of a block with an expansion carries a bias map
(its border correction): it is timed with it. A ``drop`` needs a residual block (stride 1), as alone.

    MAX_SPAN                                   longest span timed (blocks)
    check_span_profile(variants, fold_mode)    LatoptError unless spans can be profiled with these: exact mode
                                               (export merges spans in exact mode only), pw or drop among the
                                               variants (a span's blocks other than its full fold are pw/drop)
    span_candidates(blocks, shapes, variants, *, max_len=MAX_SPAN) -> list[(start, end, kernel, fulls)]
    span_problem(blocks, start, end, kernel, fulls, shapes) -> str | None   why a LUT's span is not what its
                                               blocks compose to (None: it is); :func:`latopt.latency.lut.check_blocks`
    span_module(blocks, start, end, kernel, fulls, input_shape, fold_mode) -> nn.Module   what is timed
    span_key(start, end, kernel) -> str        "span:3-5:k3" (the profiler's runner)
    span_plans(blocks, candidates, variants) -> {name: (plan, spans)}   the end-to-end networks with spans
    span_scale(scales, kernel) -> float        the calibration scale a span's time takes

The LUT's record of a span is :class:`latopt.latency.lut.SpanEntry` (the LUT stays loadable without torch's
model zoo). Calibration: a span's one convolution takes the scale of the variant whose convolution it is like
(:func:`span_scale`): ``pw``'s (a 1x1 convolution) for a 1x1 span, ``full``'s (a k×k one) for a k×k span. Two
end-to-end networks made of spans check it, both held out: ``all-span`` (maximal 1x1 spans, greedily from the
first block; the rest as-is) and ``held-out-spans`` (k×k spans of at most three blocks with as-is and ``full``
blocks between them). [Post hoc: a scale fitted to ``all-span`` itself was tried first; that network is
mostly stem and head, so the fit was ill-conditioned, and it mispredicted the k×k network far more than
these scales do (the LUTs of ``results/spans/fitted-scale/``).]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from latopt.constants import SPAN_FOLD_MODE
from latopt.errors import LatoptError
from latopt.nets.layers import make_kxk
from latopt.nets.variants import VARIANTS
from latopt.rewrite import SPAN_INNER, SpanConv, span_exact

MAX_SPAN = 6


def span_key(start: int, end: int, kernel: int) -> str:
    return f"span:{start}-{end}:k{kernel}"


def check_span_profile(variants: Sequence[str], fold_mode: str) -> None:
    """LatoptError (before anything is prepared or timed) unless the spans can be profiled with ``variants`` (the
    block variants, :func:`latopt.latency.lut.check_variants`'s) in ``fold_mode``: see the API list above."""
    if fold_mode != SPAN_FOLD_MODE:
        raise LatoptError(f"fold mode {fold_mode!r} with variant span: spans are {SPAN_FOLD_MODE}-mode rewrites "
                          f"(export merges them in {SPAN_FOLD_MODE} mode only), so a {fold_mode} plan could never ship "
                          f"one; profile spans in fold mode {SPAN_FOLD_MODE}, or leave span out", param="fold_mode")
    if not set(SPAN_INNER) & set(variants):
        raise LatoptError(f"variant span merges blocks folded full, {' or '.join(SPAN_INNER)}: profile "
                          f"{' or '.join(SPAN_INNER)} with it too (e.g. full,pw,drop,span)", param="variants")


def _inner_ok(b: Any, variants: Sequence[str]) -> bool:
    return any(v in b.variants and (not VARIANTS[v].timed or v in variants) for v in SPAN_INNER)  # drop: untimed


def span_candidates(blocks: Sequence[Any], shapes: dict[int, tuple[int, ...]], variants: Sequence[str], *,
                    max_len: int = MAX_SPAN) -> list[tuple[int, int, int, tuple[int, ...]]]:
    """Every exact span of ``blocks`` (``latopt.nets.blocks.find_blocks``; ``shapes``: each block's input shape)
    whose blocks can take the variants it needs among the profiled ``variants`` (``drop`` is never timed and
    always available where the block allows it): ``(start, end, kernel, fulls)``, sorted."""
    out: list[tuple[int, int, int, tuple[int, ...]]] = []
    n = len(blocks)
    for a in range(n):
        for b in range(a + 1, min(n, a + max_len)):
            span = blocks[a:b + 1]
            if not all(x.foldable for x in span):
                break
            if all(_inner_ok(x, variants) for x in span):
                out.append((a, b, 1, ()))
            by_kernel: dict[int, list[int]] = {}
            for f, x in enumerate(span):
                if "full" not in x.variants or not all(_inner_ok(y, variants) for k, y in enumerate(span) if k != f):
                    continue
                ok, _ = _full_exact(span, f, shapes[x.index])
                if ok and x.kernel > 1:
                    by_kernel.setdefault(x.kernel, []).append(x.index)
            out.extend((a, b, k, tuple(fs)) for k, fs in sorted(by_kernel.items()))
    return sorted(out)


def _full_exact(span: Sequence[Any], f: int, full_input_shape: Sequence[int]) -> tuple[bool, str]:
    """Whether the blocks ``span`` compose exactly into one convolution of the kernel of ``span[f]`` when that
    block is folded ``full`` and the others ``pw`` (:func:`latopt.rewrite.span_exact`; ``drop`` composes as a
    stride-1 ``pw`` does); ``full_input_shape``: that block's input shape."""
    vs = ["pw"] * len(span)
    vs[f] = "full"
    x = span[f]
    return span_exact(vs, [y.stride for y in span], kernel=x.kernel, padding=x.padding,
                      in_size=(int(full_input_shape[-2]), int(full_input_shape[-1])))


def span_problem(blocks: Sequence[Any], start: int, end: int, kernel: int, fulls: Sequence[int],
                 shapes: Mapping[int, Sequence[int]]) -> str | None:
    """Why the span ``start..end`` recorded as one ``kernel``×``kernel`` convolution whose full fold may be any of
    ``fulls`` is not what the model's ``blocks`` (``latopt.nets.blocks.find_blocks``) compose to (each block's input
    shape in ``shapes``); None when it is. What the DP predicts and reports for a span must be what export ships:
    the composition of its blocks (:mod:`latopt.rewrite.span`)."""
    span = list(blocks[start:end + 1])
    if len(span) != end - start + 1:
        return f"ends after the model's last block ({len(blocks) - 1})"
    bad = next((x for x in span if not x.foldable), None)
    if bad is not None:
        return f"covers block {bad.index}, which cannot be folded ({bad.reason})"
    if kernel == 1:
        ok, why = span_exact(["pw"] * len(span), [x.stride for x in span])
        return None if ok else why
    for f in fulls:
        x = blocks[f]
        if x.kernel != kernel:
            return (f"names block {f} as its full fold, which composes to a {x.kernel}x{x.kernel} convolution, "
                    f"not {kernel}x{kernel}")
        ok, why = _full_exact(span, f - start, shapes[f])
        if not ok:
            return f"is not one convolution with block {f} folded full: {why}"
    return None


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
    bias_map = torch.zeros(1, *y.shape[1:]) if has_map else None  # timed as an Add: the values do not matter
    return SpanConv(conv, bias_map).eval()


def _inner(b: Any, variants: Sequence[str]) -> str:
    """The variant a block takes inside a span: ``pw`` where timed and allowed, else ``drop``."""
    return "pw" if "pw" in b.variants and "pw" in variants else "drop"


def _span_plan(blocks: Sequence[Any], cand: tuple[int, int, int, tuple[int, ...]], variants: Sequence[str],
               plan: dict[int, str]) -> None:
    a, b, k, fulls = cand
    for x in blocks[a:b + 1]:
        plan[x.index] = "full" if k > 1 and x.index == fulls[0] else _inner(x, variants)


def span_plans(blocks: Sequence[Any], candidates: Sequence[tuple[int, int, int, tuple[int, ...]]],
               variants: Sequence[str]) -> dict[str, tuple[dict[int, str], list[tuple[int, int, int]]]]:
    """The end-to-end networks with spans (module docstring): ``{name: (plan, spans)}``, ``plan`` the variant of
    every block in a span, ``spans`` their ``(start, end, kernel)``; empty when there is no candidate."""
    out: dict[str, tuple[dict[int, str], list[tuple[int, int, int]]]] = {}
    by_start: dict[int, list[tuple[int, int, int, tuple[int, ...]]]] = {}
    for c in candidates:
        by_start.setdefault(c[0], []).append(c)
    for name, kernel_ok, max_len, gap in (("all-span", lambda k: k == 1, MAX_SPAN, 0),
                                          ("held-out-spans", lambda k: k > 1, 3, 1)):
        plan: dict[int, str] = {}
        spans: list[tuple[int, int, int]] = []
        i, n = 0, len(blocks)
        while i < n:
            fits = [c for c in by_start.get(i, []) if kernel_ok(c[2]) and c[1] - c[0] < max_len]
            if not fits:
                i += 1
                continue
            c = max(fits, key=lambda c: (c[1], -c[2]))
            _span_plan(blocks, c, variants, plan)
            spans.append(c[:3])
            if gap and c[1] + 1 < n and blocks[c[1] + 1].foldable and len(spans) % 2 == 0:
                plan[blocks[c[1] + 1].index] = "full"  # a folded block between spans, every other gap
            i = c[1] + 1 + gap
        if spans:
            out[name] = (plan, spans)
    return out


def span_scale(scales: dict[str, float], kernel: int) -> float:
    """The scale a span of this ``kernel`` takes: ``pw``'s for 1x1, ``full``'s for k×k, else ``none``'s."""
    return scales.get("pw" if kernel == 1 else "full", scales["none"])
