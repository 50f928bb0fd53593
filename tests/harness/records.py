"""Valid records to build test inputs from: an export record (``export.json``) with every section filled."""

from __future__ import annotations

from typing import Any

from latopt.export.export_record import (
    AccuracySection,
    BiasMapsSection,
    ExportRecord,
    GateRecord,
    LatencySection,
    Repeats,
)


def export_record(**over: Any) -> ExportRecord:
    """An export record of a folded ``mobilenetv2_035`` at 32 px on the CPU (fp32), ``over`` replacing fields."""
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
