"""An exact multiple-choice knapsack over discretised costs: one option per group, least total loss.

The selection problem of ``latopt search --method dp``: each block (a *group*) takes exactly one variant
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

Public API::

    Solution                                  choice {group: option}, loss, cost (real), units
    solve(options, capacity, *, resolution=20000) -> Solution | None   None: no set fits
    discretise(cost, capacity, resolution) -> int                      the units of one cost
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

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


def discretise(cost: float, capacity: float, resolution: int) -> int:
    """``ceil(cost / δ)`` with δ = capacity / resolution: a cost in whole units, rounded up."""
    return max(0, math.ceil(cost * resolution / capacity))


def _check(options: Mapping[int, Mapping[str, tuple[float, float]]], capacity: float, resolution: int) -> None:
    if not (isinstance(resolution, int) and resolution >= 1):
        raise LatoptError(f"the DP's resolution must be a positive integer, not {resolution!r}")
    if not math.isfinite(capacity) or capacity <= 0:
        raise LatoptError(f"the DP's capacity must be a finite number > 0, not {capacity!r}")
    for g, opts in options.items():
        if not opts:
            raise LatoptError(f"group {g} has no option")
        for o, (cost, loss) in opts.items():
            if not (math.isfinite(cost) and cost >= 0 and math.isfinite(loss)):
                raise LatoptError(f"group {g} option {o!r}: cost must be finite >= 0 and loss finite, got "
                                  f"({cost!r}, {loss!r})")


def solve(options: Mapping[int, Mapping[str, tuple[float, float]]], capacity: float, *,
          resolution: int = DEFAULT_RESOLUTION) -> Solution | None:
    """The least-loss choice of one option per group with total cost ≤ ``capacity`` (module docstring).

    ``options[group][option] = (cost, loss)``, costs ≥ 0. Returns None when no choice fits (even the
    cheapest option of every group exceeds the capacity in units)."""
    _check(options, capacity, resolution)
    groups = sorted(options)
    R = resolution
    inf = math.inf
    # best[c] = least loss of the groups so far with total units <= c (non-increasing in c)
    best = np.zeros(R + 1)
    picks: list[tuple[list[str], np.ndarray]] = []
    for g in groups:
        names = list(options[g])
        new = np.full(R + 1, inf)
        arg = np.full(R + 1, -1, dtype=np.int16)
        for k, o in enumerate(names):
            cost, loss = options[g][o]
            w = discretise(cost, capacity, R)
            if w > R:
                continue
            cand = best[: R + 1 - w] + loss
            better = cand < new[w:]
            new[w:] = np.where(better, cand, new[w:])
            arg[w:] = np.where(better, k, arg[w:])
        picks.append((names, arg))
        best = new
    if not math.isfinite(best[R]):
        return None
    # the cheapest capacity that reaches the least loss (ties in loss go to the cheaper set)
    target = best[R]
    tol = TIE_RTOL * max(1.0, abs(target))
    c = int(np.argmax(best <= target + tol))
    units_total = c
    choice: dict[int, str] = {}
    for g, (names, arg) in zip(reversed(groups), reversed(picks), strict=True):
        k = int(arg[c])
        o = names[k]
        choice[g] = o
        c -= discretise(options[g][o][0], capacity, R)
    choice = dict(sorted(choice.items()))
    cost = math.fsum(options[g][o][0] for g, o in choice.items())
    loss = math.fsum(options[g][o][1] for g, o in choice.items())
    if cost > capacity:  # cannot happen with costs rounded up; checked on the real numbers all the same
        raise LatoptError(f"the DP's choice costs {cost!r} > capacity {capacity!r}: discretisation error")
    return Solution(choice, loss, cost, units_total - c)
