"""tools/bench_rivals.py: the docs block on hand-made records (matched arms get a verdict with an interval once
3 seeds are in, an unmatched arm none; Layer Folding's best chosen by latency and validation, never test
accuracy), the width names, bad arguments; the whole pipeline end to end on a tiny run in the tools tier."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tools import bench_rivals as br
from tools.compare import pack_bits

N = 400


def _rec(cell: str, seed: int, acc: float, speed: float, vs_main: float, rng: np.random.Generator, *,
         val: float = 0.9, int8: float | None = None, hits: np.ndarray | None = None) -> dict:
    hits = rng.random(N) < acc if hits is None else hits
    int8_hits = rng.random(N) < (acc if int8 is None else int8)
    sp = {"vs_fp32_asis": [speed, speed - 0.02, speed + 0.02], "vs_main": [vs_main, vs_main - 0.01,
                                                                             vs_main + 0.01], "median_ms": 0.1}
    return {"cell": cell, "seed": seed, "onnx_acc": float(hits.mean()), "onnx_correct": pack_bits(hits),
            "test_samples": N, "val_acc": val, "int8_acc": float(int8_hits.mean()),
            "int8_correct": pack_bits(int8_hits), "speedup": {"fp32": sp, "int8": sp}}


def _fixed_hits(wrong: int) -> np.ndarray:
    """The first ``wrong`` test items wrong, the rest right."""
    return np.arange(N) >= wrong


def _write(root: Path, seeds: list[int], narrow_vs_main: float = 1.01, fixed: bool = False) -> None:
    """Hand-made records; ``fixed``: latopt's network 1.60×, 1.61×, 1.62× ... at seeds 0, 1, 2 ..., and it and the
    pruning arm with known per-image correctness (8 and 40 + 4·seed of the N items wrong)."""
    rng = np.random.default_rng(0)
    (root / "cells").mkdir(parents=True)
    for s in seeds:
        main_hits, prune_hits = (_fixed_hits(8), _fixed_hits(40 + 4 * s)) if fixed else (None, None)
        recs = [_rec(f"s{s}-main", s, 0.92, 1.6 + 0.01 * s * fixed, 1.0, rng, hits=main_hits),
                _rec(f"s{s}-base", s, 0.93, 1.0, 1.6, rng),
                _rec(f"s{s}-narrow>main", s, 0.80, 1.58, narrow_vs_main, rng),
                _rec(f"s{s}-{br.prune_cell()}", s, 0.91, 1.62, 0.99, rng, hits=prune_hits),
                # λ 1 is slower than latopt's network, λ 3 fast enough but less accurate on validation than λ 2
                _rec(f"s{s}-lf-lut@1", s, 0.93, 1.2, 1.33, rng, val=0.99),
                _rec(f"s{s}-lf-lut@2", s, 0.91, 1.58, 1.01, rng, val=0.95),
                _rec(f"s{s}-lf-lut@3", s, 0.95, 1.7, 0.94, rng, val=0.90)]
        for r in recs:
            (root / "cells" / f"{r['cell']}.json").write_text(json.dumps(r))
    groups = [{"seeds": seeds, "commit": "abcdef1234567", "published": "now", "smoke": False,
               "environment": {"cpu": "test cpu", "cpu_count": 2}, "measure": {"rounds": 1000, "seconds": 60.0}}]
    (root / "groups.json").write_text(json.dumps({"schema": br.SCHEMA, "config": br.CONFIG, "groups": groups}))


def test_the_block_before_any_run(tmp_path: Path) -> None:
    assert "Not run yet" in br.render(tmp_path)


def test_layer_foldings_best_is_chosen_by_latency_and_validation(tmp_path: Path) -> None:
    _write(tmp_path, [0])
    recs = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "cells").glob("*.json")}
    assert br.lf_best(recs, 0) == "s0-lf-lut@2"   # fast enough (1.58 >= 1.6 x 0.97), best validation of those
    for c in ("s0-lf-lut@2", "s0-lf-lut@3"):
        recs[c]["speedup"]["fp32"]["vs_fp32_asis"][0] = 1.1
    assert br.lf_best(recs, 0) == "s0-lf-lut@1"   # none fast enough: the fastest


def test_one_seed_shows_differences_three_seeds_an_interval(tmp_path: Path) -> None:
    _write(tmp_path / "one", [0])
    one = br.render(tmp_path / "one")
    assert "| latopt (main job) | 0 |" in one and "| INT8 of latopt's network | 0 |" in one
    assert "Layer Folding's best (lf-lut@2)" in one
    rows = {line.split("|")[1].strip(): line for line in one.splitlines() if line.startswith("| ") and "seeds:" in line}
    assert rows and all(("no interval" in r) != ("not matched" in r) for r in rows.values())   # one seed: none
    _write(tmp_path / "three", [0, 1, 2], narrow_vs_main=1.2)
    three = br.render(tmp_path / "three")
    verdict = {line.split("|")[1].strip(): line.split("|")[4].strip() for line in three.splitlines()
               if line.startswith("| ") and line.count("|") == 6 and "[" in line}
    assert verdict["narrower MobileNetV2, from scratch"] == "—"                    # not matched: no verdict
    assert "not matched" in three
    assert verdict["torch-pruning (fair arm)"] in ("as accurate", "not worse", "not better", "not resolved",
                                                   "better", "worse")
    assert "INT8 of the as-is network" in three and "(SMOKE" not in three


def test_a_narrower_width_keeps_the_strides() -> None:
    name = "torchvision/mobilenet_v2?width=0.5&strides=1,2,2,1,1,2,1"
    assert br.narrow_name(name, 0.375) == "torchvision/mobilenet_v2?width=0.375&strides=1,2,2,1,1,2,1"
    with pytest.raises(SystemExit):
        br.narrow_name("mobilenetv2_050", 0.3)


@pytest.mark.parametrize("argv, says", [
    (["run", "--runs-dir", "x", "--seeds", "0", "0"], "distinct seeds"),
    (["run", "--runs-dir", "x", "--seeds", "-1"], "distinct seeds"),
    (["measure", "--seeds", "0"], "--runs-dir"),
])
def test_bad_arguments_are_one_line_exit_2(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        br.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and says in err[0] and err[0].startswith("bench_rivals: error:")


def test_measure_refuses_unfinished_cells(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        br.main(["measure", "--runs-dir", str(tmp_path), "--seeds", "0"])
    assert e.value.code == 2 and "cells not finished" in capsys.readouterr().err


@pytest.mark.tools   # ~2.5 min on 2 cores: the tools tier
def test_smoke_end_to_end(tmp_path: Path) -> None:
    """Every stage on a tiny run: the main job, its base, the narrow, pruning and Layer Folding arms, the final
    run, the published results (no machine paths) and the block made from them."""
    runs, results = tmp_path / "runs", tmp_path / "results"
    for stage in ("run", "measure"):
        assert br.main([stage, "--runs-dir", str(runs), "--seeds", "0", "--smoke"]) == 0
    assert br.main(["publish", "--runs-dir", str(runs), "--seeds", "0", "--smoke", "--results", str(results)]) == 0
    cells = {p.stem: json.loads(p.read_text()) for p in (results / "cells").glob("*.json")}
    assert set(cells) == {c for c, _, _ in br.cells([0])}
    text = json.dumps(cells)
    assert str(tmp_path) not in text and "onnx\"" not in text   # no machine paths
    narrow = cells["s0-narrow>main"]
    assert narrow["match"]["width"] in br.WIDTHS_SMOKE and narrow["epochs"] == 1
    assert cells["s0-prune-e10>main"]["extra_epochs"] == br.PRUNE_EPOCHS
    block = br.render(results)
    assert "(SMOKE: tiny budgets, no evidence)" in block and "| latopt (main job) | 0 |" in block


def test_the_summary_carries_each_arms_speed_ups_and_the_verdict(tmp_path: Path) -> None:
    from tools.compare import paired_interval

    assert "Not run yet" in br.render_summary(tmp_path)
    _write(tmp_path, [0, 1, 2], narrow_vs_main=1.2, fixed=True)
    summary = br.render_summary(tmp_path)
    assert "Config `fashion_mnist`" in summary and "95 %" in summary
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in summary.splitlines()
            if line.startswith("| ") and not line.startswith("| what")}
    assert rows["latopt (main job)"] == ["1.60×, 1.61×, 1.62×", "98.00", "–", "–"]   # each seed its own speed-up
    prune = rows["torch-pruning (fair arm)"]
    assert prune[1] == "89.00"                       # (360 + 356 + 352) / 3 of 400 items
    # latopt − pruning: 8, 9 and 10 pt at the three seeds, computed here independently of the tool
    expected = paired_interval({s: _fixed_hits(8) for s in (0, 1, 2)}, {s: _fixed_hits(40 + 4 * s) for s in (0, 1, 2)},
                               min_seeds=3)   # the protocol's three seeds
    assert prune[2] == expected.text() and prune[2].startswith("+9.00 [")
    assert prune[3] == "better" == expected.verdict()                   # the interval lies above +1 pt
    full = {line.split("|")[1].strip(): line.split("|")[4].strip() for line in br.render(tmp_path).splitlines()
            if line.startswith("| ") and line.count("|") == 6 and "[" in line}
    # the summary's verdicts are the full block's: one computation, two views
    assert full["torch-pruning (fair arm)"] == "better"
    assert rows["narrower MobileNetV2, from scratch"][3] == "none: not matched at seed(s) [0, 1, 2]"
    assert rows["Layer Folding's best"][0] == "1.58×, 1.58×, 1.58×"             # λ 2, chosen at every seed
    assert "SMOKE" not in summary


def test_the_summary_of_fewer_than_three_seeds_gives_no_interval(tmp_path: Path) -> None:
    _write(tmp_path, [0, 1], fixed=True)
    summary = br.render_summary(tmp_path)
    assert "95 %" not in summary and "an interval needs 3 seeds" in summary
    prune = next(line for line in summary.splitlines() if line.startswith("| torch-pruning"))
    assert "+8.50 (seeds: +8.00, +9.00)" in prune and "| no interval |" in prune
