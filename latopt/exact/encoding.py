"""Big-M encoding of the first ``k`` hidden layers of a ReLU network over a box, for HiGHS (``highspy``).

Columns: the inputs ``x`` (box bounds), then the post-activations ``h_j`` of every hidden layer ``j < k``,
then one binary ``a`` per *unstable* unit. With certified pre-activation bounds ``l <= z <= u``:

* stably inactive unit: ``h = 0`` and the (valid) row ``W h_prev + b <= 0``;
* stably active unit:   ``h = W h_prev + b`` (``h`` in ``[max(l, 0), u]``);
* unstable unit:        ``h >= z``, ``h <= z - l (1 - a)``, ``h <= u a``, ``h >= 0``, ``a`` in {0, 1}.

With ``integer=False`` the binaries are relaxed to ``[0, 1]``, which is the triangle (LP) relaxation.
The objective is the pre-activation of one unit of layer ``k`` (``objective``).

:func:`certified_lower_bound` turns any row-dual vector of an LP into a *rigorous* lower bound on the LP's
minimum (weak duality evaluated in float64, box bounds on every column), so LP bounds never depend on the
solver's tolerances.
"""

from __future__ import annotations

from dataclasses import dataclass

import highspy
import numpy as np
import scipy.sparse as sp

from latopt.exact.lp import new_highs
from latopt.exact.network import Box, ReluMLP

INACTIVE, UNSTABLE, ACTIVE = -1, 0, 1


@dataclass
class Encoding:
    net: ReluMLP
    box: Box
    upto: int  # hidden layers 0..upto-1 are encoded; the objective is a unit of layer `upto`
    a: sp.csr_matrix
    row_lo: np.ndarray
    row_hi: np.ndarray
    col_lo: np.ndarray
    col_hi: np.ndarray
    binaries: np.ndarray  # column indices of the binaries
    prev_cols: np.ndarray  # columns feeding layer `upto` (x when upto == 0)

    @property
    def n_cols(self) -> int:
        return int(self.col_lo.size)

    def objective(self, unit: int, sign: float) -> tuple[np.ndarray, float]:
        """Cost vector and offset of ``sign * z_unit`` (layer ``upto``)."""
        c = np.zeros(self.n_cols)
        c[self.prev_cols] = sign * self.net.weights[self.upto][unit]
        return c, float(sign * self.net.biases[self.upto][unit])

    def highs(self, integer: bool, *, time_limit: float | None = None) -> highspy.Highs:
        """A silent ``highspy.Highs`` holding this model (binaries integral when ``integer``)."""


        h = new_highs()
        lp = highspy.HighsLp()
        csc = self.a.tocsc()
        csc.sort_indices()
        lp.num_col_ = self.n_cols
        lp.num_row_ = int(self.row_lo.size)
        lp.col_cost_ = np.zeros(self.n_cols)
        lp.col_lower_ = self.col_lo
        lp.col_upper_ = self.col_hi
        lp.row_lower_ = self.row_lo
        lp.row_upper_ = self.row_hi
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = csc.indptr.astype(np.int32)
        lp.a_matrix_.index_ = csc.indices.astype(np.int32)
        lp.a_matrix_.value_ = csc.data.astype(np.float64)
        lp.a_matrix_.num_col_ = self.n_cols
        lp.a_matrix_.num_row_ = int(self.row_lo.size)
        if integer and self.binaries.size:
            integ = [highspy.HighsVarType.kContinuous] * self.n_cols
            for j in self.binaries:
                integ[int(j)] = highspy.HighsVarType.kInteger
            lp.integrality_ = integ
        h.passModel(lp)
        if time_limit is not None:
            h.setOptionValue("time_limit", float(time_limit))
        return h

    def certified_lower_bound(self, c: np.ndarray, c0: float, row_dual: np.ndarray) -> float:
        """A rigorous lower bound on ``min c.v + c0`` over the LP relaxation, from any row multipliers."""
        best = -np.inf
        for y in (np.asarray(row_dual, dtype=np.float64), -np.asarray(row_dual, dtype=np.float64)):
            y = y.copy()
            y[(y > 0) & ~np.isfinite(self.row_lo)] = 0.0
            y[(y < 0) & ~np.isfinite(self.row_hi)] = 0.0
            r = c - self.a.T @ y
            row_part = np.where(y > 0, y * np.where(np.isfinite(self.row_lo), self.row_lo, 0.0), 0.0) + np.where(
                y < 0, y * np.where(np.isfinite(self.row_hi), self.row_hi, 0.0), 0.0
            )
            col_part = np.where(r > 0, r * self.col_lo, r * self.col_hi)
            terms = np.concatenate([row_part, col_part, [c0]])
            val = float(np.sum(terms))
            # float64 rounding of the sums above (and of A^T y) cannot exceed this:
            slack = 4.0 * terms.size * np.finfo(np.float64).eps * (
                float(np.sum(np.abs(terms)))
                + float(abs(self.a).T @ np.abs(y) @ np.maximum(np.abs(self.col_lo), np.abs(self.col_hi)))
            )
            best = max(best, val - slack)
        return best


