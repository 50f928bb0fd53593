"""Hostile input (issue 49, class J): a count device's figures (backend count: flops, params, uniform) are counts
in their unit, never measured milliseconds: export's line, export.json and REPORT.md label them as counted, and
the DP's plan messages name the count's unit. Tiny: MobileNetV2-0.35 at 16 px, counted (nothing is timed)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from latopt.config import load_config
from latopt.dp import format_plan_summary, plan_only
from latopt.errors import LatoptError
from latopt.export.export_record import ExportRecord
from latopt.export.export_report import latency_line, measure_latency, render_report
from latopt.files.checkpoint import make_arch
from latopt.latency.devices import load_device
from latopt.latency.lut import save_lut
from latopt.latency.profiler import format_lut, profile_model
from latopt.nets.models import build_model

MODEL = "mobilenetv2_035"
TINY = {"name": "tinycount", "model.name": MODEL, "data.task": "digits", "data.resolution": 16, "lut": None}


def test_export_labels_a_count_as_counted_not_measured() -> None:
    model = build_model(MODEL, 10).eval()
    plan = SimpleNamespace(arch=make_arch(model, MODEL, 10), folded=model, resolution=16, plan={}, spans=[])
    said: list[str] = []
    lat = measure_latency(plan, load_device("flops"), None, said.append)   # type: ignore[arg-type]
    assert lat.count_unit == "M multiply-adds" and lat.as_is_ms == pytest.approx(lat.folded_ms)
    assert said[-1] == latency_line(lat) and "counted, not measured" in said[-1]
    assert not any(" ms" in s or "measur" in s.replace("not measured", "") for s in said), said
    assert lat.model_dump(mode="json")["count_unit"] == "M multiply-adds"          # export.json says so
    record = ExportRecord(checkpoint="base.pt", device="flops", model=MODEL, resolution=16, mode="none",
                          precision="fp32", folded={}, spans=[], bias_maps=None, notes=[], accuracy_gate=False,
                          accuracy_gate_reason="--no-accuracy-gate", timing_only=False, gates=[], accuracy=None,
                          latency=lat, files=["model.onnx"])
    report = render_report(record)
    assert "## Cost (M multiply-adds, counted by the count device flops: not a measured latency)" in report
    assert "median ms" not in report and "Speed-up" not in report and "measured end to end" not in report
    timed = lat.model_copy(update={"count_unit": None})                       # a timed device's: unchanged
    assert "count_unit" not in timed.model_dump(mode="json") and "speed-up" in latency_line(timed)


def test_plan_messages_name_the_counts_unit(tmp_path: Path) -> None:
    lut = profile_model(MODEL, "flops", 16, variants=("full", "pw", "drop"), num_classes=10, progress=False)
    path = save_lut(lut, tmp_path / "flops.json")
    table = format_lut(lut)   # what latopt profile prints: the count's unit, counted
    assert "counted" in table and "M multiply-adds" in table and " ms" not in table and "measured" not in table, table
    cfg = load_config("quickstart", TINY)
    plan = plan_only(cfg, path, budget=0.9, importance="uniform", progress=False)
    assert plan.selection.unit == "M multiply-adds"
    text = format_plan_summary(plan, tmp_path / "plan.json")
    assert "LUT count" in text and "M multiply-adds" in text and " ms" not in text, text
    with pytest.raises(LatoptError) as e:      # a budget below the fastest network: in the count's unit too
        plan_only(cfg, path, budget=0.01, importance="uniform", progress=False)
    assert "M multiply-adds" in str(e.value) and " ms" not in str(e.value), str(e.value)
