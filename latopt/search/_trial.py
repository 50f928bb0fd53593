"""One search trial: pre-fold → fold → post-fold through :func:`latopt.train.run_fold`, then the objectives.

The base model is trained once per study (or given with ``--base``) and cached under
``<study dir>/base/``; concurrent workers serialise its creation with a file lock and the directory
appears atomically. A trial flagged ``base`` in its user attributes (the enqueued first trial) evaluates
the base model itself, so the base operating point is part of every study.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from latopt.artifacts import atomic_dir, read_json, write_json_atomic
from latopt.errors import LatoptError
from latopt.search._space import SearchSpace

BASE_SCHEMA = "latopt.search-base/1"
TRIAL_SCHEMA = "latopt.search-trial/1"


@dataclass
class BaseModel:
    checkpoint: Path
    val_acc: float | None = None


def ensure_base(cfg: Any, study_dir: Path, base: str | Path | None, *, progress: bool = True) -> BaseModel:
    """The study's base checkpoint: ``base`` when given, else trained once into ``study_dir/base/``."""
    if base is not None:
        path = Path(base)
        if not path.is_file():
            raise LatoptError(f"--base checkpoint {path} does not exist")
        return BaseModel(path.resolve())
    from filelock import FileLock

    study_dir.mkdir(parents=True, exist_ok=True)
    base_dir = study_dir / "base"
    with FileLock(str(study_dir / ".base.lock")):
        if (base_dir / "base.json").is_file():
            info = read_json(base_dir / "base.json", schema=BASE_SCHEMA, what="cached base model record")
            ckpt = base_dir / info["checkpoint"]
            if ckpt.is_file():
                return BaseModel(ckpt.resolve(), info.get("val_acc"))
        from latopt.train import train_base

        if progress:
            print(f"[search] training the base model once for this study into {base_dir}", flush=True)
        with atomic_dir(base_dir) as tmp:
            metrics = train_base(cfg, tmp, progress=progress)
            ckpt_tmp = _find_checkpoint(metrics, tmp)
            val_acc = _metric(metrics, "val_acc", "val", "acc_val")
            write_json_atomic(tmp / "base.json", {"schema": BASE_SCHEMA, "checkpoint": ckpt_tmp.name,
                                                  "val_acc": val_acc, "metrics": metrics})
        return BaseModel((base_dir / ckpt_tmp.name).resolve(), val_acc)


def _find_checkpoint(metrics: dict[str, Any], out_dir: Path) -> Path:
    c = metrics.get("checkpoint") if isinstance(metrics, dict) else None
    if c:
        p = Path(c)
        p = p if p.is_absolute() else out_dir / p
        if p.is_file():
            return out_dir / p.name
    found = sorted(out_dir.glob("*.pt"))
    if not found:
        raise LatoptError(f"base training wrote no checkpoint into {out_dir}")
    return found[0]


def _metric(d: Any, *keys: str) -> float | None:
    if not isinstance(d, dict):
        return None
    for k in keys:
        v = d.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def val_accuracy(cfg: Any, model: Any) -> float:
    """Validation accuracy of ``model`` on the config's task (the split fixed by ``data.split_seed``)."""
    from latopt.data import get_task, make_loaders
    from latopt.train import evaluate

    task = get_task(cfg.data.task, int(cfg.data.resolution), cfg.data.split_seed)
    _, val, _ = make_loaders(task, int(cfg.data.batch_size), int(cfg.data.workers))
    return float(evaluate(model, val))


def count_nonlinear(model: Any) -> int:
    """Non-linear activation layers left in a network (σ_α with α < 1 counts; α = 1 is the identity)."""
    import torch.nn as nn

    from latopt.fold import AlphaActivation

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
    space: SearchSpace
    base: BaseModel
    study_dir: Path
    objective: str                    # "latency" | "latency-measured" | "depth"
    max_acc_drop: float
    lut: Any = None                   # latopt.latency.lut.LUT or None
    costs: str = "lut"                # "lut": c_l from the LUT; "uniform": c_l = 1 (paper default)
    device: Any = None                # DeviceProfile for --measure
    progress: bool = True
    _base_model: Any = field(default=None, repr=False)

    def base_model(self) -> Any:
        if self._base_model is None:
            from latopt.models import load_checkpoint

            self._base_model, _, _ = load_checkpoint(self.base.checkpoint)
            self._base_model.eval()
        return self._base_model

    def input_shape(self) -> tuple[int, int, int, int]:
        r = int(self.cfg.data.resolution)
        batch = int(getattr(self.device, "batch", 1) or 1) if self.device is not None else 1
        return (batch, 3, r, r)


def _predict(lut: Any, plan: dict[int, str]) -> float | None:
    if lut is None:
        return None
    from latopt.latency.lut import predict

    return float(predict(lut, plan))


def _plan(report: dict[str, Any]) -> dict[int, str]:
    folded = report.get("folded") or {}
    if isinstance(folded, dict):
        return {int(k): str(v) for k, v in folded.items()}
    return {int(k): "full" for k in folded}