def build_encoding(
    net: ReluMLP,
    box: Box,
    bounds: list[tuple[np.ndarray, np.ndarray]],
    states: list[np.ndarray],
    upto: int,
) -> Encoding:
    """Encode hidden layers ``0 .. upto-1`` with their certified ``bounds`` and stability ``states``."""
    n0 = net.sizes[0]
    # column layout
    h_cols: list[np.ndarray] = []
    ncol = n0
    for j in range(upto):
        h_cols.append(np.arange(ncol, ncol + net.sizes[j + 1]))
        ncol += net.sizes[j + 1]
    unstable = [np.flatnonzero(states[j] == UNSTABLE) for j in range(upto)]
    bin_cols: list[np.ndarray] = []
    bin_start = ncol
    for u in unstable:
        bin_cols.append(np.arange(ncol, ncol + u.size))
        ncol += u.size
    col_lo = [box.lo.copy()]
    col_hi = [box.hi.copy()]
    for j in range(upto):
        lo, hi = bounds[j]
        st = states[j]
        hl = np.where(st == ACTIVE, np.maximum(lo, 0.0), 0.0)
        hh = np.where(st == INACTIVE, 0.0, np.maximum(hi, 0.0))
        col_lo.append(hl)
        col_hi.append(np.maximum(hh, hl))
    n_bin = ncol - bin_start
    col_lo.append(np.zeros(n_bin))
    col_hi.append(np.ones(n_bin))

    blocks: list[sp.csr_matrix] = []
    rlo: list[np.ndarray] = []
    rhi: list[np.ndarray] = []

    def add(units: np.ndarray, pcols: np.ndarray, w: np.ndarray | None, w_sign: float, hcols: np.ndarray | None,
            bcols: np.ndarray | None, bcoef: np.ndarray | None, lo_: np.ndarray, hi_: np.ndarray) -> None:
        """Rows ``h_i + w_sign * W_i h_prev + bcoef_i a_i`` in ``[lo_, hi_]`` for ``units``."""
        if units.size == 0:
            return
        m = np.zeros((units.size, ncol))
        if w is not None:
            m[:, pcols] = w_sign * w[units]
        r = np.arange(units.size)
        if hcols is not None:
            m[r, hcols[units]] = 1.0
        if bcols is not None:
            m[r, bcols] = bcoef
        blocks.append(sp.csr_matrix(m))
        rlo.append(lo_)
        rhi.append(hi_)

    prev = np.arange(n0)
    for j in range(upto):
        w, b = net.weights[j], net.biases[j]
        lo, hi = bounds[j]
        st = states[j]
        act = np.flatnonzero(st == ACTIVE)
        ina = np.flatnonzero(st == INACTIVE)
        uns = unstable[j]
        inf = np.full(uns.size, np.inf)
        # stably active: h - W h_prev = b
        add(act, prev, w, -1.0, h_cols[j], None, None, b[act], b[act])
        # stably inactive: W h_prev <= -b
        add(ina, prev, w, 1.0, None, None, None, np.full(ina.size, -np.inf), -b[ina])
        # unstable: h - W h_prev >= b ; h - W h_prev - l a <= b - l ; h - u a <= 0
        add(uns, prev, w, -1.0, h_cols[j], None, None, b[uns], inf)
        add(uns, prev, w, -1.0, h_cols[j], bin_cols[j], -lo[uns], -inf, b[uns] - lo[uns])
        add(uns, prev, None, 0.0, h_cols[j], bin_cols[j], -hi[uns], -inf, np.zeros(uns.size))
        prev = h_cols[j]
    a = sp.vstack(blocks, format="csr") if blocks else sp.csr_matrix((0, ncol))
    return Encoding(
        net=net,
        box=box,
        upto=upto,
        a=a,
        row_lo=np.concatenate(rlo) if rlo else np.zeros(0),
        row_hi=np.concatenate(rhi) if rhi else np.zeros(0),
        col_lo=np.concatenate(col_lo),
        col_hi=np.concatenate(col_hi),
        binaries=np.arange(bin_start, ncol),
        prev_cols=prev,
    )
