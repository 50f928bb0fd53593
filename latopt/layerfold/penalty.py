"""The compression loss L_c of Layer Folding's pre-fold, and the block times it weighs.

Public API::

    CompressionLoss(alphas, *, p, variant_times)             L_c over the α parameters (a callable)
    block_variant_times(blocks, *, costs=None, lut=None, granularity="block") -> {block: {variant: t}}
    UNIFORM_TIMES (latopt.nets.variants)                          the times without a LUT

**Compression loss.** q = α^p. For a block l with fold variants v ∈ {none, full[, expand_dw, dw_project]}
of times t_l(v), the α's of the block give a distribution P_l(v): one shared α → P(full) = q,
P(none) = 1 − q; one α per activation (a1 after the expansion, a2 after the depthwise) →
P(full) = q1·q2, P(expand_dw) = q1(1 − q2), P(dw_project) = (1 − q1)q2, P(none) = (1 − q1)(1 − q2).
L_c = Σ_l (E_l − b_l) / Σ_l (t_l(none) − b_l) with E_l = Σ_v P_l(v)·t_l(v) and b_l = min_v t_l(v).
For a shared α with t_l(full) ≤ t_l(none) this is exactly the paper's Σ_l c_l(1 − q_l) / Σ_l c_l with
c_l = t_l(none) − t_l(full). Times come from the LUT (``costs()`` for blocks, ``variant_times()`` per
activation); without a LUT, t(none) = 1, t(full) = 0 and each partial variant 0.5 — then L_c is the
mean of (1 − q) over activations. A block none of whose variants is faster than as-is (c_l = 0) has its
α frozen at 0: folding it would not pay on that device. Note: where the partial variants are *slower*
than as-is (measured for MobileNetV2-0.5 at 32 px on the CPU), α1 = α2 = 0 is a local minimum of the
expected latency (raising either α alone moves probability to a slower variant), so the per-activation
mode folds nothing there; the shared α of the block mode is the one to use on such a device.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from latopt.errors import LatoptError
from latopt.latency.lut import variant_times
from latopt.nets.variants import PARTIAL_VARIANTS, UNIFORM_TIMES


class CompressionLoss:
    """L_c over the α's of ``alphas`` ({block index: [α params]}), normalised to [0, 1] (see module doc)."""

    def __init__(self, alphas: Mapping[int, list[nn.Parameter]], *, p: float,
                 variant_times: Mapping[int, Mapping[str, float]]) -> None:
        self.p = float(p)
        self.terms: list[tuple[list[nn.Parameter], dict[str, float], float]] = []
        self.frozen: list[int] = []
        denom = 0.0
        for i, params in sorted(alphas.items()):
            t = dict(variant_times[i])
            if len(params) == 1:
                t = {"none": t["none"], "full": t["full"]}
            elif len(params) != 2 or not set(PARTIAL_VARIANTS) <= t.keys():
                raise LatoptError(f"block {i}: per-activation α needs the times of the partial fold variants; "
                                  "profile them (latopt profile, with the variants full, expand_dw and dw_project) "
                                  "or use granularity 'block'", param="granularity")
            best = min(t.values())
            if t["none"] - best <= 0:
                self.frozen.append(i)
                for a in params:
                    a.requires_grad_(False)
                    with torch.no_grad():
                        a.zero_()
                continue
            self.terms.append((list(params), t, best))
            denom += t["none"] - best
        self.denom = denom

    def __call__(self) -> torch.Tensor:
        if not self.terms:
            return torch.zeros(())
        total = torch.zeros((), device=self.terms[0][0][0].device)  # where the α's are (the training device)
        for params, t, best in self.terms:
            q = [a.clamp(0.0, 1.0) ** self.p for a in params]
            if len(q) == 1:
                probs = {"full": q[0], "none": 1 - q[0]}
            else:
                q1, q2 = q
                probs = {"full": q1 * q2, "expand_dw": q1 * (1 - q2), "dw_project": (1 - q1) * q2,
                         "none": (1 - q1) * (1 - q2)}
            total = total + sum(probs[v] * (t[v] - best) for v in probs)
        return total / self.denom


def block_variant_times(blocks: list[int], *, costs: Mapping[int, float] | None = None,
                        lut: Any = None, granularity: str = "block") -> dict[int, dict[str, float]]:
    """Per-block variant times for :class:`CompressionLoss` (uniform without ``costs``/``lut``)."""
    out: dict[int, dict[str, float]] = {}
    if granularity == "activation" and lut is not None:
        for i in blocks:
            out[i] = dict(variant_times(lut, i))
        return out
    for i in blocks:
        if costs is None:
            out[i] = dict(UNIFORM_TIMES)
        else:
            out[i] = {"none": float(costs.get(i, 0.0)), "full": 0.0}
    return out