def evaluate_base(ctx: TrialContext, trial_dir: Path) -> dict[str, Any]:
    """The base operating point: its validation accuracy, as-is latency and non-linear layer count."""
    model = ctx.base_model()
    acc = ctx.base.val_acc
    if acc is None:
        acc = val_accuracy(ctx.cfg, model)
    rec: dict[str, Any] = {"val_acc": acc, "base_acc": acc, "fold_set": {}, "checkpoint": str(ctx.base.checkpoint),
                           "latency_ms": _predict(ctx.lut, {}), "nonlinear_layers": count_nonlinear(model)}
    if ctx.objective == "latency-measured":
        rec.update(_measure(ctx, None))
    write_json_atomic(trial_dir / "trial.json", {"schema": TRIAL_SCHEMA, "base": True, **rec})
    rec["report"] = str(trial_dir / "trial.json")
    return rec


def evaluate_fold(ctx: TrialContext, params: dict[str, Any], trial_dir: Path) -> dict[str, Any]:
    """One candidate: run_fold with the sampled hyper-parameters, into ``trial_dir`` (atomically)."""
    from latopt.models import load_checkpoint
    from latopt.train import run_fold

    lut_for_costs = ctx.lut if ctx.costs == "lut" else None
    with atomic_dir(trial_dir) as tmp:
        report = run_fold(ctx.cfg, ctx.base.checkpoint, tmp, lut=lut_for_costs, lambda_c=params["lambda_c"],
                          tau=params["tau"], p=params["p"], granularity=params["granularity"],
                          progress=False)
        ckpt_name = Path(report["checkpoint"]).name
    ckpt = trial_dir / ckpt_name
    plan = _plan(report)
    acc = float(report["val_acc_finetuned"])
    base_acc = _metric(report.get("acc"), "base")
    if base_acc is None:
        base_acc = ctx.base.val_acc
    folded_model, _, _ = load_checkpoint(ckpt)
    rec: dict[str, Any] = {"val_acc": acc, "base_acc": base_acc, "fold_set": {str(k): v for k, v in sorted(plan.items())},
                           "checkpoint": str(ckpt.resolve()), "report": str((trial_dir / "report.json").resolve()),
                           "latency_ms": _predict(ctx.lut, plan), "nonlinear_layers": count_nonlinear(folded_model),
                           "acc": report.get("acc")}
    if ctx.objective == "latency-measured":
        rec.update(_measure(ctx, folded_model))
    return rec


def _measure(ctx: TrialContext, folded: Any) -> dict[str, Any]:
    """End-to-end timing on the device, base and candidate interleaved in one run (ratio comparable)."""
    from latopt.latency.profiler import measure_networks

    nets = {"base": ctx.base_model()}
    if folded is not None:
        nets["candidate"] = folded.eval()
    stats = measure_networks(nets, ctx.device, ctx.input_shape())
    base_ms = float(stats["base"].median_ms)
    ms = float(stats["candidate"].median_ms) if folded is not None else base_ms
    return {"measured_ms": ms, "measured_base_ms": base_ms, "measured_speedup": base_ms / ms if ms > 0 else None,
            "measured_iqr_ms": float(stats["candidate" if folded is not None else "base"].iqr_ms)}


_METRIC_KEY = {"latency": "latency_ms", "latency-measured": "measured_ms", "depth": "nonlinear_layers"}


def objective(ctx: TrialContext, trial: optuna.Trial) -> tuple[float, float]:
    """The Optuna objective: (validation accuracy ↑, latency or depth ↓); sets the trial's user attributes."""
    t0 = time.perf_counter()
    params = ctx.space.suggest(trial)
    is_base = bool(trial.user_attrs.get("base"))
    trial_dir = ctx.study_dir / f"trial-{trial.number}"
    rec = evaluate_base(ctx, trial_dir) if is_base else evaluate_fold(ctx, params, trial_dir)
    metric = rec.get(_METRIC_KEY[ctx.objective])
    if metric is None or not math.isfinite(float(metric)):
        raise LatoptError(f"trial {trial.number}: objective {ctx.objective} has no value")
    base_acc = rec.get("base_acc")
    drop = 0.0 if is_base or base_acc is None else float(base_acc) - float(rec["val_acc"])
    rec["acc_drop"] = drop
    rec["constraint"] = drop - ctx.max_acc_drop
    rec["granularity"] = params["granularity"]
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    for k, v in rec.items():
        if v is not None:
            trial.set_user_attr(k, v)
    trial.set_constraint("acc_drop", rec["constraint"])
    if ctx.progress:
        what = "base model" if is_base else f"λ_c={params['lambda_c']:.3g} τ={params['tau']:.3f} p={params['p']:.2f}"
        print(f"[search] trial {trial.number}: {what} → acc {rec['val_acc']:.4f} (drop {drop:+.4f}), "
              f"{_METRIC_KEY[ctx.objective]} {float(metric):.4g}, folded {len(rec['fold_set'])} "
              f"[{rec['seconds']:.1f} s]", flush=True)
    return float(rec["val_acc"]), float(metric)
