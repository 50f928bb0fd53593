"""Issue 31, item 2: a recommendation chosen on one part of the validation split and confirmed on another.

The bound (known binomial cases, its exact conditional coverage), the split (deterministic, disjoint, recorded),
the recommendation (the fastest confirmed trial, the next-fastest when the fastest is not confirmed, the base
when none is, a study made before the split), the study's refusal of a resumed old study, and the run summary's
lines about the constraint."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
import torch
from optuna.distributions import FloatDistribution
from scipy.stats import binom
from torch.utils.data import TensorDataset

from latopt.data import Task, split_validation
from latopt.errors import LatoptError
from latopt.run.record import SearchPick
from latopt.run.report import constraint_lines
from latopt.search import format_table, front_summary, open_storage, open_study, recommend, recommendation
from latopt.search._confirm import confirm, drop_bound, paired_counts, upper_pi
from latopt.search.record import Confirmation

DISTS = {"lambda_c": FloatDistribution(0.05, 5.0, log=True)}
SPLIT = {"fraction": 0.5, "seed": 0, "n_validation": 200, "n_selection": 100, "n_confirmation": 100,
         "confirmation_sha256": "x", "level": 0.95, "method": "exact McNemar"}


# the bound ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("d", [1, 2, 5, 17, 60])
@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_the_binomial_bound_on_known_cases(d: int, level: float) -> None:
    # 0 of d: 1 − π_U^... solves (1 − π)^d = 1 − level; d − 1 of d: 1 − π^d = 1 − level; d of d: 1
    assert upper_pi(0, d, level) == pytest.approx(1 - (1 - level) ** (1 / d), rel=1e-9)
    assert upper_pi(d - 1, d, level) == pytest.approx(level ** (1 / d), rel=1e-9)
    assert upper_pi(d, d, level) == 1.0
    for k in range(d):   # the defining property: P(Binomial(d, π_U) <= k) = 1 − level
        assert binom.cdf(k, d, upper_pi(k, d, level)) == pytest.approx(1 - level, rel=1e-7)


def test_the_drop_bound_from_paired_counts() -> None:
    n = 179
    assert drop_bound(0, 0, n) == 0.0                                # the same predictions: confirmed at 0
    assert drop_bound(1, 0, n) == pytest.approx(1 / n)               # every disagreement lost: π_U = 1
    assert drop_bound(3, 0, n) == pytest.approx(3 / n)
    assert drop_bound(1, 1, n) == pytest.approx(2 / n * (2 * 0.95 ** 0.5 - 1))
    assert drop_bound(0, 4, n) == pytest.approx(4 / n * (2 * (1 - 0.05 ** 0.25) - 1))
    assert drop_bound(0, 5, n) == pytest.approx(5 / n * (2 * (1 - 0.05 ** 0.2) - 1))
    assert drop_bound(0, 4, n) > 0 > drop_bound(0, 5, n)   # 4 images won and none lost: not yet surely better; 5: so
    # more losses, same disagreements: a larger bound; a lower level: a smaller one
    assert [drop_bound(k, 6 - k, n) for k in range(7)] == sorted(drop_bound(k, 6 - k, n) for k in range(7))
    assert drop_bound(2, 2, n, 0.8) < drop_bound(2, 2, n, 0.95)
    for lost, won in ((2, 1), (5, 5), (0, 3)):   # the bound is above the observed drop
        assert drop_bound(lost, won, n) > (lost - won) / n
    c = confirm(2, 0, 100, 0.02)
    assert c.drop == pytest.approx(0.02) and c.bound == pytest.approx(0.02) and c.passed
    assert not confirm(3, 0, 100, 0.02).passed
    with pytest.raises(ValueError):
        drop_bound(60, 50, 100)


@pytest.mark.parametrize("d", [1, 3, 8, 20])
def test_the_bound_covers_the_conditional_drop_at_its_level(d: int) -> None:
    """Exact, not sampled: given d disagreements, P(bound >= d/n·(2π − 1)) >= level for every π."""
    n, level = 150, 0.95
    bounds = np.array([drop_bound(k, d - k, n, level) for k in range(d + 1)])
    for pi in np.linspace(0.0, 1.0, 101):
        truth = d / n * (2 * pi - 1)
        assert binom.pmf(np.arange(d + 1), d, pi)[bounds >= truth - 1e-12].sum() >= level - 1e-9


def test_paired_counts() -> None:
    base = np.array([True, True, True, False, False, True])
    trial = np.array([True, False, False, True, False, True])
    c = paired_counts(base, trial)
    assert (c["confirm_n"], c["confirm_lost"], c["confirm_won"]) == (6, 2, 1)
    assert c["confirm_base_acc"] == pytest.approx(4 / 6) and c["confirm_acc"] == pytest.approx(3 / 6)


# the split ---------------------------------------------------------------------------------------------------
def _task(n_val: int) -> Task:
    ds = TensorDataset(torch.zeros(n_val, 3, 2, 2), torch.arange(n_val))
    return Task("t", n_val, [str(i) for i in range(n_val)], 2, ds, ds, ds)


def _labels(ds) -> list[int]:
    return [int(ds[i][1]) for i in range(len(ds))]


def test_the_split_is_deterministic_disjoint_and_recorded() -> None:
    task = _task(359)
    sel, conf, info = split_validation(task, 0.5, 0)
    sel2, conf2, info2 = split_validation(task, 0.5, 0)
    assert _labels(conf) == _labels(conf2) and _labels(sel.val) == _labels(sel2.val) and info == info2
    a, b = _labels(sel.val), _labels(conf)
    assert sorted(a + b) == list(range(359)) and not set(a) & set(b)         # a partition of the validation split
    assert (len(b), len(a)) == (180, 179) == (info["n_confirmation"], info["n_selection"])
    assert a == sorted(a) and b == sorted(b)                                 # each part in its order
    assert sel.train is task.train and sel.test is task.test                 # training and test untouched
    _, conf3, info3 = split_validation(task, 0.5, 1)
    assert _labels(conf3) != b and info3["confirmation_sha256"] != info["confirmation_sha256"]
    assert info3["seed"] == 1 and info["fraction"] == 0.5
    with pytest.raises(LatoptError, match="too few"):
        split_validation(_task(1), 0.5, 0)


# the recommendation ------------------------------------------------------------------------------------------
def _study(tmp_path, max_drop: float = 0.02, split: dict | None = SPLIT) -> optuna.Study:
    storage = open_storage(f"sqlite:///{tmp_path}/s.db", heartbeat_interval=None)
    st = open_study(storage, "t", "latency", {"max_acc_drop": max_drop}).study
    if split is not None:
        st.set_user_attr("confirm", split)
    return st


def _add(st: optuna.Study, acc: float, ms: float, lost: int | None, won: int = 0, *, base: bool = False,
         base_acc: float = 0.90, max_drop: float = 0.02) -> None:
    attrs = {"base": base, "val_acc": acc, "fold_set": {}, "checkpoint": f"/x/{ms}.pt"}
    if lost is not None:
        attrs |= {"confirm_n": 100, "confirm_lost": lost, "confirm_won": won}
    drop = 0.0 if base else base_acc - acc
    st.add_trial(optuna.create_trial(values=[acc, ms], params={"lambda_c": 0.5}, distributions=DISTS,
                                     user_attrs=attrs, system_attrs={"constraints:acc_drop": drop - max_drop}))


def test_the_fastest_trial_not_confirmed_falls_back_to_the_next_fastest_that_is(tmp_path) -> None:
    st = _study(tmp_path)
    _add(st, 0.90, 10.0, 0, base=True)   # 0 base
    _add(st, 0.89, 8.0, 1, 1)            # 1 confirmed (bound 2/100·(2·0.9747−1) = 1.9 %)
    _add(st, 0.895, 6.0, 4, 0)           # 2 within on selection, 4 lost of 100 on confirmation: not confirmed
    _add(st, 0.85, 4.0, 0, 0)            # 3 fastest, over the constraint on selection: never tried
    rec = recommendation(st)
    assert rec.trial == 1 and recommend(st).number == 1
    assert [r.trial for r in rec.rejected] == [2] and rec.rejected[0].bound == pytest.approx(0.04)
    assert rec.confirm is not None and rec.confirm.bound == pytest.approx(drop_bound(1, 1, 100)) and rec.note is None
    s = front_summary(st)
    assert s.recommended == 1
    rows = {r.trial: r for r in s.rows}
    assert rows[2].confirmed is False and rows[1].confirmed is True and rows[2].confirm_drop == 0.04
    table = format_table(s)
    assert "trial 2 not confirmed: confirmed drop +4.00% (4 lost, 0 won of 100), bound +4.00% > 2.00%" in table
    assert "recommended trial 1: confirmed drop +0.00%" in table
    # a looser constraint confirms trial 2 (3 is still too far below the base on the selection part at 0.04)
    assert recommend(st, max_acc_drop=0.04).number == 2


def test_no_folded_trial_confirmed_recommends_the_base_and_says_so(tmp_path) -> None:
    st = _study(tmp_path)
    _add(st, 0.90, 10.0, 0, base=True)
    _add(st, 0.89, 8.0, 3, 0)
    _add(st, 0.895, 6.0, 5, 2)
    rec = recommendation(st)
    assert rec.trial == 0 and [r.trial for r in rec.rejected] == [2, 1]
    assert rec.note is not None and "no folded trial within the accuracy constraint was confirmed" in rec.note
    assert rec.note in format_table(front_summary(st))


def test_nothing_to_recommend_is_said(tmp_path) -> None:
    st = _study(tmp_path)
    _add(st, 0.89, 8.0, 0, 0)              # no base trial completed
    rec = recommendation(st)
    assert rec.trial is None and rec.note is not None and "base trial has not completed" in rec.note
    assert rec.note in format_table(front_summary(st))


def test_a_study_made_before_the_split_is_shown_without_a_recommendation(tmp_path) -> None:
    st = _study(tmp_path, split=None)
    _add(st, 0.90, 10.0, None, base=True)
    _add(st, 0.895, 6.0, None)
    rec = recommendation(st)
    assert rec.trial is None and rec.note is not None and "made before latopt held out" in rec.note
    s = front_summary(st)   # still readable: its table, without confirmation columns
    assert s.recommended is None and all(r.confirm_drop is None for r in s.rows)
    assert rec.note in format_table(s)


def test_resuming_a_study_made_before_the_split_is_refused_in_one_line(tmp_path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path}/s.db", heartbeat_interval=None)
    open_study(storage, "old", "latency", {"model": "m"})
    with pytest.raises(LatoptError, match=r"'old' .*made before .*held out") as e:
        open_study(storage, "old", "latency", {"model": "m", "confirm": SPLIT})
    assert "\n" not in str(e.value)
    open_study(storage, "new", "latency", {"model": "m", "confirm": SPLIT})
    open_study(storage, "new", "latency", {"model": "m", "confirm": SPLIT})     # resumed
    with pytest.raises(LatoptError, match="was created with confirm="):           # another split: refused
        open_study(storage, "new", "latency", {"model": "m", "confirm": {**SPLIT, "seed": 1}})


# the run's summary -------------------------------------------------------------------------------------------
def test_the_summary_prints_the_constraint_the_confirmed_drop_and_the_test_drop() -> None:
    c = confirm(1, 0, 179, 0.01)
    srch = SearchPick.model_validate(
        {"trial": 2, "checkpoint": "t.pt", "max_acc_drop": 0.01, "confirm_split": {**SPLIT, "seed": 3}, "confirm": c,
         "rejected": [{"trial": 5, **confirm(4, 1, 179, 0.01).model_dump()}, {"trial": 4, "why": "no confirmation counts"}]})
    lines = constraint_lines(srch, 0.9889, 0.9667)
    text = "\n".join(lines)
    assert "constraint      accuracy drop ≤ 1.00 pt" in lines[0]
    assert f"confirmed drop  +{100 / 179:.2f} pt on 179 held-out validation images (1 lost, 0 won), " \
           f"≤ +{100 / 179:.2f} pt at 95% one-sided" in text and "seed 3" in text
    assert "not confirmed   trial 5 (drop +1.68 pt" in text
    assert "test drop       +2.22 pt (98.89% → 96.67%): over the constraint by 1.22 pt" in text
    assert "within the constraint" in constraint_lines(srch, 0.9889, 0.9861)[-1]
    base = srch.model_copy(update={"confirm": Confirmation.of_base(), "rejected": []})
    assert "the base model itself" in "\n".join(constraint_lines(base, 0.99, 0.99))
    assert "not confirmed" not in "\n".join(constraint_lines(base, 0.99, 0.99))
    # a record without the constraint: nothing made up
    assert constraint_lines(SearchPick(trial=None, checkpoint=None), 0.99, 0.98) == []
