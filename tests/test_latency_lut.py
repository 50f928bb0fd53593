"""LUT: schema round trip, predict, c_l, variant times, calibration, load_lut mismatch errors."""

from __future__ import annotations

import json

import pytest

from latopt.errors import LatoptError
from latopt.latency.lut import (
    LUT,
    LUT_SCHEMA,
    BlockEntry,
    calibrate,
    costs,
    default_lut_path,
    load_lut,
    predict,
    save_lut,
    variant_times,
)
from latopt.latency.timing import TimingStats


def st(ms: float) -> TimingStats:
    return TimingStats(ms, ms * 0.9, ms * 1.1, ms * 0.2, 40, ms * 1.5)


def make_lut() -> LUT:
    blocks = [
        BlockEntry(0, "blocks.0.0", "timm.DepthwiseSeparableConv", (1, 32, 112, 112), True, "",
                   {"none": st(0.4), "full": st(0.8)}, {"none": 0.4, "full": 0.8}),
        BlockEntry(1, "blocks.1.0", "timm.InvertedResidual", (1, 16, 112, 112), True, "",
                   {v: st(t) for v, t in {"none": 0.7, "full": 0.3, "expand_dw": 0.5, "dw_project": 0.6}.items()},
                   {"none": 0.7, "full": 0.3, "expand_dw": 0.5, "dw_project": 0.6}),
        BlockEntry(2, "blocks.2.0", "timm.InvertedResidual", (1, 24, 56, 56), False, "squeeze-excitation",
                   {"none": st(0.25)}, {"none": 0.25}),
    ]
    return LUT(device="cpu", model="mobilenetv2_100", resolution=224, batch=1, blocks=blocks, fixed_ms=1.0,
               fixed={"stem": st(0.3), "head": st(0.7)}, backend="onnxruntime", partial=True,
               calibration={"method": "per-variant scale", "scales": {"none": 1.0}},
               end_to_end={"asis": {"folded": {}, "measured": st(2.35).to_dict(), "predicted_ms": 2.35}},
               environment={"cpu": "test"}, created="2026-01-01T00:00:00+00:00", call_overhead_ms=0.02)


def test_round_trip(tmp_path) -> None:
    lut = make_lut()
    path = save_lut(lut, tmp_path / "lut.json")
    data = json.loads(path.read_text())
    assert data["schema"] == LUT_SCHEMA and data["costs"] == {"0": 0.0, "1": pytest.approx(0.4)}
    assert data["blocks"][1]["raw"]["none"]["wall_median_ms"] == pytest.approx(1.05)
    back = load_lut(path, model="mobilenetv2_100", resolution=224)
    assert back.to_dict() == lut.to_dict()
    assert back.blocks[1].raw["expand_dw"] == lut.blocks[1].raw["expand_dw"]


def test_predict_costs_and_variants() -> None:
    lut = make_lut()
    base = 1.0 + 0.4 + 0.7 + 0.25
    assert predict(lut, []) == pytest.approx(base)
    assert predict(lut, [1]) == pytest.approx(base - 0.7 + 0.3)
    assert predict(lut, "all") == pytest.approx(1.0 + 0.8 + 0.3 + 0.25)
    assert predict(lut, {1: "expand_dw"}) == pytest.approx(base - 0.7 + 0.5)
    assert predict(lut, {0: "full", 1: "dw_project"}) == pytest.approx(1.0 + 0.8 + 0.6 + 0.25)
    assert predict(lut, {0: "none"}) == pytest.approx(base)
    # c_l = max(0, t_asis - t_full): block 0 gets slower when folded -> 0; non-foldable blocks are absent
    assert costs(lut) == {0: 0.0, 1: pytest.approx(0.4)}
    assert variant_times(lut, 1) == {"none": 0.7, "full": 0.3, "expand_dw": 0.5, "dw_project": 0.6}
    with pytest.raises(LatoptError, match="cannot be folded: squeeze-excitation"):
        predict(lut, [2])
    with pytest.raises(LatoptError, match="block 7 is not in the LUT"):
        predict(lut, [7])
    with pytest.raises(LatoptError, match="no time for block 0 in variant 'expand_dw'.*--partial"):
        predict(lut, {0: "expand_dw"})
    with pytest.raises(LatoptError, match="fold set 'some'"):
        predict(lut, "some")


def test_load_lut_errors(tmp_path) -> None:
    path = save_lut(make_lut(), tmp_path / "lut.json")
    with pytest.raises(LatoptError, match="profiled for model 'mobilenetv2_100', not 'efficientnet_lite0'"):
        load_lut(path, model="efficientnet_lite0")
    with pytest.raises(LatoptError, match="resolution 224, not 160.*latopt profile .*--resolution 160"):
        load_lut(path, resolution=160)
    with pytest.raises(LatoptError, match="batch 1, not 8"):
        load_lut(path, batch=8)
    with pytest.raises(LatoptError, match="does not exist"):
        load_lut(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(LatoptError, match="not valid JSON"):
        load_lut(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text(json.dumps({"schema": "latopt.checkpoint/1"}))
    with pytest.raises(LatoptError, match="expected 'latopt.lut/1'"):
        load_lut(tmp_path / "other.json")
    data = json.loads(path.read_text())
    del data["blocks"][0]["ms"]
    (tmp_path / "corrupt.json").write_text(json.dumps(data))
    with pytest.raises(LatoptError, match="is corrupt"):
        load_lut(tmp_path / "corrupt.json")


def test_calibrate_recovers_known_scales() -> None:
    raw = {0: {"none": 1.0, "full": 0.5}, 1: {"none": 2.0, "full": 1.0, "expand_dw": 1.5}, 2: {"none": 0.5}}
    fixed = 1.0
    s_none, s_full, s_ed = 0.8, 0.9, 0.7
    asis = s_none * (fixed + 1.0 + 2.0 + 0.5)
    full = s_none * (fixed + 0.5) + s_full * (0.5 + 1.0)
    ed = s_none * (fixed + 1.0 + 0.5) + s_ed * 1.5
    nets = {"asis": ({}, asis), "full": ({0: "full", 1: "full"}, full), "ed": ({1: "expand_dw"}, ed)}
    scales, notes = calibrate(raw, fixed, nets)
    assert scales == pytest.approx({"none": s_none, "full": s_full, "expand_dw": s_ed}) and notes == []
    # no network for expand_dw: it borrows the full scale, and says so
    scales, notes = calibrate(raw, fixed, {k: nets[k] for k in ("asis", "full")})
    assert scales["expand_dw"] == pytest.approx(s_full) and "no end-to-end network for 'expand_dw'" in notes[0]
    # an absurd measurement is clipped to [0.5, 2] x the as-is scale, with a note
    scales, notes = calibrate(raw, fixed, {"asis": ({}, asis), "full": ({0: "full", 1: "full"}, 100.0)})
    assert scales["full"] == pytest.approx(2 * s_none) and "clipped" in notes[0]
    with pytest.raises(LatoptError, match="as-is network was not measured"):
        calibrate(raw, fixed, {"full": nets["full"]})


def test_default_path() -> None:
    p = default_lut_path("cpu", "mobilenetv2_100", 224, 1)
    assert p.parts[-3:] == ("profiles", "cpu", "mobilenetv2_100-r224-b1.json")
    assert default_lut_path("cpu", "torchvision/mobilenet_v2?width=0.75", 160, 4).name == \
        "torchvision_mobilenet_v2_width_0.75-r160-b4.json"
