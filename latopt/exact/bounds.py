"""Pre-activation bounds of every hidden unit over a box: interval arithmetic, then LP relaxation.

Every bound returned here is *sound*: interval bounds carry an explicit float64 rounding slack, and LP
bounds come from weak duality evaluated in float64 (:meth:`Encoding.certified_lower_bound`), not from
the solver's reported optimum. For the first hidden layer interval arithmetic is already exact (a linear
function over a box); deeper layers are tightened by the LP (triangle) relaxation of the big-M encoding,
itself built from the tightest bounds known so far (interval -> LP -> earlier MILP verdicts).
"""

from __future__ import annotations

import highspy
import numpy as np

from latopt.exact.encoding import ACTIVE, INACTIVE, Encoding
from latopt.exact.network import float_slack


def interval_layer(w: np.ndarray, b: np.ndarray, lo_in: np.ndarray, hi_in: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sound bounds of ``w @ h + b`` for ``lo_in <= h <= hi_in``."""
    wp, wn = np.maximum(w, 0.0), np.minimum(w, 0.0)
    hi = wp @ hi_in + wn @ lo_in + b
    lo = wp @ lo_in + wn @ hi_in + b
    slack = float_slack(w, np.maximum(np.abs(lo_in), np.abs(hi_in)), b)
    return lo - slack, hi + slack


def post_activation(lo: np.ndarray, hi: np.ndarray, state: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Bounds of ``relu(z)`` given bounds of ``z`` (and known stability ``state``)."""
    hl, hh = np.maximum(lo, 0.0), np.maximum(hi, 0.0)
    if state is not None:
        hl = np.where(state == ACTIVE, hl, 0.0)
        hh = np.where(state == INACTIVE, 0.0, hh)
    return hl, hh


def lp_bounds(
    enc: Encoding, units: np.ndarray, *, time_limit: float | None = None
) -> tuple[np.ndarray, np.ndarray, int]:
    """Certified LP-relaxation bounds ``(lo, hi)`` of the pre-activations of ``units`` of layer ``enc.upto``.

    Returns ``-inf`` / ``+inf`` for a side whose LP did not solve to optimality; the third value is the
    number of LPs solved.
    """

    lo = np.full(units.size, -np.inf)
    hi = np.full(units.size, np.inf)
    if units.size == 0:
        return lo, hi, 0
    h = enc.highs(integer=False, time_limit=time_limit)
    idx = enc.prev_cols.astype(np.int32)
    n = 0
    for t, unit in enumerate(units):
        for sign in (1.0, -1.0):
            c, c0 = enc.objective(int(unit), sign)
            h.changeColsCost(idx.size, idx, c[idx])
            h.run()
            n += 1
            if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
                continue
            y = np.asarray(h.getSolution().row_dual, dtype=np.float64)
            lb = enc.certified_lower_bound(c, c0, y)
            if sign > 0:
                lo[t] = lb
            else:
                hi[t] = -lb
    return lo, hi, n
