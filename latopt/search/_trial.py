"""One search trial: pre-fold → fold → post-fold through :func:`latopt.layerfold.run_fold`, then the objectives.

A trial of the DP's study (``importance`` set in the context) applies the DP's plan at the trial's budget
instead (:func:`latopt.dp.run_dp`, the importance losses computed once per worker); both record the same
attributes.

A trial trains and is judged on the *selection* part of the validation split (the context's task holds it as
``val``); after training, its network and the base model are evaluated once on the *confirmation* part
(``confirm``, :mod:`latopt.search._confirm`), and the paired counts are recorded (``confirm_n``,
``confirm_lost``, ``confirm_won``, ``confirm_acc``, ``confirm_base_acc``) for the recommendation alone.

The base model is trained once per study (or given with ``--base``) and cached under
``<study dir>/base/``; concurrent workers serialise its creation with a file lock and the directory
appears atomically. A trial flagged ``base`` in its user attributes (the enqueued first trial) evaluates
the base model itself, so the base operating point is part of every study.
"""

from __future__ import annotations

import copy
import math
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import torch.nn as nn
from filelock import FileLock

from latopt.accel import resolve
from latopt.artifacts import json_plain, make_dirs, write_json_atomic
from latopt.checkpoint import load_checkpoint
from latopt.data import load_task, make_loaders
from latopt.dp import candidates, run_dp, variant_losses
from latopt.engine import evaluate
from latopt.errors import LatoptError
from latopt.fold import AlphaActivation, as_shipped
from latopt.latency.lut import predict
from latopt.latency.profiler import measure_networks
from latopt.layerfold import FoldResult, check_base, run_fold
from latopt.layerfold.record import FoldReport
from latopt.log import get_logger
from latopt.search._confirm import correct, paired_counts
from latopt.search._space import BudgetSpace, SearchSpace
from latopt.train import BASE_CHECKPOINT, read_metrics, train_base

TRIAL_SCHEMA = "latopt.search-trial/1"
_LOG = get_logger("search")


@dataclass
class BaseModel:
    checkpoint: Path
    val_acc: float | None = None
    test_acc: float | None = None


def ensure_base(cfg: Any, study_dir: Path, base: str | Path | None, *, seed: int = 0,
                progress: bool = True, task: Any = None) -> BaseModel:
    """The study's base checkpoint: ``base`` when given, else trained once into ``study_dir/base/``.

    A given ``base`` is checked before any study is touched: it must load as a latopt checkpoint of the
    config's model, be an unfolded base (no σ_α, no fold), have been trained on the config's data and
    have as many classes as ``task`` (default: the config's task). Workers on one machine share a trained
    base: the first takes a file lock and trains (``train_base`` builds the directory atomically), the
    others wait on the lock and then load it.
    """
    if base is not None:
        path = Path(base)
        _, _, meta = check_base(cfg, path, task or load_task(cfg))
        return BaseModel(path.resolve(), meta.val_acc, meta.test_acc)


    make_dirs(study_dir)
    base_dir = study_dir / "base"
    with FileLock(str(study_dir / ".base.lock")):
        if (base_dir / "metrics.json").is_file() and (base_dir / BASE_CHECKPOINT).is_file():
            m = read_metrics(base_dir / "metrics.json")
        else:
            if progress:
                _LOG.info(f"training the base model once for this study into {base_dir}")
            m = train_base(cfg, base_dir, progress=progress, seed=seed).metrics
    return BaseModel((base_dir / BASE_CHECKPOINT).resolve(), m.val_acc, m.test_acc)


def count_nonlinear(model: Any) -> int:
    """Non-linear activation layers left in a network (σ_α with α < 1 counts; α = 1 is the identity)."""


    kinds = (nn.ReLU, nn.ReLU6, nn.Hardswish, nn.Hardsigmoid, nn.SiLU, nn.GELU, nn.LeakyReLU, nn.ELU,
             nn.PReLU, nn.Sigmoid, nn.Tanh, nn.Mish)
    n = 0
    for m in model.modules():
        if isinstance(m, AlphaActivation):
            n += int(any(float(a) < 1.0 for a in m.alpha.detach().flatten()))
        elif isinstance(m, kinds):
            n += 1
    return n


