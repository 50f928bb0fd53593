"""Stability analysis (interval / LP / MILP with certificates) and StabilityCompression."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from latopt.errors import VerificationError
from latopt.exact.analysis import analyze_stability
from latopt.exact.encoding import ACTIVE, INACTIVE, UNSTABLE
from latopt.exact.lp import local_affine, region_rows, solve_lp
from latopt.exact.network import Box, ReluMLP
from latopt.exact.regions import enumerate_regions
from latopt.exact.stability import compress, stability_compression
from latopt.exact.verify import verify_equal

pytestmark = pytest.mark.floor   # .ci/run's lower-bounds run selects these tests


def sparse_digits_like(seed: int = 0) -> ReluMLP:
    """64 -> 12 -> 12 -> 10 with a deliberately sparse first layer: 3 dead units, 3 always-on units,
    one always-on unit that is a multiple of another (linearly dependent), the rest unstable."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(size=(12, 64)) * (rng.random((12, 64)) < 0.15)
    b1 = rng.normal(size=12) * 0.1
    for i in range(3):  # stably inactive: bias below -(sum of positive weights)
        b1[i] = -np.maximum(w1[i], 0).sum() - 0.2
    for i in range(3, 6):  # stably active: bias above -(sum of negative weights)
        b1[i] = -np.minimum(w1[i], 0).sum() + 0.2
    w1[6], b1[6] = 2.0 * w1[3], 2.0 * b1[3] + 0.5  # active and dependent on unit 3
    w2 = rng.normal(size=(12, 12)) * 0.5
    b2 = rng.normal(size=12) * 0.1
    w2[0] = -np.abs(w2[0])  # only negative inputs: inactive for a non-positive bias (LP/MILP territory)
    b2[0] = 0.3
    b2[1] = -10.0  # inactive
    b2[2] = 12.0  # likely active
    w3 = rng.normal(size=(10, 12))
    b3 = rng.normal(size=10)
    return ReluMLP((w1, w2, w3), (b1, b2, b3))


def small_2d(seed: int) -> ReluMLP:
    """2 -> 6 -> 6 -> 6 -> 1 on [0,1]^2 with layer-2/3 biases pushed near the edge of stability."""
    rng = np.random.default_rng(seed)
    ws = [rng.normal(size=(6, 2)), rng.normal(size=(6, 6)), rng.normal(size=(6, 6)), rng.normal(size=(1, 6))]
    bs = [rng.normal(size=6) * 0.5, np.zeros(6), np.zeros(6), np.zeros(1)]
    box = Box.uniform(2, 0, 1)
    for k in (1, 2):
        net = ReluMLP(tuple(ws), tuple(bs))
        z = net.preactivations(box.sample(4000, rng))[k] - bs[k]
        # shift half the units just beyond the sampled max (probably stable), half into the middle
        bs[k] = np.where(np.arange(6) % 2 == 0, -z.max(0) - 0.05, -np.median(z, 0))
        bs[k][5] = -z.min(0)[5] + 0.05  # stable active candidate
    return ReluMLP(tuple(ws), tuple(bs))


def oracle_ranges(net: ReluMLP, box: Box) -> list[tuple[np.ndarray, np.ndarray]]:
    """Exact min/max of every pre-activation over the box: LPs over every linear region's closure."""
    enum = enumerate_regions(net, box)
    out = [(np.full(n, np.inf), np.full(n, -np.inf)) for n in net.hidden]
    for reg in enum.regions:
        sizes = net.hidden
        pattern = np.split(reg.pattern, np.cumsum(sizes)[:-1])
        aff = local_affine(net, pattern, upto=len(sizes))
        g, h = region_rows(aff, pattern)
        for k, (a, c) in enumerate(aff):
            for i in range(a.shape[0]):
                lo = solve_lp(a[i], g, h, box.lo, box.hi)
                hi = solve_lp(-a[i], g, h, box.lo, box.hi)
                out[k][0][i] = min(out[k][0][i], lo.value + c[i])
                out[k][1][i] = max(out[k][1][i], -hi.value + c[i])
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_verdicts_match_exact_oracle(seed):
    net = small_2d(seed)
    box = Box.uniform(2, 0, 1)
    an = analyze_stability(net, box, samples=200, seed=seed)
    oracle = oracle_ranges(net, box)
    methods = set()
    for k, layer in enumerate(an.layers):
        lo, hi = oracle[k]
        for u in layer:
            assert u.decided, (k, u.unit, u.reason)
            truth = "inactive" if hi[u.unit] <= 0 else "active" if lo[u.unit] >= 0 else "unstable"
            margin = min(abs(hi[u.unit]), abs(lo[u.unit]))
            if margin > 1e-6:
                assert u.verdict == truth, (k, u.unit, u.verdict, truth, lo[u.unit], hi[u.unit])
            assert u.lo <= lo[u.unit] + 1e-9 and u.hi >= hi[u.unit] - 1e-9  # certified bounds are sound
            methods.add(u.method)
    an.check(net, box.sample(20000, np.random.default_rng(5)))
    assert "milp" in methods or "lp" in methods  # deeper layers needed more than interval arithmetic


