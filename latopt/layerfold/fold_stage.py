"""The Layer Folding stage: what ``latopt fold`` runs and every ``latopt search`` trial runs.

Public API::

    run_fold(cfg, base_checkpoint, out_dir, *, progress=True, seed=0, task=None) -> FoldResult
        pre-fold → fold → check → post-fold with ``cfg.fold`` (λ_c, τ, p, granularity, distill, mode) and
        ``cfg.lut`` (the LUT giving c_l; none: uniform); writes folded.pt, prefold.pt, report.json,
        report.txt and config.yaml into out_dir
    FoldResult(model, report, paths)         the folded network (CPU, eval), its report (a record,
                                             :mod:`latopt.layerfold.fold_record`), the files written
    check_base(cfg, base_checkpoint, task) -> (model, arch, meta)   a base checkpoint fit to fold with ``cfg``
    write_fold_outputs(out_dir, cfg, report, folded, info, arch, test_loader, seed, text, accel=None)
        -> FoldResult                        folded.pt / prefold.pt / report.* / config.yaml, as export reads them

A caller in the same process (a search trial) uses ``result.model``; the files are for the user, for
``latopt export`` and for a later ``latopt run`` that reuses them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import torch
from torch import nn

from latopt.config import RunConfig, write_config
from latopt.data import Task, data_meta, load_task, make_loaders
from latopt.errors import LatoptError, VerificationError
from latopt.files.artifacts import atomic_dir, write_json_atomic, write_text_atomic
from latopt.files.checkpoint import (
    Arch,
    CheckpointMeta,
    FoldHow,
    content_digest,
    load_checkpoint,
    make_arch,
    save_checkpoint,
)
from latopt.latency.lut import LUT, check_blocks, load_lut, predict
from latopt.latency.lut import costs as lut_costs
from latopt.layerfold.fold_record import FoldParams, FoldReport, LayerFoldReport, LutLatency
from latopt.layerfold.fold_report import format_report
from latopt.layerfold.phases import FoldOutcome, fold_and_finetune, prefold
from latopt.nets.blocks import find_blocks
from latopt.nets.models import model_cost
from latopt.rewrite import plain_activations_
from latopt.training.accel import Accel, resolve
from latopt.training.loop import evaluate
from latopt.training.losses import check_loss_config, training_loss

REPORT_SCHEMA = LayerFoldReport.SCHEMA
PREFOLD_CHECKPOINT = "prefold.pt"
R = TypeVar("R", bound=FoldReport)
FOLDED_CHECKPOINT = "folded.pt"


@dataclass(frozen=True)
class FoldResult(Generic[R]):
    """A fold (Layer Folding's or the DP's): the folded network (on the CPU, in eval mode, σ_α at α = 0 as
    the plain activation), its report (``report.json``'s record: :class:`LayerFoldReport` or the DP's
    :class:`latopt.dp.plan_record.DPReport`) and the files written, by role: ``folded``, ``prefold``, ``report``,
    ``text``, ``config``."""

    model: nn.Module
    report: R
    paths: dict[str, Path]


def _load_lut(cfg: RunConfig, model_name: str) -> LUT | None:
    """The LUT ``cfg.lut`` names (checked against the model, resolution and fold mode), or None."""
    if cfg.lut is None:
        return None
    if not Path(cfg.lut).is_file():
        raise LatoptError(f"LUT {cfg.lut} does not exist; create it with `latopt profile` or leave lut unset "
                          "(uniform c_l)", param="lut")
    return load_lut(cfg.lut, model=model_name, resolution=cfg.data.resolution, fold_mode=cfg.fold.mode)


def check_base(cfg: RunConfig, base_checkpoint: str | Path, task: Task) -> tuple[nn.Module, Arch, CheckpointMeta]:
    """The base checkpoint ``base_checkpoint`` (model, arch, meta) when it is fit to fold with ``cfg`` on ``task``:
    the config's model, unfolded (no σ_α, no fold), trained on the config's data (another resolution or training
    subset is fine: the test split is the same), as many classes as ``task``; a one-line LatoptError otherwise."""
    if not Path(base_checkpoint).is_file():
        raise LatoptError(f"base checkpoint {base_checkpoint} does not exist; train one with `latopt train`")
    model, arch, meta = load_checkpoint(base_checkpoint, expect_model=cfg.model.name)
    if arch.alpha is not None or arch.fold is not None:
        raise LatoptError(f"checkpoint {base_checkpoint} is already pre-folded/folded; give the base checkpoint")
    # another resolution or another subset of the training split is fine (the test split is the same)
    want = {k: v for k, v in data_meta(cfg).items() if k not in ("resolution", "train_samples")}
    got = {k: getattr(meta, k) for k in want if k in meta.model_fields_set}
    if any(v != want[k] for k, v in got.items()):
        raise LatoptError(f"base checkpoint {base_checkpoint} was trained with data {got} but the config says "
                          f"{want}; fold with the base model's data settings (the test split must be the same)")
    if arch.num_classes != task.num_classes:
        raise LatoptError(f"base checkpoint {base_checkpoint} has {arch.num_classes} classes but task {task.name!r} "
                          f"has {task.num_classes}; give a base trained on the config's task", param="base")
    return model, arch, meta


def run_fold(cfg: RunConfig, base_checkpoint: str | Path, out_dir: str | Path, *, progress: bool = True,
             seed: int = 0, task: Task | None = None) -> FoldResult[LayerFoldReport]:
    """Pre-fold → fold → check → post-fold with ``cfg.fold`` and ``cfg.lut``; writes folded.pt, report.json/.txt,
    config.yaml into ``out_dir``; returns the folded network, the report and the paths (:class:`FoldResult`).
    Both training phases use one training loss (:func:`latopt.training.losses.training_loss`: ``fold.distill``'s teacher,
    the base, built once); an unknown ``fold.distill`` is one line before anything runs."""
    check_loss_config(cfg)
    f = cfg.fold
    task = task or load_task(cfg)
    base, arch, _meta = check_base(cfg, base_checkpoint, task)
    lut_obj = _load_lut(cfg, arch.model)
    if lut_obj is not None:
        assert cfg.lut is not None  # what _load_lut loaded
        check_blocks(lut_obj, find_blocks(base), cfg.lut)
    costs = None if lut_obj is None else lut_costs(lut_obj)
    t_start = time.perf_counter()
    accel = resolve(cfg)
    _, val_loader, test_loader = make_loaders(task, cfg.data.batch_size, seed, accel=accel)
    accel.prepare(base).eval()
    acc = {"base": evaluate(base, test_loader, accel)}
    val = {"base": evaluate(base, val_loader, accel)}
    loss = training_loss(cfg, base, accel=accel)
    pre = prefold(cfg, base, task, costs=costs, lut=lut_obj, progress=progress, seed=seed, accel=accel, loss=loss)
    t_pre = time.perf_counter() - t_start
    acc["prefold"], val["prefold"] = evaluate(pre.model, test_loader, accel), evaluate(pre.model, val_loader, accel)
    folded, info = fold_and_finetune(cfg, pre.model, task, tau=f.tau, mode=f.mode, progress=progress,
                                     loss=loss, seed=seed, accel=accel)
    for m in (folded, base):  # costs, checkpoints and the reload check on the CPU
        # torch's stubs of Module.to lack memory_format, which it takes (as Tensor.to does)
        m.to("cpu", memory_format=torch.contiguous_format).eval()  # type: ignore[call-overload]
    acc |= info.acc
    val |= info.val
    foldable = [b.index for b in find_blocks(base) if b.foldable]
    trainable = [v for i, vs in info.alphas.items() if i not in pre.frozen for v in vs]
    cost_base, cost_folded = model_cost(base, cfg.data.resolution), model_cost(folded, cfg.data.resolution)
    latency = LutLatency(asis=None, folded=None)
    if lut_obj is not None:
        latency = LutLatency(asis=predict(lut_obj, {}), folded=predict(lut_obj, info.plan))
    report = LayerFoldReport.model_validate({
        "model": arch.model, "task": task.name, "resolution": cfg.data.resolution,
        "seed": seed, "base_checkpoint": str(base_checkpoint),
        "params_fold": FoldParams(lambda_c=f.lambda_c, tau=f.tau, p=f.p, granularity=f.granularity, distill=f.distill,
                                  mode=f.mode, unfolded_alpha=f.unfolded_alpha, lut=cfg.lut),
        "costs": None if costs is None else {str(k): v for k, v in costs.items()},
        "frozen": pre.frozen,
        "alphas": {str(k): v for k, v in info.alphas.items()},
        "alpha_mid_fraction": (sum(0.1 < v < 0.9 for v in trainable) / len(trainable)) if trainable else 0.0,
        "folded": {str(k): v for k, v in info.plan.items()},
        "n_foldable": len(foldable), "n_folded": len(info.plan),
        "n_folded_full": sum(v == "full" for v in info.plan.values()),
        "snapped_alphas": info.snapped,
        "acc": acc, "val": val, "val_acc_finetuned": val["finetuned"], "test_samples": task.sizes()["test"],
        "flops": {"base": cost_base.flops, "folded": cost_folded.flops},
        "params": {"base": cost_base.params, "folded": cost_folded.params},
        "latency_pred_ms": latency, "fold_check": info.fold_check, "agreement": info.agreement,
        "history": {"prefold": pre.history, "postfold": info.postfold_history},
        "seconds": {"prefold": t_pre, **info.seconds, "total": time.perf_counter() - t_start},
    }, strict=False)
    return write_fold_outputs(out_dir, cfg, report, folded, info, arch, test_loader, seed, format_report, accel)


def write_fold_outputs(out_dir: str | Path, cfg: RunConfig, report: R, folded: nn.Module, info: FoldOutcome,
                       arch: Arch, test_loader: Any, seed: int, text: Callable[[R], str],
                       accel: Accel | None = None) -> FoldResult[R]:
    """Write a fold's directory atomically (on the main process of ``accel``'s job only; ``folded`` and
    ``info.source`` on the CPU), as ``latopt export`` reads it: ``folded.pt`` (plan, accuracies),
    ``prefold.pt`` (``info.source``: the network the fold is recomputed from and checked against),
    ``report.json``, ``report.txt`` (``text(report)``) and ``config.yaml``; the saved checkpoint is
    reloaded and must reproduce ``folded`` (the file's integrity). Returns ``folded``, ``report`` (with the
    checkpoint paths and, where written, ``reload_max_abs``) and the paths (:class:`FoldResult`)."""
    out_dir = Path(out_dir)
    plain_activations_(folded)  # σ_α at α = 0 is σ: save (and later export) the plain activation
    res = cfg.data.resolution
    folded_arch = make_arch(folded, arch.model, arch.num_classes,   # the DP's merged spans: export ships them
                            fold=FoldHow(cfg.fold.mode, [res, res], report.spans))
    source = info.source
    report = report.model_copy(update={"checkpoint": str(out_dir / FOLDED_CHECKPOINT),
                                       "prefold_checkpoint": str(out_dir / PREFOLD_CHECKPOINT)})
    paths = {"folded": out_dir / FOLDED_CHECKPOINT, "prefold": out_dir / PREFOLD_CHECKPOINT,
             "report": out_dir / "report.json", "text": out_dir / "report.txt", "config": out_dir / "config.yaml"}
    if accel is not None and not accel.is_main:  # under torchrun every process holds the same result: rank 0 writes
        return FoldResult(folded, report, paths)
    plan = {str(k): v for k, v in report.folded.items()}
    with atomic_dir(out_dir) as tmp:
        # the σ_α network the fold was computed from: lets `latopt export` re-check the fold exactly
        source_arch = make_arch(source, arch.model, arch.num_classes)
        source_meta = CheckpointMeta(**data_meta(cfg), seed=seed, plan=plan)
        save_checkpoint(tmp / PREFOLD_CHECKPOINT, source, source_arch, source_meta)
        # the pre-fold is bound by content: export re-checks against the file whose digest this is, wherever
        # the directory was copied to (a path would point at another fold's prefold.pt after cp -r and a re-fold)
        save_checkpoint(tmp / FOLDED_CHECKPOINT, folded, folded_arch,
                        CheckpointMeta(**data_meta(cfg), seed=seed, acc=report.acc, val=report.val, plan=plan,
                                       prefold_checkpoint=str((out_dir / PREFOLD_CHECKPOINT).resolve()),
                                       prefold_sha256=content_digest(source, source_arch, source_meta),
                                       finetuned=info.finetuned))
        reloaded, _, _ = load_checkpoint(tmp / FOLDED_CHECKPOINT)
        x, _ = next(iter(test_loader))
        folded.eval()
        reloaded.eval()
        with torch.no_grad():
            ref = folded(x)
            diff = float((reloaded(x) - ref).abs().max())
        if diff > 1e-6 * max(1.0, float(ref.abs().max())):
            raise VerificationError(f"the saved folded checkpoint does not reproduce the model (max abs {diff:.3g})")
        report = report.model_copy(update={"reload_max_abs": diff})
        write_json_atomic(tmp / "report.json", report.to_json())
        write_text_atomic(tmp / "report.txt", text(report))
        write_config(cfg, tmp / "config.yaml")
    return FoldResult(folded, report, paths)


