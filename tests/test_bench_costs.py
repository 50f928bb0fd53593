"""tools/bench_costs.py (E1 and E2): the front interpolation, the fixed speed-ups, the tables rendered
from small synthetic results directories, bad input, and (the tools tier) a tiny end-to-end --smoke run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tools import bench_costs as bc
from tools.compare import pack_bits

N = 2000   # test items of the synthetic results (per seed, the same items: crossed)


def _hits(acc: float, seed: int, shift: int = 0) -> np.ndarray:
    """A correctness vector with accuracy ``acc``: the items right are the first of a per-seed order, so two
    vectors of one seed are nested (paired, as networks of one base are)."""
    order = np.random.default_rng(seed).permutation(N)
    h = np.zeros(N, bool)
    h[order[shift:shift + round(acc * N)]] = True
    return h


def test_front_and_interpolation() -> None:
    a, b, c = np.array([1, 1, 0, 0], bool), np.array([1, 0, 0, 0], bool), np.array([0, 0, 0, 0], bool)
    d = np.array([1, 1, 1, 1], bool)
    # (speed-up, validation accuracy, correctness): the 1.5x point is dominated on validation by the 1.6x one
    pts = [(1.0, 0.9, a), (1.5, 0.7, d), (1.6, 0.8, b), (2.0, 0.5, c)]
    assert bc.front([(s, v) for s, v, _ in pts]) == [0, 2, 3]
    # halfway between 1.0 and 1.6 (the dominated 1.5x point is skipped although its test accuracy is higher)
    np.testing.assert_allclose(bc.front_scores(pts, 1.3), [1.0, 0.5, 0.0, 0.0])
    np.testing.assert_allclose(bc.front_scores(pts, 1.6), b.astype(float))
    np.testing.assert_allclose(bc.front_scores(pts, 1.8), [0.5, 0.0, 0.0, 0.0])
    assert bc.front_scores(pts, 2.01) is None          # beyond the fastest point: not reached
    # the fixed speed-ups: the slowest of the fastest points over families and seeds, latency only
    assert bc.fixed_speedups({"own": [2.0, 1.8], "flops": [1.4, 1.6]}) == pytest.approx([1.1, 1.2, 1.3])
    assert bc.fixed_speedups({"own": [2.0], "uniform": [1.0]}) is None


def _e1_results(tmp: Path, own_gain: float) -> Path:
    """results/hardware-awareness/e1/s: 5 seeds, every cost model with 3 Layer Folding and 3 DP points at the
    same speed-ups (1.2, 1.5, 1.8x fp32; 1.1, 1.3, 1.5x INT8), accuracy 0.90 − 0.05·k; the own LUT of each target
    ``own_gain`` better at every point."""
    root = tmp / "results"
    d = root / "hardware-awareness" / "e1" / "s"
    (d / "cells").mkdir(parents=True)
    run = {"schema": bc.RESULTS_SCHEMA, "commit": "0" * 40, "started": "2026-12-02T06:00:00+0000", "smoke": False,
           "setting": "s", "seeds": list(range(5)), "cost_models": list(bc.COST_MODELS), "lambdas": [1.0, 2.0, 3.0],
           "budgets": [0.5, 0.6, 0.7], "model": "m", "task": "fashion-mnist", "resolution": 32,
           "sizes": {"train": 8000, "val": 5000, "test": N},
           "schedule": {"base_epochs": 15, "ft_epochs": 2, "prefold_epochs": 1, "postfold_epochs": 1, "ft_lr": 0.01,
                        "train_samples": 8000},
           "measure": {"rounds": 300, "seconds": 10.0, "environment": {"cpu": "test CPU", "cpu_count": 2}}}
    (d / "run.json").write_text(json.dumps(run))

    def write(cell: str, seed: int, sp32: float, sp8: float, acc32: float, acc8: float) -> None:
        h32, h8 = _hits(acc32, seed), _hits(acc8, seed)
        rec = {"cell": cell, "seed": seed, "method": cell.split("-", 1)[1], "val_acc": acc32, "test_samples": N,
               "onnx_correct": pack_bits(h32), "int8_correct": pack_bits(h8),
               "speedup": {"fp32": {"vs_fp32_asis": [sp32] * 3}, "int8": {"vs_int8_asis": [sp8] * 3}}}
        (d / "cells" / f"{cell}.json").write_text(json.dumps(rec))

    for s in range(5):
        write(f"s{s}-asis", s, 1.0, 1.0, 0.95, 0.95)
        for cost in bc.COST_MODELS:
            for kind, xs in (("lf", (1, 2, 3)), ("dp", (0.5, 0.6, 0.7))):
                for k, x in enumerate(xs):
                    base = 0.90 - 0.05 * k
                    write(f"s{s}-{kind}.{cost}@{x:g}", s, (1.2, 1.5, 1.8)[k], (1.1, 1.3, 1.5)[k],
                          base + (own_gain if cost == "cpu" else 0), base + (own_gain if cost == "cpu-int8" else 0))
    return root / "hardware-awareness"


def test_e1_table_claim(tmp_path: Path) -> None:
    res = _e1_results(tmp_path / "a", own_gain=0.03)
    E = bc.E1(res / "e1" / "s")
    a = bc.e1_analysis(E, "cpu", "lf")
    assert a["speedups"] == pytest.approx([1.2, 1.4, 1.6])   # S_max 1.8: every family's fastest point
    # at 1.4x: between the 1.2x (0.90) and 1.5x (0.85) points, 2/3 of the way: 0.8667 (+0.03 for the own LUT)
    assert a["rows"]["flops"][1]["acc"] == pytest.approx(0.90 - 0.05 * 2 / 3, abs=1e-3)
    assert a["rows"]["own"][1]["acc"] == pytest.approx(0.93 - 0.05 * 2 / 3, abs=1e-3)
    d = a["rows"]["uniform"][1]["own_minus"]
    assert d.mean == pytest.approx(0.03, abs=1e-3) and d.verdict(bc.MARGIN) == "better"
    # the other device's LUT (cpu-int8) is as good as FLOPs on the cpu: own − other is also +3 pt
    assert a["rows"]["other"][0]["own_minus"].verdict(bc.MARGIN) == "better"
    assert bc.claim(a, 0) == "**holds**"
    text = bc.render_e1(res)
    assert "##### target `cpu`, Layer Folding" in text and "##### target `cpu-int8`, the DP" in text
    assert text.count("**holds**") == 4 * 3     # 2 targets × 2 methods × 3 speed-ups
    # no gain: the claim does not hold, and the table says they are equivalent
    res0 = _e1_results(tmp_path / "b", own_gain=0.0)
    a0 = bc.e1_analysis(bc.E1(res0 / "e1" / "s"), "cpu-int8", "dp")
    assert a0["rows"]["flops"][2]["own_minus"].verdict(bc.MARGIN) == "as accurate"
    assert bc.claim(a0, 2) == "does not hold (equivalent within ±0.5 pt)"
    assert "**holds**" not in bc.render_e1(res0)


def test_e1_groups_of_seeds(tmp_path: Path) -> None:
    """A setting published in groups of seeds (one machine each): run.json keeps every group's machine and run,
    a group replaces only its own seeds' record, and the table waits until every seed is published; then it
    is the same table as from one run, with each group's machine named."""
    res = _e1_results(tmp_path, own_gain=0.03)
    path = res / "e1" / "s" / "run.json"
    one = json.loads(path.read_text())
    whole = bc.render_e1(res)
    avx512 = {"cpu": "CPU A", "cpu_count": 2, "cpu_flags": ["avx2", "avx512f", "avx512_vnni"]}
    avx2 = {"cpu": "CPU B", "cpu_count": 2, "cpu_flags": ["avx2"]}
    path.unlink()
    first = bc.group_record(one | {"commit": "a" * 40, "measure": {"rounds": 300, "seconds": 9.0, "environment": avx2}},
                            path, [0, 1])
    assert first["seeds"] == list(bc.SEEDS) and [g["seeds"] for g in first["groups"]] == [[0, 1]]
    path.write_text(json.dumps(first))
    waiting = bc.render_e1(res)
    assert "Seeds [0, 1] of [0, 1, 2, 3, 4] are published" in waiting and "#####" not in waiting
    # a rerun of the first group replaces it; the second group joins it
    again = bc.group_record(one | {"commit": "c" * 40, "measure": {"rounds": 310, "seconds": 9.0, "environment": avx2}},
                            path, [1, 0])
    assert [g["commit"][0] for g in again["groups"]] == ["c"]
    path.write_text(json.dumps(again))
    both = bc.group_record(one | {"commit": "b" * 40, "measure": {"rounds": 200, "seconds": 8.0, "environment": avx512}},
                           path, [2, 3, 4])
    assert [g["seeds"] for g in both["groups"]] == [[0, 1], [2, 3, 4]] and both["commit"] == "c" * 40
    path.write_text(json.dumps(both))
    text = bc.render_e1(res)
    assert "CPU B (AVX2, no AVX-512)" in text and "CPU A (AVX-512 with VNNI)" in text
    tables = [ln for ln in text.splitlines() if ln.startswith("|")]
    assert tables == [ln for ln in whole.splitlines() if ln.startswith("|")]   # the same verdicts


