#!/usr/bin/env python
"""Against what a user would pick instead: latopt's main job on ``fashion_mnist`` beside a narrower network
trained from scratch, the fair pruning arm, Layer Folding and ONNX Runtime INT8, at the measured latency of the
network latopt ships. The protocol is docs/rivals.md, written before the runs.

    python tools/bench_rivals.py run --runs-dir DIR --seeds 0 [--smoke]   # resumable; twice side by side: 2 cores
    python tools/bench_rivals.py measure --runs-dir DIR --seeds 0 [--smoke]
    python tools/bench_rivals.py publish --runs-dir DIR --seeds 0 [--results results/rivals]

Cells (:class:`tools.jobqueue.JobQueue` under DIR, shared by the processes that run them; a finished cell is
skipped), per seed S: ``sS-main`` (``latopt run``: the main job, its shipped network re-exported here with its
per-image test correctness), ``sS-base`` (the main job's base, exported: the as-is network), ``sS-lf-lut@λ``
(:func:`tools.bench_methods.cell_lf`), ``sS-prune-e10>main`` (:func:`tools.bench_methods.cell_prune`, matched to
the main job's network) and ``sS-narrow>main`` (:func:`cell_narrow`). ``measure`` times one seed group's networks,
fp32 and INT8, in one interleaved run (:func:`tools.bench_methods.measure`); ``publish`` writes the group's
records (no machine paths) into ``results/rivals/`` beside the groups published before; :func:`render` makes
docs/rivals.md's block from them.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools import bench_methods as bm  # noqa: E402 - after the checkout is on sys.path
from tools import bench_promises as bp  # noqa: E402

PROG = "bench_rivals"
CONFIG = "fashion_mnist"
LAMBDAS = (1.0, 2.0, 3.0)
PRUNE_EPOCHS = 10            # the shipped DP candidate's fine-tuning: fold.post_epochs 2 + dp.refine_epochs 8
WIDTHS = [round(0.2 + 0.025 * k, 3) for k in range(13)]   # 0.20 .. 0.50
WIDTHS_SMOKE = [0.25, 0.5]
MATCH = 0.03
SCHEMA = "latopt.rivals/1"
TARGET = "main"
OURS = "latopt (main job)"
LF_BEST = "Layer Folding's best"   # one arm across seeds, whatever λ it picked at each
MIN_SEEDS = 3                # the protocol's: fewer seeds give per-seed differences, no interval


def log(msg: str) -> None:
    print(f"[{PROG} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def ctx_of(args: argparse.Namespace) -> bm.Ctx:
    """bench_methods' context (its config, task, queue and settings) for this run's cells."""
    ns = argparse.Namespace(runs_dir=args.runs_dir, config=CONFIG, set=[], smoke=args.smoke, lut=None,
                            round_to=8, match_tol=MATCH, remeasure=False, budget_s=90.0,
                            min_rounds=20 if args.smoke else 1000, seeds=args.seeds)
    return bm.Ctx(ns)


def prune_cell() -> str:
    return f"{bm.prune_kind('global', PRUNE_EPOCHS, -1)}>{TARGET}"


def cells(seeds: list[int]) -> list[tuple[str, int, list[str]]]:
    """(cell, seed, dependencies): the main job first (its base is everyone's), then the rivals."""
    out: list[tuple[str, int, list[str]]] = []
    for s in seeds:
        main, base = f"s{s}-{TARGET}", f"s{s}-base"
        out += [(main, s, []), (base, s, [main]), (f"s{s}-narrow>{TARGET}", s, [main])]
        out += [(f"s{s}-{prune_cell()}", s, [base, main])]
        out += [(f"s{s}-lf-lut@{lam:g}", s, [base]) for lam in LAMBDAS]
    return out


def cell_main(ctx: bm.Ctx, q_root: Path, seed: int, out: Path) -> dict[str, Any]:
    """``latopt run --config fashion_mnist --seed S`` in ``DIR/main-sS`` (a finished run is reused stage by
    stage): its record (:func:`tools.bench_promises.accuracy_record`) and its shipped network exported here."""
    from latopt.run import run_main
    from latopt.run.run_record import SearchPick

    config: Any = CONFIG
    if ctx.args.smoke:
        from latopt.config import write_config

        config = q_root / "configs" / f"{CONFIG}-smoke.yaml"
        if not config.is_file():
            write_config(ctx.cfg.with_overrides({**bp.SMOKE_RUN, "device": smoke_device(q_root)}), config)
    r = run_main(config, runs_dir=q_root / f"main-s{seed}", seed=seed)
    rec = bp.accuracy_record(r.root, CONFIG, seed)
    search = SearchPick.read(bm.load_json(r.root / "run.json")["stages"]["search"])
    assert search is not None
    shipped = Path(search.checkpoint) if search.checkpoint else r.root / "base" / "base.pt"
    if not shipped.is_absolute():
        shipped = r.root / shipped
    fold = dict(search.fold_set or {}) if search.checkpoint else {}
    exp = bm.export_cell(shipped, out / "export", ctx.task)
    return {**rec, **exp, "run_seconds": round(r.seconds, 1), "run_dir": str(r.root),
            "test_acc": rec["trial_test_acc"], "val_acc": search.val_acc,
            "fine_tuning_epochs": ctx.cfg.fold.post_epochs + (ctx.cfg.dp.refine_epochs
                                                              if search.trial in (search.refined or []) else 0),
            "structure": {"kind": "fold", "plan": fold} if fold else {"kind": "asis"}}


def smoke_device(root: Path) -> str:
    q = argparse.Namespace(root=root, smoke=True)
    return bp.device_spec(q, "cpu")   # type: ignore[arg-type]


def cell_base(ctx: bm.Ctx, q_root: Path, seed: int, out: Path) -> dict[str, Any]:
    """The main job's base (read, not trained again), exported: the as-is network."""
    main = ctx.queue.done(f"s{seed}-{TARGET}")
    src = Path(main["run_dir"]) / "base"
    out.mkdir(parents=True, exist_ok=True)
    for f in ("base.pt", "metrics.json"):
        if not (out / f).is_file():
            (out / f).write_bytes((src / f).read_bytes())
    rec = bm.cell_base(ctx, seed, out)
    return rec | bm.export_cell(out / "base.pt", out / "export", ctx.task) | {"structure": {"kind": "asis"}}


def narrow_name(name: str, width: float) -> str:
    """The config's MobileNetV2 name at another width (its strides kept)."""
    if "width=" not in name:
        raise SystemExit(f"{PROG}: the config's model {name!r} names no width")
    return re.sub(r"width=[0-9.]+", f"width={width:g}", name)


def match_width(ctx: bm.Ctx, target_onnx: str, widths: list[float], policy: dict[str, Any]) -> dict[str, Any]:
    """The width whose network (random weights) measures nearest the target, all timed in one interleaved run;
    widths giving the same convolutions are timed once."""
    from latopt.latency.devices import load_device
    from latopt.latency.profiler import measure_networks
    from latopt.nets.models import build_model

    res = ctx.cfg.data.resolution
    nets: dict[str, Any] = {}
    seen: dict[tuple, float] = {}
    same: dict[float, float] = {}
    for w in widths:
        m = build_model(narrow_name(ctx.cfg.model.name, w), 10).eval()
        k = bm.structure_key(m)
        if k in seen:
            same[w] = seen[k]
            continue
        seen[k] = w
        nets[f"w{w:g}"] = m
    pol = load_device("cpu").model_copy(update=policy)
    stats = measure_networks({"target": target_onnx, **nets}, pol, (1, 3, res, res))
    tried = {float(k[1:]): bm.ratio_ms(stats[k], stats["target"]) for k in nets}
    best = min(tried, key=lambda w: (abs(tried[w]["median"] - 1), w))
    return {"width": best, "ratio_to_target": tried[best], "matched": abs(tried[best]["median"] - 1) <= MATCH,
            "tried": {f"{w:g}": v for w, v in sorted(tried.items())}, "same_as": {f"{w:g}": v for w, v in same.items()}}


def cell_narrow(ctx: bm.Ctx, seed: int, out: Path) -> dict[str, Any]:
    """A narrower MobileNetV2, its width matched to the main job's network by measured latency, trained from
    scratch with the base's recipe, exported."""
    from latopt.training.base_training import train_base

    tgt = ctx.queue.done(f"s{seed}-{TARGET}")
    policy = bm.MATCH_POLICY_SMOKE if ctx.args.smoke else bm.MATCH_POLICY
    match = match_width(ctx, tgt["onnx"], WIDTHS_SMOKE if ctx.args.smoke else WIDTHS, policy)
    name = narrow_name(ctx.cfg.model.name, match["width"])
    log(f"s{seed} narrow>{TARGET}: width {match['width']:g} (t/t_target {match['ratio_to_target']['median']:.3f}, "
        f"{'matched' if match['matched'] else 'NOT matched'}); training {name} from scratch")
    m = train_base(ctx.cfg.with_overrides({"model.name": name}), out / "train", seed=seed, progress=True).metrics
    return {"test_acc": m.test_acc, "val_acc": m.val_acc, "train_seconds": m.train_seconds, "epochs": m.epochs,
            "model": name, "target": TARGET, "match": match, "structure": {"kind": "narrow", "model": name},
            **bm.export_cell(out / "train" / "base.pt", out / "export", ctx.task)}


def run_cell(ctx: bm.Ctx, cell: str, seed: int) -> dict[str, Any]:
    method = bm.method_of(cell)
    out = ctx.cell_dir(cell)
    root = Path(ctx.args.runs_dir)
    if method == TARGET:
        return cell_main(ctx, root, seed, out)
    if method == "base":
        return cell_base(ctx, root, seed, out)
    if method == f"narrow>{TARGET}":
        return cell_narrow(ctx, seed, out)
    if method == prune_cell():
        return bm.cell_prune(ctx, seed, out, TARGET, "global", PRUNE_EPOCHS)
    kind, _, lam = method.partition("@")
    if kind == "lf-lut":
        return bm.cell_lf(ctx, seed, out, "lut", float(lam))
    raise ValueError(f"unknown cell {cell}")


def run(args: argparse.Namespace) -> None:
    ctx = ctx_of(args)
    todo = cells(args.seeds)
    log(f"{len(todo)} cells ({sum(ctx.queue.done(c) is not None for c, _, _ in todo)} done) in {args.runs_dir}")
    left = bm.run_queue(ctx, todo, run_cell)
    if left:
        log(f"not done (another process holds them, or they wait on one): {', '.join(left)}")


def measure(args: argparse.Namespace) -> None:
    ctx = ctx_of(args)
    names = [c for c, _, _ in cells(args.seeds)]
    missing = [c for c in names if ctx.queue.done(c) is None]
    if missing:
        print(f"{PROG}: error: cells not finished: {', '.join(missing)}; run them first", file=sys.stderr)
        raise SystemExit(2)
    bm.measure(ctx, ctx.cfg.data.resolution, names, name=f"measure-{'-'.join(map(str, args.seeds))}.json")


# ------------------------------------------------------------------ results/ and the docs
def _speedups(meas: dict[str, Any], cell: str, seed: int) -> dict[str, Any]:
    st = meas["stats"]
    asis, main = f"s{seed}-base", f"s{seed}-{TARGET}"
    return {prec: {"vs_fp32_asis": bm._q(bm._per_round(st, f"{asis}|fp32", f"{cell}|{prec}")),
                   "vs_main": bm._q(bm._per_round(st, f"{cell}|{prec}", f"{main}|fp32")),
                   "median_ms": st[f"{cell}|{prec}"]["median_ms"]} for prec in ("fp32", "int8")}


def publish(args: argparse.Namespace) -> Path:
    from latopt.latency.timing import environment_info

    ctx = ctx_of(args)
    group = "-".join(map(str, args.seeds))
    meas_path = Path(args.runs_dir) / f"measure-{group}.json"
    if not meas_path.is_file():
        print(f"{PROG}: error: no final run for seeds {group} in {args.runs_dir}: run measure first", file=sys.stderr)
        raise SystemExit(2)
    meas = bm.load_json(meas_path)
    dest = Path(args.results)
    (dest / "cells").mkdir(parents=True, exist_ok=True)
    for c, s, _ in cells(args.seeds):
        r = ctx.queue.done(c)
        rec = {k: v for k, v in r.items() if k not in bm.MACHINE_KEYS + ("run_dir",)}
        if "structure" in rec:   # the pruned module's file is a path on this machine
            rec["structure"] = {k: v for k, v in rec["structure"].items() if k != "module"}
        rec["speedup"] = _speedups(meas, c, s)
        rec["int8_acc"], rec["int8_correct"] = meas["int8_acc"][c], meas["int8_correct"][c]
        bm.write_json(dest / "cells" / f"{c}.json", rec)
    groups_path = dest / "groups.json"
    groups = bm.load_json(groups_path) if groups_path.is_file() else {"schema": SCHEMA, "config": CONFIG, "groups": []}
    groups["groups"] = [g for g in groups["groups"] if not set(g["seeds"]) & set(args.seeds)] + [{
        # the code that trained and timed the group (its final run records it), and the code that published it
        "seeds": args.seeds, "commit": meas.get("commit") or bm.git_commit(Path(__file__).parent),
        "published_with": bm.git_commit(Path(__file__).parent),
        "published": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "smoke": bool(args.smoke),
        "environment": {k: v for k, v in environment_info().items() if k != "host"},
        "measure": {k: v for k, v in meas.items() if k not in ("stats", "members", "int8_acc", "int8_correct",
                                                                 "environment")}}]
    groups["groups"].sort(key=lambda g: min(g["seeds"]))
    bm.write_json(groups_path, groups)
    log(f"wrote {dest} (seeds {group})")
    return dest


def lf_best(recs: dict[str, dict[str, Any]], seed: int) -> str | None:
    """Layer Folding's best of one seed (docs/rivals.md): the most accurate on validation of the λ points at least
    as fast as latopt's network (× 0.97), else the fastest."""
    main = recs.get(f"s{seed}-{TARGET}")
    pts = {c: r for c, r in recs.items() if c.startswith(f"s{seed}-lf-lut@")}
    if not pts or main is None:
        return None
    floor = main["speedup"]["fp32"]["vs_fp32_asis"][0] * (1 - MATCH)
    fast = [c for c, r in pts.items() if r["speedup"]["fp32"]["vs_fp32_asis"][0] >= floor]
    if fast:
        return max(fast, key=lambda c: (pts[c]["val_acc"], c))
    return max(pts, key=lambda c: pts[c]["speedup"]["fp32"]["vs_fp32_asis"][0])


def arms(recs: dict[str, dict[str, Any]], seed: int) -> list[tuple[str, str, str]]:
    """(label, cell, precision) of one seed's rows, latopt's first."""
    rows = [(OURS, f"s{seed}-{TARGET}", "fp32"), ("as-is", f"s{seed}-base", "fp32"),
            ("narrower MobileNetV2, from scratch", f"s{seed}-narrow>{TARGET}", "fp32"),
            ("torch-pruning (fair arm)", f"s{seed}-{prune_cell()}", "fp32")]
    best = lf_best(recs, seed)
    if best is not None:
        rows.append((f"{LF_BEST} ({bm.method_of(best)})", best, "fp32"))
    rows += [("INT8 of the as-is network", f"s{seed}-base", "int8"), ("INT8 of latopt's network",
                                                                      f"s{seed}-{TARGET}", "int8")]
    return [r for r in rows if r[1] in recs]


def arm_key(label: str) -> str:
    """An arm's name across seeds: Layer Folding's best under one name whatever its λ (its label names the λ)."""
    return LF_BEST if label.startswith(LF_BEST) else label


class Point(NamedTuple):
    """One arm at one seed: its test accuracy, speed-up over the as-is fp32 network (median, quartiles), per-round
    t / t(latopt) (median, quartiles), whether that is within ±3 %, and its per-image test correctness."""
    cell: str
    acc: float
    speedup: list[float]
    vs_main: list[float]
    matched: bool
    correct: np.ndarray


def points(recs: dict[str, dict[str, Any]], seeds: list[int]) -> dict[str, dict[int, Point]]:
    """Every arm's point at every seed, by the arm's label (Layer Folding's best under one label whatever its λ),
    latopt's main job first."""
    out: dict[str, dict[int, Point]] = {}
    for s in seeds:
        for label, c, prec in arms(recs, s):
            r = recs[c]
            sp = r["speedup"][prec]
            out.setdefault(arm_key(label), {})[s] = Point(c, r["int8_acc"] if prec == "int8" else r["onnx_acc"],
                                               sp["vs_fp32_asis"], sp["vs_main"], abs(sp["vs_main"][0] - 1) <= MATCH,
                                               correct_of(r, prec))
    return out


class Verdict(NamedTuple):
    seeds: list[int]
    interval: Any            # tools.compare's paired interval
    unmatched: list[int]

    @property
    def text(self) -> str:
        return self.interval.verdict() if not self.unmatched else "—"

    @property
    def latency(self) -> str:
        return "matched at every seed" if not self.unmatched else f"not matched at seed(s) {self.unmatched}: no verdict"


def verdicts(per_arm: dict[str, dict[int, Point]]) -> dict[str, Verdict]:
    """acc(latopt) − acc(arm) per arm over the seeds both have (docs/rivals.md): the crossed seed-t interval from
    3 seeds, a verdict only where the arm is matched to latopt's latency at every seed."""
    from tools.compare import paired_interval

    ours = per_arm.get(OURS, {})
    out = {}
    for label, by_seed in per_arm.items():
        both = [s for s in by_seed if s in ours]
        if label == OURS or not both:
            continue
        iv = paired_interval({s: ours[s].correct for s in both}, {s: by_seed[s].correct for s in both},
                             min_seeds=MIN_SEEDS)
        out[label] = Verdict(both, iv, [s for s in both if not by_seed[s].matched])
    return out


def _load(results: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]], list[int]] | None:
    root = Path(results)
    if not (root / "groups.json").is_file():
        return None
    recs = {p.stem: bm.load_json(p) for p in sorted((root / "cells").glob("*.json"))}
    return bm.load_json(root / "groups.json"), recs, sorted({int(r["seed"]) for r in recs.values()})


