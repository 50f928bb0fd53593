"""The base-training stage: train a model on a task and write a latopt checkpoint.

Public API::

    train_base(cfg, out_dir, *, checkpoint=None, pretrained=False, progress=True, seed=0) -> TrainResult
        trains cfg.model on cfg.data from scratch (default; offline), from a latopt checkpoint (fine-tune)
        or from the library's pretrained weights; writes ``base.pt`` (latopt checkpoint), ``metrics.json``
        and the resolved ``config.yaml`` into ``out_dir`` (built atomically)
    TrainResult(model, metrics, paths)   the trained network, metrics.json's content (a TrainMetrics), the files
                                         written (``checkpoint``, ``metrics``, ``config``)
    TrainMetrics                         metrics.json as a record: read_metrics(path) reads one back

The loop itself is :mod:`latopt.training.loop`'s, its loss :mod:`latopt.training.losses`' (the task loss alone: base training
does not distil), on the device, precision and processes of ``cfg.train``
(:mod:`latopt.training.accel`; under torchrun only rank 0 writes). After every epoch the run's state is saved
beside ``out_dir`` (``<out_dir>.resume.pt``, :mod:`latopt.training.resume`): the same command run again after an
interruption resumes after the last finished epoch, and the file is removed when the output is written.
Layer Folding of the result is :mod:`latopt.layerfold`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field
from torch import nn

from latopt.config import RunConfig, dump_config, write_config
from latopt.constants import CONFIRM_FRACTION
from latopt.data import Task, data_fingerprint, data_meta, load_task, make_loaders, split_validation
from latopt.errors import LatoptError
from latopt.files.artifacts import atomic_dir, check_output_dir, file_sha256, write_json_atomic
from latopt.files.checkpoint import CheckpointMeta, load_checkpoint, make_arch, save_checkpoint
from latopt.files.readers import read_json
from latopt.files.records import Accuracy, Artefact, Resolution, validated
from latopt.files.weights_import import transfer
from latopt.log import get_logger
from latopt.nets.models import build_model, check_input_size, model_cost
from latopt.training.accel import resolve
from latopt.training.loop import (
    BestWeights,
    Report,
    Resume,
    Step,
    evaluate,
    fit,
    make_optimizer,
    make_scheduler,
    seed_everything,
)
from latopt.training.losses import TrainingLoss
from latopt.training.resume import EpochCheckpoint, fingerprint, resume_path

METRICS_SCHEMA = "latopt.train_metrics/1"
BASE_CHECKPOINT = "base.pt"
_Count = Annotated[int, Field(ge=0)]

_LOG = get_logger("train")


class TrainMetrics(Artefact):
    """``metrics.json``: what was trained on what (model, task, split sizes, resolution, seed, how it started),
    the per-epoch history (:func:`latopt.training.loop.fit`'s rows), the accuracies of the weights kept, their FLOPs and
    parameters, the time and where it ran."""

    SCHEMA: ClassVar[str] = METRICS_SCHEMA

    model: str
    task: str
    sizes: dict[str, _Count]
    split: str
    train_samples: Annotated[int, Field(ge=1)] | None
    resolution: Resolution
    seed: int
    init: str                       # scratch, pretrained or checkpoint
    epochs: _Count
    history: list[dict[str, Any]]   # latopt.training.loop.fit's rows as it makes them (a diverged loss is NaN)
    best_epoch: _Count
    val_acc: Accuracy
    test_acc: Accuracy
    flops: _Count
    params: _Count
    train_seconds: Annotated[float, Field(ge=0)]
    resumed_after_epoch: _Count
    device: str
    amp: str
    processes: Annotated[int, Field(ge=1)]
    checkpoint: str


def read_metrics(path: str | Path) -> TrainMetrics:
    """The ``metrics.json`` at ``path``; one LatoptError line when it is not one (schema, a field)."""
    data = read_json(path, schema=METRICS_SCHEMA, what="base model metrics")
    return validated(TrainMetrics, data, prefix=f"{path}: ", key="field")


@dataclass
class TrainResult:
    """A trained base: the network (on the training device, in eval mode),
    ``metrics.json``'s content and the files written, by role: ``checkpoint``, ``metrics``, ``config``."""

    model: nn.Module
    metrics: TrainMetrics
    paths: dict[str, Path]


def selection_task(task: Task, seed: int) -> Task:
    """``task`` with the selection part of its validation split as ``val`` (the part a search chooses on; the
    whole split when it is too small to cut)."""
    try:
        return split_validation(task, CONFIRM_FRACTION, seed)[0]
    except LatoptError:
        return task


def train_base(cfg: RunConfig, out_dir: str | Path, *, checkpoint: str | Path | None = None,
               pretrained: bool = False, progress: bool = True, seed: int = 0) -> TrainResult:
    """Train the base model; write base.pt + metrics.json + config.yaml into ``out_dir``; return the model,
    its metrics and the paths (:class:`TrainResult`)."""
    pretrained = pretrained or cfg.model.pretrained
    if checkpoint is None and cfg.model.weights is not None:
        checkpoint = cfg.model.weights
    elif checkpoint is not None and cfg.model.weights is None:   # the run starts from it: its normalisation too
        cfg = cfg.with_overrides({"model.weights": str(checkpoint)})
    if checkpoint is not None and pretrained:
        raise LatoptError("give either checkpoint (or model.weights) or pretrained, not both", param="checkpoint")
    check_output_dir(out_dir)   # before the resume state beside it is written
    task = load_task(cfg)
    seed_everything(seed)
    if checkpoint is not None:
        if not Path(checkpoint).is_file():
            raise LatoptError(f"checkpoint {checkpoint} does not exist")
        model, arch, _meta = load_checkpoint(checkpoint, expect_model=cfg.model.name)
        if arch.alpha is not None or arch.fold is not None:
            raise LatoptError(f"checkpoint {checkpoint} is a pre-folded/folded model; give a base checkpoint")
        if arch.num_classes != task.num_classes:   # transfer learning: a new classifier, the rest kept
            model = transfer(model, cfg.model.name, task.num_classes)
            _LOG.info("checkpoint %s has %d classes, task %r %d: a new classifier, every other weight kept",
                      checkpoint, arch.num_classes, task.name, task.num_classes)
    else:
        model = build_model(cfg.model.name, task.num_classes, pretrained=pretrained)
    check_input_size(model, cfg.data.resolution, cfg.model.name)
    arch = make_arch(model, cfg.model.name, task.num_classes)
    accel = resolve(cfg)
    if accel.rank:  # each process its own random stream (augmentation, dropout), seed + rank, once the model is
        seed_everything(seed + accel.rank)  # built (DDP broadcasts rank 0's weights); rank 0 keeps one process's
    accel.prepare(model)
    train_loader, val_loader, test_loader = make_loaders(task, cfg.data.batch_size, seed, accel=accel)
    # the best epoch is chosen on the selection part of the validation split: the confirmation part (cut with this
    # seed, as the run's search cuts it) stays unread until a search confirms its candidates against this base
    choose_loader = make_loaders(selection_task(task, seed), cfg.data.batch_size, seed, accel=accel)[1]
    t = cfg.train
    optimizer = make_optimizer(model, t, t.lr)
    scheduler = make_scheduler(optimizer, t, t.epochs, len(train_loader))
    scaler = accel.grad_scaler()
    init = "checkpoint" if checkpoint is not None else ("pretrained" if pretrained else "scratch")
    out_dir = Path(out_dir)
    best = BestWeights() if t.keep_best else None
    state = EpochCheckpoint(resume_path(out_dir), _fingerprint(cfg, seed, init, checkpoint), accel, model=model,
                            optimizer=optimizer, scheduler=scheduler, scaler=scaler, loader=train_loader, best=best)
    start, done = state.resume()
    t0 = time.perf_counter()
    step = Step(TrainingLoss(t.label_smoothing), optimizer, scheduler, clip_grad=t.clip_grad, scaler=scaler)
    history = fit(model, train_loader, t.epochs, step, val_loader=choose_loader, best=best, accel=accel,
                  report=Report(progress, "base"), resume=Resume(start, done, state.save))
    seconds = time.perf_counter() - t0
    cost = model_cost(model, cfg.data.resolution)
    metrics = TrainMetrics.model_validate({
        "model": cfg.model.name, "task": task.name, "sizes": task.sizes(), "split": task.split,
        "train_samples": cfg.data.train_samples,
        "resolution": cfg.data.resolution, "seed": seed, "init": init,
        "epochs": t.epochs, "history": history, "best_epoch": best.epoch if best is not None else t.epochs, "val_acc": evaluate(model, val_loader, accel),
        "test_acc": evaluate(model, test_loader, accel), "flops": cost.flops, "params": cost.params,
        "train_seconds": seconds, "resumed_after_epoch": start,
        "device": str(accel.device), "amp": t.amp, "processes": accel.world_size,
        "checkpoint": str(out_dir / BASE_CHECKPOINT),
    })
    if accel.is_main:  # under torchrun the other processes hold the same model: rank 0 writes
        with atomic_dir(out_dir) as tmp:
            meta = CheckpointMeta(**data_meta(cfg), seed=seed, val_acc=metrics.val_acc, test_acc=metrics.test_acc)
            save_checkpoint(tmp / BASE_CHECKPOINT, model, arch, meta)
            write_json_atomic(tmp / "metrics.json", metrics.to_json())
            write_config(cfg, tmp / "config.yaml")
        state.remove()
    return TrainResult(model.eval(), metrics, {"checkpoint": out_dir / BASE_CHECKPOINT, "metrics": out_dir / "metrics.json",
                                        "config": out_dir / "config.yaml"})


# settings that change where and how fast a run trains, not what it learns: a state written under other
# values of these is resumed
_PLACEMENT_KEYS = {"data": ("workers", "pin_memory", "persistent_workers"),
                   "train": ("device", "channels_last", "dist_timeout_s")}


def _fingerprint(cfg: RunConfig, seed: int, init: str, checkpoint: str | Path | None) -> str:
    d = dump_config(cfg)
    parts = {s: {k: v for k, v in d[s].items() if k not in _PLACEMENT_KEYS.get(s, ())} for s in ("model", "data", "train")}
    # content, not paths: a checkpoint replaced at the same path, or an image folder changed in place, is new
    return fingerprint({**parts, "seed": seed, "init": init, "data": data_fingerprint(cfg.data.task),
                        "checkpoint": None if checkpoint is None else file_sha256(checkpoint)})


__all__ = ["BASE_CHECKPOINT", "METRICS_SCHEMA", "TrainMetrics", "TrainResult", "read_metrics", "train_base"]
