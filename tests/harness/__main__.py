"""The harness' command line (``python -m tests.harness fuzz|faults``) and its report."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from . import __doc__ as overview
from . import faults, fuzz
from .fixtures import Fixtures
from .fuzz import KINDS
from .judge import Outcome
from .process import ROOT


def summary(outcomes: list[Outcome]) -> dict[str, Any]:
    kinds: dict[str, dict[str, Any]] = {}
    for o in outcomes:
        for kind, detail in o.failures:
            k = kinds.setdefault(kind, {"cases": 0, "example": {"case": o.case, "argv": o.argv, "exit": o.rc,
                                                                "detail": detail}})
            k["cases"] += 1
    pairs = Counter(f"{o.kind}: {o.mutation.split(' [')[0]} → {o.command}" for o in outcomes)
    return {"tried": len(outcomes), "clean": sum(o.clean for o in outcomes), "kinds": kinds,
            "distinct_mutation_command_pairs": len(pairs)}


def print_summary(suite: str, s: dict[str, Any]) -> None:
    print(f"\n{suite}: {s['tried']} cases tried, {s['clean']} clean, {s['tried'] - s['clean']} with failures "
          f"({s['distinct_mutation_command_pairs']} distinct mutation/command pairs; a case can show several kinds)")
    for kind, k in sorted(s["kinds"].items(), key=lambda kv: -kv[1]["cases"]):
        ex = k["example"]
        print(f"  {kind:<20} {k['cases']:>4}   e.g. {ex['case']}: {ex['detail'][:160]}")


def checkout() -> str:
    with contextlib.suppress(Exception):
        return subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                              text=True, check=True).stdout.strip()
    return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.harness", description=overview.split("\n\n")[0])
    ap.add_argument("suite", choices=("fuzz", "faults"))
    ap.add_argument("--n", type=int, default=None, help="cases (default: fuzz every mutation/command pair once, "
                    "faults 15)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write every case and the summary here")
    ap.add_argument("--work", help="working directory (default: a new temporary directory); fixtures are reused from it")
    ap.add_argument("--in-process", action="store_true", help="fuzz: run cases through latopt.cli.main (faster; "
                    "no memory/file-size limits, so the 'env' cases are skipped)")
    ap.add_argument("--kinds", nargs="*", default=list(KINDS), help=f"fuzz: artefact kinds (default all: {KINDS})")
    ap.add_argument("--commands", nargs="*", help="faults: commands (default all)")
    args = ap.parse_args(argv)
    import tempfile

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix=f"latopt-{args.suite}-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"[harness] {args.suite} on checkout {checkout()} ({ROOT}); work dir {work}")
    if args.in_process:
        import torch

        torch.set_num_threads(1)
    fx = Fixtures(work / "fixtures", in_process=args.in_process).build()
    t0 = time.perf_counter()
    noise: dict[str, Any] = {}
    if args.suite == "fuzz":
        outcomes = fuzz.run(fx, work, args.n, args.seed, in_process=args.in_process, kinds=tuple(args.kinds))
    else:
        outcomes, noise = faults.run(fx, work, args.n or 15, args.seed,
                                 commands=tuple(args.commands) if args.commands else None)
    s = summary(outcomes)
    print_summary(args.suite, s)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "suite": args.suite, "checkout": checkout(), "seed": args.seed, "n": args.n, "seconds": time.perf_counter() - t0,
            "mode": "in-process" if args.in_process else "subprocess",
            **s, "not_compared_between_uninterrupted_runs": noise,
            "cases": [dataclasses.asdict(o) | {"clean": o.clean} for o in outcomes]}, indent=1, default=str))
        print(f"[harness] wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
