#!/usr/bin/env python
"""Sweep λ_c for Layer Folding on one base checkpoint and print the trade-off table.

Each λ_c is one ``latopt.layerfold.run_fold`` (pre-fold → fold at τ → check → post-fold), written to
``<out>/lc<λ>/``; the table (markdown) and a JSON summary go to stdout and ``<out>/sweep.json``.

    python tools/fold_sweep.py --config quickstart \\
        --checkpoint runs/quickstart/base/base.pt --lambdas 0.1 0.3 1 3 10

Columns: folded blocks, fraction of α strictly inside (0.1, 0.9) after pre-fold (bimodality), test
accuracy of the base, the σ_α network after pre-fold, the folded network before and after the post-fold
fine-tune, FLOPs, the LUT-predicted latency (with --lut) and the wall time of the run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from latopt.config import load_config
from latopt.data import load_task
from latopt.files.artifacts import write_json_atomic
from latopt.layerfold import run_fold
from latopt.training.torch_settings import set_threads


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--lambdas", type=float, nargs="+", default=[0.1, 0.3, 1.0, 3.0, 10.0])
    ap.add_argument("--tau", type=float)
    ap.add_argument("--p", type=float)
    ap.add_argument("--granularity", choices=("block", "activation"))
    ap.add_argument("--lut")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="default runs/<name>/sweep")
    args = ap.parse_args(argv)
    set_threads(args.threads)
    cfg = load_config(args.config, {"fold.tau": args.tau, "fold.p": args.p, "fold.granularity": args.granularity,
                                    "lut": args.lut})
    out = Path(args.out or Path("runs") / cfg.name / "sweep")
    task = load_task(cfg)
    rows = []
    print("| λ_c | folded | α in (0.1,0.9) | base | pre-fold | folded | fine-tuned | Δ vs base | MFLOPs | "
          "LUT ms | time s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for lam in args.lambdas:
        t0 = time.perf_counter()
        r = run_fold(cfg.with_overrides({"fold.lambda_c": lam}), args.checkpoint, out / f"lc{lam:g}", progress=False,
                     seed=args.seed, task=task).report.to_json()
        a, lat = r["acc"], r["latency_pred_ms"]
        row = {"lambda_c": lam, "n_folded": r["n_folded"], "n_foldable": r["n_foldable"], "plan": r["folded"],
               "alpha_mid_fraction": r["alpha_mid_fraction"], "acc": a, "flops": r["flops"],
               "latency_pred_ms": lat, "seconds": time.perf_counter() - t0}
        rows.append(row)
        lat_s = f"{lat['asis']:.3f}→{lat['folded']:.3f}" if lat.get("asis") is not None else "-"
        print(f"| {lam:g} | {r['n_folded']}/{r['n_foldable']} | {100 * r['alpha_mid_fraction']:.1f} % | "
              f"{100 * a['base']:.2f} | {100 * a['prefold']:.2f} | {100 * a['folded']:.2f} | "
              f"{100 * a['finetuned']:.2f} | {100 * (a['finetuned'] - a['base']):+.2f} | "
              f"{r['flops']['base'] / 1e6:.2f}→{r['flops']['folded'] / 1e6:.2f} | {lat_s} | {row['seconds']:.0f} |",
              flush=True)
    write_json_atomic(out / "sweep.json", {"schema": "latopt.fold_sweep/1", "config": str(args.config),
                                           "checkpoint": str(args.checkpoint), "seed": args.seed, "rows": rows})
    print(f"wrote {out / 'sweep.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
