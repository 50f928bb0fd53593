"""One search trial, whatever the method: the method makes a candidate (:meth:`latopt.methods.Method.candidate`:
Layer Folding's fold at the sampled λ_c, τ, p; the DP's plan at the sampled budget), then the search evaluates it:
its objectives, the attributes every study records, its confirmation counts.

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

from latopt.data import load_task, make_loaders
from latopt.errors import LatoptError
from latopt.files.artifacts import json_plain, make_dirs, write_json_atomic
from latopt.files.records import validated
from latopt.latency.lut import predict
from latopt.latency.profiler import measure_networks
from latopt.layerfold import check_base
from latopt.layerfold.fold_record import FoldReport
from latopt.log import get_logger
from latopt.methods import Method, Space, TrialContext
from latopt.rewrite import AlphaActivation, as_shipped
from latopt.search._confirm import correct, paired_counts
from latopt.search.study_record import TrialAttrs, TrialParams
from latopt.training.accel import resolve
from latopt.training.base_training import BASE_CHECKPOINT, read_metrics, train_base
from latopt.training.loop import evaluate

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
class StudyContext:
    """What the search's objective needs besides the method: the method and the trial context every method sees
    (:class:`latopt.methods.TrialContext`), the study's directory and space, the objective, the constraint, the
    device for ``--measure`` and the confirmation part of the validation split; built once per worker process."""

    method: Method
    trial: TrialContext
    space: Space
    study_dir: Path
    objective: str                    # "latency" | "latency-measured" | "depth"
    max_acc_drop: float
    device: Any = None                # DeviceProfile for --measure
    confirm: Any = None               # the confirmation part of the validation split (None: not confirmed)
    _confirm_base: Any = field(default=None, repr=False)

    @property
    def cfg(self) -> Any:
        return self.trial.cfg

    def confirmation(self, model: Any) -> dict[str, Any]:
        """``model``'s paired counts against the base model's on the confirmation part (the base's per-image
        results computed once); empty without a confirmation part."""
        if self.confirm is None:
            return {}
        accel, batch = resolve(self.cfg), int(self.cfg.data.batch_size)
        if self._confirm_base is None:
            self._confirm_base = correct(self.trial.base_model(), self.confirm, accel, batch)
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


def evaluate_base(ctx: StudyContext, trial_dir: Path) -> dict[str, Any]:
    """The base operating point: its validation accuracy, as-is latency and non-linear layer count."""

    t = ctx.trial
    model = t.base_model()
    accel = resolve(ctx.cfg)  # the trials' training device (train.device)
    on_device = accel.prepare(copy.deepcopy(model))
    _, val, test = make_loaders(t.task, int(ctx.cfg.data.batch_size), t.seed, accel=accel)
    acc = float(evaluate(on_device, val, accel))
    rec: dict[str, Any] = {"val_acc": acc, "base_acc": acc, "test_acc": float(evaluate(on_device, test, accel)),
                           "fold_set": {}, "checkpoint": str(t.base_checkpoint),
                           "latency_ms": _predict(t.lut, {}), "nonlinear_layers": count_nonlinear(model),
                           **ctx.confirmation(None)}
    if ctx.objective == "latency-measured":
        rec.update(_measure(ctx, None))
    write_json_atomic(trial_dir / "trial.json", {"schema": TRIAL_SCHEMA, "base": True, **rec})
    return {**rec, "report": str((trial_dir / "trial.json").resolve())}


def evaluate_candidate(ctx: StudyContext, params: dict[str, Any], trial_dir: Path, refines: int | None = None
                       ) -> dict[str, Any]:
    """One candidate made by the study's method (:meth:`latopt.methods.Method.candidate`; when it ``refines``
    an earlier trial, :meth:`~latopt.methods.Method.refine`), evaluated: the record of its fold (the network in
    memory, not reloaded from its file) and what the method adds."""
    made = (ctx.method.refine(ctx.trial, params, trial_dir) if refines is not None else
            ctx.method.candidate(ctx.trial, params, trial_dir))
    result = made.fold
    report: FoldReport = result.report
    plan = report.plan
    assert report.checkpoint is not None  # write_fold_outputs names it
    rec: dict[str, Any] = {
        "val_acc": report.val_acc_finetuned, "base_acc": report.val.base, "test_acc": report.acc.finetuned,
        "fold_set": {str(k): v for k, v in sorted(plan.items())},
        "checkpoint": str(Path(report.checkpoint).resolve()), "report": str((trial_dir / "report.json").resolve()),
        "latency_ms": _predict(ctx.trial.lut, plan), "nonlinear_layers": count_nonlinear(result.model),
        "flops": report.flops.folded, **ctx.confirmation(result.model), **made.attrs,
    }
    if ctx.objective == "latency-measured":
        rec.update(_measure(ctx, result.model))
    return rec


def _measure(ctx: StudyContext, folded: Any) -> dict[str, Any]:
    """End-to-end timing on the device, base and candidate interleaved in one run (ratio comparable)."""
    nets = {"base": ctx.trial.base_model()}
    if folded is not None:
        nets["candidate"] = as_shipped(folded, input_size=ctx.input_shape()[-2:])[0]
    stats = measure_networks(nets, ctx.device, ctx.input_shape())
    key = "candidate" if folded is not None else "base"
    base_ms, ms = float(stats["base"].median_ms), float(stats[key].median_ms)
    return {"measured_ms": ms, "measured_base_ms": base_ms, "measured_ratio": ms / base_ms,
            "measured_iqr_ms": float(stats[key].iqr_ms)}


class _Evaluated(TrialAttrs):
    """A trial's record as its evaluation made it (:func:`evaluate_base`, :func:`evaluate_candidate`), read by the
    objective: its accuracy is always there."""

    val_acc: float


def record(trial: optuna.Trial, rec: dict[str, Any]) -> None:
    """A trial's record as its user attributes, in plain JSON types (optuna-dashboard and
    ``study.trials_dataframe()`` read them as they are; None is left out), and its accuracy-drop
    constraint (``rec["constraint"]``, feasible when <= 0)."""
    for k, v in rec.items():
        if v is not None:
            trial.set_user_attr(k, json_plain(v))
    trial.set_constraint("acc_drop", rec["constraint"])


_METRIC_KEY = {"latency": "latency_ms", "latency-measured": "measured_ratio", "depth": "nonlinear_layers"}


def objective(ctx: StudyContext, trial: optuna.Trial) -> tuple[float, float]:
    """The Optuna objective: (validation accuracy ↑, latency or depth ↓); sets the trial's user attributes."""
    t0 = time.perf_counter()
    params = ctx.space.suggest(trial)
    given = TrialAttrs.of(trial)   # base, refines: given when it was enqueued
    trial_dir = ctx.study_dir / f"trial-{trial.number}"
    trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
    refines = given.refines
    rec = evaluate_base(ctx, trial_dir) if given.base else evaluate_candidate(ctx, params, trial_dir, refines)
    got = validated(_Evaluated, rec, prefix=f"trial {trial.number}: ", key="record key")
    metric = getattr(got, _METRIC_KEY[ctx.objective])
    if metric is None or not math.isfinite(float(metric)):
        raise LatoptError(f"trial {trial.number}: objective {ctx.objective} has no value")
    drop = 0.0 if given.base or got.base_acc is None else float(got.base_acc) - float(got.val_acc)
    seconds = round(time.perf_counter() - t0, 3)
    record(trial, {**rec, "acc_drop": drop, "constraint": drop - ctx.max_acc_drop,
                   "granularity": TrialParams.sampled(params).granularity, "seconds": seconds})
    if ctx.trial.progress:
        what = "base model" if given.base else " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                                        for k, v in params.items())
        what += "" if refines is None else f" (trial {refines} fine-tuned longer)"
        _LOG.info(f"trial {trial.number}: {what} → val acc {got.val_acc:.4f} (drop {drop:+.4f}), "
                  f"{_METRIC_KEY[ctx.objective]} {float(metric):.4g}, folded {len(got.fold_set)} "
                  f"[{seconds:.1f} s]")
    return float(got.val_acc), float(metric)
