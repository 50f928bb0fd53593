"""Layer Folding's training phases: pre-fold (σ_α + compression loss), fold at τ, check, post-fold.

Public API::

    prefold(cfg, base_model, task, *, costs=None, lut=None, progress=True, seed=0, accel=None, loss=None)
        -> Prefolded   σ_α installed and trained with ``cfg.fold``'s λ_c, p, granularity and the training loss
    Prefolded(model, history, frozen)                       what pre-fold made
    plan_from_alphas(alphas, tau) -> {block index: variant}
    fold_and_finetune(cfg, prefolded, task, *, tau, mode, progress=True, loss=None, seed=0, accel=None)
        -> (folded nn.Module, FoldOutcome)
    fold_plan_and_finetune(cfg, source, plan, task, *, mode, progress=True, loss=None, seed=0, accel=None)
        -> (folded nn.Module, FoldOutcome)   any plan {block: variant}: fold, check against the variant
                                              network, fine-tune (also the DP's apply step, latopt.dp)
    FoldOutcome(plan, fold_check, acc, val, postfold_history, seconds, source, finetuned, alphas, snapped)

Every phase trains with a :class:`latopt.training.losses.TrainingLoss` (``loss``: the task loss and ``fold.distill``'s
distillation from the base, its teacher built once by :func:`latopt.training.losses.training_loss`; pre-fold adds
λ_c·L_c to it). A caller that runs several phases builds it once and passes it to each.

**Optimisation.** The weights use cfg.train's optimizer and LR schedule at ``fold.lr`` (post-fold:
``fold.post_lr``), built by :mod:`latopt.training.loop` (timm's factories); the α's have their own Adam at
``fold.alpha_lr`` (constant, no weight decay) — near α = 0 the gradient of L_c vanishes for
p > 1 (by design), so a scale-free optimizer is what lets the task gradient move α at all — and every
α is clipped to [0, 1] after each step. ``fold.distill`` adds a distillation from the base
(:mod:`latopt.training.losses`; ``logits``: w·T²·KL(base ‖ student) at temperature T).

**Unfolded α (a decision).** The paper folds the activations with α ≥ τ and says nothing about the
rest. With ``fold.unfolded_alpha: zero`` (default) every activation that is *not* folded gets α = 0
back, i.e. it is exactly the original ReLU/ReLU6 again, and its α is frozen during post-fold: the
network then has the architecture the latency LUT timed (an as-is block is a plain activation, not a
(1 − α)σ(x) + αx with an extra multiply-add), and export can drop σ_α at α = 0. The snap changes the
function a little (the pre-fold α's are bimodal, so mostly by < 0.1 per activation); "acc.folded"
(before fine-tune) includes that change and post-fold fine-tuning repairs it. ``keep`` leaves the
learned α's in place (frozen), preserving the pre-fold function exactly.

**Fold check.** The folded network is compared with ``linearize`` of the same (snapped) σ_α network,
i.e. the folded activations at α = 1 (``verify_fold``, random inputs at the config resolution); in
exact mode a relative error above ``fold.max_fold_error`` raises VerificationError. In paper mode the
border ring differs by design: the numbers are reported, not enforced.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from latopt.config import RunConfig
from latopt.data import Task, make_loaders
from latopt.errors import LatoptError, VerificationError
from latopt.layerfold.fold_record import FoldCheck
from latopt.layerfold.penalty import CompressionLoss, block_variant_times
from latopt.nets.blocks import find_blocks
from latopt.nets.layers import AlphaActivation
from latopt.nets.variants import VARIANTS
from latopt.rewrite import (
    alpha_parameters,
    clamp_alphas_,
    fold_blocks,
    get_alphas,
    install_alpha,
    linearize,
    verify_fold,
)
from latopt.training.accel import Accel, resolve
from latopt.training.loop import (
    BestWeights,
    Report,
    Step,
    agreement,
    evaluate,
    fit,
    make_optimizer,
    make_scheduler,
    seed_everything,
)
from latopt.training.losses import TrainingLoss, training_loss


@dataclass(frozen=True)
class FoldOutcome:
    """What folding a plan made besides the folded network: the plan ({block: variant}), the fold's check
    (:class:`~latopt.layerfold.fold_record.FoldCheck`), test accuracy of the variant network (``linearized``), test
    and validation accuracy of the fold before (``folded``) and after fine-tuning (``finetuned``), the fine-tuning's
    epochs, each phase's seconds, the network the fold was computed from (``source``, on the CPU), whether it
    was fine-tuned and, before fine-tuning, the share of validation images on which the fold's top-1 prediction
    is the source's (``agreement``: exact means equal to the variant network, not to the source). Layer Folding's adds the α's learnt ({block: [α, ...]}) and how many were snapped to 0."""

    plan: dict[int, str]
    fold_check: FoldCheck
    acc: dict[str, float]
    val: dict[str, float]
    postfold_history: list[dict[str, float]]
    seconds: dict[str, float]
    source: nn.Module
    finetuned: bool
    alphas: dict[int, list[float]] = field(default_factory=dict)
    snapped: int = 0
    agreement: float | None = None


