"""Linear regions of a small ReLU network over a box: enumerate, count, certify, plot (2-D inputs).

A *linear region* is a full-dimensional set of the box on which every unit keeps one activation state
(pattern); the network is affine there. :func:`enumerate_regions` walks the units layer by layer and
splits the current polytope by each unit's hyperplane (an affine function of ``x`` inside the polytope),
keeping a side only when it has an interior: the side containing the parent's interior point inherits it
(when the point is clear of the hyperplane), the other side is tested with a Chebyshev-centre LP
(``max r`` such that the ball ``B(p, r)`` lies in the polytope and the box). Every region found carries
an interior point whose float64 forward-pass pattern is re-checked against the region's pattern, and
the radius of a ball inside it. Regions thinner than ``tol * diameter(box)`` are treated as empty.

Limits (:class:`RegionLimits`): input dimension, number of hidden units and number of regions; hitting
one is a :class:`~latopt.errors.LatoptError` naming the limit and the option that raises it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Polygon
from scipy.spatial import ConvexHull, HalfspaceIntersection

from latopt.errors import LatoptError, VerificationError
from latopt.exact.exact_record import RegionsSummary
from latopt.exact.lp import solve_lp
from latopt.exact.network import Box, ReluMLP
from latopt.files.artifacts import write_figure_atomic


@dataclass(frozen=True)
class RegionLimits:
    max_inputs: int = 8
    max_units: int = 64
    max_regions: int = 20000

    def check(self, net: ReluMLP) -> None:
        if net.sizes[0] > self.max_inputs:
            raise LatoptError(
                f"network too large for region enumeration: {net.sizes[0]} inputs > input limit {self.max_inputs} "
                "(max_inputs); regions grow exponentially with the input dimension", param="max_inputs"
            )
        if sum(net.hidden) > self.max_units:
            raise LatoptError(
                f"network too large for region enumeration: {sum(net.hidden)} hidden units > unit limit "
                f"{self.max_units} (max_units)", param="max_units"
            )


@dataclass
class Region:
    pattern: np.ndarray  # bool, all hidden units in order
    point: np.ndarray  # interior point
    radius: float  # a ball of this radius around `point` lies in the region (and the box)
    rows: np.ndarray = field(repr=False)  # (m, n_in) unit normals, oriented: rows @ x <= rhs inside
    rhs: np.ndarray = field(repr=False)
    affine: tuple[np.ndarray, np.ndarray] = field(repr=False)  # output = A x + c on the region

    def key(self) -> bytes:
        return np.packbits(self.pattern).tobytes() + len(self.pattern).to_bytes(4, "little")


@dataclass
class RegionEnumeration:
    sizes: tuple[int, ...]
    box: Box
    regions: list[Region]
    lps: int
    seconds: float
    tol: float

    @property
    def count(self) -> int:
        return len(self.regions)

    def index(self) -> dict[bytes, int]:
        return {r.key(): i for i, r in enumerate(self.regions)}

    def summary(self) -> RegionsSummary:
        return RegionsSummary(regions=self.count, lps=self.lps, seconds=round(self.seconds, 3),
                              min_radius=min((r.radius for r in self.regions), default=0.0), tol=self.tol)


def _pattern_key(p: np.ndarray) -> bytes:
    return np.packbits(p).tobytes() + len(p).to_bytes(4, "little")


def chebyshev(rows: np.ndarray, rhs: np.ndarray, box: Box) -> tuple[np.ndarray | None, float]:
    """Largest ball ``B(p, r)`` inside ``{rows @ x <= rhs} and box`` (rows unit-norm): ``(p, r)``."""
    n = box.dim
    m = rows.shape[0]
    g = np.zeros((m + 2 * n, n + 1))
    h = np.zeros(m + 2 * n)
    g[:m, :n] = rows
    g[:m, n] = 1.0
    h[:m] = rhs
    eye = np.eye(n)
    g[m : m + n, :n] = eye
    g[m : m + n, n] = 1.0
    h[m : m + n] = box.hi
    g[m + n :, :n] = -eye
    g[m + n :, n] = 1.0
    h[m + n :] = -box.lo
    c = np.zeros(n + 1)
    c[n] = -1.0
    res = solve_lp(c, g, h, np.concatenate([box.lo, [0.0]]), np.concatenate([box.hi, [box.diameter]]))
    if not res.ok or res.x is None:  # x is None exactly when not ok
        return None, 0.0
    return res.x[:n], float(res.x[n])


def enumerate_regions(
    net: ReluMLP, box: Box, *, limits: RegionLimits | None = None, tol: float = 1e-9
) -> RegionEnumeration:
    """All linear regions of ``net`` over ``box`` (see the module docstring)."""
    limits = limits or RegionLimits()
    limits.check(net)
    if box.dim != net.sizes[0]:
        raise LatoptError(f"box has {box.dim} coordinates but the network has {net.sizes[0]} inputs")
    t0 = time.perf_counter()
    rtol = tol * box.diameter
    L = net.n_hidden_layers
    n0 = net.sizes[0]
    lps = 0
    regions: list[Region] = []
    p0, r0 = chebyshev(np.zeros((0, n0)), np.zeros(0), box)
    assert p0 is not None  # the box itself is feasible
    lps += 1
    if L == 0:  # an affine network: one region
        one = Region(np.zeros(0, dtype=bool), p0, r0, np.zeros((0, n0)), np.zeros(0), (net.weights[0], net.biases[0]))
        return RegionEnumeration(net.sizes, box, [one], lps, time.perf_counter() - t0, tol)
    # stack entries: (layer, unit, A, c, rows, rhs, point, radius, pattern list)
    stack: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, float, list[bool]]] = [
        (0, 0, net.weights[0].copy(), net.biases[0].copy(), np.zeros((0, n0)), np.zeros(0), p0, r0, [])]
    while stack:
        k, j, a_k, c_k, rows, rhs, p, r, pat = stack.pop()
        if j == a_k.shape[0]:  # layer k finished: move to the next layer or record the region
            mask = np.array(pat[-a_k.shape[0]:], dtype=bool)
            a_h, c_h = a_k * mask[:, None], c_k * mask
            a_next = net.weights[k + 1] @ a_h
            c_next = net.weights[k + 1] @ c_h + net.biases[k + 1]
            if k + 1 == L:
                full = np.array(pat, dtype=bool)
                regions.append(Region(full, p, r, rows, rhs, (a_next, c_next)))
                if len(regions) > limits.max_regions:
                    raise LatoptError(
                        f"region limit hit: more than {limits.max_regions} linear regions (max_regions); "
                        "use a smaller network or raise the limit", param="max_regions"
                    )
            else:
                stack.append((k + 1, 0, a_next, c_next, rows, rhs, p, r, pat))
            continue
        a, d = a_k[j], c_k[j]
        norm = float(np.linalg.norm(a))
        if norm <= 1e-14 * (abs(d) + 1.0):  # constant on the polytope
            stack.append((k, j + 1, a_k, c_k, rows, rhs, p, r, [*pat, bool(d > 0)]))
            continue
        u, dn = a / norm, d / norm
        dist = float(u @ p + dn)  # signed distance of the interior point from the hyperplane
        children = []
        for active in (True, False):
            # active: z >= 0  <=>  -u.x <= dn ; inactive: z <= 0  <=>  u.x <= -dn
            row, b = (-u, dn) if active else (u, -dn)
            same_side = dist > 0 if active else dist < 0
            new_rows = np.vstack([rows, row[None, :]])
            new_rhs = np.append(rhs, b)
            if same_side and abs(dist) > rtol:
                children.append((new_rows, new_rhs, p, min(r, abs(dist)), active))
                continue
            q, rq = chebyshev(new_rows, new_rhs, box)
            lps += 1
            if q is not None and rq > rtol:
                children.append((new_rows, new_rhs, q, rq, active))
        for new_rows, new_rhs, q, rq, active in children:
            stack.append((k, j + 1, a_k, c_k, new_rows, new_rhs, q, rq, [*pat, active]))
    regions.sort(key=lambda reg: reg.key())
    enum = RegionEnumeration(net.sizes, box, regions, lps, time.perf_counter() - t0, tol)
    certify(net, enum)
    return enum


def certify(net: ReluMLP, enum: RegionEnumeration) -> None:
    """Each region's interior point must be in the box, have the region's pattern, and patterns be distinct."""
    if not enum.regions:
        raise VerificationError("no linear region found (the box must contain at least one)")
    pts = np.stack([r.point for r in enum.regions])
    if not np.all(enum.box.contains(pts, tol=1e-9 * enum.box.diameter)):
        raise VerificationError("a region's interior point lies outside the box")
    got = net.patterns(pts)
    want = np.stack([r.pattern for r in enum.regions])
    bad = np.flatnonzero(np.any(got != want, axis=1))
    if bad.size:
        raise VerificationError(f"{bad.size} region(s) have an interior point with a different activation pattern")
    if len({r.key() for r in enum.regions}) != len(enum.regions):
        raise VerificationError("two enumerated regions share an activation pattern")


def sampled_patterns(net: ReluMLP, box: Box, *, resolution: int = 1000, n_random: int = 0, seed: int = 0) -> set[bytes]:
    """Distinct activation patterns at the cell centres of a ``resolution^d`` grid (d <= 3) plus random points."""
    keys: set[bytes] = set()
    d = box.dim
    if d <= 3 and resolution > 0:
        step = (box.hi - box.lo) / resolution
        total = resolution**d
        for start in range(0, total, 250_000):
            idx = np.unravel_index(np.arange(start, min(total, start + 250_000)), (resolution,) * d)
            pts = box.lo + (np.stack(idx, axis=1) + 0.5) * step
            keys.update(_keys(net.patterns(pts)))
    if n_random:
        keys.update(_keys(net.patterns(box.sample(n_random, np.random.default_rng(seed)))))
    return keys


def _keys(p: np.ndarray) -> set[bytes]:
    if p.shape[1] == 0:
        return {_pattern_key(np.zeros(0, dtype=bool))}
    packed = np.ascontiguousarray(np.packbits(p, axis=1))
    void = packed.view(np.dtype((np.void, packed.shape[1]))).reshape(-1)
    suffix = p.shape[1].to_bytes(4, "little")
    return {bytes(v) + suffix for v in np.unique(void)}


def pattern_ids(enum: RegionEnumeration, patterns: np.ndarray) -> np.ndarray:
    """Region index of each row of ``patterns`` (-1 when the pattern is not an enumerated region)."""
    index = enum.index()
    if patterns.shape[1] == 0:
        return np.zeros(len(patterns), dtype=np.int64)
    packed = np.ascontiguousarray(np.packbits(patterns, axis=1))
    void = packed.view(np.dtype((np.void, packed.shape[1]))).reshape(-1)
    uniq, inv = np.unique(void, return_inverse=True)
    suffix = patterns.shape[1].to_bytes(4, "little")
    ids = np.array([index.get(bytes(u) + suffix, -1) for u in uniq], dtype=np.int64)
    return ids[inv.reshape(-1)]


def irredundant(region: Region, box: Box, tol: float) -> np.ndarray:
    """Indices of the region's rows that are facets inside the box (their hyperplane cuts the region)."""
    keep = []
    m = region.rows.shape[0]
    for i in range(m):
        others = np.delete(np.arange(m), i)
        res = solve_lp(-region.rows[i], region.rows[others], region.rhs[others], box.lo, box.hi)
        if not res.ok or -res.value > region.rhs[i] + tol:
            keep.append(i)
    return np.array(keep, dtype=np.int64)


