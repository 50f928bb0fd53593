"""Shallow rewrites of a small ReLU network from its linear regions (regions from :mod:`latopt.exact.regions`).

Both rewrites read the network as ``f(x) = f_r(x) = A_r x + c_r`` on region ``r``, each region being the
intersection of the box with the half-spaces of its *facets* (irredundant hyperplanes, unit normals).
Hyperplanes shared by regions are merged, and oriented so that ``G_k(c') > 0`` at a fixed generic point ``c'``
inside the box. ``m_r`` is a lower and ``M_r`` an upper bound of ``f_r`` over the whole box.

**(a) eps-network** (the seed's global 2-hidden-layer approximation): a plain ``nn.Sequential``.
Layer 1: ``relu(x - lo)`` (pass-through) and, per hyperplane, ``relu(G/eps + 1)``, ``relu(G/eps)``,
``relu(G/eps - 1)``, which give the ramps ``pos = 1[G >= eps]`` and ``neg = 1[G <= -eps]`` (exact outside the
eps-band, 0 on the wrong side). Layer 2, per region: ``C_r = sum of its facets' ramps``,
``p_ro = relu(f_ro(x) - m_ro - (M_ro - m_ro)(n_r - C_r))`` per output and ``q_r = relu(C_r - n_r + 1)``.
Output ``y_o = sum_r p_ro + m_ro q_r``. At every point whose distance to each facet hyperplane of its region
is ``>= eps``, ``C_r = n_r`` for its region and ``<= n_r - 1`` for every other, so ``y = f(x)`` exactly.
Weights grow like ``1/eps``.

**(b) exact 3-layer network** with infinite weights in their limit semantics (Villani & Schoots, "Any Deep
ReLU Network Is Shallow"), implemented with explicit indicator units (:class:`IndicatorNet`):
layer 1 has the pass-through units and one step unit per hyperplane, ``s_k = 1[G_k >= 0]``
(``= lim_{t->inf} relu(t G + 1) - relu(t G)``); layer 2 has, per region, the same ``p_ro`` / ``q_r`` units
with pre-activation ``a + t * (-V_r)``, ``t -> inf``, where ``V_r`` counts the region's violated facets
(0 or a positive integer), i.e. ``relu(a)`` when ``V_r = 0`` and 0 otherwise. Each point of the box is assigned
to exactly one region -- the one entered when moving from ``x`` towards ``c'`` (on a hyperplane: the side
of ``c'``) -- and ``f`` is continuous, so the result equals ``f`` everywhere on the box, boundaries included.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from latopt.errors import LatoptError
from latopt.exact.exact_record import Widths
from latopt.exact.network import Box, ReluMLP
from latopt.exact.regions import RegionEnumeration, irredundant, pattern_ids


@dataclass
class Hyperplanes:
    """Merged facet hyperplanes ``G_k(x) = normals[k] @ x + offsets[k]`` and each region's facets."""

    normals: np.ndarray  # (H, n_in), unit norm
    offsets: np.ndarray  # (H,)
    facets: list[np.ndarray]  # per region: hyperplane indices
    sides: list[np.ndarray]  # per region: +1 (region in G >= 0) or -1
    anchor: np.ndarray  # the generic point c'

    @property
    def count(self) -> int:
        return int(self.offsets.size)


def collect_hyperplanes(enum: RegionEnumeration, *, seed: int = 0, tol: float = 1e-9) -> Hyperplanes:
    """Irredundant facets of every region, merged across regions (tolerance ``tol`` on unit normals)."""
    box = enum.box
    scale = max(1.0, float(np.max(np.abs(np.concatenate([box.lo, box.hi])))))
    raw = []
    for reg in enum.regions:
        idx = irredundant(reg, box, tol * box.diameter)
        # inside: rows @ x <= rhs  <=>  g(x) = rhs - rows @ x >= 0
        raw.append((-reg.rows[idx], reg.rhs[idx]))
    rng = np.random.default_rng(seed)
    allv = np.concatenate([np.hstack([n, o[:, None]]) for n, o in raw]) if raw else np.zeros((0, box.dim + 1))
    for _ in range(100):
        anchor = box.center + (rng.random(box.dim) - 0.5) * 0.2 * (box.hi - box.lo)
        vals = allv[:, :-1] @ anchor + allv[:, -1]
        if vals.size == 0 or np.min(np.abs(vals)) > 1e-6 * box.diameter:
            break
    else:  # pragma: no cover - 100 random points all within 1e-6 of a hyperplane
        raise LatoptError("could not find a generic anchor point for the shallow rewrite")
    normals: list[np.ndarray] = []
    offsets: list[float] = []
    facets, sides = [], []
    for n_r, o_r in raw:
        f_idx, f_side = [], []
        for nv, ov in zip(n_r, o_r, strict=True):
            s = 1.0 if nv @ anchor + ov > 0 else -1.0
            cn, co = s * nv, s * ov  # oriented: G(anchor) > 0 ; region side = s
            hit = -1
            if normals:
                d = np.abs(np.asarray(normals) - cn).max(1) + np.abs(np.asarray(offsets) - co) / scale
                j = int(np.argmin(d))
                if d[j] <= 1e-7:
                    hit = j
            if hit < 0:
                normals.append(cn)
                offsets.append(co)
                hit = len(normals) - 1
            f_idx.append(hit)
            f_side.append(s)
        facets.append(np.array(f_idx, dtype=np.int64))
        sides.append(np.array(f_side))
    nrm = np.asarray(normals).reshape(-1, box.dim)
    return Hyperplanes(nrm, np.asarray(offsets, dtype=np.float64), facets, sides, anchor)


