"""Base training and the shared training loop; the ``latopt train`` and ``latopt fold`` commands.

Public API::

    evaluate(model, loader) -> float                     top-1 accuracy in [0, 1] (eval mode, no grad)
    train_base(cfg, out_dir, *, checkpoint=None, pretrained=False, progress=True, seed=0) -> dict
        trains cfg.model on cfg.data from scratch (default; offline), from a checkpoint (fine-tune) or
        from pretrained weights; writes ``base.pt`` (latopt checkpoint), ``metrics.json`` and the
        resolved ``config.yaml`` into ``out_dir`` (built atomically); returns the metrics dict.
    model_cost(model, resolution) -> {"flops": int, "params": int}   FLOPs from FlopCounterMode (2·MACs)
    fit(model, loader, epochs, optimizer, scheduler, step_loss, ...) -> list[dict]   the epoch loop
    make_optimizer(groups, train_cfg, lr) / make_scheduler(optimizer, train_cfg, epochs, steps)

Pre-fold, fold and post-fold live in :mod:`latopt.prefold` (``run_fold`` is what ``latopt fold`` and
each ``latopt search`` trial call).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from latopt.artifacts import atomic_dir, seed_everything, write_json_atomic
from latopt.config import RunConfig, TrainConfig, load_config, write_config
from latopt.data import Task, get_task, limit_task, make_loaders
from latopt.errors import LatoptError

METRICS_SCHEMA = "latopt.train_metrics/1"
BASE_CHECKPOINT = "base.pt"

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


def model_cost(model: nn.Module, resolution: int) -> dict[str, int]:
    """FLOPs (torch FlopCounterMode: 2 per multiply-add) of one 3xRxR image, and the parameter count."""
    from torch.utils.flop_counter import FlopCounterMode

    was_training = model.training
    model.eval()
    p = next(model.parameters())
    x = torch.zeros(1, 3, resolution, resolution, dtype=p.dtype, device=p.device)
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(x)
    finally:
        model.train(was_training)
    return {"flops": int(counter.get_total_flops()), "params": int(sum(q.numel() for q in model.parameters()))}


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
    """Train ``epochs`` epochs; returns per-epoch {epoch, loss, train_acc, val_acc?, lr, seconds, ...}."""
    from tqdm.auto import tqdm

    history: list[dict[str, float]] = []
    for epoch in range(epochs):
        model.train()
        t0 = time.perf_counter()
        loss_sum, correct, seen = 0.0, 0, 0
        extras_sum: dict[str, float] = {}
        bar = tqdm(loader, desc=f"{desc} {epoch + 1}/{epochs}", disable=None if progress else True, leave=False,
                   dynamic_ncols=True)
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
            tqdm.write(f"{desc} epoch {epoch + 1}/{epochs}: {shown}")
    return history


def load_task(cfg: RunConfig) -> Task:
    task = get_task(cfg.data.task, cfg.data.resolution, cfg.data.split_seed, augment=cfg.data.augment)
    return limit_task(task, cfg.data.max_samples)


def data_meta(cfg: RunConfig) -> dict[str, Any]:
    """What a checkpoint records about its data, checked again when it is folded."""
    return {"task": cfg.data.task, "split_seed": cfg.data.split_seed, "resolution": cfg.data.resolution,
            "max_samples": cfg.data.max_samples}


def train_base(cfg: RunConfig, out_dir: str | Path, *, checkpoint: str | Path | None = None,
               pretrained: bool = False, progress: bool = True, seed: int = 0) -> dict[str, Any]:
    """Train the base model; write base.pt + metrics.json + config.yaml into ``out_dir``; return metrics."""
    from latopt.models import build_model, load_checkpoint, make_arch, save_checkpoint

    pretrained = pretrained or cfg.model.pretrained
    if checkpoint is not None and pretrained:
        raise LatoptError("give either --checkpoint or --pretrained, not both")
    task = load_task(cfg)
    seed_everything(seed)
    if checkpoint is not None:
        if not Path(checkpoint).is_file():
            raise LatoptError(f"checkpoint {checkpoint} does not exist")
        model, arch, _meta = load_checkpoint(checkpoint, expect_model=cfg.model.name)
        if arch.get("alpha") or arch.get("fold"):
            raise LatoptError(f"checkpoint {checkpoint} is a pre-folded/folded model; give a base checkpoint")
        if int(arch["num_classes"]) != task.num_classes:
            raise LatoptError(f"checkpoint {checkpoint} has {arch['num_classes']} classes but task "
                              f"{task.name!r} has {task.num_classes}")
    else:
        model = build_model(cfg.model.name, task.num_classes, pretrained=pretrained)
    arch = make_arch(model, cfg.model.name, task.num_classes)
    train_loader, val_loader, test_loader = make_loaders(task, cfg.data.batch_size, cfg.data.workers, seed)
    t = cfg.train
    optimizer = make_optimizer([{"params": [q for q in model.parameters() if q.requires_grad]}], t, t.lr)
    scheduler = make_scheduler(optimizer, t, t.epochs, len(train_loader))
    t0 = time.perf_counter()
    history = fit(model, train_loader, t.epochs, optimizer, scheduler, cross_entropy_loss(t.label_smoothing),
                  val_loader=val_loader, progress=progress, desc="base")
    seconds = time.perf_counter() - t0
    metrics: dict[str, Any] = {
        "schema": METRICS_SCHEMA, "model": cfg.model.name, "task": task.name, "sizes": task.sizes(),
        "resolution": cfg.data.resolution, "seed": seed,
        "init": "checkpoint" if checkpoint is not None else ("pretrained" if pretrained else "scratch"),
        "epochs": t.epochs, "history": history, "val_acc": evaluate(model, val_loader),
        "test_acc": evaluate(model, test_loader), **model_cost(model, cfg.data.resolution),
        "train_seconds": seconds,
    }
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        meta = {**data_meta(cfg), "seed": seed, "val_acc": metrics["val_acc"], "test_acc": metrics["test_acc"]}
        save_checkpoint(tmp / BASE_CHECKPOINT, model, arch, meta)
        metrics["checkpoint"] = str(out_dir / BASE_CHECKPOINT)
        write_json_atomic(tmp / "metrics.json", metrics)
        write_config(cfg, tmp / "config.yaml")
    return metrics


# ------------------------------------------------------------------------------------------- CLI
def default_out(cfg: RunConfig, stage: str) -> Path:
    return Path("runs") / cfg.name / stage


def register(sub: argparse._SubParsersAction) -> None:
    from latopt.cli import common_parser

    p = sub.add_parser("train", parents=[common_parser()], help="train the base model (from scratch by default)",
                       description="Train cfg.model on cfg.data; writes base.pt, metrics.json and config.yaml.")
    p.add_argument("--config", required=True, help="run config YAML (e.g. configs/quickstart.yaml)")
    p.add_argument("--out", help="output directory (default runs/<name>/base)")
    p.add_argument("--checkpoint", help="fine-tune this latopt checkpoint instead of training from scratch")
    p.add_argument("--pretrained", action="store_true", help="start from pretrained weights (must be cached; no download)")
    p.add_argument("--epochs", type=int, help="override train.epochs")
    p.add_argument("--data", help="override data.task: digits | digits-clutter | imagefolder:PATH | cifar10:PATH")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--threads", type=int, help="torch intra-op threads (default: config 'threads', else torch's "
                   "choice; 1 is far faster on a machine shared with other jobs)")
    p.set_defaults(func=_cmd_train)

    f = sub.add_parser("fold", parents=[common_parser()], help="Layer Folding: pre-fold, fold at tau, fine-tune",
                       description="Pre-fold a base checkpoint with sigma_alpha activations and the (latency-weighted) "
                                   "compression loss, fold every block with alpha >= tau, check the fold, fine-tune; "
                                   "writes folded.pt, report.json, report.txt and config.yaml.")
    f.add_argument("--config", required=True, help="run config YAML")
    f.add_argument("--checkpoint", required=True, help="base checkpoint (from latopt train)")
    f.add_argument("--lut", help="latency LUT JSON giving c_l (default: config lut; none = uniform c_l = 1)")
    f.add_argument("--lambda-c", type=float, help="override fold.lambda_c (>= 0)")
    f.add_argument("--tau", type=float, help="override fold.tau, in (0, 1]")
    f.add_argument("--p", type=float, help="override fold.p (> 1)")
    f.add_argument("--granularity", choices=("block", "activation"), help="override fold.granularity")
    f.add_argument("--distill", action="store_true", default=None, help="distil from the base model")
    f.add_argument("--mode", choices=("exact", "paper"), help="override fold.mode")
    f.add_argument("--data", help="override data.task (must match the base checkpoint's)")
    f.add_argument("--out", help="output directory (default runs/<name>/fold)")
    f.add_argument("--no-progress", action="store_true", help="no progress bars")
    f.add_argument("--threads", type=int, help="torch intra-op threads (default: config 'threads', else torch's choice)")
    f.set_defaults(func=_cmd_fold)


def _set_threads(threads: int | None) -> None:
    if threads is not None:
        torch.set_num_threads(threads)


def _cmd_train(args: argparse.Namespace) -> int:
    if args.epochs is not None and args.epochs < 0:
        raise LatoptError(f"--epochs must be >= 0, got {args.epochs}")
    cfg = load_config(args.config, {"train.epochs": args.epochs, "data.task": args.data, "threads": args.threads})
    _set_threads(cfg.threads)
    out = Path(args.out) if args.out else default_out(cfg, "base")
    m = train_base(cfg, out, checkpoint=args.checkpoint, pretrained=args.pretrained,
                   progress=not args.no_progress, seed=args.seed)
    print(f"base {cfg.model.name} on {m['task']}: val {m['val_acc']:.4f}, test {m['test_acc']:.4f} "
          f"({m['train_seconds']:.0f} s); wrote {m['checkpoint']}")
    return 0


def _cmd_fold(args: argparse.Namespace) -> int:
    from latopt.prefold import format_summary, run_fold

    cfg = load_config(args.config, {"fold.lambda_c": args.lambda_c, "fold.tau": args.tau, "fold.p": args.p,
                                    "fold.granularity": args.granularity, "fold.distill": args.distill,
                                    "fold.mode": args.mode, "data.task": args.data, "threads": args.threads})
    _set_threads(cfg.threads)
    out = Path(args.out) if args.out else default_out(cfg, "fold")
    f = cfg.fold
    report = run_fold(cfg, args.checkpoint, out, lut=args.lut or cfg.lut, lambda_c=f.lambda_c, tau=f.tau, p=f.p,
                      granularity=f.granularity, distill=f.distill, mode=f.mode, progress=not args.no_progress,
                      seed=args.seed)
    print(format_summary(report))
    return 0


__all__ = ["evaluate", "fit", "make_optimizer", "make_scheduler", "model_cost", "train_base", "register"]
