"""Benchmark: what does folding buy end to end on the device?

For each model (default mobilenetv2_100 and efficientnet_lite0 at 224 on the ``cpu`` profile; random
weights with randomised BN statistics — latency does not depend on the weights, the numeric checks do
need non-trivial BN):

1. profile it (or reuse ``profiles/<device>/<model>-r<res>-b<batch>.json`` with ``--reuse-lut``);
2. fold sets: (a) ``auto`` = every block whose fold lowers latency on this device per the LUT (c_l > 0),
   (b) a search's choice: the fold set of the recommended trial of ``--study/--storage`` when given,
   else the LUT-greedy stand-in (the half of the foldable blocks that save the most per the LUT: what a
   search under a half-depth budget converges to on latency alone; printed as such);
3. for each fold set: the numeric gates of ``latopt export`` (fold in float64 and float32 against the
   linearised network, ONNX Runtime against PyTorch) on the exported ONNX file;
4. the as-is network, (a) and (b) measured end to end in ONE interleaved run (ONNX Runtime sessions of the
   exported files); speed-ups with their quartile range, and the LUT's prediction error for each.

    python tools/bench_export.py [--models mobilenetv2_100 efficientnet_lite0] [--resolution 224]
                                 [--device cpu] [--reuse-lut] [--study NAME --storage URL] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from latopt.artifacts import write_json_atomic
from latopt.engine import seed_everything, set_threads
from latopt.export import Plan, auto_plan, fold_gates, gate_inputs, onnx_gate, tag_block_nodes
from latopt.fold import fold_blocks, randomize_bn_
from latopt.latency.devices import load_device
from latopt.latency.lut import costs, default_lut_path, load_lut, predict, save_lut
from latopt.latency.onnx_io import export_onnx
from latopt.latency.profiler import measure_networks, profile_model
from latopt.models import build_model


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def study_fold_set(study: str, storage: str) -> dict[int, str]:
    import optuna

    from latopt.search import recommend

    s = optuna.load_study(study_name=study, storage=storage)
    best = recommend(s, float(s.user_attrs.get("max_acc_drop", 0.01)) if "max_acc_drop" in s.user_attrs else 0.01)
    if best is None:
        raise SystemExit(f"study {study!r} has no recommended trial")
    return {int(k): v for k, v in best.user_attrs.get("fold_set", {}).items()}


def bench_model(name: str, res: int, device: Any, args: argparse.Namespace) -> dict[str, Any]:
    print(f"\n=== {name} @{res} on {device.name}, {args.mode} mode (load {_load()})", flush=True)
    seed_everything(args.seed)
    model = build_model(name, num_classes=1000).eval()
    randomize_bn_(model, seed=args.seed)
    lut_path = default_lut_path(device.name, name, res, device.batch)
    if args.reuse_lut and args.mode == "exact" and Path(lut_path).is_file():
        lut = load_lut(lut_path, model=name, resolution=res)
        print(f"reusing {lut_path}")
    else:
        t = time.perf_counter()
        lut = profile_model(model, device, res, device.batch, progress=False, name=name, fold_mode=args.mode)
        print(f"profiled in {time.perf_counter() - t:.1f} s")
        if args.save_lut:
            save_lut(lut, lut_path)
    c = costs(lut)
    auto = auto_plan(lut)
    if args.study:
        chosen, how = study_fold_set(args.study, args.storage), f"recommended trial of study {args.study!r}"
    else:
        ranked = sorted(lut.foldable(), key=lambda i: -c[i])
        chosen = {i: "full" for i in sorted(ranked[: len(ranked) // 2]) if c[i] > 0}
        how = "LUT-greedy stand-in: the half of the foldable blocks with the largest c_l (and c_l > 0)"
    sets = {"auto": {i: "full" for i in auto}, "search": chosen}
    print(f"(a) auto: {len(auto)}/{len(lut.foldable())} blocks with c_l > 0: {auto}")
    print(f"(b) search: {sorted(chosen)} ({how})")
    x, inputs = gate_inputs(None, res, args.samples, args.seed)
    out: dict[str, Any] = {"model": name, "resolution": res, "device": device.name, "fold_sets": {},
                           "search_fold_set_source": how}
    tmp = Path(tempfile.mkdtemp(prefix="latopt-bench-export-"))
    onnx_files = {"as-is": export_onnx(model, (device.batch, 3, res, res), tmp / "asis.onnx")}
    for key, plan in sets.items():
        if not plan:
            print(f"{key}: empty fold set, skipped")
            continue
        folded = fold_blocks(model, plan, mode=args.mode, input_size=(res, res)).eval()
        p = Plan(folded, model, {"model": name, "num_classes": 1000}, {}, plan, args.mode, res, [])
        gates = fold_gates(p, x, inputs)
        path = export_onnx(folded, (device.batch, 3, res, res), tmp / f"{key}.onnx")
        tag_block_nodes(path, folded, plan)
        gates.append(onnx_gate(folded, path, x, inputs)[0])
        for g in gates:
            print(f"  {key}: {g.line()}")
        onnx_files[key] = path
        out["fold_sets"][key] = {"plan": sorted(plan), "gates": [vars(g) | {"passed": g.passed} for g in gates]}
    print(f"measuring {list(onnx_files)} end to end, interleaved (load {_load()})", flush=True)
    t = time.perf_counter()
    stats = measure_networks({k: str(v) for k, v in onnx_files.items()}, device, (device.batch, 3, res, res))
    print(f"measured in {time.perf_counter() - t:.1f} s (load {_load()})")
    a = stats["as-is"]
    rows = [("as-is", {}, a)] + [(k, sets[k], stats[k]) for k in sets if k in stats]
    print(f"{'network':<8} {'folded':>6} {'median ms':>10} {'IQR ms':>8} {'speed-up':>9} {'quartile range':>15} "
          f"{'LUT ms':>8} {'LUT err':>8}")
    for key, plan, s in rows:
        pred = predict(lut, plan)
        sp = a.median_ms / s.median_ms
        rng = (a.q1_ms / s.q3_ms, a.q3_ms / s.q1_ms)
        print(f"{key:<8} {len(plan):>6} {s.median_ms:>10.3f} {s.iqr_ms:>8.3f} {sp:>8.2f}x {rng[0]:>7.2f}-{rng[1]:<6.2f} "
              f"{pred:>8.3f} {pred / s.median_ms - 1:>+8.1%}")
        entry = out["fold_sets"].setdefault(key, {"plan": sorted(plan)})
        entry.update(measured=s.to_dict(), speedup=sp, speedup_range=list(rng), lut_ms=pred,
                     lut_error=pred / s.median_ms - 1)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["mobilenetv2_100", "efficientnet_lite0"])
    ap.add_argument("--resolution", type=int, default=224)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--mode", choices=["exact", "paper"], default="exact",
                    help="fold mode (paper: constant bias, no bias-map add; border-inexact by design)")
    ap.add_argument("--samples", type=int, default=8, help="inputs for the numeric gates")
    ap.add_argument("--reuse-lut", action="store_true", help="use profiles/<device>/... when it exists")
    ap.add_argument("--save-lut", action="store_true", help="write the fresh LUT to profiles/<device>/...")
    ap.add_argument("--study", help="take fold set (b) from this search study's recommended trial")
    ap.add_argument("--storage", help="the study's storage URL")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    set_threads(1)
    device = load_device(args.device)
    results = [bench_model(m, args.resolution, device, args) for m in args.models]
    if args.json:
        write_json_atomic(args.json, {"schema": "latopt.bench_export/1", "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
