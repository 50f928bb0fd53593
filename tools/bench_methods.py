#!/usr/bin/env python
"""The method table: latopt against what a user would pick instead, on one task and one device, under the
protocol of docs/evaluation.md (§6 fixes this run's settings).

One model (the shipped ``digits_clutter`` config: torchvision MobileNetV2 width 0.5 at 32 px on the
digits-clutter task), seeds 0-4, device ``cpu`` (ONNX Runtime, one thread). Per seed a base model is trained
(``latopt.training.base_training.train_base``); every method then starts from that base checkpoint and gets **the same
fine-tuning budget**: ``fold.epochs + fold.post_epochs`` epochs, at ``fold.lr`` with the config's optimizer and
schedule, ending on its best-validation epoch, with the one training loss of every fine-tune (:mod:`latopt.training.losses`:
``fold.distill``'s distillation from the base; ``asis`` trains as base training does, without one):

- ``asis``: the base trained for that many more epochs;
- ``lf-uniform@λ`` / ``lf-lut@λ``: Layer Folding with c_l = 1 (the paper) / from the device LUT (latopt),
  ``fold.epochs`` of pre-fold + ``fold.post_epochs`` of post-fold (``run_fold``);
- ``dp@b``: block variants (full, pw, drop) chosen by the DP under a latency budget b, importance ``proxy``,
  fine-tuned directly (``cell_dp``);
- the ablations (:data:`DP_ABLATIONS`, at ``--ablation-budget``): ``dp-full``, ``dp-nopw``, ``dp-nodrop``,
  ``dp-uniform``; ``lf-direct@λ``: ``lf-lut@λ``'s fold set of the same seed fine-tuned directly like the DP;
- ``prune>TARGET``: channel pruning with torch-pruning (group L2 magnitude, :func:`make_pruner`): no layer
  group loses more than :data:`PRUNE_MAX_LAYER` of its channels (0.9 before 2026-12-02), the stem and the first
  block are left whole, channel counts are multiples of ``--round-to`` (8). The ratio is found by timing
  one-shot prunings of the base interleaved against the TARGET cell, then the network is pruned iteratively
  (:data:`PRUNE_STEPS` steps, each followed by its share of the fine-tuning) and *re-matched on the iterated
  network* (:func:`rematch`: timed against TARGET, the ratio searched again, up to :data:`PRUNE_REMATCH`
  times). Whether it matched is decided in the final run. Arms (``--prune-arms``, ``--prune-epochs``):
  ``prune`` ranks channels across the network (global), ``prune-local`` removes the same ratio from every
  layer group; ``-e18`` fine-tunes 18 epochs instead of the equal budget (``--prune-epochs 6 18`` runs both).

Every network is exported as ``latopt export`` ships it (gates, the ONNX file's accuracy and its per-image
correctness) and quantised to INT8 as ``latopt export --precision int8`` does. ``measure`` times all networks,
fp32 and INT8, in ONE interleaved run at the training resolution (the final run), and the same structures with
random weights at 224 px. ``publish`` writes the raw results to ``results/method-table`` (no machine paths);
``tools/regenerate.py`` makes docs/method-table.md's tables and README's summary from them (:func:`render_doc`,
:func:`render_summary`: two-way dominance with crossed seed-t intervals and Holm over challengers, tools/compare.py).

Resumable (:mod:`tools.jobqueue`): a finished cell has ``cells/<cell>.json`` and is skipped by a rerun; several
processes (``--workers N``) share the queue through lock files (``locks/``; a lock whose process is gone is taken
over).

    python tools/bench_methods.py run --runs-dir DIR [--set KEY=VALUE ...] [--workers 2]
                                      [--prune-arms global local] [--prune-epochs 6 18]
    python tools/bench_methods.py measure --runs-dir DIR [--resolutions 32] [--min-rounds 1000]
    python tools/bench_methods.py publish --runs-dir DIR --results results/method-table
    python tools/bench_methods.py plot --runs-dir DIR --results results/method-table
    python tools/bench_methods.py all --runs-dir DIR --smoke --results TMP   # tiny end-to-end check
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

if __package__ in (None, ""):   # run as a script: the checkout's root, for tools.compare
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONFIG = "digits_clutter"
SEEDS = (0, 1, 2, 3, 4)   # the protocol's seeds (docs/evaluation.md §6)
SMOKE = {"train.epochs": 1, "fold.epochs": 1, "fold.post_epochs": 1, "data.max_samples": 96}
PRUNE_GRID = [round(0.05 * k, 2) for k in range(1, 19)]   # 0.05 .. 0.90
# the latency matching of pruning: many rounds (two networks of one structure measured up to ~6 % apart in one
# run at 32 px, 0.4 ms a call); --smoke checks the pipeline only
MATCH_POLICY = {"min_repeats": 150, "max_repeats": 600, "budget_s": 60}
MATCH_POLICY_SMOKE = {"min_repeats": 5, "max_repeats": 10, "budget_s": 2}
PRUNE_GRID_SMOKE = [0.1, 0.3, 0.5]
DP_VARIANTS = ("full", "pw", "drop")


# ------------------------------------------------------------------ small helpers
def refuse(message: str, prog: str = "bench_methods") -> NoReturn:
    """A tool's refusal, as the latopt CLI's: one line on stderr naming the tool (``prog``), exit 2; what
    it refuses is checked before anything is written (bad arguments, a stage asked for before its inputs)."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


class Parser(argparse.ArgumentParser):
    """Bad arguments: one line on stderr naming the tool (its ``prog``), exit 2 (:func:`refuse`)."""

    def error(self, message: str) -> NoReturn:
        refuse(message, self.prog.split()[0])


def log(msg: str) -> None:
    print(f"[bench_methods {time.strftime('%H:%M:%S')} pid {os.getpid()}] {msg}", flush=True)


def load_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def write_json(path: Path, obj: Any) -> None:
    from latopt.files.artifacts import write_json_atomic

    write_json_atomic(path, obj)


def cfg_for(args: argparse.Namespace):
    """The run config of every cell: the shipped config, with --smoke's and --set's overrides (its training loss
    checked before any cell trains: :func:`latopt.training.losses.check_loss_config`)."""
    import yaml

    from latopt.config import load_config
    from latopt.training.losses import check_loss_config

    overrides: dict[str, Any] = dict(SMOKE) if args.smoke else {}
    for kv in args.set:
        k, _, v = kv.partition("=")
        overrides[k] = yaml.safe_load(v)
    cfg = load_config(args.config, overrides)
    check_loss_config(cfg)
    return cfg


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
        for kind in prune_kinds(args):
            for t in args.prune_targets:
                out.append((f"s{s}-{kind}>{t}", s, [f"s{s}-base", f"s{s}-{t}"]))
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


def prune_kinds(args: argparse.Namespace) -> list[str]:
    """The pruning arms' method kinds (:func:`prune_kind`): every ``--prune-arms`` arm at every
    ``--prune-epochs`` (default: the equal budget); none without ``prune`` in ``--methods``."""
    if "prune" not in args.methods:
        return []
    budget = int(args.ft_budget)
    return [prune_kind(arm, e, budget) for e in (args.prune_epochs or [budget]) for arm in args.prune_arms]


def method_of(cell: str) -> str:
    """'s0-lf-lut@1' -> 'lf-lut@1' (the method key, without the seed)."""
    return cell.split("-", 1)[1]


class Ctx:
    """A run's settings, its task and its queue of cells (:class:`tools.jobqueue.JobQueue` under ``--runs-dir``:
    ``ctx.queue.done(cell)`` is a finished cell's record, or None)."""

    def __init__(self, args: argparse.Namespace) -> None:
        from tools.jobqueue import JobQueue

        self.args = args
        self.root = Path(args.runs_dir)
        self.cfg = cfg_for(args)
        self.lut_path = Path(args.lut) if args.lut else self.root / "lut" / f"cpu-r{self.cfg.data.resolution}.json"
        self.queue = JobQueue(self.root, say=log, kind=lambda c: method_of(c).split("@")[0])

    @property
    def task(self) -> Any:
        """The task, built once per process (the clutter canvases are generated): the same test split for all."""
        if getattr(self, "_task", None) is None:
            from latopt.data import load_task

            self._task = load_task(self.cfg)
        return self._task

    def cell_dir(self, cell: str) -> Path:
        seed, method = cell.split("-", 1)
        return self.root / f"seed{seed[1:]}" / method.replace(">", "_to_").replace("@", "_")

def ensure_lut(ctx: Ctx) -> Path:
    """The device LUT of the model at the training resolution (made once, shared by every seed)."""
    from latopt.latency.devices import load_device
    from latopt.latency.profiler import ensure_lut as profiled

    return profiled(ctx.lut_path, ctx.cfg.model.name, load_device("cpu"), ctx.cfg.data.resolution, num_classes=10,
                    say=log)


def onnx_correct(path: str | Path, task: Any) -> np.ndarray:
    """Per test sample, whether the ONNX file (ONNX Runtime, CPU) predicts its label."""
    from latopt.export import runner_correct
    from latopt.runtime import OrtRunner

    with OrtRunner(str(path)) as r:
        return runner_correct(r, task, batch=256)


def correctness(task: Any, path: str | Path, recorded: float | None = None) -> dict[str, Any]:
    """The ONNX file's per-sample results packed for results/ (docs/evaluation.md: the paired intervals need
    them); checked against the accuracy export recorded for the same file."""
    from tools.compare import pack_bits

    hits = onnx_correct(path, task)
    if recorded is not None and abs(float(hits.mean()) - recorded) > 1e-9:
        raise RuntimeError(f"{path}: {hits.mean()} correct now, export recorded {recorded}")
    return {"onnx_acc": float(hits.mean()), "onnx_correct": pack_bits(hits), "test_samples": int(hits.size)}


def export_cell(ckpt: Path, out: Path, task: Any) -> dict[str, Any]:
    """``latopt export`` of a checkpoint (gates + ONNX accuracy); no timing here (the measure stage times)."""
    from latopt.export import CheckOptions, export

    r = export(ckpt, "cpu", out, checks=CheckOptions(measure=False), progress=False)
    onnx = out / "model.onnx"
    assert r.accuracy is not None   # a checkpoint with its task: export's accuracy gate ran
    return {"onnx": str(onnx),
            "gates": [{"name": g.name, "passed": g.passed, "rel": g.rel} for g in r.gates],
            "bias_maps": None if r.bias_maps is None else r.bias_maps.model_dump(mode="json"),
            "plan": dict(r.folded), **correctness(task, onnx, r.accuracy.test_acc)}


PLATEAU_EPOCHS, PLATEAU_PT = 5, 1.0   # docs/evaluation.md §3: validation over the last 5 epochs within 1 point


