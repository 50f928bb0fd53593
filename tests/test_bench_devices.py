"""tools/bench_devices.py (the cross-device matrix): the own-plan verdict rule on synthetic results, and the
table made from results/ only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tools import bench_devices as bd


def _src(plan: dict[str, str], speedup: float, vs_own: tuple[float, float, float] | None, same: bool = False
         ) -> dict[str, Any]:
    return {"plan": plan, "same_plan_as_own": same, "speedup": [speedup, speedup * 0.98, speedup * 1.02],
            "vs_own": list(vs_own) if vs_own else None, "vs_own_per_run": []}


def _write(tmp: Path, cells: dict[str, Any]) -> Path:
    devs = ["a", "b", "c"]
    plans = {f"m|{d}|{k}": {"plan": {"0": "full"}} for d in devs for k in ("dp", "lf")}
    matrix = {"schema": bd.RESULTS_SCHEMA, "resolution": 224, "budget": 0.7, "models": ["m"], "devices": devs,
              "runs": 3, "kinds": {"dp": ["full", "pw", "drop"]}, "importance": "uniform", "plans": plans,
              "luts": {}, "cells": cells, "environment": {"cpu": "test CPU", "cpu_flags": [], "cpu_count": 2}}
    (tmp / "matrix.json").write_text(json.dumps(matrix))
    return tmp


def _rows(text: str) -> dict[str, str]:
    return {line.split("|")[1].strip(): (line.split("|")[-3].strip(), line.split("|")[-2].strip())
            for line in text.splitlines() if line.startswith("| ") and not line.startswith("| measured")}


def test_own_plan_verdicts(tmp_path: Path) -> None:
    two, three = {"0": "full", "1": "full"}, {"0": "full", "1": "full", "2": "full"}
    cells = {
        # on a: b's plan is slower with as many blocks, c's changes more blocks and is not faster: a wins
        "m|a|dp": {"runs": 3, "sources": {"a": _src(two, 1.5, None), "b": _src(two | {"3": "pw"}, 1.3, (1.10, 1.05, 1.15)),
                                          "c": _src(three, 1.5, (1.0, 0.99, 1.01))}},
        # on b: a's plan is 10 % faster and changes no more blocks: b's own plan loses
        "m|b|dp": {"runs": 3, "sources": {"a": _src(two, 1.6, (0.90, 0.88, 0.92)), "b": _src(two, 1.45, None),
                                          "c": _src(two, 1.45, None, same=True)}},
        # on c: a's plan is faster but changes more blocks: neither wins (a tie)
        "m|c|dp": {"runs": 3, "sources": {"a": _src(three | {"4": "drop"}, 1.7, (0.9, 0.88, 0.92)),
                                          "c": _src(three, 1.5, None)}},
    }
    rows = _rows(bd.render(_write(tmp_path, cells)))
    assert rows["a"][0] == "yes"
    assert rows["b"][0].startswith("**no**: beaten by a")
    assert rows["c"][0] == "tie"
    # the budget view (budget 0.7: a speed-up of 1/0.7 = 1.43x meets it)
    assert rows["a"][1] == "own meets it, fewest blocks of 2"               # a 1.5x (2 blocks), c 1.5x (3 blocks)
    assert rows["b"][1] == "own meets it, fewest blocks of 3"               # a 1.6x, b and c 1.45x, all 2 blocks
    assert rows["c"][1] == "own meets it, fewest blocks of 2"
    cells["m|c|dp"]["sources"]["c"]["speedup"] = [1.4, 1.37, 1.43]
    assert _rows(bd.render(_write(tmp_path, cells)))["c"][1] == "**own plan misses it**; met by a"
