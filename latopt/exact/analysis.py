"""Which hidden units of a ReLU network are stable over a box, each verdict with a certificate.

:func:`analyze_stability` works layer by layer (earlier layers' verdicts and bounds feed the encoding of
later ones):

1. **sampling** (uniform points, random corners, optional data points inside the box): a unit seen both
   positive and negative is unstable, with the two points as witnesses. The units *not* refuted give the
   "sampled upper bound" on the number of stable units.
2. **interval** bounds (exact for the first layer, where the maximising/minimising corners are also
   the witnesses), then
3. **LP** bounds (certified by weak duality) for units still open, then
4. **MILP** (:class:`~latopt.exact.milp.SignDecider`) for units neither proved stable nor refuted.

Verdicts: ``"inactive"`` (``z <= 0`` on the whole box), ``"active"`` (``z >= 0``), ``"unstable"``.
A unit whose MILP hit the time limit or a near-zero optimum is ``"unstable"`` with ``decided=False``:
kept by the compression, never removed on a guess.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from latopt.errors import LatoptError, VerificationError
from latopt.exact.bounds import interval_layer, lp_bounds, post_activation
from latopt.exact.encoding import ACTIVE, INACTIVE, UNSTABLE, build_encoding
from latopt.exact.exact_record import LayerStability, StabilityCounts, StabilitySummary, StabilityTimings
from latopt.exact.milp import SignDecider
from latopt.exact.network import Box, ReluMLP

METHODS = ("interval", "lp", "milp")


@dataclass
class UnitVerdict:
    layer: int
    unit: int
    verdict: str  # "active" | "inactive" | "unstable"
    method: str  # stable: interval|lp|milp ; unstable: sampling|corner|milp ; undecided: undecided
    lo: float  # certified lower bound of the pre-activation over the box
    hi: float  # certified upper bound
    decided: bool = True
    reason: str = ""
    x_pos: list[float] | None = None  # witness with z > 0 (float64 forward pass)
    x_neg: list[float] | None = None  # witness with z < 0
    z_pos: float | None = None
    z_neg: float | None = None
    milp: list[dict] = field(default_factory=list)

    @property
    def state(self) -> int:
        return {"active": ACTIVE, "inactive": INACTIVE}.get(self.verdict, UNSTABLE)


@dataclass
class StabilityAnalysis:
    sizes: tuple[int, ...]
    box: Box
    layers: list[list[UnitVerdict]]
    seconds: float
    n_samples: int
    sampled_possibly_stable: list[int]  # per layer: units not refuted by sampling (upper bound on stable)
    timings: dict[str, float]

    def states(self) -> list[np.ndarray]:
        return [np.array([u.state for u in layer], dtype=np.int8) for layer in self.layers]

    def summary(self) -> StabilitySummary:
        """The counts by layer and in all, the seconds and the stages' seconds (rounded to ms), the points sampled."""
        per_layer = []
        for k, layer in enumerate(self.layers):
            stable = [u for u in layer if u.verdict != "unstable"]
            per_layer.append(LayerStability(
                layer=k,
                units=len(layer),
                inactive=sum(u.verdict == "inactive" for u in layer),
                active=sum(u.verdict == "active" for u in layer),
                unstable=sum(u.verdict == "unstable" and u.decided for u in layer),
                undecided=sum(not u.decided for u in layer),
                sampled_upper_bound=self.sampled_possibly_stable[k],
                stable_by_interval=sum(u.method == "interval" for u in stable),
                stable_by_lp=sum(u.method == "lp" for u in stable),
                stable_by_milp=sum(u.method == "milp" for u in stable),
                milp_solves=sum(len(u.milp) for u in layer),
            ))
        total = StabilityCounts(**{f: sum(getattr(r, f) for r in per_layer) for f in StabilityCounts.model_fields}) \
            if per_layer else None
        return StabilitySummary(layers=per_layer, total=total, seconds=round(self.seconds, 3), samples=self.n_samples,
                                timings=StabilityTimings(**{k: round(v, 3) for k, v in self.timings.items()}))

    def to_json(self) -> dict[str, Any]:
        """certificates.json: the sizes, the box, :meth:`summary`, every unit's verdict with its certificate."""
        return {
            "schema": "latopt.stability/1",
            "sizes": list(self.sizes),
            "box": self.box.to_json(),
            "summary": self.summary().model_dump(mode="json"),
            "units": [[asdict(u) for u in layer] for layer in self.layers],
        }

    def check(self, net: ReluMLP, points: np.ndarray | None = None) -> None:
        """Re-check every certificate: witnesses by a float64 forward pass, stable verdicts against ``points``."""
        for layer in self.layers:
            for u in layer:
                for x, want in ((u.x_pos, 1.0), (u.x_neg, -1.0)):
                    if x is None:
                        continue
                    xx = np.asarray(x)
                    if not self.box.contains(xx)[0]:
                        raise VerificationError(f"witness of unit {u.layer}:{u.unit} lies outside the box")
                    z = float(net.preactivations(xx)[u.layer][0, u.unit])
                    if want * z <= 0:
                        raise VerificationError(f"witness of unit {u.layer}:{u.unit} re-checks as z = {z:.3g}")
                if u.verdict == "unstable" and u.decided and (u.x_pos is None or u.x_neg is None):
                    raise VerificationError(f"unit {u.layer}:{u.unit} is unstable without two witnesses")
        if points is not None:
            zs = net.preactivations(points)
            for k, layer in enumerate(self.layers):
                st = np.array([u.state for u in layer])
                bad_i = np.flatnonzero((st == INACTIVE) & (zs[k].max(0) > 0))
                bad_a = np.flatnonzero((st == ACTIVE) & (zs[k].min(0) < 0))
                if bad_i.size or bad_a.size:
                    j = int((bad_i if bad_i.size else bad_a)[0])
                    raise VerificationError(
                        f"unit {k}:{j} was certified stable but a sampled point contradicts it "
                        f"(z range {zs[k][:, j].min():.3g}..{zs[k][:, j].max():.3g})"
                    )