def test_group_needs_e1_and_part_of_the_seeds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for extra in (["--experiments", "e1"], ["--experiments", "e1", "e2", "--seeds", "0"]):
        with pytest.raises(SystemExit) as e:
            bc.main(["measure", "--runs-dir", str(tmp_path / "runs"), "--group", *extra])
        assert e.value.code == 2 and "--group is for E1" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def _e2_results(tmp: Path) -> Path:
    """results/hardware-awareness/e2: budget 0.7 (speed-up 1/0.7 = 1.43x needed), 5 seeds, 3 runs per device.
    On cpu the cpu plan is 1.50x and the flops plan 1.30x (misses); the cpu-int8 plan 1.45x; accuracies: cpu
    0.90, cpu-int8 0.88, flops 0.91, cpu-torch 0.89."""
    d = tmp / "results" / "hardware-awareness" / "e2"
    (d / "cells").mkdir(parents=True)
    srcs = ("cpu", "cpu-int8", "cpu-torch", "flops")
    acc = {"cpu": 0.90, "cpu-int8": 0.88, "cpu-torch": 0.89, "flops": 0.91}
    speed = {"cpu": {"cpu": 1.50, "cpu-int8": 1.45, "cpu-torch": 1.20, "flops": 1.30},
             "cpu-int8": {"cpu": 1.30, "cpu-int8": 1.35, "cpu-torch": 1.25, "flops": 1.20},
             "cpu-torch": {"cpu": 1.60, "cpu-int8": 1.50, "cpu-torch": 1.55, "flops": 1.70}}
    members = {str(s): {src: f"s{s}-dp.{src}@0.7" for src in srcs} for s in range(5)}
    for s in range(5):
        for src in srcs:
            h = _hits(acc[src], s)
            rec = {"cell": f"s{s}-dp.{src}@0.7", "seed": s, "test_samples": N, "onnx_correct": pack_bits(h),
                   "int8_correct": pack_bits(h)}
            (d / "cells" / f"s{s}-dp.{src}@0.7.json").write_text(json.dumps(rec))
    timing = []
    for dev, row in speed.items():
        for r in range(3):
            jitter = 1 + 0.002 * (r - 1)
            timing.append({"device": dev, "run": r, "environment": {"cpu": "test CPU", "cpu_count": 2},
                           "ratio_to_asis": {members[str(s)][src]: [1 / (sp * jitter)] * 3
                                             for s in range(5) for src, sp in row.items()}})
    run = {"schema": bc.RESULTS_SCHEMA, "seeds": list(range(5)), "model": "m", "resolution": 32, "smoke": False,
           "e2": {"setting": "s", "budget": 0.7, "sources": list(srcs), "devices": list(speed), "runs": 3},
           "members": members, "timing": timing}
    (d / "run.json").write_text(json.dumps(run))
    return d.parent


