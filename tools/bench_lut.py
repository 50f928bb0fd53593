"""Benchmark: does the latency LUT predict end-to-end latency?

For each model (default mobilenetv2_100 and efficientnet_lite0 at 224 on the ``cpu`` device profile):

1. profile it twice (``profile_model``), timing each profiling run's wall time;
2. build the as-is network, the fully folded one and two mixed fold sets (every other foldable block,
   the first half of the foldable blocks) as export ships them (exact-mode bias maps deferred to the end
   of each chain of folds: ``every-other`` is all one-block chains, the others one chain each) and time
   all four end-to-end in ONE interleaved run;
3. print predicted (from the first LUT) vs measured latency and the error of each, and the run-to-run
   spread of the per-block medians between the two profiling runs (blocks above 0.1 ms).

The load average is printed with every phase: the development machines are shared, so figures taken
while other jobs run are noisy (the ``cpu`` profile times thread CPU time, which is robust to waiting
for a CPU but not to cache and memory-bandwidth contention).

    python tools/bench_lut.py [--models mobilenetv2_100 efficientnet_lite0] [--resolution 224]
                              [--device cpu] [--json out.json]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from typing import Any

from latopt.files.artifacts import write_json_atomic
from latopt.latency.devices import load_device
from latopt.latency.lut import LUT, predict
from latopt.latency.profiler import format_lut, measure_networks, profile_model
from latopt.nets.models import build_model
from latopt.rewrite import as_shipped
from latopt.training.loop import seed_everything


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def fold_sets(lut: LUT) -> dict[str, list[int]]:
    f = lut.foldable()
    return {"asis": [], "full": f, "every-other": f[::2], "first-half": f[: len(f) // 2]}


def raw_sum(lut: LUT, folded: list[int]) -> float:
    """Sum of the isolated (uncalibrated) medians of the network with ``folded`` blocks folded."""
    f = set(folded)
    return sum(s.median_ms for s in lut.fixed.values()) + sum(
        b.raw["full" if b.index in f else "none"].median_ms for b in lut.blocks)


def single_scale_predict(lut: LUT, folded: list[int]) -> float:
    """The alternative calibration: one factor (geometric mean over the as-is and all-folded networks)."""
    fit = [e for k, e in lut.end_to_end.items() if k in ("asis", "full")]
    s = math.exp(sum(math.log(e.measured.median_ms / (e.raw_sum_ms or math.nan)) for e in fit) / len(fit))
    return s * raw_sum(lut, folded)


def spread(a: LUT, b: LUT, min_ms: float = 0.1) -> dict[str, Any]:
    """Relative change of every per-block raw median between two profiling runs."""
    rows = []
    for ea, eb in zip(a.blocks, b.blocks, strict=True):
        for v, sa in ea.raw.items():
            sb = eb.raw.get(v)
            if sb is not None and max(sa.median_ms, sb.median_ms) > min_ms:
                rows.append((ea.index, v, sa.median_ms, sb.median_ms, sb.median_ms / sa.median_ms - 1))
    rel = [abs(r[-1]) for r in rows]
    return {"n": len(rows), "max_abs_rel": max(rel) if rel else 0.0,
            "median_abs_rel": statistics.median(rel) if rel else 0.0,
            "within_10pct": sum(r <= 0.10 for r in rel), "worst": max(rows, key=lambda r: abs(r[-1])) if rows else None}


def bench_model(name: str, resolution: int, device_name: str, seed: int) -> dict[str, Any]:
    device = load_device(device_name)
    seed_everything(seed)
    model = build_model(name)
    out: dict[str, Any] = {"model": name, "resolution": resolution, "device": device.name, "load": {}}
    luts = []
    for run in (1, 2):
        out["load"][f"profile{run}_start"] = _load()
        t0 = time.perf_counter()
        luts.append(profile_model(model, device, resolution, device.batch, progress=False, name=name))
        out[f"profile{run}_wall_s"] = time.perf_counter() - t0
        print(f"[{name}] profiling run {run}: {out[f'profile{run}_wall_s']:.1f} s wall (load {_load()})", flush=True)
    lut = luts[0]
    print(format_lut(lut), flush=True)
    sets = fold_sets(lut)
    size = (resolution, resolution)  # each network as export ships it: exact-mode bias maps deferred
    nets = {k: (model if not v else as_shipped(model, v, mode=lut.fold_mode, input_size=size)[0])
            for k, v in sets.items()}
    out["load"]["measure_start"] = _load()
    stats = measure_networks(nets, device, (device.batch, 3, resolution, resolution))
    out["load"]["measure_end"] = _load()
    out["networks"] = {}
    print(f"[{name}] end-to-end, one interleaved run (load {_load()}):")
    print(f"  {'fold set':<12} {'#folded':>7} {'measured':>9} {'IQR':>6} {'wall med':>9} {'predicted':>9} "
          f"{'error':>7} {'pred(run2)':>10} {'error':>7} {'1-scale':>8} {'error':>7} {'raw sum':>8} {'error':>7}")
    for k, v in sets.items():
        s = stats[k]
        p1, p2 = predict(luts[0], v), predict(luts[1], v)
        e1, e2 = p1 / s.median_ms - 1, p2 / s.median_ms - 1
        p3, p4 = single_scale_predict(lut, v), raw_sum(lut, v)
        e3, e4 = p3 / s.median_ms - 1, p4 / s.median_ms - 1
        out["networks"][k] = {"folded": v, "measured": s.to_dict(), "predicted_ms": p1, "error": e1,
                              "predicted_run2_ms": p2, "error_run2": e2, "single_scale_ms": p3,
                              "single_scale_error": e3, "raw_sum_ms": p4, "raw_sum_error": e4}
        wall = f"{s.wall_median_ms:9.3f}" if s.wall_median_ms is not None else f"{'-':>9}"
        print(f"  {k:<12} {len(v):>7} {s.median_ms:9.3f} {s.iqr_ms:6.3f} {wall} {p1:9.3f} {e1 * 100:+6.1f}% "
              f"{p2:10.3f} {e2 * 100:+6.1f}% {p3:8.3f} {e3 * 100:+6.1f}% {p4:8.3f} {e4 * 100:+6.1f}%")
    sp = spread(luts[0], luts[1])
    out["spread"] = sp
    w = sp["worst"]
    print(f"[{name}] run-to-run per-block medians (> 0.1 ms): {sp['within_10pct']}/{sp['n']} within 10 %, "
          f"median |change| {sp['median_abs_rel'] * 100:.1f} %, max {sp['max_abs_rel'] * 100:.1f} %"
          + (f" (block {w[0]} {w[1]}: {w[2]:.3f} → {w[3]:.3f} ms)" if w else ""))
    out["luts"] = [lu.to_dict() for lu in luts]
    out["environment"] = lut.environment
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["mobilenetv2_100", "efficientnet_lite0"])
    ap.add_argument("--resolution", type=int, default=224)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    print(f"load average at start: {_load()}", flush=True)
    results = [bench_model(m, args.resolution, args.device, args.seed) for m in args.models]
    print(f"load average at end: {_load()}")
    if args.json:
        write_json_atomic(args.json, {"schema": "latopt.bench_lut/1", "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
