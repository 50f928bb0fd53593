#!/usr/bin/env python
"""Does hardware-awareness pay? The cross-device matrix: plans made from one device's LUT, timed on every device.

For each model (at ``--resolution``, random weights: latency depends on the structure only) and each device
profile, latopt profiles a LUT with the variants ``full,pw,drop`` (``latopt.latency.profiler.profile_model``).
From each device's LUT it makes two plans at the same budget fraction with the same importance for all
(``uniform``: the DP changes as few blocks as the budget allows; no model or data is involved):

- ``dp``: the DP over ``full``, ``pw`` and ``drop`` (``latopt.dp.select_plan``);
- ``lf``: the DP restricted to ``full``: Layer Folding's move set (which blocks to fold).

Every plan of a model is then timed on every device, with the as-is network, in one interleaved run per
device (``latopt.latency.profiler.measure_networks`` at that device's batch, threads and precision),
``--runs`` times. Hardware-aware means the *diagonal wins*: on device D, the plan made from D's LUT is at
least as fast as the plans made from the other devices' LUTs. Per device and plan kind, the result is the
per-round ratio t(plan from device S) / t(plan from D) on D, and each plan's speed-up over as-is: per run the
median over rounds, then the geometric mean over the runs with a 95 % t interval over the runs
(:func:`over_runs`; the rounds of one run are not independent replicates, the runs are).

    python tools/bench_devices.py run --runs-dir DIR [--models mobilenetv2_100 efficientnet_lite0]
                                      [--devices cpu cpu-b8t2 cpu-int8 cpu-torch] [--budget 0.7] [--runs 3]
    python tools/bench_devices.py publish --runs-dir DIR --results results/hardware-awareness

Resumable: LUTs (``DIR/lut/``), plans (``DIR/plans.json``) and measurement runs (``DIR/measure/``) are
files; a rerun skips what exists. ``cpu-b8t2`` is ``cpu`` at batch 8 with 2 intra-op threads and the wall
clock (the thread clock needs one thread), written to ``DIR/profiles/`` by this tool.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):   # run as a script: the checkout's root, for tools.compare
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODELS = ("mobilenetv2_100", "efficientnet_lite0")
DEVICES = ("cpu", "cpu-b8t2", "cpu-int8", "cpu-torch")
VARIANTS = ("full", "pw", "drop")
KINDS = {"dp": VARIANTS, "lf": ("full",)}
DERIVED = {"cpu-b8t2": ("cpu", {"name": "cpu-b8t2", "batch": 8, "threads": 2, "clock": "wall",
                                "description": "ONNX Runtime CPU, fp32, batch 8, two intra-op threads"})}
RESULTS_SCHEMA = "latopt.hardware_awareness/2"   # /1 (before 2026-12-02): intervals pooled over the rounds
POOLED_SCHEMA = "latopt.hardware_awareness/1"


def log(msg: str) -> None:
    print(f"[bench_devices {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def load_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def write_json(path: Path, obj: Any) -> None:
    from latopt.files.artifacts import write_json_atomic

    write_json_atomic(path, obj)


def device(root: Path, name: str) -> Any:
    """A shipped profile, or a derived one (:data:`DERIVED`) written to ``root/profiles/<name>.yaml``."""
    from latopt.latency.devices import load_device

    if name not in DERIVED:
        return load_device(name)
    import yaml

    path = root / "profiles" / f"{name}.yaml"
    if not path.is_file():
        src, update = DERIVED[name]
        d = load_device(src).model_dump(exclude={"path"}) | update
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(d, sort_keys=False))
    return load_device(str(path))


def ensure_lut(root: Path, model: str, dev: str, res: int) -> Path:
    from latopt.latency.profiler import ensure_lut as profiled

    path = root / "lut" / f"{model}-{dev}-r{res}.json"
    return path if path.is_file() else profiled(path, model, device(root, dev), res, variants=VARIANTS, say=log)


def make_plans(root: Path, models: list[str], devices: list[str], res: int, budget: float) -> dict[str, Any]:
    """Per model, per source device, per kind: the plan from that device's LUT (or why there is none)."""
    from latopt.dp import select_plan
    from latopt.dp.importance import candidates, variant_losses
    from latopt.errors import LatoptError
    from latopt.latency.lut import load_lut

    path = root / "plans.json"
    plans: dict[str, Any] = load_json(path) if path.is_file() else {}
    for model in models:
        for dev in devices:
            lut = load_lut(ensure_lut(root, model, dev, res))
            for kind, variants in KINDS.items():
                key = f"{model}|{dev}|{kind}"
                if key in plans:
                    continue
                cands = candidates(lut, variants)
                losses = variant_losses(None, None, None, cands, method="uniform")
                try:
                    plan, info = select_plan(lut, losses, budget)
                    plans[key] = {"plan": {str(k): v for k, v in plan.items()}, "predicted_ratio": info.ratio,
                                  "predicted_speedup": info.asis_ms / info.predicted_ms,
                                  "fastest_ratio": info.fastest_ms / info.asis_ms}
                except LatoptError as e:
                    plans[key] = {"plan": None, "why": str(e)}
                log(f"{key}: {plans[key]}")
                write_json(path, plans)
    return plans


