"""tools/compare.py's crossed statistics : every seed is tested on the same items, so the
interval must hold the seeds' variance *and* the variance the shared items add. A simulated crossed design
(seed effects, digit effects shared by all seeds, paired methods scored on the same canvases) checks that
nominal 95 % intervals cover the true difference at least 93 % of the time; Holm's correction, equivalence
and the own-front rule of dominance are checked on small cases."""

from __future__ import annotations

import numpy as np
import pytest

from tools import compare

SEEDS, DIGITS, CANVASES = 5, 360, 3          # the digits-clutter design: 360 source digits × 3 canvases, 5 seeds
REPS = 2000                                  # simulated experiments per setting (binomial sd of coverage 0.005)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _truth(delta: float, sd_u: float, mu_u: float, sd_v: float) -> float:
    """E[σ(u + v/2) − σ(u − v/2)], u ~ N(mu_u, sd_u), v ~ N(delta, sd_v): the population accuracy difference
    (over seeds and digits) of the simulation below, by Gauss-Hermite quadrature."""
    x, w = np.polynomial.hermite_e.hermegauss(80)
    w = w / w.sum()
    u = mu_u + sd_u * x[:, None]
    v = delta + sd_v * x[None, :]
    return float((w[:, None] * w[None, :] * (_sigmoid(u + v / 2) - _sigmoid(u - v / 2))).sum())


def _experiment(rng: np.random.Generator, delta: float, sd_seed: float, sd_digit: float
                ) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
    """One crossed experiment: per digit a difficulty θ_g and an effect b_g on A − B (logits), per seed a shift
    c_s of both methods and an effect a_s on A − B; each canvas is scored for both methods with one uniform
    (a paired comparison: the methods mostly agree), the canvases of a digit share its θ_g and b_g."""
    theta = rng.normal(3.0, 1.5, DIGITS)
    b = rng.normal(0.0, sd_digit, DIGITS)
    c = rng.normal(0.0, 0.3, SEEDS)
    a_s = rng.normal(0.0, sd_seed, SEEDS)
    u = np.repeat(theta, CANVASES)[None, :] + c[:, None]
    v = delta + a_s[:, None] + np.repeat(b, CANVASES)[None, :]
    draw = rng.random((SEEDS, DIGITS * CANVASES))
    xa, xb = draw < _sigmoid(u + v / 2), draw < _sigmoid(u - v / 2)
    return dict(enumerate(xa)), dict(enumerate(xb))


@pytest.mark.parametrize(("delta", "sd_seed", "sd_digit"), [
    (0.3, 0.6, 0.2),     # seeds vary most (like lf-lut@2 − lf-uniform@2 in results/method-table)
    (0.8, 0.1, 2.0),     # digits vary most: one method loses the same digits on every seed (like dp − dp-full)
    (0.0, 0.3, 0.8),     # no true difference, both sources of variance
])
def test_crossed_intervals_cover(delta: float, sd_seed: float, sd_digit: float) -> None:
    rng = np.random.default_rng(2026)
    truth = _truth(delta, float(np.hypot(1.5, 0.3)), 3.0, float(np.hypot(sd_seed, sd_digit)))
    hits = 0
    for _ in range(REPS):
        a, b = _experiment(rng, delta, sd_seed, sd_digit)
        iv = compare.paired_interval(a, b, group=CANVASES)
        assert iv.lo is not None and iv.hi is not None
        hits += iv.lo <= truth <= iv.hi
    coverage = hits / REPS
    assert coverage >= 0.93, f"nominal 95 % intervals covered the truth {coverage:.3f} of the time"


def test_seed_t_alone_misses_the_shared_digits() -> None:
    """The reason for the crossed term: when digits carry the difference, t over the seeds' means alone (each
    seed scored on the same digits) is too narrow; the crossed interval is wider by the digits' variance."""
    rng = np.random.default_rng(11)
    a, b = _experiment(rng, 0.8, 0.1, 2.0)
    iv = compare.paired_interval(a, b, group=CANVASES)
    seed_only = compare.t_interval(iv.per_seed)
    assert iv.mean == pytest.approx(seed_only[0])
    assert (iv.hi - iv.lo) > 1.5 * (seed_only[2] - seed_only[1])