def test_compression_removes_units_and_is_verified():
    net = sparse_digits_like()
    box = Box.uniform(64, 0, 1)
    module, rep = compress(net, box, samples=2000, time_limit=20, seed=0, dtype=torch.float64)
    s = rep.result.summary()
    st = rep.analysis.summary().total
    assert st is not None and st.undecided == 0
    assert rep.result.removed_inactive[0] >= 3 and rep.result.removed_dependent[0] >= 1
    assert s.units_removed == sum(rep.result.removed_inactive) + sum(rep.result.removed_dependent) + sum(
        net.hidden[k] - rep.result.removed_inactive[k] - rep.result.removed_dependent[k] for k in rep.result.collapsed
    )
    assert rep.verification.ok and rep.verification.points >= 100_000
    assert rep.verification.max_rel_float64 is not None and rep.verification.max_rel_float64 < 1e-12  # float64 weights: equal up to rounding
    # the plain module really is smaller and equal (independent check on fresh points)
    assert sum(p.numel() for p in module.parameters()) < net.n_params
    rng = np.random.default_rng(9)
    x = box.sample(5000, rng)
    with torch.no_grad():
        y = module.double()(torch.as_tensor(x)).numpy()
    assert np.max(np.abs(y - net.forward(x))) < 1e-5 * np.max(np.abs(net.forward(x)))
    # every unstable unit has two float64-checked witnesses of opposite sign
    for layer in rep.analysis.layers:
        for u in layer:
            if u.verdict == "unstable":
                assert u.z_pos > 0 > u.z_neg
                zs = net.preactivations(np.array([u.x_pos, u.x_neg]))[u.layer][:, u.unit]
                assert zs[0] > 0 > zs[1]


def test_a_wrong_compression_is_caught():
    net = sparse_digits_like()
    box = Box.uniform(64, 0, 1)
    an = analyze_stability(net, box, samples=2000)
    states = an.states()
    forged = [s.copy() for s in states]
    j = int(np.flatnonzero(states[0] == UNSTABLE)[0])
    forged[0][j] = INACTIVE  # claim an unstable unit is dead
    bad = stability_compression(net, forged).compressed
    with pytest.raises(VerificationError, match="differs"):
        verify_equal(net, bad, box, n=100_000)
    # a forged witness is caught by the certificate re-check
    u = next(u for u in an.layers[0] if u.verdict == "unstable")
    u.x_pos = u.x_neg
    with pytest.raises(VerificationError, match="witness"):
        an.check(net)


def test_time_limited_solves_stay_unstable_and_sound():
    net = small_2d(0)
    box = Box.uniform(2, 0, 1)
    full = analyze_stability(net, box, samples=0, seed=0)
    short = analyze_stability(net, box, samples=0, seed=0, time_limit=1e-9)
    und = [u for layer in short.layers for u in layer if not u.decided]
    assert und, "a zero time limit must leave MILP units undecided"
    assert all(u.verdict == "unstable" and u.method == "undecided" for u in und)
    # undecided units are kept: never more stable units than the full analysis proves
    for a, b in zip(full.states(), short.states(), strict=True):
        assert np.all((b == UNSTABLE) | (b == a))
    res = stability_compression(net, short.states())
    verify_equal(net, res.compressed, box, n=100_000)


def test_collapse_and_constant_networks():
    rng = np.random.default_rng(3)
    box = Box.uniform(4, 0, 1)
    # middle layer always active (huge biases): it is affine and is multiplied into the next layer
    w = [rng.normal(size=(10, 4)), rng.normal(size=(3, 10)), rng.normal(size=(2, 3))]
    b = [rng.normal(size=10), np.full(3, 100.0), rng.normal(size=2)]
    net = ReluMLP(tuple(w), tuple(b))
    module, rep = compress(net, box, samples=500)
    assert 1 in rep.result.collapsed and rep.result.compressed.n_hidden_layers == 1
    assert rep.verification.ok
    # a dead layer makes the whole network constant
    b2 = [b[0], np.full(3, -100.0), b[2]]
    dead = ReluMLP(tuple(w), tuple(b2))
    module, rep = compress(dead, box, samples=500)
    assert rep.result.constant and rep.result.compressed.sizes == (4, 2)
    c = rep.record().compression
    assert c.constant and c.layers_collapsed == 2 and c.hidden_units_after == 0 and c.units_removed_fraction == 1.0
    assert np.allclose(rep.result.compressed.biases[0], dead.forward(box.center)[0])
    assert np.all(rep.analysis.states()[1] == INACTIVE)
    assert np.all(rep.analysis.states()[0][np.array([u.verdict == "active" for u in rep.analysis.layers[0]])] == ACTIVE)