def plateau(history: list[dict[str, Any]]) -> dict[str, Any]:
    """Did the base reach a validation plateau: its validation accuracy over the last :data:`PLATEAU_EPOCHS`
    epochs spans less than :data:`PLATEAU_PT` points?"""
    val = [h["val_acc"] for h in history if "val_acc" in h]
    last = val[-PLATEAU_EPOCHS:]
    span = 100 * (max(last) - min(last)) if last else float("nan")
    return {"last_val": last, "span_pt": span, "plateau": len(last) == PLATEAU_EPOCHS and span < PLATEAU_PT}


def cell_base(ctx: Ctx, seed: int, out: Path) -> dict[str, Any]:
    from latopt.training.base_training import read_metrics, train_base

    if (out / "base.pt").is_file() and (out / "metrics.json").is_file():
        m = read_metrics(out / "metrics.json")   # trained before (e.g. by `latopt train` with this --out)
        if m.seed != seed or m.epochs != ctx.cfg.train.epochs:
            raise RuntimeError(f"{out} holds another base (seed {m.seed}, epochs {m.epochs})")
    else:
        m = train_base(ctx.cfg, out, seed=seed, progress=True).metrics
    hist = m.history
    return {"test_acc": m.test_acc, "val_acc": m.val_acc, "train_seconds": m.train_seconds,
            "epochs": m.epochs, "checkpoint": str(out / "base.pt"), "extra_epochs": 0,
            "test_samples": m.sizes["test"], "sizes": m.sizes,
            "curve": [{k: h[k] for k in ("epoch", "loss", "val_acc") if k in h} for h in hist],
            "plateau": plateau(hist)}


def cell_asis(ctx: Ctx, seed: int, out: Path) -> dict[str, Any]:
    from latopt.training.base_training import train_base

    base = ctx.cell_dir(f"s{seed}-base") / "base.pt"
    e = ft_epochs(ctx.cfg)
    cfg = ctx.cfg.with_overrides({"train.epochs": e, "train.lr": ctx.cfg.fold.lr})
    m = train_base(cfg, out / "train", checkpoint=base, seed=seed, progress=True).metrics
    r = {"test_acc": m.test_acc, "val_acc": m.val_acc, "train_seconds": m.train_seconds,
         "extra_epochs": e, "structure": {"kind": "asis"}}
    r |= export_cell(out / "train" / "base.pt", out / "export", ctx.task)
    return r


def cell_lf(ctx: Ctx, seed: int, out: Path, costs: str, lam: float, *, lut: Path | None = None) -> dict[str, Any]:
    """``costs`` "lut": c_l from ``lut`` (default: the cpu LUT, :func:`ensure_lut`); else uniform c_l = 1."""
    from latopt.layerfold import run_fold

    base = ctx.cell_dir(f"s{seed}-base") / "base.pt"
    lut = (lut or ensure_lut(ctx)) if costs == "lut" else None
    cfg = ctx.cfg.with_overrides({"fold.lambda_c": lam, "fold.granularity": "block"}).model_copy(
        update={"lut": None if lut is None else str(lut)})   # no LUT: uniform c_l, whatever the config names
    rep = run_fold(cfg, base, out / "fold", seed=seed, progress=True, task=ctx.task).report.to_json()
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
    from latopt.latency.devices import load_device
    from latopt.latency.profiler import ensure_lut as profiled

    return profiled(ctx.root / "lut" / f"cpu-variants-r{ctx.cfg.data.resolution}.json", ctx.cfg.model.name,
                    load_device("cpu"), ctx.cfg.data.resolution, variants=DP_VARIANTS, num_classes=10, say=log)


def cell_dp(ctx: Ctx, seed: int, out: Path, budget: float, *, variants: tuple[str, ...] = DP_VARIANTS,
            importance: str = "proxy", losses: dict[int, dict[str, float]] | None = None,
            lut: Path | None = None, plan: dict[str, str] | None = None) -> dict[str, Any]:
    """Block variants chosen by the DP under a latency budget (fraction of the LUT-predicted as-is latency),
    then fine-tuned directly (no σ_α pre-fold) for the same budget as every method: ``fold.post_epochs`` is
    set to fold.epochs + fold.post_epochs, at ``fold.lr`` like every other method (``fold.post_lr`` is set
    to it). ``variants`` / ``importance`` / ``losses``: the ablations' changes (:data:`DP_ABLATIONS`);
    ``plan``: a given plan applied the same way instead (``latopt.dp.apply_plan``, :func:`cell_lf_direct`);
    ``lut``: the variant LUT the DP solves on (default: the cpu one, :func:`ensure_variant_lut`)."""
    from latopt.dp import apply_plan, run_dp

    base = ctx.cell_dir(f"s{seed}-base") / "base.pt"
    e = ft_epochs(ctx.cfg)
    cfg = ctx.cfg.with_overrides({"fold.post_epochs": e, "fold.post_lr": ctx.cfg.fold.lr})
    lut = lut or ensure_variant_lut(ctx)
    if plan is not None:
        variants = tuple(sorted(set(plan.values())))
        result = apply_plan(cfg, base, out / "fold", plan, lut=lut, seed=seed, progress=True, task=ctx.task)
    else:
        result = run_dp(cfg, base, out / "fold", lut=lut, budget=budget, importance=importance, variants=variants,
                        losses=losses, seed=seed, progress=True, task=ctx.task)
    rep = result.report.to_json()
    r = {"test_acc": rep["acc"]["finetuned"], "val_acc": rep["val"]["finetuned"],
         "acc_before_ft": rep["acc"].get("folded"), "train_seconds": rep["seconds"]["total"], "extra_epochs": e,
         "n_folded": rep["n_folded"], "selection": rep["selection"], "lut_pred_ms": rep["latency_pred_ms"],
         "importance": rep["importance"], "variants": list(variants),
         "structure": {"kind": "fold", "plan": rep["folded"]}}
    r |= export_cell(out / "fold" / "folded.pt", out / "export", ctx.task)
    return r


def cell_lf_direct(ctx: Ctx, seed: int, out: Path, lam: str) -> dict[str, Any]:
    """Layer Folding's fold set (the LUT-c_l cell at λ of the same seed) folded from the base and fine-tuned
    directly like the DP (``latopt.dp.apply_plan``): the same structure as that cell, without its σ_α pre-fold
    (docs/evaluation.md, Q2)."""
    plan = ctx.queue.done(f"s{seed}-lf-lut@{lam}")["structure"]["plan"]
    return cell_dp(ctx, seed, out, 1.0, plan=plan) | {"source": f"lf-lut@{lam}"}


# -- channel pruning (torch-pruning) -------------------------------------------------------------
PRUNE_STEPS = 3          # iterative pruning: this many steps, each followed by an equal share of the fine-tuning
# no layer group loses more than this fraction of its channels. 0.9 until 2026-12-02 (results/method-table):
# global ranking then cut the first six convolutions to 8 channels in 12 of 15 networks
PRUNE_MAX_LAYER = 0.5
PRUNE_REMATCH = 3        # iterated networks pruned and timed against their target at most this many times
PRUNE_ARMS = ("global", "local")   # channels ranked across the network / the same ratio in every layer group


def prune_kind(arm: str, epochs: int, budget: int) -> str:
    """The method kind of a pruning arm: ``prune`` (global, the equal budget), ``prune-local``, and ``-e<N>``
    when it fine-tunes for N epochs instead of the equal ``budget``."""
    return "prune" + ("" if arm == "global" else f"-{arm}") + ("" if epochs == budget else f"-e{epochs}")


def parse_prune_kind(kind: str, budget: int) -> tuple[str, int]:
    """(arm, epochs) of a kind made by :func:`prune_kind`."""
    parts = kind.split("-")[1:]
    epochs = int(parts.pop()[1:]) if parts and parts[-1].startswith("e") and parts[-1][1:].isdigit() else budget
    arm = parts[0] if parts else "global"
    if parts[1:] or arm not in PRUNE_ARMS:
        raise ValueError(f"{kind!r} is not a pruning arm (prune[-local][-e<epochs>])")
    return arm, epochs


def prune_ignored(model: Any) -> list[Any]:
    """What pruning leaves whole: the classifier (every nn.Linear), the stem (every convolution before the first
    block) and the first block (``latopt.nets.blocks.find_blocks``), the layers whose few channels carry the most."""
    import torch

    from latopt.nets.blocks import find_blocks

    blocks = find_blocks(model)
    first = blocks[0].path if blocks else None
    ignored, before = [], first is not None
    for path, mod in model.named_modules():
        if first is not None and (path == first or path.startswith(first + ".")):
            before = False
            if isinstance(mod, torch.nn.Conv2d):
                ignored.append(mod)
            continue
        if isinstance(mod, torch.nn.Linear) or (before and isinstance(mod, torch.nn.Conv2d)):
            ignored.append(mod)
    return ignored


def layer_prune_counts(model: Any, ratio: float, resolution: int, round_to: int | None, arm: str = "global"
                       ) -> dict[Any, tuple[int, int]]:
    """Per prunable group (keyed by its root convolution): (channels, channels to remove). ``local``: ``ratio``
    of every group; ``global``: the ``ratio`` × all prunable channels of least importance across the network
    (``GroupMagnitudeImportance(p=2)``, mean-normalised per group so groups compare). Either way each group
    keeps a multiple of ``round_to`` channels and at least (1 − :data:`PRUNE_MAX_LAYER`) of them, rounded up
    to a multiple of ``round_to`` (torch-pruning's own global ranking and rounding can cut a layer further:
    48 channels to 16 under a 0.5 cap); :func:`prune_ignored` is left whole."""
    import math

    import torch
    import torch_pruning as tp

    if arm not in PRUNE_ARMS:
        raise ValueError(f"pruning arm {arm!r}: one of {', '.join(PRUNE_ARMS)}")
    step = round_to or 1
    probe = tp.pruner.BasePruner(model, torch.randn(1, 3, resolution, resolution),
                                 importance=tp.importance.GroupMagnitudeImportance(p=2), pruning_ratio=0.0,
                                 ignored_layers=prune_ignored(model))
    groups = []
    for g in probe.DG.get_all_groups(ignored_layers=probe.ignored_layers, root_module_types=probe.root_module_types):
        root = g[0].dep.target.module
        n = probe.DG.get_out_channels(root) if isinstance(root, torch.nn.Conv2d) else None
        imp = probe.estimate_importance(g) if n else None
        if imp is None or len(imp) != n:
            continue
        keep_min = min(n, step * math.ceil((1 - PRUNE_MAX_LAYER) * n / step))
        groups.append((root, n, keep_min, torch.sort(imp.float().cpu()).values))
    if arm == "local":
        cut = {id(r): n - max(keep_min, step * round(n * (1 - ratio) / step)) for r, n, keep_min, _ in groups}
    else:
        pool = [(float(v), id(r)) for r, n, keep_min, imp in groups for v in imp[: n - keep_min]]
        k = min(len(pool), round(ratio * sum(n for _, n, _, _ in groups)))
        chosen = sorted(pool)[:k]
        cut = {id(r): 0 for r, _, _, _ in groups}
        for _, rid in chosen:
            cut[rid] += 1
        for r, n, keep_min, _ in groups:   # a multiple of round_to left, never fewer than keep_min
            cut[id(r)] = n - max(keep_min, step * round((n - cut[id(r)]) / step))
    return {r: (n, max(0, cut[id(r)])) for r, n, _, _ in groups}