@dataclass
class Prefolded:
    """What :func:`prefold` made: the σ_α network, its training records and the blocks whose α was frozen at
    0 (no variant of them is faster than as-is)."""

    model: nn.Module
    history: list[dict[str, float]]
    frozen: list[int]


def prefold(cfg: RunConfig, base_model: nn.Module, task: Task, *, costs: Mapping[int, float] | None = None,
            lut: Any = None, progress: bool = True, seed: int = 0, accel: Accel | None = None,
            loss: TrainingLoss | None = None) -> Prefolded:
    """σ_α in every foldable block (α = 0), then train with ``loss`` + λ_c·L_c (``cfg.fold``: ``lambda_c``, ``p``,
    ``granularity``); returns the new model and its records (:class:`Prefolded`).

    ``costs`` = {block: c_l} (block granularity; None = uniform); ``lut`` gives the variant times for
    granularity ``activation``. ``loss``: the training loss (:class:`~latopt.training.losses.TrainingLoss`; default
    :func:`~latopt.training.losses.training_loss` of ``cfg``, distilling from ``base_model``); ``base_model`` is not
    modified. The model and its α's are trained on ``accel`` (default: resolved from ``cfg.train``), where
    ``loss``'s teacher must be."""
    f = cfg.fold
    accel = accel or resolve(cfg)
    model = accel.prepare(copy.deepcopy(base_model))
    alphas = install_alpha(model, "all", f.granularity)  # created on the model's device
    if not alphas:
        raise LatoptError("the model has no foldable block; nothing to pre-fold")
    times = block_variant_times(sorted(alphas), costs=costs, lut=lut, granularity=f.granularity)
    comp = CompressionLoss(alphas, p=f.p, variant_times=times)
    loss = loss if loss is not None else training_loss(cfg, base_model, accel=accel)
    trainable_alphas = [a for a in alpha_parameters(model) if a.requires_grad]
    seed_everything(seed + accel.rank)  # each process its own random stream; the sampler's order is shared
    train_loader, val_loader, _ = make_loaders(task, cfg.data.batch_size, seed, accel=accel)
    optimizer = make_optimizer(model, cfg.train, f.lr, exclude=alpha_parameters(model))
    scheduler = make_scheduler(optimizer, cfg.train, f.epochs, len(train_loader))
    extra = (torch.optim.Adam(trainable_alphas, lr=f.alpha_lr),) if trainable_alphas else ()
    step = Step(loss.with_penalty("L_c", f.lambda_c, comp), optimizer, scheduler, extra_optimizers=extra,
                clip_grad=cfg.train.clip_grad, after_step=lambda: clamp_alphas_(model))
    history = fit(model, train_loader, f.epochs, step, val_loader=val_loader, accel=accel,
                  report=Report(progress, "pre-fold", watch=("loss",)))
    return Prefolded(model, history, comp.frozen)


def plan_from_alphas(alphas: Mapping[int, list[float]], tau: float) -> dict[int, str]:
    """Fold plan: shared α ≥ τ → full; per activation: both → full, only a1 → expand_dw, only a2 → dw_project."""
    plan: dict[int, str] = {}
    for i, vals in sorted(alphas.items()):
        hit = [v >= tau for v in vals]
        if len(vals) == 1 and hit[0]:
            plan[i] = "full"
        elif len(vals) == 2:
            if all(hit):
                plan[i] = "full"
            elif hit[0]:
                plan[i] = "expand_dw"
            elif hit[1]:
                plan[i] = "dw_project"
    return plan


@torch.no_grad()
def _snap_unfolded_(model: nn.Module, plan: Mapping[int, str]) -> int:
    """Set to 0 the α of every activation the plan does not remove; returns how many were changed."""
    changed = 0
    for b in find_blocks(model):
        v = plan.get(b.index)
        removed = () if v is None else VARIANTS[v].removed_acts(b.acts)
        for path in b.acts:
            m = model.get_submodule(path)
            if path not in removed and isinstance(m, AlphaActivation) and float(m.alpha) != 0.0:
                if m.granularity == "block" and v is not None:
                    continue  # a shared α of a folded block also drives the removed activation
                m.alpha.zero_()
                changed += 1
    return changed


def fold_and_finetune(cfg: RunConfig, prefolded: nn.Module, task: Task, *, tau: float, mode: str,
                      progress: bool = True, loss: TrainingLoss | None = None,
                      seed: int = 0, accel: Accel | None = None) -> tuple[nn.Module, FoldOutcome]:
    """Fold every activation with α ≥ τ, check the fold, fine-tune; returns (folded model, outcome)
    (:func:`fold_plan_and_finetune` on a CPU copy of ``prefolded`` with its unfolded α's snapped)."""
    alphas = get_alphas(prefolded)
    plan = plan_from_alphas(alphas, tau)
    snapped = _cpu_copy(prefolded)
    n_snapped = _snap_unfolded_(snapped, plan) if cfg.fold.unfolded_alpha == "zero" else 0
    folded, info = fold_plan_and_finetune(cfg, snapped, plan, task, mode=mode, progress=progress, loss=loss,
                                          seed=seed, accel=accel)
    return folded, dataclasses.replace(info, alphas=alphas, snapped=n_snapped)


