"""An exact multiple-choice knapsack over discretised costs: one option per group, least total loss.

The selection problem of ``latopt plan``: each block (a *group*) takes exactly one variant
(an *option*, ``none`` included) with a cost (its LUT time, ms) and a loss (its importance loss); minimise
the total loss subject to total cost ≤ capacity. Pure Python + numpy, no model here.

**Discretisation, and how it can err.** Costs are rounded *up* to whole units of δ = capacity / resolution
(``units = ceil(cost / δ)``), the capacity down to ``resolution`` units, and the dynamic program is exact
over those integers (:func:`solve`: O(groups × options × resolution)). Rounding up makes it conservative:

- every set it returns meets the capacity with the real (undiscretised) costs — checked on the floats
  before returning, so an arithmetic surprise is an error, never a silent overrun;
- it can miss a better set whose real cost is within the rounding of the capacity: with n groups the
  units over-state a set's cost by less than n·δ, so the returned loss is at most the best loss among
  sets whose real cost is ≤ capacity − n·δ (and never below the best under the capacity itself). With
  the default resolution 20 000 and 17 blocks that slack is < 0.1 % of the budget.

Among sets of equal (least) loss the cheapest in units is returned, so with equal losses (e.g. uniform
importance) the DP picks the fastest of the optimal sets. Losses are equal when they differ by float
rounding only (:data:`TIE_RTOL` relative): a set that is worse by more, however little (1e-9), loses to a
better one, however much more it costs: the loss is what is minimised, the cost only breaks ties. ``tests/test_dp.py`` checks all of this
against brute force on random instances (hypothesis).

**Spans** (:func:`solve_chain`). A span ``(start, end)`` is one unit with its own options that replaces the
consecutive groups ``start..end``; a plan is a partition of the groups, in order, into single groups and
spans. The DP runs over positions: with ``best[p][c]`` the least loss of the first ``p`` groups in at most
``c`` units (``best[0] = 0``), ``best[p][c] = min(best[p-1][c - w] + loss`` over the options of group
``p-1``, ``best[q][c - w] + loss`` over the options of every span covering groups ``q..p-1)``; the answer is
``best[n]``, read back as :func:`solve` does (same discretisation, same tie rule; the slack bound holds with
n = the number of groups, since a plan has at most n units). Equal loss at equal units, at each position the
candidate met first wins (a group's own options in their order, then spans in sorted ``(start, end)`` order), so the same
input always gives the same plan. Without spans it is :func:`solve` — which is implemented as that case.

Public API::

    Solution                                  choice {group: option}, loss, cost (real), units,
                                              spans {(start, end): option} (the groups in a span are not in choice)
    solve(options, capacity, *, resolution=20000) -> Solution | None   None: no set fits
    solve_chain(options, spans, capacity, *, resolution=20000) -> Solution | None   with spans
    discretise(cost, capacity, resolution) -> int                      the units of one cost
    cheapest(options, spans) -> float        the least total real cost of any partition (what no capacity
                                             below allows)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from latopt.errors import LatoptError

DEFAULT_RESOLUTION = 20_000
TIE_RTOL = 1e-12  # two total losses within this (relative, at least 1 absolute) of each other are a tie


@dataclass(frozen=True)
class Solution:
    choice: dict[int, str]   # group -> the option taken
    loss: float              # total loss (sum of the options' losses)
    cost: float              # total real cost
    units: int               # total discretised cost
    spans: dict[tuple[int, int], str] = field(default_factory=dict)  # (start, end) -> the span option taken


def discretise(cost: float, capacity: float, resolution: int) -> int:
    """``ceil(cost / δ)`` with δ = capacity / resolution: a cost in whole units, rounded up."""
    return max(0, math.ceil(cost * resolution / capacity))


def _check_options(label: str, opts: Mapping[str, tuple[float, float]]) -> None:
    if not opts:
        raise LatoptError(f"{label} has no option")
    for o, (cost, loss) in opts.items():
        if not (math.isfinite(cost) and cost >= 0 and math.isfinite(loss)):
            raise LatoptError(f"{label} option {o!r}: cost must be finite >= 0 and loss finite, got "
                              f"({cost!r}, {loss!r})")


def _check(options: Mapping[int, Mapping[str, tuple[float, float]]],
           spans: Mapping[tuple[int, int], Mapping[str, tuple[float, float]]], capacity: float,
           resolution: int) -> None:
    if not (isinstance(resolution, int) and resolution >= 1):
        raise LatoptError(f"the DP's resolution must be a positive integer, not {resolution!r}")
    if not math.isfinite(capacity) or capacity <= 0:
        raise LatoptError(f"the DP's capacity must be a finite number > 0, not {capacity!r}")
    for g, opts in options.items():
        _check_options(f"group {g}", opts)
    for (a, b), opts in spans.items():
        if not (b > a and all(g in options for g in range(a, b + 1))):
            raise LatoptError(f"span ({a!r}, {b!r}): a span is a run of at least two consecutive groups, "
                              f"start < end, all of them among the groups")
        _check_options(f"span ({a}, {b})", opts)


def cheapest(options: Mapping[int, Mapping[str, tuple[float, float]]],
             spans: Mapping[tuple[int, int], Mapping[str, tuple[float, float]]]) -> float:
    """The least total cost of a partition of the groups into single groups and spans, whatever the loss
    (real costs, no discretisation): below it no choice fits."""
    groups = sorted(options)
    pos = {g: p for p, g in enumerate(groups)}
    best = [0.0] + [math.inf] * len(groups)
    for p, g in enumerate(groups, start=1):
        best[p] = best[p - 1] + min(c for c, _ in options[g].values())
        for (a, b), opts in spans.items():
            if pos[b] == p - 1:
                best[p] = min(best[p], best[pos[a]] + min(c for c, _ in opts.values()))
    return best[-1]


def solve(options: Mapping[int, Mapping[str, tuple[float, float]]], capacity: float, *,
          resolution: int = DEFAULT_RESOLUTION) -> Solution | None:
    """The least-loss choice of one option per group with total cost ≤ ``capacity`` (module docstring).

    ``options[group][option] = (cost, loss)``, costs ≥ 0. Returns None when no choice fits (even the
    cheapest option of every group exceeds the capacity in units). :func:`solve_chain` without spans."""
    return solve_chain(options, {}, capacity, resolution=resolution)


def solve_chain(options: Mapping[int, Mapping[str, tuple[float, float]]],
                spans: Mapping[tuple[int, int], Mapping[str, tuple[float, float]]], capacity: float, *,
                resolution: int = DEFAULT_RESOLUTION) -> Solution | None:
    """The least-loss partition of the groups, in order, into single groups (one option each) and spans
    (one span option each) with total cost ≤ ``capacity`` (module docstring: "Spans").

    ``options`` as for :func:`solve`; ``spans[(start, end)][option] = (cost, loss)`` for a unit that
    replaces the groups ``start..end`` (inclusive, end > start, every group in between among ``options``).
    ``Solution.choice`` holds the groups taken singly, ``Solution.spans`` the spans taken. Without spans
    this is :func:`solve` exactly. Returns None when no partition fits."""
    _check(options, spans, capacity, resolution)
    groups = sorted(options)
    pos = {g: p for p, g in enumerate(groups)}
    R = resolution
    inf = math.inf
    # the candidates that end at position p (the plan's last unit covers groups[q..p-1]): the group's
    # options in their order, then the spans ending there, in sorted (start, end) order; (q, key, name, units)
    ending: list[list[tuple[int, int | tuple[int, int], str, int]]] = [
        [(p, g, o, discretise(options[g][o][0], capacity, R)) for o in options[g]] for p, g in enumerate(groups)]
    for span in sorted(spans):
        for o in spans[span]:
            ending[pos[span[1]]].append((pos[span[0]], span, o, discretise(spans[span][o][0], capacity, R)))
    # best[p][c] = least loss of the groups before position p with total units <= c (non-increasing in c)
    best = [np.zeros(R + 1)]
    args: list[np.ndarray] = []
    for cands in ending:  # position p = 1..n
        new = np.full(R + 1, inf)
        arg = np.full(R + 1, -1, dtype=np.int32)
        for k, (q, key, o, w) in enumerate(cands):
            if w > R:
                continue
            loss = (spans[key] if isinstance(key, tuple) else options[key])[o][1]
            cand = best[q][: R + 1 - w] + loss
            better = cand < new[w:]  # strict: an equal candidate later in the list never displaces one before
            new[w:] = np.where(better, cand, new[w:])
            arg[w:] = np.where(better, k, arg[w:])
        args.append(arg)
        best.append(new)
    final = best[-1]
    if not math.isfinite(final[R]):
        return None
    # the cheapest capacity that reaches the least loss (ties in loss go to the cheaper set)
    target = final[R]
    tol = TIE_RTOL * max(1.0, abs(target))
    c = int(np.argmax(final <= target + tol))
    units_total = c
    choice: dict[int, str] = {}
    taken: dict[tuple[int, int], str] = {}
    p = len(groups)
    while p > 0:
        q, key, o, w = ending[p - 1][int(args[p - 1][c])]
        if isinstance(key, tuple):
            taken[key] = o
        else:
            choice[key] = o
        c -= w
        p = q
    choice = dict(sorted(choice.items()))
    taken = dict(sorted(taken.items()))
    items = [options[g][o] for g, o in choice.items()] + [spans[s][o] for s, o in taken.items()]
    cost = math.fsum(x[0] for x in items)
    loss = math.fsum(x[1] for x in items)
    if cost > capacity:  # cannot happen with costs rounded up; checked on the real numbers all the same
        raise LatoptError(f"the DP's choice costs {cost!r} > capacity {capacity!r}: discretisation error")
    return Solution(choice, loss, cost, units_total - c, taken)
