#!/usr/bin/env python
"""The method table: latopt against what a user would pick instead, on one task and one device.

One model (the shipped ``digits_clutter`` config: torchvision MobileNetV2 width 0.5 at 32 px on the
digits-clutter task), several seeds, device ``cpu`` (ONNX Runtime, one thread). Per seed a base model is
trained (``latopt.train.train_base``); every method then starts from that base checkpoint and gets **the same
fine-tuning budget**: ``fold.epochs + fold.post_epochs`` epochs of training (10 with the shipped config), at
``fold.lr`` with the config's optimizer and schedule:

- ``asis``: the base trained for that many more epochs (``train_base`` from the base checkpoint);
- ``lf-uniform@λ``: Layer Folding with c_l = 1 for every block (the paper): ``run_fold(lut=None)``,
  ``fold.epochs`` of pre-fold + ``fold.post_epochs`` of post-fold;
- ``lf-lut@λ``: the same with c_l from the device's LUT (latopt): ``run_fold(lut=...)``;
- ``dp@b``: section 2's block variants chosen by the dynamic program under a latency budget b (``cell_dp``);
- ``prune>TARGET``: channel pruning with torch-pruning (DepGraph, magnitude importance, the same ratio in
  every layer group, channel counts rounded to ``--round-to``), the ratio iterated until the pruned network's
  *measured* latency matches the TARGET cell's exported network (interleaved against it) within
  ``--match-tol``; then the same fine-tuning budget (``latopt.engine.fit``).

Every network is exported as ``latopt export`` ships it (``latopt.export.export``: ONNX, numeric gates,
test accuracy of the ONNX file; pruned networks: ONNX + the ONNX-vs-PyTorch gate) and quantised to INT8
with ONNX Runtime (static, QDQ, per-channel, U8 activations / S8 weights, calibrated on training images).
Then all networks are measured end to end in ONE interleaved run at the training resolution (fp32 and INT8
together), and the same structures with random weights in one run at 224 px (``--resolutions``).

Resumable: a cell (seed, method) that finished has ``cells/<cell>.json`` and is skipped by a rerun; several
processes (``--workers N``) share the queue through lock files (``locks/``; a lock whose process is gone is
taken over). The measurement runs are ``measure-r<res>.json`` (``--remeasure`` redoes them). ``report``
writes the table (methods with no finished cell as "not run"), the dominance verdict of our points over
paper Layer Folding and pruning (:data:`DOMINANCE_RULE`), the schedule, and the Pareto plot.

    python tools/bench_methods.py run --runs-dir DIR [--seeds 0 1 2] [--lambdas 0.3 1 3] [--workers 2]
    python tools/bench_methods.py measure --runs-dir DIR
    python tools/bench_methods.py report --runs-dir DIR --doc docs/method-table.md
    python tools/bench_methods.py all --runs-dir DIR --smoke        # tiny end-to-end check (minutes)
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tools/compare.py

CONFIG = "digits_clutter"
SMOKE = {"train.epochs": 1, "fold.epochs": 1, "fold.post_epochs": 1, "data.max_samples": 96}
INT8_CALIB = 256           # training images for the INT8 calibration
PRUNE_GRID = [round(0.05 * k, 2) for k in range(1, 19)]   # 0.05 .. 0.90
# the latency matching of pruning: many rounds (two networks of one structure measured up to ~6 % apart in one
# run at 32 px, 0.4 ms a call); --smoke checks the pipeline only
MATCH_POLICY = {"min_repeats": 150, "max_repeats": 600, "budget_s": 60}
MATCH_POLICY_SMOKE = {"min_repeats": 5, "max_repeats": 10, "budget_s": 2}
PRUNE_GRID_SMOKE = [0.1, 0.3, 0.5]
DP_VARIANTS = ("full", "pw", "drop")


# ------------------------------------------------------------------ small helpers
def log(msg: str) -> None:
    print(f"[bench_methods {time.strftime('%H:%M:%S')} pid {os.getpid()}] {msg}", flush=True)


def load_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def write_json(path: Path, obj: Any) -> None:
    from latopt.artifacts import write_json_atomic

    write_json_atomic(path, obj)


def cfg_for(args: argparse.Namespace):
    """The run config of every cell: the shipped config, with --smoke's and --set's overrides."""
    import yaml

    from latopt.config import load_config

    overrides: dict[str, Any] = dict(SMOKE) if args.smoke else {}
    for kv in args.set:
        k, _, v = kv.partition("=")
        overrides[k] = yaml.safe_load(v)
    return load_config(args.config, overrides)


def ft_epochs(cfg) -> int:
    """The fine-tuning budget of every method: Layer Folding's pre-fold + post-fold epochs."""
    return int(cfg.fold.epochs) + int(cfg.fold.post_epochs)


# ------------------------------------------------------------------ the cells
DP_ABLATIONS = {  # the DP with one part taken away (docs/evaluation.md, Q2), at --ablation-budget
    "dp-full": {"variants": ("full",)},                 # its larger choice set: only Layer Folding's variant
    "dp-nopw": {"variants": ("full", "drop")},
    "dp-nodrop": {"variants": ("full", "pw")},
    "dp-uniform": {"importance": "uniform"},             # its validation-based importance: none
}


