"""Small dense LPs over a box with HiGHS: ``min c.x  s.t.  G x <= g,  lo <= x <= hi``.

Used for linear-region work: inside one activation region every pre-activation is an affine function of
``x`` (:func:`local_affine`), so "is this region full-dimensional", "how far is its Chebyshev centre from
its walls" and "how negative can this unit get here" are LPs in ``x`` alone.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import highspy
import numpy as np

from latopt.exact.network import ReluMLP

_BANNER_DONE = False


def new_highs() -> highspy.Highs:
    """A silent ``highspy.Highs``; the licence banner HiGHS prints on its first construction is swallowed."""
    global _BANNER_DONE
    if _BANNER_DONE:
        h = highspy.Highs()
    else:
        sys.stdout.flush()
        saved = os.dup(1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 1)
            h = highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            os.close(devnull)
        _BANNER_DONE = True
    h.silent()
    return h


@dataclass(frozen=True)
class LPResult:
    ok: bool
    x: np.ndarray | None
    value: float


def solve_lp(c: np.ndarray, g: np.ndarray, h: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> LPResult:
    """Minimise ``c.x`` subject to ``g @ x <= h`` and ``lo <= x <= hi`` (dense; small problems)."""

    hs = new_highs()
    n = c.size
    m = int(h.size)
    lp = highspy.HighsLp()
    lp.num_col_ = n
    lp.num_row_ = m
    lp.col_cost_ = np.asarray(c, dtype=np.float64)
    lp.col_lower_ = np.asarray(lo, dtype=np.float64)
    lp.col_upper_ = np.asarray(hi, dtype=np.float64)
    lp.row_lower_ = np.full(m, -np.inf)
    lp.row_upper_ = np.asarray(h, dtype=np.float64)
    g = np.asarray(g, dtype=np.float64).reshape(m, n)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    nz = g != 0
    lp.a_matrix_.start_ = np.concatenate([[0], np.cumsum(nz.sum(0))]).astype(np.int32)
    rows, cols = np.nonzero(nz.T)  # column-major order: (col, row) pairs
    lp.a_matrix_.index_ = cols.astype(np.int32)
    lp.a_matrix_.value_ = g.T[rows, cols]
    lp.a_matrix_.num_col_ = n
    lp.a_matrix_.num_row_ = m
    hs.passModel(lp)
    hs.run()
    if hs.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return LPResult(False, None, np.inf)
    x = np.asarray(hs.getSolution().col_value, dtype=np.float64)
    return LPResult(True, x, float(c @ x))


def local_affine(net: ReluMLP, pattern: list[np.ndarray], upto: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """``[(A_k, c_k)]``: the pre-activations ``z_k = A_k x + c_k`` of hidden layers ``k < upto`` (default all,
    plus the output as the last entry when ``upto`` is None) on the region with activation ``pattern``."""
    L = net.n_hidden_layers
    stop = L + 1 if upto is None else upto
    a = np.eye(net.sizes[0])
    c = np.zeros(net.sizes[0])
    out = []
    for k in range(stop):
        zk_a = net.weights[k] @ a
        zk_c = net.weights[k] @ c + net.biases[k]
        out.append((zk_a, zk_c))
        if k < L and k < len(pattern):
            mask = pattern[k].astype(np.float64)
            a = zk_a * mask[:, None]
            c = zk_c * mask
    return out


def region_rows(affines: list[tuple[np.ndarray, np.ndarray]], pattern: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``G x <= g`` of the region: active units ``z >= 0``, inactive ``z <= 0``."""
    gs, hs = [], []
    for (a, c), p in zip(affines, pattern, strict=False):
        sgn = np.where(p, -1.0, 1.0)  # active: -z <= 0 ; inactive: z <= 0
        gs.append(sgn[:, None] * a)
        hs.append(-sgn * c)
    if not gs:
        return np.zeros((0, 0)), np.zeros(0)
    return np.vstack(gs), np.concatenate(hs)
