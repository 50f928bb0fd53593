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
from latopt.run.run_record import SearchPick
from latopt.run.run_report import constraint_lines
from latopt.search import format_table, front_summary, open_storage, open_study, recommend, recommendation
from latopt.search._confirm import (
    check_power,
    confirm,
    drop_bound,
    floor,
    images_for,
    paired_counts,
    upper_pi,
)
from latopt.search._pareto import REFINES
from latopt.search._run import refine_trials
from latopt.search.study_record import Confirmation

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
    # two networks that agree everywhere: about 4/n, the least n images confirm (floor); never 0
    assert drop_bound(0, 0, n) == floor(n) and 3.5 / n < floor(n) < 4.5 / n
    assert floor(2500) < 0.002 < 0.02 < floor(180)
    # more losses, same disagreements: a larger bound; a lower level: a smaller one
    bounds = [drop_bound(k, 6 - k, n) for k in range(7)]
    assert bounds == sorted(bounds) and len(set(bounds)) == 7
    assert drop_bound(2, 2, n, 0.8) < drop_bound(2, 2, n, 0.95)
    for lost, won in ((2, 1), (5, 5), (0, 3), (3, 0), (40, 10)):   # the bound is above the observed drop
        assert drop_bound(lost, won, n) > (lost - won) / n
    assert drop_bound(n, 0, n) == 1.0
    # many images won and none lost: surely better
    assert drop_bound(0, 40, n) < 0
    c = confirm(0, 0, 2500, 0.01)
    assert c.drop == 0 and c.bound == pytest.approx(floor(2500)) and c.passed
    assert not confirm(0, 0, 180, 0.01).passed        # 180 images cannot confirm 1 point, whatever the network
    with pytest.raises(ValueError):
        drop_bound(60, 50, 100)


def _coverage(n: int, p_lost: float, p_won: float, level: float = 0.95) -> float:
    """Exact: P(bound >= p_lost − p_won) over every (lost, won) of n images with mass above 1e-12, by duality the
    chance that the test of "drop >= the true drop" does not reject."""
    from scipy.stats import beta as beta_dist

    from latopt.search._confirm import GAMMA_SHARE, _p_value

    alpha, delta, pi = 1 - level, p_lost - p_won, p_lost + p_won
    gamma = GAMMA_SHARE * alpha
    covered = 0.0
    pd = binom.pmf(np.arange(n + 1), n, pi)
    for d in np.flatnonzero(pd > 1e-12):
        pi_hi = 1.0 if d == n else float(beta_dist.ppf(1 - gamma, d + 1, n - d))
        pl = binom.pmf(np.arange(d + 1), d, p_lost / pi if pi > 0 else 0.0)
        for lost in np.flatnonzero(pl * pd[d] > 1e-12):
            if _p_value(2 * int(lost) - int(d), n, delta, pi_hi, gamma) > alpha:
                covered += pd[d] * pl[lost]
    return covered


@pytest.mark.parametrize(("n", "p_lost", "p_won"), [
    # one-sided: the candidate only loses images (the conditional McNemar bound covered ~half the time here)
    (180, 0.005, 0.0), (180, 0.01, 0.0), (180, 0.02, 0.0), (180, 0.05, 0.0), (60, 0.03, 0.0),
    # both ways, a small and a large disagreement rate
    (180, 0.02, 0.01), (180, 0.03, 0.02), (80, 0.12, 0.08), (60, 0.1, 0.05),
    # no drop at all, and a better candidate
    (180, 0.01, 0.01), (180, 0.0, 0.02), (400, 0.004, 0.0)])
def test_the_bound_covers_the_drop_at_its_level_in_every_regime(n: int, p_lost: float, p_won: float) -> None:
    """Exact enumeration of the multinomial (lost, won, agree): P(bound >= true drop) >= the level."""
    assert _coverage(n, p_lost, p_won) >= 0.95 - 1e-9


