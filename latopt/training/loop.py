"""The training engine: one epoch loop, evaluation, optimizers and schedules.

Base training (:mod:`latopt.training.base_training`), pre-fold and post-fold (:mod:`latopt.layerfold`, also in every search
trial), ``tools/ednl.py`` and the MLP trainer (:func:`latopt.exact.mlp.train_mlp`) train through :func:`fit`. A training step is
described by a ``StepLoss``: ``step_loss(model, x, y) -> (loss, logits, extras)`` where ``extras`` are
scalars (0-dim tensors or floats) to average per epoch (e.g. the compression loss). The loss of every
fine-tune is one such object, :class:`latopt.training.losses.TrainingLoss` (the task loss, the optional distillation
from the base, penalties), built once by :func:`latopt.training.losses.training_loss`; the engine owns the
device placement of batches, autocast, the optimizer steps (through a GradScaler for fp16), the
per-update schedule, the per-step hook (σ_α clipping), DistributedDataParallel under torchrun and the
per-epoch record. Where and how it runs is an :class:`latopt.training.accel.Accel` (default: the CPU, float32,
one process).

Public API::

    evaluate(model, loader, accel=None) -> float         top-1 accuracy in [0, 1] (eval mode, no grad, float32)
    fit(model, loader, epochs, Step(loss, optimizer, scheduler, ...), *, val_loader, best, accel,
        report=Report(...), resume=Resume(...)) -> list[dict]   the per-epoch records
    cross_entropy_loss(label_smoothing) -> StepLoss     the task loss alone (a latopt.training.losses.TrainingLoss)
    make_optimizer(model, train_cfg, lr, *, exclude=(), nesterov=True)   timm's create_optimizer_v2
    make_scheduler(optimizer, train_cfg, epochs, steps_per_epoch)        timm's create_scheduler_v2, per update
    tensor_loader(x, y, batch_size, seed) -> DataLoader  shuffled mini-batches of in-memory tensors
    seed_everything(seed)                                python, numpy and torch RNGs

**Optimizer** (timm's ``create_optimizer_v2``): ``sgd`` is SGD with Nesterov momentum (timm's ``sgd``;
classical momentum with ``nesterov=False`` and plain SGD at momentum 0, timm's ``momentum``), ``adamw``
torch's AdamW. Weight decay applies to every trainable parameter, biases and norm parameters too, not
timm's default for a model (``filter_bias_and_bn``; why: docs/design.md, "Training defaults"). Parameters in
``exclude`` (the pre-fold α's, which have their own Adam) and frozen ones are
left out.

**Schedule** (timm's ``create_scheduler_v2``, stepped after every optimizer update with
``step_update``): cosine from ``lr`` to 0 over all ``epochs × steps_per_epoch`` updates, step decay
(× ``gamma`` every ``step_size`` epochs) or constant, all measured from the first update, so the run
lasts ``epochs`` and the drops fall where ``step_size`` says. A linear warm-up from 0 over
``warmup_epochs`` *replaces* the schedule while it lasts (timm's semantics; it is not a prefix) and is
capped at half the run (whole epochs, rounded down): a warm-up as long as a short phase (post-fold runs ``fold.post_epochs``) would
otherwise end the phase at the peak rate, never decaying.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from timm.optim import create_optimizer_v2
from timm.scheduler import create_scheduler_v2
from timm.scheduler.scheduler import Scheduler
from timm.utils import random_seed
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

from latopt.config import TrainConfig
from latopt.errors import LatoptError
from latopt.log import get_logger, progress_bar, time_left
from latopt.training.accel import Accel
from latopt.training.losses import TrainingLoss
from latopt.training.torch_settings import strict_fp32

_LOG = get_logger("train")
CHECK_EVERY = 50  # steps between checks that the loss is finite (each check waits for the device once)
StepLoss = Callable[[nn.Module, torch.Tensor, torch.Tensor],
                    tuple[torch.Tensor, torch.Tensor, Mapping[str, torch.Tensor | float]]]


@torch.no_grad()
def evaluate(model: nn.Module, loader: Iterable, accel: Accel | None = None) -> float:
    """Top-1 accuracy of ``model`` on ``loader`` (the model's train/eval mode is restored).

    The model must be on ``accel``'s device (default: the CPU); batches are moved there. Always float32
    (:func:`latopt.training.torch_settings.strict_fp32`: no autocast, no TF32), so the accuracy a run records is the
    one ``latopt export`` re-measures on the CPU. Under torchrun the counts of every process are summed (each
    evaluates its shard: :func:`latopt.data.make_loaders`); one read of the device per call."""
    return _share((model,), loader, accel, lambda x, y: model(x).argmax(1) == y)


def agreement(model: nn.Module, reference: nn.Module, loader: Iterable, accel: Accel | None = None) -> float:
    """The share of ``loader``'s images on which ``model`` and ``reference`` predict the same top-1 class (both on
    ``accel``'s device; float32, modes restored and counts summed over processes as in :func:`evaluate`)."""
    return _share((model, reference), loader, accel,
                  lambda x, _y: model(x).argmax(1) == reference(x).argmax(1))


def _share(models: tuple[nn.Module, ...], loader: Iterable, accel: Accel | None,
           hits: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> float:
    """The share of ``loader``'s images for which ``hits(x, y)`` holds, ``models`` in eval mode meanwhile."""
    accel = accel or Accel()
    modes = [m.training for m in models]
    for m in models:
        m.eval()
    count = torch.zeros((), dtype=torch.float64, device=accel.device)
    total = 0
    try:
        with strict_fp32():
            for x, y in loader:
                x, y = accel.batch(x, y)
                count += hits(x, y).sum()
                total += int(y.numel())
    finally:
        for m, was in zip(models, modes, strict=True):
            m.train(was)
    counts = accel.all_reduce(torch.stack([count, count.new_tensor(float(total))])).tolist()
    if counts[1] == 0:
        raise LatoptError("cannot evaluate on an empty dataset split")
    return counts[0] / counts[1]


def make_optimizer(model: nn.Module, train_cfg: TrainConfig, lr: float, *, exclude: Iterable[nn.Parameter] = (),
                   nesterov: bool = True) -> torch.optim.Optimizer:
    """``train_cfg.optimizer`` over the trainable parameters of ``model`` less ``exclude``, one group with
    weight decay ``train_cfg.weight_decay`` (see module doc)."""
    skip = {id(q) for q in exclude}
    params = [q for q in model.parameters() if q.requires_grad and id(q) not in skip]
    name: str = train_cfg.optimizer
    if name == "sgd" and not (nesterov and train_cfg.momentum > 0):
        name = "momentum"  # timm's "sgd" is always Nesterov, which torch refuses at momentum 0
    return create_optimizer_v2(params, name, lr=lr, weight_decay=train_cfg.weight_decay, momentum=train_cfg.momentum)


def make_scheduler(optimizer: torch.optim.Optimizer, train_cfg: TrainConfig, epochs: int,
                   steps_per_epoch: int) -> Scheduler:
    """The per-update schedule of ``train_cfg`` for a run of ``epochs`` (see module doc); :func:`fit`
    calls its ``step_update`` after every optimizer step."""
    epochs, steps_per_epoch = max(1, epochs), max(1, steps_per_epoch)
    # timm's "constant" is its step schedule at decay rate 1 (spelt out: early timm 1.0.x lacks the name)
    sched = "step" if train_cfg.schedule in ("step", "constant") else train_cfg.schedule
    scheduler, _ = create_scheduler_v2(
        optimizer, sched=sched, num_epochs=epochs, decay_epochs=train_cfg.step_size,
        decay_rate=train_cfg.gamma if train_cfg.schedule == "step" else 1.0, min_lr=0.0,
        warmup_lr=0.0, warmup_epochs=min(train_cfg.warmup_epochs, epochs // 2), warmup_prefix=False,
        step_on_epochs=False, updates_per_epoch=steps_per_epoch)
    return scheduler


def tensor_loader(x: torch.Tensor, y: torch.Tensor, batch_size: int, seed: int) -> DataLoader:
    """Shuffled mini-batches (the order reproducible from ``seed``) of in-memory tensors, one index per batch."""
    sampler = BatchSampler(RandomSampler(range(len(y)), generator=torch.Generator().manual_seed(seed)),
                           batch_size, drop_last=False)
    return DataLoader(TensorDataset(x, y), sampler=sampler, batch_size=None)


def cross_entropy_loss(label_smoothing: float = 0.0) -> StepLoss:
    """Cross-entropy with ``label_smoothing``, no extras: :class:`latopt.training.losses.TrainingLoss` without distillation
    or penalty."""
    return TrainingLoss(label_smoothing)


@dataclass(frozen=True)
class Step:
    """What one training step does: ``loss`` (a :data:`StepLoss`; every fine-tune's is a
    :class:`latopt.training.losses.TrainingLoss`) under autocast, backward (through ``scaler``,
    default the :class:`~latopt.training.accel.Accel`'s: fp16 only), the global gradient norm of each optimizer's
    parameters clipped to ``clip_grad`` (after unscaling), a step of ``optimizer`` and of each of
    ``extra_optimizers`` (not scheduled: the pre-fold α's Adam), ``scheduler.step_update``, then ``after_step()``
    (σ_α clipping)."""

    loss: StepLoss
    optimizer: torch.optim.Optimizer
    scheduler: Scheduler | None = None
    extra_optimizers: tuple[torch.optim.Optimizer, ...] = ()
    clip_grad: float | None = None
    after_step: Callable[[], None] | None = None
    scaler: torch.amp.GradScaler | None = None


@dataclass(frozen=True)
class Report:
    """What a run says while it runs: with ``show``, a line named ``desc`` (logger ``latopt.training.base_training``) every
    ``every`` epochs and after the last, with the time left, and a bar on a terminal; one warning line for each
    sign of trouble ``watch`` names (``loss``: a spike; ``val``: a collapse of validation accuracy)."""

    show: bool = True
    desc: str = "train"
    every: int = 1
    watch: tuple[str, ...] = ("loss", "val")


@dataclass(frozen=True)
class Resume:
    """A run whose first ``start_epoch`` epochs are done (their records in ``history``) continues from there;
    ``on_epoch_end(history)`` runs after every epoch (an epoch checkpoint, :mod:`latopt.training.resume`)."""

    start_epoch: int = 0
    history: tuple[dict[str, float], ...] | list[dict[str, float]] = ()
    on_epoch_end: Callable[[list[dict[str, float]]], None] | None = None


def fit(model: nn.Module, loader: Iterable, epochs: int, step: Step, *, val_loader: Iterable | None = None,
        best: BestWeights | None = None, accel: Accel | None = None, report: Report = Report(),
        resume: Resume = Resume()) -> list[dict[str, float]]:
    """Train up to epoch ``epochs``, each batch one :class:`Step`; returns the per-epoch records {epoch, loss,
    train_acc, val_acc?, lr, seconds, ...the loss's extras}.

    Batches are moved to ``accel``'s device; under torchrun the model is trained wrapped in
    DistributedDataParallel (with global batch norm) and the epoch's sums are added over the processes. A sampler
    with ``set_epoch`` (:func:`latopt.data.make_loaders`) is told each epoch. The loop never waits for the
    device: loss, accuracy and extras are summed on it and read once per epoch; a non-finite loss is caught
    every :data:`CHECK_EVERY` steps and at the epoch's end (one line, :class:`LatoptError`). ``best`` (with
    ``val_loader``): the weights of the best-validation epoch are kept there and put back into ``model`` at the
    end (:class:`BestWeights`). ``report`` says what is printed (:class:`Report`: :data:`SPIKE` and
    :data:`COLLAPSE` are the thresholds of its warnings; pre-fold watches the loss only, since its accuracy falls
    by design while it removes non-linearity); ``resume`` continues a run (:class:`Resume`)."""
    accel = accel or Accel()
    scaler = step.scaler if step.scaler is not None else accel.grad_scaler()
    net = accel.wrap(model)
    optimizer, scheduler, step_loss, clip_grad = step.optimizer, step.scheduler, step.loss, step.clip_grad
    optimizers = (optimizer, *step.extra_optimizers)
    start_epoch, history = resume.start_epoch, list(resume.history)
    progress, desc = report.show, report.desc
    updates = start_epoch * len(loader) if start_epoch else 0  # type: ignore[arg-type]
    sampler = getattr(loader, "sampler", None)
    took: list[float] = []   # this call's epochs' seconds
    for epoch in range(start_epoch, epochs):
        if sampler is not None and hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        net.train()
        t0 = time.perf_counter()
        sums = torch.zeros(2, dtype=torch.float64, device=accel.device)  # loss x n, correct
        extras_sum: dict[str, torch.Tensor] = {}
        seen = 0
        bar = progress_bar(loader, desc=f"{desc} {epoch + 1}/{epochs}", enabled=progress)
        batch = 0
        for batch, (xb, yb) in enumerate(bar, 1):
            x, y = accel.batch(xb, yb)
            with accel.autocast(), accel.batch_norm():
                loss, logits, extras = step_loss(net, x, y)
            for opt in optimizers:
                opt.zero_grad(set_to_none=True)
            if scaler is None:
                loss.backward()
                _clip(optimizers, clip_grad)
                for opt in optimizers:
                    opt.step()
            else:
                scaler.scale(loss).backward()
                if clip_grad is not None:
                    for opt in optimizers:
                        scaler.unscale_(opt)
                    _clip(optimizers, clip_grad)
                for opt in optimizers:
                    scaler.step(opt)
                scaler.update()
            updates += 1
            if scheduler is not None:
                scheduler.step_update(updates)
            if step.after_step is not None:
                step.after_step()
            n = int(y.numel())
            seen += n
            sums += torch.stack([loss.detach().double() * n, (logits.detach().argmax(1) == y).sum().double()])
            for k, v in extras.items():
                extras_sum[k] = extras_sum.get(k, 0.0) + torch.as_tensor(v, device=accel.device).detach().double() * n
            if batch % CHECK_EVERY == 0:
                _check_finite(accel, sums[0], desc, epoch, batch)
            if not bar.disable and batch % CHECK_EVERY == 0:  # drawn on a terminal only: a read per CHECK_EVERY steps
                shown = {"loss": sums[0] / seen, "acc": sums[1] / seen, **{k: v / seen for k, v in extras_sum.items()}}
                bar.set_postfix({k: f"{float(v):.3f}" for k, v in shown.items()})
        _check_finite(accel, sums[0], desc, epoch, batch)
        keys = list(extras_sum)
        totals = accel.all_reduce(torch.cat([sums, sums.new_tensor([float(seen)]),
                                             *(extras_sum[k].reshape(1) for k in keys)])).tolist()
        count = max(totals[2], 1.0)
        loss_mean = totals[0] / count
        val_acc = evaluate(model, val_loader, accel) if val_loader is not None else None
        took.append(time.perf_counter() - t0)
        row: dict[str, float] = {"epoch": epoch + 1, "loss": loss_mean, "train_acc": totals[1] / count,
                                 "lr": float(optimizer.param_groups[0]["lr"]),
                                 **{k: totals[3 + i] / count for i, k in enumerate(keys)},
                                 **({} if val_acc is None else {"val_acc": val_acc}), "seconds": took[-1]}
        row.update(_unstable(history, epoch + 1, loss_mean, val_acc, desc, report.watch))
        history.append(row)
        if best is not None and val_acc is not None:
            best.update(model, epoch + 1, val_acc)
        if resume.on_epoch_end is not None:
            resume.on_epoch_end(history)
        if progress and ((epoch + 1) % max(1, report.every) == 0 or epoch + 1 == epochs):
            shown_row = ", ".join(f"{k} {v:.4g}" for k, v in row.items() if k != "epoch")
            left = f"; about {time_left(took, epochs - epoch - 1)} left" if epoch + 1 < epochs else ""
            _LOG.info(f"{desc} epoch {epoch + 1}/{epochs}: {shown_row}{left}")
    if best is not None and history:
        best.restore(model, history, desc)
    return history


SPIKE = 1.5       # an epoch's mean loss this many times the lowest so far is a spike
COLLAPSE = 0.15   # a validation accuracy this far (absolute) below the best so far is a collapse


def _unstable(history: list[dict[str, float]], epoch: int, loss: float, val_acc: float | None, desc: str,
              watch: tuple[str, ...]) -> dict[str, float]:
    """The flags of epoch ``epoch`` (its mean training ``loss``, its ``val_acc`` if validated) for its record:
    the loss spikes or the validation accuracy collapses, compared with the earlier epochs' ``history``; one
    warning line the first time in a run (a resumed run included) that a flag is raised."""
    if not history:
        return {}
    found: list[tuple[str, str]] = []   # (flag, what happened)
    low = min(r["loss"] for r in history)
    if "loss" in watch and loss > SPIKE * low:
        found.append(("unstable_loss", f"the training loss jumped to {loss:.3g} (lowest so far {low:.3g})"))
    vals = [r["val_acc"] for r in history if "val_acc" in r]
    if "val" in watch and vals and val_acc is not None and val_acc < max(vals) - COLLAPSE:
        found.append(("unstable_val", f"validation accuracy fell to {val_acc:.3f} (best so far {max(vals):.3f})"))
    for flag, what in found:
        if not any(flag in r for r in history):
            _LOG.warning(f"{desc}: {what} in epoch {epoch}: training is unstable; a lower learning rate, "
                         "a warm-up (train.warmup_epochs) or gradient clipping (train.clip_grad) helps")
    return {flag: 1.0 for flag, _ in found}


def _clip(optimizers: Iterable[torch.optim.Optimizer], max_norm: float | None) -> None:
    """Clip the global gradient norm of each optimizer's parameters to ``max_norm`` (None: nothing)."""
    if max_norm is None:
        return
    for opt in optimizers:
        params = [q for g in opt.param_groups for q in g["params"] if q.grad is not None]
        if params:
            torch.nn.utils.clip_grad_norm_(params, max_norm)


class BestWeights:
    """The weights of the best-validation epoch of a run (ties: the later epoch), kept on the CPU.

    :func:`fit` calls ``update`` after every epoch and ``restore`` at the end: a run that went wrong late
    (a loss spike, a collapse of validation accuracy) hands on its best weights, not its last ones, and says
    which (one line). ``state_dict`` / ``load_state_dict`` carry it across a resume (:mod:`latopt.training.resume`)."""

    def __init__(self) -> None:
        self.epoch = 0
        self.val_acc = -1.0
        self.weights: dict[str, torch.Tensor] | None = None

    def update(self, model: nn.Module, epoch: int, val_acc: float) -> None:
        if val_acc >= self.val_acc:
            self.epoch, self.val_acc = int(epoch), float(val_acc)
            self.weights = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}

    def restore(self, model: nn.Module, history: list[dict[str, float]], desc: str) -> None:
        """Load the best epoch's weights into ``model`` when that is not the last epoch."""
        last = history[-1]
        if self.weights is None or self.epoch == last["epoch"]:
            return
        model.load_state_dict(self.weights)
        _LOG.info(f"{desc}: kept the weights of epoch {self.epoch} (best validation accuracy {self.val_acc:.4f}; "
                  f"the last epoch, {last['epoch']}, had {last.get('val_acc', float('nan')):.4f})")

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "val_acc": self.val_acc, "weights": self.weights}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        kept = _KeptState(**state)
        self.epoch, self.val_acc, self.weights = int(kept.epoch), float(kept.val_acc), kept.weights


@dataclass
class _KeptState:
    """:meth:`BestWeights.state_dict`'s dict, read back."""

    epoch: int
    val_acc: float
    weights: dict[str, torch.Tensor] | None


def _check_finite(accel: Accel, loss_sum: torch.Tensor, desc: str, epoch: int, step: int) -> None:
    """One line when a loss summed since the epoch began (on any process) is not finite."""
    total = accel.all_reduce(loss_sum.detach().clone())
    if not torch.isfinite(total):
        raise LatoptError(f"{desc}: the loss became {float(total)} in epoch {epoch + 1} (by step {step}); "
                          "lower the learning rate")


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (timm's ``random_seed``; CPU results are then deterministic for the same
    inputs). NumPy takes seeds in [0, 2**32), so every generator gets ``seed`` modulo 2**32."""
    random_seed(seed % 2**32)


__all__ = ["BestWeights", "StepLoss", "cross_entropy_loss", "evaluate", "fit", "make_optimizer", "make_scheduler", "seed_everything",
           "tensor_loader"]