NOT_RUN = "Not run yet: there is no `results/rivals/groups.json`. The protocol above was written before any run.\n"


def render(results: Path) -> str:
    """docs/rivals.md's block, from ``results/rivals/`` only."""
    loaded = _load(results)
    if loaded is None:
        return NOT_RUN
    G, recs, seeds = loaded
    out = []
    for g in G["groups"]:
        m = g["measure"]
        pub = f" with `{str(g['published_with'])[:10]}`" if g.get("published_with") not in (None, g["commit"]) else ""
        out.append(f"- Seeds {g['seeds']}: run with commit `{str(g['commit'])[:10]}`, published {g['published']}{pub}"
                   f"{' (SMOKE: tiny budgets, no evidence)' if g['smoke'] else ''}; machine "
                   f"{bm.machine(g['environment'])}; final run {m['rounds']} rounds, {m['seconds']:.0f} s.")
    head = ["| arm | seed | test acc (%) | speed-up vs as-is fp32 (quartiles) | t / t(latopt) | matched |",
            "|---|---|---|---|---|---|"]
    per_arm = points(recs, seeds)
    rows = []
    for s in seeds:
        for label, _, _ in arms(recs, s):
            key = arm_key(label)
            p = per_arm[key][s]
            sp, vs = p.speedup, p.vs_main
            rows.append(f"| {label} | {s} | {100 * p.acc:.2f} | {sp[0]:.2f}× ({sp[1]:.2f}–{sp[2]:.2f}) | {vs[0]:.3f} | "
                        f"{'–' if key == OURS else ('yes' if p.matched else 'no')} |")
    out += ["", "\n".join(head + rows), ""]
    lines = [f"| {label} | {len(v.seeds)} | {v.interval.text()} | {v.text} | {v.latency} |"
             for label, v in verdicts(per_arm).items()]
    out += [f"acc(latopt) − acc(arm), points, paired on the same test images; with {MIN_SEEDS} or more seeds the mean and its "
            "95 % crossed seed-t interval, margin ±1 pt (docs/rivals.md):", "",
            "| arm | seeds | latopt − arm (pt) | verdict | latency |", "|---|---|---|---|---|", *lines, ""]
    return "\n".join(out) + "\n"