def network(model: str, plan: dict[str, str] | None, res: int) -> Any:
    """The model with random weights (BatchNorm statistics randomised, seed 0), the plan applied as export
    ships it (exact folds, deferred bias maps)."""
    from latopt.nets.models import build_model
    from latopt.rewrite import as_shipped, randomize_bn_

    m = build_model(model, num_classes=1000).eval()
    randomize_bn_(m, seed=0)
    if not plan:
        return m
    return as_shipped(m, {int(k): v for k, v in plan.items()}, input_size=(res, res))[0]


def measure(root: Path, model: str, dev: str, plans: dict[str, Any], devices: list[str], res: int,
            run: int) -> dict[str, Any]:
    """One interleaved run on ``dev``: the as-is network and every distinct plan of ``model``."""
    from latopt.latency.profiler import measure_networks
    from latopt.latency.timing import environment_info

    path = root / "measure" / f"{model}-{dev}-run{run}.json"
    if path.is_file():
        return load_json(path)
    d = device(root, dev)
    nets: dict[str, Any] = {"asis": network(model, None, res)}
    members: dict[str, str] = {}
    by_plan: dict[str, str] = {}
    for src in devices:
        for kind in KINDS:
            p = plans[f"{model}|{src}|{kind}"]["plan"]
            if p is None:
                continue
            sig = json.dumps(p, sort_keys=True)
            if sig not in by_plan:  # two devices' LUTs can give the same plan: time it once
                by_plan[sig] = f"{src}|{kind}"
                nets[by_plan[sig]] = network(model, p, res)
            members[f"{src}|{kind}"] = by_plan[sig]
    log(f"{model} on {dev}, run {run}: timing {len(nets)} networks interleaved (load {os.getloadavg()})")
    t0 = time.perf_counter()
    stats = measure_networks(nets, d, (d.batch, 3, res, res))
    rec = {"model": model, "device": dev, "run": run, "seconds": time.perf_counter() - t0,
           "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "environment": environment_info(),
           "profile": d.model_dump(exclude={"path"}), "members": members,
           "samples_ms": {k: s.samples_ms for k, s in stats.items()}}
    write_json(path, rec)
    return rec


def over_runs(per_run: list[float]) -> list[float] | None:
    """[geometric mean, lo, hi]: the 95 % t interval over the runs of per-run medians of a time ratio (on the
    log, tools/compare.t_interval); None with fewer than 2 runs."""
    from tools.compare import t_interval

    if len(per_run) < 2:
        return None
    m, lo, hi, _, _ = t_interval(np.log(per_run))
    return [float(np.exp(m)), float(np.exp(lo)), float(np.exp(hi))]


