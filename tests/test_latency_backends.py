"""Backends for real on tiny models: ONNX Runtime CPU and PyTorch CPU; ONNX export; error paths.

CUDA and TensorRT tests are marked and skip with a reason where unavailable.
"""

from __future__ import annotations

import contextlib
import importlib.util

import numpy as np
import pytest
import torch
from torch import nn

from latopt.errors import LatoptError
from latopt.latency.backends import Backend, TimedRunner, get_backend
from latopt.latency.devices import load_device
from latopt.latency.onnx_io import OPSET, ExportCache, export_onnx
from latopt.latency.timing import TimingPolicy, compare

pytestmark = pytest.mark.floor   # .ci/run's lower-bounds run selects these tests

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
        assert isinstance(a, TimedRunner)
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
    with pytest.raises(LatoptError, match=r"\[1, 5, 16, 16\] does not fit"):
        backend.prepare(path, (1, 5, 16, 16))
    with pytest.raises(LatoptError, match="'CUDAExecutionProvider'.*not available"):
        get_backend(load_device("cpu").model_copy(update={"provider": "CUDAExecutionProvider"}))
    with pytest.raises(LatoptError, match="times nn.Modules, not ONNX files"):
        get_backend(fast("cpu-torch")).prepare(path, SHAPE)


def _qdq(path) -> int:
    import onnx

    return sum(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in onnx.load(str(path)).graph.node)


def test_onnxruntime_int8_times_static_int8_models(tmp_path) -> None:
    """cpu-int8: a module and an fp32 ONNX file are timed as their static INT8 (QDQ) models, made once; a file
    quantised already is timed as it is; the environment says int8 and how the models were made."""
    from latopt.latency.quantize import is_quantized, quantize_int8

    model = tiny()
    fp32 = export_onnx(model, SHAPE, tmp_path / "m.onnx")
    shipped = quantize_int8(fp32, tmp_path / "m.int8.onnx", np.random.default_rng(0).standard_normal((4, *SHAPE[1:])))
    assert _qdq(shipped) > 0 and _qdq(fp32) == 0 and not list(tmp_path.glob(".*"))  # no temp file left behind
    backend = get_backend(fast("cpu-int8"))
    try:
        x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
        for net in (model, fp32):
            r = backend.prepare(net, SHAPE)
            np.testing.assert_allclose(r.run(x), reference(model, x), atol=0.1)  # INT8: close, not equal
            r.close()
        made = sorted(backend.cache.dir.glob("*.int8.onnx"))   # the backend's temporary directory
        assert len(made) == 2 and all(is_quantized(p) for p in made)
        backend.prepare(model, SHAPE).close()
        backend.prepare(shipped, SHAPE).close()                # quantised already: timed as it is
        assert sorted(backend.cache.dir.glob("*.int8.onnx")) == made  # each network made once
        env = backend.environment()
        assert env["precision"] == "int8" and env["int8"]["format"] == "QDQ" and env["int8"]["per_channel"]
        assert (env["int8"]["activation_type"], env["int8"]["weight_type"]) == ("QUInt8", "QInt8")
    finally:
        backend.close()
    assert get_backend(fast("cpu")).environment()["precision"] == "fp32"


def test_int8_is_refused_by_every_backend_but_onnxruntime_on_the_cpu() -> None:
    cases = {
        "titanx": "TensorRT precision .*got 'int8'",
        "gpu-trt-fp16": "TensorRT INT8 is not supported",
        "cpu-torch": "int8 on the CPU .*torch backend",
        "gpu-torch": "'gpu-torch': int8 is not supported",
    }
    for name, msg in cases.items():
        with pytest.raises(LatoptError, match=msg) as e:
            get_backend(load_device(name).model_copy(update={"precision": "int8"}))
        assert "\n" not in str(e.value), name
    with pytest.raises(LatoptError, match="not int8 on CUDAExecutionProvider"):
        get_backend(load_device("cpu-int8").model_copy(update={"provider": "CUDAExecutionProvider"}))


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


