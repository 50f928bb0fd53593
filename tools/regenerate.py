"""Regenerate the figures of README.md and docs/*.md from the committed raw results (docs/evaluation.md §5).

A generated block is the text between ``<!-- regenerate NAME -->`` and ``<!-- /regenerate -->``; NAME picks
its generator below, which reads only files under ``results/``. Nothing between the markers is typed by hand.

    python tools/regenerate.py            # rewrite every generated block
    python tools/regenerate.py --check    # exit 1 naming the blocks that would change (CI: tests/test_readme.py)
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):   # run as a script: the checkout's root, for tools.<module>
    sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "results"
BLOCK = re.compile(r"(<!-- regenerate (?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(<!-- /regenerate -->)", re.S)


def _seed_table(name: str) -> Callable[[], str]:
    def make() -> str:
        from tools import seed_sweep

        return seed_sweep.summarize(json.loads((RESULTS / name).read_text())["runs"])
    return make


def _tool(module: str, render: str, results: str) -> Callable[[], str]:
    """A block made by ``tools/<module>.py``'s ``render`` function from ``results/<results>``."""
    def make() -> str:
        return getattr(importlib.import_module(f"tools.{module}"), render)(RESULTS / results)
    return make


def _compress_report(results: str) -> Callable[[], str]:
    """One sentence from a ``latopt compress`` report (``results/<results>``): the network before and after, the
    units removed, the MILP solves, the time, the test predictions changed and the float64 check."""
    def make() -> str:
        r = json.loads((RESULTS / results).read_text())
        c, v, a, st = r["compression"], r["verification"], r["accuracy"], r["stability"]["total"]
        return (f"On {a['data']}, {'-'.join(map(str, c['layers_before']))} with test accuracy {100 * a['before']:.2f} %: "
                f"`compress` removed {c['units_removed']} of its {c['hidden_units_before']} hidden units "
                f"({'-'.join(map(str, c['layers_after']))}; {st['milp_solves']} MILP solves, {r['seconds']['total']:.1f} s "
                f"in all), {a['prediction_changes']} of the {a['test_points']:,} test predictions changed "
                f"({100 * a['after']:.2f} % after), largest float64 difference {v['max_abs_float64']:g} on "
                f"{v['points']:,} points (`results/{Path(results).parent}/`, which has the commands).")
    return make


GENERATORS: dict[str, Callable[[], str]] = {
    "seed-sweep": _seed_table("seed-sweep.json"),
    "seed-sweep-before": _seed_table("seed-sweep-before.json"),
    "fashion-mnist-bases": _tool("seed_sweep", "render_bases", "fashion-mnist"),
    "bench-train": _tool("bench_train", "render", "bench-train/fashion-mnist.json"),
    "exact-fashion-mnist": _compress_report("exact-fashion-mnist/report.json"),
    "method-table": _tool("bench_methods", "render_doc", "method-table"),
    "method-table-summary": _tool("bench_methods", "render_summary", "method-table"),
    "hardware-awareness": _tool("bench_devices", "render", "hardware-awareness"),
    "hardware-awareness-summary": _tool("bench_devices", "render_summary", "hardware-awareness"),
}


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def regenerate(text: str, where: str) -> tuple[str, list[str]]:
    """``text`` with every generated block rewritten, and the names of the blocks that changed."""
    changed: list[str] = []

    def sub(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in GENERATORS:
            raise SystemExit(f"regenerate: {where} has a block {name!r} that no generator makes; known: "
                             f"{', '.join(GENERATORS)}")
        body = GENERATORS[name]().rstrip("\n") + "\n"
        if body != m.group("body"):
            changed.append(f"{where}: {name}")
        return m.group(1) + body + m.group(4)

    return BLOCK.sub(sub, text), changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 when a block is out of date")
    args = ap.parse_args(argv)
    stale: list[str] = []
    for page in pages():
        text = page.read_text()
        new, changed = regenerate(text, str(page.relative_to(ROOT)))
        stale += changed
        if changed and not args.check:
            page.write_text(new)
    for s in stale:
        print(f"{'out of date' if args.check else 'rewrote'}: {s}")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
