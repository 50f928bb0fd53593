"""Hostile input (issue 49, class K): the public API (``import latopt``, docs/api.md) checks its arguments' types
at the entry point: a wrong type is one LatoptError line naming the call, the parameter, what it takes and what
it got, before any work, never an AttributeError from inside nor a value taken silently. ``profile_model`` takes
a device's name, as ``export_model`` does. Nothing is trained."""

from __future__ import annotations

from pathlib import Path

import pytest

import latopt


@pytest.mark.parametrize("call, says", [
    (lambda: latopt.load_config("quickstart", [("train.epochs", 1)]),
     "load_config(): overrides must be a dict or None, got list [('train.epochs', 1)]"),
    (lambda: latopt.train_base({"name": "x"}, "out"),
     "train_base(): cfg must be a RunConfig (latopt.load_config(...)), got dict {'name': 'x'}"),
    (lambda: latopt.run_dp(latopt.load_config("quickstart"), "base.pt", "out", lut="lut.json", budget="0.6"),
     "run_dp(): budget must be a float, got str '0.6'"),
    (lambda: latopt.run_fold(latopt.load_config("quickstart"), 3, "out"),
     "run_fold(): base_checkpoint must be a str or a Path, got int 3"),
    (lambda: latopt.profile_model("mobilenetv2_035", 32, 32), "profile_model(): device must be a DeviceProfile"),
    (lambda: latopt.profile_model("mobilenetv2_035", "flops", 32.5), "resolution must be an int, got float 32.5"),
    (lambda: latopt.profile_model("mobilenetv2_035", "flops", 32, variants="full"),
     "variants must be a list of str, got str 'full'"),
    (lambda: latopt.save_lut({}, "lut.json"), "save_lut(): lut must be a LUT"),
    (lambda: latopt.load_lut(None), "load_lut(): path must be a str or a Path, got NoneType None"),
    (lambda: latopt.export_model("x.pt", "cpu", "out", progress="no"),
     "export_model(): progress must be a bool, got str 'no'"),
    (lambda: latopt.load_checkpoint("x.pt", expect_model=1), "expect_model must be a str or None"),
    (lambda: latopt.import_weights("w.pt", "mobilenetv2_035", "out", overwrite=1), "overwrite must be a bool"),
    (lambda: latopt.load_config("quickstart", {}, 3), "load_config(): too many positional arguments"),
])
def test_a_wrong_type_is_one_line(call, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(latopt.LatoptError) as e:
        call()
    assert says in str(e.value) and len(str(e.value).splitlines()) == 1, str(e.value)
    assert not list(tmp_path.iterdir())   # refused before any work: nothing written


def test_profile_model_takes_a_device_name() -> None:
    lut = latopt.profile_model("mobilenetv2_035", "flops", 16, num_classes=10, progress=False)
    assert lut.device == "flops" and lut.backend == "count"
    same = latopt.profile_model("mobilenetv2_035", latopt.load_device("flops"), 16, num_classes=10, progress=False)
    assert [b.ms for b in same.blocks] == [b.ms for b in lut.blocks]
    with pytest.raises(latopt.LatoptError, match="unknown device 'no_such_device'"):
        latopt.profile_model("mobilenetv2_035", "no_such_device", 16)