# ---------------------------------------------------------------------------- GPU paths checked on the CPU
def _cuda_profile(tmp_path, provider: str = "CUDAExecutionProvider"):
    path = tmp_path / "ort-cuda.yaml"
    path.write_text(f"name: ort-cuda\nprovider: {provider}\ncuda_device: 0\nwarmup: 1\nmin_repeats: 5\n"
                    "max_repeats: 5\n")
    return load_device(path)


def test_ort_gpu_provider_falling_back_to_cpu_is_refused(tmp_path, monkeypatch) -> None:
    """ONNX Runtime lists the CUDA provider even where CUDA/cuDNN cannot load, then runs the session on the
    CPU: here (onnxruntime without CUDA) the session really falls back, and the backend must refuse it in one
    line instead of timing CPU work as GPU work. preload_dlls() runs first; warnings are not silenced."""
    import onnxruntime

    from latopt import runtime

    real_session = onnxruntime.InferenceSession
    seen: dict[str, object] = {}

    def session(path, opts, providers):
        seen["log_severity"], seen["providers"] = opts.log_severity_level, providers
        return real_session(path, opts, providers=providers)

    preloads: list[bool] = []
    monkeypatch.setattr(onnxruntime, "InferenceSession", session)
    monkeypatch.setattr(onnxruntime, "preload_dlls", lambda **kw: preloads.append(True), raising=False)
    monkeypatch.setattr(runtime.ort, "_ORT_DLLS_PRELOADED", False)
    monkeypatch.setattr(onnxruntime, "get_available_providers",
                        lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])  # what a broken GPU install lists
    backend = get_backend(_cuda_profile(tmp_path))
    path = export_onnx(tiny(), SHAPE, tmp_path / "m.onnx")
    with pytest.raises(LatoptError) as e:
        backend.prepare(path, SHAPE)
    msg = str(e.value)
    assert "\n" not in msg and "did not start CUDAExecutionProvider" in msg and "CPUExecutionProvider" in msg
    assert "onnxruntime-gpu" in msg
    assert preloads == [True] and seen["log_severity"] <= 2  # ORT's "Failed to create ..." warning stays visible
    assert seen["providers"][0] == ("CUDAExecutionProvider", {"device_id": 0, "use_tf32": 0})
    backend.close()


