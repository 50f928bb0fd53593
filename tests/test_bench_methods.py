"""tools/bench_methods.py (the method table): the dominance rule, and (the tools tier) a tiny end-to-end
--smoke run (one seed, 96 images, one epoch per stage, short timing budgets) checked for the structure the table
rests on."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from tools import bench_methods as bm


def _results(tmp: Path, points: dict[str, tuple[float, float]], seeds: int = 5) -> Path:
    """A results/method-table directory of synthetic cells: method -> (speed-up, accuracy); 360 source digits ×
    3 canvases per seed, the same items right for every method up to its accuracy (paired)."""
    from tools.compare import pack_bits

    root = tmp / "results"
    (root / "cells").mkdir(parents=True)
    env = {"cpu": "test CPU", "cpu_flags": ["avx2"], "cpu_count": 2}
    run = {"schema": bm.RESULTS_SCHEMA, "commit": "0" * 40, "config": "digits_clutter", "overrides": [],
           "smoke": False, "seeds": list(range(seeds)), "lambdas": [1.0, 2.0, 3.0], "budgets": [0.6],
           "ablation_budget": 0.6, "prune_targets": [], "match_tol": 0.03, "round_to": 8, "prune_steps": 3,
           "int8_calibration": 256, "started": "2026-01-01T00:00:00+0000", "model": "m", "task": "digits-clutter",
           "resolution": 32, "device": "cpu",
           "schedule": {"base_epochs": 60, "base_lr": 0.02, "schedule": "cosine", "ft_epochs": 6, "ft_lr": 0.005,
                        "prefold_epochs": 4, "postfold_epochs": 2},
           "sizes": {"train": 3234, "val": 1077, "test": 1080}, "test_group": 3, "luts": {},
           "measure": {"32": {"rounds": 100, "seconds": 1.0, "loadavg_after": [0.0, 0.0, 0.0], "environment": env}}}
    (root / "run.json").write_text(json.dumps(run))
    rng = np.random.default_rng(0)
    order = {s: rng.permutation(360) for s in range(seeds)}
    for meth, (sp, acc) in {"asis": (1.0, 0.95), **points}.items():
        for s in range(seeds):
            digits = np.zeros(360, bool)
            digits[order[s][: round(acc * 360)]] = True
            hits = np.repeat(digits, 3)
            rec = {"cell": f"s{s}-{meth}", "seed": s, "method": meth, "test_acc": float(hits.mean()),
                   "onnx_acc": float(hits.mean()), "onnx_correct": pack_bits(hits), "test_samples": 1080,
                   "int8_acc": float(hits.mean()), "int8_correct": pack_bits(hits),
                   "speedup": {"32": {p: {"vs_fp32_asis": [sp, sp, sp], "vs_int8_asis": [sp, sp, sp], "median_ms": 1 / sp}
                                      for p in ("fp32", "int8")}},
                   "structure": {"kind": "fold", "plan": {}}, "n_folded": 3, "extra_epochs": 6}
            (root / "cells" / f"s{s}-{meth}.json").write_text(json.dumps(rec))
    return root


def test_dominance_both_ways(tmp_path: Path) -> None:
    root = _results(tmp_path, {
        "lf-uniform@1": (1.50, 0.90),
        "lf-uniform@2": (1.45, 0.88),   # slower and less accurate than lf-uniform@1: off its own front
        "lf-lut@1": (1.47, 0.90),   # 2 % slower, same accuracy: within the match, each dominates the other
        "lf-lut@2": (1.80, 0.80),   # faster but 10 pt worse: dominates nothing
        "lf-uniform@3": (1.70, 0.85),
        "dp@0.6": (1.80, 0.88),     # as fast as lf-lut@2, 3 pt better than lf-uniform@3 and faster
    })
    R = bm.Results(root)
    rows = {(r["side"], r["point"]): r for r in bm.dominance_rows(R, "fp32")}
    # lf-uniform@1 and lf-lut@1 dominate each other: equivalent, a win for neither
    assert rows[("rival", "lf-uniform@1")]["status"] == "equivalent" == rows[("ours", "lf-lut@1")]["status"]
    assert not rows[("rival", "lf-uniform@1")]["dominated"] and not rows[("ours", "lf-lut@1")]["dominated"]
    # lf-uniform@3 is dominated by dp@0.6 (faster, 3 pt better), not by lf-lut@2 (as fast, 5 pt worse)
    r = rows[("rival", "lf-uniform@3")]
    assert r["dominated"] and r["best"]["by"] == "dp@0.6" and r["best"]["diff"].verdict() == "better"
    assert r["front"] and not rows[("rival", "lf-uniform@2")]["front"]
    # lf-lut@2 is dominated by no rival: none is as fast as 1.80x (lf-uniform@3 is 6 % slower: outside the match)
    assert not rows[("ours", "lf-lut@2")]["dominated"] and rows[("ours", "lf-lut@2")]["best"] is None
    # dp@0.6: no rival as fast
    assert not rows[("ours", "dp@0.6")]["dominated"]
    text = bm.render_doc(root)
    assert "effective test size 360" in text
    # lf-uniform@2 is dominated too (by lf-lut@1), but it is off its own front: not counted
    assert rows[("rival", "lf-uniform@2")]["dominated"]
    assert ("paper Layer Folding (uniform c_l): 1 of the 2 points on its own front dominated by ours (lf-uniform@3), "
            "1 equivalent to one of ours (lf-uniform@1) (lf-uniform@2 off its own front, not counted); 0 of our 3 "
            "points on their own fronts dominated by it.") in text


def test_holm_over_challengers(tmp_path: Path) -> None:
    """A point with several challengers is dominated only when one of them is non-inferior after Holm's
    adjustment over all of them: more challengers, a higher bar."""
    from tools.compare import holm

    root = _results(tmp_path, {"lf-uniform@1": (1.20, 0.90), "lf-lut@1": (1.30, 0.90), "lf-lut@2": (1.40, 0.89),
                               "dp@0.6": (1.50, 0.88)})
    R = bm.Results(root)
    r = next(x for x in bm.dominance_rows(R, "fp32") if x["point"] == "lf-uniform@1")
    assert r["challengers"] == 3
    ps = [R.diff(c, "lf-uniform@1").p_non_inferior() for c in ("lf-lut@1", "lf-lut@2", "dp@0.6")]
    assert r["best"]["p_holm"] == pytest.approx(min(holm(ps)))


def test_run_without_paper_layer_folding(tmp_path: Path) -> None:
    """The pruning run (docs/pruning.md) has no lf-uniform and no ablations: its page names its own results
    directory, has Q1 and the pruning front, and no Q4 or Q2 built on cells that did not run."""
    root = _results(tmp_path, {"lf-lut@1": (1.3, 0.9), "dp@0.6": (1.6, 0.9)})
    text = bm.render_doc(root)
    assert f"from `results/{root.name}/`" in text
    assert "### Q1: ours against the alternatives" in text and "### The pruning front" in text
    assert "### Q4" not in text and "### Q2" not in text and "paper Layer Folding" not in text


@pytest.mark.slow
@pytest.mark.tools   # ~30 s on 2 cores: the tools tier
def test_smoke_end_to_end(tmp_path: Path) -> None:
    """Every stage on a tiny run (one seed, 96 images, one epoch per stage, short timing budgets): the cells
    the table rests on, the final runs, the published results (no machine paths) and the page made from them.
    Layer Folding with uniform c_l stands in for the LUT arm where a fold cell is needed (no fold LUT is
    profiled); the DP cells profile their variant LUT."""
    runs, results = tmp_path / "runs", tmp_path / "results"
    common = ["--runs-dir", str(runs), "--smoke", "--seeds", "0", "--lambdas", "10",
              "--methods", "asis", "lf-uniform", "dp", "prune", "--prune-targets", "lf-uniform@10",
              "--budgets", "0.6", "--resolutions", "32", "48", "--budget-s", "1", "--min-rounds", "5",
              "--set", "fold.alpha_lr=2"]
    assert bm.main(["all", *common, "--results", str(results)]) == 0

    cells = {p.stem: json.loads(p.read_text()) for p in (runs / "cells").glob("*.json")}
    assert set(cells) == {"s0-base", "s0-asis", "s0-lf-uniform@10", "s0-prune>lf-uniform@10", "s0-dp@0.6"}
    assert cells["s0-lf-uniform@10"]["lut"] is None and not (runs / "lut" / "cpu-r32.json").exists()
    assert (runs / "lut" / "cpu-variants-r32.json").is_file()
    assert cells["s0-lf-uniform@10"]["n_folded"] >= 1  # the fold cell differs from as-is
    assert "plateau" in cells["s0-base"] and cells["s0-base"]["curve"]

    def channels(path: str) -> list[int]:
        g = onnx.load(path).graph
        init = {t.name: list(t.dims) for t in g.initializer}
        return [init[n.input[1]][0] for n in g.node if n.op_type == "Conv"]

    pruned, asis = channels(cells["s0-prune>lf-uniform@10"]["onnx"]), channels(cells["s0-asis"]["onnx"])
    assert sum(pruned) < sum(asis)  # pruning removed channels
    assert cells["s0-prune>lf-uniform@10"]["prune_steps"] == [1, 1, 0]

    m32 = json.loads((runs / "measure-r32.json").read_text())
    done = sorted(c for c in cells if c != "s0-base")
    assert sorted(m32["stats"]) == sorted(f"{c}|{p}" for c in done for p in ("fp32", "int8"))
    assert len({len(s["samples_ms"]) for s in m32["stats"].values()}) == 1  # one interleaved run
    q = onnx.load(str(runs / "int8-r32" / "s0-lf-uniform@10.onnx")).graph
    assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op_type for n in q.node}
    m48 = json.loads((runs / "measure-r48.json").read_text())
    assert m48["random_weights"] and set(m48["members"]) == set(done)

    # published: per-sample results that reproduce the accuracies, speed-ups, no machine paths
    from tools.compare import unpack_bits

    pub = {p.stem: json.loads(p.read_text()) for p in (results / "cells").glob("*.json")}
    assert set(pub) == set(cells)
    for c in done:
        r = pub[c]
        assert unpack_bits(r["onnx_correct"], r["test_samples"]).mean() == pytest.approx(r["onnx_acc"])
        assert unpack_bits(r["int8_correct"], r["test_samples"]).mean() == pytest.approx(r["int8_acc"])
        assert set(r["speedup"]) == {"32", "48"}
    assert pub["s0-asis"]["speedup"]["32"]["fp32"]["vs_fp32_asis"] == [1.0, 1.0, 1.0]  # rounds aligned
    assert "vs_target" in pub["s0-prune>lf-uniform@10"]["speedup"]["32"]
    assert 0 < pub["s0-lf-uniform@10"]["nonlinear_ops"] < pub["s0-asis"]["nonlinear_ops"]  # the fold removed some
    blob = (results / "run.json").read_text() + "".join(p.read_text() for p in (results / "cells").glob("*.json"))
    assert str(tmp_path) not in blob
    text = bm.render_doc(results)
    assert "**smoke**" in text and "| lf-uniform@10 |" in text and "| prune>lf-uniform@10 |" in text
    assert "no interval" in text  # one seed: per-seed values, no interval
    png = bm.pareto_figure(results, tmp_path / "plot.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # resumable: a rerun skips every cell and publishes the same cells
    assert bm.main(["run", *common]) == 0
    assert {p.stem for p in (runs / "cells").glob("*.json")} == set(cells)


def _grouped(root: Path, groups: list[list[int]]) -> Path:
    """``root``'s run.json as a run in seed groups (publish --group), the cells of the other seeds removed."""
    run = json.loads((root / "run.json").read_text())
    keep = [s for g in groups for s in g]
    run["groups"] = [{"seeds": g, "commit": f"{i}" * 40, "started": f"2026-01-0{i + 1}T00:00:00+0000", "luts": {},
                      "measure": run["measure"]} for i, g in enumerate(groups)]
    for k in ("measure", "luts"):
        run.pop(k)
    run["seeds"], run["planned_seeds"] = keep, [0, 1, 2, 3, 4]
    (root / "run.json").write_text(json.dumps(run))
    for p in (root / "cells").glob("*.json"):
        if json.loads(p.read_text())["seed"] not in keep:
            p.unlink()
    return root


def test_a_run_in_seed_groups_waits_for_every_seed_then_names_each_groups_machine(tmp_path: Path) -> None:
    points = {"lf-lut@1": (1.3, 0.9), "dp@0.6": (1.6, 0.9)}
    part = bm.render_doc(_grouped(_results(tmp_path / "a", points), [[0, 1]]))
    assert "**Seeds [0, 1] of [0, 1, 2, 3, 4] are published.**" in part
    assert "### Q1" not in part and "### All points" not in part   # no table before every seed is in
    assert "- Seeds [0, 1]: machine test CPU" in part
    whole = bm.render_doc(_grouped(_results(tmp_path / "b", points), [[0, 1], [2, 3, 4]]))
    assert "### Q1: ours against the alternatives" in whole and "are published" not in whole
    assert "seeds [0, 1]: cells run by commit `0000000000`" in whole
    assert "seeds [2, 3, 4]: cells run by commit `1111111111`" in whole
    assert "- Seeds [2, 3, 4]: final run @32 px" in whole
