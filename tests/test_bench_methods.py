"""tools/bench_methods.py (the method table): the dominance rule, and a tiny end-to-end --smoke run
(one seed, 96 images, one epoch per stage, short timing budgets) checked for the structure the table rests on."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import onnx
import pytest

REPO = Path(__file__).resolve().parents[1]


def _load_tool() -> Any:
    name = "bench_methods"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "tools" / "bench_methods.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


bm = _load_tool()


def _row(speedup: float, accs: list[float]) -> dict[str, Any]:
    by_seed = dict(enumerate(accs))
    return {"acc_by_seed": by_seed, "r32": {"fp32": {"speedup_vs_fp32_asis": (speedup, speedup, speedup)},
                                             "int8": {"speedup_vs_fp32_asis": (speedup, speedup, speedup)},
                                             "int8_acc_by_seed": by_seed}}


@pytest.mark.parametrize(("ours", "dominated"), [
    (_row(1.50, [0.81, 0.82, 0.80]), True),    # as fast, more accurate
    (_row(1.47, [0.80, 0.81, 0.79]), True),    # 2 % slower (within the 3 % match), same accuracy
    (_row(1.40, [0.90, 0.90, 0.90]), False),   # more accurate but slower
    (_row(1.60, [0.75, 0.76, 0.74]), False),   # faster but 5 pt worse on every seed
])
def test_dominance_rule(ours: dict[str, Any], dominated: bool) -> None:
    summ = {"rows": {"lf-lut@3": ours, "prune>lf-lut@3": _row(1.50, [0.80, 0.81, 0.79]),
                     "asis": _row(1.0, [0.9, 0.9, 0.9])}}
    dom = bm.dominance(summ, 32, 0.03)
    assert [(v["precision"], v["rival"]) for v in dom] == [("fp32", "prune>lf-lut@3"), ("int8", "prune>lf-lut@3")]
    assert all(v["dominated"] is dominated for v in dom)
    assert all(v["by"]["ours"] == "lf-lut@3" for v in dom)
    assert "does not dominate" in bm.render_verdict(summ, 32, 0.03) or dominated


@pytest.mark.slow
def test_smoke_end_to_end(tmp_path: Path) -> None:
    """Layer Folding with uniform c_l stands for both fold cells (LUT c_l only changes run_fold's costs, tested
    with the fold): no fold LUT is profiled, which keeps this near a minute on an idle machine. The DP cell
    profiles its variant LUT."""
    runs, doc = tmp_path / "runs", tmp_path / "doc" / "method-table.md"
    common = ["--runs-dir", str(runs), "--smoke", "--seeds", "0", "--lambdas", "10",
              "--methods", "asis", "lf-uniform", "dp", "prune", "--prune-targets", "lf-uniform@10",
              "--resolutions", "32", "48", "--budget-s", "1", "--min-rounds", "5", "--set", "fold.alpha_lr=2"]
    assert bm.main(["all", *common, "--doc", str(doc)]) == 0

    cells = {p.stem: json.loads(p.read_text()) for p in (runs / "cells").glob("*.json")}
    want = {"s0-base", "s0-asis", "s0-lf-uniform@10", "s0-prune>lf-uniform@10"}
    assert set(cells) == want | {"s0-dp@0.6"}
    assert cells["s0-lf-uniform@10"]["lut"] is None and not (runs / "lut" / "cpu-r32.json").exists()
    # the DP's variant LUT, its plan exported and rebuilt at the second resolution
    assert (runs / "lut" / "cpu-variants-r32.json").is_file()
    assert cells["s0-dp@0.6"]["structure"]["kind"] == "fold" and cells["s0-dp@0.6"]["onnx"]
    assert cells["s0-lf-uniform@10"]["n_folded"] >= 1  # the fold cell differs from as-is

    def channels(path: str) -> list[int]:
        g = onnx.load(path).graph
        init = {t.name: list(t.dims) for t in g.initializer}
        return [init[n.input[1]][0] for n in g.node if n.op_type == "Conv"]

    pruned, asis = channels(cells["s0-prune>lf-uniform@10"]["onnx"]), channels(cells["s0-asis"]["onnx"])
    assert sum(pruned) < sum(asis)  # pruning removed channels
    assert cells["s0-prune>lf-uniform@10"]["structure"] == {"kind": "prune", "ratio": cells["s0-prune>lf-uniform@10"][
        "match"]["ratio"], "round_to": 8}

    m32 = json.loads((runs / "measure-r32.json").read_text())
    done = sorted(c for c in cells if c != "s0-base")
    assert sorted(m32["stats"]) == sorted(f"{c}|{p}" for c in done for p in ("fp32", "int8"))
    assert len({len(s["samples_ms"]) for s in m32["stats"].values()}) == 1  # one interleaved run
    assert set(m32["int8_acc"]) == set(done) and all(0 <= a <= 1 for a in m32["int8_acc"].values())
    q = onnx.load(str(runs / "int8-r32" / "s0-lf-uniform@10.onnx")).graph
    assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op_type for n in q.node}

    m48 = json.loads((runs / "measure-r48.json").read_text())
    assert m48["random_weights"] and set(m48["members"]) == set(done)
    assert m48["members"]["s0-asis"] != m48["members"]["s0-prune>lf-uniform@10"]

    summ = json.loads((runs / "summary.json").read_text())
    assert summ["rows"]["asis"]["r32"]["fp32"]["speedup_vs_fp32_asis"] == [1.0, 1.0, 1.0]  # rounds aligned
    text = doc.read_text()
    assert "| lf-uniform@10 |" in text and "| prune>lf-uniform@10 |" in text and "Dominance" in text
    assert "(1 seed)" in text and "± 0.00" not in text  # one seed: no sd shown
    assert doc.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a rerun is resumable: every cell is skipped, the report is rewritten from the same JSON
    assert bm.main(["report", *common, "--doc", str(doc)]) == 0
    assert doc.read_text().count("<!-- table -->") == 1
