"""The DP's span options: what each timed span of the LUT costs and loses.

A span ``(start, end)`` of the LUT (:class:`latopt.latency.lut.SpanEntry`, timed by ``latopt profile
--variants ...,span``) replaces its blocks by one convolution, exactly, so it computes the same function as
its blocks in their variants: its loss is the sum of those variants' losses (losses add over blocks, as the
DP assumes everywhere) and its cost is the span's one time. For a 1x1 span each block takes its least-loss
variant among ``pw`` and ``drop`` (``pw`` on a tie: it keeps more of the block); for a k×k span one of the
LUT's ``fulls`` takes ``full`` and the others their least-loss ``pw``/``drop`` (the full block giving the least
total). A variant counts only where the block's candidates allow it. The option's name is the variants in
block order, comma-separated (``"pw,full,drop"``): :func:`decode` reads it back.

    span_options(lut, losses) -> ({(start, end): {name: (cost_ms, loss)}}, {(start, end, name): kernel})
    decode(start, name) -> {block: variant}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from latopt.rewrite import SPAN_INNER


def _inner(losses: Mapping[str, float]) -> tuple[str, float] | None:
    opts = [(v, float(losses[v])) for v in SPAN_INNER if v in losses]  # on a tie the first (pw) wins
    return min(opts, key=lambda o: o[1]) if opts else None  # min keeps the first of equal losses


def span_options(lut: Any, losses: Mapping[int, Mapping[str, float]]
                 ) -> tuple[dict[tuple[int, int], dict[str, tuple[float, float]]], dict[tuple[int, int, str], int]]:
    """The spans' options for :func:`latopt.dp.knapsack.solve_chain` (module docstring) and each option's
    kernel (the key the LUT times it under). A span none of whose assignments the losses allow is left out."""
    options: dict[tuple[int, int], dict[str, tuple[float, float]]] = {}
    kernels: dict[tuple[int, int, str], int] = {}
    for s in lut.spans:
        blocks = range(s.start, s.end + 1)
        inner = {i: _inner(losses.get(i, {})) for i in blocks}
        best: tuple[float, list[str]] | None = None
        for f in (s.fulls if s.kernel > 1 else (None,)):
            if f is not None and "full" not in losses.get(f, {}):
                continue
            others = [i for i in blocks if i != f]
            chosen = {i: v for i in others if (v := inner[i]) is not None}
            if len(chosen) != len(others):
                continue
            names = ["full" if i == f else chosen[i][0] for i in blocks]
            loss = sum(float(losses[i]["full"]) if i == f else chosen[i][1] for i in blocks)
            if best is None or loss < best[0]:
                best = (loss, names)
        if best is None:
            continue
        name = ",".join(best[1])
        options.setdefault((s.start, s.end), {})[name] = (s.ms, best[0])
        kernels[(s.start, s.end, name)] = s.kernel
    return options, kernels


def decode(start: int, name: str) -> dict[int, str]:
    """The blocks' variants of a span option named ``name`` that starts at block ``start``."""
    return {start + k: v for k, v in enumerate(name.split(","))}
