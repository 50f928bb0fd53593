"""The samplers a method explores its space with: Optuna's TPE, NSGA-II or random sampler, made afresh for every trial
from the study's history (:class:`TrialSeeded`), and a grid (:class:`Grid`: the DP's budgets, Layer Folding's λ_c
grid for few trials)."""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np
import optuna
from optuna.trial import TrialState

FAILED_CHECK = "failed_check"   # user attr of a trial whose fold failed its numeric check (VerificationError)


def make_sampler(name: str, seed: int, trials: int) -> optuna.samplers.BaseSampler:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if name == "tpe":
            return optuna.samplers.TPESampler(seed=seed, n_startup_trials=max(3, min(10, trials // 3)),
                                              multivariate=True, constant_liar=True)
        if name == "nsga2":
            return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, min(50, trials // 3)))
        return optuna.samplers.RandomSampler(seed=seed)


class TrialSeeded(optuna.samplers.BaseSampler):
    """The sampler ``name`` made afresh for every trial, seeded from ``seed`` and the trial's place in the study.

    The place is (the number of earlier trials that completed or are running, the number of earlier trials
    that failed their numeric check): a trial killed with its process (it goes stale and is failed) does not
    count, so the trial that replaces it draws what it would have drawn; a trial that failed its check does,
    so the next one draws anew. A candidate thus depends only on the study's history, not on which process
    samples it or what that process sampled before: a search interrupted (even by SIGKILL) and resumed proposes
    what an uninterrupted one would have, and parallel workers (one of them running when the other asks) do
    not propose the same candidates."""

    def __init__(self, name: str, seed: int, trials: int) -> None:
        self.name = name
        self._make = functools.partial(make_sampler, name, trials=trials)
        self._seed = seed
        self._inner = self._make(seed=seed)

    def before_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        earlier = [t for t in study.get_trials(deepcopy=False) if t.number < trial.number]
        live = sum(t.state in (TrialState.COMPLETE, TrialState.RUNNING) for t in earlier)
        checked = sum(t.state == TrialState.FAIL and FAILED_CHECK in t.user_attrs for t in earlier)
        derived = int(np.random.SeedSequence([self._seed, live, checked]).generate_state(1)[0] >> 1)
        self._inner = self._make(seed=derived)
        self._inner.before_trial(study, trial)

    def infer_relative_search_space(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
        return self._inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: optuna.trial.FrozenTrial,
                        search_space: dict[str, Any]) -> dict[str, Any]:
        return self._inner.sample_relative(study, trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: optuna.trial.FrozenTrial, param_name: str,
                           param_distribution: Any) -> Any:
        return self._inner.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial, state: TrialState,
                    values: Any) -> None:
        self._inner.after_trial(study, trial, state, values)


class Grid(optuna.samplers.GridSampler):
    """Optuna's grid sampler for a study that also holds trials outside the grid: the base trial (enqueued with its
    parameters) and any copy of it. ``GridSampler.after_trial`` reads the finished trial's grid point once a single
    point is left unvisited, and such a trial has none (``KeyError: 'grid_id'`` after the base trial of a one-point
    grid); it visits no point of the grid, so there is nothing to do for it."""

    name = "grid"

    def after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial, state: optuna.trial.TrialState,
                    values: Any) -> None:
        if "grid_id" in study._storage.get_trial_system_attrs(trial._trial_id):
            super().after_trial(study, trial, state, values)