def cell_names(args: argparse.Namespace) -> list[tuple[str, int, list[str]]]:
    """(cell, seed, dependencies) in the order they should run: the cells the table's verdict rests on first."""
    out: list[tuple[str, int, list[str]]] = []
    lam = [f"{x:g}" for x in args.lambdas]
    main_lam = lam[len(lam) // 2]
    for s in args.seeds:
        out.append((f"s{s}-base", s, []))
    for s in args.seeds:
        base = [f"s{s}-base"]
        first = [f"s{s}-asis", f"s{s}-lf-lut@{main_lam}", f"s{s}-lf-uniform@{main_lam}"]
        out += [(c, s, base) for c in first if c.split("-", 1)[1] in args.methods_expanded]
    for s in args.seeds:
        base = [f"s{s}-base"]
        for m in ("lf-lut", "lf-uniform"):
            for x in lam:
                c = f"s{s}-{m}@{x}"
                if m in args.methods and x != main_lam:
                    out.append((c, s, base))
        if "dp" in args.methods:
            for b in args.budgets:
                out.append((f"s{s}-dp@{b:g}", s, base))
    for s in args.seeds:
        for t in args.prune_targets:
            c = f"s{s}-prune>{t}"
            if "prune" in args.methods:
                out.append((c, s, [f"s{s}-base", f"s{s}-{t}"]))
    for s in args.seeds:
        if "ablations" in args.methods:
            for a in DP_ABLATIONS:
                out.append((f"s{s}-{a}@{args.ablation_budget:g}", s, [f"s{s}-base"]))
            out.append((f"s{s}-lf-direct@{main_lam}", s, [f"s{s}-base", f"s{s}-lf-lut@{main_lam}"]))
    seen: set[str] = set()
    uniq = []
    for c in out:
        if c[0] not in seen:
            seen.add(c[0])
            uniq.append(c)
    return uniq


def method_of(cell: str) -> str:
    """'s0-lf-lut@1' -> 'lf-lut@1' (the method key, without the seed)."""
    return cell.split("-", 1)[1]


class Ctx:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.root = Path(args.runs_dir)
        self.cfg = cfg_for(args)
        self.lut_path = Path(args.lut) if args.lut else self.root / "lut" / f"cpu-r{self.cfg.data.resolution}.json"

    @property
    def task(self) -> Any:
        """The task, built once per process (the clutter canvases are generated): the same test split for all."""
        if getattr(self, "_task", None) is None:
            from latopt.data import load_task

            self._task = load_task(self.cfg)
        return self._task

    def cell_file(self, cell: str) -> Path:
        return self.root / "cells" / f"{cell}.json"

    def cell_dir(self, cell: str) -> Path:
        seed, method = cell.split("-", 1)
        return self.root / f"seed{seed[1:]}" / method.replace(">", "_to_").replace("@", "_")

    def done(self, cell: str) -> dict[str, Any] | None:
        f = self.cell_file(cell)
        return load_json(f) if f.is_file() else None


def ensure_lut(ctx: Ctx) -> Path:
    """The device LUT of the model at the training resolution (made once, shared by every seed)."""
    if ctx.lut_path.is_file():
        return ctx.lut_path
    from latopt.latency.devices import load_device
    from latopt.latency.lut import save_lut
    from latopt.latency.profiler import profile_model

    log(f"profiling {ctx.cfg.model.name} @{ctx.cfg.data.resolution} on cpu → {ctx.lut_path}")
    lut = profile_model(ctx.cfg.model.name, load_device("cpu"), ctx.cfg.data.resolution, 1, progress=False,
                        num_classes=10)
    save_lut(lut, ctx.lut_path)
    return ctx.lut_path


def onnx_correct(path: str | Path, task: Any) -> np.ndarray:
    """Per test sample, whether the ONNX file (ONNX Runtime, CPU) predicts its label."""
    from latopt.export import runner_correct
    from latopt.runtime import OrtRunner

    with OrtRunner(str(path)) as r:
        return runner_correct(r, task, batch=256)


def correctness(task: Any, path: str | Path, recorded: float | None = None) -> dict[str, Any]:
    """The ONNX file's per-sample results packed for results/ (docs/evaluation.md: the paired bootstrap needs
    them); checked against the accuracy export recorded for the same file."""
    from compare import pack_bits

    hits = onnx_correct(path, task)
    if recorded is not None and abs(float(hits.mean()) - recorded) > 1e-9:
        raise RuntimeError(f"{path}: {hits.mean()} correct now, export recorded {recorded}")
    return {"onnx_acc": float(hits.mean()), "onnx_correct": pack_bits(hits), "test_samples": int(hits.size)}


def export_cell(ckpt: Path, out: Path, task: Any) -> dict[str, Any]:
    """``latopt export`` of a checkpoint (gates + ONNX accuracy); no timing here (the measure stage times)."""
    from latopt.export import export

    r = export(ckpt, "cpu", out, measure=False, progress=False)
    onnx = out / "model.onnx"
    return {"onnx": str(onnx),
            "gates": [{"name": g["name"], "passed": g["passed"], "rel": g.get("max_rel")} for g in r["gates"]],
            "bias_maps": r.get("bias_maps"), "plan": r["folded"],
            **correctness(task, onnx, r["accuracy"]["test_acc"])}


PLATEAU_EPOCHS, PLATEAU_PT = 5, 1.0   # docs/evaluation.md §3: validation over the last 5 epochs within 1 point


def plateau(history: list[dict[str, Any]]) -> dict[str, Any]:
    """Did the base reach a validation plateau: its validation accuracy over the last :data:`PLATEAU_EPOCHS`
    epochs spans less than :data:`PLATEAU_PT` points?"""
    val = [h["val_acc"] for h in history if "val_acc" in h]
    last = val[-PLATEAU_EPOCHS:]
    span = 100 * (max(last) - min(last)) if last else float("nan")
    return {"last_val": last, "span_pt": span, "plateau": len(last) == PLATEAU_EPOCHS and span < PLATEAU_PT}


def cell_base(ctx: Ctx, seed: int, out: Path) -> dict[str, Any]:
    from latopt.train import train_base

    if (out / "base.pt").is_file() and (out / "metrics.json").is_file():
        m = load_json(out / "metrics.json")   # trained before (e.g. by `latopt train` with this --out)
        if m.get("seed") != seed or m.get("epochs") != ctx.cfg.train.epochs:
            raise RuntimeError(f"{out} holds another base (seed {m.get('seed')}, epochs {m.get('epochs')})")
    else:
        m = train_base(ctx.cfg, out, seed=seed, progress=True)
    hist = m.get("history", [])
    return {"test_acc": m["test_acc"], "val_acc": m["val_acc"], "train_seconds": m["train_seconds"],
            "epochs": m["epochs"], "checkpoint": str(out / "base.pt"), "extra_epochs": 0,
            "test_samples": m["sizes"]["test"], "sizes": m["sizes"],
            "curve": [{k: h[k] for k in ("epoch", "loss", "val_acc") if k in h} for h in hist],
            "plateau": plateau(hist)}


def cell_asis(ctx: Ctx, seed: int, out: Path) -> dict[str, Any]:
    from latopt.train import train_base

    base = ctx.cell_dir(f"s{seed}-base") / "base.pt"
    e = ft_epochs(ctx.cfg)
    cfg = ctx.cfg.with_overrides({"train.epochs": e, "train.lr": ctx.cfg.fold.lr})
    m = train_base(cfg, out / "train", checkpoint=base, seed=seed, progress=True)
    r = {"test_acc": m["test_acc"], "val_acc": m["val_acc"], "train_seconds": m["train_seconds"],
         "extra_epochs": e, "structure": {"kind": "asis"}}
    r |= export_cell(out / "train" / "base.pt", out / "export", ctx.task)
    return r


def cell_lf(ctx: Ctx, seed: int, out: Path, costs: str, lam: float) -> dict[str, Any]:
    from latopt.layerfold import run_fold

    base = ctx.cell_dir(f"s{seed}-base") / "base.pt"
    lut = ensure_lut(ctx) if costs == "lut" else None
    f = ctx.cfg.fold
    rep = run_fold(ctx.cfg, base, out / "fold", lut=lut, lambda_c=lam, tau=f.tau, p=f.p, granularity="block",
                   seed=seed, progress=True, task=ctx.task)
    r = {"test_acc": rep["acc"]["finetuned"], "val_acc": rep["val"]["finetuned"],
         "acc_before_ft": rep["acc"]["folded"], "train_seconds": rep["seconds"]["total"],
         "extra_epochs": ft_epochs(ctx.cfg), "n_folded": rep["n_folded"], "n_foldable": rep["n_foldable"],
         "alphas": rep["alphas"], "lut": None if lut is None else Path(lut).name,
         "lut_pred_ms": rep["latency_pred_ms"],
         "structure": {"kind": "fold", "plan": rep["folded"]}}
    r |= export_cell(out / "fold" / "folded.pt", out / "export", ctx.task)
    return r


def ensure_variant_lut(ctx: Ctx) -> Path:
    """The device LUT with the DP's variants (full, pw, drop) at the training resolution (made once)."""
    path = ctx.root / "lut" / f"cpu-variants-r{ctx.cfg.data.resolution}.json"
    if path.is_file():
        return path
    from latopt.latency.devices import load_device
    from latopt.latency.lut import save_lut
    from latopt.latency.profiler import profile_model

    log(f"profiling {ctx.cfg.model.name} @{ctx.cfg.data.resolution} on cpu with variants {DP_VARIANTS} → {path}")
    lut = profile_model(ctx.cfg.model.name, load_device("cpu"), ctx.cfg.data.resolution, 1, variants=DP_VARIANTS,
                        progress=False, num_classes=10)
    save_lut(lut, path)
    return path


def plan_losses(plan: dict[str, str], blocks: list[int]) -> dict[int, dict[str, float]]:
    """DP losses under which the least-loss plan is exactly ``plan`` (its blocks ``full``, the rest as they
    are): how :func:`cell_lf_direct` hands Layer Folding's fold set to the DP's fine-tuning path."""
    want = {int(k) for k, v in plan.items() if v == "full"}
    if len(want) != len(plan):
        raise ValueError(f"plan {plan} is not a set of full folds")
    return {b: ({"none": 1.0, "full": 0.0} if b in want else {"none": 0.0, "full": 1.0}) for b in blocks}


def cell_dp(ctx: Ctx, seed: int, out: Path, budget: float, *, variants: tuple[str, ...] = DP_VARIANTS,
            importance: str = "proxy", losses: dict[int, dict[str, float]] | None = None) -> dict[str, Any]:
    """Block variants chosen by the DP under a latency budget (fraction of the LUT-predicted as-is latency),
    then fine-tuned directly (no σ_α pre-fold) for the same budget as every method: ``fold.post_epochs`` is
    set to fold.epochs + fold.post_epochs, at ``fold.lr`` like every other method (``fold.post_lr`` is set
    to it). ``variants`` / ``importance`` / ``losses``: the ablations' changes (:data:`DP_ABLATIONS`,
    :func:`cell_lf_direct`)."""
    from latopt.dp import run_dp

    base = ctx.cell_dir(f"s{seed}-base") / "base.pt"
    e = ft_epochs(ctx.cfg)
    cfg = ctx.cfg.with_overrides({"fold.post_epochs": e, "fold.post_lr": ctx.cfg.fold.lr})
    rep = run_dp(cfg, base, out / "fold", lut=ensure_variant_lut(ctx), budget=budget, importance=importance,
                 variants=variants, losses=losses, seed=seed, progress=True, task=ctx.task)
    r = {"test_acc": rep["acc"]["finetuned"], "val_acc": rep["val"]["finetuned"],
         "acc_before_ft": rep["acc"].get("folded"), "train_seconds": rep["seconds"]["total"], "extra_epochs": e,
         "n_folded": rep["n_folded"], "selection": rep["selection"], "lut_pred_ms": rep["latency_pred_ms"],
         "importance": rep["importance"], "variants": list(variants),
         "structure": {"kind": "fold", "plan": rep["folded"]}}
    r |= export_cell(out / "fold" / "folded.pt", out / "export", ctx.task)
    return r


def cell_lf_direct(ctx: Ctx, seed: int, out: Path, lam: str) -> dict[str, Any]:
    """Layer Folding's fold set (the LUT-c_l cell at λ of the same seed) folded from the base and fine-tuned
    directly like the DP: the same structure as that cell, without its σ_α pre-fold (docs/evaluation.md, Q2)."""
    from latopt.latency.lut import load_lut

    plan = ctx.done(f"s{seed}-lf-lut@{lam}")["structure"]["plan"]
    blocks = [b.index for b in load_lut(ensure_variant_lut(ctx)).blocks]
    r = cell_dp(ctx, seed, out, 1.0, variants=("full",), losses=plan_losses(plan, blocks))
    if r["structure"]["plan"] != plan:
        raise RuntimeError(f"the DP applied {r['structure']['plan']}, not Layer Folding's set {plan}")
    return r | {"source": f"lf-lut@{lam}"}


# -- channel pruning (torch-pruning) -------------------------------------------------------------
PRUNE_STEPS = 3          # iterative pruning: this many steps, each followed by an equal share of the fine-tuning
PRUNE_MAX_LAYER = 0.9    # no layer group loses more than this fraction of its channels (no collapsed layers)


def make_pruner(model: Any, ratio: float, resolution: int, round_to: int | None, steps: int) -> Any:
    """torch-pruning's global pruning of ``model`` (in place): DepGraph groups, group L2 magnitude importance
    (``GroupMagnitudeImportance(p=2)``, mean-normalised per group so groups compare across layers), channels
    ranked across the whole network, ``ratio`` of them removed over ``steps`` steps (linear schedule), channel
    counts rounded to ``round_to``, the classifier's outputs kept."""
    import torch
    import torch_pruning as tp

    ignored = [mod for mod in model.modules() if isinstance(mod, torch.nn.Linear)]
    return tp.pruner.BasePruner(model, torch.randn(1, 3, resolution, resolution),
                                importance=tp.importance.GroupMagnitudeImportance(p=2), pruning_ratio=ratio,
                                ignored_layers=ignored, round_to=round_to, global_pruning=True,
                                iterative_steps=steps, max_pruning_ratio=PRUNE_MAX_LAYER)


def prune_model(model: Any, ratio: float, resolution: int, round_to: int | None) -> Any:
    """A one-shot pruned copy (:func:`make_pruner` in one step): what the ratio search measures."""
    m = copy.deepcopy(model).eval()
    make_pruner(m, ratio, resolution, round_to, 1).step()
    return m


def structure_key(model: Any) -> tuple:
    import torch

    return tuple(tuple(mod.weight.shape) for mod in model.modules() if isinstance(mod, torch.nn.Conv2d))


def ratio_ms(a: Any, b: Any) -> dict[str, float]:
    """Per-round ratio t(a)/t(b) (sample i of every network is from round i): median and quartiles."""
    s = a.per_round_ratio(b)
    return {"median": s.median_ms, "q1": s.q1_ms, "q3": s.q3_ms, "n": s.n}


def match_prune_ratio(base_model: Any, target_onnx: str, res: int, round_to: int | None, tol: float,
                      grid: list[float], say: Callable[[str], None],
                      policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """The smallest pruning ratio whose network measures within ``tol`` of the target (interleaved with it);
    the grid is refined between the two ratios that bracket the target, up to three times. ``policy``:
    overrides of the cpu profile's timing policy (default :data:`MATCH_POLICY`)."""
    from latopt.latency.devices import load_device
    from latopt.latency.profiler import measure_networks

    device = load_device("cpu")
    tried: dict[float, dict[str, float]] = {}
    by_struct: dict[tuple, float] = {}
    rounds = []
    for it in range(4):
        cands: dict[str, Any] = {}
        for r in grid:
            if r in tried:
                continue
            m = prune_model(base_model, r, res, round_to)
            k = structure_key(m)
            if k in by_struct:  # same channel counts as a ratio already measured: same latency
                tried[r] = tried.get(by_struct[k]) or {"same_as": by_struct[k]}
                continue
            by_struct[k] = r
            cands[f"r{r:.3f}"] = m
        if cands:
            # the final interleaved run of the table re-measures the chosen ratio
            pol = device.model_copy(update=policy or MATCH_POLICY)
            stats = measure_networks({"target": target_onnx, **cands}, pol, (1, 3, res, res))
            for name in cands:
                r = float(name[1:])
                tried[r] = ratio_ms(stats[name], stats["target"])
            rounds.append({"iteration": it, "measured": {k: tried[float(k[1:])] for k in cands}})
        # resolve "same_as"
        for r, v in list(tried.items()):
            if "same_as" in v and "median" in tried.get(v["same_as"], {}):
                tried[r] = {**tried[v["same_as"]], "same_as": v["same_as"]}
        ok = sorted(r for r, v in tried.items() if "median" in v and abs(v["median"] - 1) <= tol)
        say(f"prune match iteration {it}: " + ", ".join(f"{r:.3f}:{v['median']:.3f}" for r, v in sorted(tried.items())
                                                          if "median" in v))
        if ok:
            return {"ratio": ok[0], "ratio_to_target": tried[ok[0]], "matched": True, "tried": tried, "rounds": rounds}
        meas = sorted((r, v["median"]) for r, v in tried.items() if "median" in v)
        lo = max((r for r, t in meas if t > 1 + tol), default=None)
        hi = min((r for r, t in meas if t < 1 - tol and (lo is None or r > lo)), default=None)
        if lo is None or hi is None or hi - lo < 0.005:
            break
        grid = [round(lo + (hi - lo) * k / 6, 4) for k in range(1, 6)]
    meas = {r: v for r, v in tried.items() if "median" in v}
    best = min(meas, key=lambda r: (abs(meas[r]["median"] - 1), r))
    return {"ratio": best, "ratio_to_target": meas[best], "matched": False, "tried": tried, "rounds": rounds}


def prune_iteratively(ctx: Ctx, model: Any, ratio: float, seed: int, epochs: int) -> dict[str, Any]:
    """Iterative global pruning (:func:`make_pruner`, :data:`PRUNE_STEPS` steps) with the same fine-tuning
    budget as the other methods: after each step, ``epochs / PRUNE_STEPS`` epochs of cfg.train's optimizer and
    schedule at fold.lr (both restarted at each step: the parameters changed shape), best-validation weights
    kept at the end like every other method."""
    from latopt.data import make_loaders
    from latopt.engine import (
        BestWeights,
        cross_entropy_loss,
        evaluate,
        fit,
        make_optimizer,
        make_scheduler,
        seed_everything,
    )

    cfg, res, task = ctx.cfg, ctx.cfg.data.resolution, ctx.task
    seed_everything(seed)
    train, val, test = make_loaders(task, cfg.data.batch_size, seed)  # one CPU process
    pruner = make_pruner(model, ratio, res, ctx.args.round_to, PRUNE_STEPS)
    share = [epochs // PRUNE_STEPS + (1 if k < epochs % PRUNE_STEPS else 0) for k in range(PRUNE_STEPS)]
    t0 = time.perf_counter()
    hist: list[dict[str, Any]] = []
    for k, e in enumerate(share):
        model.eval()
        pruner.step()
        # the final structure's epochs end on their best-validation weights (fit restores them)
        best = BestWeights() if k == len(share) - 1 else None
        opt = make_optimizer(model, cfg.train, cfg.fold.lr)
        sched = make_scheduler(opt, cfg.train, e, len(train))
        h = fit(model, train, e, opt, sched, cross_entropy_loss(cfg.train.label_smoothing), val_loader=val,
                progress=True, desc=f"prune-ft step {k + 1}/{PRUNE_STEPS}", clip_grad=cfg.train.clip_grad, best=best)
        hist += [{**r, "step": k + 1} for r in h]
    model.eval()
    return {"test_acc": evaluate(model, test), "val_acc": evaluate(model, val),
            "train_seconds": time.perf_counter() - t0, "history": hist, "steps": share}


def cell_prune(ctx: Ctx, seed: int, out: Path, target: str) -> dict[str, Any]:
    import torch

    from latopt.export import gate_inputs, noise_floor, onnx_gate
    from latopt.latency.onnx_io import export_onnx
    from latopt.models import load_checkpoint, model_cost

    a = ctx.args
    res = ctx.cfg.data.resolution
    tgt = ctx.done(f"s{seed}-{target}")
    base, _, _ = load_checkpoint(ctx.cell_dir(f"s{seed}-base") / "base.pt")
    match = match_prune_ratio(base, tgt["onnx"], res, a.round_to, a.match_tol,
                              PRUNE_GRID_SMOKE if a.smoke else PRUNE_GRID, log,
                              MATCH_POLICY_SMOKE if a.smoke else MATCH_POLICY)
    log(f"s{seed} prune>{target}: ratio {match['ratio']} ({'matched' if match['matched'] else 'NOT matched'} "
        f"one-shot, t/t_target {match['ratio_to_target']['median']:.3f}); now pruning iteratively")
    model = copy.deepcopy(base)
    ft = prune_iteratively(ctx, model, match["ratio"], seed, ft_epochs(ctx.cfg))
    out.mkdir(parents=True, exist_ok=True)
    onnx_path = export_onnx(model, (1, 3, res, res), out / "model.onnx", dynamic_batch=True)
    x, inputs = gate_inputs(ctx.task, res, 32, seed)
    gate, _ = onnx_gate(model, onnx_path, x, inputs, noise_floor(model, x))
    if not gate.passed:
        raise RuntimeError(f"ONNX gate failed: {gate.line()}")
    torch.save(model, out / "pruned-module.pt")  # the pruned nn.Module (pickled; a bench artefact only)
    cost = model_cost(model, res)
    return {"test_acc": ft["test_acc"], "val_acc": ft["val_acc"], "train_seconds": ft["train_seconds"],
            "extra_epochs": ft_epochs(ctx.cfg), "target": target, "match": match, "onnx": str(onnx_path),
            "gates": [{"name": gate.name, "passed": gate.passed}], "params": cost["params"], "flops": cost["flops"],
            "prune_steps": ft["steps"], "conv_shapes": [list(k) for k in structure_key(model)],
            "structure": {"kind": "prune", "ratio": match["ratio"], "round_to": a.round_to,
                          "module": str(out / "pruned-module.pt")},
            **correctness(ctx.task, onnx_path)}


def run_cell(ctx: Ctx, cell: str, seed: int) -> dict[str, Any]:
    method = method_of(cell)
    out = ctx.cell_dir(cell)
    if method == "base":
        return cell_base(ctx, seed, out)
    if method == "asis":
        return cell_asis(ctx, seed, out)
    kind, _, arg = method.partition("@")
    if kind == "lf-direct":
        return cell_lf_direct(ctx, seed, out, arg)
    if kind in ("lf-lut", "lf-uniform"):
        return cell_lf(ctx, seed, out, kind[3:], float(arg))
    if kind == "dp":
        return cell_dp(ctx, seed, out, float(arg))
    if kind in DP_ABLATIONS:
        return cell_dp(ctx, seed, out, float(arg), **DP_ABLATIONS[kind])
    if method.startswith("prune>"):
        return cell_prune(ctx, seed, out, method[len("prune>"):])
    raise ValueError(f"unknown cell {cell}")


# ------------------------------------------------------------------ the queue (locks, resumable)
def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def try_lock(path: Path) -> bool:
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                host, pid = path.read_text().split()
                if host == socket.gethostname() and not _alive(int(pid)):
                    path.unlink(missing_ok=True)  # its process is gone: take it over
                    continue
            except (OSError, ValueError):
                pass
            return False
        with os.fdopen(fd, "w") as f:
            f.write(f"{socket.gethostname()} {os.getpid()}")
        return True
    return False


def run_queue(ctx: Ctx) -> int:
    from latopt.engine import set_threads

    set_threads(1)
    cells = cell_names(ctx.args)
    failed: set[str] = set()
    while True:
        pending = [c for c in cells if ctx.done(c[0]) is None and c[0] not in failed]
        if not pending:
            break
        started = False
        known = {c for c, _, _ in cells}
        for cell, seed, deps in pending:
            if any(d in failed or (d not in known and ctx.done(d) is None) for d in deps):
                failed.add(cell)
                log(f"{cell}: skipped, a dependency failed")
                started = True
                break
            if any(ctx.done(d) is None for d in deps):
                continue
            lock = ctx.root / "locks" / f"{cell}.lock"
            if not try_lock(lock):
                continue
            started = True  # done, skipped or failed: scan the queue again at once
            try:
                if ctx.done(cell) is not None:
                    continue
                log(f"{cell}: start (load {' '.join(f'{v:.1f}' for v in os.getloadavg())})")
                t0 = time.perf_counter()
                try:
                    rec = run_cell(ctx, cell, seed)
                except Exception as e:  # noqa: BLE001 - one failed cell must not stop the others
                    log(f"{cell}: FAILED: {type(e).__name__}: {e}\n{traceback.format_exc()}")
                    failed.add(cell)
                    continue
                rec |= {"cell": cell, "seed": seed, "method": method_of(cell), "wall_s": time.perf_counter() - t0,
                        "smoke": bool(ctx.args.smoke), "config": ctx.args.config}
                write_json(ctx.cell_file(cell), rec)
                log(f"{cell}: done in {rec['wall_s']:.0f} s, test acc {rec.get('test_acc')}")
            finally:
                lock.unlink(missing_ok=True)
            break
        if not started:
            time.sleep(20)  # the rest waits for cells other processes are running
    if failed:
        log(f"not done: {sorted(failed)}")
    return 0


# ------------------------------------------------------------------ INT8 (ONNX Runtime static quantisation)
def calibration_images(ctx: Ctx, n: int) -> np.ndarray:
    """``n`` training images (the fixed training canvases, no augmentation), the same for every network."""
    from latopt.data import load_task

    task = load_task(ctx.cfg.with_overrides({"data.augment": False}))
    n = min(n, len(task.train))
    return np.stack([task.train[i][0].numpy() for i in range(n)]).astype(np.float32)


def quantize_int8(fp32: Path, out: Path, calib: np.ndarray) -> Path:
    """ONNX Runtime static INT8: QDQ, per-channel weights, U8 activations / S8 weights, MinMax calibration."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    if out.is_file():
        return out
    import onnx

    name = onnx.load(str(fp32), load_external_data=False).graph.input[0].name

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter([{name: calib[i:i + 1]} for i in range(len(calib))])

        def get_next(self):
            return next(self.batches, None)

    out.parent.mkdir(parents=True, exist_ok=True)
    pre = out.with_name(out.stem + ".pre.onnx")
    quant_pre_process(str(fp32), str(pre), skip_symbolic_shape=True)
    tmp = out.with_name(out.stem + ".tmp.onnx")
    quantize_static(str(pre), str(tmp), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    os.replace(tmp, out)
    pre.unlink(missing_ok=True)
    return out


# ------------------------------------------------------------------ measuring
def structure_net(ctx: Ctx, st: dict[str, Any], res: int, seed: int = 0) -> Any:
    """The network of a cell's structure with random weights at ``res`` (what export would ship there)."""
    from latopt.fold import defer_bias_maps, fold_blocks, randomize_bn_
    from latopt.models import build_model

    m = build_model(ctx.cfg.model.name, num_classes=10).eval()
    randomize_bn_(m, seed=seed)
    if st["kind"] == "asis":
        return m
    if st["kind"] == "fold":
        plan = {int(k): v for k, v in st["plan"].items()}
        if not plan:
            return m
        f = fold_blocks(m, plan, mode="exact", input_size=(res, res)).eval()
        return defer_bias_maps(f, (res, res))[0].eval()
    if st["kind"] == "prune":  # global pruning: the structure depends on the weights, so the trained module
        import torch

        return torch.load(st["module"], weights_only=False).eval()
    raise ValueError(f"no rebuild for structure {st['kind']!r}")


def measure(ctx: Ctx, res: int) -> dict[str, Any]:
    """All finished cells' networks, fp32 and INT8, in ONE interleaved run at ``res``: at the training
    resolution the trained networks themselves; elsewhere each distinct structure with random weights."""
    from latopt.latency.devices import load_device
    from latopt.latency.onnx_io import export_onnx
    from latopt.latency.profiler import measure_networks

    out_json = ctx.root / f"measure-r{res}.json"
    if out_json.is_file() and not ctx.args.remeasure:
        return load_json(out_json)
    cells = {c: ctx.done(c) for c, _, _ in cell_names(ctx.args)}
    cells = {c: r for c, r in cells.items() if r is not None and "structure" in r}
    calib = calibration_images(ctx, INT8_CALIB)
    train_res = ctx.cfg.data.resolution
    nets: dict[str, str] = {}
    members: dict[str, str] = {}  # cell -> network key (224: structures shared between cells)
    qdir = ctx.root / f"int8-r{res}"
    if res == train_res:
        for c, r in cells.items():
            nets[f"{c}|fp32"] = r["onnx"]
            nets[f"{c}|int8"] = str(quantize_int8(Path(r["onnx"]), qdir / f"{c}.onnx", calib))
            members[c] = c
    else:
        sdir = ctx.root / f"structures-r{res}"
        rng = np.random.default_rng(0)
        rand_calib = rng.standard_normal((16, 3, res, res)).astype(np.float32)
        keys: dict[str, str] = {}
        for c, r in cells.items():
            sk = json.dumps(r["structure"], sort_keys=True)
            if sk not in keys:
                name = f"struct{len(keys)}"
                keys[sk] = name
                p = sdir / f"{name}.onnx"
                if not p.is_file():
                    export_onnx(structure_net(ctx, r["structure"], res), (1, 3, res, res), p, dynamic_batch=True)
                nets[f"{name}|fp32"] = str(p)
                nets[f"{name}|int8"] = str(quantize_int8(p, qdir / f"{name}.onnx", rand_calib))
            members[c] = keys[sk]
    device = load_device("cpu")
    if ctx.args.budget_s:
        device = device.model_copy(update={"budget_s": ctx.args.budget_s, "min_repeats": ctx.args.min_rounds,
                                           "max_repeats": max(device.max_repeats, ctx.args.min_rounds)})
    log(f"measuring {len(nets)} networks at {res} px interleaved (load {os.getloadavg()})")
    t0 = time.perf_counter()
    stats = measure_networks(nets, device, (1, 3, res, res))
    rec = {"resolution": res, "seconds": time.perf_counter() - t0, "loadavg_after": os.getloadavg(),
           "rounds": next(iter(stats.values())).n, "members": members,
           "stats": {k: {"median_ms": s.median_ms, "q1_ms": s.q1_ms, "q3_ms": s.q3_ms, "samples_ms": s.samples_ms}
                     for k, s in stats.items()},
           "random_weights": res != train_res}
    if res == train_res:
        from compare import pack_bits

        hits = {c: onnx_correct(nets[f"{c}|int8"], ctx.task) for c in cells}
        rec["int8_acc"] = {c: float(h.mean()) for c, h in hits.items()}
        rec["int8_correct"] = {c: pack_bits(h) for c, h in hits.items()}
    write_json(out_json, rec)
    log(f"measured in {rec['seconds']:.0f} s, {rec['rounds']} rounds → {out_json}")
    return rec


# ------------------------------------------------------------------ the report
def _per_round(stats: dict[str, Any], a: str, b: str) -> list[float]:
    return [x / y for x, y in zip(stats[a]["samples_ms"], stats[b]["samples_ms"], strict=True)]


def _q(v: list[float]) -> tuple[float, float, float]:
    q = np.quantile(np.asarray(v), [0.25, 0.5, 0.75])
    return float(q[1]), float(q[0]), float(q[2])


def summarise(ctx: Ctx) -> dict[str, Any]:
    """Per method: accuracy over seeds (fp32, ONNX, INT8) and speed-ups pooled over the seeds' per-round ratios."""
    cells = {c: ctx.done(c) for c, _, _ in cell_names(ctx.args)}
    meas = {res: load_json(ctx.root / f"measure-r{res}.json") for res in ctx.args.resolutions
            if (ctx.root / f"measure-r{res}.json").is_file()}
    methods: dict[str, dict[str, Any]] = {}
    for c, r in cells.items():
        if r is None:
            continue
        m = methods.setdefault(method_of(c), {"cells": {}})
        m["cells"][int(r["seed"])] = (c, r)
    rows = {}
    for meth, m in methods.items():
        recs = [r for _, (_, r) in sorted(m["cells"].items())]
        row: dict[str, Any] = {"method": meth, "seeds": sorted(m["cells"]), "n": len(recs),
                               "extra_epochs": recs[0].get("extra_epochs", 0)}
        accs = [r["test_acc"] for r in recs]
        row["acc"] = (float(np.mean(accs)), float(np.std(accs, ddof=1)) if len(accs) > 1 else 0.0)
        row["acc_seeds"] = accs
        row["acc_by_seed"] = {s: r["test_acc"] for s, (_, r) in sorted(m["cells"].items())}
        if all("onnx_acc" in r for r in recs):
            row["onnx_acc"] = float(np.mean([r["onnx_acc"] for r in recs]))
        if meth.startswith(("lf-", "dp@")):
            row["folded"] = [r["n_folded"] for r in recs]
        if meth.startswith("prune>"):
            row["ratio"] = [r["match"]["ratio"] for r in recs]
            row["matched"] = [r["match"]["matched"] for r in recs]
            row["match_t"] = [r["match"]["ratio_to_target"]["median"] for r in recs]
        for res, ms in meas.items():
            cells_here = [(s, c) for s, (c, _) in sorted(m["cells"].items()) if c in ms["members"]]
            if not cells_here:
                continue
            key = {}
            for prec in ("fp32", "int8"):
                vs_asis, vs_asis8 = [], []
                med = []
                for s, c in cells_here:
                    asis_c = f"s{s}-asis"
                    if asis_c not in ms["members"]:
                        continue
                    k, ka = ms["members"][c], ms["members"][asis_c]
                    vs_asis += _per_round(ms["stats"], f"{ka}|fp32", f"{k}|{prec}")
                    vs_asis8 += _per_round(ms["stats"], f"{ka}|int8", f"{k}|{prec}")
                    med.append(ms["stats"][f"{k}|{prec}"]["median_ms"])
                if vs_asis:
                    key[prec] = {"speedup_vs_fp32_asis": _q(vs_asis), "speedup_vs_int8_asis": _q(vs_asis8),
                                 "median_ms": float(np.median(med))}
            if "int8_acc" in ms:
                a8 = [ms["int8_acc"][c] for _, c in cells_here if c in ms["int8_acc"]]
                if a8:
                    key["int8_acc"] = (float(np.mean(a8)), float(np.std(a8, ddof=1)) if len(a8) > 1 else 0.0)
                    key["int8_acc_by_seed"] = {s: ms["int8_acc"][c] for s, c in cells_here if c in ms["int8_acc"]}
            row[f"r{res}"] = key
        rows[meth] = row
    not_run = {}
    for c, _, _ in cell_names(ctx.args):
        meth = method_of(c)
        if meth not in rows and meth not in not_run:
            not_run[meth] = "no cell finished (failed, skipped or not reached: see the run's log)"
    return {"rows": rows, "not_run": not_run,
            "measure": {res: {k: v for k, v in ms.items() if k not in ("stats",)} for res, ms in meas.items()}}


OURS, RIVALS = ("lf-lut", "dp"), ("lf-uniform", "prune")
DOMINANCE_RULE = (
    "One of our points (LUT-c_l Layer Folding, DP) dominates a rival point (paper Layer Folding, pruning) when it "
    "measures at least as fast (median speed-up vs fp32 as-is ≥ the rival's × (1 − {tol:g} %), the latency "
    "match's tolerance) and its accuracy is within noise or better: the mean over seeds of the paired difference "
    "(same base model per seed) ≥ −2 standard errors (with one seed: ≥ 0). Per precision; the most accurate "
    "dominating point is named, else the nearest one (at least as fast, best paired difference).")


def _point(row: dict[str, Any], res: int, prec: str) -> tuple[float, dict[int, float]] | None:
    """(median speed-up vs fp32 as-is at ``res``, test accuracy per seed) of a row in one precision."""
    m = row.get(f"r{res}", {})
    sp = m.get(prec, {}).get("speedup_vs_fp32_asis")
    accs = row["acc_by_seed"] if prec == "fp32" else m.get("int8_acc_by_seed")
    if sp is None or not accs:
        return None
    return sp[0], {int(k): v for k, v in accs.items()}


def dominance(summ: dict[str, Any], res: int, tol: float, ours: tuple[str, ...] = OURS) -> list[dict[str, Any]]:
    """Per rival point and precision at ``res``: is it dominated by one of ours (:data:`DOMINANCE_RULE`)?"""
    rows = summ["rows"]
    kind = lambda m: m.split("@")[0].split(">")[0]  # noqa: E731
    out = []
    for prec in ("fp32", "int8"):
        for b in sorted((m for m in rows if kind(m) in RIVALS), key=_order):
            pb = _point(rows[b], res, prec)
            if pb is None:
                continue
            cands = []
            for a in (m for m in rows if kind(m) in ours):
                pa = _point(rows[a], res, prec)
                if pa is None:
                    continue
                common = sorted(set(pa[1]) & set(pb[1]))
                if not common:
                    continue
                d = np.array([pa[1][s] - pb[1][s] for s in common])
                se = float(np.std(d, ddof=1) / np.sqrt(len(d))) if len(d) > 1 else 0.0
                faster = pa[0] >= pb[0] * (1 - tol)
                ok = bool(faster and d.mean() >= -2 * se)
                cands.append({"ours": a, "speedup": pa[0], "faster": faster, "dominates": ok,
                              "diff_mean": float(d.mean()), "diff_sd": float(np.std(d, ddof=1)) if len(d) > 1 else 0.0,
                              "diff_se": se, "seeds": common})
            win = [c for c in cands if c["dominates"]]
            near = [c for c in cands if c["faster"]]
            best = max(win or near or cands, key=lambda c: c["diff_mean"], default=None)
            out.append({"precision": prec, "rival": b, "rival_speedup": pb[0], "dominated": bool(win), "by": best})
    return out


def render_verdict(summ: dict[str, Any], res: int, tol: float, ours: tuple[str, ...] = OURS) -> str:
    dom = dominance(summ, res, tol, ours)
    if not dom:
        return "No rival point measured: no verdict."
    head = (f"| precision | rival | its speed-up @{res} | dominated? | by / nearest of ours | its speed-up | "
            "paired Δacc (ours − rival, pt), mean ± sd [seeds] |")
    lines = [head, "|" + "---|" * 7]
    for v in dom:
        c = v["by"]
        lines.append("| " + " | ".join([
            v["precision"].upper(), v["rival"], f"{v['rival_speedup']:.2f}×", "**yes**" if v["dominated"] else "**no**",
            c["ours"] if c else "–", f"{c['speedup']:.2f}×" if c else "–",
            "–" if not c else f"{100 * c['diff_mean']:+.2f} ± {100 * c['diff_sd']:.2f} [{len(c['seeds'])}]"
            if len(c["seeds"]) > 1 else f"{100 * c['diff_mean']:+.2f} (1 seed)"]) + " |")
    verdict = []
    for prec in ("fp32", "int8"):
        vs = [v for v in dom if v["precision"] == prec]
        for kind, name in (("lf-uniform", "paper Layer Folding (uniform c_l)"), ("prune", "channel pruning")):
            k = [v for v in vs if v["rival"].startswith(kind)]
            if k:
                n_dom = sum(v["dominated"] for v in k)
                verdict.append(f"- {prec.upper()}: {name}: {n_dom} of {len(k)} points dominated by ours"
                               + (" — **ours dominates**." if n_dom == len(k) else " — **ours does not dominate**."))
    return "\n".join(lines) + "\n\n" + "\n".join(verdict)


def _order(meth: str) -> tuple:
    kinds = ["base", "asis", "lf-uniform", "lf-lut", "dp", "prune"]
    k = meth.split("@")[0].split(">")[0]
    tail = meth.split("@")[-1] if "@" in meth else meth.split(">")[-1]
    try:
        num = float(tail)
    except ValueError:
        num = 0.0
    return (kinds.index(k) if k in kinds else 99, num, meth)


def _fmt_acc(v: tuple[float, float], n: int) -> str:
    """Accuracy in %: mean ± sd over seeds; one seed has no sd."""
    return f"{100 * v[0]:.2f} ± {100 * v[1]:.2f}" if n > 1 else f"{100 * v[0]:.2f} (1 seed)"


def _fmt_sp(v: tuple[float, float, float] | None) -> str:
    return "–" if v is None else f"{v[0]:.2f}× [{v[1]:.2f}, {v[2]:.2f}]"


def render_table(ctx: Ctx, summ: dict[str, Any]) -> str:
    rows = summ["rows"]
    tr = ctx.cfg.data.resolution
    hi = [r for r in ctx.args.resolutions if r != tr]
    head = ["method", "extra epochs", "seeds", "folded / pruned", "test acc fp32 (%)", f"speed-up fp32 @{tr}",
            "test acc INT8 (%)", f"INT8 speed-up @{tr} vs fp32 as-is", f"INT8 vs INT8 as-is @{tr}"]
    for r in hi:
        head += [f"speed-up fp32 @{r}", f"INT8 vs INT8 as-is @{r}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for meth in sorted(rows, key=_order):
        row = rows[meth]
        acc = _fmt_acc(row["acc"], row["n"])
        what = ""
        if "folded" in row:
            what = "blocks " + ", ".join(map(str, row["folded"]))
        if "ratio" in row:
            what = "ratio " + ", ".join(f"{x:.2f}" for x in row["ratio"]) + " (t/t_target " + ", ".join(
                f"{x:.2f}" for x in row["match_t"]) + ")"
        m = row.get(f"r{tr}", {})
        a8 = m.get("int8_acc")
        cells = [meth, str(row["extra_epochs"]), str(row["n"]), what, acc,
                 _fmt_sp(m.get("fp32", {}).get("speedup_vs_fp32_asis")),
                 "–" if a8 is None else _fmt_acc(a8, len(m.get("int8_acc_by_seed", {}))),
                 _fmt_sp(m.get("int8", {}).get("speedup_vs_fp32_asis")),
                 _fmt_sp(m.get("int8", {}).get("speedup_vs_int8_asis"))]
        for r in hi:
            mr = row.get(f"r{r}", {})
            cells += [_fmt_sp(mr.get("fp32", {}).get("speedup_vs_fp32_asis")),
                      _fmt_sp(mr.get("int8", {}).get("speedup_vs_int8_asis"))]
        lines.append("| " + " | ".join(cells) + " |")
    for meth, why in sorted(summ.get("not_run", {}).items(), key=lambda kv: _order(kv[0])):
        lines.append("| " + " | ".join([meth, "–", "0", why] + ["–"] * (len(head) - 4)) + " |")
    return "\n".join(lines)


def pareto_figure(ctx: Ctx, summ: dict[str, Any], path: Path) -> Path:
    """Accuracy (mean ± sd over seeds) against measured speed-up vs fp32 as-is; fp32 and INT8 panels."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    tr = ctx.cfg.data.resolution
    fig = Figure(figsize=(11, 4.6))
    FigureCanvasAgg(fig)
    styles = {"asis": ("k", "s"), "lf-uniform": ("tab:blue", "o"), "lf-lut": ("tab:red", "D"),
              "dp": ("tab:green", "^"), "prune": ("tab:purple", "v"), "base": ("grey", "x")}
    for j, prec in enumerate(("fp32", "int8")):
        ax = fig.add_subplot(1, 2, j + 1)
        groups: dict[str, list[tuple[float, float, float, float, float, str]]] = {}
        for meth, row in summ["rows"].items():
            m = row.get(f"r{tr}", {})
            sp = m.get(prec, {}).get("speedup_vs_fp32_asis")
            acc = row["acc"] if prec == "fp32" else m.get("int8_acc")
            if sp is None or acc is None:
                continue
            kind = meth.split("@")[0].split(">")[0]
            groups.setdefault(kind, []).append((sp[0], sp[1], sp[2], 100 * acc[0], 100 * acc[1], meth))
        for kind, pts in groups.items():
            pts.sort()
            c, mk = styles.get(kind, ("grey", "o"))
            xs = [p[0] for p in pts]
            ax.errorbar(xs, [p[3] for p in pts], yerr=[p[4] for p in pts],
                        xerr=[[p[0] - p[1] for p in pts], [p[2] - p[0] for p in pts]], color=c, marker=mk,
                        linestyle="-" if len(pts) > 1 else "none", capsize=3, label=kind)
            for p in pts:
                tag = (f"λ{p[5].split('@')[-1]}" if kind.startswith("lf") else
                       f"→{p[5].split('>', 1)[1]}" if ">" in p[5] else p[5].split("@")[-1] if "@" in p[5] else "")
                if tag:
                    ax.annotate(tag, (p[0], p[3]), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel(f"speed-up vs fp32 as-is, measured @{tr} px (median, quartiles)")
        ax.set_ylabel(f"test accuracy {prec} (%), mean ± sd over seeds")
        ax.set_title(f"{prec.upper()}: ONNX Runtime CPU, 1 thread")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{ctx.cfg.model.name} on {ctx.cfg.data.task} @{tr} px: accuracy vs measured latency "
                 "(up and right is better)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def report(ctx: Ctx) -> int:
    summ = summarise(ctx)
    write_json(ctx.root / "summary.json", summ)
    table = render_table(ctx, summ)
    print(table)
    doc = Path(ctx.args.doc)
    png = pareto_figure(ctx, summ, doc.with_suffix(".png"))
    a, cfg = ctx.args, ctx.cfg
    bases = [s for s in a.seeds if ctx.done(f"s{s}-base")]
    sizes = {}
    if bases and (ctx.cell_dir(f"s{bases[0]}-base") / "metrics.json").is_file():
        sizes = load_json(ctx.cell_dir(f"s{bases[0]}-base") / "metrics.json").get("sizes", {})
    meta = [f"Generated by `tools/bench_methods.py report` from the run directory `{ctx.root.name}` "
            f"({time.strftime('%Y-%m-%d %H:%M')}); config `{a.config}`"
            + (f" with overrides {' '.join(f'`{kv}`' for kv in a.set)}" if a.set else "")
            + (" (**smoke**: tiny, not a result)" if a.smoke else "") + ".",
            "",
            f"- Schedule: `{cfg.model.name}` on `{cfg.data.task}` @{cfg.data.resolution} px; base training "
            f"{cfg.train.epochs} epochs (lr {cfg.train.lr:g}, {cfg.train.schedule}); every method then gets "
            f"{ft_epochs(cfg)} epochs of fine-tuning at lr {cfg.fold.lr:g} (Layer Folding: {cfg.fold.epochs} pre-fold "
            f"+ {cfg.fold.post_epochs} post-fold); λ ∈ {{{', '.join(f'{x:g}' for x in a.lambdas)}}}; pruning matched "
            f"to {', '.join(a.prune_targets)} within ±{100 * a.match_tol:g} %. Seeds requested "
            f"{a.seeds}, base models trained for {bases} (the `seeds` column counts the finished cells per method)."]
    if sizes:
        meta.append(f"- Splits: {sizes.get('train')} training / {sizes.get('val')} validation / {sizes.get('test')} "
                    f"test images (one test image = {100 / sizes['test']:.3f} pt of accuracy).")
    for res, mm in summ["measure"].items():
        meta.append(f"- Measured @{res} px: one interleaved run, {mm['rounds']} rounds, {mm['seconds']:.0f} s, "
                    f"load average after {[round(x, 1) for x in mm['loadavg_after']]}"
                    + ("; random weights (structure only)" if mm.get("random_weights") else "") + ".")
    verdict = render_verdict(summ, cfg.data.resolution, a.match_tol)
    if any(m.startswith("dp@") for m in summ["rows"]):  # LUT c_l alone against the paper (the method table's question)
        verdict += ("\n\n#### The same rule with LUT-c_l Layer Folding alone as ours (without the DP)\n\n"
                    + render_verdict(summ, cfg.data.resolution, a.match_tol, ours=("lf-lut",)))
    block = ("\n".join(meta) + "\n\n" + table + "\n\n### Dominance at the training resolution\n\n"
             + DOMINANCE_RULE.format(tol=100 * a.match_tol)
             + "\n\n" + verdict + f"\n\n![Pareto plot]({png.name})\n")
    start, end = "<!-- table -->", "<!-- /table -->"
    text = doc.read_text() if doc.is_file() else f"# Method table\n\n{start}\n{end}\n"
    if start not in text:
        text += f"\n{start}\n{end}\n"
    pre, _, rest = text.partition(start)
    _, _, post = rest.partition(end)
    doc.write_text(pre + start + "\n" + block + end + post)
    log(f"wrote {doc} and {png}")
    return 0


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=("run", "measure", "report", "all"))
    ap.add_argument("--runs-dir", required=True)
    ap.add_argument("--config", default=CONFIG)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    ap.add_argument("--smoke", action="store_true", help=f"tiny budgets ({SMOKE}): checks the pipeline only")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--methods", nargs="+", default=["asis", "lf-uniform", "lf-lut", "dp", "prune", "ablations"])
    ap.add_argument("--lambdas", type=float, nargs="+", default=[1.0, 2.0, 3.0])
    ap.add_argument("--budgets", type=float, nargs="+", default=[0.6, 0.75],
                    help="DP latency budgets (fraction of as-is)")
    ap.add_argument("--ablation-budget", type=float, default=0.6, help="the budget of the DP ablations")
    ap.add_argument("--prune-targets", nargs="+", default=None,
                    help="cells whose measured latency pruning is matched to, one pruning point each "
                         "(default: lf-lut at every λ)")
    ap.add_argument("--round-to", type=int, default=8, help="pruned channel counts are multiples of this")
    ap.add_argument("--match-tol", type=float, default=0.03)
    ap.add_argument("--lut", default=None, help="the device LUT (default: RUNS/lut/cpu-r<res>.json, profiled once)")
    ap.add_argument("--resolutions", type=int, nargs="+", default=None,
                    help="measure at these (default: the training resolution and 224)")
    ap.add_argument("--budget-s", type=float, default=90.0, help="time budget of each measurement run")
    ap.add_argument("--min-rounds", type=int, default=100)
    ap.add_argument("--remeasure", action="store_true")
    ap.add_argument("--workers", type=int, default=1, help="processes sharing the queue (at most 2 on 2 cores)")
    ap.add_argument("--doc", default="docs/method-table.md")
    args = ap.parse_args(argv)
    lam_mid = f"{args.lambdas[len(args.lambdas) // 2]:g}"
    args.prune_targets = args.prune_targets or [f"lf-lut@{x:g}" for x in args.lambdas]
    args.methods_expanded = {"asis"} | {f"{m}@{lam_mid}" for m in args.methods}
    ctx = Ctx(args)
    args.resolutions = args.resolutions or [ctx.cfg.data.resolution, 224]
    ctx.root.mkdir(parents=True, exist_ok=True)
    if args.stage in ("run", "all"):
        if "lf-lut" in args.methods:
            ensure_lut(ctx)  # once, before any worker starts (workers would race to profile it)
        if "dp" in args.methods:
            ensure_variant_lut(ctx)
        procs = []
        if args.workers > 1:
            argv_w = [a for a in (argv or sys.argv[1:])]
            i = argv_w.index(args.stage)
            argv_w[i] = "run"
            argv_w += ["--workers", "1"]
            for _ in range(args.workers - 1):
                procs.append(subprocess.Popen([sys.executable, __file__, *argv_w]))
                time.sleep(5)
        run_queue(ctx)
        for p in procs:
            p.wait()
    if args.stage in ("measure", "all"):
        for res in args.resolutions:
            measure(ctx, res)
    if args.stage in ("report", "all"):
        report(ctx)
    return 0


if __name__ == "__main__":
    sys.exit(main())
