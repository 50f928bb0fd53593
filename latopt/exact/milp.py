"""Decide the sign of one hidden unit over the box with a MILP (HiGHS via ``highspy``), stopping early.

The question for a unit of layer ``k`` is one-sided: *can* ``z > 0`` (side ``"pos"``) or *can* ``z < 0``
(side ``"neg"``) somewhere in the box? Both are ``min s*z`` over the big-M encoding of layers ``< k``
(``s = -1`` for "pos", ``+1`` for "neg"), solved with

* a cut-off ``objective_bound = delta`` (``delta > 0``, far above the solver's tolerances; the model has
  no objective offset because HiGHS compares the cut-off with the objective *without* it): HiGHS prunes
  search nodes that cannot reach ``s*z < delta``, and "infeasible" *proves* ``s*z >= delta`` on the whole
  box. Problems HiGHS 1.16 closes at the root come back "optimal" instead; a proven optimum *and* dual
  bound ``>= delta`` are the same proof. Either way the side is impossible and the unit is stable: the
  solver's proof at the bound.
* an improving-solution callback that re-evaluates each incumbent ``x`` (clipped to the box) with a
  float64 forward pass and interrupts the solve as soon as one has ``s*z(x) < 0``: a *witness*.

Anything else -- the time limit, or an optimum in ``(-tol, delta)`` whose point does not re-check as a
witness (a near-zero optimum, where solver tolerances could lie) -- is *undecided*, and undecided units
are treated as unstable (kept), so the compression stays sound. Near-zero optima get one more chance:
the LP over the activation region of the solver's point (an exact linear problem in ``x``) is solved and
its optimum re-checked in float64.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import highspy
import numpy as np

from latopt.exact.encoding import Encoding
from latopt.exact.lp import local_affine, region_rows, solve_lp
from latopt.exact.network import ReluMLP


@dataclass
class SideResult:
    """Outcome of one one-sided question ("can z be > 0 / < 0?")."""

    outcome: str  # "impossible" (proved), "witness" (found, float64-checked), "undecided"
    side: str
    seconds: float
    status: str
    reason: str = ""
    x: np.ndarray | None = None
    z: float | None = None
    dual_bound: float | None = None
    nodes: int = 0


@dataclass
class SignDecider:
    """Holds one HiGHS MILP per layer and answers one-sided sign questions for its units."""

    enc: Encoding
    net: ReluMLP
    time_limit: float = 30.0
    rel_delta: float = 1e-5
    _h: highspy.Highs | None = field(default=None, init=False, repr=False)  # made by __post_init__
    _state: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        h = self._h = self.enc.highs(integer=True, time_limit=self.time_limit)
        state = self._state
        n0 = self.net.sizes[0]
        box = self.enc.box
        layer = self.enc.upto
        net = self.net

        def on_solution(e) -> None:
            if state.get("stop"):
                e.interrupt()
                return
            x = box.clip(np.asarray(e.data_out.mip_solution, dtype=np.float64)[:n0])
            z = float(net.preactivations(x)[layer][0, state["unit"]])
            if state["sign"] * z < 0:
                state.update(stop=True, x=x, z=z)
                e.interrupt()

        def on_interrupt(e) -> None:
            e.interrupt(bool(state.get("stop")))

        h.cbMipImprovingSolution += on_solution
        h.cbMipInterrupt += on_interrupt

    def delta(self, lo: float, hi: float) -> float:
        return self.rel_delta * max(1.0, abs(lo), abs(hi))

    def decide(self, unit: int, side: str, lo: float, hi: float) -> SideResult:
        h = self._h
        assert h is not None  # made by __post_init__
        sign = -1.0 if side == "pos" else 1.0
        c, c0 = self.enc.objective(unit, sign)
        idx = self.enc.prev_cols.astype(np.int32)
        h.changeColsCost(idx.size, idx, c[idx])
        delta = self.delta(lo, hi)
        # no objective offset in the model: the cut-off applies to c.v, and s*z = c.v + c0
        h.setOptionValue("objective_bound", delta - c0)
        self._state.clear()
        self._state.update(stop=False, unit=unit, sign=sign)
        t0 = time.perf_counter()
        h.run()
        dt = time.perf_counter() - t0
        status = h.getModelStatus()
        sname = h.modelStatusToString(status)
        info = h.getInfo()
        nodes = int(info.mip_node_count)
        if self._state.get("x") is not None:
            return SideResult("witness", side, dt, sname, x=self._state["x"], z=self._state["z"], nodes=nodes)
        if status in (highspy.HighsModelStatus.kInfeasible, highspy.HighsModelStatus.kObjectiveBound):
            return SideResult("impossible", side, dt, sname, reason=f"min s*z >= {delta:.3g} (cut-off)",
                              dual_bound=delta, nodes=nodes)
        if status == highspy.HighsModelStatus.kOptimal:
            obj = float(info.objective_function_value) + c0
            if obj >= delta and float(info.mip_dual_bound) + c0 >= delta:
                return SideResult("impossible", side, dt, sname, reason=f"proven optimum s*z = {obj:.4g} >= {delta:.3g}",
                                  dual_bound=float(info.mip_dual_bound) + c0, nodes=nodes)
            # an optimum below the cut-off that did not re-check as a witness: near zero, re-check exactly
            x = self.enc.box.clip(np.asarray(h.getSolution().col_value, dtype=np.float64)[: self.net.sizes[0]])
            wx = self._region_witness(unit, sign, x)
            if wx is not None:
                z = float(self.net.preactivations(wx)[self.enc.upto][0, unit])
                return SideResult("witness", side, dt, sname, reason="region LP at the solver's optimum", x=wx, z=z,
                                  nodes=nodes)
            return SideResult("undecided", side, dt, sname, reason=f"near-zero optimum s*z = {obj:.3g} not confirmed",
                              dual_bound=float(info.mip_dual_bound) + c0, nodes=nodes)
        if status == highspy.HighsModelStatus.kTimeLimit:
            return SideResult("undecided", side, dt, sname, reason=f"time limit {self.time_limit:g}s",
                              dual_bound=float(info.mip_dual_bound) + c0, nodes=nodes)
        return SideResult("undecided", side, dt, sname, reason=f"solver status {sname}", nodes=nodes)

    def _region_witness(self, unit: int, sign: float, x: np.ndarray) -> np.ndarray | None:
        """Minimise ``sign*z_unit`` over the activation region of ``x`` (exact LP); float64-checked witness or None."""
        layer = self.enc.upto
        zs = self.net.preactivations(x)
        pattern = [z[0] > 0 for z in zs[:layer]]
        aff = local_affine(self.net, pattern, upto=layer + 1)
        g, hv = region_rows(aff[:layer], pattern)
        a, c = aff[layer]
        box = self.enc.box
        res = solve_lp(sign * a[unit], g, hv, box.lo, box.hi)
        for cand in ([res.x] if res.ok and res.x is not None else []) + [x]:
            cand = box.clip(cand)
            if sign * float(self.net.preactivations(cand)[layer][0, unit]) < 0:
                return cand
        return None
