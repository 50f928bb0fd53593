"""Experiment: is base training robust across seeds and thread counts? Not a test.

Trains a run config's base (``latopt train``, one subprocess per run, so each run has its own intra-op
thread count and so its own float rounding) for every seed in ``--seeds`` at every thread count in
``--threads``, ``--jobs`` runs at a time, and records per run the test and validation accuracy, the best
validation epoch and every epoch's record. Dotted-key ``--set`` overrides change the recipe (to compare
recipes on the same seeds). Writes the raw results as JSON (``--json``) and prints min / mean / max.

    python tools/seed_sweep.py --config quickstart --seeds 0-9 --threads 1 2 --json results/seed-sweep.json
    python tools/seed_sweep.py --config quickstart --seeds 0-9 --set train.warmup_epochs=0 --set train.clip_grad=null

``--table results/seed-sweep.json`` prints the table of a recorded sweep (what README shows) without training.
``--jobs`` is a number of cores (a run of T threads takes T); the JSON is rewritten after every run and a
sweep given an existing ``--json`` of the same resolved config runs only what it lacks (resume). ``--work DIR``
keeps the runs' directories there (default: a temporary directory), so a run interrupted mid-way resumes after
its last finished epoch (``latopt train``'s own resume). ``--floor`` is the accuracy the table counts runs below
(default 0.96, the quickstart promise).

``--screen`` is for choosing a recipe: the test accuracy is neither printed nor recorded (it is dropped from
every run's row; the table shows validation accuracy), so that a screen cannot look at the test split.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):   # run as a script: this checkout's latopt, not whichever one pip installed editable
    sys.path.insert(0, str(ROOT))

from latopt.config import dump_config, load_config  # noqa: E402
from latopt.files.artifacts import write_json_atomic  # noqa: E402 - after the checkout is on sys.path
from latopt.latency.timing import environment_info  # noqa: E402

SCHEMA = "latopt.seed_sweep/1"


def _seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def _override(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--set wants KEY=VALUE, got {text!r}")
    return key, yaml.safe_load(value)


def _one(config: Path, seed: int, threads: int, work: Path, screen: bool = False) -> dict[str, Any]:
    out = work / f"s{seed}-t{threads}"
    cmd = [sys.executable, "-m", "latopt", "train", "--config", str(config), "--seed", str(seed),
           "--threads", str(threads), "--out", str(out), "--quiet"]
    t0 = time.perf_counter()
    # the training subprocess imports the same checkout's latopt as this process (a worktree beside an editable
    # install would otherwise train with one checkout's code and the config another wrote)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    row: dict[str, Any] = {"seed": seed, "threads": threads, "exit": proc.returncode,
                           "seconds": round(time.perf_counter() - t0, 1)}
    if proc.returncode != 0:
        row["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return row
    m = json.loads((out / "metrics.json").read_text())
    row.update(metrics_row(m), train_seconds=round(m["train_seconds"], 1),
               warnings=[ln for ln in proc.stderr.splitlines() if "warning" in ln])
    if screen:
        del row["test_acc"]
    return row


def metrics_row(m: dict[str, Any]) -> dict[str, Any]:
    """What a sweep keeps of one run's metrics.json: accuracies, the best epoch, the per-epoch curve."""
    return {"test_acc": m["test_acc"], "val_acc": m["val_acc"], "best_epoch": m.get("best_epoch"),
            "history": [{k: r[k] for k in ("epoch", "loss", "train_acc", "val_acc", "lr") if k in r}
                        for r in m["history"]]}


def summarize(rows: list[dict[str, Any]], floor: float = 0.96, key: str = "test_acc") -> str:
    what = key.split("_")[0]
    lines = [f"| threads | runs | {what} min | {what} mean | {what} max | below {100 * floor:g} % |",
             "|---|---|---|---|---|---|"]
    for t in sorted({r["threads"] for r in rows}):
        acc = [r[key] for r in rows if r["threads"] == t and key in r]
        failed = sum(1 for r in rows if r["threads"] == t and key not in r)
        if not acc:
            lines.append(f"| {t} | 0 | | | | ({failed} failed) |")
            continue
        low = sum(a < floor for a in acc) + failed
        lines.append(f"| {t} | {len(acc)} | {100 * min(acc):.2f} % | {100 * statistics.mean(acc):.2f} % | "
                     f"{100 * max(acc):.2f} % | {low} |")
    return "\n".join(lines)


