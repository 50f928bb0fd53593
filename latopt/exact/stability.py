"""StabilityCompression (Algorithm 1 of "Equivalent and Approximate Transformations of Deep Neural
Networks"): remove stable units and collapse layers without changing the function on the box.

Layer by layer, with the verdicts of :func:`~latopt.exact.analysis.analyze_stability`:

1. a layer whose units are *all* stably inactive outputs 0 everywhere, so the network is constant:
   the result is one ``Linear`` with zero weights and the constant output as bias;
2. otherwise every stably inactive unit is removed (its ReLU is always 0, so its outgoing column goes);
3. a stably active unit (``relu(z) = z`` on the box) whose incoming weight row is a linear combination
   ``sum_j alpha_j W_j`` of the stably active units already kept in the layer is removed: its output is
   ``sum_j alpha_j h_j + (b_i - sum_j alpha_j b_j)``, so ``alpha`` is added into the kept units' outgoing
   columns and the constant into the next layer's bias;
4. if every remaining unit of the layer is stably active, the layer is affine and is multiplied into the
   next one (``W' = W_next W``, ``b' = W_next b + b_next``) when that lowers the parameter count.

:func:`compress` runs analysis + compression + :func:`~latopt.exact.verify.verify_equal` (>= 100,000
sampled points plus corners; a mismatch raises :class:`~latopt.errors.VerificationError`) and returns a
plain ``nn.Sequential``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from latopt.exact.analysis import StabilityAnalysis, analyze_stability
from latopt.exact.encoding import ACTIVE, INACTIVE
from latopt.exact.exact_record import CompressionSummary, CompressRecord, CompressSeconds, Verification
from latopt.exact.network import Box, ReluMLP, from_module
from latopt.exact.verify import verify_equal


@dataclass
class CompressionResult:
    original: ReluMLP
    compressed: ReluMLP
    constant: bool
    removed_inactive: list[int]  # per original hidden layer
    removed_dependent: list[int]
    collapsed: list[int]  # original hidden layers multiplied into their successor
    kept: list[list[int]]  # per original hidden layer: original indices of the units that remain
    stats: dict = field(default_factory=dict)

    def summary(self) -> CompressionSummary:
        n_before = sum(self.original.hidden)
        n_after = sum(self.compressed.hidden)
        return CompressionSummary(
            layers_before=list(self.original.sizes),
            layers_after=list(self.compressed.sizes),
            hidden_units_before=n_before,
            hidden_units_after=n_after,
            units_removed=n_before - n_after,
            units_removed_fraction=(n_before - n_after) / n_before if n_before else 0.0,
            removed_inactive=list(self.removed_inactive),
            removed_dependent_active=list(self.removed_dependent),
            layers_collapsed=len(self.collapsed) + (self.original.n_hidden_layers if self.constant else 0),
            collapsed_layers=list(self.collapsed),
            constant=self.constant,
            params_before=self.original.n_params,
            params_after=self.compressed.n_params,
        )


def _constant_tail(net: ReluMLP, k: int) -> np.ndarray:
    """Output of ``net`` when hidden layer ``k`` is identically zero."""
    h = np.zeros(net.sizes[k + 1])
    for j in range(k + 1, net.n_hidden_layers):
        h = np.maximum(net.weights[j] @ h + net.biases[j], 0.0)
    return net.weights[-1] @ h + net.biases[-1]


def stability_compression(net: ReluMLP, states: list[np.ndarray], *, rank_tol: float = 1e-10) -> CompressionResult:
    """Apply Algorithm 1 to ``net`` with per-layer ``states`` (ACTIVE / INACTIVE / UNSTABLE per unit)."""
    L = net.n_hidden_layers
    if len(states) != L or any(len(s) != n for s, n in zip(states, net.hidden, strict=True)):
        raise ValueError("states must give one verdict per hidden unit")
    out_w: list[np.ndarray] = []
    out_b: list[np.ndarray] = []
    rem_in = [0] * L
    rem_dep = [0] * L
    collapsed: list[int] = []
    kept: list[list[int]] = []
    w_in, b_in = net.weights[0].copy(), net.biases[0].copy()
    for k in range(L):
        st = np.asarray(states[k])
        w_next, b_next = net.weights[k + 1].copy(), net.biases[k + 1].copy()
        if np.all(st == INACTIVE):
            y = _constant_tail(net, k)
            const = ReluMLP((np.zeros((net.sizes[-1], net.sizes[0])),), (y,))
            return CompressionResult(
                net, const, True, [int(np.sum(s == INACTIVE)) for s in states], [0] * L, [],
                [[] for _ in range(L)],
            )
        idx = np.flatnonzero(st != INACTIVE)
        rem_in[k] = int(st.size - idx.size)
        w_in, b_in, w_next = w_in[idx], b_in[idx], w_next[:, idx]
        st = st[idx]
        # stably active units linearly dependent on earlier kept stably active ones
        keep = np.ones(idx.size, dtype=bool)
        basis: list[int] = []
        for i in np.flatnonzero(st == ACTIVE):
            row = w_in[i]
            norm = float(np.linalg.norm(row))
            if basis:
                bmat = w_in[basis]  # (r, n_prev)
                alpha, *_ = np.linalg.lstsq(bmat.T, row, rcond=None)
                resid = float(np.linalg.norm(bmat.T @ alpha - row))
                dependent = resid <= rank_tol * max(norm, 1e-300) or (norm == 0.0)
            else:
                alpha, dependent = None, norm == 0.0
            if dependent:
                col = w_next[:, i].copy()
                if alpha is not None:
                    w_next[:, basis] += np.outer(col, alpha)
                    b_next += col * (b_in[i] - float(alpha @ b_in[basis]))
                else:  # zero row: h_i = b_i (>= 0, active) is a constant
                    b_next += col * b_in[i]
                keep[i] = False
            else:
                basis.append(int(i))
        rem_dep[k] = int(np.sum(~keep))
        w_in, b_in, w_next, st = w_in[keep], b_in[keep], w_next[:, keep], st[keep]
        kept_idx = idx[keep]
        before = w_in.size + b_in.size + w_next.size + b_next.size
        after = w_next.shape[0] * (w_in.shape[1] + 1)
        if w_in.shape[0] == 0 or (np.all(st == ACTIVE) and after < before):
            # affine layer (or no unit left: all removed as dependent/zero rows): multiply into the next one
            b_next = w_next @ b_in + b_next
            w_next = w_next @ w_in
            collapsed.append(k)
            kept.append([])
        else:
            out_w.append(w_in)
            out_b.append(b_in)
            kept.append([int(j) for j in kept_idx])
        w_in, b_in = w_next, b_next
    out_w.append(w_in)
    out_b.append(b_in)
    comp = ReluMLP(tuple(out_w), tuple(out_b))
    return CompressionResult(net, comp, False, rem_in, rem_dep, collapsed, kept)


@dataclass
class CompressReport:
    """What :func:`compress` did: the analysis and the compression (with their certificates and kept units), the
    verification, the seconds of each stage; :meth:`record` is what a report says of them."""

    analysis: StabilityAnalysis
    result: CompressionResult
    verification: Verification
    seconds: CompressSeconds

    def record(self) -> CompressRecord:
        """The validated record of this result (``latopt.compress/1``; seconds rounded to ms)."""
        return CompressRecord(box=self.analysis.box.record(), stability=self.analysis.summary(),
                              compression=self.result.summary(), verification=self.verification,
                              seconds=self.seconds.rounded())

    def to_json(self) -> dict[str, Any]:
        """:meth:`record` as JSON, schema first."""
        return self.record().to_json()


def compress(
    model,
    box: Box,
    *,
    samples: int = 20000,
    data: np.ndarray | None = None,
    time_limit: float = 30.0,
    verify_points: int = 100_000,
    rtol: float = 1e-5,
    seed: int = 0,
    dtype=None,
    log: Callable[[str], None] | None = None,
):
    """Analyse, compress and verify a Linear/ReLU ``model`` (or :class:`ReluMLP`) on ``box``.

    Returns ``(nn.Sequential, CompressReport)``; the module's weights are ``dtype`` (default float32).
    Raises VerificationError if the result is not equal on the sampled points (it never is unless
    something is wrong).
    """

    net = model if isinstance(model, ReluMLP) else from_module(model)
    t0 = time.perf_counter()
    analysis = analyze_stability(net, box, samples=samples, data=data, time_limit=time_limit, seed=seed, log=log)
    t1 = time.perf_counter()
    result = stability_compression(net, analysis.states())
    t2 = time.perf_counter()
    module = result.compressed.to_module(dtype or torch.float32)
    reference = model if not isinstance(model, ReluMLP) else net
    ver = verify_equal(reference, module, box, n=verify_points, rtol=rtol, seed=seed + 1)
    analysis.check(net)
    t3 = time.perf_counter()
    seconds = CompressSeconds(analysis=t1 - t0, compression=t2 - t1, verification=t3 - t2, total=t3 - t0)
    return module, CompressReport(analysis, result, ver, seconds)
