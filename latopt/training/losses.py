"""The training loss of every fine-tune: the task loss, optional distillation from the base, penalties.

One object, :class:`TrainingLoss`, is the ``StepLoss`` (:mod:`latopt.training.loop`) of every training latopt does:
base training (the task loss alone, :mod:`latopt.training.base_training`), pre-fold (plus λ_c·L_c) and post-fold
(:mod:`latopt.layerfold`), the DP's fine-tune and its ``finetune`` importance (:mod:`latopt.dp`), and the
baselines' fine-tunes of ``tools/bench_methods.py``::

    loss = (1 − w)·CE(student, y) + w·D(student, teacher) + Σ λ_i·P_i

CE is cross-entropy with label smoothing ``train.label_smoothing``; D the distillation variant ``fold.distill``
names, weighted by w = ``fold.distill_weight`` (``none``: loss = CE); P_i the penalties a phase adds (pre-fold:
λ_c·L_c, reported per epoch as ``L_c``). The teacher is the base network, frozen: a copy, in eval mode, without
gradients, on the training device, made once by :func:`training_loss`. A caller that fine-tunes several times
(run_fold's pre-fold and post-fold, run_dp's importance and fine-tune, the ``finetune`` importance over every
candidate, a baseline's pruning steps) builds the loss once and passes it down.

**Distillation variants** are classes registered by name with :func:`distillation`, here: a new variant is one
class in this module, and its name is then a valid ``fold.distill``. The config module is torch-free and cannot
see this registry, so the name is checked here, by :func:`check_loss_config` (one line naming the key and the
known names), which the entry points call before any training. The configs and reports of before named
variants held a boolean: ``true`` reads as ``logits``, ``false`` as ``none`` (:data:`latopt.files.records.DistillName`).

    logits   Hinton et al.'s knowledge distillation: T²·KL(softmax(teacher/T) ‖ softmax(student/T)) per sample,
             T = ``fold.temperature``

Public API::

    TrainingLoss(label_smoothing=0.0, distill=None, distill_weight=0.0, penalties=())
        a StepLoss: loss(model, x, y) -> (loss, logits, extras); extras: each penalty's value by its name
    loss.with_penalty(name, weight, term) -> TrainingLoss   plus weight·term(), the same teacher
    training_loss(cfg, base=None, *, accel=None) -> TrainingLoss   cfg.train's and cfg.fold's, the teacher built once
    check_loss_config(cfg)                 fold.distill names a registered variant or none; else one LatoptError line
    distillation(name)                     class decorator: register a variant under ``name``
    Distillation(teacher, fold)            a variant's base: variant(model, x) -> (student logits, term D)
    DISTILLATIONS                          {name: variant class};  distill_names() -> ("none", "logits", ...)
    frozen_teacher(base, accel=None) -> nn.Module     the frozen copy of ``base`` a variant is given
    kd_loss(student, teacher, temperature) -> Tensor  the ``logits`` variant's term
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from latopt.config import FoldConfig, RunConfig
from latopt.errors import LatoptError
from latopt.training.accel import Accel

NO_DISTILLATION = "none"


class Distillation:
    """A distillation variant (registered with :func:`distillation`): built once per :class:`TrainingLoss` from the
    frozen teacher (:func:`frozen_teacher`) and ``cfg.fold``; each batch, ``variant(model, x)`` runs the student's
    forward itself (so a variant may read the student's inner features) and returns (the student's logits, the
    distillation term D, a 0-dim tensor the student's gradient flows through; the teacher's forward without
    gradients). :class:`TrainingLoss` mixes it as (1 − w)·CE + w·D."""

    def __init__(self, teacher: nn.Module, fold: FoldConfig) -> None:
        self.teacher, self.fold = teacher, fold

    def __call__(self, model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError


DISTILLATIONS: dict[str, type[Distillation]] = {}
V = TypeVar("V", bound=type[Distillation])


def distillation(name: str) -> Callable[[V], V]:
    """Class decorator: register a :class:`Distillation` as ``fold.distill: name`` (a name given once)."""
    def register(cls: V) -> V:
        if name == NO_DISTILLATION or name in DISTILLATIONS:
            raise ValueError(f"distillation {name!r} is registered already")
        DISTILLATIONS[name] = cls
        return cls

    return register


def distill_names() -> tuple[str, ...]:
    """What ``fold.distill`` may name: ``none``, then the registered variants."""
    return (NO_DISTILLATION, *DISTILLATIONS)


def kd_loss(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """T²·KL(softmax(teacher/T) ‖ softmax(student/T)), the mean over the batch (Hinton et al.)."""
    t = temperature
    return F.kl_div(F.log_softmax(student / t, 1), F.log_softmax(teacher / t, 1), log_target=True,
                    reduction="batchmean") * t * t


@distillation("logits")
class LogitDistillation(Distillation):
    """Knowledge distillation on the logits at temperature ``fold.temperature`` (:func:`kd_loss`)."""

    def __call__(self, model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = model(x)
        with torch.no_grad():
            t_logits = self.teacher(x)
        return logits, kd_loss(logits, t_logits, self.fold.temperature)


@dataclass(frozen=True)
class Penalty:
    """A term added to the loss: ``weight``·``term()``, its value reported per epoch as ``name``."""

    name: str
    weight: float
    term: Callable[[], torch.Tensor]


@dataclass(frozen=True)
class TrainingLoss:
    """The training loss (module docstring), a ``StepLoss``: ``loss(model, x, y) -> (loss, logits, extras)``
    with ``extras`` = {penalty name: its value, detached}. Without ``distill`` and penalties it is
    ``F.cross_entropy(model(x), y, label_smoothing=...)``, exactly."""

    label_smoothing: float = 0.0
    distill: Distillation | None = None
    distill_weight: float = 0.0
    penalties: tuple[Penalty, ...] = ()

    @property
    def teacher(self) -> nn.Module | None:
        """The frozen teacher of the distillation (None without one)."""
        return None if self.distill is None else self.distill.teacher

    def with_penalty(self, name: str, weight: float, term: Callable[[], torch.Tensor]) -> TrainingLoss:
        """This loss plus ``weight``·``term()`` (reported as ``name``), sharing its teacher."""
        return dataclasses.replace(self, penalties=(*self.penalties, Penalty(name, weight, term)))

    def __call__(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        if self.distill is None:
            logits = model(x)
            loss = F.cross_entropy(logits, y, label_smoothing=self.label_smoothing)
        else:
            logits, term = self.distill(model, x)
            w = self.distill_weight
            loss = (1 - w) * F.cross_entropy(logits, y, label_smoothing=self.label_smoothing) + w * term
        extras: dict[str, torch.Tensor] = {}
        for p in self.penalties:
            value = p.term()
            loss = loss + p.weight * value
            extras[p.name] = value.detach()
        return loss, logits, extras


def check_loss_config(cfg: RunConfig) -> None:
    """``cfg.fold.distill`` is ``none`` or a registered variant; else one :class:`LatoptError` line naming the key
    and the known names. Call it before any training."""
    name = cfg.fold.distill
    if name != NO_DISTILLATION and name not in DISTILLATIONS:
        raise LatoptError(f"config key 'fold.distill' is {name!r}; choose one of {', '.join(distill_names())}")


def frozen_teacher(base: nn.Module, accel: Accel | None = None) -> nn.Module:
    """A copy of ``base`` in eval mode, without gradients, on ``accel``'s device (default: the CPU)."""
    teacher = (accel or Accel()).prepare(copy.deepcopy(base)).eval()
    for q in teacher.parameters():
        q.requires_grad_(False)
    return teacher


def training_loss(cfg: RunConfig, base: nn.Module | None = None, *, accel: Accel | None = None) -> TrainingLoss:
    """The training loss of ``cfg`` (:func:`check_loss_config` first): cross-entropy with ``train.label_smoothing``
    and, unless ``fold.distill`` is ``none``, its variant from a :func:`frozen_teacher` of ``base`` on ``accel``,
    built here once, mixed at ``fold.distill_weight``. ``base`` is not modified."""
    check_loss_config(cfg)
    f = cfg.fold
    if f.distill == NO_DISTILLATION:
        return TrainingLoss(cfg.train.label_smoothing)
    if base is None:
        raise LatoptError(f"fold.distill {f.distill!r} distils from the base network, and none was given")
    return TrainingLoss(cfg.train.label_smoothing, DISTILLATIONS[f.distill](frozen_teacher(base, accel), f),
                        f.distill_weight)


__all__ = ["DISTILLATIONS", "NO_DISTILLATION", "Distillation", "LogitDistillation", "Penalty", "TrainingLoss",
           "check_loss_config", "distill_names", "distillation", "frozen_teacher", "kd_loss", "training_loss"]