def sample_points(box: Box, n: int, rng: np.random.Generator, data: np.ndarray | None = None) -> np.ndarray:
    pts = [box.sample(n, rng), box.corners(min(4096, max(16, n // 10)), rng), box.center[None, :]]
    if data is not None and len(data):
        d = np.asarray(data, dtype=np.float64).reshape(len(data), -1)
        if d.shape[1] == box.dim:
            pts.append(d[box.contains(d)])
    return np.concatenate(pts)


def analyze_stability(
    net: ReluMLP,
    box: Box,
    *,
    samples: int = 20000,
    data: np.ndarray | None = None,
    use_lp: bool = True,
    use_milp: bool = True,
    time_limit: float = 30.0,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
) -> StabilityAnalysis:
    """Classify every hidden unit of ``net`` over ``box`` (see the module docstring)."""
    if box.dim != net.sizes[0]:
        raise LatoptError(f"box has {box.dim} coordinates but the network has {net.sizes[0]} inputs")
    t_start = time.perf_counter()
    timings = {"sampling": 0.0, "interval": 0.0, "lp": 0.0, "milp": 0.0}
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    pts = sample_points(box, samples, rng, data)
    zs = net.preactivations(pts)
    timings["sampling"] += time.perf_counter() - t0
    layers: list[list[UnitVerdict]] = []
    bounds: list[tuple[np.ndarray, np.ndarray]] = []
    states: list[np.ndarray] = []
    possibly_stable: list[int] = []
    for k in range(net.n_hidden_layers):
        w, b = net.weights[k], net.biases[k]
        z = zs[k]
        imax, imin = z.argmax(0), z.argmin(0)
        zmax, zmin = z.max(0), z.min(0)
        possibly_stable.append(int(np.sum((zmax <= 0) | (zmin >= 0))))
        t0 = time.perf_counter()
        if k == 0:
            lo, hi = interval_layer(w, b, box.lo, box.hi)
        else:
            lo, hi = interval_layer(w, b, *post_activation(*bounds[k - 1], states[k - 1]))
        timings["interval"] += time.perf_counter() - t0
        n = w.shape[0]
        verd: list[UnitVerdict | None] = [None] * n
        for i in range(n):
            if hi[i] <= 0:
                verd[i] = UnitVerdict(k, i, "inactive", "interval", float(lo[i]), float(hi[i]))
            elif lo[i] >= 0:
                verd[i] = UnitVerdict(k, i, "active", "interval", float(lo[i]), float(hi[i]))
        open_ = np.array([i for i in range(n) if verd[i] is None], dtype=np.int64)
        enc = None
        if k > 0 and use_lp and open_.size:
            t0 = time.perf_counter()
            enc = build_encoding(net, box, bounds, states, k)
            llo, lhi, _ = lp_bounds(enc, open_)
            lo[open_] = np.maximum(lo[open_], llo)
            hi[open_] = np.minimum(hi[open_], lhi)
            for i in open_:
                if hi[i] <= 0:
                    verd[i] = UnitVerdict(k, int(i), "inactive", "lp", float(lo[i]), float(hi[i]))
                elif lo[i] >= 0:
                    verd[i] = UnitVerdict(k, int(i), "active", "lp", float(lo[i]), float(hi[i]))
            timings["lp"] += time.perf_counter() - t0
        # witnesses: sampling (any layer), exact corners (first layer)
        wpos: dict[int, tuple[np.ndarray, float]] = {}
        wneg: dict[int, tuple[np.ndarray, float]] = {}
        for i in range(n):
            if verd[i] is not None:
                continue
            if zmax[i] > 0:
                wpos[i] = (pts[imax[i]], float(zmax[i]))
            if zmin[i] < 0:
                wneg[i] = (pts[imin[i]], float(zmin[i]))
            if k == 0:
                cp = np.where(w[i] > 0, box.hi, box.lo)
                cn = np.where(w[i] > 0, box.lo, box.hi)
                zp, zn = float(net.preactivations(cp)[0][0, i]), float(net.preactivations(cn)[0][0, i])
                if i not in wpos and zp > 0:
                    wpos[i] = (cp, zp)
                if i not in wneg and zn < 0:
                    wneg[i] = (cn, zn)
        decider = None
        for i in range(n):
            if verd[i] is not None:
                continue
            milp_log: list[dict] = []
            method = "corner" if k == 0 else "sampling"
            reason = ""
            decided = True
            for side, have in (("pos", wpos), ("neg", wneg)):
                if i in have or verd[i] is not None:
                    continue
                if k == 0 or not use_milp:
                    decided = False
                    reason = "no witness and no solver proof" if k else "near-zero corner value"
                    break
                if decider is None:
                    if enc is None:
                        enc = build_encoding(net, box, bounds, states, k)
                    decider = SignDecider(enc, net, time_limit=time_limit)
                t0 = time.perf_counter()
                r = decider.decide(i, side, float(lo[i]), float(hi[i]))
                timings["milp"] += time.perf_counter() - t0
                milp_log.append({"side": side, "outcome": r.outcome, "status": r.status, "seconds": round(r.seconds, 4),
                                 "nodes": r.nodes, "dual_bound": r.dual_bound, "reason": r.reason})
                if r.outcome == "impossible":
                    verd[i] = UnitVerdict(k, i, "inactive" if side == "pos" else "active", "milp", float(lo[i]),
                                          float(hi[i]), reason=r.reason, milp=milp_log)
                elif r.outcome == "witness":
                    assert r.x is not None and r.z is not None  # a witness carries its point
                    have[i] = (r.x, float(r.z))
                    method = "milp"
                else:
                    decided = False
                    reason = r.reason
                    break
            if verd[i] is None:
                p, ng = wpos.get(i), wneg.get(i)
                verd[i] = UnitVerdict(
                    k, i, "unstable", method if decided else "undecided", float(lo[i]), float(hi[i]),
                    decided=decided, reason=reason,
                    x_pos=p[0].tolist() if p else None, x_neg=ng[0].tolist() if ng else None,
                    z_pos=p[1] if p else None, z_neg=ng[1] if ng else None, milp=milp_log,
                )
        layer = [v for v in verd if v is not None]
        st = np.array([u.state for u in layer], dtype=np.int8)
        layers.append(layer)
        bounds.append((lo, hi))
        states.append(st)
        if log:
            s = StabilityAnalysis(net.sizes, box, layers, 0.0, len(pts), possibly_stable, timings).summary().layers[k]
            log(
                f"layer {k}: {s.units} units, inactive {s.inactive}, active {s.active}, unstable {s.unstable}, "
                f"undecided {s.undecided} (stable by interval {s.stable_by_interval}, LP {s.stable_by_lp}, "
                f"MILP {s.stable_by_milp}; sampled upper bound {s.sampled_upper_bound})"
            )
    return StabilityAnalysis(net.sizes, box, layers, time.perf_counter() - t_start, len(pts), possibly_stable, timings)
