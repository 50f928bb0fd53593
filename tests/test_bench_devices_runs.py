"""tools/bench_devices.py's intervals over runs : the rounds of one interleaved run are not
independent replicates, the runs are; a results file of the first schema (intervals pooled over rounds) is
rendered with t intervals over its per-run medians and says how many runs lay outside the pooled ones."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scipy import stats

from tools import bench_devices as bd


def test_over_runs_is_a_t_interval_on_the_log() -> None:
    runs = [1.10, 1.12, 1.17]
    g, lo, hi = bd.over_runs(runs)
    logs = [math.log(x) for x in runs]
    m = sum(logs) / 3
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / 2)
    half = stats.t.ppf(0.975, 2) * sd / math.sqrt(3)
    assert (g, lo, hi) == pytest.approx((math.exp(m), math.exp(m - half), math.exp(m + half)))
    assert lo < min(runs) and hi > max(runs)          # three runs, df 2: wider than their range
    assert bd.over_runs([1.1]) is None


def test_pooled_file_is_rendered_over_runs(tmp_path: Path) -> None:
    two = {"0": "full", "1": "full"}
    src = lambda plan, sp, vs, per: {"plan": plan, "same_plan_as_own": False, "speedup": [sp, sp * 0.99, sp * 1.01],  # noqa: E731
                                     "vs_own": vs, "vs_own_per_run": per}
    cells = {"m|a|dp": {"runs": 3, "sources": {
        "a": src(two, 1.5, None, []),
        # pooled over rounds: a narrow interval above 1 ("a beats b"); over the runs it reaches below 1
        "b": src(two, 1.3, [1.05, 1.04, 1.06], [0.98, 1.00, 1.17])}}}
    matrix = {"schema": bd.POOLED_SCHEMA, "resolution": 224, "budget": 0.7, "models": ["m"], "devices": ["a", "b"],
              "runs": 3, "kinds": {"dp": ["full", "pw", "drop"]}, "importance": "uniform",
              "plans": {f"m|{d}|dp": {"plan": two} for d in "ab"}, "luts": {}, "cells": cells,
              "environment": {"cpu": "test CPU", "cpu_flags": [], "cpu_count": 2}}
    (tmp_path / "matrix.json").write_text(json.dumps(matrix))
    text = bd.render(tmp_path)
    row = next(ln for ln in text.splitlines() if ln.startswith("| a |"))
    g, lo, hi = bd.over_runs([0.98, 1.00, 1.17])
    assert f"÷ own {g:.3f} [{lo:.3f}, {hi:.3f}]" in row and "| tie |" in row
    assert "1.30×, 2 blocks" in row                       # no interval without per-run speed-ups
    assert "in 1 of 1 off-diagonal cells a run's own median lay outside" in text
    assert "(3 of 3 per-run medians)" in text