def test_the_power_check_says_what_would_confirm() -> None:
    check_power(2500, 0.01)                        # 2500 images can confirm a 1-point drop
    with pytest.raises(LatoptError) as e:          # 180 cannot, even for a network that changes nothing
        check_power(180, 0.01)
    msg = str(e.value)
    assert "180 images" in msg and f"search.max_acc_drop >= {floor(180):.4f}" in msg and "\n" not in msg
    assert f"{images_for(0.01)} confirmation images" in msg and e.value.param == "max_acc_drop"
    assert floor(images_for(0.01)) <= 0.01 < floor(images_for(0.01) - 1)


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
         base_acc: float = 0.90, max_drop: float = 0.02, n: int = 2000) -> None:
    attrs = {"base": base, "val_acc": acc, "fold_set": {}, "checkpoint": f"/x/{ms}.pt"}
    if lost is not None:
        attrs |= {"confirm_n": n, "confirm_lost": lost, "confirm_won": won}
    drop = 0.0 if base else base_acc - acc
    st.add_trial(optuna.create_trial(values=[acc, ms], params={"lambda_c": 0.5}, distributions=DISTS,
                                     user_attrs=attrs, system_attrs={"constraints:acc_drop": drop - max_drop}))


def test_candidates_are_confirmed_in_a_fixed_sequence_from_the_slowest(tmp_path) -> None:
    st = _study(tmp_path)
    _add(st, 0.90, 10.0, 0, base=True)   # 0 base
    _add(st, 0.899, 8.0, 2, 2)           # 1 confirmed: 4 of 2000 images changed, both ways
    _add(st, 0.895, 6.0, 60, 0)          # 2 within on selection, 60 lost of 2000 on confirmation: not confirmed
    _add(st, 0.893, 5.0, 0, 0)           # 3 would be confirmed, but the sequence stopped at 2: not tested
    _add(st, 0.85, 4.0, 0, 0)            # 4 fastest, over the constraint on selection: never in the sequence
    rec = recommendation(st)
    assert rec.trial == 1 and recommend(st).number == 1
    assert [r.trial for r in rec.rejected] == [2, 3]
    assert rec.rejected[0].bound == pytest.approx(drop_bound(60, 0, 2000)) and rec.rejected[0].bound > 0.02
    assert rec.rejected[1].confirmation is None and rec.rejected[1].why == "not tested: the sequence stopped at trial 2"
    assert rec.confirm is not None and rec.confirm.bound == pytest.approx(drop_bound(2, 2, 2000)) and rec.note is None
    s = front_summary(st)
    assert s.recommended == 1
    rows = {r.trial: r for r in s.rows}
    assert rows[2].confirmed is False and rows[1].confirmed is True and rows[2].confirm_drop == 0.03
    table = format_table(s)
    assert (f"trial 2 not confirmed: confirmed drop +3.00% (60 lost, 0 won of 2000), bound "
            f"+{100 * drop_bound(60, 0, 2000):.2f}% > 2.00%") in table
    assert "trial 3: not tested: the sequence stopped at trial 2" in table
    assert "recommended trial 1: confirmed drop +0.00%" in table
    # a looser constraint confirms trial 2, and the sequence goes on to 3; 4 is still too far below the base on
    # the selection part at 0.04
    assert recommend(st, max_acc_drop=0.04).number == 3


def test_a_dominated_trial_is_not_in_the_sequence(tmp_path) -> None:
    st = _study(tmp_path)
    _add(st, 0.90, 10.0, 0, base=True)   # 0 base
    _add(st, 0.89, 8.0, 2, 2)            # 1 confirmed
    _add(st, 0.885, 7.0, 60, 0)          # 2 would not be confirmed, but 3 is faster and more accurate on selection
    _add(st, 0.888, 6.0, 0, 0)           # 3 confirmed: tested, 2 never stops the sequence before it
    rec = recommendation(st)
    assert rec.trial == 3 and rec.rejected == []
    s = front_summary(st)
    assert s.recommended == 3 and 2 not in {r.trial for r in s.rows}      # off the front, never tested: not shown
    assert "trial 2" not in format_table(s)


