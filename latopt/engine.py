"""The training engine: one epoch loop, evaluation, optimizers and schedules, thread settings.

Base training (:mod:`latopt.train`), pre-fold and post-fold (:mod:`latopt.layerfold`), ``tools/ednl.py``
and the search trials all train through :func:`fit`. A training step is described by a ``StepLoss``:
``step_loss(model, x, y) -> (loss, logits, extras)`` where ``extras`` are floats to average per epoch
(e.g. the compression loss); the engine owns the optimizer steps, the schedule, the per-step hook (σ_α
clipping) and the per-epoch record.

Public API::

    evaluate(model, loader) -> float                     top-1 accuracy in [0, 1] (eval mode, no grad)
    fit(model, loader, epochs, optimizer, scheduler, step_loss, *, val_loader=None, progress=True,
        desc="train", after_step=None, extra_optimizers=()) -> list[dict]   per-epoch records
    cross_entropy_loss(label_smoothing) -> StepLoss
    make_optimizer(groups, train_cfg, lr) / make_scheduler(optimizer, train_cfg, epochs, steps_per_epoch)
    set_threads(n)                                       torch intra-op threads (None: leave torch's choice)
    seed_everything(seed)                                python, numpy and torch RNGs
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from latopt.config import TrainConfig
from latopt.errors import LatoptError
from latopt.log import get_logger, progress_bar

_LOG = get_logger("train")
StepLoss = Callable[[nn.Module, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor, dict[str, float]]]


@torch.no_grad()
def evaluate(model: nn.Module, loader: Iterable) -> float:
    """Top-1 accuracy of ``model`` on ``loader`` (the model's train/eval mode is restored)."""
    was_training = model.training
    model.eval()
    correct = total = 0
    try:
        for x, y in loader:
            correct += int((model(x).argmax(1) == y).sum())
            total += int(y.numel())
    finally:
        model.train(was_training)
    if total == 0:
        raise LatoptError("cannot evaluate on an empty dataset split")
    return correct / total


def make_optimizer(groups: list[dict[str, Any]], train_cfg: TrainConfig, lr: float) -> torch.optim.Optimizer:
    """SGD (Nesterov momentum) or AdamW over ``groups``, weight decay from ``train_cfg``."""
    if train_cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=train_cfg.momentum, nesterov=train_cfg.momentum > 0,
                               weight_decay=train_cfg.weight_decay)
    return torch.optim.AdamW(groups, lr=lr, weight_decay=train_cfg.weight_decay)


def make_scheduler(optimizer: torch.optim.Optimizer, train_cfg: TrainConfig, epochs: int,
                   steps_per_epoch: int) -> torch.optim.lr_scheduler.LRScheduler:
    """Per-step schedule: cosine to 0 over all steps, step decay every ``step_size`` epochs, or constant;
    times a linear warm-up over ``warmup_epochs`` (capped at the run's length)."""
    total = max(1, epochs * steps_per_epoch)
    if train_cfg.schedule == "cosine":
        def factor(step: int) -> float:
            return 0.5 * (1.0 + math.cos(math.pi * min(step, total) / total))
    elif train_cfg.schedule == "step":
        def factor(step: int) -> float:
            return train_cfg.gamma ** ((step // max(1, steps_per_epoch)) // train_cfg.step_size)
    else:
        def factor(step: int) -> float:
            return 1.0
    warmup = min(train_cfg.warmup_epochs, epochs) * steps_per_epoch

    def with_warmup(step: int) -> float:
        return factor(step) * (min(1.0, (step + 1) / warmup) if warmup else 1.0)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, with_warmup)


def cross_entropy_loss(label_smoothing: float = 0.0) -> StepLoss:
    def step_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor):
        logits = model(x)
        loss = F.cross_entropy(logits, y, label_smoothing=label_smoothing)
        return loss, logits, {}

    return step_loss


def fit(model: nn.Module, loader: DataLoader, epochs: int, optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None, step_loss: StepLoss, *,
        val_loader: DataLoader | None = None, progress: bool = True, desc: str = "train",
        after_step: Callable[[], None] | None = None,
        extra_optimizers: tuple[torch.optim.Optimizer, ...] = ()) -> list[dict[str, float]]:
    """Train ``epochs`` epochs; returns per-epoch {epoch, loss, train_acc, val_acc?, lr, seconds, ...}.

    ``progress``: a line per epoch (logger ``latopt.train``) and a bar while it runs (on a terminal only)."""
    history: list[dict[str, float]] = []
    for epoch in range(epochs):
        model.train()
        t0 = time.perf_counter()
        loss_sum, correct, seen = 0.0, 0, 0
        extras_sum: dict[str, float] = {}
        bar = progress_bar(loader, desc=f"{desc} {epoch + 1}/{epochs}", enabled=progress)
        for x, y in bar:
            loss, logits, extras = step_loss(model, x, y)
            if not torch.isfinite(loss):
                raise LatoptError(f"{desc}: the loss became {float(loss)} in epoch {epoch + 1}; "
                                  "lower the learning rate")
            for opt in (optimizer, *extra_optimizers):
                opt.zero_grad(set_to_none=True)
            loss.backward()
            for opt in (optimizer, *extra_optimizers):
                opt.step()
            if scheduler is not None:
                scheduler.step()
            if after_step is not None:
                after_step()
            n = int(y.numel())
            loss_sum += float(loss.detach()) * n
            correct += int((logits.detach().argmax(1) == y).sum())
            seen += n
            for k, v in extras.items():
                extras_sum[k] = extras_sum.get(k, 0.0) + v * n
            bar.set_postfix(loss=f"{loss_sum / seen:.3f}", acc=f"{correct / seen:.3f}", **{
                k: f"{v / seen:.3f}" for k, v in extras_sum.items()})
        row = {"epoch": epoch + 1, "loss": loss_sum / max(seen, 1), "train_acc": correct / max(seen, 1),
               "lr": float(optimizer.param_groups[0]["lr"]),
               **{k: v / max(seen, 1) for k, v in extras_sum.items()}}
        if val_loader is not None:
            row["val_acc"] = evaluate(model, val_loader)
        row["seconds"] = time.perf_counter() - t0
        history.append(row)
        if progress:
            shown = ", ".join(f"{k} {v:.4g}" for k, v in row.items() if k != "epoch")
            _LOG.info(f"{desc} epoch {epoch + 1}/{epochs}: {shown}")
    return history


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU results are then deterministic for the same inputs)."""

    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def set_threads(threads: int | None) -> None:
    """torch's intra-op threads for this process (None leaves torch's default). On a machine shared with
    other jobs one thread per process was many times faster than two."""
    if threads is not None:
        torch.set_num_threads(int(threads))


__all__ = ["StepLoss", "cross_entropy_loss", "evaluate", "fit", "make_optimizer", "make_scheduler", "seed_everything", "set_threads"]
