"""tools/bench_transfer.py: its docs block on hand-made results (a table row per run, the paired comparison of the
two bases per seed), the block before any run, and bad arguments (one line, exit 2). The runs themselves are a
benchmark (docs/results.md), not a test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools import bench_transfer as bt


def _cell(start: str, base: float, trial: float, speed: float) -> dict:
    return {"cell": f"{start}-s0", "start": start, "seed": 0, "recommended": "fold", "trial": 4,
            "fold_set": {"1": "full", "2": "drop"}, "base_test_acc": base, "trial_test_acc": trial,
            "test": {"n": 1000, "lost": 20, "won": 10}, "confirm": {"drop": 0.004, "bound": 0.012},
            "latency": {"speedup": speed, "speedup_range": [speed - 0.02, speed + 0.03]}, "run_seconds": 600.0}


def test_render_the_table_and_the_paired_bases(tmp_path: Path) -> None:
    assert "has not been run yet" in bt.render(tmp_path)
    R = {"schema": bt.SCHEMA, "config": bt.CONFIG, "commit": "abcdef123456789", "published": "now",
         "environment": {"cpu": "test", "cpu_count": 2},
         "cells": [_cell("scratch", 0.80, 0.79, 1.40), _cell("pretrained", 0.90, 0.89, 1.50)],
         "pairs": [{"seed": 0, "n": 1000, "pretrained_only": 150, "scratch_only": 50}]}
    (tmp_path / "transfer.json").write_text(json.dumps(R))
    t = bt.render(tmp_path)
    rows = [line for line in t.splitlines() if line.startswith("| pretrained") or line.startswith("| scratch")]
    assert rows[0].startswith("| pretrained | 0 | 90.00 % | trial 4 (2 blocks) | 1.50× (1.48–1.53) | +1.00 ± ")
    assert rows[1].startswith("| scratch | 0 | 80.00 % |") and len(rows) == 2
    assert "classifies +10.00 pt more of the 1000 test images" in t and "150 right only pretrained" in t
    (tmp_path / "transfer.json").write_text(json.dumps(R | {"schema": "other/1"}))
    with pytest.raises(ValueError, match="schema"):
        bt.render(tmp_path)


@pytest.mark.parametrize("argv, says", [
    (["run"], "--runs-dir"),
    (["run", "--runs-dir", "x", "--seeds", "0,0"], "distinct seeds"),
    (["run", "--runs-dir", "x", "--seeds", "a"], "give seeds as"),
    (["publish", "--runs-dir", "NOWHERE"], "nothing to publish"),
])
def test_bad_arguments_are_one_line_exit_2(argv: list[str], says: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        bt.main([str(tmp_path / "none") if a == "NOWHERE" else a for a in argv])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and says in err and len(err.splitlines()) == 1, err