def _output_bounds(a: np.ndarray, c: np.ndarray, box: Box) -> tuple[np.ndarray, np.ndarray]:
    ap, an = np.maximum(a, 0), np.minimum(a, 0)
    lo = ap @ box.lo + an @ box.hi + c
    hi = ap @ box.hi + an @ box.lo + c
    pad = 1e-9 * (np.abs(a) @ np.maximum(np.abs(box.lo), np.abs(box.hi)) + np.abs(c)) + 1e-12
    return lo - pad, hi + pad


def _layer2(enum: RegionEnumeration, feat_cols: int, region_terms) -> tuple:
    """Layer 2 and output, shared by both rewrites.

    Per region ``r`` and output ``o`` a unit with finite pre-activation ``f_ro(x) - m_ro`` and per region one
    unit with finite part ``1``; every unit also gets the count term ``C_r - n_r`` (``<= 0``, 0 exactly on the
    region), multiplied by ``big`` (``M_ro - m_ro``, or 1) in (a) and by ``t -> inf`` in (b).
    Returns ``(w2, b2, cnt_w, cnt_b, big, w3, b3)``.
    """
    n0 = enum.box.dim
    m = enum.sizes[-1]
    K = enum.count
    w2 = np.zeros((K * (m + 1), feat_cols))
    b2 = np.zeros(K * (m + 1))
    cnt_w = np.zeros((K * (m + 1), feat_cols))
    cnt_b = np.zeros(K * (m + 1))
    big = np.ones(K * (m + 1))
    w3 = np.zeros((m, K * (m + 1)))
    b3 = np.zeros(m)
    for r, reg in enumerate(enum.regions):
        a, c = reg.affine
        lo, hi = _output_bounds(a, c, enum.box)
        cw, cb, n_r = region_terms(r)  # C_r = cw @ h1 + cb  (satisfied facets), n_r facets
        rows = slice(r * (m + 1), (r + 1) * (m + 1))
        cnt_w[rows] = cw
        cnt_b[rows] = cb - n_r
        for o in range(m):
            u = r * (m + 1) + o
            # f_ro(x) - m_ro with x = (pass-through) + lo_box; pass-through units are the first n0 features
            w2[u, :n0] = a[o]
            b2[u] = a[o] @ enum.box.lo + c[o] - lo[o]
            big[u] = (hi[o] - lo[o]) * (1 + 1e-9) + 1e-12
            w3[o, u] = 1.0
        q = r * (m + 1) + m
        b2[q] = 1.0
        w3[:, q] = lo
    return w2, b2, cnt_w, cnt_b, big, w3, b3


def eps_network(enum: RegionEnumeration, hp: Hyperplanes, eps: float) -> ReluMLP:
    """The rewrite (a): a plain 2-hidden-layer ReLU network (see the module docstring)."""
    if not (eps > 0 and np.isfinite(eps)):
        raise LatoptError(f"eps = {eps}: the ε-network's epsilon must be a positive number", param="eps")
    box = enum.box
    n0, H = box.dim, hp.count
    # layer 1: pass-through, then per hyperplane (u0, u1, u2) = relu(G/eps + 1), relu(G/eps), relu(G/eps - 1)
    w1 = np.zeros((n0 + 3 * H, n0))
    b1 = np.zeros(n0 + 3 * H)
    w1[:n0] = np.eye(n0)
    b1[:n0] = -box.lo
    for k in range(H):
        for t, shift in enumerate((1.0, 0.0, -1.0)):
            w1[n0 + 3 * k + t] = hp.normals[k] / eps
            b1[n0 + 3 * k + t] = hp.offsets[k] / eps + shift
    F = n0 + 3 * H

    def terms(r: int):
        cw = np.zeros(F)
        cb = 0.0
        for k, s in zip(hp.facets[r], hp.sides[r], strict=True):
            j = n0 + 3 * int(k)
            if s > 0:  # pos = u1 - u2
                cw[j + 1] += 1.0
                cw[j + 2] -= 1.0
            else:  # neg = 1 - (u0 - u1)
                cb += 1.0
                cw[j] -= 1.0
                cw[j + 1] += 1.0
        return cw, cb, len(hp.facets[r])

    w2, b2, cw2, cb2, big, w3, b3 = _layer2(enum, F, terms)
    # finite network: pre = (f - m) - big * (n_r - C_r)
    return ReluMLP((w1, w2 + big[:, None] * cw2, w3), (b1, b2 + big * cb2, b3))