def make_pruner(model: Any, ratio: float, resolution: int, round_to: int | None, steps: int,
                arm: str = "global") -> Any:
    """torch-pruning of ``model`` (in place) to :func:`layer_prune_counts`'s channel counts, over ``steps``
    steps (linear schedule per layer; the channels removed are re-ranked by group L2 magnitude at every step),
    channel counts rounded to ``round_to``. ``arm``: ``global`` (the counts from one ranking across the network,
    made on the weights the pruner starts from) or ``local`` (the same ratio in every layer group)."""
    import torch
    import torch_pruning as tp

    counts = layer_prune_counts(model, ratio, resolution, round_to, arm)
    # (k − 0.5)/n: torch-pruning keeps int(n × (1 − ratio)) = n − k channels of the group at the last step
    per_layer = {r: (k - 0.5) / n for r, (n, k) in counts.items() if k > 0}
    return tp.pruner.BasePruner(model, torch.randn(1, 3, resolution, resolution),
                                importance=tp.importance.GroupMagnitudeImportance(p=2), pruning_ratio=0.0,
                                pruning_ratio_dict=per_layer, ignored_layers=prune_ignored(model),
                                round_to=round_to, global_pruning=False, iterative_steps=steps,
                                max_pruning_ratio=PRUNE_MAX_LAYER)


def prune_model(model: Any, ratio: float, resolution: int, round_to: int | None, arm: str = "global") -> Any:
    """A one-shot pruned copy (:func:`make_pruner` in one step): what the ratio search measures."""
    m = copy.deepcopy(model).eval()
    make_pruner(m, ratio, resolution, round_to, 1, arm).step()
    return m


def next_ratio(attempts: list[tuple[float, float]], curve: dict[float, float], step: float = 0.05) -> float:
    """The pruning ratio to try next so that the *iterated* network lands on its target: ``attempts`` are
    (ratio, t(iterated)/t(target)) so far, ``curve`` the one-shot ratios' t/t(target). Two attempts on either
    side of 1: interpolate between them. Else shift the one-shot curve by the last attempt's offset from it
    (the iterated structure differs from the one-shot one) and read the ratio where it reaches 1; without a
    curve to read, step by ``step``. Kept inside [0.01, 0.95]."""
    slow = [(r, t) for r, t in attempts if t > 1]
    fast = [(r, t) for r, t in attempts if t < 1]
    top = 0.95
    if slow and fast:
        (r1, t1), (r2, t2) = max(slow), min(fast)
        if r2 > r1:
            return min(top, max(0.01, r1 + (t1 - 1) * (r2 - r1) / (t1 - t2)))
    r, t = attempts[-1]
    if len(curve) >= 2:
        by_r = sorted(curve.items())                         # (ratio, t): t falls as the ratio grows
        by_t = sorted((tc, rc) for rc, tc in by_r)
        ts, rs = [p[0] for p in by_t], [p[1] for p in by_t]
        at_r = float(np.interp(r, [p[0] for p in by_r], [p[1] for p in by_r]))
        goal = at_r - (t - 1)          # the one-shot level at which the iterated network measures 1
        if ts[0] <= goal <= ts[-1]:
            new = float(np.interp(goal, ts, rs))
            if abs(new - r) > 1e-3:
                return min(top, max(0.01, new))
    return min(top, max(0.01, r + (step if t > 1 else -step)))


def rematch(ratio: float, curve: dict[float, float], tol: float, prune_ft: Callable[[float], Any],
            time_vs_target: Callable[[Any], float], attempts: int = PRUNE_REMATCH,
            say: Callable[[str], None] = log) -> tuple[Any, list[dict[str, Any]]]:
    """Prune and fine-tune at ``ratio`` (``prune_ft``: ratio -> result), time the iterated network against its
    target (``time_vs_target``: result -> t/t(target)) and, while it is off by more than ``tol``, search the
    ratio again on the iterated networks (:func:`next_ratio`), at most ``attempts`` times. Returns the result
    closest to its target and every attempt's (ratio, t/t(target))."""
    tried: list[dict[str, Any]] = []
    results = []
    for k in range(attempts):
        res = prune_ft(ratio)
        t = float(time_vs_target(res))
        tried.append({"ratio": ratio, "t_over_target": t, "matched": abs(t - 1) <= tol})
        results.append(res)
        say(f"re-match attempt {k + 1}: ratio {ratio:.3f}, iterated t/t_target {t:.3f}")
        if abs(t - 1) <= tol:
            break
        ratio = next_ratio([(a["ratio"], a["t_over_target"]) for a in tried], curve)
        if any(abs(ratio - a["ratio"]) < 1e-3 for a in tried):
            break
    best = min(range(len(tried)), key=lambda i: abs(tried[i]["t_over_target"] - 1))
    return results[best], tried


def structure_key(model: Any) -> tuple:
    import torch

    return tuple(tuple(mod.weight.shape) for mod in model.modules() if isinstance(mod, torch.nn.Conv2d))


def ratio_ms(a: Any, b: Any) -> dict[str, float]:
    """Per-round ratio t(a)/t(b) (sample i of every network is from round i): median and quartiles."""
    s = a.per_round_ratio(b)
    return {"median": s.median_ms, "q1": s.q1_ms, "q3": s.q3_ms, "n": s.n}


def match_prune_ratio(base_model: Any, target_onnx: str, res: int, round_to: int | None, tol: float,
                      grid: list[float], say: Callable[[str], None],
                      policy: dict[str, Any] | None = None, arm: str = "global") -> dict[str, Any]:
    """The smallest pruning ratio whose one-shot network measures within ``tol`` of the target (interleaved
    with it); the grid is refined between the two ratios that bracket the target, up to three times.
    ``policy``: overrides of the cpu profile's timing policy (default :data:`MATCH_POLICY`); ``arm``:
    :func:`make_pruner`'s (``local`` tries no ratio above :data:`PRUNE_MAX_LAYER`)."""
    from latopt.latency.devices import load_device
    from latopt.latency.profiler import measure_networks

    device = load_device("cpu")
    tried: dict[float, dict[str, float]] = {}
    by_struct: dict[tuple, float] = {}
    rounds = []
    if arm == "local":
        grid = [r for r in grid if r <= PRUNE_MAX_LAYER]
    for it in range(4):
        cands: dict[str, Any] = {}
        for r in grid:
            if r in tried:
                continue
            m = prune_model(base_model, r, res, round_to, arm)
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


def prune_iteratively(ctx: Ctx, model: Any, ratio: float, seed: int, epochs: int, arm: str = "global",
                      loss: Any = None) -> dict[str, Any]:
    """Iterative pruning (:func:`make_pruner` with ``arm``, :data:`PRUNE_STEPS` steps) with ``epochs`` of
    fine-tuning (the equal budget, or a longer arm's): after each step, ``epochs / PRUNE_STEPS`` epochs of
    cfg.train's optimizer and schedule at fold.lr (both restarted at each step: the parameters changed shape),
    best-validation weights kept at the end like every other method, with the training loss of every method's
    fine-tune (``loss``, a :class:`latopt.training.losses.TrainingLoss` on the CPU: fold.distill's distillation from the
    base; default: built here from ``model`` before it is pruned)."""
    from latopt.data import make_loaders
    from latopt.training.loop import (
        BestWeights,
        Report,
        Step,
        evaluate,
        fit,
        make_optimizer,
        make_scheduler,
        seed_everything,
    )
    from latopt.training.losses import training_loss

    cfg, res, task = ctx.cfg, ctx.cfg.data.resolution, ctx.task
    loss = loss if loss is not None else training_loss(cfg, model)
    seed_everything(seed)
    train, val, test = make_loaders(task, cfg.data.batch_size, seed)  # one CPU process
    pruner = make_pruner(model, ratio, res, ctx.args.round_to, PRUNE_STEPS, arm)
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
        step = Step(loss, opt, sched, clip_grad=cfg.train.clip_grad)
        h = fit(model, train, e, step, val_loader=val, best=best,
                report=Report(desc=f"prune-ft step {k + 1}/{PRUNE_STEPS}"))
        hist += [{**r, "step": k + 1} for r in h]
    model.eval()
    return {"test_acc": evaluate(model, test), "val_acc": evaluate(model, val),
            "train_seconds": time.perf_counter() - t0, "history": hist, "steps": share}


