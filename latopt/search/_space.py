"""The searched hyper-parameters: λ_c (log scale), τ, p and optionally the α granularity.

The ranges are the run config's ``search`` section, sampled as they are: :class:`latopt.config.SearchConfig`
validates them (each a list ``[lo, hi]`` with lo <= hi; λ_c > 0, τ in (0, 1], p > 1; granularities known,
at least one), so a bad range is one :class:`~latopt.errors.LatoptError` line before a study is touched.
The defaults are the config's too (τ in [0.7, 0.95]): there is one τ range, the config's.

:class:`BudgetSpace` is the DP's (``latopt plan`` without ``--budget``): the latency budget,
one trial per value of ``--budgets`` (Optuna's grid sampler, :meth:`BudgetSpace.sampler`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna

from latopt.config import RunConfig, SearchConfig
from latopt.dp import check_budget
from latopt.errors import LatoptError


@dataclass(frozen=True)
class SearchSpace:
    """What one trial samples: the ranges of ``search`` (validated by the config)."""

    search: SearchConfig = SearchConfig()

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Sample one point (Optuna records the distributions in the study)."""
        s = self.search
        out: dict[str, Any] = {
            "lambda_c": trial.suggest_float("lambda_c", *s.lambda_c, log=True),
            "tau": trial.suggest_float("tau", *s.tau),
            "p": trial.suggest_float("p", *s.p),
        }
        if len(s.granularity) > 1:
            out["granularity"] = trial.suggest_categorical("granularity", list(s.granularity))
        else:
            out["granularity"] = s.granularity[0]
        return out

    def base_params(self) -> dict[str, Any]:
        """Parameters recorded for the enqueued base trial: the weakest push, the strictest threshold."""
        s = self.search
        params: dict[str, Any] = {"lambda_c": s.lambda_c[0], "tau": s.tau[1], "p": s.p[0]}
        if len(s.granularity) > 1:
            params["granularity"] = s.granularity[0]
        return params

    def as_dict(self) -> dict[str, Any]:
        """The ranges as plain lists (part of a study's identity)."""
        s = self.search
        return {"lambda_c": list(s.lambda_c), "tau": list(s.tau), "p": list(s.p), "granularity": list(s.granularity)}


DEFAULT_BUDGETS = (0.5, 0.6, 0.7, 0.8, 0.9)


@dataclass(frozen=True)
class BudgetSpace:
    """The DP's search dimension: the budget (a fraction of the as-is LUT latency, each in (0, 1]), each of
    ``budgets`` once; the base trial is budget 1 (the network as it is)."""

    budgets: tuple[float, ...] = DEFAULT_BUDGETS

    def __post_init__(self) -> None:
        if not self.budgets:
            raise LatoptError("budgets: give at least one budget, e.g. (0.5, 0.7, 0.9)", param="budgets")
        seen: set[float] = set()
        for b in self.budgets:
            v = check_budget(b, "budgets")
            if v in seen:   # one trial per budget: a repeated one is a typo, not a second trial
                raise LatoptError(f"budgets: {b!r} is given twice; give each budget once, e.g. (0.5, 0.7, 0.9)",
                                  param="budgets")
            seen.add(v)

    def grid(self) -> list[float]:
        return sorted({float(b) for b in self.budgets})

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        return {"budget": trial.suggest_float("budget", self.grid()[0], 1.0)}

    def base_params(self) -> dict[str, Any]:
        return {"budget": 1.0}

    def as_dict(self) -> dict[str, Any]:
        return {"budgets": self.grid()}

    def sampler(self, seed: int) -> optuna.samplers.BaseSampler:
        """Each budget of the grid once, in any order; a resumed or parallel study skips those run or running."""
        return BudgetGrid({"budget": self.grid()}, seed=seed)


class BudgetGrid(optuna.samplers.GridSampler):
    """Optuna's grid sampler for a study that also holds trials outside the grid: the base trial (budget 1,
    enqueued with its parameters) and any copy of it. ``GridSampler.after_trial`` reads the finished trial's
    grid point once a single point is left unvisited, and such a trial has none (``KeyError: 'grid_id'`` after
    the base trial of a one-budget study); it visits no point of the grid, so there is nothing to do for it."""

    def after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial, state: optuna.trial.TrialState,
                    values: Any) -> None:
        if "grid_id" in study._storage.get_trial_system_attrs(trial._trial_id):
            super().after_trial(study, trial, state, values)


def space_from_config(cfg: RunConfig) -> SearchSpace:
    """The space of ``cfg.search``."""
    return SearchSpace(cfg.search)
