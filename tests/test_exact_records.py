"""The exact tools' records (latopt.exact.exact_record): each report.json is its record's JSON, read back equal; keys
that do not apply are absent, not null; ``out`` is returned, not written; a bad file is one error line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from latopt.errors import LatoptError
from latopt.exact.exact_record import (
    CompressToolReport,
    LayerStability,
    RegionsReport,
    ShallowReport,
    StabilitySummary,
    Verification,
    read_report,
)
from latopt.exact.mlp import MlpMeta, build_mlp, save_mlp
from latopt.exact.tools import compress_text, region_limits, regions_of, shallow_of

ROOT = Path(__file__).resolve().parents[1]
FASHION = ROOT / "results" / "exact-fashion-mnist" / "report.json"


@pytest.fixture(scope="module")
def small_ckpt(tmp_path_factory):
    import torch

    torch.manual_seed(3)
    path = tmp_path_factory.mktemp("records") / "m.pt"
    return save_mlp(path, build_mlp([2, 5, 4, 1]).eval(), MlpMeta(data="random", seed=3, box=[-1.0, 1.0]))


def test_the_published_compress_report_is_its_record_key_for_key():
    """results/exact-fashion-mnist/report.json (which tools/regenerate.py reads as JSON) reads as a
    CompressToolReport whose JSON is the file's, in the file's key order."""
    rep = read_report(FASHION, CompressToolReport)
    data = json.loads(FASHION.read_text())
    assert json.dumps(rep.to_json()) == json.dumps(data)
    assert rep.accuracy is not None and rep.accuracy.data == "fashion-mnist" and rep.out is None
    assert rep.stability.total is not None and rep.stability.total.units == sum(r.units for r in rep.stability.layers)
    assert compress_text(rep).splitlines()[0].startswith("layers   [784, 100, 100, 10] -> ")


def test_absent_keys_out_and_null_accuracy():
    rep = read_report(FASHION, CompressToolReport)
    bare = rep.model_copy(update={"accuracy": None, "out": "runs/x"})
    data = bare.to_json()
    assert data["accuracy"] is None and "accuracy_note" not in data and "out" not in data   # null, absent, never
    noted = CompressToolReport.model_validate({**data, "accuracy_note": "no split"})
    assert noted.to_json()["accuracy_note"] == "no split"
    assert "accuracy not measured: no split" in compress_text(noted)
    with pytest.raises(ValidationError):
        rep.verification.ok = False   # type: ignore[misc]   # frozen


def test_verification_leaves_out_what_was_not_compared():
    v = Verification(points=10, max_abs_float64=0.0, max_rel_float64=0.0, output_scale=1.0, rtol=1e-5, ok=True)
    assert list(v.model_dump(mode="json")) == ["points", "max_abs_float64", "max_rel_float64", "output_scale",
                                               "rtol", "ok"]
    assert v.max_abs("float32") is None and Verification.model_validate(v.model_dump(mode="json")) == v
    with pytest.raises(ValidationError, match="together"):
        Verification(points=10, max_abs_float64=0.0, output_scale=1.0, rtol=1e-5, ok=True)
    with pytest.raises(ValidationError, match="no data type"):
        Verification(points=10, output_scale=1.0, rtol=1e-5, ok=True)


def test_stability_rows_keep_their_json_layout():
    row = LayerStability(layer=1, units=3, inactive=1, active=1, unstable=1, undecided=0, sampled_upper_bound=2,
                         stable_by_interval=2, stable_by_lp=0, stable_by_milp=0, milp_solves=0)
    assert next(iter(row.model_dump(mode="json"))) == "layer"   # written first, as before
    none = StabilitySummary(layers=[], total=None, seconds=0.0, samples=0,
                            timings={"sampling": 0.0, "interval": 0.0, "lp": 0.0, "milp": 0.0})
    assert none.model_dump(mode="json")["total"] == {}   # a network without hidden layers
    assert StabilitySummary.model_validate(none.model_dump(mode="json")) == none


def test_regions_and_shallow_reports_are_their_records(small_ckpt, tmp_path):
    limits = region_limits(2000, 8, 64)
    reg = regions_of(small_ckpt, tmp_path / "r", limits=limits, grid=50)
    assert reg.out == str(tmp_path / "r") and reg.grid is not None and reg.grid.agrees
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert data == reg.to_json() and data["schema"] == "latopt.regions/1" and "out" not in data
    assert read_report(tmp_path / "r" / "report.json", RegionsReport) == reg.model_copy(update={"out": None})
    off = regions_of(small_ckpt, tmp_path / "r0", limits=limits, grid=0)
    assert off.grid is None and "grid" not in json.loads((tmp_path / "r0" / "report.json").read_text())
    sh = shallow_of(small_ckpt, tmp_path / "s", limits=limits, samples=2000)
    data = json.loads((tmp_path / "s" / "report.json").read_text())
    assert data == sh.to_json() and sh.out == str(tmp_path / "s")
    assert read_report(tmp_path / "s" / "report.json", ShallowReport) == sh.model_copy(update={"out": None})
    assert sh.widths.regions == sh.regions.regions == reg.regions
    assert list(data["eps_network"]["verification"])[-1] == "fraction_of_points_used"
    assert "max_abs_float32" not in data["exact_network"]["verification"]


def test_a_bad_report_is_one_error_line(small_ckpt, tmp_path):
    reg = regions_of(small_ckpt, tmp_path / "r", limits=region_limits(2000, 8, 64), grid=0)
    path = tmp_path / "r" / "report.json"
    with pytest.raises(LatoptError, match="expected 'latopt.shallow/1'"):
        read_report(path, ShallowReport)
    path.write_text(json.dumps({**reg.to_json(), "extra": 1}))
    with pytest.raises(LatoptError, match="unknown field 'extra'") as e:
        read_report(path, RegionsReport)
    assert "\n" not in str(e.value)
    path.write_text(json.dumps({**reg.to_json(), "regions": -1}))
    with pytest.raises(LatoptError, match="'regions' must be >= 0"):
        read_report(path, RegionsReport)