def test_ort_cuda_provider_runs_fp32_without_tf32_and_records_it(tmp_path, monkeypatch, stand_in_torch_cuda) -> None:
    """ONNX Runtime's CUDA provider runs float32 convolutions and GEMMs as TF32 on Ampere and newer unless its
    use_tf32 option is 0: the backend passes it (also to the CUDA provider behind the TensorRT one) and the
    environment records every provider's options. The environment names the GPU the profile times (its
    cuda_device), and a CPU profile's makes no CUDA call."""
    import onnxruntime

    monkeypatch.setattr(onnxruntime, "get_available_providers",
                        lambda: ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"])
    calls = stand_in_torch_cuda
    cpu = get_backend(fast("cpu"))
    assert cpu.environment()["provider_options"] == {} and calls == []
    cuda_fp32 = {"device_id": 1, "use_tf32": 0}
    (tmp_path / "ort-cuda1.yaml").write_text("name: ort-cuda1\nprovider: CUDAExecutionProvider\ncuda_device: 1\n")
    cuda = get_backend(load_device(tmp_path / "ort-cuda1.yaml"))
    assert cuda.providers == [("CUDAExecutionProvider", cuda_fp32), "CPUExecutionProvider"]
    env = cuda.environment()
    assert env["provider_options"] == {"CUDAExecutionProvider": cuda_fp32}
    assert env["gpu"] == "GPU 1" and "current_device" not in calls
    trt = get_backend(_cuda_profile(tmp_path, "TensorrtExecutionProvider"))
    assert trt.providers == [("TensorrtExecutionProvider", {"device_id": 0}),
                             ("CUDAExecutionProvider", {"device_id": 0, "use_tf32": 0}), "CPUExecutionProvider"]
    assert trt.environment()["provider_options"]["CUDAExecutionProvider"]["use_tf32"] == 0
    for b in (cpu, cuda, trt):
        b.close()


def test_ort_cpu_provider_keeps_errors_only_logging(tmp_path, monkeypatch) -> None:
    import onnxruntime

    real_session = onnxruntime.InferenceSession
    seen: list[int] = []

    def session(path, opts, providers):
        seen.append(opts.log_severity_level)
        return real_session(path, opts, providers=providers)

    monkeypatch.setattr(onnxruntime, "InferenceSession", session)
    backend = get_backend(fast("cpu"))
    r = backend.prepare(export_onnx(tiny(), SHAPE, tmp_path / "m.onnx"), SHAPE)
    assert seen == [3] and r.providers == ["CPUExecutionProvider"]
    r.close()
    backend.close()


def test_ort_install_hint_names_the_conflict(monkeypatch) -> None:
    """onnxruntime and onnxruntime-gpu install the same module: with both present, the hint says to remove
    both and reinstall the GPU one."""
    from importlib import metadata

    from latopt import runtime

    def installed(*names):
        def distribution(name):
            if name not in names:
                raise metadata.PackageNotFoundError(name)
            return name
        return distribution

    monkeypatch.setattr(metadata, "distribution", installed("onnxruntime", "onnxruntime-gpu"))
    assert "pip uninstall -y onnxruntime onnxruntime-gpu && pip install onnxruntime-gpu" in runtime.ort_install_hint()
    monkeypatch.setattr(metadata, "distribution", installed("onnxruntime"))
    assert runtime.ort_install_hint().startswith("pip uninstall -y onnxruntime && pip install onnxruntime-gpu")
    monkeypatch.setattr(metadata, "distribution", installed("onnxruntime-gpu"))
    assert "CUDA/cuDNN libraries did not load" in runtime.ort_install_hint()


class _StandInTorchCuda:
    """runtime.TorchCudaApi stand-in on the CPU (stream None: torch's no-op stream context)."""

    stream, device, name = None, torch.device("cpu"), "stand-in"

    def __init__(self, index: int = 0) -> None:
        self.closed = False

    def device_name(self) -> str:
        return "NVIDIA A100-SXM4-80GB"

    def compute_capability(self) -> tuple[int, int]:
        return (8, 0)

    def driver_version(self) -> str:
        return "555.42"

    def synchronize(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def tf32_saved():
    """torch's TF32 switches, put back after the test (they are properties: monkeypatch cannot undo them)."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def _fake_cuda_torch(monkeypatch, capability=(8, 0), archs=("sm_75", "sm_80", "sm_86", "sm_90")):
    from latopt.latency.backends import torch as torch_backend

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA A100-SXM4-80GB")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: capability)
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: list(archs))
    monkeypatch.setattr(torch_backend, "TorchCudaApi", _StandInTorchCuda)


def test_gpu_torch_fp32_times_without_tf32_and_restores_it(monkeypatch, tf32_saved) -> None:
    """cuDNN's TF32 is on by default: an fp32 CUDA profile switches TF32 off for cuDNN convolutions and cuBLAS
    matmuls while its backend is open, records the switches in the environment (the LUT's), and restores
    them on close. torch.cuda is a stand-in here (CPU machine); the switches are torch's own."""
    _fake_cuda_torch(monkeypatch)
    torch.backends.cudnn.allow_tf32 = True  # torch's default
    torch.backends.cuda.matmul.allow_tf32 = True  # a user's choice for their own matmuls
    backend = get_backend(load_device("gpu-torch"))
    assert torch.backends.cudnn.allow_tf32 is False and torch.backends.cuda.matmul.allow_tf32 is False
    env = backend.environment()
    assert env["tf32"] == {"cudnn.allow_tf32": False, "cuda.matmul.allow_tf32": False}
    assert env["precision_mode"] == "fp32, TF32 off" and env["compute_capability"] == "8.0"
    backend.close()
    backend.close()  # idempotent
    assert torch.backends.cudnn.allow_tf32 is True and torch.backends.cuda.matmul.allow_tf32 is True
    assert backend.cuda.closed


def test_gpu_torch_fp16_leaves_tf32_alone(monkeypatch, tf32_saved) -> None:
    _fake_cuda_torch(monkeypatch)
    torch.backends.cudnn.allow_tf32 = True
    backend = get_backend(load_device("gpu-torch").model_copy(update={"precision": "fp16"}))
    assert torch.backends.cudnn.allow_tf32 is True
    assert backend.environment()["precision_mode"] == "fp16"
    backend.close()


def test_gpu_torch_refuses_a_gpu_its_build_has_no_kernels_for(monkeypatch) -> None:
    """A TITAN X (Pascal, 6.1) with a torch build without sm_61 (CUDA >= 12.8 wheels) is one line naming the
    cu126 wheels, not a "no kernel image" traceback at the first convolution."""
    _fake_cuda_torch(monkeypatch, capability=(6, 1), archs=("sm_75", "sm_80", "sm_90", "sm_100", "sm_120"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA TITAN X (Pascal)")
    with pytest.raises(LatoptError) as e:
        get_backend(load_device("gpu-torch"))
    msg = str(e.value)
    assert "\n" not in msg and "compute capability 6.1" in msg and "whl/cu126" in msg
    from latopt.latency.backends.torch import arch_runs_on

    assert arch_runs_on((6, 1), ["sm_50", "sm_60", "sm_70"])  # sm_60 cubins run on 6.1
    assert arch_runs_on((8, 9), ["sm_80", "sm_86"]) and arch_runs_on((12, 0), ["sm_90", "compute_90"])
    assert arch_runs_on((9, 0), ["sm_90a"]) and not arch_runs_on((9, 0), ["sm_80", "sm_86"])  # no 9.x cubin
    assert not arch_runs_on((6, 1), ["sm_75", "sm_80"]) and not arch_runs_on((10, 0), ["sm_90a"])


def test_torch_cuda_api_makes_the_profile_device_current_until_closed(monkeypatch) -> None:
    """TorchCudaApi(i) makes GPU i current and puts its stream (where the runner queues work and records the
    CUDA events) on that GPU; close() makes the GPU current before it current again (a process training on
    cuda:0 that timed on cuda:1 goes on using cuda:0). torch.cuda's current device is a stand-in here."""
    from latopt import runtime

    current = [0]

    class CurrentDevice:  # torch.cuda.device: the context manager that selects a device and restores the last
        def __init__(self, device: torch.device) -> None:
            self.index = device.index

        def __enter__(self) -> None:
            self.previous, current[0] = current[0], self.index

        def __exit__(self, *exc: object) -> None:
            current[0] = self.previous

    class Stream:
        def __init__(self, device: torch.device) -> None:
            self.device, self.current = device, current[0]

        def synchronize(self) -> None:
            pass

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "device", CurrentDevice)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: current.__setitem__(0, torch.device(d).index))
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    api = runtime.TorchCudaApi(1)
    assert current == [1] and api.stream.device == torch.device("cuda", 1) and api.stream.current == 1
    api.close()
    assert current == [0]
    current[0] = 1  # changed by someone else since: a second close() changes nothing
    api.close()
    assert current == [1]


def test_torch_runner_out_of_memory_says_what_to_lower(monkeypatch, tf32_saved) -> None:
    """CUDA out of memory at a runner's first call is one line saying so and what to lower, not "PyTorch cannot
    run ... at input shape" (torch.cuda is a stand-in; the module's call raises what torch raises)."""
    _fake_cuda_torch(monkeypatch)

    def out_of_memory(self, x):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                                          "capacity of 79.14 GiB of which 1.02 GiB is free.\nmore details")

    monkeypatch.setattr(nn.Sequential, "forward", out_of_memory)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    backend = get_backend(load_device("gpu-torch"))
    try:
        with pytest.raises(LatoptError) as e:
            backend.prepare(tiny(), SHAPE)
    finally:
        backend.close()
    msg = str(e.value)
    assert msg.startswith("out of memory on ") and "input shape [1, 3, 16, 16]" in msg and "\n" not in msg
    assert "lower the batch (or the device profile's batch) or the resolution" in msg and e.value.param == "batch"
    assert "Tried to allocate 2.00 GiB" in msg and "cannot run" not in msg


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA; the no-GPU error path cannot occur")
def test_gpu_torch_without_cuda_is_one_clear_error() -> None:
    with pytest.raises(LatoptError, match=r"needs a CUDA GPU .* use the device cpu") as e:
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
    s = compare({"m": r}, TimingPolicy(warmup=2, min_repeats=5, max_repeats=5, budget_s=60))["m"]
    assert s.n == 5 and s.median_ms > 0
    assert "gpu" in backend.environment()


@pytest.mark.tensorrt
def test_tensorrt_backend_builds_and_times() -> None:
    backend = get_backend(fast("gpu-trt-fp16"))
    model = tiny()
    r = backend.prepare(model, SHAPE)
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    np.testing.assert_allclose(r.run(x), reference(model, x), rtol=2e-2, atol=2e-2)
    s = compare({"m": r}, TimingPolicy(warmup=2, min_repeats=5, max_repeats=5, budget_s=60))["m"]
    assert s.n == 5 and s.median_ms > 0


def test_threaded_cpu_sessions_do_not_spin(tmp_path) -> None:
    """With more than one intra-op thread, the backend's sessions sleep between runs: spinning pools of the other
    interleaved sessions took the cores of the timed one (a LUT put more time on one block than on the network)."""
    import torch

    from latopt.latency.backends import onnxruntime as ort_backend
    from latopt.latency.devices import load_device

    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3)).eval()
    for threads, spinning in ((1, True), (2, False)):
        be = ort_backend.create(load_device("cpu").model_copy(update={"threads": threads, "clock": "wall"}))
        try:
            r = be.prepare(net, (1, 3, 8, 8))
            opts = r.session.get_session_options()
            try:
                entry = opts.get_session_config_entry("session.intra_op.allow_spinning")
            except RuntimeError:  # not set: ONNX Runtime's default (spinning)
                entry = None
            assert be.environment()["intra_op_spinning"] is spinning
            assert (entry == "0") is not spinning
            r.close()
        finally:
            be.close()


def test_int8_quantisation_leaves_the_root_logger_alone(tmp_path, monkeypatch) -> None:
    """ONNX Runtime's quantiser logs through logging.warning, which gives a handler-less root logger one
    (logging.basicConfig): every later latopt line was then printed twice. quantize_int8 undoes it."""
    import logging

    import numpy as np
    import onnxruntime.quantization as q
    import torch

    from latopt.latency.onnx_io import export_onnx
    from latopt.latency.quantize import quantize_int8

    real = q.quantize_static

    def noisy(*a, **k):  # what ONNX Runtime does for some graphs
        logging.warning("a quantiser warning")
        return real(*a, **k)

    monkeypatch.setattr(q, "quantize_static", noisy)
    export_onnx(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3)).eval(), (1, 3, 8, 8), tmp_path / "m.onnx")
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers.clear()  # as in a plain `latopt` process (pytest gives the root its own handlers)
    try:
        quantize_int8(tmp_path / "m.onnx", tmp_path / "q.onnx", np.zeros((2, 3, 8, 8), np.float32))
        assert root.handlers == []
    finally:
        root.handlers[:] = saved
