"""Device-blind cost models as devices (backend count: flops, params, uniform): a LUT like any device's whose
"times" are counts, exact and additive."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from latopt.errors import LatoptError
from latopt.latency.backends.count import count
from latopt.latency.devices import load_device, make_profile
from latopt.latency.lut import costs, predict
from latopt.latency.profiler import profile_model
from latopt.nets.blocks import find_blocks
from latopt.nets.models import build_model, count_flops

MODEL = "torchvision/mobilenet_v2?width=0.5"


def test_shipped_count_devices_load_and_count_needs_its_backend() -> None:
    assert {n: load_device(n).count for n in ("flops", "params", "uniform")} == {
        "flops": "macs", "params": "params", "uniform": "layers"}
    with pytest.raises(LatoptError, match=r"key 'count' is missing"):   # backend count: what it counts
        make_profile({"name": "x", "backend": "count"})
    with pytest.raises(LatoptError, match=r"key 'count' is read by the count backend, not by onnxruntime"):
        make_profile({"name": "x", "count": "macs"})
    with pytest.raises(LatoptError, match=r"key 'count' must be one of macs, params, layers, got 'seconds'"):
        make_profile({"name": "x", "backend": "count", "count": "seconds"})


def test_counts_of_a_module() -> None:
    conv = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1, bias=False), nn.ReLU(), nn.Conv2d(8, 2, 1))
    assert count(conv, (1, 4, 5, 5), "macs") == pytest.approx((4 * 8 * 9 + 8 * 2) * 25 / 1e6)
    assert count(conv, (1, 4, 5, 5), "params") == pytest.approx((4 * 8 * 9 + 8 * 2 + 2) / 1e6)
    assert count(conv, (1, 4, 5, 5), "layers") == 2.0
    with pytest.raises(LatoptError, match="count"):
        count(conv, (1, 4, 5, 5), "seconds")


@pytest.mark.parametrize("device", ["flops", "uniform"])
def test_a_count_lut_is_exact_and_additive(device: str) -> None:
    """The LUT's as-is prediction is the whole network's count, every calibration scale is 1, and a full fold's
    entry is the count of the folded block (block 0 of MobileNetV2-0.5 @32: 294,912 MACs folded, 69,632 as-is,
    so the FLOPs cost model does not fold it: c_l = 0)."""
    model = build_model(MODEL, 10)
    lut = profile_model(model, load_device(device), 32, variants=("full", "pw", "drop"), progress=False,
                        num_classes=10)
    assert all(s == pytest.approx(1.0) for s in lut.calibration.scales.values())
    whole = count(model, (1, 3, 32, 32), "macs" if device == "flops" else "layers")
    assert predict(lut, {}) == pytest.approx(whole, rel=1e-9)
    b0 = lut.blocks[0]
    if device == "flops":
        assert count_flops(model.features[1], (1, 16, 16, 16)) / 2 == 69_632
        assert (b0.ms["none"], b0.ms["full"]) == (pytest.approx(69_632 / 1e6), pytest.approx(294_912 / 1e6))
        assert costs(lut)[0] == 0.0
    else:  # an MBConv with expansion: 3 layers as is, 1 folded; the t=1 block: 2 and 1
        blocks = find_blocks(model)
        assert b0.ms["none"] == 2.0 and b0.ms["full"] == 1.0 and blocks[0].index == 0
        assert all(lut.blocks[i].ms["none"] == 3.0 and lut.blocks[i].ms["full"] == 1.0 for i in range(1, 17))
        assert set(costs(lut).values()) == {1.0, 2.0}


def test_a_count_device_counts_modules_only(tmp_path) -> None:
    from latopt.latency.backends import get_backend

    backend = get_backend(load_device("flops"))
    with pytest.raises(LatoptError, match="counts PyTorch modules"):
        backend.prepare(str(tmp_path / "model.onnx"), (1, 3, 8, 8))
    runner = backend.prepare(nn.Conv2d(3, 4, 1), (1, 3, 8, 8))
    assert runner() is None and runner.time_ms() == pytest.approx(3 * 4 * 64 / 1e6)
    assert runner.run(torch.zeros(1, 3, 8, 8).numpy()).shape == (1, 4, 8, 8)


def test_ensure_lut_profiles_once_and_then_leaves_the_file(tmp_path) -> None:
    """What tools/ share: the LUT file is profiled and saved when it is missing, and an existing file is reused
    unread (a second call neither profiles nor rewrites it)."""
    from latopt.latency.lut import load_lut
    from latopt.latency.profiler import ensure_lut

    path = tmp_path / "lut" / "flops.json"
    said: list[str] = []
    assert ensure_lut(path, MODEL, load_device("flops"), 32, variants=("full", "pw"), num_classes=10,
                      say=said.append) == path
    lut = load_lut(path, model=MODEL, resolution=32)
    assert lut.device == "flops" and "pw" in lut.blocks[1].ms and len(said) == 1 and "flops" in said[0]
    stamp = path.stat().st_mtime_ns
    ensure_lut(path, MODEL, load_device("flops"), 32, say=said.append)
    assert path.stat().st_mtime_ns == stamp and len(said) == 1