def cell_prune(ctx: Ctx, seed: int, out: Path, target: str, arm: str = "global", epochs: int | None = None
               ) -> dict[str, Any]:
    """One pruning point of ``arm`` matched to cell ``target`` of the same seed: the ratio found on one-shot
    prunings of the base (:func:`match_prune_ratio`), then pruned iteratively with ``epochs`` of fine-tuning
    (default: the equal budget) and re-matched on the *iterated* network (:func:`rematch`: timed against the
    target, the ratio searched again when it is off by more than the match). The final run decides."""
    import torch

    from latopt.export import gate_inputs, noise_floor, onnx_gate
    from latopt.files.checkpoint import load_checkpoint
    from latopt.latency.devices import load_device
    from latopt.latency.onnx_io import export_onnx
    from latopt.latency.profiler import measure_networks
    from latopt.nets.models import model_cost
    from latopt.training.losses import training_loss

    a = ctx.args
    res = ctx.cfg.data.resolution
    epochs = ft_epochs(ctx.cfg) if epochs is None else epochs
    tgt = ctx.queue.done(f"s{seed}-{target}")
    base, _, _ = load_checkpoint(ctx.cell_dir(f"s{seed}-base") / "base.pt")
    policy = MATCH_POLICY_SMOKE if a.smoke else MATCH_POLICY
    match = match_prune_ratio(base, tgt["onnx"], res, a.round_to, a.match_tol,
                              PRUNE_GRID_SMOKE if a.smoke else PRUNE_GRID, log, policy, arm)
    log(f"s{seed} {prune_kind(arm, epochs, ft_epochs(ctx.cfg))}>{target}: ratio {match['ratio']} "
        f"({'matched' if match['matched'] else 'NOT matched'} one-shot, t/t_target "
        f"{match['ratio_to_target']['median']:.3f}); now pruning iteratively")
    curve = {r: v["median"] for r, v in match["tried"].items() if "median" in v}
    out.mkdir(parents=True, exist_ok=True)
    loss = training_loss(ctx.cfg, base)   # every re-match's fine-tune distils from the one teacher (fold.distill)

    def prune_ft(ratio: float) -> tuple[Any, dict[str, Any], Path]:
        model = copy.deepcopy(base)
        ft = prune_iteratively(ctx, model, ratio, seed, epochs, arm, loss)
        path = export_onnx(model, (1, 3, res, res), out / f"model-r{ratio:.4f}.onnx", dynamic_batch=True)
        return model, ft | {"ratio": ratio}, path

    def time_vs_target(r: tuple[Any, dict[str, Any], Path]) -> float:
        pol = load_device("cpu").model_copy(update=policy)
        stats = measure_networks({"target": tgt["onnx"], "pruned": str(r[2])}, pol, (1, 3, res, res))
        return ratio_ms(stats["pruned"], stats["target"])["median"]

    (model, ft, onnx_tmp), attempts = rematch(match["ratio"], curve, a.match_tol, prune_ft, time_vs_target,
                                              1 if a.smoke else PRUNE_REMATCH)
    onnx_path = out / "model.onnx"
    Path(onnx_tmp).replace(onnx_path)
    for p in out.glob("model-r*.onnx"):
        p.unlink()
    x, inputs = gate_inputs(ctx.task, res, 32, seed)
    gate, _ = onnx_gate(model, onnx_path, x, inputs, noise_floor(model, x))
    if not gate.passed:
        raise RuntimeError(f"ONNX gate failed: {gate.line()}")
    torch.save(model, out / "pruned-module.pt")  # the pruned nn.Module (pickled; a bench artefact only)
    cost = model_cost(model, res)
    return {"test_acc": ft["test_acc"], "val_acc": ft["val_acc"], "train_seconds": ft["train_seconds"],
            "extra_epochs": epochs, "target": target, "match": match | {"ratio": ft["ratio"]},
            "one_shot_ratio": match["ratio"], "rematch": attempts, "arm": arm,
            "max_layer_ratio": PRUNE_MAX_LAYER, "ignored": "classifier, stem and first block",
            "onnx": str(onnx_path), "gates": [{"name": gate.name, "passed": gate.passed}],
            "params": cost.params, "flops": cost.flops,
            "prune_steps": ft["steps"], "conv_shapes": [list(k) for k in structure_key(model)],
            "structure": {"kind": "prune", "ratio": ft["ratio"], "round_to": a.round_to, "arm": arm,
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
    if method.startswith("prune") and ">" in method:
        kind, _, target = method.partition(">")
        arm, epochs = parse_prune_kind(kind, ft_epochs(ctx.cfg))
        return cell_prune(ctx, seed, out, target, arm, epochs)
    raise ValueError(f"unknown cell {cell}")


# ------------------------------------------------------------------ the queue (tools.jobqueue)
def run_queue(ctx: Ctx, cells: list[tuple[str, int, list[str]]] | None = None,
              run: Callable[[Ctx, str, int], dict[str, Any]] | None = None) -> list[str]:
    """Run ``cells`` (default: :func:`cell_names`) with ``run`` (default: :func:`run_cell`) on
    :class:`tools.jobqueue.JobQueue` (resumable, shared with other processes through lock files), one thread a
    process; each cell's record also names its method, the config and whether it was a smoke run. Returns the
    cells not done."""
    from latopt.training.torch_settings import set_threads

    set_threads(1)
    cells = cell_names(ctx.args) if cells is None else cells

    def work(cell: str, seed: int) -> dict[str, Any]:
        rec = (run or run_cell)(ctx, cell, seed)
        return rec | {"method": method_of(cell), "smoke": bool(ctx.args.smoke), "config": ctx.args.config}

    return ctx.queue.run(cells, work)


# ------------------------------------------------------------------ INT8 (ONNX Runtime static quantisation)
def calibration_images(ctx: Ctx, n: int) -> np.ndarray:
    """``n`` training images (the fixed training canvases, no augmentation), the same for every network."""
    from latopt.data import load_task
    from latopt.latency.quantize import calibration_images as first_images

    return first_images(load_task(ctx.cfg.with_overrides({"data.augment": False})), n)


def quantize_int8(fp32: Path, out: Path, calib: np.ndarray) -> Path:
    """latopt's static INT8 (:func:`latopt.latency.quantize.quantize_int8`, as ``latopt export --precision
    int8`` ships it), made once per file."""
    from latopt.latency.quantize import quantize_int8 as quantize

    return out if out.is_file() else quantize(fp32, out, calib)


# ------------------------------------------------------------------ measuring
def structure_net(ctx: Ctx, st: dict[str, Any], res: int, seed: int = 0) -> Any:
    """The network of a cell's structure with random weights at ``res`` (what export would ship there)."""
    from latopt.nets.models import build_model
    from latopt.rewrite import as_shipped, randomize_bn_

    m = build_model(ctx.cfg.model.name, num_classes=10).eval()
    randomize_bn_(m, seed=seed)
    if st["kind"] == "asis":
        return m
    if st["kind"] == "fold":
        plan = {int(k): v for k, v in st["plan"].items()}
        if not plan:
            return m
        return as_shipped(m, plan, input_size=(res, res))[0]
    if st["kind"] == "prune":  # global pruning: the structure depends on the weights, so the trained module
        import torch

        return torch.load(st["module"], weights_only=False).eval()
    raise ValueError(f"no rebuild for structure {st['kind']!r}")


def measure(ctx: Ctx, res: int, cells: list[str] | None = None, *, name: str | None = None) -> dict[str, Any]:
    """All finished cells' networks, fp32 and INT8, in ONE interleaved run at ``res``: at the training
    resolution the trained networks themselves; elsewhere each distinct structure with random weights.
    ``cells``: the finished cells to time (default: :func:`cell_names`'s); ``name``: the record's file in
    ``ctx.root`` (default ``measure-r<res>.json``)."""
    from latopt.latency.devices import load_device
    from latopt.latency.onnx_io import export_onnx
    from latopt.latency.profiler import measure_networks

    out_json = ctx.root / (name or f"measure-r{res}.json")
    if out_json.is_file() and not ctx.args.remeasure:
        return load_json(out_json)
    cells = {c: ctx.queue.done(c) for c in (cells if cells is not None else [c for c, _, _ in cell_names(ctx.args)])}
    cells = {c: r for c, r in cells.items() if r is not None and "structure" in r}
    from latopt.latency.quantize import CALIB_IMAGES

    calib = calibration_images(ctx, CALIB_IMAGES)
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
    from latopt.latency.timing import environment_info

    rec = {"resolution": res, "seconds": time.perf_counter() - t0, "loadavg_after": os.getloadavg(),
           "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "environment": environment_info(),
           "commit": git_commit(Path(__file__).parent),
           "policy": {k: getattr(device, k) for k in ("budget_s", "min_repeats", "max_repeats", "warmup")
                      if hasattr(device, k)},
           "rounds": next(iter(stats.values())).n, "members": members,
           "stats": {k: {"median_ms": s.median_ms, "q1_ms": s.q1_ms, "q3_ms": s.q3_ms, "samples_ms": s.samples_ms}
                     for k, s in stats.items()},
           "random_weights": res != train_res}
    if res == train_res:
        from tools.compare import pack_bits

        hits = {c: onnx_correct(nets[f"{c}|int8"], ctx.task) for c in cells}
        rec["int8_acc"] = {c: float(h.mean()) for c, h in hits.items()}
        rec["int8_correct"] = {c: pack_bits(h) for c, h in hits.items()}
    write_json(out_json, rec)
    log(f"measured in {rec['seconds']:.0f} s, {rec['rounds']} rounds → {out_json}")
    return rec


# ------------------------------------------------------------------ results/ (the raw data the docs are made from)
RESULTS_SCHEMA = "latopt.method_table/1"
MACHINE_KEYS = ("onnx", "checkpoint")   # paths on the machine that ran the cell: not part of the results


def _per_round(stats: dict[str, Any], a: str, b: str) -> list[float]:
    return [x / y for x, y in zip(stats[a]["samples_ms"], stats[b]["samples_ms"], strict=True)]


def _q(v: list[float]) -> list[float]:
    """[median, q1, q3]."""
    q = np.quantile(np.asarray(v), [0.5, 0.25, 0.75])
    return [float(x) for x in q]


def machine(env: dict[str, Any]) -> str:
    """The machine of a final run in words: CPU, its widest vector unit, cores."""
    flags = set(env.get("cpu_flags") or ())
    vec = ("AVX-512" + (" with VNNI" if "avx512_vnni" in flags else "") if "avx512f" in flags
           else "AVX2, no AVX-512" if "avx2" in flags else "no AVX2" if flags else "flags not recorded")
    return f"{env.get('cpu', '?')} ({vec}), {env.get('cpu_count', '?')} cores"


def git_commit(where: Path) -> str | None:
    try:
        return subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def run_meta(ctx: Ctx, commit: str | None = None, started: str | None = None) -> dict[str, Any]:
    """What a run is (written by ``run`` before its first cell): the commit of the code, the config and the
    protocol's settings."""
    path = ctx.root / "run-meta.json"
    if path.is_file():
        return load_json(path)
    from latopt.latency.quantize import CALIB_IMAGES

    a = ctx.args
    meta = {"commit": commit or git_commit(Path(__file__).parent), "config": a.config, "overrides": list(a.set),
            "smoke": bool(a.smoke), "seeds": list(a.seeds), "lambdas": list(a.lambdas), "budgets": list(a.budgets),
            "ablation_budget": a.ablation_budget, "prune_targets": list(a.prune_targets), "match_tol": a.match_tol,
            "round_to": a.round_to, "prune_steps": PRUNE_STEPS, "int8_calibration": CALIB_IMAGES,
            "prune_kinds": prune_kinds(a), "prune_max_layer": PRUNE_MAX_LAYER, "prune_rematch": PRUNE_REMATCH,
            "prune_ignored": "classifier, stem and first block",
            "started": started or time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    write_json(path, meta)
    return meta


def publish(ctx: Ctx, dest: Path, *, group: bool = False) -> Path:
    """Write the run's raw results to ``dest`` (``results/method-table``): ``run.json`` (the run's settings,
    schedule, splits, LUTs, measurement runs and machine) and ``cells/<cell>.json`` per finished cell (its
    record without machine paths, the non-linear layers of its ONNX file (``nonlinear_ops``), its per-sample
    correctness fp32 and INT8, and its speed-ups from the final runs: per-round t(as-is)/t(network) against the
    fp32 and INT8 as-is networks of its seed, [median, q1, q3]; pruning also t(pruned)/t(target) per round).

    ``group``: the run is one seed group of several, each trained and timed on its own machine (this run's
    ``--seeds``); its cells replace only those of its seeds in ``dest``, and ``run.json`` keeps one entry per
    group (seeds, commit, start, LUTs, final runs and machine) beside the groups published before."""
    cfg = ctx.cfg
    meas = {res: load_json(ctx.root / f"measure-r{res}.json") for res in ctx.args.resolutions
            if (ctx.root / f"measure-r{res}.json").is_file()}
    if cfg.data.resolution not in meas:
        refuse(f"no final run at {cfg.data.resolution} px in {ctx.root}: run the measure stage first")
    done = {c: ctx.queue.done(c) for c, _, _ in cell_names(ctx.args)}
    seeds = set(ctx.args.seeds)
    before = load_json(dest / "run.json") if group and (dest / "run.json").is_file() else {}
    if group:   # every refusal before anything is written to dest
        _check_group(seeds, before)
    meta = run_meta(ctx)
    luts = {}
    for p in sorted((ctx.root / "lut").glob("*.json")):
        lut = load_json(p)
        luts[p.name] = {"created": lut.get("created"), "variants": lut.get("variants"),
                        "profiling_s": lut.get("profiling_s"),
                        "held_out_error": lut.get("end_to_end", {}).get("held-out", {}).get("error")}
    base = next((r for c, r in done.items() if r and method_of(c) == "base"), None)
    run = {"schema": RESULTS_SCHEMA, **meta, "model": cfg.model.name, "task": cfg.data.task,
           "resolution": cfg.data.resolution, "device": "cpu",
           "schedule": {"base_epochs": cfg.train.epochs, "base_lr": cfg.train.lr, "schedule": cfg.train.schedule,
                        "ft_epochs": ft_epochs(cfg), "ft_lr": cfg.fold.lr, "prefold_epochs": cfg.fold.epochs,
                        "postfold_epochs": cfg.fold.post_epochs},
           "sizes": (base or {}).get("sizes"), "test_group": 3 if cfg.data.task == "digits-clutter" else 1,
           "luts": luts,
           "measure": {str(res): {k: v for k, v in ms.items()
                                  if k not in ("stats", "members", "int8_acc", "int8_correct")}
                       for res, ms in meas.items()}}
    if group:
        differ = [k for k in GROUP_SAME if before and before.get(k) != run.get(k)]
        if differ:
            refuse(f"publish --group: {dest}/run.json's groups were run with other settings ({', '.join(differ)}"
                   "); a group must repeat the others' run with its own seeds")
    cells_out = dest / "cells"
    cells_out.mkdir(parents=True, exist_ok=True)
    for old in cells_out.glob("*.json"):
        if not group or int(load_json(old)["seed"]) in seeds:
            old.unlink()
    for c, r in done.items():
        if r is None:
            continue
        rec = {k: v for k, v in r.items() if k not in MACHINE_KEYS}
        if r.get("onnx") and Path(r["onnx"]).is_file():
            from tools.depth_table import onnx_nonlinear

            rec["nonlinear_ops"] = onnx_nonlinear(r["onnx"])   # the shipped file's activation layers
        if "structure" in rec:
            rec["structure"] = {k: v for k, v in rec["structure"].items() if k != "module"}
            sp: dict[str, Any] = {}
            seed = int(r["seed"])
            for res, ms in meas.items():
                mem = ms["members"]
                if c not in mem or f"s{seed}-asis" not in mem:
                    continue
                k, ka = mem[c], mem[f"s{seed}-asis"]
                sp[str(res)] = {prec: {"vs_fp32_asis": _q(_per_round(ms["stats"], f"{ka}|fp32", f"{k}|{prec}")),
                                       "vs_int8_asis": _q(_per_round(ms["stats"], f"{ka}|int8", f"{k}|{prec}")),
                                       "median_ms": ms["stats"][f"{k}|{prec}"]["median_ms"]}
                                for prec in ("fp32", "int8")}
                if "target" in r and f"s{seed}-{r['target']}" in mem:
                    kt = mem[f"s{seed}-{r['target']}"]
                    sp[str(res)]["vs_target"] = _q(_per_round(ms["stats"], f"{k}|fp32", f"{kt}|fp32"))
            rec["speedup"] = sp
            tr = meas[cfg.data.resolution]
            if c in tr.get("int8_correct", {}):
                rec["int8_acc"], rec["int8_correct"] = tr["int8_acc"][c], tr["int8_correct"][c]
        write_json(cells_out / f"{c}.json", rec)
    if group:
        groups = [g for g in before.get("groups", []) if not set(g["seeds"]) & seeds]
        groups.append({k: run.pop(k) for k in ("seeds", "commit", "started", "luts", "measure")} | {"seeds": sorted(seeds)})
        run["groups"] = sorted(groups, key=lambda g: min(g["seeds"]))
        run["seeds"] = sorted(s for g in run["groups"] for s in g["seeds"])
        run["planned_seeds"] = list(SEEDS)
        run["commit"], run["started"] = run["groups"][0]["commit"], run["groups"][0]["started"]
    write_json(dest / "run.json", run)
    log(f"wrote {dest}/run.json and {sum(r is not None for r in done.values())} cells")
    return dest


# the settings every seed group of one run shares (publish --group refuses a group that differs)
GROUP_SAME = ("config", "overrides", "smoke", "lambdas", "budgets", "ablation_budget", "prune_targets", "match_tol",
              "round_to", "prune_steps", "int8_calibration", "prune_kinds", "prune_max_layer", "prune_rematch", "model",
              "task", "resolution", "schedule")


def _check_group(seeds: set[int], before: dict[str, Any]) -> None:
    """publish --group's refusals, before anything is written: seeds that are not a part of the protocol's, a
    results directory published without groups, a group overlapping a published one in part."""
    if not seeds < set(SEEDS):
        refuse(f"publish --group: --seeds {' '.join(map(str, sorted(seeds)))} must be a part of the "
                         f"protocol's seeds {list(SEEDS)} (a group of them)")
    if before and "groups" not in before:
        refuse("publish --group: the results directory holds a run published without groups; publish the "
                         "groups into an empty directory")
    for g in before.get("groups", []):
        if set(g["seeds"]) & seeds and set(g["seeds"]) != seeds:
            refuse(f"publish --group: seeds {sorted(seeds)} overlap the published group {g['seeds']} in part; "
                             "republish a group with exactly its seeds")


# ------------------------------------------------------------------ the report (from results/ only)
OURS = ("lf-lut", "dp")
RIVALS = ("lf-uniform", "prune")   # "prune": every pruning arm (prune, prune-local, prune-e18, ...)


def rival_name(kind: str) -> str:
    if kind == "lf-uniform":
        return "paper Layer Folding (uniform c_l)"
    if kind == "prune":
        return "channel pruning"
    arm, epochs = parse_prune_kind(kind, -1)
    return "channel pruning (" + ", ".join(([f"{arm}, the same ratio per layer"] if arm == "local" else [])
                                           + ([f"{epochs} epochs"] if epochs != -1 else [])) + ")"


def is_pruning(meth: str) -> bool:
    return kind_of(meth) == "prune" or kind_of(meth).startswith("prune-")


def in_family(meth: str, kinds: tuple[str, ...]) -> bool:
    """``meth``'s kind is one of ``kinds``; ``prune`` there stands for every pruning arm."""
    return kind_of(meth) in kinds or ("prune" in kinds and is_pruning(meth))
ABLATIONS = (  # (question, A, B): what A − B measures
    ("the DP's choice set: `pw` and `drop` on top of `full`", "dp@{b}", "dp-full@{b}"),
    ("`pw` in the choice set", "dp@{b}", "dp-nopw@{b}"),
    ("`drop` in the choice set", "dp@{b}", "dp-nodrop@{b}"),
    ("the proxy importance (validation data) against uniform", "dp@{b}", "dp-uniform@{b}"),
    ("direct fine-tuning against σ_α pre-fold + post-fold, same fold set", "lf-direct@{lam}", "lf-lut@{lam}"),
    ("the DP's fold set against σ_α's, both `full` only and fine-tuned directly", "dp-full@{b}", "lf-direct@{lam}"),
)


@functools.lru_cache(maxsize=4)
def load_results(root: Path) -> Results:
    """:class:`Results` of ``root``, read once per process: the page and README's summary share its intervals."""
    return Results(Path(root))


def kind_of(meth: str) -> str:
    return meth.split("@")[0].split(">")[0]


def _order(meth: str) -> tuple:
    kinds = ["base", "asis", "lf-uniform", "lf-lut", "dp", "prune", "prune-local", "prune-e18", "prune-local-e18",
             "dp-full", "dp-nopw", "dp-nodrop", "dp-uniform", "lf-direct"]
    k = kind_of(meth)
    try:
        num = float(meth.split("@")[-1]) if "@" in meth else 0.0
    except ValueError:
        num = 0.0
    return (kinds.index(k) if k in kinds else 99, num, meth)


class Results:
    """results/method-table read back: per method, per seed, the cell records; correctness vectors unpacked."""

    def __init__(self, root: Path) -> None:
        from tools.compare import unpack_bits

        self.root = Path(root)
        self.run = load_json(self.root / "run.json")
        self.cells = [load_json(p) for p in sorted((self.root / "cells").glob("*.json"))]
        self.by_method: dict[str, dict[int, dict[str, Any]]] = {}
        for r in self.cells:
            self.by_method.setdefault(r["method"], {})[int(r["seed"])] = r
        self.group = int(self.run["test_group"])
        self._unpack = unpack_bits
        self.res = str(self.run["resolution"])
        self._diffs: dict[tuple[str, str, str], Any] = {}

    def diff(self, a: str, b: str, prec: str = "fp32") -> Any:
        """The paired interval of acc(a) − acc(b) (tools/compare.py: crossed seed-t), computed once per (a, b,
        precision)."""
        from tools.compare import paired_interval

        key = (a, b, prec)
        if key not in self._diffs:
            self._diffs[key] = paired_interval(self.correct(a, prec), self.correct(b, prec), group=self.group)
        return self._diffs[key]

    def methods(self) -> list[str]:
        return sorted(self.by_method, key=_order)

    def correct(self, meth: str, prec: str) -> dict[int, np.ndarray]:
        key = "onnx_correct" if prec == "fp32" else "int8_correct"
        return {s: self._unpack(r[key], r["test_samples"]) for s, r in self.by_method.get(meth, {}).items()
                if key in r}

    def acc(self, meth: str, prec: str) -> list[float]:
        key = "onnx_acc" if prec == "fp32" else "int8_acc"
        return [r[key] for _, r in sorted(self.by_method.get(meth, {}).items()) if key in r]

    def speedups(self, meth: str, res: str, prec: str, ref: str = "vs_fp32_asis") -> list[float]:
        """Per seed, the median per-round speed-up (as-is time / this network's) in the final run at ``res``."""
        out = []
        for _, r in sorted(self.by_method.get(meth, {}).items()):
            q = r.get("speedup", {}).get(res, {}).get(prec, {}).get(ref)
            if q is not None:
                out.append(q[0])
        return out

    def speedup(self, meth: str, res: str | None = None, prec: str = "fp32", ref: str = "vs_fp32_asis") -> float | None:
        v = self.speedups(meth, res or self.res, prec, ref)
        return float(np.median(v)) if v else None


def _fmt_acc(v: list[float]) -> str:
    if not v:
        return "–"
    if len(v) == 1:
        return f"{100 * v[0]:.2f} (1 seed)"
    return f"{100 * np.mean(v):.2f} ± {100 * np.std(v, ddof=1):.2f}"


def _fmt_sp(v: list[float]) -> str:
    if not v:
        return "–"
    return f"{np.median(v):.2f}× [{min(v):.2f}, {max(v):.2f}]"


def render_table(R: Results) -> str:
    hi = list(dict.fromkeys(r for g in (R.run.get("groups") or [R.run]) for r in g["measure"] if r != R.res))
    head = ["method", "fine-tuning", "seeds", "blocks changed / pruning ratio", "test acc fp32 (%)",
            f"speed-up fp32 @{R.res}", "test acc INT8 (%)", f"INT8 speed-up @{R.res} vs fp32 as-is",
            f"INT8 vs INT8 as-is @{R.res}"]
    for r in hi:
        head += [f"speed-up fp32 @{r}", f"INT8 vs INT8 as-is @{r}"]
    sch = R.run["schedule"]
    spend = {"base": f"{sch['base_epochs']} epochs from scratch", "asis": f"{sch['ft_epochs']} more epochs",
             "lf-uniform": f"{sch['prefold_epochs']} pre-fold + {sch['postfold_epochs']} post-fold",
             "prune": f"{R.run['prune_steps']} steps × {sch['ft_epochs'] // R.run['prune_steps']} epochs"}
    for meth in R.methods():
        if is_pruning(meth) and kind_of(meth) != "prune":
            e = next(iter(R.by_method[meth].values()))["extra_epochs"]
            spend[kind_of(meth)] = f"{R.run['prune_steps']} steps × {e // R.run['prune_steps']} epochs"
    spend["lf-lut"] = spend["lf-uniform"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for meth in R.methods():
        recs = [r for _, r in sorted(R.by_method[meth].items())]
        what = ""
        if "n_folded" in recs[0]:
            what = ", ".join(str(r["n_folded"]) for r in recs)
        if "match" in recs[0]:
            what = ", ".join(f"{r['match']['ratio']:.2f}" for r in recs)
        acc = [r["test_acc"] for r in recs] if meth == "base" else R.acc(meth, "fp32")
        cells = [meth, spend.get(kind_of(meth), f"{sch['ft_epochs']} direct"), str(len(recs)), what, _fmt_acc(acc)]
        if meth == "base":
            cells += ["–"] * (len(head) - len(cells))
        else:
            cells += [_fmt_sp(R.speedups(meth, R.res, "fp32")), _fmt_acc(R.acc(meth, "int8")),
                      _fmt_sp(R.speedups(meth, R.res, "int8")), _fmt_sp(R.speedups(meth, R.res, "int8", "vs_int8_asis"))]
            for r in hi:
                cells += [_fmt_sp(R.speedups(meth, r, "fp32")), _fmt_sp(R.speedups(meth, r, "int8", "vs_int8_asis"))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def own_fronts(R: Results, prec: str, methods: list[str]) -> set[str]:
    """The ``methods`` on their own family's front in ``prec`` (tools/compare.on_own_front on the median
    speed-up and mean accuracy over seeds): the points their own method would pick."""
    from tools.compare import on_own_front

    out: set[str] = set()
    for fam in {kind_of(m) for m in methods}:
        pts = {m: (R.speedup(m, prec=prec), float(np.mean(R.acc(m, prec)))) for m in methods
               if kind_of(m) == fam and R.speedup(m, prec=prec) is not None and R.acc(m, prec)}
        out |= on_own_front(pts)
    return out


def dominance_rows(R: Results, prec: str, ours: tuple[str, ...] = OURS, rivals: tuple[str, ...] = RIVALS
                   ) -> list[dict[str, Any]]:
    """Dominance both ways (tools/compare.py): for every point of either side, its *challengers* are the points
    of the other side that measure at least as fast (within the match). Each challenger's one-sided p-value of
    non-inferiority (challenger − point, ±margin) is Holm-adjusted over the point's challengers. ``status``:
    ``dominated`` when a challenger's adjusted p ≤ 0.025 and the point does not dominate it back,
    ``equivalent`` when every such challenger is dominated back (mutual dominance: neither wins), else ``no``.
    ``front``: whether the point is on its own family's front; a point off it is shown but not counted."""
    from tools.compare import LEVEL, at_least_as_fast, duel, holm

    mine = [m for m in R.methods() if in_family(m, ours)]
    theirs = [m for m in R.methods() if in_family(m, rivals)]
    front = own_fronts(R, prec, mine + theirs)
    out = []
    for side, points, challengers in (("rival", theirs, mine), ("ours", mine, theirs)):
        for b in points:
            sb = R.speedup(b, prec=prec)
            cands = []
            for a in challengers:
                sa = R.speedup(a, prec=prec)
                ca, cb = R.correct(a, prec), R.correct(b, prec)
                if sa is None or sb is None or not at_least_as_fast(sa, sb) or not (set(ca) & set(cb)):
                    continue
                cands.append({"by": a, "s_by": sa, "diff": R.diff(a, b, prec)})
            ps = [c["diff"].p_non_inferior() for c in cands]
            for c, p in zip(cands, holm([1.0 if p is None else p for p in ps]), strict=True):
                c["p_holm"] = p
                c["duel"] = duel(c["s_by"], sb, c["diff"], R.diff(b, c["by"], prec), p_adjusted=p)
            won = [c for c in cands if c["p_holm"] <= (1 - LEVEL) / 2]
            strict = [c for c in won if c["duel"] == "dominated"]
            pick = strict or won or cands
            best = min(pick, key=lambda c: (c["p_holm"], -c["diff"].mean), default=None)
            status = "dominated" if strict else "equivalent" if won else "no"
            out.append({"side": side, "point": b, "speedup": sb, "best": best, "challengers": len(cands),
                        "status": status, "dominated": status == "dominated", "front": b in front})
    return out


def render_dominance(R: Results, prec: str, ours: tuple[str, ...] = OURS, rivals: tuple[str, ...] = RIVALS) -> str:
    rows = dominance_rows(R, prec, ours, rivals)
    lines = []
    for side, title in (("rival", "Is a rival point dominated by one of ours?"),
                        ("ours", "Is one of our points dominated by a rival?")):
        lines += [f"{title}", "",
                  "| point | its speed-up | on its own front | challengers at least as fast | best challenger | its "
                  "speed-up | Δacc challenger − point, pt [95 % CI] | label (±1 pt) | Holm p, non-inferior | "
                  "dominated |", "|" + "---|" * 10]
        for r in (r for r in rows if r["side"] == side):
            c = r["best"]
            p = "–" if c is None else "no interval" if c["diff"].p_non_inferior() is None else f"{c['p_holm']:.3f}"
            st = {"dominated": "**yes**", "equivalent": "equivalent (mutual)", "no": "no"}[r["status"]]
            lines.append("| " + " | ".join([
                r["point"], f"{r['speedup']:.2f}×", "yes" if r["front"] else "**no**: not counted",
                str(r["challengers"]), c["by"] if c else "none", f"{c['s_by']:.2f}×" if c else "–",
                c["diff"].text() if c else "–", c["diff"].verdict() if c else "–", p, st]) + " |")
        lines.append("")
    verdict = []
    n_ours = sum(1 for r in rows if r["side"] == "ours" and r["front"])
    present = {kind_of(r["point"]) for r in rows if r["side"] == "rival"}
    for fam, name in ((f, rival_name(f)) for f in sorted(present, key=_order) if in_family(f, rivals)):
        pts = [r for r in rows if r["side"] == "rival" and kind_of(r["point"]) == fam]
        if not pts:
            continue
        on = [r for r in pts if r["front"]]
        off = [r["point"] for r in pts if not r["front"]]
        dom = [r["point"] for r in on if r["status"] == "dominated"]
        eq = [r["point"] for r in on if r["status"] == "equivalent"]
        back = [r["point"] for r in rows if r["side"] == "ours" and r["front"] and r["status"] == "dominated"
                and kind_of(r["best"]["by"]) == fam]
        verdict.append(f"- {prec.upper()}, {name}: {len(dom)} of the {len(on)} points on its own front dominated by "
                       "ours" + (f" ({', '.join(dom)})" if dom else "")
                       + (f", {len(eq)} equivalent to one of ours ({', '.join(eq)})" if eq else "")
                       + (f" ({', '.join(off)} off its own front, not counted)" if off else "")
                       + f"; {len(back)} of our {n_ours} points on their own fronts dominated by it"
                       + (f" ({', '.join(back)})" if back else "") + ".")
    return "\n".join(lines) + "\n" + "\n".join(verdict)


def render_pruning(R: Results) -> str:
    from tools.compare import MATCH_TOL

    pts = [m for m in R.methods() if is_pruning(m)]
    if not pts:
        return "No pruning point ran."
    lines = ["| point | target | ratio per seed | t(pruned)/t(target) in the final run, median over seeds "
             "[range] | matched (±3 %) | Δacc target − pruned fp32, pt [95 % CI] | label |", "|" + "---|" * 7]
    for m in pts:
        recs = [r for _, r in sorted(R.by_method[m].items())]
        tgt = recs[0]["target"]
        vt = [r["speedup"][R.res]["vs_target"][0] for r in recs if "vs_target" in r.get("speedup", {}).get(R.res, {})]
        med = float(np.median(vt)) if vt else float("nan")
        d = R.diff(tgt, m)
        ratios = ", ".join(f"{r['match']['ratio']:.2f}" for r in recs)
        matched = abs(med - 1) <= MATCH_TOL
        lines.append(f"| {m} | {tgt} | {ratios} | "
                     f"{med:.3f} [{min(vt):.3f}, {max(vt):.3f}] | {'yes' if matched else '**no**'} | "
                     f"{d.text()} | {d.verdict() if matched else 'not matched: no pairwise verdict'} |")
    return "\n".join(lines)


def render_ablations(R: Results) -> str:
    from tools.compare import MATCH_TOL

    b, lams = f"{R.run['ablation_budget']:g}", [f"{x:g}" for x in R.run["lambdas"]]
    lam = lams[len(lams) // 2]
    lines = ["| what A − B measures | A | speed-up A | B | speed-up B | Δacc A − B fp32, pt [95 % CI] | label |",
             "|" + "---|" * 7]
    for q, a, bb in ABLATIONS:
        a, bb = a.format(b=b, lam=lam), bb.format(b=b, lam=lam)
        ca, cb = R.correct(a, "fp32"), R.correct(bb, "fp32")
        if not (set(ca) & set(cb)):
            lines.append(f"| {q} | {a} | – | {bb} | – | not run | – |")
            continue
        d = R.diff(a, bb)
        sa, sb = R.speedup(a), R.speedup(bb)
        label = d.verdict() if abs(sa / sb - 1) <= MATCH_TOL else "latency differs: a trade-off, not a verdict"
        lines.append(f"| {q} | {a} | {sa:.2f}× | {bb} | {sb:.2f}× | {d.text()} | {label} |")
    return "\n".join(lines)


HV_READINGS = (  # (name, reference point per seed, accuracies scored): the first is the protocol's
    ("as fixed in the protocol: reference (1, 0)", None, None),
    ("[exploratory] every accuracy set to 1 (the reach in speed-up alone)", None, "ones"),
    ("[exploratory] reference at each seed's as-is accuracy − 2 pt", 0.02, None),
)


def render_fronts(R: Results) -> str:
    """Q4: the hypervolume of LUT-c_l Layer Folding's front against paper Layer Folding's, per seed (speed-ups
    of that seed's networks in the final run, accuracies of its exported files), paired over seeds with the
    crossed seed-t interval (tools/compare.paired_hv_interval); the protocol's reading and two exploratory ones
    (:data:`HV_READINGS`) that show what the difference is made of."""
    from tools.compare import hypervolume, paired_hv_interval

    lines = ["| precision | reading | HV lf-lut, mean over seeds | HV lf-uniform | Δ HV lf-lut − lf-uniform "
             "[95 % CI] | label |", "|---|---|---|---|---|---|"]
    for prec in ("fp32", "int8"):
        fronts: dict[str, dict[int, dict[str, tuple[float, np.ndarray]]]] = {}
        for fam in ("lf-lut", "lf-uniform"):
            f: dict[int, dict[str, tuple[float, np.ndarray]]] = {}
            for meth in (m for m in R.methods() if kind_of(m) == fam):
                hits = R.correct(meth, prec)
                for s, r in R.by_method[meth].items():
                    q = r.get("speedup", {}).get(R.res, {}).get(prec, {}).get("vs_fp32_asis")
                    if q is not None and s in hits:
                        f.setdefault(s, {})[meth] = (q[0], hits[s])
            fronts[fam] = f
        if not fronts["lf-lut"] or not fronts["lf-uniform"]:
            continue
        key = "onnx_acc" if prec == "fp32" else "int8_acc"
        asis = {s: r[key] for s, r in R.by_method.get("asis", {}).items() if key in r}
        for name, below_asis, acc in HV_READINGS:
            if below_asis is None:
                ref: Any = (1.0, 0.0)
            elif set(fronts["lf-lut"]) <= set(asis):
                ref = {s: (1.0, asis[s] - below_asis) for s in asis}
            else:
                continue
            score = np.ones_like if acc == "ones" else None
            d = paired_hv_interval(fronts["lf-lut"], fronts["lf-uniform"], group=R.group, ref=ref, accuracy=score)

            mean_hv = {fam: np.mean([hypervolume([(sp, 1.0 if score else float(np.mean(c))) for sp, c in fr[s].values()],
                                                 ref[s] if isinstance(ref, dict) else ref) for s in d.seeds])
                       for fam, fr in fronts.items()}
            lab = "no interval" if d.lo is None else ("LUT larger" if d.lo > 0 else "LUT smaller" if d.hi < 0 else
                                                      "not resolved")
            ci = (f"{d.mean:+.4f} (seeds: {', '.join(f'{v:+.4f}' for v in d.per_seed)})" if d.lo is None
                  else f"{d.mean:+.4f} [{d.lo:+.4f}, {d.hi:+.4f}]")
            lines.append(f"| {prec.upper()} | {name} | {mean_hv['lf-lut']:.4f} | {mean_hv['lf-uniform']:.4f} | {ci} | "
                         f"{lab} |")
    return "\n".join(lines)


def render_bases(R: Results) -> str:
    recs = [r for _, r in sorted(R.by_method.get("base", {}).items())]
    lines = ["| seed | test acc (%) | val acc over the last 5 epochs (%) | span (pt) | plateau (< 1 pt) |",
             "|---|---|---|---|---|"]
    for r in recs:
        p = r["plateau"]
        lines.append(f"| {r['seed']} | {100 * r['test_acc']:.2f} | "
                     f"{', '.join(f'{100 * v:.2f}' for v in p['last_val'])} | {p['span_pt']:.2f} | "
                     f"{'yes' if p['plateau'] else '**no**'} |")
    return "\n".join(lines)


def render_doc(root: Path) -> str:
    """The generated block of docs/method-table.md (``root`` = results/method-table) or docs/pruning.md
    (results/pruning: no paper Layer Folding, no ablations), from ``root`` only."""
    from tools.compare import MARGIN, MATCH_TOL, MIN_SEEDS, N_ITEM_DRAWS

    if not (Path(root) / "run.json").is_file():
        return (f"No results yet: `results/{Path(root).name}/run.json` is written by `tools/bench_methods.py publish` "
                "when the run's final runs are done.\n")
    R = load_results(root)
    run, sch = R.run, R.run["schedule"]
    sizes = run.get("sizes") or {}
    groups = run.get("groups") or [run]   # a run in seed groups (one machine each), or one run
    waiting = "groups" in run and sorted(run["seeds"]) != sorted(run["planned_seeds"])
    if waiting:   # the table waits for every seed (docs/evaluation.md)
        return ("\n".join([f"Generated by `python tools/regenerate.py` from `results/{Path(root).name}/`"
                           + (", **smoke**: not a result" if run.get("smoke") else "") + ".", "",
                           f"**Seeds {run['seeds']} of {run['planned_seeds']} are published.** The run is made in seed "
                           "groups, each trained and timed on one machine; the tables, the matches and the verdicts "
                           "are computed over every seed once all groups are in, and not before.", ""]
                          + [ln for g in groups for ln in
                             [f"- {_group_origin(g, str(run['resolution'])).capitalize()}.",
                              *_group_lines(g, str(run["resolution"]))]]) + "\n")
    meta = [f"Generated by `python tools/regenerate.py` from `results/{Path(root).name}/` ("
            + "; ".join(_group_origin(g, R.res) for g in groups)
            + (", **smoke**: not a result" if run.get("smoke") else "") + ").",
            "",
            f"- `{run['model']}` on `{run['task']}` @{run['resolution']} px, config `{run['config']}` with "
            f"{' '.join(f'`{kv}`' for kv in run['overrides']) or 'no overrides'}; seeds {run['seeds']}.",
            f"- Bases: {sch['base_epochs']} epochs (lr {sch['base_lr']:g}, {sch['schedule']}). Every method then gets "
            f"{sch['ft_epochs']} epochs of fine-tuning at lr {sch['ft_lr']:g} (the `fine-tuning` column says how).",
            f"- Splits: {sizes.get('train')} training / {sizes.get('val')} validation / {sizes.get('test')} test "
            f"canvases; the test split is {sizes.get('test', 0) // R.group} source digits × {R.group} canvases, the "
            f"same for every seed: **effective test size {sizes.get('test', 0) // R.group}**, one source digit = "
            f"{100 * R.group / max(1, sizes.get('test', 1)):.2f} pt.",
            f"- Intervals (amended 2026-12-02): 95 %, crossed seed-t: t over the seeds' paired "
            f"differences (df = seeds − 1) with the variance that the source digits shared by every seed add, from "
            f"resampling the digits once for all seeds (exact for accuracy; {N_ITEM_DRAWS} draws for hypervolume; "
            f"`tools/compare.py`); none with fewer than {MIN_SEEDS} seeds. Margin ±{100 * MARGIN:g} pt; equal "
            f"latency within ±{100 * MATCH_TOL:g} % (docs/evaluation.md). Dominance: Holm's correction over each "
            "point's challengers; mutual dominance is *equivalent*, not a win; a point off its own family's front "
            "is shown but not counted."]
    for g in groups:
        meta += _group_lines(g, R.res)
    out = ["\n".join(meta), "### Bases", render_bases(R), "### All points", render_table(R),
           "Speed-ups: per seed the median of per-round ratios against that seed's fp32 (or INT8) as-is network in "
           "the final run; shown as the median over seeds [min, max over seeds]. Accuracy: the exported ONNX "
           "file's (INT8: the quantised file's), mean ± sd over seeds.",
           "### Q1: ours against the alternatives, both ways"]
    for prec in ("fp32", "int8"):
        out += [f"#### {prec.upper()}", render_dominance(R, prec)]
    kinds = {kind_of(m) for m in R.methods()}
    if "lf-uniform" not in kinds:   # a run without paper Layer Folding or the ablations (the pruning run)
        out += ["### The pruning front", render_pruning(R)]
        if any(k in kinds for k in DP_ABLATIONS):
            out += ["### Q2: ablations of the DP (budget " + f"{run['ablation_budget']:g})", render_ablations(R)]
        return "\n\n".join(out) + "\n"
    out += ["#### LUT-c_l Layer Folding alone against paper Layer Folding (FP32, without the DP)",
            render_dominance(R, "fp32", ours=("lf-lut",), rivals=("lf-uniform",)),
            "### Q4: LUT c_l against uniform c_l, whole fronts",
            "Hypervolume of each family's points (λ ∈ " + ", ".join(f"{x:g}" for x in run["lambdas"]) + ") in "
            "(speed-up against fp32 as-is, accuracy) space above the reference point fixed in the protocol "
            "(speed-up 1, accuracy 0); INT8 points use INT8 accuracies and their speed-up against fp32 as-is. "
            "The interval is the crossed seed-t: one draw of source digits re-scores both fronts of every seed. "
            "No margin was fixed for a hypervolume difference, so the label only says whether the interval "
            "excludes 0. The two **[exploratory]** rows were added after the results were read (2026-12-02)"
            ": with every accuracy set to 1 the hypervolume is the reach in speed-up alone; with the "
            "reference at each seed's as-is accuracy − 2 pt (held fixed in the resampling) only points within 2 pt "
            "of as-is count.",
            render_fronts(R),
            "### The pruning front", render_pruning(R),
            "### Q2: ablations of the DP (budget " + f"{run['ablation_budget']:g})", render_ablations(R)]
    return "\n\n".join(out) + "\n"


def _main_measure(g: dict[str, Any], res: str) -> dict[str, Any]:
    """A run's (or seed group's) final run at the training resolution ``res`` (else its first)."""
    ms = g.get("measure") or {}
    return ms.get(res) or next(iter(ms.values()), {})


def _group_origin(g: dict[str, Any], res: str) -> str:
    """Which commit ran a run's (or seed group's) cells and final runs, and when."""
    m = _main_measure(g, res)
    mcommit, commit = m.get("commit"), g.get("commit") or "unknown"
    return ((f"seeds {g['seeds']}: " if "schedule" not in g else "")   # a seed group's entry (run.json's groups)
            + f"cells run by commit `{commit[:10]}`, started {g['started'][:16].replace('T', ' ')}"
            + (f"; final runs by commit `{mcommit[:10]}`" if mcommit and mcommit != commit else ""))


def _group_lines(g: dict[str, Any], res: str) -> list[str]:
    """A run's (or seed group's) machine and final runs, one bullet each."""
    grouped = "schedule" not in g   # an entry of run.json's groups
    env = _main_measure(g, res).get("environment", {})
    machine = (f"{env.get('cpu', '?')}, flags {' '.join(env.get('cpu_flags', [])) or '?'}, "
               f"{env.get('cpu_count', '?')} cores.")
    out = [f"- Seeds {g['seeds']}: machine {machine}" if grouped else f"- Machine: {machine}"]
    for r, mm in g.get("measure", {}).items():
        what = (f"inal run @{r} px: all networks fp32 and INT8 interleaved, {mm['rounds']} rounds, "
                f"{mm['seconds']:.0f} s, load average after {[round(x, 1) for x in mm['loadavg_after']]}"
                + ("; random weights (structures only)" if mm.get("random_weights") else "") + ".")
        out.append(f"- Seeds {g['seeds']}: f{what}" if grouped else f"- F{what}")
    return out


def render_summary(root: Path) -> str:
    """README's short form of the method table: the verdict lines and the ablations, from results/ only."""
    R = load_results(root)
    lines = [f"`{R.run['model']}` on `{R.run['task']}` @{R.res} px, ONNX Runtime CPU, {len(R.run['seeds'])} seeds, "
             "95 % intervals, ±1 pt margin (`docs/method-table.md`):", ""]
    for prec in ("fp32", "int8"):
        lines += [ln for ln in render_dominance(R, prec).splitlines() if ln.startswith("- ")]
    lines += ["- LUT-c_l Layer Folding alone, " + ln[2:] for ln in
              render_dominance(R, "fp32", ours=("lf-lut",), rivals=("lf-uniform",)).splitlines() if ln.startswith("- ")]
    hv: dict[str, list[list[str]]] = {}
    for ln in render_fronts(R).splitlines()[2:]:
        c = [x.strip() for x in ln.strip("|").split("|")]
        hv.setdefault(c[0], []).append(c)
    for prec, rows in hv.items():
        txt = f"- {prec}, hypervolume of the LUT-c_l front − the uniform-c_l front: {rows[0][4]} ({rows[0][5]})"
        if rows[1:]:
            txt += "; exploratory, " + "; ".join(f"{c[1].removeprefix('[exploratory] ')}: {c[4]}" for c in rows[1:])
        lines.append(txt + ".")
    for ln in render_ablations(R).splitlines()[2:]:
        c = [x.strip() for x in ln.strip("|").split("|")]
        lines.append(f"- Ablation, {c[0]}: {c[1]} − {c[3]} = {c[5]} pt ({c[6]}).")
    return "\n".join(lines) + "\n"


def pareto_figure(root: Path, path: Path) -> Path:
    """Accuracy (mean ± sd over seeds) against the measured speed-up (median over seeds, range), fp32 and INT8."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    R = load_results(root)
    fig = Figure(figsize=(11, 4.6))
    FigureCanvasAgg(fig)
    styles = {"asis": ("k", "s"), "lf-uniform": ("tab:blue", "o"), "lf-lut": ("tab:red", "D"),
              "dp": ("tab:green", "^"), "prune": ("tab:purple", "v"), "prune-local": ("tab:brown", "v"),
              "prune-e18": ("tab:pink", "v"), "prune-local-e18": ("tab:gray", "v")}
    for j, prec in enumerate(("fp32", "int8")):
        ax = fig.add_subplot(1, 2, j + 1)
        for kind, (c, mk) in styles.items():
            pts = []
            for meth in (m for m in R.methods() if kind_of(m) == kind):
                sp, acc = R.speedups(meth, R.res, prec), R.acc(meth, prec)
                if sp and acc:
                    pts.append((float(np.median(sp)), min(sp), max(sp), 100 * np.mean(acc),
                                100 * np.std(acc, ddof=1) if len(acc) > 1 else 0.0, meth))
            if not pts:
                continue
            pts.sort()
            ax.errorbar([p[0] for p in pts], [p[3] for p in pts], yerr=[p[4] for p in pts],
                        xerr=[[p[0] - p[1] for p in pts], [p[2] - p[0] for p in pts]], color=c, marker=mk,
                        linestyle="-" if len(pts) > 1 else "none", capsize=3, label=kind)
            for p in pts:
                tag = p[5].split("@")[-1] if "@" in p[5] else ("→" + p[5].split(">", 1)[1] if ">" in p[5] else "")
                if tag:
                    ax.annotate(tag, (p[0], p[3]), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel(f"speed-up vs fp32 as-is, final run @{R.res} px (median over seeds, range)")
        ax.set_ylabel(f"test accuracy {prec} (%), mean ± sd over seeds")
        ax.set_title(f"{prec.upper()}: ONNX Runtime CPU, 1 thread")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{R.run['model']} on {R.run['task']} @{R.res} px (up and right is better)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="bench_methods", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=("run", "measure", "publish", "plot", "all"))
    ap.add_argument("--runs-dir", required=True)
    ap.add_argument("--config", default=CONFIG)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    ap.add_argument("--smoke", action="store_true", help=f"tiny budgets ({SMOKE}): checks the pipeline only")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    ap.add_argument("--methods", nargs="+", default=["asis", "lf-uniform", "lf-lut", "dp", "prune", "ablations"])
    ap.add_argument("--lambdas", type=float, nargs="+", default=[1.0, 2.0, 3.0])
    ap.add_argument("--budgets", type=float, nargs="+", default=[0.6, 0.75],
                    help="DP latency budgets (fraction of as-is)")
    ap.add_argument("--ablation-budget", type=float, default=0.6, help="the budget of the DP ablations")
    ap.add_argument("--prune-targets", nargs="+", default=None,
                    help="cells whose measured latency pruning is matched to, one pruning point each "
                         "(default: lf-lut at every λ)")
    ap.add_argument("--round-to", type=int, default=8, help="pruned channel counts are multiples of this")
    ap.add_argument("--prune-arms", nargs="+", choices=PRUNE_ARMS, default=["global"],
                    help="pruning arms: global (channels ranked across the network), local (the same ratio in "
                         "every layer group); cells prune>T, prune-local>T")
    ap.add_argument("--prune-epochs", type=int, nargs="+", default=None, metavar="N",
                    help="fine-tuning epochs of the pruning arms (default: the equal budget, fold.epochs + "
                         "fold.post_epochs); e.g. 6 18 adds arms prune-e18>T beside the equal budget's")
    ap.add_argument("--match-tol", type=float, default=0.03)
    ap.add_argument("--lut", default=None, help="the device LUT (default: RUNS/lut/cpu-r<res>.json, profiled once)")
    ap.add_argument("--resolutions", type=int, nargs="+", default=None,
                    help="measure at these (default: the training resolution and 224)")
    ap.add_argument("--budget-s", type=float, default=90.0, help="time budget of each measurement run")
    ap.add_argument("--min-rounds", type=int, default=100)
    ap.add_argument("--remeasure", action="store_true")
    ap.add_argument("--workers", type=int, default=1, help="processes sharing the queue (at most 2 on 2 cores)")
    ap.add_argument("--group", action="store_true",
                    help="publish: this run is one seed group (its --seeds), trained and timed on its own machine; "
                         "the groups published before are kept")
    ap.add_argument("--results", default=None,
                    help="publish: write the raw results here (results/method-table for the docs' run); plot: read them")
    ap.add_argument("--plot", default=str(Path(__file__).resolve().parents[1] / "docs" / "method-table.png"))
    args = ap.parse_args(argv)
    lam_mid = f"{args.lambdas[len(args.lambdas) // 2]:g}"
    args.prune_targets = args.prune_targets or [f"lf-lut@{x:g}" for x in args.lambdas]
    args.methods_expanded = {"asis"} | {f"{m}@{lam_mid}" for m in args.methods}
    ctx = Ctx(args)
    args.ft_budget = ft_epochs(ctx.cfg)
    if args.prune_epochs and min(args.prune_epochs) < PRUNE_STEPS:
        ap.error(f"--prune-epochs {min(args.prune_epochs)}: each of the {PRUNE_STEPS} pruning steps needs at least "
                 f"one epoch; give {PRUNE_STEPS} or more")
    args.resolutions = args.resolutions or [ctx.cfg.data.resolution, 224]
    ctx.root.mkdir(parents=True, exist_ok=True)
    if args.stage in ("run", "all"):
        run_meta(ctx)
        if "lf-lut" in args.methods:
            ensure_lut(ctx)  # once, before any worker starts (workers would race to profile it)
        if "dp" in args.methods:
            ensure_variant_lut(ctx)
        from tools.jobqueue import spawn_workers

        spawn_workers(__file__, argv, args.stage, args.workers, lambda: run_queue(ctx))
    if args.stage in ("measure", "all"):
        for res in args.resolutions:
            measure(ctx, res)
    if args.stage in ("publish", "all", "plot") and not args.results:
        ap.error(f"{args.stage} needs --results DIR (the docs are made from results/method-table)")
    if args.stage in ("publish", "all"):
        publish(ctx, Path(args.results), group=args.group)
    if args.stage == "plot":
        pareto_figure(Path(args.results), Path(args.plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