def render_bases(results: Path) -> str:
    """README's Fashion-MNIST table: one row per recorded sweep in ``results/<dir>/*.json`` (model, epochs, the
    training subset when one was used, runs, test min / mean / max, runs below the sweep's floor, the slowest run's
    wall time), then the published rows of ``published.json`` (submitter-reported, other recipes)."""
    lines = ["| model | runs | test min | test mean | test max | below floor | slowest base |", "|---|---|---|---|---|---|---|"]
    for path in sorted(results.glob("*.json")):
        rec = json.loads(path.read_text())
        if rec.get("schema") != SCHEMA:
            continue
        runs = [r for r in rec["runs"] if "test_acc" in r]
        if not runs:
            continue
        acc = [r["test_acc"] for r in runs]
        floor = rec.get("floor", 0.96)
        failed = sum("test_acc" not in r for r in rec["runs"])
        slowest = max(r["seconds"] for r in runs) / 60
        cfg = rec["resolved"]
        subset = cfg["data"].get("train_samples")
        subset = f", {subset:,} training images" if subset else ""
        lines.append(f"| `{cfg['model']['name']}` @{cfg['data']['resolution']}, {cfg['train']['epochs']} epochs{subset} "
                     f"(this repo, seeds {', '.join(str(r['seed']) for r in runs)}) | {len(runs)} | {100 * min(acc):.2f} % | "
                     f"{100 * statistics.mean(acc):.2f} % | {100 * max(acc):.2f} % | "
                     f"{sum(a < floor for a in acc) + failed} below {100 * floor:g} % | {slowest:.1f} min |")
    pub = json.loads((results / "published.json").read_text())
    for r in pub["rows"]:
        lines.append(f"| {r['model']} (published, submitter-reported) | | | {100 * r['test_acc']:.1f} % | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="quickstart")
    ap.add_argument("--seeds", type=_seeds, default=_seeds("0-9"))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--jobs", type=int, default=2, help="cores to use: runs of T threads go JOBS // T at a time")
    ap.add_argument("--set", dest="overrides", type=_override, action="append", default=[],
                    help="dotted-key override of the config, e.g. train.lr=0.02 (YAML value)")
    ap.add_argument("--json", type=Path, help="write the raw results here")
    ap.add_argument("--table", type=Path, help="print the table of a recorded sweep and exit")
    ap.add_argument("--work", type=Path, help="keep the runs' directories here (resumable); default: a temporary one")
    ap.add_argument("--floor", type=float, default=0.96, help="the table counts the runs below this accuracy")
    ap.add_argument("--screen", action="store_true", help="a recipe screen: record and show validation accuracy "
                    "only, never the test split's")
    args = ap.parse_args(argv)
    if args.table:
        record = json.loads(args.table.read_text())
        print(summarize(record["runs"], record.get("floor", args.floor), "val_acc" if record.get("screen") else "test_acc"))
        return 0
    cfg = load_config(args.config, dict(args.overrides))
    key = "val_acc" if args.screen else "test_acc"
    with contextlib.ExitStack() as stack:
        if args.work is None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="latopt-sweep-")))
        else:
            work = args.work
            work.mkdir(parents=True, exist_ok=True)
        config = work / "config.yaml"
        config.write_text(yaml.safe_dump(dump_config(cfg), sort_keys=False))
        record = {"schema": SCHEMA, "config": args.config, "overrides": dict(args.overrides),
                  "resolved": dump_config(cfg), "machine": environment_info(),
                  "jobs": args.jobs, "floor": args.floor, "screen": args.screen, "complete": False,
                  "runs": _done(args.json, dump_config(cfg), key)}
        rows: list[dict[str, Any]] = record["runs"]
        have = {(r["seed"], r["threads"]) for r in rows}
        if have:
            print(f"resuming {args.json}: {len(have)} run(s) done", file=sys.stderr)
        for threads in args.threads:
            todo = [s for s in args.seeds if (s, threads) not in have]
            # --jobs is a number of cores: a run of T threads takes T of them
            with ThreadPoolExecutor(max(1, args.jobs // threads)) as pool:
                for row in pool.map(lambda s, t=threads: _one(config, s, t, work, args.screen), todo):
                    shown = (f"{key.split('_')[0]} {100 * row[key]:.2f} %" if key in row else
                             f"FAILED: {row['error']}")
                    print(f"seed {row['seed']} threads {row['threads']}: {shown} ({row['seconds']} s)",
                          file=sys.stderr)
                    rows.append(row)
                    if args.json:          # after every run: an interrupted sweep keeps what it measured
                        write_json_atomic(args.json, record, indent=1)
    rows.sort(key=lambda r: (r["threads"], r["seed"]))
    record["complete"] = True
    print(summarize(rows, args.floor, key))
    if args.json:
        write_json_atomic(args.json, record, indent=1)
        print(f"wrote {args.json}")
    return 0


def _done(path: Path | None, resolved: dict[str, Any], key: str = "test_acc") -> list[dict[str, Any]]:
    """The finished runs of an earlier sweep of the same resolved config recorded in ``path`` (resumed)."""
    if path is None or not path.is_file():
        return []
    old = json.loads(path.read_text())
    if old.get("schema") != SCHEMA or old.get("resolved") != resolved:
        sys.exit(f"seed_sweep: {path} holds a sweep of another config; give another --json or remove it")
    return [r for r in old["runs"] if key in r]


if __name__ == "__main__":
    sys.exit(main())
