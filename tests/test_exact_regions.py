"""Linear-region enumeration, its certificates and limits, and the two shallow rewrites."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from latopt.errors import LatoptError, VerificationError
from latopt.exact.mlp import build_mlp
from latopt.exact.network import Box, ReluMLP, from_module
from latopt.exact.regions import (
    RegionLimits,
    certify,
    enumerate_regions,
    plot_regions,
    polygon,
    sampled_patterns,
)
from latopt.exact.shallow import IndicatorNet, collect_hyperplanes, eps_network, region_margin, widths
from latopt.exact.verify import verify_equal

pytestmark = pytest.mark.floor   # .ci/run's lower-bounds run selects these tests


def random_net(sizes, seed) -> ReluMLP:
    torch.manual_seed(seed)
    return from_module(build_mlp(sizes))


BOX2 = Box.uniform(2, -1, 1)


@pytest.fixture(scope="module")
def enum_2d():
    net = random_net([2, 8, 8, 8, 1], 3)
    return net, enumerate_regions(net, BOX2)


@pytest.mark.parametrize("seed", [0])
def test_count_equals_dense_grid(seed):
    net = random_net([2, 8, 8, 8, 1], seed)
    enum = enumerate_regions(net, BOX2)
    grid = sampled_patterns(net, BOX2, resolution=1000)
    assert grid <= set(enum.index())  # every pattern seen on the grid is an enumerated region
    assert len(grid) == enum.count  # and (at this resolution) every region is hit by the grid
    assert enum.count > 10


def test_three_inputs_and_two_outputs():
    net = random_net([3, 6, 6, 2], 5)
    box = Box.uniform(3, -1, 1)
    enum = enumerate_regions(net, box)
    seen = sampled_patterns(net, box, resolution=60, n_random=50_000)
    assert seen <= set(enum.index())
    assert len(seen) >= 0.9 * enum.count  # thin 3-D regions may escape sampling, most must not


def test_region_certificates_catch_a_wrong_region(enum_2d):
    net, enum = enum_2d
    certify(net, enum)
    enum.regions[0].pattern = ~enum.regions[0].pattern
    try:
        with pytest.raises(VerificationError, match="different activation pattern"):
            certify(net, enum)
    finally:
        enum.regions[0].pattern = ~enum.regions[0].pattern


def test_limits_name_what_was_hit():
    net = random_net([2, 8, 8, 8, 1], 0)
    with pytest.raises(LatoptError, match="region limit hit: more than 5"):
        enumerate_regions(net, BOX2, limits=RegionLimits(max_regions=5))
    with pytest.raises(LatoptError, match="input limit 8"):
        enumerate_regions(random_net([64, 4, 1], 0), Box.uniform(64, 0, 1))
    with pytest.raises(LatoptError, match="unit limit 16"):
        enumerate_regions(net, BOX2, limits=RegionLimits(max_units=16))


def test_plot_writes_png(enum_2d, tmp_path):
    _, enum = enum_2d
    p = plot_regions(enum, tmp_path / "r.png")
    assert p.read_bytes()[:4] == b"\x89PNG"
    def shoelace(v):
        w = np.roll(v, -1, 0)
        return 0.5 * abs(float(np.sum(v[:, 0] * w[:, 1] - w[:, 0] * v[:, 1])))

    area = sum(shoelace(polygon(r, BOX2)) for r in enum.regions)
    assert area == pytest.approx(4.0, rel=1e-6)  # the regions tile the box


def test_shallow_rewrites(enum_2d):
    net, enum = enum_2d
    hp = collect_hyperplanes(enum)
    w = widths(enum, hp)
    assert w.exact_network_hidden == [2 + hp.count, enum.count * 2]
    eps = 1e-3
    a = eps_network(enum, hp, eps)
    assert a.n_hidden_layers == 2 and list(a.hidden) == w.eps_network_hidden
    pts = BOX2.sample(100_000, np.random.default_rng(0))
    far = region_margin(net, enum, hp, pts) >= eps
    assert far.mean() > 0.95
    ver = verify_equal(net, a, BOX2, points=pts[far], dtypes=("float64",))
    assert ver.max_rel_float64 is not None and ver.max_rel_float64 < 1e-9
    assert ver.max_abs_float32 is None and ver.fraction_of_points_used is None   # not compared; no mask
    masked = verify_equal(net, a, BOX2, points=pts, mask=lambda x: region_margin(net, enum, hp, x) >= eps,
                          dtypes=("float64",))
    assert masked.points == ver.points and masked.fraction_of_points_used == pytest.approx(far.mean())
    # inside the eps-band it is only an approximation: the check does fail there
    with pytest.raises(VerificationError):
        verify_equal(net, a, BOX2, points=pts[~far], dtypes=("float64",))
    # smaller eps: larger weights, more points agree
    a2 = eps_network(enum, hp, 1e-5)
    assert max(np.abs(x).max() for x in a2.weights) > 10 * max(np.abs(x).max() for x in a.weights)
    exact = IndicatorNet.build(enum, hp)
    ver = verify_equal(net, exact, BOX2, points=pts, dtypes=("float64",))
    assert ver.max_rel_float64 is not None and ver.max_rel_float64 < 1e-9
    assert exact.w1.dtype == torch.float64  # verification leaves the module as it was
    # exact on region boundaries too: polygon vertices and edge midpoints
    bnd = np.concatenate([np.concatenate([v, (v + np.roll(v, 1, 0)) / 2]) for v in (polygon(r, BOX2) for r in enum.regions)])
    # (vertices are computed to ~1e-9; the adjacent affine pieces agree on the boundary up to that)
    verify_equal(net, exact, BOX2, points=bnd, dtypes=("float64",), rtol=1e-6)
    with pytest.raises(LatoptError, match="epsilon"):
        eps_network(enum, hp, 0.0)


def test_exact_rewrite_fails_without_a_region():
    net = random_net([2, 6, 6, 1], 7)
    enum = enumerate_regions(net, BOX2)
    enum.regions.pop(len(enum.regions) // 2)  # forget one region: the rewrite must be caught
    hp = collect_hyperplanes(enum)
    bad = IndicatorNet.build(enum, hp)
    with pytest.raises(VerificationError, match="differs"):
        verify_equal(net, bad, BOX2, n=100_000, dtypes=("float64",))
