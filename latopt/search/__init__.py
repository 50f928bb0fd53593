"""Hyper-parameter search for Layer Folding with Optuna.

Public API::

    from latopt.search import SearchOptions, run_search, pareto_front, recommend, front_summary, write_front

    res = run_search(SearchOptions(config="quickstart", trials=12))   # -> SearchResult
    study = optuna.load_study(study_name=res.study_name, storage=res.storage)
    front = pareto_front(study)              # list[FrozenTrial]: feasible, non-dominated, fastest first
    best = recommend(study, max_acc_drop=0.01)   # FrozenTrial | None: fastest within the accuracy constraint
    best.user_attrs["checkpoint"]            # the folded checkpoint of that trial

``run_dp_search(SearchOptions(config=..., method="dp", budget=0.6))`` (``latopt search --method dp``) is
the other method: the DP of :mod:`latopt.dp` picks one variant per block under the budget and applies it
(one fold directory ``runs/<study>/search/dp-budget<B>/``, no study).

Objectives: (validation accuracy ↑, LUT-predicted latency in ms ↓); ``objective="depth"``: remaining
non-linear layers ↓; ``measure=True``: measured end-to-end latency relative to the base model timed in the
same interleaved run ↓ (``measured_ratio``; absolute times from different runs are not comparable). Searched: λ_c (log), τ, p (+ granularity
when ``search.granularity`` lists both). The accuracy-drop constraint is ``trial.set_constraint`` (Optuna 5's
replacement for the samplers' deprecated ``constraints_func``); the value is also the user attribute
``constraint`` (feasible when <= 0). Trial user attributes: ``val_acc``, ``base_acc``, ``acc_drop``,
``fold_set`` ({block index: variant}), ``latency_ms`` (LUT prediction), ``measured_ms`` /
``measured_base_ms`` / ``measured_ratio`` (with measure), ``nonlinear_layers``, ``checkpoint``, ``report``, ``base`` (the
enqueued base trial). Layout: ``runs/<study>/search/{study.db, base/, trial-<n>/, pareto.*}``.
"""

from __future__ import annotations

from latopt.search._options import SearchOptions
from latopt.search._pareto import (
    base_trial,
    format_table,
    front_summary,
    pareto_front,
    recommend,
    write_front,
)
from latopt.search._run import SearchResult, make_sampler, resolve_lut, run_dp_search, run_search, show_front
from latopt.search._space import SearchSpace, space_from_config
from latopt.search._storage import OBJECTIVES, open_storage, open_study
from latopt.search._trial import count_nonlinear

__all__ = [
    "OBJECTIVES",
    "SearchOptions",
    "SearchResult",
    "SearchSpace",
    "base_trial",
    "count_nonlinear",
    "format_table",
    "front_summary",
    "make_sampler",
    "open_storage",
    "open_study",
    "pareto_front",
    "recommend",
    "resolve_lut",
    "run_dp_search",
    "run_search",
    "show_front",
    "space_from_config",
    "write_front",
]
