"""tools/compare.py: the statistics of docs/evaluation.md (paired intervals over seeds and test groups, the ±1 pt
margin's labels, dominance both ways); the crossed design's coverage is tests/test_compare_crossed.py."""

from __future__ import annotations

import numpy as np
import pytest

from tools import compare


def _seeds(p: float, n: int = 1080, seeds: int = 5, rng_seed: int = 0) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(rng_seed)
    return {s: rng.random(n) < p for s in range(seeds)}


def test_pack_roundtrip_and_refusal() -> None:
    v = np.random.default_rng(3).random(1077) < 0.5
    assert (compare.unpack_bits(compare.pack_bits(v), len(v)) == v).all()
    with pytest.raises(ValueError):
        compare.unpack_bits(compare.pack_bits(v), len(v) + 100)
    with pytest.raises(ValueError):  # set bits beyond n: the vector was longer than claimed
        compare.unpack_bits(compare.pack_bits(np.ones(16, bool)), 9)


def test_identical_results_are_as_accurate_and_deterministic() -> None:
    a = _seeds(0.9)
    d = compare.paired_interval(a, a, group=3)
    assert d.mean == 0 and d.lo == 0 and d.hi == 0 and d.verdict() == "as accurate"
    b = _seeds(0.85, rng_seed=1)
    assert compare.paired_interval(a, b, group=3) == compare.paired_interval(a, b, group=3)


@pytest.mark.parametrize(("pa", "pb", "label"), [
    (0.95, 0.80, "better"),
    (0.80, 0.95, "worse"),
])
def test_clear_differences_are_resolved(pa: float, pb: float, label: str) -> None:
    a, b = _seeds(pa), _seeds(pb, rng_seed=7)
    d = compare.paired_interval(a, b, group=3)
    assert d.verdict() == label
    assert d.lo is not None and d.hi is not None and d.lo < d.mean < d.hi
    r = compare.paired_interval(b, a, group=3)  # the other direction: the same interval, negated
    assert (r.mean, r.lo, r.hi) == pytest.approx((-d.mean, -d.hi, -d.lo))
    assert r.verdict() == {"better": "worse", "worse": "better"}[label]


def test_labels_of_the_margin_rule() -> None:
    iv = lambda lo, hi: compare.Interval((lo + hi) / 2, lo, hi, (0,) * 5, (0.0,) * 5)  # noqa: E731
    assert iv(0.011, 0.03).verdict() == "better"
    assert iv(-0.03, -0.011).verdict() == "worse"
    assert iv(-0.009, 0.009).verdict() == "as accurate"
    assert iv(-0.005, 0.02).verdict() == "not worse" and iv(-0.005, 0.02).non_inferior()
    assert iv(-0.02, 0.005).verdict() == "not better" and not iv(-0.02, 0.005).non_inferior()
    assert iv(-0.02, 0.02).verdict() == "not resolved" and not iv(-0.02, 0.02).non_inferior()


def test_too_few_seeds_give_no_interval() -> None:
    a, b = _seeds(0.9, seeds=3), _seeds(0.7, seeds=3, rng_seed=2)
    d = compare.paired_interval(a, b, group=3)
    assert d.lo is None and d.verdict() == "no interval" and not d.non_inferior()
    assert len(d.per_seed) == 3 and "seeds:" in d.text()


def test_dominance_is_checked_both_ways() -> None:
    iv = lambda lo, hi: compare.Interval((lo + hi) / 2, lo, hi, (0,) * 5, (0.0,) * 5)  # noqa: E731
    same = iv(-0.004, 0.004)
    # equal speed and equal accuracy: each dominates the other (the interval of B − A is the same here)
    assert compare.dominates(1.50, 1.50, same) and compare.dominates(1.50, 1.50, iv(-0.004, 0.004))
    # 2 % slower is within the 3 % match; 5 % slower is not
    assert compare.dominates(1.47, 1.50, same) and not compare.dominates(1.42, 1.50, same)
    # faster but its interval reaches below -1 pt: not shown as accurate, so no dominance
    loose = iv(-0.02, 0.02)
    assert not compare.dominates(2.0, 1.5, loose) and not compare.dominates(1.5, 2.0, iv(-0.02, 0.02))
    # a positive mean alone is not a win
    assert not compare.dominates(2.0, 1.5, compare.Interval(0.01, -0.015, 0.035, (0,) * 5, (0.0,) * 5))