@dataclass
class TrialContext:
    """Everything a trial needs; built once per worker process."""

    cfg: Any
    space: SearchSpace | BudgetSpace
    base: BaseModel
    study_dir: Path
    objective: str                    # "latency" | "latency-measured" | "depth"
    max_acc_drop: float
    lut: Any = None                   # latopt.latency.lut.LUT (objective / c_l) or None
    lut_path: Path | None = None
    costs: str = "lut"                # "lut": c_l from the LUT; "uniform": c_l = 1 (paper default)
    device: Any = None                # DeviceProfile for --measure
    seed: int = 0
    progress: bool = True
    importance: str | None = None     # the DP's study: how (block, variant) is scored; None: Layer Folding's
    variants: tuple[str, ...] | None = None   # the DP's study: the variants blocks may take (None: the LUT's)
    confirm: Any = None               # the confirmation part of the validation split (None: not confirmed)
    _task: Any = field(default=None, repr=False)   # its val: the selection part when ``confirm`` is set
    _confirm_base: Any = field(default=None, repr=False)
    _base_model: Any = field(default=None, repr=False)
    _losses: Any = field(default=None, repr=False)

    def task(self) -> Any:
        if self._task is None:
            self._task = load_task(self.cfg)
        return self._task

    def base_model(self) -> Any:
        if self._base_model is None:
            self._base_model, _, _ = load_checkpoint(self.base.checkpoint, expect_model=self.cfg.model.name)
            self._base_model.eval()
        return self._base_model

    def losses(self) -> dict[int, dict[str, float]]:
        """The DP's importance losses of the base model, computed once (every budget reuses them)."""
        if self._losses is None:
            self._losses = variant_losses(self.cfg, self.base_model(), self.task(), candidates(self.lut, self.variants),
                                          method=str(self.importance), seed=self.seed, progress=False)
        return self._losses

    def confirmation(self, model: Any) -> dict[str, Any]:
        """``model``'s paired counts against the base model's on the confirmation part (the base's per-image
        results computed once); empty without a confirmation part."""
        if self.confirm is None:
            return {}
        accel, batch = resolve(self.cfg), int(self.cfg.data.batch_size)
        if self._confirm_base is None:
            self._confirm_base = correct(self.base_model(), self.confirm, accel, batch)
        ok = self._confirm_base if model is None else correct(model, self.confirm, accel, batch)
        return paired_counts(self._confirm_base, ok)

    def input_shape(self) -> tuple[int, int, int, int]:
        r = int(self.cfg.data.resolution)
        batch = int(getattr(self.device, "batch", 1) or 1) if self.device is not None else 1
        return (batch, 3, r, r)


def _predict(lut: Any, plan: dict[int, str]) -> float | None:
    if lut is None:
        return None

    return float(predict(lut, plan))


def evaluate_base(ctx: TrialContext, trial_dir: Path) -> dict[str, Any]:
    """The base operating point: its validation accuracy, as-is latency and non-linear layer count."""

    model = ctx.base_model()
    accel = resolve(ctx.cfg)  # the trials' training device (train.device)
    on_device = accel.prepare(copy.deepcopy(model))
    _, val, test = make_loaders(ctx.task(), int(ctx.cfg.data.batch_size), ctx.seed, accel=accel)
    acc = float(evaluate(on_device, val, accel))
    rec: dict[str, Any] = {"val_acc": acc, "base_acc": acc, "test_acc": float(evaluate(on_device, test, accel)),
                           "fold_set": {}, "checkpoint": str(ctx.base.checkpoint),
                           "latency_ms": _predict(ctx.lut, {}), "nonlinear_layers": count_nonlinear(model),
                           **ctx.confirmation(None)}
    if ctx.objective == "latency-measured":
        rec.update(_measure(ctx, None))
    write_json_atomic(trial_dir / "trial.json", {"schema": TRIAL_SCHEMA, "base": True, **rec})
    rec["report"] = str((trial_dir / "trial.json").resolve())
    return rec


def evaluate_fold(ctx: TrialContext, params: dict[str, Any], trial_dir: Path) -> dict[str, Any]:
    """One candidate: ``run_fold`` on the config with the sampled hyper-parameters and the trial's LUT (c_l;
    none with uniform costs); it writes ``trial_dir`` atomically."""
    lut = ctx.lut_path if (ctx.costs == "lut" and ctx.lut_path is not None) else None
    cfg = ctx.cfg.with_overrides({f"fold.{k}": params[k] for k in ("lambda_c", "tau", "p", "granularity")})
    cfg = cfg.model_copy(update={"lut": None if lut is None else str(lut)})   # None is no override: set it
    result = run_fold(cfg, ctx.base.checkpoint, trial_dir, progress=False, seed=ctx.seed, task=ctx.task())
    return _candidate(ctx, result, trial_dir)