def test_shared_groups_are_drawn_whole() -> None:
    """When the canvases of a digit agree and the digit's effect is shared by every seed, the effective test
    size is the number of digits: the interval is wider than one that treats canvases as independent."""
    rng = np.random.default_rng(5)
    right_a = np.repeat(rng.random(DIGITS) < 0.9, CANVASES)       # the digits each method gets right, on every
    right_b = np.repeat(rng.random(DIGITS) < 0.9, CANVASES)       # seed but for a few flips of its own
    a = {s: right_a for s in range(SEEDS)}
    b = {s: right_b ^ np.repeat(rng.random(DIGITS) < 0.01, CANVASES) for s in range(SEEDS)}
    grouped = compare.paired_interval(a, b, group=CANVASES)
    flat = compare.paired_interval(a, b, group=1)
    assert grouped.mean == pytest.approx(flat.mean)
    assert (grouped.hi - grouped.lo) > 1.5 * (flat.hi - flat.lo)


def test_items_must_be_crossed() -> None:
    a = {0: np.ones(9, bool), 1: np.ones(6, bool)}
    with pytest.raises(ValueError, match="crossed"):
        compare.paired_interval(a, a, group=3)


def test_p_value_agrees_with_the_interval() -> None:
    rng = np.random.default_rng(3)
    for delta in (-0.6, -0.2, 0.0, 0.2):
        a, b = _experiment(rng, delta, 0.3, 0.8)
        iv = compare.paired_interval(a, b, group=CANVASES)
        p = iv.p_non_inferior()
        assert p is not None and (p <= 0.025) == iv.non_inferior()


def test_holm() -> None:
    assert compare.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert compare.holm([0.5]) == [0.5]
    assert compare.holm([0.02, 0.02]) == pytest.approx([0.04, 0.04])


def test_duel_mutual_dominance_is_equivalence() -> None:
    iv = lambda lo, hi: compare.Interval((lo + hi) / 2, lo, hi, (0,) * 5, (0.0,) * 5, (hi - lo) / 5.55, 4)  # noqa: E731
    # the same speed within the match, accuracy within the margin both ways: neither wins
    assert compare.duel(1.50, 1.49, iv(-0.004, 0.006), iv(-0.006, 0.004)) == "equivalent"
    # clearly faster, as accurate: the faster one dominates, the slower one cannot dominate back
    assert compare.duel(1.60, 1.20, iv(-0.004, 0.006), iv(-0.006, 0.004)) == "dominated"
    # not shown non-inferior after Holm's adjustment, although the unadjusted interval is
    assert compare.duel(1.60, 1.20, iv(-0.009, 0.02), iv(-0.02, 0.009), p_adjusted=0.04) == "no"
    assert compare.duel(1.60, 1.20, iv(-0.009, 0.02), iv(-0.02, 0.009), p_adjusted=0.02) == "dominated"


def test_own_front() -> None:
    pts = {"x@1": (1.20, 0.94), "x@2": (1.40, 0.93), "x@3": (1.39, 0.924), "x@4": (1.40, 0.93)}
    assert compare.on_own_front(pts) == {"x@1", "x@2", "x@4"}   # x@3 is slower and less accurate than x@2


def test_hv_interval_is_crossed_and_symmetric() -> None:
    rng = np.random.default_rng(8)
    fa, fb = {}, {}
    for s in range(SEEDS):
        fa[s] = {f"a{k}": (1.2 + 0.2 * k, rng.random(DIGITS * CANVASES) < 0.93 - 0.01 * k) for k in range(3)}
        fb[s] = {f"b{k}": (1.2 + 0.1 * k, rng.random(DIGITS * CANVASES) < 0.93 - 0.01 * k) for k in range(3)}
    d = compare.paired_hv_interval(fa, fb, group=CANVASES, n_draws=200)
    r = compare.paired_hv_interval(fb, fa, group=CANVASES, n_draws=200)
    assert d.lo is not None and d.lo < d.mean < d.hi
    assert (r.mean, r.lo, r.hi) == pytest.approx((-d.mean, -d.hi, -d.lo))
    ones = compare.paired_hv_interval(fa, fb, group=CANVASES, n_draws=50, accuracy=np.ones_like)
    assert ones.mean == pytest.approx(0.4 - 0.2)                # only the reach in speed-up is left
