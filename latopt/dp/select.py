"""The DP's choice on the LUT: :func:`select_plan`, the least-loss plan whose LUT-predicted latency is within a
budget (the chain DP over single blocks and merged spans), and :func:`check_budget`. Apart from
:mod:`latopt.dp.dp_stage` (which applies a plan) so that the budget loop (:mod:`latopt.dp.budgetloop`), which
re-solves, and the stage, which runs the loop, import it without a circle."""

from __future__ import annotations

from collections.abc import Mapping

from latopt.dp.knapsack import DEFAULT_RESOLUTION, cheapest, solve_chain
from latopt.dp.plan_record import Selection
from latopt.dp.span_options import decode, span_options
from latopt.errors import LatoptError
from latopt.latency.backends.count import lut_unit
from latopt.latency.lut import LUT, predict


def check_budget(budget: float, param: str = "budget") -> float:
    """``budget`` as a float in (0, 1]; else one error line naming the parameter ``param`` it came as."""
    b = float(budget)
    if not 0 < b <= 1:
        raise LatoptError(f"{param} {budget!r}: a fraction of the as-is latency in (0, 1], e.g. 0.6", param=param)
    return b


def select_plan(lut: LUT, losses: Mapping[int, Mapping[str, float]], budget: float, *,
                resolution: int = DEFAULT_RESOLUTION, spans: bool = True) -> tuple[dict[int, str], Selection]:
    """The least-loss plan whose LUT-predicted latency is ≤ ``budget`` × the as-is prediction.

    ``losses[block][variant]`` (``none`` included; :func:`latopt.dp.importance.variant_losses`): the
    options of each block; a block missing from ``losses`` stays as it is. With ``spans`` and a LUT that
    times spans, the DP chooses over spans and single blocks together (:func:`latopt.dp.knapsack.solve_chain`,
    :mod:`latopt.dp.span_options`). Returns (plan {block: variant} without the ``none`` blocks, the blocks of a span
    included, and its :class:`~latopt.dp.plan_record.Selection`: budget, asis_ms, target_ms, predicted_ms (undiscretised,
    ≤ target), ratio, loss, resolution, slack_ms = the most the discretisation can leave unused, spans =
    [[start, end, kernel], ...] merged into one convolution each)."""
    budget = check_budget(budget)
    u = lut_unit(lut)   # ms, or a count device's unit
    asis = predict(lut, {})
    target = budget * asis
    capacity = target - lut.fixed_ms
    options: dict[int, dict[str, tuple[float, float]]] = {}
    for b in lut.blocks:
        opts = losses.get(b.index, {"none": 0.0})
        if "none" not in opts:
            raise LatoptError(f"block {b.index}: the losses have no entry for 'none' (the block as it is)")
        missing = [v for v in opts if v not in b.ms]
        if missing:
            raise LatoptError(f"block {b.index}: the LUT has no time for variant {missing[0]!r}")
        times: dict[str, float] = dict(b.ms.items())
        options[b.index] = {v: (times[v], float(loss)) for v, loss in opts.items()}
    span_opts, kernels = span_options(lut, losses) if spans else ({}, {})
    fastest = lut.fixed_ms + cheapest(options, span_opts)
    sol = solve_chain(options, span_opts, capacity, resolution=resolution) if capacity > 0 else None
    if sol is None:
        raise LatoptError(f"budget {budget} ({target:.3f} {u} of the as-is {asis:.3f} {u}) is below the fastest "
                          f"network these variants allow ({fastest:.3f} {u} = {fastest / asis:.3f} of as-is); raise "
                          "the budget or allow more variants (profile the device with the variants full, pw and drop)")
    plan = {i: v for i, v in sol.choice.items() if v != "none"}
    merged = [[a, b, kernels[(a, b, name)]] for (a, b), name in sol.spans.items()]
    for (a, _), name in sol.spans.items():
        plan.update(decode(a, name))
    plan = dict(sorted(plan.items()))
    pred = predict(lut, plan, merged)
    if pred > target * (1 + 1e-12):  # the final check, on the undiscretised prediction
        raise LatoptError(f"the DP's plan is predicted at {pred:.4f} {u} > the budget's {target:.4f} {u}")
    return plan, Selection(budget=budget, asis_ms=asis, target_ms=target, predicted_ms=pred, ratio=pred / asis,
                           fastest_ms=fastest, loss=float(sol.loss), resolution=resolution,
                           slack_ms=len(options) * capacity / resolution, spans=merged, unit=u)