def fold_plan_and_finetune(cfg: RunConfig, source: nn.Module, plan: Mapping[int, str], task: Task, *, mode: str,
                           progress: bool = True, loss: TrainingLoss | None = None,
                           seed: int = 0, accel: Accel | None = None) -> tuple[nn.Module, FoldOutcome]:
    """Fold ``plan`` ({block: variant}, any variant) of ``source``, check the fold against the variant
    network ``linearize(source, plan)`` (exact mode: VerificationError above ``fold.max_fold_error``), then
    fine-tune the folded network (``fold.post_epochs`` at ``fold.post_lr``; σ_α frozen) with ``loss`` (a
    :class:`~latopt.training.losses.TrainingLoss` whose teacher, if any, is on ``accel``'s device; default: the task
    loss alone, ``source`` being no teacher). Returns (folded, :class:`FoldOutcome`).

    The fold and its check run on a CPU copy of ``source`` (float64 algebra, float32 check), whatever device
    it trained on; evaluation and fine-tuning run on ``accel`` (default: resolved from ``cfg.train``), where
    the folded model is returned. The outcome's ``source`` stays on the CPU."""
    accel = accel or resolve(cfg)
    source = _cpu_copy(source)
    res = cfg.data.resolution
    plan = dict(plan)
    t0 = time.perf_counter()
    reference = linearize(source, plan)
    folded = fold_blocks(source, plan, mode=mode, input_size=(res, res))
    got = verify_fold(reference, folded, (res, res), seed=seed)
    if not (math.isfinite(got.max_abs) and math.isfinite(got.max_rel)):   # any mode: a NaN is no fold
        raise VerificationError(f"folded network differs from the linearised σ_α network: max abs "
                                f"{got.max_abs:.3g}, max rel {got.max_rel:.3g} (not finite)")
    limit = cfg.fold.max_fold_error if mode == "exact" else None
    check = FoldCheck.model_validate({**got.to_json(), "mode": mode, "limit": limit,
                                      "passed": limit is None or got.max_rel <= limit}, strict=False)
    if not check.passed:
        raise VerificationError(f"folded network differs from the linearised σ_α network: max abs "
                                f"{check.max_abs:.3g}, max rel {check.max_rel:.3g} > {cfg.fold.max_fold_error}")
    fold_seconds = time.perf_counter() - t0
    accel.prepare(reference)
    accel.prepare(folded)
    train_loader, val_loader, test_loader = make_loaders(task, cfg.data.batch_size, seed, accel=accel)
    acc = {"linearized": evaluate(reference, test_loader, accel), "folded": evaluate(folded, test_loader, accel)}
    val = {"folded": evaluate(folded, val_loader, accel)}
    agree = agreement(folded, accel.prepare(_cpu_copy(source)), val_loader, accel)   # before fine-tuning
    for a in alpha_parameters(folded):  # unfolded activations stay as they are (see module doc)
        a.requires_grad_(False)
    f = cfg.fold
    t1 = time.perf_counter()
    history: list[dict[str, float]] = []
    if f.post_epochs > 0 and f.post_lr > 0:
        seed_everything(seed + 1 + accel.rank)  # each process its own random stream
        optimizer = make_optimizer(folded, cfg.train, f.post_lr)  # the α's are frozen
        scheduler = make_scheduler(optimizer, cfg.train, f.post_epochs, len(train_loader))
        step_loss = loss if loss is not None else TrainingLoss(cfg.train.label_smoothing)
        history = fit(folded, train_loader, f.post_epochs,
                      Step(step_loss, optimizer, scheduler, clip_grad=cfg.train.clip_grad), val_loader=val_loader,
                      best=BestWeights() if cfg.train.keep_best else None, accel=accel,
                      report=Report(progress, "post-fold"))
    acc["finetuned"] = evaluate(folded, test_loader, accel)
    val["finetuned"] = evaluate(folded, val_loader, accel)
    return folded, FoldOutcome(plan=plan, fold_check=check, acc=acc, val=val, postfold_history=history,
                               seconds={"fold": fold_seconds, "postfold": time.perf_counter() - t1}, source=source,
                               finetuned=bool(history), agreement=agree)


def _cpu_copy(model: nn.Module) -> nn.Module:
    """A float32 copy of ``model`` on the CPU in the default memory format (for the fold and its checks)."""
    # torch's stubs of Module.to lack memory_format, which it takes (as Tensor.to does)
    return copy.deepcopy(model).to("cpu", memory_format=torch.contiguous_format)  # type: ignore[call-overload]

