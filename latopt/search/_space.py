"""The searched hyper-parameters: λ_c (log scale), τ, p and optionally the α granularity.

The ranges are the run config's ``search`` section, sampled as they are: :class:`latopt.config.SearchConfig`
validates them (each a list ``[lo, hi]`` with lo <= hi; λ_c > 0, τ in (0, 1], p > 1; granularities known,
at least one), so a bad range is one :class:`~latopt.errors.LatoptError` line before a study is touched.
The defaults are the config's too (τ in [0.7, 0.95]): there is one τ range, the config's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna

from latopt.config import RunConfig, SearchConfig


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


def space_from_config(cfg: RunConfig) -> SearchSpace:
    """The space of ``cfg.search``."""
    return SearchSpace(cfg.search)
