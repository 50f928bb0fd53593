"""Backends for real on tiny models: ONNX Runtime CPU and PyTorch CPU; ONNX export; error paths.

CUDA and TensorRT tests are marked and skip with a reason where unavailable.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from torch import nn

from latopt.errors import LatoptError
from latopt.latency.backends import Backend, Runner, get_backend
from latopt.latency.devices import load_device
from latopt.latency.onnx_io import OPSET, ExportCache, export_onnx
from latopt.latency.timing import TimingPolicy, compare

SHAPE = (1, 3, 16, 16)


def tiny() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU6(),
                         nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8), nn.ReLU(), nn.Conv2d(8, 4, 1)).eval()


def fast(name: str) -> object:
    return load_device(name).model_copy(update={"warmup": 1, "min_repeats": 5, "max_repeats": 5})


def reference(model: nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


@pytest.mark.parametrize("device", ["cpu", "cpu-torch"])
def test_cpu_backends_run_and_time(device: str) -> None:
    torch_threads = torch.get_num_threads()
    try:
        backend = get_backend(fast(device))
        assert isinstance(backend, Backend)
        model = tiny()
        a = backend.prepare(model, SHAPE)
        b = backend.prepare(model[:3], SHAPE)
        assert isinstance(a, Runner)
        x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
        np.testing.assert_allclose(a.run(x), reference(model, x), rtol=1e-4, atol=1e-5)
        a()  # one synchronised inference on the fixed input
        stats = compare({"a": a, "b": b}, fast(device))
        assert stats["a"].n == stats["b"].n == 5 and stats["a"].median_ms > 0
        env = backend.environment()
        assert env["backend"] == backend.name and env["cpu_count"] >= 1
        # preparing model[:3] (a fresh Sequential in train mode around shared children) must not flip them
        assert not any(m.training for m in model.modules()) and next(model.parameters()).device.type == "cpu"
        np.testing.assert_allclose(a.run(x), reference(model, x), rtol=1e-4, atol=1e-5)
        a.close()
        b.close()
        getattr(backend, "close", lambda: None)()
    finally:
        torch.set_num_threads(torch_threads)


def test_onnxruntime_from_onnx_path_and_errors(tmp_path) -> None:
    model = tiny()
    path = export_onnx(model, SHAPE, tmp_path / "m.onnx")
    backend = get_backend(fast("cpu"))
    r = backend.prepare(path, SHAPE)
    x = np.ones(SHAPE, dtype=np.float32)
    np.testing.assert_allclose(r.run(x), reference(model, x), rtol=1e-4, atol=1e-5)
    with pytest.raises(LatoptError, match="does not exist"):
        backend.prepare(tmp_path / "missing.onnx", SHAPE)
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    with pytest.raises(LatoptError, match="ONNX Runtime cannot load"):
        backend.prepare(tmp_path / "bad.onnx", SHAPE)
    with pytest.raises(LatoptError, match=r"input shape \[1, 5, 16, 16\] does not fit the model's input"):
        backend.prepare(path, (1, 5, 16, 16))
    with pytest.raises(LatoptError, match="provider 'CUDAExecutionProvider'.*not available"):
        get_backend(load_device("cpu").model_copy(update={"provider": "CUDAExecutionProvider"}))
    with pytest.raises(LatoptError, match="times nn.Modules, not ONNX files"):
        get_backend(fast("cpu-torch")).prepare(path, SHAPE)


def test_export_onnx_static_dynamic_and_cache(tmp_path) -> None:
    import onnx

    model = tiny()
    m = onnx.load(str(export_onnx(model, SHAPE, tmp_path / "s.onnx")))
    assert max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")) >= OPSET
    assert [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim] == list(SHAPE)
    d = onnx.load(str(export_onnx(model, SHAPE, tmp_path / "d.onnx", dynamic_batch=True)))
    assert d.graph.input[0].type.tensor_type.shape.dim[0].dim_param
    assert not list(tmp_path.glob(".*"))  # no temp files left behind
    with pytest.raises(LatoptError, match="opset 13 is too old"):
        export_onnx(model, SHAPE, tmp_path / "o.onnx", opset=13)
    with pytest.raises(LatoptError, match="ONNX export of Sequential failed"):
        export_onnx(model, (1, 5, 16, 16), tmp_path / "x.onnx")
    assert not (tmp_path / "x.onnx").exists()
    with ExportCache() as cache:
        p1 = cache.get(model, SHAPE)
        assert cache.get(model, SHAPE) == p1 and len(cache) == 1
        assert cache.get(model, (1, 3, 8, 8)) != p1 and len(cache) == 2
        assert p1.is_file()
    assert not p1.exists()


def test_library_errors_are_one_line_and_latopt_bugs_stay_tracebacks(tmp_path, monkeypatch) -> None:
    import onnxruntime

    class Buggy(nn.Module):  # a bug in a module's own code, not something the exporter refuses
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise TypeError("a bug in forward")

    with pytest.raises(TypeError, match="a bug in forward"):
        export_onnx(Buggy(), SHAPE, tmp_path / "buggy.onnx")
    path = export_onnx(tiny(), SHAPE, tmp_path / "m.onnx")

    def broken_session(*a, **k):  # not one of ONNX Runtime's own exception classes: a traceback
        raise KeyError("latopt passed something wrong")

    monkeypatch.setattr(onnxruntime, "InferenceSession", broken_session)
    with pytest.raises(KeyError):
        get_backend(fast("cpu")).prepare(path, SHAPE)


def test_torch_cuda_runner_times_its_stream_with_the_cuda_api() -> None:
    """TorchCudaRunner's wiring, on the CPU: a stand-in for runtime.TorchCudaApi (stream None is torch's
    no-op stream context) shows every call waits for the stream and time_ms is the CudaApi timer around
    one inference."""
    from latopt.latency.backends.torch import TorchCudaRunner

    class StandInCuda:
        stream, device, log = None, torch.device("cpu"), []

        def synchronize(self) -> None:
            self.log.append("sync")

        def time_ms(self, fn) -> float:
            self.log.append("timer")
            fn()
            return 0.25

    cuda = StandInCuda()
    model = tiny()
    r = TorchCudaRunner(model, SHAPE, cuda, torch.float32)
    assert cuda.log == ["sync"]  # the check-run at construction waited for the stream
    assert r.time_ms() == 0.25 and cuda.log == ["sync", "timer"]
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    np.testing.assert_allclose(r.run(x), reference(model, x), rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA; the no-GPU error path cannot occur")
def test_gpu_torch_without_cuda_is_one_clear_error() -> None:
    with pytest.raises(LatoptError, match=r"needs a CUDA GPU .* use --device cpu") as e:
        get_backend(load_device("gpu-torch"))
    assert "\n" not in str(e.value)


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is not None, reason="tensorrt is installed here")
def test_tensorrt_profile_without_tensorrt_is_one_clear_error() -> None:
    for name in ("titanx", "gpu-trt-fp16"):
        with pytest.raises(LatoptError, match="TensorRT is not installed") as e:
            get_backend(load_device(name))
        assert "\n" not in str(e.value)


@pytest.mark.cuda
def test_gpu_torch_runs_with_cuda_events() -> None:
    backend = get_backend(fast("gpu-torch"))
    model = tiny()
    r = backend.prepare(model, SHAPE)
    assert callable(getattr(r, "time_ms", None))
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    np.testing.assert_allclose(r.run(x), reference(model, x), rtol=1e-3, atol=1e-4)
    s = compare({"m": r}, TimingPolicy(2, 5, 5, 60))["m"]
    assert s.n == 5 and s.median_ms > 0
    assert "gpu" in backend.environment()


@pytest.mark.tensorrt
def test_tensorrt_backend_builds_and_times() -> None:
    backend = get_backend(fast("gpu-trt-fp16"))
    model = tiny()
    r = backend.prepare(model, SHAPE)
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    np.testing.assert_allclose(r.run(x), reference(model, x), rtol=2e-2, atol=2e-2)
    s = compare({"m": r}, TimingPolicy(2, 5, 5, 60))["m"]
    assert s.n == 5 and s.median_ms > 0