def test_e2_matrix(tmp_path: Path) -> None:
    text = bc.render_e2(_e2_results(tmp_path))
    rows = {ln.split("|")[1].strip(): ln for ln in text.splitlines() if ln.startswith("| cpu")}
    cpu = rows["cpu"].split("|")
    assert "meets (5/5 seeds)" in cpu[2] and cpu[2].startswith(" **")      # own plan, in bold
    assert "misses (0/5 seeds)" in cpu[5]                                    # flops: 1.30x < 1.43x
    # the best other plan that meets the budget on cpu: cpu-int8 (1.45x; flops is more accurate but misses)
    assert "vs `cpu-int8`: +2.00" in rows["cpu"] and rows["cpu"].rstrip().endswith("| better |")
    # on cpu-int8 no plan meets 1.43x, the own one included
    assert "own plan does not meet the budget" in rows["cpu-int8"]
    # on cpu-torch every plan meets it; the strongest rival is flops (0.91 against the own 0.89)
    assert "vs `flops`: -2.00" in rows["cpu-torch"] and rows["cpu-torch"].rstrip().endswith("| worse |")


def test_not_run_yet(tmp_path: Path) -> None:
    assert bc.render_e1(tmp_path).startswith("E1 has not run yet")
    assert bc.render_e2(tmp_path).startswith("E2 has not run yet")


