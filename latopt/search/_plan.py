"""``latopt plan``'s library side: the DP (``method: dp``) run as a study of the search, beside a Layer Folding
study of the same name, at one budget as a one-trial study, or as a plan file alone.

- :func:`run_plan` without a budget: the study ``<study>-dp`` (:func:`dp_study_name`; ``runs/<study>-dp/search/``),
  one trial per budget of ``dp.budgets``; its base is the Layer Folding study's (``runs/<study>/search/base/``),
  trained once when none is given. ``latopt search --show`` of ``<study>`` draws both fronts.
- :func:`run_plan` at ``budget`` B: the one-trial study ``<study>-dp-budget<B>`` in ``runs/<study>/search/dp-budget<B>/``
  (the base trial and the plan's, ``trial-1/``: ``folded.pt``, ``report.json``): the plan is confirmed on the
  held-out validation images as every study's candidates are; :func:`plan_report` reads the plan's report,
  :func:`plan_confirmation` says whether its drop is confirmed.
- :func:`plan_file`: the plan alone (:func:`latopt.dp.plan_only`: no base trained, nothing fine-tuned), written
  as a plan file (``latopt export --plan`` applies it).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from latopt.dp import DPReport, PlanRecord, plan_only, write_plan
from latopt.errors import LatoptError
from latopt.files.artifacts import check_name
from latopt.layerfold.fold_record import read_report
from latopt.methods.method import resolve_lut
from latopt.search._options import SearchOptions
from latopt.search._pareto import trial_confirmation
from latopt.search._run import SearchResult, config_of, dp_study_name, run_search
from latopt.search.study_record import TrialAttrs
from latopt.training.torch_settings import set_threads


def _stem(o: SearchOptions, name: str) -> str:
    return check_name(o.study, "study", param="study") if o.study is not None else name


def run_plan(o: SearchOptions, budget: float | None = None) -> SearchResult:
    """The DP's study of ``o``'s config (module doc): over ``dp.budgets``, or the one plan at ``budget``."""
    cfg = config_of(dataclasses.replace(o, overrides={**o.overrides, "method": "dp"}))
    stem = _stem(o, cfg.name)
    base_dir = Path(o.runs_dir) / stem / "search"
    if budget is None:
        return run_search(dataclasses.replace(o, config=cfg, overrides={}, study=dp_study_name(stem),
                                              base_dir=base_dir))
    cfg = cfg.with_overrides({"dp.budgets": [budget], "dp.refine": 0})   # one plan: no second, longer fine-tune
    b = cfg.dp.budgets[0]
    return run_search(dataclasses.replace(o, config=cfg, overrides={}, study=f"{stem}-dp-budget{b:g}",
                                          study_dir=base_dir / f"dp-budget{b:g}", base_dir=base_dir, trials=2,
                                          workers=1))


def _plan_trial(res: SearchResult) -> tuple[optuna.Study, FrozenTrial]:
    study = optuna.load_study(study_name=res.study_name, storage=res.storage)
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if not TrialAttrs.of(t).base]
    if not done:
        raise LatoptError(f"study {res.study_name!r} holds no completed plan; rerun latopt plan to finish it")
    return study, done[-1]


def plan_report(res: SearchResult) -> DPReport:
    """The report of the plan a one-budget DP study made (its one complete trial besides the base)."""
    t = _plan_trial(res)[1]
    report = TrialAttrs.of(t).report
    if report is None:
        raise LatoptError(f"trial {t.number} of study {res.study_name!r} records no report (user attribute "
                          "'report'): not a trial of latopt plan")
    return read_report(report, DPReport)


def plan_confirmation(res: SearchResult) -> str:
    """One line: the plan's accuracy drop on the held-out validation images, its bound and the verdict."""
    study, t = _plan_trial(res)
    m = res.summary.max_acc_drop
    c = None if m is None else trial_confirmation(study, t, float(m))
    if c is None or c.level is None:
        return "the plan's accuracy drop was not confirmed (no held-out validation counts)"
    verdict = "confirmed" if c.passed else "NOT confirmed (latopt run would ship the network as it is)"
    return (f"accuracy drop on {c.n} held-out validation images {c.drop:+.2%} ({c.lost} lost, {c.won} won), "
            f"bound {c.bound:+.2%} (one-sided {c.level:.0%}) against the constraint {m:.2%}: {verdict}")


def plan_file(o: SearchOptions, budget: float, out: str | Path | None = None) -> tuple[PlanRecord, Path]:
    """The DP's plan at ``budget`` alone (:func:`latopt.dp.plan_only`: no base trained, nothing fine-tuned; ``o.base``
    scores it with ``dp.importance``), written to ``out`` (default ``runs/<study>/search/plan-budget<B>.json``);
    returns the plan and the file's path."""
    cfg = config_of(dataclasses.replace(o, overrides={**o.overrides, "method": "dp"}))
    b = cfg.with_overrides({"dp.budgets": [budget]}).dp.budgets[0]
    set_threads(o.threads)
    stem = _stem(o, cfg.name)
    _, lut_path = resolve_lut(cfg, o.lut, required=True)
    assert lut_path is not None  # required=True: found, or LatoptError
    plan = plan_only(cfg, lut_path, budget=b, importance=cfg.dp.importance, base_checkpoint=o.base,
                     variants=cfg.dp.variants, seed=o.seed, progress=o.progress)
    path = Path(out) if out else Path(o.runs_dir) / stem / "search" / f"plan-budget{b:g}.json"
    return plan, write_plan(path, plan)