def summarise(root: Path, models: list[str], devices: list[str], runs: int, plans: dict[str, Any]
              ) -> dict[str, Any]:
    """Per model, target device and kind: every source's speed-up over as-is and its ratio to the diagonal,
    per run (median over rounds) and over the runs (:func:`over_runs`)."""
    out: dict[str, Any] = {}
    for model in models:
        for dev in devices:
            recs = [load_json(root / "measure" / f"{model}-{dev}-run{r}.json") for r in range(runs)
                    if (root / "measure" / f"{model}-{dev}-run{r}.json").is_file()]
            if not recs:
                continue
            for kind in KINDS:
                own = f"{dev}|{kind}"
                cell: dict[str, Any] = {"runs": len(recs), "sources": {}}
                for src in devices:
                    key = f"{src}|{kind}"
                    if any(key not in r["members"] for r in recs):
                        continue
                    sp_run, per_run = [], []
                    for r in recs:
                        s = r["samples_ms"]
                        sp_run.append(float(np.median(np.asarray(s["asis"]) / np.asarray(s[r["members"][key]]))))
                        if own in r["members"]:
                            v = np.asarray(s[r["members"][key]]) / np.asarray(s[r["members"][own]])
                            per_run.append(float(np.median(v)))
                    cell["sources"][src] = {
                        "plan": plans[f"{model}|{src}|{kind}"]["plan"],
                        "same_plan_as_own": own in recs[0]["members"] and recs[0]["members"][key] == recs[0]["members"][own],
                        "speedup": over_runs(sp_run) or [sp_run[0], None, None], "speedup_per_run": sp_run,
                        "vs_own": over_runs(per_run) if per_run else None, "vs_own_per_run": per_run}
                out[f"{model}|{dev}|{kind}"] = cell
    return out


def publish(root: Path, dest: Path, args: argparse.Namespace) -> None:
    plans = load_json(root / "plans.json")
    summ = summarise(root, args.models, args.devices, args.runs, plans)
    luts = {}
    for p in sorted((root / "lut").glob("*.json")):
        lut = load_json(p)
        luts[p.stem] = {"device": lut.get("device"), "batch": lut.get("batch"), "profiling_s": lut.get("profiling_s"),
                        "held_out_error": lut.get("end_to_end", {}).get("held-out", {}).get("error"),
                        "costs": lut.get("costs")}
    env = None
    for p in sorted((root / "measure").glob("*.json")):
        env = load_json(p).get("environment")
        break
    dest.mkdir(parents=True, exist_ok=True)
    write_json(dest / "matrix.json", {"schema": RESULTS_SCHEMA, "resolution": args.resolution, "budget": args.budget,
                                      "models": args.models, "devices": args.devices, "runs": args.runs,
                                      "kinds": {k: list(v) for k, v in KINDS.items()}, "importance": "uniform",
                                      "plans": plans, "luts": luts, "cells": summ, "environment": env})
    log(f"wrote {dest / 'matrix.json'}")


def budget_verdict(cell: dict[str, Any], dev: str, budget: float) -> str:
    """[post hoc] Which plans meet the budget on this device as measured (median speed-up ≥ 1/budget), and is
    the device's own plan the cheapest of them (fewest changed blocks, the uniform importance's cost)?"""
    meets = {s: len(c["plan"]) for s, c in cell["sources"].items() if c["speedup"][0] >= 1 / budget}
    if dev not in cell["sources"]:
        return "no own plan" + (f"; met by {', '.join(meets)}" if meets else "; met by none")
    if dev not in meets:
        return "**own plan misses it**" + (f"; met by {', '.join(meets)}" if meets else "; met by none")
    cheaper = [s for s, k in meets.items() if k < meets[dev]]
    if cheaper:
        return f"own meets it; **fewer blocks**: {', '.join(cheaper)}"
    return f"own meets it, fewest blocks of {len(meets)}"


def _speedup_text(c: dict[str, Any], pooled: bool) -> str:
    s = c["speedup"]
    if pooled or s[1] is None:     # /1 files kept only the median of the rounds pooled over the runs
        return f"{s[0]:.2f}×"
    return f"{s[0]:.2f}× [{s[1]:.2f}, {s[2]:.2f}]"


def _vs_own(c: dict[str, Any]) -> list[float] | None:
    """The ratio to the own plan over the runs: from the per-run medians when there are two or more (a /1 file's
    stored interval pooled the rounds), else as stored."""
    return over_runs(c.get("vs_own_per_run") or []) or c["vs_own"]


def _pooled_outside(m: dict[str, Any]) -> tuple[int, int, int, int]:
    """In a /1 file: off-diagonal cells with a run's median outside the pooled interval, of all such cells,
    and the per-run medians outside, of all."""
    cells = out_cells = runs = out_runs = 0
    for key, cell in m["cells"].items():
        dev = key.split("|")[1]
        for src, c in cell["sources"].items():
            if src == dev or c["same_plan_as_own"] or c["vs_own"] is None:
                continue
            o = sum(not (c["vs_own"][1] <= v <= c["vs_own"][2]) for v in c["vs_own_per_run"])
            cells, out_cells = cells + 1, out_cells + (o > 0)
            runs, out_runs = runs + len(c["vs_own_per_run"]), out_runs + o
    return out_cells, cells, out_runs, runs


