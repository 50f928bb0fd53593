#!/usr/bin/env python
"""E1 and E2: does measuring the device pay? The protocol is docs/evaluation.md's amendment of
2026-12-02 ("E1 and E2"), written before any of their runs; the tables go to docs/hardware-awareness.md.

A thin layer over tools/bench_methods.py: its cells (base, as-is, Layer Folding, the DP), its queue (:mod:`tools.jobqueue`:
resumable, lock files, ``--workers``) and its final interleaved run (fp32 and INT8 together) are used as they are. This
tool adds which LUT gives c_l (a *cost model*: a device profile, :data:`COST_MODELS`; ``flops`` and ``uniform``
count instead of timing, latopt/latency/backends/count.py), the DP importance computed once per seed and shared
by every cost model, E2's timing on every device, publishing and the two tables.

- **E1** (:data:`SETTINGS`; per setting, per seed): the base, ``asis`` (the base fine-tuned for the same budget),
  ``importance`` (the DP's proxy losses), and per cost model ``lf.<cost>@λ`` (Layer Folding, c_l from that LUT)
  and ``dp.<cost>@b`` (the DP on that LUT). ``measure`` times every network fp32 (target ``cpu``) and INT8
  (target ``cpu-int8``) in one interleaved run per setting. The table: accuracy at 3 speed-ups fixed by latency
  alone (:func:`fixed_speedups`), interpolated on each family's per-seed front (:func:`front_scores`).
- **E2** (setting ``s``): the DP at :data:`E2_BUDGET` from the LUTs of :data:`E2_SOURCES` (E1's cells for the
  ones E1 has, ``dp.cpu-torch@b`` besides), each network timed on every device of :data:`E2_DEVICES` in
  :data:`E2_RUNS` interleaved runs per device; per device: does each plan meet the budget there (interval over
  runs), its test accuracy, and the device's own plan against the best other plan that also meets it.

    python tools/bench_costs.py run --runs-dir DIR [--workers 2] [--experiments e1 e2]
    python tools/bench_costs.py measure --runs-dir DIR [--experiments e1 e2]
    python tools/bench_costs.py publish --runs-dir DIR --results results/hardware-awareness
    python tools/bench_costs.py choose-setting --runs-dir DIR     # the a-priori choice of the second setting
    python tools/regenerate.py                                     # docs/hardware-awareness.md's E1/E2 blocks

Each setting runs in ``DIR/<setting>/`` (bench_methods' layout there: ``cells/``, ``seed<n>/``, ``locks/``,
``lut/<cost>-r<res>.json``, ``measure-r<res>.json``); E2's timing in ``DIR/s/e2/``. A rerun skips what exists.
``--smoke`` (tests only) runs one seed on 96 images with tiny timing budgets.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):   # run as a script: the checkout's root, for tools.*
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools import bench_methods as bm  # noqa: E402 - after the checkout is on sys.path

# ------------------------------------------------------------------ the protocol (docs/evaluation.md, E1 and E2)
CONFIG = "fashion_mnist"
# The recipe, pinned here so that a change of the shipped config does not change E1: the fashion_mnist config's
# third-round optimiser and schedule (its fourth round changed strides, weight decay, warm-up and label smoothing
# while the protocol was written; not taken), on a seeded training subset (the 5,000 validation and 10,000 test
# images whole).
RECIPE = {"data.train_samples": 5000, "train.epochs": 15, "train.lr": 0.1, "train.weight_decay": 0.0005,
          "train.label_smoothing": 0.1, "train.warmup_epochs": 1, "train.schedule": "cosine",
          "train.optimizer": "sgd", "train.momentum": 0.9, "train.clip_grad": 2.0, "data.batch_size": 128,
          "data.augment": True, "fold.epochs": 1, "fold.post_epochs": 1, "fold.lr": 0.01, "fold.alpha_lr": 0.05,
          "fold.tau": 0.9, "fold.p": 2.0, "fold.mode": "exact", "dp.budget_rounds": 0}
SETTINGS = {  # name -> the model and resolution (the second, "c", where compute dominates: docs/evaluation.md)
    "s": {"model.name": "torchvision/mobilenet_v2?width=0.5", "data.resolution": 32},
    "c": {"model.name": "torchvision/mobilenet_v2?width=1.0", "data.resolution": 32},
}
SETTING_CANDIDATES = {  # the candidates for "c", chosen by choose-setting's rule before any cell ran
    "w1.0@32": {"model.name": "torchvision/mobilenet_v2?width=1.0", "data.resolution": 32},
    "w0.5@64": {"model.name": "torchvision/mobilenet_v2?width=0.5", "data.resolution": 64},
}
SEEDS = (0, 1, 2, 3, 4)
COST_MODELS = ("cpu", "cpu-int8", "flops", "uniform")   # the device profile whose LUT gives c_l
TARGETS = {"cpu": {"precision": "fp32", "other": "cpu-int8"},   # the devices timed: the final run's fp32 and
           "cpu-int8": {"precision": "int8", "other": "cpu"}}   # INT8 networks; "other": another device's LUT
LAMBDAS = (0.5, 1.0, 2.0, 4.0, 8.0)
BUDGETS = (0.5, 0.6, 0.7, 0.8)
SPEEDUP_FRACTIONS = (0.25, 0.5, 0.75)   # the fixed speed-ups: 1 + f × (S_max − 1), :func:`fixed_speedups`
MARGIN = 0.005                          # ±0.5 pt (10,000 test images: one image is 0.01 pt)
E2_SETTING, E2_BUDGET = "s", 0.7
E2_SOURCES = ("cpu", "cpu-int8", "cpu-torch", "flops")
E2_DEVICES = ("cpu", "cpu-int8", "cpu-torch")
E2_RUNS = 5
E2_POLICY = {"min_repeats": 200, "max_repeats": 1000, "budget_s": 60}
FINAL_POLICY = {"min_rounds": 300, "budget_s": 600}     # E1's final run (bench_methods.measure)
VARIANTS = bm.DP_VARIANTS
SMOKE_POLICY = {"min_repeats": 5, "max_repeats": 10, "budget_s": 1}
RESULTS_SCHEMA = "latopt.costs/1"
KINDS = {"lf": "Layer Folding", "dp": "the DP"}


def log(msg: str) -> None:
    print(f"[bench_costs {time.strftime('%H:%M:%S')} pid {os.getpid()}] {msg}", flush=True)


# ------------------------------------------------------------------ settings, contexts and cells
def setting_args(args: argparse.Namespace, setting: str) -> argparse.Namespace:
    """bench_methods' arguments for one setting: the recipe and the setting's model and resolution (then the
    user's --set), its own runs directory."""
    over = {**RECIPE, **SETTINGS[setting], **(bm.SMOKE if args.smoke else {})}
    a = argparse.Namespace(**vars(args))
    a.runs_dir = str(Path(args.runs_dir) / setting)
    a.set = [f"{k}={v}" for k, v in over.items()] + list(args.set)
    a.config, a.lut = CONFIG, None
    a.budget_s = SMOKE_POLICY["budget_s"] if args.smoke else FINAL_POLICY["budget_s"]
    a.min_rounds = SMOKE_POLICY["min_repeats"] if args.smoke else FINAL_POLICY["min_rounds"]
    a.remeasure = False
    return a


def make_ctx(args: argparse.Namespace, setting: str) -> bm.Ctx:
    ctx = bm.Ctx(setting_args(args, setting))
    ctx.root.mkdir(parents=True, exist_ok=True)
    return ctx


def lut_path(ctx: bm.Ctx, cost: str) -> Path:
    """The variant LUT (full, pw, drop) of cost model ``cost`` for the setting's model and resolution, profiled
    once (``latopt profile --device COST --variants full,pw,drop`` does the same)."""
    path = ctx.root / "lut" / f"{cost}-r{ctx.cfg.data.resolution}.json"
    if path.is_file():
        return path
    from latopt.latency.devices import load_device
    from latopt.latency.profiler import ensure_lut as profiled

    device = load_device(cost)
    if ctx.args.smoke and device.backend != "count":
        device = device.model_copy(update=SMOKE_POLICY | {"warmup": 1})
    return profiled(path, ctx.cfg.model.name, device, ctx.cfg.data.resolution, variants=VARIANTS, num_classes=10,
                    say=log)


def e1_cells(args: argparse.Namespace) -> list[tuple[str, int, list[str]]]:
    """(cell, seed, dependencies) of E1 in one setting, in the order they run: bases, then per seed the as-is
    network, the importance and every cost model's points."""
    out = [(f"s{s}-base", s, []) for s in args.seeds]
    for s in args.seeds:
        base = [f"s{s}-base"]
        out += [(f"s{s}-asis", s, base), (f"s{s}-importance", s, base)]
        for cost in args.cost_models:
            out += [(f"s{s}-lf.{cost}@{x:g}", s, base) for x in args.lambdas]
            out += [(f"s{s}-dp.{cost}@{b:g}", s, [*base, f"s{s}-importance"]) for b in args.budgets]
    return out


def e2_cells(args: argparse.Namespace) -> list[tuple[str, int, list[str]]]:
    """E2's cells that E1 does not have (the DP at E2's budget from a source E1 has no cost model for)."""
    return [(f"s{s}-dp.{src}@{args.e2_budget:g}", s, [f"s{s}-base", f"s{s}-importance"])
            for s in args.seeds for src in args.e2_sources
            if src not in args.cost_models or args.e2_budget not in args.budgets]


def e2_members(args: argparse.Namespace, seed: int) -> dict[str, str]:
    """Per E2 source, the cell of ``seed`` whose network is its plan."""
    return {src: f"s{seed}-dp.{src}@{args.e2_budget:g}" for src in args.e2_sources}


def parse_cell(cell: str) -> tuple[str, str | None, float | None]:
    """'s0-lf.flops@2' -> ('lf', 'flops', 2.0); 's0-asis' -> ('asis', None, None)."""
    method = bm.method_of(cell)
    if "." not in method:
        return method, None, None
    kind, _, rest = method.partition(".")
    cost, _, x = rest.rpartition("@")
    return kind, cost, float(x)


def cell_importance(ctx: bm.Ctx, seed: int) -> dict[str, Any]:
    """The DP's importance of the seed's base (``proxy``: validation data), once for every cost model: each
    (block, variant) candidate's validation loss increase (latopt.dp.importance.variant_losses)."""
    from latopt.dp.importance import candidates, variant_losses
    from latopt.files.checkpoint import load_checkpoint
    from latopt.latency.lut import load_lut

    base, _, _ = load_checkpoint(ctx.cell_dir(f"s{seed}-base") / "base.pt", expect_model=ctx.cfg.model.name)
    cands = candidates(load_lut(lut_path(ctx, "flops")), VARIANTS)   # which blocks allow which variant: the
    t0 = time.perf_counter()                                          # model's, the same in every LUT
    losses = variant_losses(ctx.cfg, base, ctx.task, cands, method="proxy", seed=seed, progress=True)
    return {"importance": "proxy", "losses": {str(b): ls for b, ls in sorted(losses.items())},
            "train_seconds": time.perf_counter() - t0}


def run_cell(ctx: bm.Ctx, cell: str, seed: int) -> dict[str, Any]:
    """One cell: bench_methods' base and as-is; the importance; Layer Folding or the DP with a cost model's LUT."""
    kind, cost, x = parse_cell(cell)
    if kind in ("base", "asis"):
        return bm.run_cell(ctx, cell, seed)
    if kind == "importance":
        return cell_importance(ctx, seed)
    out = ctx.cell_dir(cell)
    lut = lut_path(ctx, cost)
    if kind == "lf":
        return bm.cell_lf(ctx, seed, out, "lut", x, lut=lut) | {"cost_model": cost}
    if kind == "dp":
        losses = {int(b): ls for b, ls in ctx.queue.done(f"s{seed}-importance")["losses"].items()}
        return bm.cell_dp(ctx, seed, out, x, losses=losses, lut=lut) | {"cost_model": cost}
    raise ValueError(f"unknown cell {cell}")


def queue(args: argparse.Namespace, setting: str) -> list[tuple[str, int, list[str]]]:
    """The cells ``run`` runs in one setting, for the experiments asked."""
    cells = e1_cells(args)
    if "e2" in args.experiments and setting == args.e2_setting:
        cells += e2_cells(args)
    if "e1" not in args.experiments:   # E2 alone: only what its plans need
        need = {c for s in args.seeds for c in e2_members(args, s).values()}
        keep = need | {f"s{s}-{m}" for s in args.seeds for m in ("base", "asis", "importance")}
        cells = [c for c in cells if c[0] in keep]
    return cells


def settings_of(args: argparse.Namespace) -> list[str]:
    return [s for s in args.settings if "e1" in args.experiments or s == args.e2_setting]


def prepare(args: argparse.Namespace) -> None:
    """Every LUT the cells need and each setting's run record, before any worker starts (workers would race to
    profile a LUT, and a LUT timed beside training would be disturbed)."""
    for setting in settings_of(args):
        ctx = make_ctx(args, setting)
        for cost in ["flops", *sorted({parse_cell(c)[1] for c, _, _ in queue(args, setting)} - {None, "flops"})]:
            lut_path(ctx, cost)            # flops: also the importance's candidates
        bm.write_json(ctx.root / "bench-costs.json", run_record(args, setting))


def run(args: argparse.Namespace) -> None:
    for setting in settings_of(args):
        ctx = make_ctx(args, setting)
        cells = queue(args, setting)
        log(f"setting {setting}: {len(cells)} cells, {sum(ctx.queue.done(c) is not None for c, _, _ in cells)} done")
        bm.run_queue(ctx, cells, run_cell)


def run_record(args: argparse.Namespace, setting: str) -> dict[str, Any]:
    """What this run is: the protocol's settings as run (written before the setting's first cell, kept after)."""
    path = Path(args.runs_dir) / setting / "bench-costs.json"
    if path.is_file():
        return bm.load_json(path)
    return {"commit": bm.git_commit(Path(__file__).parent), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "smoke": bool(args.smoke), "setting": setting, "config": CONFIG,
            "overrides": setting_args(args, setting).set, "seeds": list(args.seeds),
            "cost_models": list(args.cost_models), "targets": TARGETS, "lambdas": list(args.lambdas),
            "budgets": list(args.budgets), "speedup_fractions": list(SPEEDUP_FRACTIONS), "margin": MARGIN,
            "e2": {"setting": args.e2_setting, "budget": args.e2_budget, "sources": list(args.e2_sources),
                   "devices": list(args.e2_devices), "runs": args.e2_runs}}


# ------------------------------------------------------------------ the final runs
def measure_name(res: int, seeds: list[int], group: bool) -> str:
    """The final run's record in the setting's directory: ``measure-r<res>.json``, or with ``--group`` (the
    ``--seeds`` are one group of :data:`SEEDS`: docs/evaluation.md's amendment of 2026-12-02 14:38 UTC, a
    group's cells are trained and timed on one machine, groups on different ones)
    ``measure-r<res>-seeds<a>-<b>….json``."""
    return f"measure-r{res}-seeds{'-'.join(map(str, sorted(set(seeds))))}.json" if group else f"measure-r{res}.json"


GROUP_KEYS = ("commit", "started", "overrides", "luts", "measure", "sizes")   # what differs between groups


def group_record(rec: dict[str, Any], path: Path, seeds: list[int]) -> dict[str, Any]:
    """run.json of a setting published in groups of seeds: the protocol's record with :data:`SEEDS`, and per
    group (``groups``, by seeds) what its own machine and run were; the groups already in ``path`` are kept."""
    old = bm.load_json(path) if path.is_file() else {}
    groups = [g for g in old.get("groups", []) if not set(g["seeds"]) & set(seeds)]
    groups.append({"seeds": sorted(seeds), **{k: rec.get(k) for k in GROUP_KEYS}})
    groups.sort(key=lambda g: g["seeds"])
    first = groups[0]
    return ({k: v for k, v in rec.items() if k not in GROUP_KEYS}
            | {"commit": first["commit"], "started": first["started"], "sizes": first["sizes"],
               "seeds": list(SEEDS), "groups": groups})


def measure_e1(args: argparse.Namespace) -> None:
    """Per setting (and group of seeds, ``--seeds``), every E1 network fp32 (target cpu) and INT8 (target
    cpu-int8) in one interleaved run."""
    for setting in args.settings:
        ctx = make_ctx(args, setting)
        cells = [c for c, _, _ in e1_cells(args) if parse_cell(c)[0] not in ("base", "importance")]
        mine = {c for c, _, _ in e1_cells(args)}   # a group's cells only: another group may still run
        running = [p.stem for p in (ctx.root / "locks").glob("*.lock") if p.stem in mine]
        if running:
            bm.refuse(f"setting {setting}: cells are still running ({', '.join(sorted(running))} in "
                      f"{ctx.root / 'locks'}); measure after `run`", "bench_costs")
        missing = [c for c in cells if ctx.queue.done(c) is None]
        if f"s{args.seeds[0]}-asis" in missing:
            bm.refuse(f"setting {setting}: the as-is networks are not done; run `run` first", "bench_costs")
        if missing:   # failed cells (e.g. a budget a LUT cannot reach): no point there, said in the log
            log(f"setting {setting}: {len(missing)} cells have no network and are not timed: {', '.join(missing)}")
        bm.measure(ctx, ctx.cfg.data.resolution, [c for c in cells if c not in missing],
                   name=measure_name(ctx.cfg.data.resolution, args.seeds, args.group))


def e2_network(ctx: bm.Ctx, rec: dict[str, Any], device: str, calib: np.ndarray) -> Any:
    """What device ``device`` runs of a cell: the exported ONNX file (cpu), its static INT8 file as
    bench_methods' final run makes it (cpu-int8), the same structure as a PyTorch module (cpu-torch; random
    weights: latency depends on the structure only)."""
    res = ctx.cfg.data.resolution
    if device == "cpu":
        return rec["onnx"]
    if device == "cpu-int8":
        return str(bm.quantize_int8(Path(rec["onnx"]), ctx.root / f"int8-r{res}" / f"{rec['cell']}.onnx", calib))
    if device == "cpu-torch":
        return bm.structure_net(ctx, rec["structure"], res)
    raise ValueError(f"E2 times on {', '.join(E2_DEVICES)}, not {device!r}")


def measure_e2(args: argparse.Namespace) -> None:
    """E2: on each device, the as-is network and every source's plan of every seed in one interleaved run,
    ``--e2-runs`` times (intervals over runs); the INT8 files' test correctness once."""
    from latopt.latency.devices import load_device
    from latopt.latency.profiler import measure_networks
    from latopt.latency.quantize import CALIB_IMAGES
    from latopt.latency.timing import environment_info
    from tools.compare import pack_bits

    ctx = make_ctx(args, args.e2_setting)
    res = ctx.cfg.data.resolution
    cells = {f"s{s}-asis": s for s in args.seeds} | {c: s for s in args.seeds for c in e2_members(args, s).values()}
    recs = {c: ctx.queue.done(c) for c in cells}
    missing = [c for c, r in recs.items() if r is None]
    if missing:
        bm.refuse(f"E2: {len(missing)} cells not done (e.g. {missing[0]}); run `run --experiments e2` first",
                  "bench_costs")
    calib = bm.calibration_images(ctx, CALIB_IMAGES)
    out = ctx.root / "e2"
    int8_file = out / "int8-correct.json"
    if not int8_file.is_file():
        hits = {c: bm.onnx_correct(e2_network(ctx, r, "cpu-int8", calib), ctx.task) for c, r in recs.items()}
        bm.write_json(int8_file, {c: {"int8_acc": float(h.mean()), "int8_correct": pack_bits(h)}
                                  for c, h in hits.items()})
    policy = SMOKE_POLICY if args.smoke else E2_POLICY
    for run_i in range(args.e2_runs):
        for dev in args.e2_devices:
            path = out / f"{dev}-run{run_i}.json"
            if path.is_file():
                continue
            device = load_device(dev).model_copy(update=policy)
            nets = {c: e2_network(ctx, r, dev, calib) for c, r in recs.items()}
            log(f"E2 run {run_i} on {dev}: {len(nets)} networks interleaved (load {os.getloadavg()})")
            t0 = time.perf_counter()
            stats = measure_networks(nets, device, (1, 3, res, res))
            bm.write_json(path, {"device": dev, "run": run_i, "seconds": time.perf_counter() - t0,
                                 "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "environment": environment_info(),
                                 "policy": policy, "loadavg_after": os.getloadavg(),
                                 "samples_ms": {k: s.samples_ms for k, s in stats.items()}})


# ------------------------------------------------------------------ results/ (what the tables are made from)
def _public(rec: dict[str, Any]) -> dict[str, Any]:
    """A cell record without machine paths."""
    r = {k: v for k, v in rec.items() if k not in bm.MACHINE_KEYS}
    if "structure" in r:
        r["structure"] = {k: v for k, v in r["structure"].items() if k != "module"}
    return r


def publish(args: argparse.Namespace, dest: Path) -> None:
    """``dest/e1/<setting>/`` (run.json, cells/<cell>.json with per-item correctness fp32 and INT8 and the
    speed-ups of the final run) and ``dest/e2/`` (run.json: per device and run, every network's median and its
    per-round ratio to its seed's as-is network; cells/<cell>.json). Every refusal comes before anything is
    written to ``dest``."""
    if "e1" in args.experiments:
        for setting in args.settings:
            ctx = make_ctx(args, setting)
            mpath = ctx.root / measure_name(ctx.cfg.data.resolution, args.seeds, args.group)
            if not mpath.is_file():
                bm.refuse(f"setting {setting}: no final run ({mpath.name}); run `measure` first", "bench_costs")
    if "e2" in args.experiments:
        e2_int8 = make_ctx(args, args.e2_setting).root / "e2" / "int8-correct.json"
        if not e2_int8.is_file():
            bm.refuse(f"E2: no final runs ({e2_int8}); run `measure --experiments e2` first", "bench_costs")
    if "e1" in args.experiments:
        for setting in args.settings:
            ctx = make_ctx(args, setting)
            res = ctx.cfg.data.resolution
            mpath = ctx.root / measure_name(res, args.seeds, args.group)
            ms = bm.load_json(mpath)
            d = dest / "e1" / setting
            (d / "cells").mkdir(parents=True, exist_ok=True)
            for old in (d / "cells").glob("*.json"):   # a group replaces its own seeds' cells only
                if not args.group or int(old.stem.split("-")[0][1:]) in args.seeds:
                    old.unlink()
            base_rec = None
            for c, seed, _ in e1_cells(args):
                rec = ctx.queue.done(c)
                if rec is None:
                    continue
                if c.endswith("-base"):
                    base_rec = base_rec or rec
                r = _public(rec)
                if c in ms["members"] and f"s{seed}-asis" in ms["members"]:
                    k, ka = ms["members"][c], ms["members"][f"s{seed}-asis"]
                    r["speedup"] = {prec: {"vs_fp32_asis": bm._q(bm._per_round(ms["stats"], f"{ka}|fp32", f"{k}|{prec}")),
                                           "vs_int8_asis": bm._q(bm._per_round(ms["stats"], f"{ka}|int8", f"{k}|{prec}")),
                                           "median_ms": ms["stats"][f"{k}|{prec}"]["median_ms"]}
                                    for prec in ("fp32", "int8")}
                    r["int8_acc"], r["int8_correct"] = ms["int8_acc"][c], ms["int8_correct"][c]
                bm.write_json(d / "cells" / f"{c}.json", r)
            luts = {}
            for p in sorted((ctx.root / "lut").glob("*.json")):
                lut = bm.load_json(p)
                luts[p.stem] = {"device": lut.get("device"), "created": lut.get("created"),
                                "profiling_s": lut.get("profiling_s"), "costs": lut.get("costs"),
                                "held_out_error": lut.get("end_to_end", {}).get("held-out", {}).get("error")}
            rec = {
                "schema": RESULTS_SCHEMA, **run_record(args, setting), "model": ctx.cfg.model.name,
                "task": ctx.cfg.data.task, "resolution": res, "sizes": (base_rec or {}).get("sizes"),
                "schedule": {"base_epochs": ctx.cfg.train.epochs, "ft_epochs": bm.ft_epochs(ctx.cfg),
                             "prefold_epochs": ctx.cfg.fold.epochs, "postfold_epochs": ctx.cfg.fold.post_epochs,
                             "ft_lr": ctx.cfg.fold.lr, "train_samples": ctx.cfg.data.train_samples},
                "luts": luts, "measure": {k: v for k, v in ms.items()
                                          if k not in ("stats", "members", "int8_acc", "int8_correct")}}
            if args.group:
                rec = group_record(rec, d / "run.json", args.seeds)
            bm.write_json(d / "run.json", rec)
            log(f"wrote {d}")
    if "e2" in args.experiments:
        ctx = make_ctx(args, args.e2_setting)
        src = ctx.root / "e2"
        int8 = bm.load_json(src / "int8-correct.json")
        d = dest / "e2"
        (d / "cells").mkdir(parents=True, exist_ok=True)
        for old in (d / "cells").glob("*.json"):
            old.unlink()
        members = {s: e2_members(args, s) for s in args.seeds}
        cells = [f"s{s}-asis" for s in args.seeds] + [c for s in args.seeds for c in members[s].values()]
        for c in cells:
            bm.write_json(d / "cells" / f"{c}.json", _public(ctx.queue.done(c)) | int8[c])
        timing = []
        for p in sorted(src.glob("*-run*.json")):
            t = bm.load_json(p)
            st = t["samples_ms"]
            ratios = {c: bm._q([x / y for x, y in zip(st[c], st[f"s{int(c[1:].split('-')[0])}-asis"], strict=True)])
                      for c in st}
            timing.append({k: t[k] for k in ("device", "run", "seconds", "finished", "environment", "policy",
                                              "loadavg_after")}
                          | {"median_ms": {c: float(np.median(v)) for c, v in st.items()}, "ratio_to_asis": ratios,
                             "rounds": len(next(iter(st.values())))})
        bm.write_json(d / "run.json", {"schema": RESULTS_SCHEMA, **run_record(args, args.e2_setting),
                                       "model": ctx.cfg.model.name, "resolution": ctx.cfg.data.resolution,
                                       "members": {str(s): m for s, m in members.items()}, "timing": timing})
        log(f"wrote {d}")


# ------------------------------------------------------------------ E1's table (from results/ only)
def fixed_speedups(fastest: dict[str, list[float]], fractions: tuple[float, ...] = SPEEDUP_FRACTIONS
                   ) -> list[float] | None:
    """The fixed speed-ups of one (setting, target, method): ``S_max`` is the slowest of the fastest points,
    over the families (cost models) and seeds (``fastest[family]``: per seed, its fastest measured speed-up);
    the speed-ups are ``1 + f × (S_max − 1)`` for each fraction f. Latency alone: no accuracy is read. None
    when some family never gets faster than as-is."""
    s_max = min(min(v) for v in fastest.values())
    if s_max <= 1.0:
        return None
    return [1 + f * (s_max - 1) for f in fractions]


def front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points (speed-up, validation accuracy) that no other point dominates (at least as fast
    and as accurate, one of them strictly), by speed-up."""
    keep = [i for i, (s, v) in enumerate(points)
            if not any((s2 >= s and v2 >= v and (s2 > s or v2 > v)) for s2, v2 in points)]
    return sorted(keep, key=lambda i: points[i][0])


def front_scores(points: list[tuple[float, float, np.ndarray]], at: float) -> np.ndarray | None:
    """Per test item, the accuracy of one family's per-seed front at speed-up ``at``: ``points`` are
    (measured speed-up, validation accuracy, per-item correctness) of the family's networks and the as-is
    network (speed-up 1). The front is chosen on validation accuracy (:func:`front`); between its two points
    whose speed-ups bracket ``at`` the correctness vectors are interpolated linearly in speed-up (a fraction per
    item); below its slowest point that point's; None beyond its fastest (the family does not reach ``at``)."""
    idx = front([(s, v) for s, v, _ in points])
    sp = [points[i][0] for i in idx]
    if at > sp[-1]:
        return None
    if at <= sp[0]:
        return points[idx[0]][2].astype(float)
    j = next(k for k in range(1, len(sp)) if sp[k] >= at)
    s0, s1 = sp[j - 1], sp[j]
    w = (s1 - at) / (s1 - s0)
    return w * points[idx[j - 1]][2].astype(float) + (1 - w) * points[idx[j]][2].astype(float)


class E1:
    """results/hardware-awareness/e1/<setting> read back."""

    def __init__(self, root: Path) -> None:
        from tools.compare import unpack_bits

        self.run = bm.load_json(root / "run.json")
        self.cells = {p.stem: bm.load_json(p) for p in sorted((root / "cells").glob("*.json"))}
        self._unpack = unpack_bits

    def correct(self, cell: str, prec: str) -> np.ndarray:
        r = self.cells[cell]
        return self._unpack(r["onnx_correct" if prec == "fp32" else "int8_correct"], r["test_samples"])

    def points(self, kind: str, cost: str, seed: int, target: str) -> list[tuple[float, float, np.ndarray]]:
        """(speed-up on ``target``, validation accuracy, per-item correctness) of the family's networks of
        ``seed``, and the as-is network's (speed-up 1)."""
        prec = TARGETS[target]["precision"]
        ref = f"vs_{prec}_asis"
        out = []
        asis = self.cells.get(f"s{seed}-asis")
        if asis is not None and "speedup" in asis:
            out.append((1.0, asis["val_acc"], self.correct(f"s{seed}-asis", prec)))
        for c, r in self.cells.items():
            k, cm, _ = parse_cell(c)
            if k == kind and cm == cost and int(r["seed"]) == seed and "speedup" in r:
                out.append((r["speedup"][prec][ref][0], r["val_acc"], self.correct(c, prec)))
        return out


def e1_analysis(E: E1, target: str, kind: str) -> dict[str, Any]:
    """One (setting, target, method): the fixed speed-ups, every family's per-seed scores there, and the
    own LUT's paired differences against each other cost model (compare.paired_interval: crossed seed-t)."""
    from tools.compare import paired_interval

    seeds = E.run["seeds"]
    fams = {"own": target, "other": TARGETS[target]["other"], "flops": "flops", "uniform": "uniform"}
    fams = {k: v for k, v in fams.items() if v in E.run["cost_models"]}
    pts = {f: {s: E.points(kind, cm, s, target) for s in seeds} for f, cm in fams.items()}
    pts = {f: {s: p for s, p in v.items() if len(p) > 1} for f, v in pts.items()}
    out: dict[str, Any] = {"families": fams, "speedups": None, "reach": {}, "rows": {}}
    if "own" not in pts or any(not v for v in pts.values()):
        return out
    fastest = {f: [max(x[0] for x in p) for p in v.values()] for f, v in pts.items()}
    out["reach"] = {f: float(np.median(v)) for f, v in fastest.items()}
    sps = fixed_speedups(fastest)
    out["speedups"] = sps
    if sps is None:
        return out
    for f in fams:
        row = []
        for at in sps:
            sc = {s: front_scores(p, at) for s, p in pts[f].items()}
            sc = {s: v for s, v in sc.items() if v is not None}
            acc = float(np.mean([v.mean() for v in sc.values()])) if sc else None
            diff = None
            if f != "own" and sc:
                own = {s: front_scores(p, at) for s, p in pts["own"].items()}
                own = {s: v for s, v in own.items() if v is not None}
                if set(own) & set(sc):
                    diff = paired_interval(own, sc)
            row.append({"at": at, "acc": acc, "seeds": len(sc), "own_minus": diff})
        out["rows"][f] = row
    return out


def _label(d: Any) -> str:
    return "–" if d is None else d.verdict(MARGIN)


def claim(a: dict[str, Any], j: int) -> str:
    """The central claim at the j-th fixed speed-up: the own LUT *beats* FLOPs and uniform when both
    differences are "better" by the margin (interval above +0.5 pt)."""
    labs = [_label(a["rows"].get(f, [{}] * 3)[j].get("own_minus")) for f in ("flops", "uniform")]
    if all(x == "better" for x in labs):
        return "**holds**"
    if any(x in ("worse", "not better") for x in labs):
        return "does not hold (a device-blind model is as good or better)"
    if all(x == "as accurate" for x in labs):
        return "does not hold (equivalent within ±0.5 pt)"
    return "not shown"


NOT_RUN = ("{what} has not run yet: there is no `results/hardware-awareness/{where}/` (docs/evaluation.md, the "
           "amendment of 2026-12-02, has its protocol and commands).\n")


def render_bases(E: E1) -> str:
    """The per-base plateau report of docs/evaluation.md §3 (reported, not enforced, in E1): each seed's base test
    accuracy and its validation accuracy over the last :data:`bm.PLATEAU_EPOCHS` epochs (the cell's ``plateau``
    record, else its ``curve``); empty when no base cell is published."""
    rows = []
    for s in E.run["seeds"]:
        r = E.cells.get(f"s{s}-base")
        if r is None or ("plateau" not in r and "curve" not in r):
            continue
        p = r.get("plateau") or bm.plateau(r["curve"])
        rows.append(f"| {s} | {100 * r['test_acc']:.2f} | {', '.join(f'{100 * v:.2f}' for v in p['last_val'])} | "
                    f"{p['span_pt']:.2f} | {'yes' if p['plateau'] else '**no**'} |")
    if not rows:
        return ""
    n = sum(row.endswith("| yes |") for row in rows)
    return (f"Bases: the plateau of `docs/evaluation.md` §3 (validation accuracy over the last {bm.PLATEAU_EPOCHS} "
            f"epochs within {bm.PLATEAU_PT:g} pt), reported per base and not enforced (the schedule is fixed); "
            f"{n} of {len(rows)} bases reached it.\n\n"
            f"| seed | base test acc (%) | val acc over the last {bm.PLATEAU_EPOCHS} epochs (%) | span (pt) | "
            f"plateau (< {bm.PLATEAU_PT:g} pt) |\n|---|---|---|---|---|\n" + "\n".join(rows))


def render_e1(results: Path) -> str:
    """docs/hardware-awareness.md's E1 block, from results/hardware-awareness/e1/ only."""
    root = Path(results) / "e1"
    if not root.is_dir():
        return NOT_RUN.format(what="E1", where="e1")
    out = []
    names = {"own": "own LUT", "other": "other device's LUT", "flops": "FLOPs", "uniform": "uniform"}
    for sdir in sorted(p for p in root.iterdir() if (p / "run.json").is_file()):
        E = E1(sdir)
        run = E.run
        sch = run["schedule"]
        sizes = run.get("sizes") or {}
        out.append(f"#### Setting `{run['setting']}`: `{run['model']}` @{run['resolution']} px on `{run['task']}`"
                   + (" — **smoke**: not a result" if run.get("smoke") else ""))
        groups = run.get("groups") or [{"seeds": run["seeds"], **run}]
        published = sorted(x for g in groups for x in g["seeds"])
        if published != sorted(run["seeds"]):
            out.append(f"Seeds {published} of {run['seeds']} are published (docs/evaluation.md's amendment of "
                       "2026-12-02 14:38 UTC: the seeds run in groups, one machine each). The table waits for "
                       "every seed.")
            continue
        timed = "; ".join(
            (f"seeds {g['seeds']}: c" if len(groups) > 1 else "C")
            + f"ells by commit `{(g.get('commit') or 'unknown')[:10]}`, started {g['started'][:16]}; final run "
              f"(every network fp32 and INT8 interleaved) {g['measure'].get('rounds')} rounds, "
              f"{g['measure'].get('seconds', 0):.0f} s; machine {bm.machine(g['measure'].get('environment', {}))}"
            for g in groups)
        out.append(f"Seeds {run['seeds']}; {sizes.get('train')} training / {sizes.get('val')} validation / "
                   f"{sizes.get('test')} test images; bases {sch['base_epochs']} epochs; every network then "
                   f"{sch['ft_epochs']} epochs of fine-tuning at lr {sch['ft_lr']:g} (Layer Folding "
                   f"{sch['prefold_epochs']} pre-fold + {sch['postfold_epochs']} post-fold; the DP and as-is "
                   f"{sch['ft_epochs']} direct). λ ∈ {{{', '.join(f'{x:g}' for x in run['lambdas'])}}}, budgets "
                   f"{{{', '.join(f'{x:g}' for x in run['budgets'])}}}. "
                   + (f"Each group of seeds on its own machine: {timed}." if len(groups) > 1 else f"{timed}."))
        bases = render_bases(E)
        if bases:
            out.append(bases)
        for target in TARGETS:
            for kind in KINDS:
                a = e1_analysis(E, target, kind)
                title = f"##### target `{target}`, {KINDS[kind]} (own LUT: `{target}`, other: `{TARGETS[target]['other']}`)"
                if a["speedups"] is None:
                    why = ("some family never measured faster than as-is" if a["reach"] else
                           "not every cost model has finished points")
                    out += [title, f"No fixed speed-ups: {why}."]
                    continue
                sps = a["speedups"]
                head = ("| cost model | reach (median fastest) | "
                        + " | ".join(f"acc @{s:.3f}× | own − it, pt [95 % CI] | label" for s in sps) + " |")
                lines = [head, "|" + "---|" * (2 + 3 * len(sps))]
                for f, row in a["rows"].items():
                    cellv = []
                    for x in row:
                        acc = "–" if x["acc"] is None else f"{100 * x['acc']:.2f} ({x['seeds']} seeds)"
                        d = x["own_minus"]
                        cellv += [acc, "–" if d is None else d.text(), _label(d)]
                    lines.append(f"| {names[f]} (`{a['families'][f]}`) | {a['reach'][f]:.2f}× | "
                                 + " | ".join(cellv) + " |")
                lines.append("| " + " | ".join(["**claim**: own beats FLOPs and uniform", ""]
                                               + [x for j in range(len(sps)) for x in ("", "", claim(a, j))]) + " |")
                out += [title, "\n".join(lines)]
    out.append("Accuracy at a fixed speed-up: per seed, the family's networks and the as-is network (speed-up 1) "
               "in (speed-up measured on the target in the final run, validation accuracy); the front is the points "
               "no other point dominates on validation; between the two front points that bracket the speed-up, "
               "each test item's correctness is interpolated linearly in speed-up (below the slowest front point, "
               "that point's); a family that does not reach the speed-up on a seed has no value there. The fixed "
               "speed-ups are 1 + f × (S_max − 1), f ∈ {" + ", ".join(f"{f:g}" for f in SPEEDUP_FRACTIONS)
               + "}, with S_max the slowest fastest point over the cost models and seeds (latency only). "
               "Intervals: `tools/compare.py`'s `paired_interval` (crossed seed-t: the seeds' t interval with the "
               "variance of the test items shared by all seeds), 95 %; labels by the ±0.5 pt margin. The claim "
               "holds at a speed-up when the own LUT is *better* (interval above +0.5 pt) than both FLOPs and "
               "uniform.")
    return "\n\n".join(out) + "\n"


# ------------------------------------------------------------------ E2's matrix (from results/ only)
def e2_speedups(run: dict[str, Any], dev: str, src: str, seeds: list[int]) -> dict[str, Any] | None:
    """On ``dev``: per run, the geometric mean over seeds of the per-round median t(as-is)/t(plan); the
    t interval over runs (compare.t_interval, on the log); and per seed, the median over runs."""
    from tools.compare import t_interval

    per_run, per_seed = [], {s: [] for s in seeds}
    for t in (t for t in run["timing"] if t["device"] == dev):
        logs = []
        for s in seeds:
            c = run["members"][str(s)][src]
            r = t["ratio_to_asis"].get(c)
            if r is None:
                break
            logs.append(-math.log(r[0]))
            per_seed[s].append(1 / r[0])
        else:
            per_run.append(float(np.mean(logs)))
    if not per_run:
        return None
    if len(per_run) >= 2:
        m, lo, hi, _, _ = t_interval(per_run)
        ci = (math.exp(m), math.exp(lo), math.exp(hi))
    else:
        ci = (math.exp(per_run[0]), None, None)
    return {"speedup": ci, "runs": len(per_run), "per_seed": {s: float(np.median(v)) for s, v in per_seed.items() if v}}


def render_e2(results: Path) -> str:
    """docs/hardware-awareness.md's E2 block, from results/hardware-awareness/e2/ only."""
    from tools.compare import paired_interval, unpack_bits

    root = Path(results) / "e2"
    if not root.is_dir():
        return NOT_RUN.format(what="E2", where="e2")
    run = bm.load_json(root / "run.json")
    cells = {p.stem: bm.load_json(p) for p in sorted((root / "cells").glob("*.json"))}
    e2 = run["e2"]
    b, seeds, sources, devices = e2["budget"], run["seeds"], e2["sources"], e2["devices"]
    need = 1 / b

    def correct(src: str, dev: str) -> dict[int, np.ndarray]:
        key = "int8_correct" if dev == "cpu-int8" else "onnx_correct"
        return {s: unpack_bits(cells[c][key], cells[c]["test_samples"])
                for s in seeds if (c := run["members"][str(s)][src]) in cells}

    env = next((t["environment"] for t in run["timing"]), {})
    out = [f"`{run['model']}` @{run['resolution']} px (E1's setting `{e2['setting']}`, the same bases, importance and "
           f"fine-tuning), the DP at budget {b:g} of each source's LUT-predicted as-is cost; "
           f"{e2['runs']} interleaved runs per device; seeds {seeds}"
           + (" — **smoke**: not a result" if run.get("smoke") else "")
           + f". Machine {bm.machine(env)}."]
    head = ("| measured on ↓ / plan from → | " + " | ".join(sources)
            + " | own plan − best other plan that meets the budget, pt [95 % CI] | label |")
    lines = [head, "|" + "---|" * (len(sources) + 3)]
    for dev in devices:
        row, meets, acc = [], {}, {}
        for src in sources:
            sp = e2_speedups(run, dev, src, seeds)
            hits = correct(src, dev)
            acc[src] = float(np.mean([h.mean() for h in hits.values()])) if hits else None
            if sp is None:
                row.append("not run")
                continue
            m, lo, hi = sp["speedup"]
            if lo is None:
                verdict = "meets" if m >= need else "misses"
                ci = f"{m:.2f}×"
            else:
                verdict = "meets" if lo >= need else "misses" if hi < need else "at the budget"
                ci = f"{m:.2f}× [{lo:.2f}, {hi:.2f}]"
            k = sum(v >= need for v in sp["per_seed"].values())
            meets[src] = verdict == "meets"
            txt = (f"{ci}, {verdict} ({k}/{len(sp['per_seed'])} seeds); acc "
                   + ("–" if acc[src] is None else f"{100 * acc[src]:.2f}"))
            row.append(f"**{txt}**" if src == dev else txt)
        rivals = [s for s in sources if s != dev and meets.get(s) and acc.get(s) is not None]
        if dev not in sources:
            cmp_, lab = "no own plan", "–"
        elif not meets.get(dev):
            cmp_, lab = "own plan does not meet the budget", "–"
        elif not rivals:
            cmp_, lab = "no other plan meets it", "own plan the only one"
        else:
            best = max(rivals, key=lambda s: acc[s])
            d = paired_interval(correct(dev, dev), correct(best, dev))
            cmp_, lab = f"vs `{best}`: {d.text()}", d.verdict(MARGIN)
        lines.append(f"| {dev} | " + " | ".join(row) + f" | {cmp_} | {lab} |")
    out.append("\n".join(lines))
    out.append(f"Each cell: the plan's speed-up over the as-is network of its seed on that device (per run the "
               f"geometric mean over seeds of the median per-round ratio; the mean over runs with a t interval over "
               f"runs, `tools/compare.py`'s `t_interval`, on the log); *meets* when the interval's lower end reaches "
               f"1/{b:g} = {need:.3f}×, *misses* when its upper end is below, else *at the budget*; the seeds whose "
               "median over runs reaches it; the mean test accuracy over seeds (the INT8 file's on `cpu-int8`, the "
               "fp32 ONNX file's elsewhere). Last columns: the device's own plan against the other plan with the "
               "highest mean accuracy among those that meet the budget there (the strongest rival), paired over "
               "seeds (`paired_interval`, crossed seed-t, 95 %), labelled by the ±0.5 pt margin.")
    return "\n\n".join(out) + "\n"


# ------------------------------------------------------------------ the a-priori choice of the second setting
def compute_share(cpu_lut: Any, count_lut: Any) -> dict[str, float]:
    """How much of the as-is network's time on the cpu LUT follows its MACs: the least-squares line
    t_l = a + k·MACs_l over the blocks (as-is times of the cpu LUT, MACs of the flops LUT); the compute share
    is k·ΣMACs / Σt, the overhead share n·a / Σt, and their ratio the FLOPs/overhead ratio."""
    t = np.array([b.ms["none"] for b in cpu_lut.blocks])
    m = np.array([b.ms["none"] for b in count_lut.blocks])
    k, a = np.polyfit(m, t, 1)
    total = float(t.sum())
    comp, over = float(k * m.sum()) / total, float(a * len(t)) / total
    return {"compute_share": comp, "overhead_share": over, "flops_overhead_ratio": comp / over if over > 0 else math.inf,
            "asis_ms": float(t.sum()), "mmacs": float(m.sum()), "slope_ms_per_mmac": float(k), "intercept_ms": float(a)}


SETTING_TIE = 0.10
CHOICE_RULE = ("the candidate with the highest FLOPs/overhead ratio; among those within 10 % of it, the one with "
               "the fewest MACs (the cheaper to train)")


def choose_setting(args: argparse.Namespace) -> dict[str, Any]:
    """Profile the cpu and flops LUTs of each candidate (and of setting ``s``, for reference) and pick one by
    :data:`CHOICE_RULE` (:func:`compute_share`). No training, no accuracy."""
    from latopt.latency.lut import load_lut

    out = {}
    for name, over in {"s": SETTINGS["s"], **SETTING_CANDIDATES}.items():
        a = argparse.Namespace(**vars(args))
        ctx = bm.Ctx(setting_args(a, "s"))
        ctx.cfg = ctx.cfg.with_overrides(over)
        ctx.root = Path(args.runs_dir) / "choose-setting" / name.replace("@", "_")
        share = compute_share(load_lut(lut_path(ctx, "cpu")), load_lut(lut_path(ctx, "flops")))
        out[name] = {"overrides": over, **share}
        log(f"{name}: {json.dumps(out[name])}")
    cands = {k: v for k, v in out.items() if k != "s"}
    best = max(v["flops_overhead_ratio"] for v in cands.values())
    near = {k: v for k, v in cands.items() if v["flops_overhead_ratio"] >= (1 - SETTING_TIE) * best}
    choice = min(near, key=lambda k: near[k]["mmacs"])
    rec = {"candidates": out, "choice": choice, "rule": CHOICE_RULE}
    bm.write_json(Path(args.runs_dir) / "choose-setting" / "choice.json", rec)
    print(json.dumps(rec, indent=1))
    return rec


# ------------------------------------------------------------------ main
def check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Bad input: one line, exit 2, before anything is written."""
    from latopt.errors import LatoptError, first_line
    from latopt.latency.devices import load_device

    for name in dict.fromkeys([*args.cost_models, *args.e2_sources]):
        try:
            load_device(name)
        except LatoptError as e:
            ap.error(f"cost model {name!r}: {first_line(e)}")
    for flag, vals in (("--seeds", args.seeds), ("--cost-models", args.cost_models), ("--lambdas", args.lambdas),
                       ("--budgets", args.budgets), ("--e2-sources", args.e2_sources)):
        if len(set(vals)) != len(vals):
            ap.error(f"{flag} lists a value twice: {vals}")
    if any(s < 0 for s in args.seeds):
        ap.error(f"--seeds must be ≥ 0, got {args.seeds}")
    if any(not 0 < b <= 1 for b in [*args.budgets, args.e2_budget]):
        ap.error(f"budgets are fractions of the as-is cost in (0, 1], got {args.budgets} and {args.e2_budget}")
    if any(not x > 0 for x in args.lambdas):
        ap.error(f"--lambdas must be > 0, got {args.lambdas}")
    if args.e2_runs < 1 or args.workers < 1:
        ap.error("--e2-runs and --workers must be ≥ 1")
    if "e1" in args.experiments:
        missing = [t for t in TARGETS if t not in args.cost_models and not args.smoke]
        if missing:
            ap.error(f"E1 needs the targets' own LUTs among --cost-models: add {' '.join(missing)}")


def main(argv: list[str] | None = None) -> int:
    ap = bm.Parser(prog="bench_costs", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=("run", "measure", "publish", "choose-setting", "all"))
    ap.add_argument("--runs-dir", required=True)
    ap.add_argument("--experiments", nargs="+", choices=("e1", "e2"), default=["e1", "e2"])
    ap.add_argument("--settings", nargs="+", choices=tuple(SETTINGS), default=list(SETTINGS))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="config override after the protocol's (not for the experiments' runs)")
    ap.add_argument("--smoke", action="store_true", help="tests only: one seed, 96 images, tiny timing budgets")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    ap.add_argument("--group", action="store_true",
                    help="measure/publish: the --seeds are one group of the protocol's seeds, trained and timed on "
                         "this machine (its own final run, measure-r<res>-seeds<…>.json); publish adds the group "
                         "beside those already published (docs/evaluation.md, amendment of 2026-12-02 14:38 UTC)")
    ap.add_argument("--cost-models", nargs="+", default=list(COST_MODELS))
    ap.add_argument("--lambdas", type=float, nargs="+", default=list(LAMBDAS))
    ap.add_argument("--budgets", type=float, nargs="+", default=list(BUDGETS))
    ap.add_argument("--e2-budget", type=float, default=E2_BUDGET)
    ap.add_argument("--e2-sources", nargs="+", default=list(E2_SOURCES))
    ap.add_argument("--e2-devices", nargs="+", choices=E2_DEVICES, default=list(E2_DEVICES))
    ap.add_argument("--e2-runs", type=int, default=E2_RUNS)
    ap.add_argument("--workers", type=int, default=1, help="processes sharing the queue (at most 2 on 2 cores)")
    ap.add_argument("--results", default=None, help="publish: results/hardware-awareness for the docs")
    args = ap.parse_args(argv)
    args.e2_setting = E2_SETTING
    if args.stage in ("publish", "all") and not args.results:
        ap.error(f"{args.stage} needs --results DIR (results/hardware-awareness for the docs)")
    check_args(ap, args)
    if args.group and (args.experiments != ["e1"] or not set(args.seeds) < set(SEEDS)):
        ap.error(f"--group is for E1 (--experiments e1) and --seeds a part of {list(SEEDS)}; "
                 f"got --experiments {' '.join(args.experiments)} --seeds {' '.join(map(str, args.seeds))}")
    Path(args.runs_dir).mkdir(parents=True, exist_ok=True)
    if args.stage == "choose-setting":
        choose_setting(args)
        return 0
    if args.stage in ("run", "all"):
        prepare(args)
        from tools.jobqueue import spawn_workers

        spawn_workers(__file__, argv, args.stage, args.workers, lambda: run(args))
    if args.stage in ("measure", "all"):
        if "e1" in args.experiments:
            measure_e1(args)
        if "e2" in args.experiments:
            measure_e2(args)
    if args.stage in ("publish", "all"):
        publish(args, Path(args.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