def evaluate_plan(ctx: TrialContext, params: dict[str, Any], trial_dir: Path) -> dict[str, Any]:
    """One candidate of the DP's study: the DP's plan at the trial's budget, folded and fine-tuned
    (``run_dp`` writes ``trial_dir`` as a fold)."""
    assert ctx.lut_path is not None  # the DP's study needs its LUT (resolve_lut, required)
    result = run_dp(ctx.cfg, ctx.base.checkpoint, trial_dir, lut=ctx.lut_path, budget=params["budget"],
                    losses=ctx.losses(), variants=ctx.variants, seed=ctx.seed, progress=False, task=ctx.task())
    return {**_candidate(ctx, result, trial_dir), "predicted_ratio": result.report.selection.ratio}


def _candidate(ctx: TrialContext, result: FoldResult[Any], trial_dir: Path) -> dict[str, Any]:
    """The record of a folded candidate from its fold (the network in memory, not reloaded from its file)."""
    report: FoldReport = result.report
    plan = report.plan
    assert report.checkpoint is not None  # write_fold_outputs names it
    rec: dict[str, Any] = {
        "val_acc": report.val_acc_finetuned, "base_acc": report.val.base, "test_acc": report.acc.finetuned,
        "fold_set": {str(k): v for k, v in sorted(plan.items())},
        "checkpoint": str(Path(report.checkpoint).resolve()), "report": str((trial_dir / "report.json").resolve()),
        "latency_ms": _predict(ctx.lut, plan), "nonlinear_layers": count_nonlinear(result.model),
        "flops": report.flops.folded, **ctx.confirmation(result.model),
    }
    if ctx.objective == "latency-measured":
        rec.update(_measure(ctx, result.model))
    return rec


def _measure(ctx: TrialContext, folded: Any) -> dict[str, Any]:
    """End-to-end timing on the device, base and candidate interleaved in one run (ratio comparable)."""


    nets = {"base": ctx.base_model()}
    if folded is not None:
        nets["candidate"] = as_shipped(folded, input_size=ctx.input_shape()[-2:])[0]
    stats = measure_networks(nets, ctx.device, ctx.input_shape())
    key = "candidate" if folded is not None else "base"
    base_ms, ms = float(stats["base"].median_ms), float(stats[key].median_ms)
    return {"measured_ms": ms, "measured_base_ms": base_ms, "measured_ratio": ms / base_ms,
            "measured_iqr_ms": float(stats[key].iqr_ms)}


def record(trial: optuna.Trial, rec: dict[str, Any]) -> None:
    """A trial's record as its user attributes, in plain JSON types (optuna-dashboard and
    ``study.trials_dataframe()`` read them as they are; None is left out), and its accuracy-drop
    constraint (``rec["constraint"]``, feasible when <= 0)."""
    for k, v in rec.items():
        if v is not None:
            trial.set_user_attr(k, json_plain(v))
    trial.set_constraint("acc_drop", rec["constraint"])


_METRIC_KEY = {"latency": "latency_ms", "latency-measured": "measured_ratio", "depth": "nonlinear_layers"}


def objective(ctx: TrialContext, trial: optuna.Trial) -> tuple[float, float]:
    """The Optuna objective: (validation accuracy ↑, latency or depth ↓); sets the trial's user attributes."""
    t0 = time.perf_counter()
    params = ctx.space.suggest(trial)
    is_base = bool(trial.user_attrs.get("base"))
    trial_dir = ctx.study_dir / f"trial-{trial.number}"
    trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
    evaluate = evaluate_fold if ctx.importance is None else evaluate_plan
    rec = evaluate_base(ctx, trial_dir) if is_base else evaluate(ctx, params, trial_dir)
    metric = rec.get(_METRIC_KEY[ctx.objective])
    if metric is None or not math.isfinite(float(metric)):
        raise LatoptError(f"trial {trial.number}: objective {ctx.objective} has no value")
    base_acc = rec.get("base_acc")
    drop = 0.0 if is_base or base_acc is None else float(base_acc) - float(rec["val_acc"])
    rec["acc_drop"] = drop
    rec["constraint"] = drop - ctx.max_acc_drop
    rec["granularity"] = params.get("granularity")
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    record(trial, rec)
    if ctx.progress:
        what = "base model" if is_base else " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                                     for k, v in params.items())
        _LOG.info(f"trial {trial.number}: {what} → val acc {rec['val_acc']:.4f} (drop {drop:+.4f}), "
                  f"{_METRIC_KEY[ctx.objective]} {float(metric):.4g}, folded {len(rec['fold_set'])} "
                  f"[{rec['seconds']:.1f} s]")
    return float(rec["val_acc"]), float(metric)