def render(results: Path) -> str:
    """The matrix tables of docs/hardware-awareness.md, from results/hardware-awareness/matrix.json only."""
    from tools.compare import MATCH_TOL

    m = load_json(Path(results) / "matrix.json")
    pooled = m.get("schema") == POOLED_SCHEMA
    env = m.get("environment") or {}
    out = [f"Generated by `python tools/regenerate.py` from `results/hardware-awareness/matrix.json`. Models at "
           f"{m['resolution']} px with random weights; budget {m['budget']:g} of each device's LUT-predicted as-is "
           f"latency; importance `{m['importance']}` for every plan; {m['runs']} interleaved runs per device. "
           f"Machine: {env.get('cpu', '?')}, flags {' '.join(env.get('cpu_flags', [])) or '?'}, "
           f"{env.get('cpu_count', '?')} cores."]
    for model in m["models"]:
        for kind, variants in m["kinds"].items():
            devs = m["devices"]
            out.append(f"#### {model}, plans `{kind}` (variants {', '.join(variants)})")
            head = ("| measured on ↓ / plan from → | " + " | ".join(devs) + " | diagonal wins? | "
                    "[post hoc] budget met on this device |")
            lines = [head, "|" + "---|" * (len(devs) + 3)]
            for dev in devs:
                cell = m["cells"].get(f"{model}|{dev}|{kind}")
                if cell is None:
                    lines.append(f"| {dev} | " + " | ".join("not run" for _ in devs) + " | – | – |")
                    continue
                own = cell["sources"].get(dev)
                k_own = len(own["plan"]) if own else None
                row, beaten_by, beats = [], [], []
                for src in devs:
                    c = cell["sources"].get(src)
                    if c is None:
                        why = m["plans"].get(f"{model}|{src}|{kind}", {}).get("why", "no plan")
                        row.append("no plan" if "below the fastest" in why else "–")
                        continue
                    k = len(c["plan"])
                    txt = f"{_speedup_text(c, pooled)}, {k} blocks"
                    if src == dev:
                        txt = f"**{txt}**"
                    elif c["vs_own"] is not None and k_own is not None:
                        v = _vs_own(c)
                        txt += ("; same plan" if c["same_plan_as_own"] else
                                f"; ÷ own {v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]")
                        if not c["same_plan_as_own"]:
                            if v[2] < 1 - MATCH_TOL and k <= k_own:    # faster on D, changing no more blocks
                                beaten_by.append(src)
                            elif (v[1] > 1 and k >= k_own) or (k > k_own and v[1] >= 1 - MATCH_TOL):
                                beats.append(src)
                    row.append(txt)
                others = [s for s in devs if s != dev and s in cell["sources"]
                          and not cell["sources"][s]["same_plan_as_own"]]
                if own is None:
                    verdict = "no own plan"
                elif beaten_by:
                    verdict = "**no**: beaten by " + ", ".join(beaten_by)
                elif others and set(beats) == set(others):
                    verdict = "yes"
                elif beats:
                    verdict = "partly: beats " + ", ".join(beats)
                else:
                    verdict = "tie" if others else "all plans equal"
                lines.append(f"| {dev} | " + " | ".join(row) + f" | {verdict} | {budget_verdict(cell, dev, m['budget'])} |")
            out.append("\n".join(lines))
    if pooled:
        oc, nc, orr, nr = _pooled_outside(m)
        sp = ("the median of per-round ratios pooled over the runs; this results file kept no per-run speed-ups, "
              "so no interval is shown")
        amend = (f" **Amended 2026-12-02:** the intervals shown before pooled the rounds of the "
                 f"{m['runs']} runs as if independent; in {oc} of {nc} off-diagonal cells a run's own median lay "
                 f"outside that \"95 %\" interval ({orr} of {nr} per-run medians). They are now t intervals over "
                 "the runs, and the *diagonal wins?* column was recomputed with them.")
    else:
        sp = "per run the median of per-round ratios; the geometric mean over the runs, 95 % t interval over them"
        amend = ""
    out.append(f"Each cell: the plan's speed-up over the as-is network on that device ({sp}) and the number of "
               "blocks it changes. The block count is the cost that the `uniform` importance charges, **not a "
               "measure of accuracy**: these networks have random weights, and on trained networks the count does "
               "not rank accuracy (`docs/method-table.md`: `dp-uniform@0.6` changes fewer blocks than `dp@0.6` "
               "and is far less accurate). Off the diagonal, `÷ own` is the per-round ratio t(this plan)/t(the "
               "device's own plan) on that device: per run its median, the geometric mean over the runs with a "
               f"95 % t interval over the {m['runs']} runs; above 1, the device's own plan is faster. *Diagonal "
               "wins?* The device's own plan is beaten by another device's plan that is faster on it (interval "
               f"below {1 - MATCH_TOL:g}) while changing no more blocks: `no`. It beats another plan that is slower "
               "(interval above 1) changing at least as many blocks, or that changes more blocks without being "
               f"faster (interval ≥ {1 - MATCH_TOL:g}): `yes` when it beats every other distinct plan, `partly` "
               "when some; otherwise `tie`. **[post hoc]**, added after reading the first tables because the rule "
               "above cannot separate a faster plan from a cheaper one: *budget met on this device* lists the "
               "plans whose measured speed-up reaches 1/budget there, and says whether the device's own plan is "
               "one of them and changes the fewest blocks. It is what the DP promises: the budget, at the fewest "
               "blocks changed, which is not the same as the least accuracy lost." + amend)
    return "\n\n".join(out) + "\n"