class IndicatorNet:
    """Factory for the exact network (b) as an ``nn.Module`` (built lazily so torch stays optional here)."""

    @staticmethod
    def build(enum: RegionEnumeration, hp: Hyperplanes):
        box = enum.box
        n0, H = box.dim, hp.count
        w1 = np.vstack([np.eye(n0), hp.normals]) if H else np.eye(n0)
        b1 = np.concatenate([-box.lo, hp.offsets])
        F = n0 + H

        def terms(r: int):
            # C_r = n_r - V_r with V_r = sum_{s=+1} (1 - s_k) + sum_{s=-1} s_k
            cw = np.zeros(F)
            cb = 0.0
            for k, s in zip(hp.facets[r], hp.sides[r], strict=True):
                if s > 0:
                    cw[n0 + int(k)] += 1.0
                else:
                    cb += 1.0
                    cw[n0 + int(k)] -= 1.0
            return cw, cb, len(hp.facets[r])

        w2, b2, winf, binf, _, w3, b3 = _layer2(enum, F, terms)  # infinite part: t * (C_r - n_r) = -t V_r

        class _Net(nn.Module):
            """x -> [relu(x - lo) | 1[G >= 0]] -> limit-ReLU gate -> linear (float64)."""

            def __init__(self) -> None:
                super().__init__()
                t = lambda a: torch.as_tensor(np.array(a), dtype=torch.float64)  # noqa: E731
                self.register_buffer("w1", t(w1))
                self.register_buffer("b1", t(b1))
                self.register_buffer("w2", t(w2))
                self.register_buffer("b2", t(b2))
                self.register_buffer("winf", t(winf))
                self.register_buffer("binf", t(binf))
                self.register_buffer("w3", t(w3))
                self.register_buffer("b3", t(b3))
                self.n0 = n0

            def forward(self, x):
                x = x.to(torch.float64)
                z1 = x @ self.w1.T + self.b1
                h1 = torch.cat([torch.relu(z1[:, : self.n0]), (z1[:, self.n0 :] >= 0).to(z1.dtype)], dim=1)
                fin = h1 @ self.w2.T + self.b2
                inf_part = torch.round(h1 @ self.winf.T + self.binf, decimals=6)  # integer-valued counts
                # lim_{t->inf} relu(fin + t * inf_part): 0 if inf_part < 0, relu(fin) if 0, +inf if > 0
                h2 = torch.where(inf_part < 0, torch.zeros_like(fin), torch.relu(fin))
                h2 = torch.where(inf_part > 0, torch.full_like(fin, float("inf")), h2)
                return h2 @ self.w3.T + self.b3

        return _Net().eval()


def widths(enum: RegionEnumeration, hp: Hyperplanes) -> Widths:
    """The hidden widths of the original network and of the two rewrites (with the regions and hyperplanes)."""
    n0, m, K, H = enum.box.dim, enum.sizes[-1], enum.count, hp.count
    return Widths(original_hidden=list(enum.sizes[1:-1]), regions=K, hyperplanes=H,
                  eps_network_hidden=[n0 + 3 * H, K * (m + 1)], exact_network_hidden=[n0 + H, K * (m + 1)])


def region_margin(net: ReluMLP, enum: RegionEnumeration, hp: Hyperplanes, x: np.ndarray) -> np.ndarray:
    """For each point: min distance to the facet hyperplanes of its region (-inf if its region is unknown)."""

    rid = pattern_ids(enum, net.patterns(x))
    out = np.full(len(x), -np.inf)
    g = x @ hp.normals.T + hp.offsets if hp.count else np.zeros((len(x), 0))
    for r in np.unique(rid[rid >= 0]):
        sel = np.flatnonzero(rid == r)
        f = hp.facets[r]
        out[sel] = np.min(hp.sides[r] * g[np.ix_(sel, f)], axis=1) if f.size else np.inf
    return out