def polygon(region: Region, box: Box) -> np.ndarray:
    """Vertices (counter-clockwise) of a 2-D region."""

    eye = np.eye(2)
    a = np.vstack([region.rows, eye, -eye])
    b = np.concatenate([region.rhs, box.hi, -box.lo])
    hs = HalfspaceIntersection(np.hstack([a, -b[:, None]]), region.point)
    v = hs.intersections
    return v[ConvexHull(v).vertices]


def plot_regions(enum: RegionEnumeration, path: str | Path, *, title: str = "") -> Path:
    """Draw the regions of a 2-input network (one colour per region) into ``path`` (PNG, atomically)."""
    if enum.box.dim != 2:
        raise LatoptError(f"plotting needs a 2-input network; this one has {enum.box.dim} inputs")
    rng = np.random.default_rng(0)
    fig = Figure(figsize=(6, 6))
    ax = fig.subplots()
    for reg in enum.regions:
        ax.add_patch(Polygon(polygon(reg, enum.box), closed=True, facecolor=rng.random(3) * 0.7 + 0.3,
                             edgecolor="k", linewidth=0.3))
    ax.set_xlim(enum.box.lo[0], enum.box.hi[0])
    ax.set_ylim(enum.box.lo[1], enum.box.hi[1])
    ax.set_aspect("equal")
    ax.set_title(title or f"{enum.count} linear regions")
    return write_figure_atomic(path, fig, format="png", dpi=120)
