"""Importance of each (block, variant): what the network loses when that one block takes that variant.

The DP (:mod:`latopt.dp`) minimises the sum of these *losses* over the blocks (``none`` loses 0), i.e. it
assumes they add up across blocks (as LayerMerge and DepthShrinker do). Methods (``method=``):

- ``proxy`` (the default, cheap): the variant network of that block alone (``linearize(model, {b: v})``,
  no fine-tuning), its BatchNorm statistics re-estimated on ``bn_batches`` training batches (removing a
  depthwise convolution or a block shifts the statistics every later BN was fitted to; without this the
  proxy mostly measures that shift), then its validation cross-entropy; loss = that minus the base
  network's (re-estimated the same way). One forward pass over a few batches and the validation split
  per candidate.
- ``finetune`` (expensive, the reference): the fold of that block alone fine-tuned for ``epochs`` epochs
  at ``fold.post_lr`` (:func:`latopt.layerfold.fold_plan_and_finetune`) with the training loss of every
  fine-tune (:mod:`latopt.training.losses`: ``fold.distill``'s distillation from the base, its teacher built once for
  all candidates), on ``train.device``, then its validation accuracy; loss = base accuracy − that.
  #candidates fine-tunes.
- ``uniform``: loss 1 for every variant other than ``none``: the DP then changes as few blocks as the
  budget allows, the fastest such set (for structure-only benchmarks on random weights, where an accuracy
  proxy means nothing).

A measured loss below 0 (the variant did better than the base, within noise) is kept as 0, so that the DP
does not trade latency for noise; ties go to the faster set (:mod:`latopt.dp.knapsack`).
``tools/dp_importance.py`` measures how well ``proxy`` ranks the candidates against ``finetune`` (Spearman's
ρ over all candidates and per variant, and the time each method takes) on a trained base. The proxy cannot
see what fine-tuning recovers, e.g. a ``pw`` on a late, wide block (docs/variants.md).

Public API::

    candidates(lut, variants=None) -> {block: ("none", variant, ...)}   what the DP may choose per block
    variant_losses(cfg, model, task, cands, *, method="proxy", seed=0, progress=True, bn_batches=8,
                   epochs=1, clip=True, loss=None) -> {block: {variant: loss}}   (method "uniform" needs no
                   model or task; ``loss``: finetune's training loss, default built from cfg and model)
    val_loss(model, loader) -> (mean cross-entropy, accuracy)
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable, Mapping
from itertools import islice
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.swa_utils import update_bn

from latopt.constants import IMPORTANCE_METHODS, LUT_VARIANTS
from latopt.data import Task, make_loaders
from latopt.errors import LatoptError
from latopt.latency.lut import LUT
from latopt.layerfold import fold_plan_and_finetune
from latopt.log import get_logger, time_left
from latopt.nets.variants import VARIANTS
from latopt.rewrite import linearize
from latopt.training.accel import resolve
from latopt.training.loop import evaluate, seed_everything
from latopt.training.losses import TrainingLoss, training_loss

_LOG = get_logger("dp")


def candidates(lut: LUT, variants: Iterable[str] | None = None) -> dict[int, tuple[str, ...]]:
    """Per block of the LUT: ``none`` and each of ``variants`` (default: every variant the LUT timed) that
    the block allows and the LUT has a time for; a block that cannot be folded has ``none`` only."""
    allowed = tuple(lut.variants) if variants is None else tuple(variants)
    bad = [v for v in allowed if v not in LUT_VARIANTS]
    if bad:
        raise LatoptError(f"unknown variant {bad[0]!r}; variants are {', '.join(LUT_VARIANTS)}", param="variants")
    unknown = [v for v in allowed if v not in ("none", *lut.variants)]
    if unknown:
        raise LatoptError(f"variant {unknown[0]!r} is not in the LUT (it has {', '.join(lut.variants)}); "
                          f"profile it (latopt profile, variants {','.join((*lut.variants, unknown[0]))})",
                          param="variants")
    out: dict[int, tuple[str, ...]] = {}
    for b in lut.blocks:
        out[b.index] = ("none", *(v for v in allowed if v != "none" and v in b.ms
                                  and (b.foldable or VARIANTS[v].on_unfoldable)))
    return out


@torch.no_grad()
def val_loss(model: nn.Module, loader: Iterable) -> tuple[float, float]:
    """(mean cross-entropy, top-1 accuracy) of ``model`` on ``loader`` in eval mode (mode restored)."""
    was = model.training
    model.eval()
    total, n, correct = 0.0, 0, 0
    try:
        for x, y in loader:
            logits = model(x)
            total += float(F.cross_entropy(logits, y, reduction="sum"))
            correct += int((logits.argmax(1) == y).sum())
            n += int(y.numel())
    finally:
        model.train(was)
    if n == 0:
        raise LatoptError("cannot measure a loss on an empty validation split")
    return total / n, correct / n


def _uniform(cands: Mapping[int, Iterable[str]]) -> dict[int, dict[str, float]]:
    return {b: {v: 0.0 if v == "none" else 1.0 for v in vs} for b, vs in cands.items()}


def check_importance(method: str) -> str:
    """``method`` when it is one of :data:`IMPORTANCE_METHODS`, else one error line (``param="importance"``)."""
    if method not in IMPORTANCE_METHODS:
        raise LatoptError(f"importance {method!r}: choose one of {', '.join(IMPORTANCE_METHODS)}", param="importance")
    return method


def variant_losses(cfg: Any, model: nn.Module | None, task: Task | None, cands: Mapping[int, Iterable[str]], *,
                   method: str = "proxy", seed: int = 0, progress: bool = True, bn_batches: int = 8,
                   epochs: int = 1, clip: bool = True, loss: TrainingLoss | None = None
                   ) -> dict[int, dict[str, float]]:
    """The loss of every candidate (block, variant) of ``cands`` by ``method`` (module docstring); ``none``
    loses 0. ``model`` is the trained base network (not modified). ``clip=False`` keeps losses below 0
    (for measuring the proxy, ``tools/dp_importance.py``; the DP wants them clipped). ``loss``: the training
    loss of ``finetune``'s fine-tunes, its teacher on ``train.device`` (default:
    :func:`latopt.training.losses.training_loss` of ``cfg`` and ``model``, built once here)."""
    check_importance(method)
    if method == "uniform":
        return _uniform(cands)
    if model is None or task is None:
        raise LatoptError(f"importance method {method!r} needs the trained model and its task")
    train_loader, val_loader, _ = make_loaders(task, cfg.data.batch_size, seed)   # the proxy runs on the CPU
    todo = [(b, v) for b, vs in sorted(cands.items()) for v in vs if v != "none"]
    floor = 0.0 if clip else -float("inf")
    out: dict[int, dict[str, float]] = {b: {"none": 0.0} for b in cands}
    if method == "proxy":
        def score(net: nn.Module) -> float:
            seed_everything(seed)  # the same training batches for every candidate
            if bn_batches > 0:
                with torch.no_grad():   # torch's BN re-estimation (cumulative average), without autograd
                    update_bn(islice(iter(train_loader), bn_batches), net)
            return val_loss(net, val_loader)[0]

        base = score(copy.deepcopy(model))
        took: list[float] = []
        for n, (b, v) in enumerate(todo):
            t0 = time.perf_counter()
            out[b][v] = max(floor, score(linearize(model, {b: v})) - base)
            took.append(time.perf_counter() - t0)
            if progress:
                _LOG.info(f"importance (proxy) {n + 1}/{len(todo)}: block {b} {v}: loss +{out[b][v]:.4f} nats; "
                          f"about {time_left(took, len(todo) - n - 1)} left")
        return out
    base_acc = evaluate(model, val_loader)
    one = cfg.with_overrides({"fold.post_epochs": int(epochs)})
    accel = resolve(one)
    loss = loss if loss is not None else training_loss(one, model, accel=accel)
    took = []
    for n, (b, v) in enumerate(todo):
        t0 = time.perf_counter()
        _, info = fold_plan_and_finetune(one, model, {b: v}, task, mode="exact", progress=False, loss=loss,
                                         seed=seed, accel=accel)
        out[b][v] = max(floor, base_acc - info.val["finetuned"])
        took.append(time.perf_counter() - t0)
        if progress:
            _LOG.info(f"importance (finetune) {n + 1}/{len(todo)}: block {b} {v}: val acc "
                      f"{info.val['finetuned']:.4f} (base {base_acc:.4f}); about {time_left(took, len(todo) - n - 1)} left")
    return out
