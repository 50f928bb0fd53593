"""tools/gpu_plans.py without a GPU: the ``--cpu-smoke`` pipeline end to end (every cell present, speed-ups positive,
the budget verdicts consistent with the numbers), the refusal without CUDA, the time limit and an interrupted run
writing what they have, and that the GPU run's timing fits its call."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from tools import gpu_check, gpu_plans

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("gpu_plans")
    code = gpu_plans.main(["--cpu-smoke", "--out", str(out)])
    return code, out, json.loads((out / "plans.json").read_text())


def _cells(rec: dict[str, Any]) -> list[tuple[str, int, str, float]]:
    s = rec["settings"]
    return [(m, b, d, x) for m in s["models"] for b in s["batches"] for d in s["luts"] for x in s["budgets"]]


def test_cpu_smoke_makes_every_cell(smoke: tuple[int, Path, dict[str, Any]]) -> None:
    code, out, rec = smoke
    assert code == 0 and rec["schema"] == gpu_plans.SCHEMA and rec["status"] == "complete"
    s = rec["settings"]
    assert (s["models"], s["batches"], s["budgets"]) == (list(gpu_plans.SMOKE["models"]), [1, 2], [0.6, 0.8])
    assert s["luts"] == ["cpu-torch", "flops"] and s["variants"] == list(gpu_plans.VARIANTS)
    assert [x["status"] for x in rec["steps"]] == ["ok"] * len(rec["steps"]) == ["ok"] * (4 * 2 * len(s["models"]))
    assert set(rec["cells"]) == {gpu_plans._key(*c) for c in _cells(rec)}
    assert set(rec["comparisons"]) == {gpu_plans._key(m, b, x) for m in s["models"] for b in s["batches"]
                                       for x in s["budgets"]}
    for (_m, b, d, _), lut in ((k, rec["luts"][gpu_plans._key(*k[:3])]) for k in _cells(rec)):
        assert (lut["device"], lut["batch"]) == (d, b) and (out / lut["file"]).is_file() and lut["asis_predicted"] > 0
    made = [c for c in rec["cells"].values() if c["plan"] is not None]
    assert made and any(c["lut"] == "cpu-torch" for c in made) and any(c["lut"] == "flops" for c in made)
    for c in rec["cells"].values():
        if c["plan"] is None:
            assert "below the fastest network" in c["why"]
            continue
        assert c["changed"] == len(c["plan"]) >= 1 and set(c["plan"].values()) <= set(gpu_plans.VARIANTS)
        assert c["predicted_ratio"] <= c["budget"] + 1e-9 and c["predicted_speedup"] > 0
        assert c["measured_lut_predicted_speedup"] > 0
        assert set(c["measured"]) == {"eager"}          # no CUDA graphs on the CPU
        for v in c["measured"].values():
            assert 0 < v["ratio_q1"] <= v["ratio"] <= v["ratio_q3"] and v["n"] >= 5
            assert 0 < v["speedup_q1"] <= v["speedup"] <= v["speedup_q3"]
            assert math.isclose(v["speedup"], 1 / v["ratio"]) and math.isclose(v["speedup_q1"], 1 / v["ratio_q3"])
            assert v["meets_budget"] is (v["ratio"] <= c["budget"])   # measured ≤ budget × as-is
            assert v["plan_ms"] > 0 and v["asis_ms"] > 0


def test_cpu_smoke_compares_the_plans_consistently(smoke: tuple[int, Path, dict[str, Any]]) -> None:
    _, _, rec = smoke
    cells = rec["cells"]
    for key, cmp_ in rec["comparisons"].items():
        m, b, x = cmp_["model"], cmp_["batch"], cmp_["budget"]
        a, f = cells[gpu_plans._key(m, b, "cpu-torch", x)], cells[gpu_plans._key(m, b, "flops", x)]
        pa, pf = a["plan"], f["plan"]
        assert ("note" in cmp_) is (pa is None or pf is None), key
        assert all(f"no plan from {d}" in cmp_.get("note", "") for d, p in (("cpu-torch", pa), ("flops", pf)) if p is None)
        if pa is None and pf is None:
            assert "modes" not in cmp_
            continue
        assert cmp_["same_plan"] is (pa == pf)
        pa, pf = pa or {}, pf or {}
        assert cmp_["differ"] == {i: {"cpu-torch": pa.get(i, "none"), "flops": pf.get(i, "none")}
                                  for i in set(pa) | set(pf) if pa.get(i) != pf.get(i)}
        for mode, v in cmp_["modes"].items():
            meets = {d: c["measured"][mode]["meets_budget"] if c["plan"] is not None else None
                     for d, c in (("cpu-torch", a), ("flops", f))}
            assert v["meets_budget"] == meets
            assert v["verdict"] == gpu_plans.verdict(cmp_["same_plan"], meets["cpu-torch"], meets["flops"],
                                                     a.get("changed"), f.get("changed"))
            q = v["measured_over_counted"]
            if a["plan"] is None or f["plan"] is None:
                assert q is None and "has no plan" in v["verdict"]
                continue
            assert 0 < q["q1"] <= q["median"] <= q["q3"]
            if cmp_["same_plan"]:
                assert q["median"] == 1.0


def test_cpu_smoke_counts_scale_with_the_batch_and_keep_the_samples(smoke: tuple[int, Path, dict[str, Any]]) -> None:
    """MACs are linear in the batch: the flops LUT's plans are the same at every batch (a deterministic check of the
    batch's way into the counted profile); the timing files keep every runner's rounds."""
    _, out, rec = smoke
    s = rec["settings"]
    for m in s["models"]:
        for x in s["budgets"]:
            plans = [rec["cells"][gpu_plans._key(m, b, "flops", x)]["plan"] for b in s["batches"]]
            assert all(p == plans[0] for p in plans)
        sizes = [rec["luts"][gpu_plans._key(m, b, "flops")]["asis_predicted"] for b in s["batches"]]
        assert math.isclose(sizes[1] / sizes[0], s["batches"][1] / s["batches"][0], rel_tol=1e-9)
        for b in s["batches"]:
            t = rec["timing"][gpu_plans._key(m, b)]
            samples = json.loads((out / "timing" / f"{m}-b{b}.json").read_text())["samples_ms"]
            assert set(samples) == set(t["ms"]) == {f"eager:{n}" for n in t["networks"]}
            assert all(len(v) == t["rounds"] > 0 for v in samples.values())
    text = (out / "plans.txt").read_text()
    assert all(f"{m} @32 batch {b}" in text for m in s["models"] for b in s["batches"]) and "verdicts over" in text


def test_verdict() -> None:
    v = gpu_plans.verdict
    assert v(True, True, True, 3, 3) == "same plan"
    assert v(False, True, False, 5, 3).startswith("measuring pays: only the measured")
    assert v(False, False, True, 3, 5).startswith("measuring costs: only the counted")
    assert v(False, False, False, 3, 5) == "both miss"
    assert v(False, True, True, 3, 5).startswith("measuring pays: both meet") and "changes 3 blocks" in v(
        False, True, True, 3, 5)
    assert v(False, True, True, 5, 3).startswith("measuring costs: both meet")
    assert v(False, True, True, 4, 4).startswith("even")
    assert v(False, True, None, 4, None) == ("measuring pays: only the measured LUT's plan meets the budget (the "
                                             "counted LUT has no plan)")
    assert v(False, False, None, 4, None) == "both miss (the counted LUT has no plan)"
    assert v(False, None, True, None, 4).startswith("measuring costs") and "measured LUT has no plan" in v(
        False, None, True, None, 4)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without a CUDA GPU")
def test_real_mode_refuses_without_cuda_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert gpu_plans.main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("gpu_plans: ") and "sees no CUDA GPU" in err and "--cpu-smoke" in err
    assert not (tmp_path / "plans.json").exists()
    assert gpu_plans.main(["--cpu-smoke"]) == 2 and "--out DIR is required" in capsys.readouterr().err
    assert gpu_plans.main(["--cpu-smoke", "--out", str(tmp_path), "--budgets", "1.5"]) == 2


def test_the_time_limit_stops_the_run_and_writes_what_it_has(tmp_path: Path) -> None:
    assert gpu_plans.main(["--cpu-smoke", "--out", str(tmp_path), "--time-limit", "0.001"]) == 1
    rec = json.loads((tmp_path / "plans.json").read_text())
    assert rec["status"] == "stopped by the time limit" and rec["steps"]
    assert all(x["status"].startswith("skipped: past the time limit") for x in rec["steps"])
    assert "steps not done" in (tmp_path / "plans.txt").read_text()


def test_an_interrupted_run_keeps_its_finished_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(self: Any, model: str, batch: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(gpu_plans.Run, "profile", lambda self, m, b, d: None)
    monkeypatch.setattr(gpu_plans.Run, "start_counting", lambda self: None)
    monkeypatch.setattr(gpu_plans.Run, "plan", interrupted)
    with pytest.raises(KeyboardInterrupt):
        gpu_plans.main(["--cpu-smoke", "--out", str(tmp_path), "--batches", "1", "--budgets", "0.8"])
    rec = json.loads((tmp_path / "plans.json").read_text())
    assert rec["status"] == f"interrupted during {gpu_plans.SMOKE['models'][0]} b1: plans"
    assert [x["status"] for x in rec["steps"]] == ["ok", "ok"]   # the two LUT steps, written before the plan's


def test_the_gpu_run_fits_its_call_and_its_line_is_documented() -> None:
    cells = len(gpu_plans.GPU["models"]) * len(gpu_plans.GPU["batches"])
    timing = cells * (gpu_plans.PROFILE_TIMING["budget_s"] + gpu_plans.MEASURE_TIMING["budget_s"])
    assert timing <= gpu_plans.TIME_LIMIT_S / 2 and gpu_plans.TIME_LIMIT_S <= 420   # 10-minute call, machine start in it
    assert gpu_plans.DEVICE_LINE.startswith(gpu_check.INSTALL_LINE + " && ")
    assert gpu_check.DEVICE_LINE.startswith(gpu_check.INSTALL_LINE + " && ")
    assert gpu_plans.DEVICE_LINE in gpu_plans.__doc__ and gpu_plans.DEVICE_LINE in (ROOT / "docs" / "gpu.md").read_text()
    assert "tools/gpu_plans.py" in gpu_check.__doc__
