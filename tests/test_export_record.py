"""The export record (latopt.export.export_record): export.json written and read back in one place, strictly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from latopt.errors import LatoptError
from latopt.export.export_record import (
    EXPORT_SCHEMA,
    LatencySection,
    read_export_record,
    write_export_record,
)
from tests.harness.records import export_record


def test_a_written_export_json_reads_back_into_the_same_record(tmp_path: Path) -> None:
    rec = export_record()
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
    lat = export_record().latency
    assert lat is not None
    with_lut = LatencySection(**(lat.model_dump() | dict(lut_as_is_ms=2.2, lut_folded_ms=1.0, lut_error_as_is=0.1,
                                                        lut_error_folded=0.0, lut_speedup=2.2, lut_speedup_error=0.1,
                                                        lut_created=None)))
    data = json.loads(write_export_record(tmp_path / "e.json", export_record(latency=with_lut)).read_text())
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
    lat = export_record().latency
    assert lat is not None
    rec = export_record(latency=LatencySection(**(lat.model_dump() | dict(
        lut_as_is_ms=2.2, lut_folded_ms=1.0, lut_error_as_is=0.1, lut_error_folded=0.0, lut_speedup=2.2,
        lut_speedup_error=0.1, lut_created="2026-01-01"))))
    data = rec.to_json()
    edit(data)
    path = tmp_path / "export.json"
    path.write_text(json.dumps(data))
    with pytest.raises(LatoptError) as e:
        read_export_record(path)
    assert said in str(e.value) and "\n" not in str(e.value) and str(path) in str(e.value)