@pytest.mark.parametrize("argv, msg", [
    (["--cost-models", "cpu", "cpu-int8", "nosuch"], "cost model 'nosuch'"),
    (["--budgets", "0.6", "1.5"], "budgets are fractions"),
    (["--lambdas", "1", "1"], "--lambdas lists a value twice"),
    (["--cost-models", "flops", "uniform"], "E1 needs the targets' own LUTs"),
])
def test_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], msg: str) -> None:
    runs = tmp_path / "runs"
    with pytest.raises(SystemExit) as e:
        bc.main(["run", "--runs-dir", str(runs), *argv])
    assert e.value.code == 2 and msg in capsys.readouterr().err
    assert not runs.exists()      # nothing written


@pytest.mark.slow
@pytest.mark.tools   # ~30 s on 2 cores: the tools tier
def test_smoke_end_to_end(tmp_path: Path) -> None:
    """Both experiments on one seed, 96 images of the embedded digits (no optional data needed), one epoch per stage and tiny timing budgets: the cells (a base,
    as-is, the importance, Layer Folding and the DP from the flops and uniform LUTs, E2's cpu-torch plan), E1's
    final run, E2's runs on every device, the published results (no machine paths) and both tables."""
    runs, results = tmp_path / "runs", tmp_path / "results"
    common = ["--runs-dir", str(runs), "--smoke", "--settings", "s", "--seeds", "0", "--cost-models", "flops",
              "uniform", "--lambdas", "10", "--budgets", "0.8", "--e2-budget", "0.8", "--e2-sources", "cpu-torch",
              "flops", "--e2-runs", "2", "--set", "fold.alpha_lr=2",
              # the embedded digits (the protocol's Fashion-MNIST is an optional install): the smoke checks the
              # pipeline, not the data set
              "--set", "data.task=digits", "--set", "data.train_samples=null"]
    assert bc.main(["all", *common, "--results", str(results)]) == 0
    cells = {p.stem: json.loads(p.read_text()) for p in (runs / "s" / "cells").glob("*.json")}
    assert set(cells) == {"s0-base", "s0-asis", "s0-importance", "s0-lf.flops@10", "s0-lf.uniform@10",
                          "s0-dp.flops@0.8", "s0-dp.uniform@0.8", "s0-dp.cpu-torch@0.8"}
    assert cells["s0-lf.flops@10"]["lut"] == "flops-r32.json" and cells["s0-dp.uniform@0.8"]["cost_model"] == "uniform"
    assert cells["s0-importance"]["losses"]
    assert cells["s0-dp.flops@0.8"]["importance"] == "given"     # the seed's shared importance, not recomputed
    m = json.loads((runs / "s" / "measure-r32.json").read_text())
    timed = {k.split("|")[0] for k in m["stats"]}
    assert timed == {"s0-asis", "s0-lf.flops@10", "s0-lf.uniform@10", "s0-dp.flops@0.8", "s0-dp.uniform@0.8"}
    assert len({len(s["samples_ms"]) for s in m["stats"].values()}) == 1   # one interleaved run
    e2 = sorted(p.name for p in (runs / "s" / "e2").glob("*-run*.json"))
    assert e2 == sorted(f"{d}-run{r}.json" for d in bc.E2_DEVICES for r in range(2))
    blob = "".join(p.read_text() for p in results.rglob("*.json"))
    assert str(tmp_path) not in blob
    t1, t2 = bc.render_e1(results), bc.render_e2(results)
    assert "**smoke**" in t1 and "**smoke**" in t2
    assert "| cpu-torch |" in t2 and "no own plan" in t2
    # resumable: a rerun runs no cell again
    before = {p: p.stat().st_mtime for p in (runs / "s" / "cells").glob("*.json")}
    assert bc.main(["run", *common]) == 0
    assert {p: p.stat().st_mtime for p in (runs / "s" / "cells").glob("*.json")} == before