def render_summary(results: Path) -> str:
    """README's short form: per model and plan kind, the [post hoc] budget view counted over the devices."""
    m = load_json(Path(results) / "matrix.json")
    lines = [f"{len(m['devices'])} CPU devices ({', '.join(m['devices'])}), models at {m['resolution']} px, plans at "
             f"budget {m['budget']:g} from each device's LUT, each timed on every device "
             "(`docs/hardware-awareness.md`):", ""]
    for model in m["models"]:
        for kind in m["kinds"]:
            own_ok, cheapest, no_plan, beaten = [], [], [], []
            others = others_met = 0
            for dev in m["devices"]:
                cell = m["cells"].get(f"{model}|{dev}|{kind}")
                if cell is None:
                    continue
                for src, c in cell["sources"].items():
                    if src != dev:
                        others += 1
                        others_met += c["speedup"][0] >= 1 / m["budget"]
                v = budget_verdict(cell, dev, m["budget"])
                if v.startswith("no own plan"):
                    no_plan.append(dev)
                elif v.startswith("own meets it, fewest"):
                    own_ok.append(dev)
                    cheapest.append(dev)
                elif v.startswith("own meets it"):
                    own_ok.append(dev)
                else:
                    beaten.append(dev)
            txt = (f"- {model}, `{kind}` plans: the device's own plan meets the budget there and changes the fewest "
                   f"blocks among the plans that do on {len(cheapest)} of {len(m['devices'])} devices")
            if beaten:
                txt += f"; it misses the budget on {', '.join(beaten)}"
            if no_plan:
                txt += f"; no plan reaches the budget from the LUT of {', '.join(no_plan)}"
            if others:
                txt += f". Another device's plan met the budget in {others_met} of {others} cases"
            lines.append(txt + ".")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=("run", "publish"))
    ap.add_argument("--runs-dir", required=True)
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--devices", nargs="+", default=list(DEVICES))
    ap.add_argument("--resolution", type=int, default=224)
    ap.add_argument("--budget", type=float, default=0.7)
    ap.add_argument("--runs", type=int, default=3, help="interleaved runs per (model, device)")
    ap.add_argument("--results", default=None, help="publish: write matrix.json here")
    args = ap.parse_args(argv)
    root = Path(args.runs_dir)
    root.mkdir(parents=True, exist_ok=True)
    from latopt.training.torch_settings import set_threads

    set_threads(1)
    if args.stage == "run":
        plans = make_plans(root, args.models, args.devices, args.resolution, args.budget)
        for r in range(args.runs):
            for model in args.models:
                for dev in args.devices:
                    measure(root, model, dev, plans, args.devices, args.resolution, r)
    if args.stage == "publish":
        if not args.results:
            ap.error("publish needs --results DIR (results/hardware-awareness for the docs)")
        publish(root, Path(args.results), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
