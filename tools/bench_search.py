#!/usr/bin/env python
"""Hardware-aware vs uniform c_l: the same search budget, two studies, two Pareto fronts.

Both studies search (λ_c, τ, p) on the same base model with the same sampler, seed and trial budget and
score every candidate with the same objectives (validation accuracy ↑, LUT-predicted latency ↓). They
differ only in the compression loss: c_l from the device LUT (time saved by folding block l) versus
c_l = 1 for every block (the Layer Folding paper's default). Printed per study: the hypervolume of the
feasible front (Optuna's hypervolume utility) in (error, latency / base latency) space with the fixed
reference point (1 − (base_acc − max_acc_drop), 1.0) — so only candidates within the accuracy constraint
and faster than the base count — and the best predicted latency within the accuracy constraint.

Not a verdict on LUT against uniform c_l: both studies are scored with the LUT's *predicted* latency, which
is what the LUT arm optimises, so the comparison favours it by construction. The measured comparison (final
interleaved run, 5 seeds, hypervolume intervals) is the method table's Q4 (``tools/bench_methods.py``,
``docs/method-table.md``); this tool shows how the two searches explore.

    python tools/bench_search.py --config digits_clutter --trials 12 [--task digits-clutter] [--workers 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np


def hypervolume(study, base_acc: float, base_ms: float, max_drop: float) -> tuple[float, list[list[float]]]:
    from optuna._hypervolume import compute_hypervolume
    from optuna.trial import TrialState

    ref = np.array([1.0 - (base_acc - max_drop), 1.0])
    pts = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        err, ratio = 1.0 - t.values[0], t.values[1] / base_ms
        if err <= ref[0] and ratio <= ref[1]:
            pts.append([err, ratio])
    if not pts:
        return 0.0, []
    return float(compute_hypervolume(np.array(pts), ref)), pts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="digits_clutter")
    ap.add_argument("--task", default="digits-clutter", help="data.task override (default: the harder digits task)")
    ap.add_argument("--trials", type=int, default=12, help="COMPLETE trials per study (the base trial included)")
    ap.add_argument("--sampler", default="tpe", choices=("tpe", "nsga2", "random"))
    ap.add_argument("--max-acc-drop", type=float, default=None)
    ap.add_argument("--lut", default=None, help="LUT JSON (default: the config's / the default profile path)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1, help="local worker processes per study (e.g. 2 on 2 cores)")
    ap.add_argument("--runs-dir", default="runs")
    ap.add_argument("--name", default="bench-search", help="study name prefix")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="extra config override (YAML value), e.g. train.epochs=5")
    args = ap.parse_args(argv)

    import optuna
    import yaml

    from latopt.errors import LatoptError
    from latopt.files.artifacts import write_json_atomic
    from latopt.search import SearchOptions, format_table, recommend, run_search
    from latopt.search._pareto import base_trial
    from latopt.training.loop import seed_everything

    overrides = {"data.task": args.task}
    for kv in args.override:
        k, _, v = kv.partition("=")
        overrides[k] = yaml.safe_load(v)
    results = {}
    base_ckpt = None
    try:
        for costs in ("lut", "uniform"):
            seed_everything(args.seed)
            name = f"{args.name}-{costs}"
            t0 = time.perf_counter()
            res = run_search(SearchOptions(
                config=args.config, trials=args.trials, study=name, sampler=args.sampler, objective="latency",
                max_acc_drop=args.max_acc_drop, base=base_ckpt, lut=args.lut, costs=costs, seed=args.seed,
                runs_dir=args.runs_dir, overrides=overrides, workers=args.workers, progress=True))
            wall = time.perf_counter() - t0
            print(format_table(res.summary), flush=True)
            study = optuna.load_study(study_name=res.study_name, storage=res.storage)
            b = base_trial(study)
            if b is None:
                raise LatoptError(f"study {name}: the base trial did not complete")
            base_ckpt = base_ckpt or study.user_attrs["base_checkpoint"]
            max_drop = float(study.user_attrs["max_acc_drop"])
            base_acc, base_ms = float(b.values[0]), float(b.values[1])
            hv, pts = hypervolume(study, base_acc, base_ms, max_drop)
            rec = recommend(study, max_drop)
            results[costs] = {
                "study": name, "storage": res.storage, "wall_s": round(wall, 1), "n_complete": res.n_complete,
                "base_acc": base_acc, "base_latency_ms": base_ms, "max_acc_drop": max_drop,
                "hypervolume": hv, "hv_points": pts, "front": res.front,
                "best_trial": None if rec is None else rec.number,
                "best_latency_ms": None if rec is None else float(rec.values[1]),
                "best_acc": None if rec is None else float(rec.values[0]),
                "best_speedup": None if rec is None else base_ms / float(rec.values[1]),
            }
    except LatoptError as e:
        print(f"bench_search: error: {e}", file=sys.stderr)
        return 2
    print("\nHardware-aware (LUT c_l) vs uniform (c_l = 1), same budget; latency = LUT prediction")
    print(f"reference point: (error {1 - (results['lut']['base_acc'] - results['lut']['max_acc_drop']):.4f}, "
          "latency/base 1.0)")
    print(f"{'c_l':>8} {'trials':>6} {'hypervolume':>12} {'best ms':>9} {'speedup':>8} {'best acc':>9} {'wall s':>7}")
    for costs, r in results.items():
        best = "-" if r["best_latency_ms"] is None else f"{r['best_latency_ms']:.3f}"
        sp = "-" if r["best_speedup"] is None else f"{r['best_speedup']:.3f}x"
        acc = "-" if r["best_acc"] is None else f"{r['best_acc']:.4f}"
        print(f"{costs:>8} {r['n_complete']:>6} {r['hypervolume']:>12.5f} {best:>9} {sp:>8} {acc:>9} {r['wall_s']:>7}")
    out = Path(args.runs_dir) / f"{args.name}.json"
    write_json_atomic(out, {"schema": "latopt.bench-search/1", "config": args.config, "task": args.task,
                            "trials": args.trials, "sampler": args.sampler, "seed": args.seed, "results": results})
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
