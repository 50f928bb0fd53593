"""The export record (latopt.export.record): export.json written and read back in one place, strictly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from latopt.errors import LatoptError
from latopt.export.record import (
    EXPORT_SCHEMA,
    AccuracySection,
    BiasMapsSection,
    ExportRecord,
    GateRecord,
    LatencySection,
    Repeats,
    read_export_record,
    write_export_record,
)


def _record(**over: Any) -> ExportRecord:
    gate = GateRecord(name="ONNX Runtime vs PyTorch", max_abs=1e-6, scale=2.0, rel=5e-7, tol=1e-4, samples=4,
                      inputs="random-normal", floor=None, roundoff=1.0, passed=True)
    lat = LatencySection(as_is_ms=2.0, as_is_iqr_ms=0.1, folded_ms=1.0, folded_iqr_ms=0.1, speedup=2.0,
                         speedup_range=[1.8, 2.2], repeats=Repeats(as_is=5, folded=5), precision="fp32", batch=1,
                         clock="wall")
    fields: dict[str, Any] = dict(
        checkpoint="runs/x/folded.pt", device="cpu", model="mobilenetv2_035", resolution=32, mode="exact",
        precision="fp32", folded={"1": "full", "3": "full"}, spans=[],
        bias_maps=BiasMapsSection(form="deferred", chains=[[1], [3]], adds_per_block=2, adds_deferred=2, adds_saved=0),
        notes=["a note"], accuracy_gate=True, accuracy_gate_reason=None, timing_only=False, gates=[gate],
        accuracy=AccuracySection(task="digits", samples=100, test_acc=0.9, engine_test_acc=None, recorded=0.9,
                                 recorded_at="meta.acc.finetuned", gated=True, tolerance=0.01),
        latency=lat, files=["model.onnx"])
    return ExportRecord(**(fields | over))


def test_a_written_export_json_reads_back_into_the_same_record(tmp_path: Path) -> None:
    rec = _record()
    path = write_export_record(tmp_path / "export.json", rec)
    data = json.loads(path.read_text())
    assert data["schema"] == EXPORT_SCHEMA and data == rec.to_json()
    # sections that do not apply are absent, not null; the keys that may be null are there
    assert "plan" not in data and "int8" not in data and "folded_file" not in data["latency"]
    assert not any(k.startswith("lut_") for k in data["latency"]) and "spans" not in data["bias_maps"]
    assert data["accuracy_gate_reason"] is None and data["gates"][0]["floor"] is None
    back = read_export_record(path)
    assert back == rec and back.latency is not None and back.latency.speedup == 2.0


def test_the_lut_keys_are_written_all_together(tmp_path: Path) -> None:
    lat = _record().latency
    assert lat is not None
    with_lut = LatencySection(**(lat.model_dump() | dict(lut_as_is_ms=2.2, lut_folded_ms=1.0, lut_error_as_is=0.1,
                                                        lut_error_folded=0.0, lut_speedup=2.2, lut_speedup_error=0.1,
                                                        lut_created=None)))
    data = json.loads(write_export_record(tmp_path / "e.json", _record(latency=with_lut)).read_text())
    assert data["latency"]["lut_created"] is None and data["latency"]["lut_speedup"] == 2.2
    assert read_export_record(tmp_path / "e.json").latency == with_lut


@pytest.mark.parametrize(("edit", "said"), [
    (lambda d: d.update(extra=1), "unknown field 'extra'"),
    (lambda d: d.pop("files"), "field 'files' is missing"),
    (lambda d: d["latency"].pop("lut_created"), "field 'latency' gives lut_speedup but not lut_created"),
    (lambda d: d["gates"][0].update(passed="yes"), "field 'gates[0].passed' must be true or false"),
    (lambda d: d.update(schema="latopt.export/0"), "has schema 'latopt.export/0'"),
])
def test_an_export_json_that_is_not_a_record_is_refused_in_one_line(tmp_path: Path, edit: Any, said: str) -> None:
    lat = _record().latency
    assert lat is not None
    rec = _record(latency=LatencySection(**(lat.model_dump() | dict(
        lut_as_is_ms=2.2, lut_folded_ms=1.0, lut_error_as_is=0.1, lut_error_folded=0.0, lut_speedup=2.2,
        lut_speedup_error=0.1, lut_created="2026-01-01"))))
    data = rec.to_json()
    edit(data)
    path = tmp_path / "export.json"
    path.write_text(json.dumps(data))
    with pytest.raises(LatoptError) as e:
        read_export_record(path)
    assert said in str(e.value) and "\n" not in str(e.value) and str(path) in str(e.value)
