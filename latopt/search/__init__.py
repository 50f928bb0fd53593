"""Hyper-parameter search for Layer Folding with Optuna (issue 5).

Public API (imported lazily, so ``latopt --help`` does not import Optuna)::

    from latopt.search import SearchOptions, run_search, pareto_front, recommend, front_summary, write_front

    res = run_search(SearchOptions(config="configs/quickstart.yaml", trials=12))   # -> SearchResult
    study = optuna.load_study(study_name=res.study_name, storage=res.storage)
    front = pareto_front(study)              # list[FrozenTrial]: feasible, non-dominated, fastest first
    best = recommend(study, max_acc_drop=0.01)   # FrozenTrial | None: fastest within the accuracy constraint
    best.user_attrs["checkpoint"]            # the folded checkpoint of that trial

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

from typing import Any

_EXPORTS = {
    "SearchOptions": "latopt.search._run",
    "SearchResult": "latopt.search._run",
    "run_search": "latopt.search._run",
    "resolve_lut": "latopt.search._run",
    "make_sampler": "latopt.search._run",
    "SearchSpace": "latopt.search._space",
    "Range": "latopt.search._space",
    "space_from_config": "latopt.search._space",
    "open_storage": "latopt.search._storage",
    "open_study": "latopt.search._storage",
    "OBJECTIVES": "latopt.search._storage",
    "pareto_front": "latopt.search._pareto",
    "recommend": "latopt.search._pareto",
    "base_trial": "latopt.search._pareto",
    "front_summary": "latopt.search._pareto",
    "format_table": "latopt.search._pareto",
    "write_front": "latopt.search._pareto",
    "count_nonlinear": "latopt.search._trial",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'latopt.search' has no attribute {name!r}")
