"""Layer Folding as a method (``method: layerfold``, ``latopt search``): each trial samples λ_c (log scale), τ, p
(and the α granularity when ``search.granularity`` lists both) from the config's ``search`` ranges and runs
:func:`latopt.layerfold.run_fold` with them: pre-fold with σ_α and the compression loss, fold the blocks whose
α ≥ τ, check, fine-tune.

The ranges are validated by :class:`latopt.config.SearchConfig` (each ``[lo, hi]`` with lo <= hi; λ_c > 0,
τ in (0, 1], p > 1; granularities known, at least one), so a bad range is one line before a study is touched.
c_l is the LUT's (``costs="lut"``) or 1 for every block (``"uniform"``, the paper's default; or no LUT).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from latopt.config import SearchConfig, dump_config
from latopt.latency.lut import LUT
from latopt.layerfold import run_fold
from latopt.methods.method import Candidate, Method, TrialContext, register
from latopt.methods.sampler import Grid, TrialSeeded

SEARCHED = ("lambda_c", "tau", "p", "granularity")   # the fold keys a trial sets (the config's values are unused)
GRID_TRIALS = 10   # sampler auto: up to this many trials (the base included) a λ_c grid, above it TPE


@dataclass(frozen=True)
class FoldSpace:
    """What one Layer Folding trial samples: the ranges of ``search``."""

    search: SearchConfig = SearchConfig()

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        s = self.search
        return {
            "lambda_c": trial.suggest_float("lambda_c", *s.lambda_c, log=True),
            "tau": trial.suggest_float("tau", *s.tau),
            "p": trial.suggest_float("p", *s.p),
            "granularity": trial.suggest_categorical("granularity", list(s.granularity)) if len(s.granularity) > 1
            else s.granularity[0],
        }

    def base_params(self) -> dict[str, Any]:
        """The weakest push and the strictest threshold."""
        s = self.search
        sampled = {"granularity": s.granularity[0]} if len(s.granularity) > 1 else {}
        return {"lambda_c": s.lambda_c[0], "tau": s.tau[1], "p": s.p[0], **sampled}

    def as_dict(self) -> dict[str, Any]:
        s = self.search
        return {"lambda_c": list(s.lambda_c), "tau": list(s.tau), "p": list(s.p), "granularity": list(s.granularity)}

    def sampler(self, seed: int, trials: int, name: str) -> optuna.samplers.BaseSampler:
        """``auto``: for a study of at most :data:`GRID_TRIALS` trials the λ_c grid (:meth:`grid`; TPE's random
        start-up would be all of such a study), else TPE; ``grid``: the grid; else Optuna's sampler of that name."""
        if name == "auto":
            name = "grid" if trials <= GRID_TRIALS else "tpe"
        if name == "grid":
            return Grid(self.grid(trials - 1), seed=seed)
        return TrialSeeded(name, seed, trials)

    def grid(self, points: int) -> dict[str, list[Any]]:
        """``points`` values of λ_c spread evenly on its log scale over the range (the knob that sets how many blocks
        fold), τ and p at the middle of their ranges, every granularity."""
        s = self.search
        lo, hi = math.log(s.lambda_c[0]), math.log(s.lambda_c[1])
        k = max(1, points)
        lams = [math.exp(lo + (hi - lo) * (i + 0.5) / k) for i in range(k)] if k > 1 or lo == hi else \
            [math.exp((lo + hi) / 2)]
        return {"lambda_c": sorted(set(lams)), "tau": [sum(s.tau) / 2], "p": [sum(s.p) / 2],
                **({"granularity": list(s.granularity)} if len(s.granularity) > 1 else {})}


@register
class LayerFold(Method):
    name = "layerfold"
    section = "fold"
    does = "Layer Folding: Optuna trials over (λ_c, τ, p), accuracy vs LUT latency"

    def space(self) -> FoldSpace:
        return FoldSpace(self.cfg.search)

    def default_trials(self) -> int:
        return int(self.cfg.search.trials)

    def identity(self, lut: LUT | None) -> dict[str, Any]:
        return {"costs": self.costs if lut is not None else "uniform"}

    def made_from(self) -> dict[str, Any]:
        """The fold settings a trial does not sample, the sampled ranges and the sampler (dotted config keys)."""
        sections = dump_config(self.cfg)
        return {"method": self.name, "costs": self.costs,
                **{f"fold.{k}": v for k, v in sections["fold"].items() if k not in SEARCHED},
                **{f"search.{k}": sections["search"][k] for k in (*SEARCHED, "sampler")}}

    def candidate(self, ctx: TrialContext, params: dict[str, Any], trial_dir: Path) -> Candidate:
        """``run_fold`` with the sampled hyper-parameters and the LUT's c_l (none with uniform costs)."""
        lut = ctx.lut_path if (self.costs == "lut" and ctx.lut_path is not None) else None
        cfg = ctx.cfg.with_overrides({f"fold.{k}": params[k] for k in SEARCHED})
        cfg = cfg.model_copy(update={"lut": None if lut is None else str(lut)})   # None is no override: set it
        return Candidate(run_fold(cfg, ctx.base_checkpoint, trial_dir, progress=False, seed=ctx.seed, task=ctx.task))
