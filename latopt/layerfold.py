"""The Layer Folding stage: pre-fold (σ_α + compression loss), fold at τ, check, post-fold, report.

What ``latopt fold`` runs and every ``latopt search`` trial runs. Public API::

    run_fold(cfg, base_checkpoint, out_dir, *, lut=None, lambda_c, tau, p, granularity="block",
             distill=False, progress=True, mode=None, seed=0, task=None) -> report dict
        the whole stage; writes folded.pt, prefold.pt, report.json, report.txt and config.yaml
    check_base(cfg, base_checkpoint) -> (model, arch, meta)   a base checkpoint fit to fold with ``cfg``
    prefold(cfg, base_model, task, *, costs, lambda_c, p, granularity, distill, progress=True, lut=None,
            seed=0) -> nn.Module                           σ_α installed and trained
    plan_from_alphas(alphas, tau) -> {block index: variant}
    fold_and_finetune(cfg, prefolded, task, *, tau, mode, progress=True, teacher=None, seed=0, accel=None)
        -> (folded nn.Module, info dict)
    fold_plan_and_finetune(cfg, source, plan, task, *, mode, progress=True, teacher=None, seed=0, accel=None)
        -> (folded nn.Module, info dict)      any plan {block: variant}: fold, check against the variant
                                              network, fine-tune (also the DP's apply step, latopt.dp)
    write_fold_outputs(out_dir, cfg, report, folded, info, arch, test_loader, seed, text, accel=None) -> report
                                              folded.pt / prefold.pt / report.* / config.yaml, as export reads them
    CompressionLoss(alphas, *, p, variant_times)             L_c over the α parameters (a callable)
    block_variant_times(blocks, *, costs=None, lut=None, granularity="block") -> {block: {variant: t}}
    format_summary(report) -> str;  format_report(report) -> str
    report_tail(report, rows, *, check_prefix="") -> [str]   accuracy rows, fold check, FLOPs, params
    undertrained_warning(base_acc, folded_acc, test_samples) -> str | None   a fold that beats its base

**Compression loss.** q = α^p. For a block l with fold variants v ∈ {none, full[, expand_dw, dw_project]}
of times t_l(v), the α's of the block give a distribution P_l(v): one shared α → P(full) = q,
P(none) = 1 − q; one α per activation (a1 after the expansion, a2 after the depthwise) →
P(full) = q1·q2, P(expand_dw) = q1(1 − q2), P(dw_project) = (1 − q1)q2, P(none) = (1 − q1)(1 − q2).
L_c = Σ_l (E_l − b_l) / Σ_l (t_l(none) − b_l) with E_l = Σ_v P_l(v)·t_l(v) and b_l = min_v t_l(v).
For a shared α with t_l(full) ≤ t_l(none) this is exactly the paper's Σ_l c_l(1 − q_l) / Σ_l c_l with
c_l = t_l(none) − t_l(full). Times come from the LUT (``costs()`` for blocks, ``variant_times()`` per
activation); without a LUT, t(none) = 1, t(full) = 0 and each partial variant 0.5 — then L_c is the
mean of (1 − q) over activations. A block none of whose variants is faster than as-is (c_l = 0) has its
α frozen at 0: folding it would not pay on that device. Note: where the partial variants are *slower*
than as-is (measured for MobileNetV2-0.5 at 32 px on the CPU), α1 = α2 = 0 is a local minimum of the
expected latency (raising either α alone moves probability to a slower variant), so the per-activation
mode folds nothing there; the shared α of the block mode is the one to use on such a device.

**Optimisation.** The weights use cfg.train's optimizer and LR schedule at ``fold.lr`` (post-fold:
``fold.post_lr``), built by :mod:`latopt.engine` (timm's factories); the α's have their own Adam at
``fold.alpha_lr`` (constant, no weight decay) — near α = 0 the gradient of L_c vanishes for
p > 1 (by design), so a scale-free optimizer is what lets the task gradient move α at all — and every
α is clipped to [0, 1] after each step. ``distill`` adds w·T²·KL(base ‖ student) at temperature T.

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
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from latopt.accel import Accel, resolve
from latopt.artifacts import atomic_dir, write_json_atomic, write_text_atomic
from latopt.blocks import find_blocks
from latopt.checkpoint import content_digest, load_checkpoint, make_arch, save_checkpoint
from latopt.config import RunConfig, validate_fold_params, write_config
from latopt.constants import GRANULARITIES
from latopt.data import Task, data_meta, load_task, make_loaders
from latopt.engine import BestWeights, evaluate, fit, make_optimizer, make_scheduler, seed_everything
from latopt.errors import LatoptError, VerificationError
from latopt.fold import (
    alpha_parameters,
    clamp_alphas_,
    fold_blocks,
    get_alphas,
    install_alpha,
    linearize,
    plain_activations_,
    verify_fold,
)
from latopt.latency.lut import check_blocks, load_lut, predict, variant_times
from latopt.latency.lut import costs as lut_costs
from latopt.layers import AlphaActivation
from latopt.models import model_cost

REPORT_SCHEMA = "latopt.fold_report/1"
PREFOLD_CHECKPOINT = "prefold.pt"
FOLDED_CHECKPOINT = "folded.pt"
UNIFORM_TIMES = {"none": 1.0, "full": 0.0, "expand_dw": 0.5, "dw_project": 0.5}


class CompressionLoss:
    """L_c over the α's of ``alphas`` ({block index: [α params]}), normalised to [0, 1] (see module doc)."""

    def __init__(self, alphas: Mapping[int, list[nn.Parameter]], *, p: float,
                 variant_times: Mapping[int, Mapping[str, float]]) -> None:
        self.p = float(p)
        self.terms: list[tuple[list[nn.Parameter], dict[str, float], float]] = []
        self.frozen: list[int] = []
        denom = 0.0
        for i, params in sorted(alphas.items()):
            t = dict(variant_times[i])
            if len(params) == 1:
                t = {"none": t["none"], "full": t["full"]}
            elif len(params) != 2 or not {"expand_dw", "dw_project"} <= t.keys():
                raise LatoptError(f"block {i}: per-activation α needs the times of the partial fold variants; "
                                  "profile them (latopt profile --variants full,expand_dw,dw_project) or use --granularity block")
            best = min(t.values())
            if t["none"] - best <= 0:
                self.frozen.append(i)
                for a in params:
                    a.requires_grad_(False)
                    with torch.no_grad():
                        a.zero_()
                continue
            self.terms.append((list(params), t, best))
            denom += t["none"] - best
        self.denom = denom

    def __call__(self) -> torch.Tensor:
        if not self.terms:
            return torch.zeros(())
        total = torch.zeros((), device=self.terms[0][0][0].device)  # where the α's are (the training device)
        for params, t, best in self.terms:
            q = [a.clamp(0.0, 1.0) ** self.p for a in params]
            if len(q) == 1:
                probs = {"full": q[0], "none": 1 - q[0]}
            else:
                q1, q2 = q
                probs = {"full": q1 * q2, "expand_dw": q1 * (1 - q2), "dw_project": (1 - q1) * q2,
                         "none": (1 - q1) * (1 - q2)}
            total = total + sum(probs[v] * (t[v] - best) for v in probs)
        return total / self.denom