def test_no_folded_trial_confirmed_recommends_the_base_and_says_so(tmp_path) -> None:
    st = _study(tmp_path)
    _add(st, 0.90, 10.0, 0, base=True)
    _add(st, 0.895, 8.0, 30, 0)
    _add(st, 0.89, 6.0, 50, 20)
    rec = recommendation(st)
    assert rec.trial == 0 and [r.trial for r in rec.rejected] == [1, 2]   # 1 failed first: 2 was not tested
    assert rec.rejected[1].why == "not tested: the sequence stopped at trial 1"
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
    c = confirm(1, 0, 179, 0.05)
    srch = SearchPick.model_validate(
        {"trial": 2, "checkpoint": "t.pt", "max_acc_drop": 0.01, "confirm_split": {**SPLIT, "seed": 3}, "confirm": c,
         "rejected": [{"trial": 5, **confirm(4, 1, 179, 0.01).model_dump()}, {"trial": 4, "why": "no confirmation counts"},
                      {"trial": 6, "why": "not tested: the sequence stopped at trial 5"}]})
    lines = constraint_lines(srch, 0.9889, 0.9667)
    text = "\n".join(lines)
    assert "constraint      accuracy drop ≤ 1.00 pt" in lines[0]
    assert f"confirmed drop  +{100 / 179:.2f} pt on 179 held-out validation images (1 lost, 0 won), " \
           f"≤ +{100 * c.bound:.2f} pt at 95% one-sided" in text and "seed 3" in text
    assert "not confirmed   trial 5 (drop +1.68 pt" in text and "trial 4 (no confirmation counts)" in text
    assert text.count("faster, not tested: trial 6") == 1
    assert "test drop       +2.22 pt (98.89% → 96.67%): over the constraint by 1.22 pt" in text
    assert "within the constraint" in constraint_lines(srch, 0.9889, 0.9861)[-1]
    base = srch.model_copy(update={"confirm": Confirmation.of_base(), "rejected": []})
    assert "the base model itself" in "\n".join(constraint_lines(base, 0.99, 0.99))
    assert "not confirmed" not in "\n".join(constraint_lines(base, 0.99, 0.99))
    # a record without the constraint: nothing made up
    assert constraint_lines(SearchPick(trial=None, checkpoint=None), 0.99, 0.98) == []


# successive halving: the few best made again with a longer fine-tune -------------------------------------------
def _add_refined(st: optuna.Study, acc: float, ms: float, lost: int, won: int, refines: int) -> None:
    st.add_trial(optuna.create_trial(
        values=[acc, ms], params={"lambda_c": 0.5}, distributions=DISTS,
        user_attrs={"base": False, "val_acc": acc, "fold_set": {}, "checkpoint": f"/x/r{ms}.pt", "confirm_n": 2000,
                    "confirm_lost": lost, "confirm_won": won, REFINES: refines},
        system_attrs={"constraints:acc_drop": 0.90 - acc - 0.02}))


def test_the_fastest_within_reach_are_refined_once_each(tmp_path) -> None:
    st = _study(tmp_path)
    _add(st, 0.90, 10.0, 0, base=True)   # 0 base
    _add(st, 0.89, 8.0, 2, 2)            # 1 within the constraint
    _add(st, 0.87, 6.0, 60, 0)           # 2 over it (3 pt), within reach (2 x 2 pt)
    _add(st, 0.84, 5.0, 60, 0)           # 3 fastest, out of reach (6 pt)
    assert refine_trials(st, 2, 0.02, tmp_path) == [2, 1]          # fastest first, 3 left out
    waiting = st.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    assert [t.user_attrs[REFINES] for t in waiting] == [2, 1] and all(t.system_attrs["fixed_params"] == {"lambda_c": 0.5} for t in waiting)
    assert refine_trials(st, 2, 0.02, tmp_path) == [2, 1]          # asked again (a resumed study): nothing new
    assert len(st.get_trials(deepcopy=False)) == 6
    assert refine_trials(st, 3, 0.02, tmp_path) == [2, 1]          # nothing else within reach


def test_a_refined_candidate_is_confirmed_in_place_of_its_first_version(tmp_path) -> None:
    st = _study(tmp_path)
    _add(st, 0.90, 10.0, 0, base=True)   # 0 base
    _add(st, 0.89, 8.0, 2, 2)            # 1 confirmed
    _add(st, 0.889, 6.0, 60, 0)          # 2 within on selection, not confirmed: it would stop the sequence
    _add_refined(st, 0.892, 6.0, 3, 1, refines=2)   # 3: trial 2 fine-tuned longer, confirmed
    rec = recommendation(st)
    assert rec.trial == 3 and rec.rejected == []                 # 2 is not in the sequence: 3 stands for it
    _add_refined(st, 0.80, 8.0, 0, 0, refines=1)    # 4: trial 1 refined, now over the constraint on selection
    assert recommendation(st).trial == 3                         # 1 left the sequence, 4 never entered it