def render_summary(results: Path) -> str:
    """README's and docs/results.md's summary of docs/rivals.md: per arm, its speed-up over the as-is network at
    each seed, its mean test accuracy, and latopt's difference from it with the verdict."""
    loaded = _load(results)
    if loaded is None:
        return NOT_RUN.replace(" The protocol above", " The protocol (docs/rivals.md)")
    G, recs, seeds = loaded
    per_arm = points(recs, seeds)
    vs = verdicts(per_arm)
    smoke = " (SMOKE: tiny budgets, no evidence)" if any(g["smoke"] for g in G["groups"]) else ""
    seed_list = ", ".join(map(str, seeds))
    from latopt.config import load_config

    cfg = load_config(G["config"])
    width = "95 %" if len(seeds) >= MIN_SEEDS else f"per seed (an interval needs {MIN_SEEDS} seeds)"
    rows = [f"Config `{cfg.name}` (`{cfg.model.name}`, {'pretrained' if cfg.model.pretrained else 'from scratch'}, "
            f"{cfg.data.task} @{cfg.data.resolution}), device `{cfg.device}` (ONNX Runtime, one thread), seeds "
            f"{seed_list}{smoke}; generated from `results/rivals/`:", "",
            f"| what | speed-up over as-is fp32, seed {seed_list} | test acc (%), mean over its seeds | "
            f"latopt − it (pt), {width} | verdict at latopt's latency |", "|---|---|---|---|---|"]
    for label, by_seed in per_arm.items():
        speed = ", ".join(f"{by_seed[s].speedup[0]:.2f}×" if s in by_seed else "–" for s in seeds)
        acc = f"{100 * float(np.mean([p.acc for p in by_seed.values()])):.2f}"
        if len(by_seed) < len(seeds):
            acc += f" (seeds {', '.join(map(str, sorted(by_seed)))})"
        v = vs.get(label)
        diff = "–" if v is None else v.interval.text()
        verdict = "–" if v is None else (v.text if not v.unmatched else f"none: not matched at seed(s) {v.unmatched}")
        rows.append(f"| {label} | {speed} | {acc} | {diff} | {verdict} |")
    return "\n".join(rows) + "\n"


def correct_of(rec: dict[str, Any], prec: str) -> np.ndarray:
    """A cell's per-image test correctness, fp32 (its ONNX file's) or INT8 (the final run's)."""
    from tools.compare import unpack_bits

    return unpack_bits(rec["int8_correct"] if prec == "int8" else rec["onnx_correct"], int(rec["test_samples"]))


def main(argv: list[str] | None = None) -> int:
    ap = bp.Parser(prog=PROG, description=(__doc__ or "").split("\n\n")[0])
    sub = ap.add_subparsers(dest="stage", required=True)
    for name in ("run", "measure", "publish"):
        p = sub.add_parser(name)
        p.add_argument("--runs-dir", required=True)
        p.add_argument("--seeds", type=int, nargs="+", default=[0])
        p.add_argument("--smoke", action="store_true", help="tiny budgets: checks the pipeline only")
        if name == "publish":
            p.add_argument("--results", default="results/rivals")
    args = ap.parse_args(argv)
    if any(s < 0 for s in args.seeds) or len(set(args.seeds)) != len(args.seeds):
        ap.error(f"--seeds {args.seeds}: give distinct seeds >= 0")
    {"run": run, "measure": measure, "publish": publish}[args.stage](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
