"""The search: a method-blind Optuna study over a compression method's candidates, its Pareto front and the
confirmed recommendation.

Public API::

    from latopt.search import SearchOptions, run_search, pareto_front, recommend, front_summary, write_front

    res = run_search(SearchOptions(config="quickstart", trials=12))   # -> SearchResult; the config's method
    res = run_search(SearchOptions(config="quickstart", overrides={"method": "dp", "dp.budgets": [0.6, 0.8]}))
    study = optuna.load_study(study_name=res.study_name, storage=res.storage)
    front = pareto_front(study)              # list[FrozenTrial]: feasible, non-dominated, fastest first
    best = recommend(study, max_acc_drop=0.01)   # FrozenTrial | None: fastest within the constraint, confirmed
    best.user_attrs["checkpoint"]            # the folded checkpoint of that trial
    summary = front_summary(study)           # FrontSummary (latopt.search.study_record): what pareto.json holds
    summary.recommendation.rejected          # the faster trials whose drop was not confirmed, and why

The method (the config's ``method``, :mod:`latopt.methods`: ``layerfold``, ``dp``) gives the study's space, its
sampler and its candidates; everything else here is the same for every method. ``latopt plan``'s library side:
``run_plan(options)`` is the DP's study ``<study>-dp`` (:func:`dp_study_name`; ``runs/<study>-dp/search/``) beside a
Layer Folding study, its base the Layer Folding study's; ``run_plan(options, budget=0.6)`` one plan at that budget
as a one-trial study in ``runs/<study>/search/dp-budget0.6/`` (``plan_report(result)`` is its DP report);
``plan_file(options, 0.6)`` the plan file alone (no training). ``show_front`` of ``<study>`` summarises and draws
``<study>-dp`` with it (``others``).

Validation: the search cuts the validation split once, seeded by ``seed`` (:func:`latopt.data.split_validation`,
recorded in the study's ``confirm`` attribute): the trials train, pick their best epoch and are scored on the
*selection* part (half); the *confirmation* part is evaluated once per trial (attributes ``confirm_n``,
``confirm_lost``, ``confirm_won``, ``confirm_acc``, ``confirm_base_acc``) and read only by the recommendation:
the fastest trial within the constraint on the selection part whose drop is also confirmed on the held-out
part, by a one-sided exact unconditional bound at 95 %, the non-dominated trials confirmed in a fixed sequence
from the slowest (:mod:`latopt.search._confirm`; ``recommendation(study)`` lists those not confirmed or not tested); the base model
when no folded trial is confirmed.

Objectives: (validation accuracy ↑, LUT-predicted latency in ms ↓); ``objective="depth"``: remaining
non-linear layers ↓; ``measure=True``: measured end-to-end latency relative to the base model timed in the
same interleaved run ↓ (``measured_ratio``; absolute times from different runs are not comparable). Searched: λ_c (log), τ, p (+ granularity
when ``search.granularity`` lists both). The accuracy-drop constraint is ``trial.set_constraint`` (Optuna 5's
replacement for the samplers' deprecated ``constraints_func``); the value is also the user attribute
``constraint`` (feasible when <= 0). Trial user attributes: ``val_acc``, ``base_acc``, ``acc_drop``,
``fold_set`` ({block index: variant}), ``latency_ms`` (LUT prediction), ``measured_ms`` /
``measured_base_ms`` / ``measured_ratio`` (with measure), ``nonlinear_layers``, ``checkpoint``, ``report``, ``base`` (the
enqueued base trial); they are plain JSON types and the objectives are named (``study.metric_names``), so a
study opens in optuna-dashboard as it is. Layout: ``runs/<study>/search/{study.db, base/, trial-<n>/, pareto.*}``.
"""

from __future__ import annotations

from latopt.constants import CONFIRM_FRACTION
from latopt.search._confirm import CONFIRM_LEVEL, CONFIRM_METHOD, check_power, drop_bound
from latopt.search._options import SearchOptions
from latopt.search._pareto import (
    REFINES,
    base_trial,
    format_table,
    front_summary,
    pareto_front,
    recommend,
    recommendation,
    recommendation_lines,
    write_front,
)
from latopt.search._plan import plan_confirmation, plan_file, plan_report, run_plan
from latopt.search._run import SearchResult, dp_study_name, run_search, show_front
from latopt.search._storage import STUDY_OBJECTIVES, open_storage, open_study, redact
from latopt.search._trial import count_nonlinear
from latopt.search.study_record import Confirmation, FrontRow, FrontSummary, Recommendation, Rejected

__all__ = [
    "CONFIRM_FRACTION",
    "CONFIRM_LEVEL",
    "CONFIRM_METHOD",
    "REFINES",
    "STUDY_OBJECTIVES",
    "Confirmation",
    "FrontRow",
    "FrontSummary",
    "Recommendation",
    "Rejected",
    "SearchOptions",
    "SearchResult",
    "base_trial",
    "check_power",
    "count_nonlinear",
    "dp_study_name",
    "drop_bound",
    "format_table",
    "front_summary",
    "open_storage",
    "open_study",
    "pareto_front",
    "plan_confirmation",
    "plan_file",
    "plan_report",
    "recommend",
    "recommendation",
    "recommendation_lines",
    "redact",
    "run_plan",
    "run_search",
    "show_front",
    "write_front",
]
