#!/usr/bin/env python
"""How well does the DP's cheap importance proxy rank the (block, variant) candidates? Spearman's ρ of
``proxy`` against ``finetune`` (:mod:`latopt.dp.importance`) on one trained base checkpoint.

For every candidate (block, variant) of the base network (``--variants``, default full,pw,drop; each
where the block allows it): the ``proxy`` loss (validation cross-entropy of that variant alone, BN
statistics re-estimated, minus the base's) and the ``finetune`` loss (base validation accuracy minus the
validation accuracy after folding that block alone and fine-tuning ``--epochs`` epochs). Prints the table,
Spearman's ρ (all candidates, and per variant) and writes ``--json``. The losses are the DP's inputs as
it uses them (clipped at 0, so ties at 0 lower ρ); ρ on the unclipped values is reported too.

    python tools/dp_importance.py --config CFG --checkpoint BASE.pt [--variants full,pw,drop]
                                  [--epochs 1] [--seed 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import sys
import time

from scipy.stats import spearmanr

from latopt.config import load_config
from latopt.data import load_task
from latopt.dp import variant_losses
from latopt.files.artifacts import write_json_atomic
from latopt.layerfold import check_base
from latopt.nets.blocks import find_blocks
from latopt.training.torch_settings import set_threads


def _rho(a: list[float], b: list[float]) -> float:
    return float(spearmanr(a, b).statistic) if len(a) > 2 else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--checkpoint", required=True, help="the trained base network (latopt train)")
    ap.add_argument("--variants", default="full,pw,drop")
    ap.add_argument("--epochs", type=int, default=1, help="fine-tuning epochs per candidate (finetune)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    set_threads(args.threads)
    cfg = load_config(args.config)
    model, _, _ = check_base(cfg, args.checkpoint)
    task = load_task(cfg)
    wanted = [v.strip() for v in args.variants.split(",") if v.strip()]
    cands = {b.index: ("none", *(v for v in wanted if v in b.variants)) for b in find_blocks(model) if b.foldable}
    out: dict = {"config": args.config, "checkpoint": args.checkpoint, "seed": args.seed, "epochs": args.epochs}
    for method in ("proxy", "finetune"):
        t = time.perf_counter()
        out[method] = variant_losses(cfg, model, task, cands, method=method, seed=args.seed, progress=True,
                                     epochs=args.epochs, clip=False)
        out[f"{method}_seconds"] = time.perf_counter() - t
    keys = [(b, v) for b, vs in sorted(cands.items()) for v in vs if v != "none"]
    print(f"{'block':>5} {'variant':<8} {'proxy (nats)':>12} {'finetune (acc)':>14}")
    for b, v in keys:
        print(f"{b:>5} {v:<8} {out['proxy'][b][v]:>12.4f} {out['finetune'][b][v]:>14.4f}")
    rho: dict = {}
    for name, sel in [("all", keys), *((v, [k for k in keys if k[1] == v]) for v in wanted)]:
        p = [out["proxy"][b][v] for b, v in sel]
        f = [out["finetune"][b][v] for b, v in sel]
        rho[name] = {"n": len(sel), "unclipped": _rho(p, f),
                     "clipped": _rho([max(0.0, x) for x in p], [max(0.0, x) for x in f])}
        print(f"Spearman rho proxy vs finetune, {name} (n={len(sel)}): {rho[name]['unclipped']:.3f} "
              f"(clipped at 0 as the DP uses them: {rho[name]['clipped']:.3f})")
    print(f"seconds: proxy {out['proxy_seconds']:.1f}, finetune {out['finetune_seconds']:.1f}")
    out["spearman"] = rho
    if args.json:
        write_json_atomic(args.json, {"schema": "latopt.dp_importance/1",
                                      **{k: ({str(b): ls for b, ls in v.items()} if isinstance(v, dict) and
                                             k in ("proxy", "finetune") else v) for k, v in out.items()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
