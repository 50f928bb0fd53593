"""The DP as a method (``method: dp``, ``latopt plan``): one trial per budget of ``dp.budgets``, each the DP's plan
at that budget (one variant per block, the least summed importance loss whose LUT-predicted latency is within the
budget, measured and re-solved by the budget loop) folded and fine-tuned by :func:`latopt.dp.run_dp`.

The importance losses of the base network (``dp.importance``) are computed once per worker process and shared by
every budget. Its LUT must time the variants the blocks may take (``dp.variants``; default ``full``, ``pw`` and
``drop``, what ``latopt run`` profiles for it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import optuna
from filelock import FileLock

from latopt.config import DPConfig, RunConfig, dump_config
from latopt.dp import candidates, run_dp, select_plan, variant_losses
from latopt.errors import LatoptError
from latopt.files.artifacts import file_sha256, write_json_atomic
from latopt.files.readers import read_json
from latopt.latency.lut import LUT
from latopt.methods.method import Candidate, Method, TrialContext, register
from latopt.methods.sampler import Grid

IMPORTANCE_FILE = "importance.json"
PROFILED = ("full", "pw", "drop")   # the variants a run profiles for the DP when dp.variants does not name them
FINETUNE_KEYS = ("mode", "distill", "distill_weight", "temperature", "post_epochs", "post_lr", "max_fold_error")


@dataclass(frozen=True)
class BudgetSpace:
    """The DP's dimension: the budget (a fraction of the as-is LUT latency), each of ``dp.budgets`` once (the
    config validates them: each in (0, 1], none twice); the base trial is budget 1 (the network as it is)."""

    dp: DPConfig = DPConfig()

    def grid(self) -> list[float]:
        return sorted({float(b) for b in self.dp.budgets})

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        return {"budget": trial.suggest_float("budget", self.grid()[0], 1.0)}

    def base_params(self) -> dict[str, Any]:
        return {"budget": 1.0}

    def as_dict(self) -> dict[str, Any]:
        return {"budgets": self.grid()}

    def sampler(self, seed: int, trials: int, name: str) -> optuna.samplers.BaseSampler:
        """Each budget of the grid once, in any order; a resumed or parallel study skips those run or running."""
        return Grid({"budget": self.grid()}, seed=seed)


@register
class DP(Method):
    name = "dp"
    section = "dp"
    does = "the DP: one plan per budget, each folded and fine-tuned, accuracy vs LUT latency"

    def __init__(self, cfg: RunConfig, **options: Any) -> None:
        super().__init__(cfg, **options)
        self._losses: dict[int, dict[str, float]] | None = None

    def space(self) -> BudgetSpace:
        return BudgetSpace(self.cfg.dp)

    def default_trials(self) -> int:
        return len(self.space().grid()) + 1

    def lut_variants(self) -> tuple[str, ...]:
        asked = self.cfg.dp.variants
        return PROFILED if asked is None else tuple(dict.fromkeys(("full", *(v for v in asked if v != "none"))))

    def needs_lut(self) -> bool:
        return True

    def check(self, lut: LUT | None, trials: int) -> None:
        """Variants the LUT timed, no more trials than budgets (+ the base), every budget reachable (one line each,
        before any training)."""
        if lut is None:
            raise LatoptError("the DP needs the device's latency LUT", param="lut")
        cands = candidates(lut, self.cfg.dp.variants)
        grid = self.space().grid()
        if trials > len(grid) + 1:
            raise LatoptError(f"trials={trials}: the DP's study has {len(grid)} budgets and the base, "
                              f"{len(grid) + 1} trials at most", param="trials")
        for b in grid:
            select_plan(lut, {i: dict.fromkeys(c, 0.0) for i, c in cands.items()}, b)

    def identity(self, lut: LUT | None) -> dict[str, Any]:
        d = self.cfg.dp
        return {"method": "dp", "importance": d.importance, "variants": None if d.variants is None else list(d.variants)}

    def made_from(self) -> dict[str, Any]:
        """The ``dp`` section and the fine-tuning's ``fold`` settings (dotted config keys)."""
        sections = dump_config(self.cfg)
        return {"method": self.name, **{f"dp.{k}": v for k, v in sections["dp"].items()},
                **{f"fold.{k}": sections["fold"][k] for k in FINETUNE_KEYS}}

    def prepare(self, ctx: TrialContext) -> None:
        """The importance losses, once per study (:meth:`losses`)."""
        self.losses(ctx)

    def losses(self, ctx: TrialContext) -> dict[int, dict[str, float]]:
        """The importance losses of the base network, computed once per study and kept in its directory
        (``importance.json``, with the base checkpoint's SHA-256 it was computed from): every budget, and every
        worker, reuses them."""
        if self._losses is not None:
            return self._losses
        path = ctx.study_dir / IMPORTANCE_FILE
        digest = file_sha256(ctx.base_checkpoint)
        with FileLock(str(ctx.study_dir / f".{IMPORTANCE_FILE}.lock")):
            kept = read_json(path, what="the DP's importance file") if path.is_file() else None
            if isinstance(kept, dict) and kept.get("base_sha256") == digest and kept.get("importance") == \
                    self.cfg.dp.importance and isinstance(kept.get("losses"), dict):
                self._losses = {int(b): {v: float(x) for v, x in ls.items()} for b, ls in kept["losses"].items()}
                return self._losses
            assert ctx.lut is not None   # check() refused a study without one
            self._losses = variant_losses(self.cfg, ctx.base_model(), ctx.task, candidates(ctx.lut, self.cfg.dp.variants),
                                          method=self.cfg.dp.importance, seed=ctx.seed, progress=ctx.progress)
            write_json_atomic(path, {"base_sha256": digest, "importance": self.cfg.dp.importance,
                                     "losses": {str(b): ls for b, ls in sorted(self._losses.items())}})
        return self._losses

    def candidate(self, ctx: TrialContext, params: dict[str, Any], trial_dir: Path) -> Candidate:
        """The DP's plan at the trial's budget, folded and fine-tuned (``run_dp`` writes ``trial_dir`` as a fold)."""
        assert ctx.lut_path is not None   # needs_lut: the search resolved it
        result = run_dp(ctx.cfg, ctx.base_checkpoint, trial_dir, lut=ctx.lut_path, budget=params["budget"],
                        losses=self.losses(ctx), variants=self.cfg.dp.variants, seed=ctx.seed, progress=False,
                        task=ctx.task)
        return Candidate(result, {"predicted_ratio": result.report.selection.ratio})

    def refinements(self) -> int:
        return self.cfg.dp.refine

    def refine(self, ctx: TrialContext, params: dict[str, Any], trial_dir: Path) -> Candidate:
        """The plan at the trial's budget again, fine-tuned ``dp.refine_epochs`` epochs instead of
        ``fold.post_epochs``."""
        longer = ctx.cfg.with_overrides({"fold.post_epochs": self.cfg.dp.refine_epochs})
        return self.candidate(replace(ctx, cfg=longer), params, trial_dir)