def block_variant_times(blocks: list[int], *, costs: Mapping[int, float] | None = None,
                        lut: Any = None, granularity: str = "block") -> dict[int, dict[str, float]]:
    """Per-block variant times for :class:`CompressionLoss` (uniform without ``costs``/``lut``)."""
    out: dict[int, dict[str, float]] = {}
    if granularity == "activation" and lut is not None:
        for i in blocks:
            out[i] = dict(variant_times(lut, i))
        return out
    for i in blocks:
        if costs is None:
            out[i] = dict(UNIFORM_TIMES)
        else:
            out[i] = {"none": float(costs.get(i, 0.0)), "full": 0.0}
    return out


def _distill_loss(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    t = temperature
    return F.kl_div(F.log_softmax(student / t, 1), F.log_softmax(teacher / t, 1), log_target=True,
                    reduction="batchmean") * t * t


def _task_loss(cfg: RunConfig, teacher: nn.Module | None):
    ls, w, temp = cfg.train.label_smoothing, cfg.fold.distill_weight, cfg.fold.temperature

    def loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = model(x)
        ce = F.cross_entropy(logits, y, label_smoothing=ls)
        if teacher is None:
            return ce, logits
        with torch.no_grad():
            t_logits = teacher(x)
        return (1 - w) * ce + w * _distill_loss(logits, t_logits, temp), logits

    return loss


def prefold(cfg: RunConfig, base_model: nn.Module, task: Task, *, costs: Mapping[int, float] | None,
            lambda_c: float, p: float, granularity: str, distill: bool, progress: bool = True,
            lut: Any = None, seed: int = 0, accel: Accel | None = None) -> nn.Module:
    """σ_α in every foldable block (α = 0), then train with L_task + λ_c·L_c; returns the new model.

    ``costs`` = {block: c_l} (block granularity; None = uniform); ``lut`` gives the variant times for
    ``granularity="activation"``. ``base_model`` is not modified (it is the distillation teacher). The
    model, its α's and the teacher are trained on ``accel`` (default: resolved from ``cfg.train``)."""
    validate_fold_params(lambda_c, cfg.fold.tau, p)
    if granularity not in GRANULARITIES:
        raise LatoptError(f"granularity must be one of {', '.join(GRANULARITIES)}, not {granularity!r}")
    accel = accel or resolve(cfg)
    model = accel.prepare(copy.deepcopy(base_model))
    alphas = install_alpha(model, "all", granularity)  # created on the model's device
    if not alphas:
        raise LatoptError("the model has no foldable block; nothing to pre-fold")
    times = block_variant_times(sorted(alphas), costs=costs, lut=lut, granularity=granularity)
    comp = CompressionLoss(alphas, p=p, variant_times=times)
    teacher = None
    if distill:
        teacher = accel.prepare(copy.deepcopy(base_model)).eval()
        for q in teacher.parameters():
            q.requires_grad_(False)
    trainable_alphas = [a for a in alpha_parameters(model) if a.requires_grad]
    f = cfg.fold
    seed_everything(seed + accel.rank)  # each process its own random stream; the sampler's order is shared
    train_loader, val_loader, _ = make_loaders(task, cfg.data.batch_size, seed, accel=accel)
    optimizer = make_optimizer(model, cfg.train, f.lr, exclude=alpha_parameters(model))
    scheduler = make_scheduler(optimizer, cfg.train, f.epochs, len(train_loader))
    extra = (torch.optim.Adam(trainable_alphas, lr=f.alpha_lr),) if trainable_alphas else ()
    task_loss = _task_loss(cfg, teacher)

    def step_loss(m: nn.Module, x: torch.Tensor, y: torch.Tensor):
        lt, logits = task_loss(m, x, y)
        lc = comp()
        return lt + lambda_c * lc, logits, {"L_c": lc.detach()}

    history = fit(model, train_loader, f.epochs, optimizer, scheduler, step_loss, val_loader=val_loader,
                  progress=progress, desc="pre-fold", after_step=lambda: clamp_alphas_(model),
                  extra_optimizers=extra, accel=accel, clip_grad=cfg.train.clip_grad, watch=("loss",))
    model.latopt_prefold = {"history": history, "frozen": comp.frozen,  # type: ignore[attr-defined]
                            "variant_times": {str(i): t for i, t in times.items()}}
    return model


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
        removed = () if v is None else (b.acts if v == "full" else
                                        (b.acts[0],) if v == "expand_dw" else (b.acts[1],))
        for path in b.acts:
            m = model.get_submodule(path)
            if path not in removed and isinstance(m, AlphaActivation) and float(m.alpha) != 0.0:
                if m.granularity == "block" and v is not None:
                    continue  # a shared α of a folded block also drives the removed activation
                m.alpha.zero_()
                changed += 1
    return changed


def fold_and_finetune(cfg: RunConfig, prefolded: nn.Module, task: Task, *, tau: float, mode: str,
                      progress: bool = True, teacher: nn.Module | None = None,
                      seed: int = 0, accel: Accel | None = None) -> tuple[nn.Module, dict[str, Any]]:
    """Fold every activation with α ≥ τ, check the fold, fine-tune; returns (folded model, info)
    (:func:`fold_plan_and_finetune` on a CPU copy of ``prefolded`` with its unfolded α's snapped)."""
    alphas = get_alphas(prefolded)
    plan = plan_from_alphas(alphas, tau)
    snapped = _cpu_copy(prefolded)
    n_snapped = _snap_unfolded_(snapped, plan) if cfg.fold.unfolded_alpha == "zero" else 0
    folded, info = fold_plan_and_finetune(cfg, snapped, plan, task, mode=mode, progress=progress, teacher=teacher,
                                          seed=seed, accel=accel)
    return folded, {"alphas": alphas, "snapped": n_snapped, **info}


def fold_plan_and_finetune(cfg: RunConfig, source: nn.Module, plan: Mapping[int, str], task: Task, *, mode: str,
                           progress: bool = True, teacher: nn.Module | None = None,
                           seed: int = 0, accel: Accel | None = None) -> tuple[nn.Module, dict[str, Any]]:
    """Fold ``plan`` ({block: variant}, any variant) of ``source``, check the fold against the variant
    network ``linearize(source, plan)`` (exact mode: VerificationError above ``fold.max_fold_error``), then
    fine-tune the folded network (``fold.post_epochs`` at ``fold.post_lr``; σ_α frozen). Returns (folded,
    info: plan, fold_check, acc / val of the variant network ("linearized"), the fold before and after
    fine-tuning, postfold_history, seconds, source, finetuned).

    The fold and its check run on a CPU copy of ``source`` (float64 algebra, float32 check), whatever device
    it trained on; evaluation and fine-tuning run on ``accel`` (default: resolved from ``cfg.train``), where
    the folded model is returned. ``info["source"]`` stays on the CPU."""
    accel = accel or resolve(cfg)
    source = _cpu_copy(source)
    res = cfg.data.resolution
    plan = dict(plan)
    t0 = time.perf_counter()
    reference = linearize(source, plan)
    folded = fold_blocks(source, plan, mode=mode, input_size=(res, res))
    check = verify_fold(reference, folded, (res, res), seed=seed)
    check = {k: v for k, v in check.items() if k != "per_block"} | {
        "per_block": {str(k): v for k, v in check["per_block"].items()}, "mode": mode,
        "limit": cfg.fold.max_fold_error if mode == "exact" else None}
    check["passed"] = mode != "exact" or check["max_rel"] <= cfg.fold.max_fold_error
    if not check["passed"]:
        raise VerificationError(f"folded network differs from the linearised σ_α network: max abs "
                                f"{check['max_abs']:.3g}, max rel {check['max_rel']:.3g} > {cfg.fold.max_fold_error}")
    fold_seconds = time.perf_counter() - t0
    accel.prepare(reference)
    accel.prepare(folded)
    train_loader, val_loader, test_loader = make_loaders(task, cfg.data.batch_size, seed, accel=accel)
    acc = {"linearized": evaluate(reference, test_loader, accel), "folded": evaluate(folded, test_loader, accel)}
    val = {"folded": evaluate(folded, val_loader, accel)}
    for a in alpha_parameters(folded):  # unfolded activations stay as they are (see module doc)
        a.requires_grad_(False)
    f = cfg.fold
    t1 = time.perf_counter()
    history: list[dict[str, float]] = []
    if f.post_epochs > 0 and f.post_lr > 0:
        seed_everything(seed + 1 + accel.rank)  # each process its own random stream
        optimizer = make_optimizer(folded, cfg.train, f.post_lr)  # the α's are frozen
        scheduler = make_scheduler(optimizer, cfg.train, f.post_epochs, len(train_loader))
        task_loss = _task_loss(cfg, teacher)

        def step_loss(m: nn.Module, x: torch.Tensor, y: torch.Tensor):
            loss, logits = task_loss(m, x, y)
            return loss, logits, {}

        history = fit(folded, train_loader, f.post_epochs, optimizer, scheduler, step_loss,
                      val_loader=val_loader, progress=progress, desc="post-fold", accel=accel,
                      clip_grad=cfg.train.clip_grad, best=BestWeights() if cfg.train.keep_best else None)
    acc["finetuned"] = evaluate(folded, test_loader, accel)
    val["finetuned"] = evaluate(folded, val_loader, accel)
    info = {"plan": plan, "fold_check": check, "acc": acc, "val": val,
            "postfold_history": history, "seconds": {"fold": fold_seconds, "postfold": time.perf_counter() - t1},
            "source": source, "finetuned": bool(history)}
    return folded, info


def _cpu_copy(model: nn.Module) -> nn.Module:
    """A float32 copy of ``model`` on the CPU in the default memory format (for the fold and its checks)."""
    return copy.deepcopy(model).to("cpu", memory_format=torch.contiguous_format)


def _load_lut(lut: Any, model_name: str, resolution: int, fold_mode: str | None = None) -> Any:
    if lut is None or not isinstance(lut, (str, Path)):
        return lut
    if not Path(lut).is_file():
        raise LatoptError(f"LUT {lut} does not exist; create it with `latopt profile` or omit --lut")
    return load_lut(lut, model=model_name, resolution=resolution, fold_mode=fold_mode)


def check_base(cfg: RunConfig, base_checkpoint: str | Path) -> tuple[nn.Module, dict, dict]:
    if not Path(base_checkpoint).is_file():
        raise LatoptError(f"base checkpoint {base_checkpoint} does not exist; train one with `latopt train`")
    model, arch, meta = load_checkpoint(base_checkpoint, expect_model=cfg.model.name)
    if arch.get("alpha") or arch.get("fold"):
        raise LatoptError(f"checkpoint {base_checkpoint} is already pre-folded/folded; give the base checkpoint")
    want = {k: v for k, v in data_meta(cfg).items() if k != "resolution"}  # another resolution is fine
    got = {k: meta[k] for k in want if k in meta}
    if any(v != want[k] for k, v in got.items()):
        raise LatoptError(f"base checkpoint {base_checkpoint} was trained with data {got} but the config says "
                          f"{want}; fold with the base model's data settings (the test split must be the same)")
    return model, arch, meta


def run_fold(cfg: RunConfig, base_checkpoint: str | Path, out_dir: str | Path, *, lut: Any = None,
             lambda_c: float, tau: float, p: float, granularity: str = "block", distill: bool = False,
             progress: bool = True, mode: str | None = None, seed: int = 0, task: Task | None = None
             ) -> dict[str, Any]:
    """Pre-fold → fold → check → post-fold; writes folded.pt, report.json/.txt, config.yaml; returns the report."""
    validate_fold_params(lambda_c, tau, p)
    mode = mode or cfg.fold.mode
    cfg = cfg.with_overrides({"fold.lambda_c": lambda_c, "fold.tau": tau, "fold.p": p, "fold.mode": mode,
                              "fold.granularity": granularity, "fold.distill": distill,
                              "lut": str(lut) if isinstance(lut, (str, Path)) else None})
    base, arch, _meta = check_base(cfg, base_checkpoint)
    task = task or load_task(cfg)
    if int(arch["num_classes"]) != task.num_classes:
        raise LatoptError(f"base checkpoint has {arch['num_classes']} classes, task {task.name!r} has {task.num_classes}")
    lut_obj = _load_lut(lut, arch["model"], cfg.data.resolution, cfg.fold.mode)
    costs = None
    if lut_obj is not None:
        check_blocks(lut_obj, find_blocks(base), lut if isinstance(lut, (str, Path)) else "the LUT")
        costs = lut_costs(lut_obj)
    t_start = time.perf_counter()
    accel = resolve(cfg)
    _, val_loader, test_loader = make_loaders(task, cfg.data.batch_size, seed, accel=accel)
    accel.prepare(base).eval()
    acc = {"base": evaluate(base, test_loader, accel)}
    val = {"base": evaluate(base, val_loader, accel)}
    pre = prefold(cfg, base, task, costs=costs, lambda_c=lambda_c, p=p, granularity=granularity,
                  distill=distill, progress=progress, lut=lut_obj, seed=seed, accel=accel)
    t_pre = time.perf_counter() - t_start
    acc["prefold"], val["prefold"] = evaluate(pre, test_loader, accel), evaluate(pre, val_loader, accel)
    teacher = copy.deepcopy(base).eval() if distill else None
    folded, info = fold_and_finetune(cfg, pre, task, tau=tau, mode=mode, progress=progress,
                                     teacher=teacher, seed=seed, accel=accel)
    for m in (folded, base):  # costs, checkpoints and the reload check on the CPU
        m.to("cpu", memory_format=torch.contiguous_format).eval()
    acc |= info["acc"]
    val |= info["val"]
    foldable = [b.index for b in find_blocks(base) if b.foldable]
    trainable = [v for i, vs in info["alphas"].items() if i not in pre.latopt_prefold["frozen"] for v in vs]
    cost_base, cost_folded = model_cost(base, cfg.data.resolution), model_cost(folded, cfg.data.resolution)
    latency = {"asis": None, "folded": None}
    if lut_obj is not None:
        latency = {"asis": predict(lut_obj, {}), "folded": predict(lut_obj, info["plan"])}
    report: dict[str, Any] = {
        "schema": REPORT_SCHEMA, "model": arch["model"], "task": task.name, "resolution": cfg.data.resolution,
        "seed": seed, "base_checkpoint": str(base_checkpoint),
        "params_fold": {"lambda_c": lambda_c, "tau": tau, "p": p, "granularity": granularity, "distill": distill,
                        "mode": mode, "unfolded_alpha": cfg.fold.unfolded_alpha,
                        "lut": str(lut) if isinstance(lut, (str, Path)) else None},
        "costs": None if costs is None else {str(k): v for k, v in costs.items()},
        "frozen": pre.latopt_prefold["frozen"],
        "alphas": {str(k): v for k, v in info["alphas"].items()},
        "alpha_mid_fraction": (sum(0.1 < v < 0.9 for v in trainable) / len(trainable)) if trainable else 0.0,
        "folded": {str(k): v for k, v in info["plan"].items()},
        "n_foldable": len(foldable), "n_folded": len(info["plan"]),
        "n_folded_full": sum(v == "full" for v in info["plan"].values()),
        "snapped_alphas": info["snapped"],
        "acc": acc, "val": val, "val_acc_finetuned": val["finetuned"], "test_samples": len(task.test),
        "flops": {"base": cost_base["flops"], "folded": cost_folded["flops"]},
        "params": {"base": cost_base["params"], "folded": cost_folded["params"]},
        "latency_pred_ms": latency, "fold_check": info["fold_check"],
        "history": {"prefold": pre.latopt_prefold["history"], "postfold": info["postfold_history"]},
        "seconds": {"prefold": t_pre, **info["seconds"], "total": time.perf_counter() - t_start},
    }
    return write_fold_outputs(out_dir, cfg, report, folded, info, arch, test_loader, seed, format_report, accel)


def write_fold_outputs(out_dir: str | Path, cfg: RunConfig, report: dict[str, Any], folded: nn.Module,
                       info: Mapping[str, Any], arch: Mapping[str, Any], test_loader: Any, seed: int,
                       text: Callable[[Mapping[str, Any]], str], accel: Accel | None = None) -> dict[str, Any]:
    """Write a fold's directory atomically (on the main process of ``accel``'s job only; ``folded`` and
    ``info["source"]`` on the CPU), as ``latopt export`` reads it: ``folded.pt`` (plan, accuracies),
    ``prefold.pt`` (``info["source"]``: the network the fold is recomputed from and checked against),
    ``report.json``, ``report.txt`` (``text(report)``) and ``config.yaml``; the saved checkpoint is
    reloaded and must reproduce ``folded``. Returns ``report`` (with the checkpoint paths)."""
    out_dir = Path(out_dir)
    plain_activations_(folded)  # σ_α at α = 0 is σ: save (and later export) the plain activation
    folded_arch = make_arch(folded, arch["model"], arch["num_classes"])
    source = info["source"]
    report["checkpoint"] = str(out_dir / FOLDED_CHECKPOINT)
    report["prefold_checkpoint"] = str(out_dir / PREFOLD_CHECKPOINT)
    if accel is not None and not accel.is_main:  # under torchrun every process holds the same result: rank 0 writes
        return report
    with atomic_dir(out_dir) as tmp:
        # the σ_α network the fold was computed from: lets `latopt export` re-check the fold exactly
        source_arch = make_arch(source, arch["model"], arch["num_classes"])
        source_meta = {**data_meta(cfg), "seed": seed, "plan": report["folded"]}
        save_checkpoint(tmp / PREFOLD_CHECKPOINT, source, source_arch, source_meta)
        # the pre-fold is bound by content: export re-checks against the file whose digest this is, wherever
        # the directory was copied to (a path would point at another fold's prefold.pt after cp -r and a re-fold)
        save_checkpoint(tmp / FOLDED_CHECKPOINT, folded, folded_arch,
                        {**data_meta(cfg), "seed": seed, "acc": report["acc"], "val": report["val"],
                         "plan": report["folded"], "prefold_checkpoint": str((out_dir / PREFOLD_CHECKPOINT).resolve()),
                         "prefold_sha256": content_digest(source, source_arch, source_meta),
                         "finetuned": info["finetuned"]})
        reloaded, _, _ = load_checkpoint(tmp / FOLDED_CHECKPOINT)
        x, _ = next(iter(test_loader))
        folded.eval()
        reloaded.eval()
        with torch.no_grad():
            ref = folded(x)
            diff = float((reloaded(x) - ref).abs().max())
        if diff > 1e-6 * max(1.0, float(ref.abs().max())):
            raise VerificationError(f"the saved folded checkpoint does not reproduce the model (max abs {diff:.3g})")
        report["reload_max_abs"] = diff
        write_json_atomic(tmp / "report.json", report)
        write_text_atomic(tmp / "report.txt", text(report))
        write_config(cfg, tmp / "config.yaml")
    return report


def format_summary(r: Mapping[str, Any]) -> str:
    a = r["acc"]
    lat = r["latency_pred_ms"]
    lat_s = f", LUT latency {lat['asis']:.3f} → {lat['folded']:.3f} ms" if lat.get("asis") is not None else ""
    return (f"folded {r['n_folded']}/{r['n_foldable']} blocks; test acc base {a['base']:.4f}, pre-fold "
            f"{a['prefold']:.4f}, folded {a['folded']:.4f}, fine-tuned {a['finetuned']:.4f}; FLOPs "
            f"{r['flops']['base'] / 1e6:.2f} → {r['flops']['folded'] / 1e6:.2f} M{lat_s}; wrote {r['checkpoint']}")


def undertrained_warning(before: float | None, after: float | None, samples: int | None) -> str | None:
    """A line when the folded network's test accuracy exceeds its base's by more than the test set's noise
    (two standard errors of a difference of two accuracies near ``before`` on ``samples`` images, and at least
    two samples): folding removes capacity, so a fold that gains that much means the base was under-trained
    (fine-tuning after the fold repaired it), not that folding helps."""
    if before is None or after is None or not samples:
        return None
    p = min(max(before, 1.0 / samples), 1 - 1.0 / samples)
    margin = max(2.0 / samples, 2 * (2 * p * (1 - p) / samples) ** 0.5)
    if after - before <= margin:
        return None
    return (f"the folded network is {100 * (after - before):.2f} points more accurate than its base (more than "
            f"the test set's noise, {100 * margin:.2f}): the base looks under-trained; train it longer or check "
            "its training curve (metrics.json beside the base checkpoint)")


def report_tail(r: Mapping[str, Any], rows: Iterable[tuple[str, str]], *, check_prefix: str = "") -> list[str]:
    """The lines a fold report and a DP report share: test/val accuracy for ``rows`` ((key, label) of
    ``r["acc"]`` / ``r["val"]``), a warning when the fine-tuned fold beats its base by more than the test
    set's noise (:func:`undertrained_warning`), the fold check, FLOPs and params."""
    rows = list(rows)
    a, v, fc = r["acc"], r["val"], r["fold_check"]
    w = max(22, *(len(name) for _, name in rows))
    lines = [f"{'accuracy':<{w}} {'test':>8} {'val':>8}"]
    lines += [f"{name:<{w}} {a[key]:>8.4f} " + (f"{v[key]:>8.4f}" if key in v else f"{'-':>8}") for key, name in rows]
    warning = undertrained_warning(a.get("base"), a.get("finetuned"), r.get("test_samples"))
    if warning:
        lines.append(f"warning: {warning}")
    return [*lines,
            f"{check_prefix}fold check ({fc['mode']}): max abs {fc['max_abs']:.3g}, max rel {fc['max_rel']:.3g}"
            + (f" (limit {fc['limit']})" if fc["limit"] else " (border differs by design)"),
            f"FLOPs  {r['flops']['base']:,} → {r['flops']['folded']:,}",
            f"params {r['params']['base']:,} → {r['params']['folded']:,}"]


def format_report(r: Mapping[str, Any]) -> str:
    pf = r["params_fold"]
    lines = [f"latopt fold report: {r['model']} on {r['task']} @ {r['resolution']}px, seed {r['seed']}",
             f"lambda_c {pf['lambda_c']}  tau {pf['tau']}  p {pf['p']}  granularity {pf['granularity']}  "
             f"mode {pf['mode']}  distill {pf['distill']}  unfolded alpha {pf['unfolded_alpha']}  lut {pf['lut']}",
             "", f"{'block':>5}  {'c_l':>8}  {'alpha':<16} folded" + ("   (no LUT: uniform c_l = 1)" if not r["costs"] else "")]
    costs = r["costs"] or {}
    for k, vals in r["alphas"].items():
        c = costs.get(k)
        c_s = "1" if not costs else f"{c:.4f}" if c is not None else "-"
        frozen = " (frozen)" if int(k) in r["frozen"] else ""
        lines.append(f"{k:>5}  {c_s:>8}  {' '.join(f'{v:.3f}' for v in vals):<16} "
                     f"{r['folded'].get(k, '-')}{frozen}")
    lines += ["", f"folded {r['n_folded']}/{r['n_foldable']} foldable blocks ({r['n_folded_full']} full); "
              f"alpha in (0.1, 0.9): {100 * r['alpha_mid_fraction']:.1f} %"]
    lines += report_tail(r, (("base", "base"), ("prefold", "pre-fold (sigma_alpha)"), ("folded", "folded, before FT"),
                             ("finetuned", "folded, fine-tuned")),
                         check_prefix=f"linearised reference test acc {r['acc']['linearized']:.4f}; ")
    lat = r["latency_pred_ms"]
    if lat.get("asis") is not None:
        lines.append(f"LUT-predicted latency {lat['asis']:.4f} ms → {lat['folded']:.4f} ms "
                     f"({lat['asis'] / lat['folded']:.3f}x)")
    else:
        lines.append("LUT-predicted latency: no LUT given")
    lines.append(f"checkpoint {r['checkpoint']}")
    return "\n".join(lines) + "\n"
