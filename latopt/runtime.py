"""Run an exported latopt artefact without the training stack: a TensorRT ``.engine`` or an ``.onnx`` model.

Only :mod:`numpy` is imported at module level; ``tensorrt`` (with ``pycuda`` or, failing that, ``torch``
holding the CUDA buffers) or ``onnxruntime`` is imported when a model of that kind is loaded. Its three
latopt imports (``LatoptError``, ``first_line``, ``atomic_path``) have stand-ins, so the file can be copied
next to the model onto a device that lacks the package (``--output`` is then written directly, not
atomically).

It is also the floor the latency backends build on (:mod:`latopt.latency.backends`): the one ONNX Runtime
runner (:class:`OrtRunner`), the TensorRT runner, the CUDA buffers/streams and the one CUDA-event timer
(:class:`CudaApi`), the one ``nvidia-smi`` driver query (:func:`driver_version`) and the one summary of
timed calls (:class:`TimingStats`, re-exported by :mod:`latopt.latency.timing`), so that a copy of this
file alone times ``--bench`` exactly as the profiler does.

Command line::

    python -m latopt.runtime MODEL.engine|MODEL.onnx [--input x.npy] [--output y.npy] [--bench N]

Python::

    from latopt.runtime import load
    with load("model.engine") as r:      # or "model.onnx"
        y = r.run(x)                     # numpy in, numpy out (first output)
        r()                              # one synchronised inference on a fixed input (for timing)

TensorRT API used (names present in TensorRT 8.6, 10 and 11, checked by tests/test_trt_api.py; see the
NVIDIA samples ``samples/python/common_runtime.py`` in github.com/NVIDIA/TensorRT and the Python API pages
https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/python-api/infer/Core/ExecutionContext.html):
``trt.Runtime(logger).deserialize_cuda_engine``, ``engine.num_io_tensors / get_tensor_name / get_tensor_mode /
get_tensor_shape / get_tensor_dtype / get_tensor_profile_shape``, ``context.set_input_shape``,
``context.set_tensor_address`` and ``context.execute_async_v3(stream_handle)``; the results of
``set_input_shape`` and ``set_tensor_address`` are checked. One TensorRT logger per process (:func:`trt_logger`).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import io
import shutil
import statistics
import subprocess
import sys
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

try:  # inside the latopt package
    from latopt.artifacts import atomic_path
    from latopt.errors import LatoptError, first_line
except ImportError:  # pragma: no cover - this file copied on its own next to a model

    class LatoptError(Exception):  # type: ignore[no-redef]
        """A mistake the user can fix (one line)."""

        exit_code = 2

    def first_line(e: BaseException | str, limit: int = 200) -> str:  # type: ignore[misc]
        """Without latopt: the first non-empty line of the message, else the exception's type name."""
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        return lines[0][:limit] if lines else type(e).__name__

    @contextlib.contextmanager
    def atomic_path(path: str | Path) -> Iterator[Path]:  # type: ignore[no-redef]
        """Without latopt: write ``path`` directly (not atomically)."""
        yield Path(path)


ENGINE_SUFFIXES = (".engine", ".plan", ".trt")
TRT_INSTALL_HINT = "pip install 'latopt[trt]' on a machine with an NVIDIA GPU, or use --device cpu"


# ---------------------------------------------------------------------------------------- statistics
@dataclass(frozen=True)
class TimingStats:
    """Median and quartiles (ms) of ``n`` timed calls; ``samples_ms[i]`` is the call of round ``i``."""

    median_ms: float
    q1_ms: float
    q3_ms: float
    iqr_ms: float
    n: int
    wall_median_ms: float | None = None  # host wall-clock median when another clock was the primary one
    samples_ms: tuple[float, ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def from_samples(cls, samples: Sequence[float], wall: Sequence[float] | None = None) -> TimingStats:
        """Quartiles by ``statistics.quantiles(method="inclusive")``; one sample is its own median."""
        s = [float(v) for v in samples]
        if not s:
            raise ValueError("no samples")
        wmed = statistics.median(wall) if wall else None
        if len(s) == 1:
            return cls(s[0], s[0], s[0], 0.0, 1, wmed, tuple(s))
        q1, med, q3 = statistics.quantiles(s, n=4, method="inclusive")
        return cls(med, q1, q3, q3 - q1, len(s), wmed, tuple(s))

    def per_round_ratio(self, other: TimingStats) -> TimingStats:
        """Median and quartiles over rounds of t(self) / t(other); both from one interleaved run (sample ``i``
        of each is round ``i``), so each ratio compares two calls made moments apart."""
        return TimingStats.from_samples([x / y for x, y in zip(self.samples_ms, other.samples_ms, strict=True)])

    def to_dict(self) -> dict[str, float | int]:
        d: dict[str, float | int] = {"median_ms": self.median_ms, "q1_ms": self.q1_ms, "q3_ms": self.q3_ms,
                                     "iqr_ms": self.iqr_ms, "n": self.n}
        if self.wall_median_ms is not None:
            d["wall_median_ms"] = self.wall_median_ms
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TimingStats:
        w = d.get("wall_median_ms")
        return cls(float(d["median_ms"]), float(d["q1_ms"]), float(d["q3_ms"]), float(d["iqr_ms"]), int(d["n"]),
                   None if w is None else float(w))


# --------------------------------------------------------------------------------------------- CUDA
class CudaApi:
    """The few CUDA operations the GPU runners need: buffers, one stream, copies, events.

    Subclasses set ``stream`` and implement the buffer operations plus ``_event`` / ``_elapsed_ms``;
    :meth:`time_ms` is the one CUDA-event timer of latopt (TensorRT engines and torch on CUDA). A runner on
    the API registers itself (:meth:`track`); ``close`` closes the runners still open before it lets go of
    the GPU (:meth:`close_runners`), so their engines and buffers are freed while the context exists."""

    name = "none"
    device_index = 0
    stream: Any = None
    _runners: weakref.WeakSet[Any] | None = None

    def track(self, runner: Any) -> None:
        """Have :meth:`close_runners` close ``runner`` (held weakly: a runner dropped earlier is freed as usual)."""
        if self._runners is None:
            self._runners = weakref.WeakSet()
        self._runners.add(runner)

    def close_runners(self) -> None:
        """Close every tracked runner that is still open (its TensorRT objects, then its buffers)."""
        runners, self._runners = list(self._runners or ()), None
        for runner in runners:
            runner.close()

    def device_name(self) -> str: ...
    def compute_capability(self) -> tuple[int, int]: ...
    def alloc(self, shape: tuple[int, ...], dtype: np.dtype) -> Any: ...
    def free(self, buf: Any) -> None: ...
    def ptr(self, buf: Any) -> int: ...
    def stream_handle(self) -> int: ...
    def htod(self, buf: Any, host: np.ndarray) -> None: ...
    def dtoh(self, buf: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray: ...
    def synchronize(self) -> None: ...
    def driver_version(self) -> str | None: ...
    def close(self) -> None: ...
    def _event(self) -> Any: ...
    def _elapsed_ms(self, start: Any, end: Any) -> float: ...

    def time_ms(self, fn: Any) -> float:
        """GPU time (ms) of the work ``fn`` queues on :attr:`stream`: one CUDA event pair recorded on the
        stream around the call, then a wait for the end event."""
        start, end = self._event(), self._event()
        start.record(self.stream)
        fn()
        end.record(self.stream)
        end.synchronize()
        return float(self._elapsed_ms(start, end))


class PycudaApi(CudaApi):
    """pycuda on the device's primary context (shared with the CUDA runtime that TensorRT uses).

    The context is pushed here and popped by :meth:`close`, which also runs at interpreter exit (``atexit``)
    when the owner never called it: pycuda aborts the interpreter ("context stack was not empty upon module
    cleanup", exit code 134) when a pushed context is left behind. ``close`` first closes the runners still
    open on it: at exit they would otherwise be destroyed after the pop, TensorRT freeing its memory without
    a context. ``close`` is idempotent."""

    name = "pycuda"

    def __init__(self, device_index: int = 0) -> None:
        import pycuda.driver as cuda

        self.cuda = cuda
        cuda.init()
        if cuda.Device.count() <= device_index:
            raise LatoptError(f"no CUDA GPU with index {device_index} is visible (pycuda sees {cuda.Device.count()}); "
                              "use --device cpu")
        self.device_index = device_index
        self.device = cuda.Device(device_index)
        self.ctx = self.device.retain_primary_context()
        self.ctx.push()
        atexit.register(self.close)  # pops the context even when the owner never closes it
        self.stream = cuda.Stream()
        self._allocs: list[Any] = []

    def device_name(self) -> str:
        return str(self.device.name())

    def compute_capability(self) -> tuple[int, int]:
        major, minor = self.device.compute_capability()
        return int(major), int(minor)

    def alloc(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        nbytes = max(1, int(np.prod(shape)) * np.dtype(dtype).itemsize)
        buf = self.cuda.mem_alloc(nbytes)
        self._allocs.append(buf)
        return buf

    def free(self, buf: Any) -> None:
        if buf in self._allocs:
            self._allocs.remove(buf)
            buf.free()

    def ptr(self, buf: Any) -> int:
        return int(buf)

    def stream_handle(self) -> int:
        return int(self.stream.handle)

    # Copies are synchronous (pycuda's *_async copies want page-locked host memory); they are never timed.
    def htod(self, buf: Any, host: np.ndarray) -> None:
        self.stream.synchronize()
        self.cuda.memcpy_htod(buf, np.ascontiguousarray(host))

    def dtoh(self, buf: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        self.stream.synchronize()
        out = np.empty(shape, dtype)
        self.cuda.memcpy_dtoh(out, buf)
        return out

    def synchronize(self) -> None:
        self.stream.synchronize()

    def _event(self) -> Any:
        return self.cuda.Event()

    def _elapsed_ms(self, start: Any, end: Any) -> float:
        return float(end.time_since(start))  # pycuda: end.time_since(start) is in milliseconds

    def driver_version(self) -> str | None:
        return driver_version(self.device_index) or f"CUDA driver API {self.cuda.get_driver_version()}"

    def close(self) -> None:
        """Close the open runners, free the buffers, pop and release the context (idempotent; also registered
        with ``atexit``)."""
        ctx, self.ctx = self.ctx, None
        if ctx is None:
            return
        atexit.unregister(self.close)
        try:
            self.close_runners()  # while the context is current
            self.stream.synchronize()
            for buf in self._allocs:
                buf.free()
            self._allocs.clear()
        finally:  # the context is popped even when a pending CUDA error surfaces above
            self.cuda.Context.pop()
            ctx.detach()


class TorchCudaApi(CudaApi):
    """torch CUDA tensors as buffers and a torch stream; used when pycuda is not installed.

    GPU ``device_index`` is the current CUDA device while the API is open (TensorRT allocates on the current
    device) and :meth:`close` makes the one current before it current again: a process that trains on
    cuda:0 and timed on cuda:1 goes on asking cuda:0 (``is_bf16_supported``, NCCL's object collectives)."""

    name = "torch"

    def __init__(self, device_index: int = 0) -> None:
        import torch

        if not torch.cuda.is_available():
            raise LatoptError("no CUDA GPU is visible (torch.cuda.is_available() is False); use --device cpu")
        if torch.cuda.device_count() <= device_index:
            raise LatoptError(f"no CUDA GPU with index {device_index} is visible (torch sees "
                              f"{torch.cuda.device_count()}); use --device cpu")
        self.torch = torch
        self.device_index = device_index
        self.device = torch.device("cuda", device_index)
        self._current = contextlib.ExitStack()  # restores the previously current device on close()
        self._current.enter_context(torch.cuda.device(self.device))
        try:
            self.stream = torch.cuda.Stream(device=self.device)
        except BaseException:
            self._current.close()
            raise

    def device_name(self) -> str:
        return str(self.torch.cuda.get_device_name(self.device_index))

    def compute_capability(self) -> tuple[int, int]:
        major, minor = self.torch.cuda.get_device_capability(self.device_index)
        return int(major), int(minor)

    def alloc(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        tdtype = self.torch.from_numpy(np.empty(0, dtype=dtype)).dtype
        return self.torch.empty(tuple(shape), dtype=tdtype, device=self.device)

    def free(self, buf: Any) -> None:
        del buf  # the caching allocator reclaims it once the last reference is gone

    def ptr(self, buf: Any) -> int:
        return int(buf.data_ptr())

    def stream_handle(self) -> int:
        return int(self.stream.cuda_stream)

    def htod(self, buf: Any, host: np.ndarray) -> None:
        with self.torch.cuda.stream(self.stream):
            buf.copy_(self.torch.from_numpy(np.ascontiguousarray(host)).reshape(buf.shape))

    def dtoh(self, buf: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        self.stream.synchronize()
        return buf.detach().cpu().numpy().reshape(shape).astype(dtype, copy=False)

    def synchronize(self) -> None:
        self.stream.synchronize()

    def _event(self) -> Any:
        return self.torch.cuda.Event(enable_timing=True)

    def _elapsed_ms(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end))

    def driver_version(self) -> str | None:
        return driver_version(self.device_index)

    def close(self) -> None:
        """Close the open runners, wait for the stream, make the previously current device current again
        (idempotent)."""
        try:
            self.close_runners()
            self.stream.synchronize()
        finally:
            self._current.close()


def cuda_api(device_index: int = 0) -> CudaApi:
    """pycuda when installed, else torch CUDA; LatoptError (one line) when neither gives a GPU."""
    try:
        import pycuda.driver as pycuda_driver
    except ImportError:
        pass
    else:
        try:
            return PycudaApi(device_index)
        except pycuda_driver.Error as e:  # the base of pycuda's errors (cuInit, no device, out of memory)
            raise LatoptError(f"no usable CUDA GPU ({type(e).__name__}: {first_line(e)}); use --device cpu") from None
    try:
        import torch  # noqa: F401
    except ImportError:
        raise LatoptError(
            "TensorRT needs pycuda or torch (with CUDA) to hold its buffers: pip install pycuda"
        ) from None
    return TorchCudaApi(device_index)


def driver_version(index: int) -> str | None:
    """The NVIDIA driver version of GPU ``index`` as ``nvidia-smi`` reports it; None without nvidia-smi."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader", "-i", str(index)],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out or None


# -------------------------------------------------------------------------------------- TensorRT
def import_tensorrt(hint: str = TRT_INSTALL_HINT) -> Any:
    try:
        import tensorrt as trt
    except ImportError:
        raise LatoptError(f"TensorRT is not installed: {hint}") from None
    return trt


_TRT_LOGGER: tuple[Any, Any] | None = None  # (the tensorrt module, its one Logger)


def trt_logger(trt: Any) -> Any:
    """The process's one TensorRT logger (WARNING and above), created on first use and shared by every
    build and runner, as NVIDIA's samples keep one module-level ``TRT_LOGGER``."""
    global _TRT_LOGGER
    if _TRT_LOGGER is None or _TRT_LOGGER[0] is not trt:
        _TRT_LOGGER = (trt, trt.Logger(trt.Logger.WARNING))
    return _TRT_LOGGER[1]


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    is_input: bool


class TrtEngineRunner:
    """Executes one deserialized TensorRT engine: fixed buffers bound by tensor name, one stream.

    ``engine`` is the serialized plan (bytes) or a path to it. ``input_shape`` fixes dynamic input
    dimensions (default: the optimisation profile's "opt" shape). ``cuda`` is shared when given
    (the backend passes its own) and then not closed here.
    """

    def __init__(self, engine: bytes | str | Path, *, input_shape: Sequence[int] | None = None,
                 device_index: int = 0, cuda: CudaApi | None = None, seed: int = 0) -> None:
        if isinstance(engine, (str, Path)):
            engine = _read_file(Path(engine), "TensorRT engine")
        trt = import_tensorrt("pip install tensorrt on a machine with an NVIDIA GPU (CUDA buffers through "
                              "pycuda when installed, else torch), or run the .onnx model")
        self._own_cuda = cuda is None
        self.cuda = cuda or cuda_api(device_index)  # context first: TensorRT allocates on the current one
        self.cuda.track(self)  # closed by the API's close() if still open then (pycuda: before the context pops)
        self.trt = trt
        self.buffers: dict[str, Any] = {}
        try:
            self._setup(bytes(engine), input_shape, seed)
        except BaseException:
            self.close()
            raise

    def _setup(self, plan: bytes, input_shape: Sequence[int] | None, seed: int) -> None:
        trt = self.trt
        self.runtime = trt.Runtime(trt_logger(trt))
        self.engine = self.runtime.deserialize_cuda_engine(plan)
        if self.engine is None:
            raise LatoptError(
                f"could not deserialize the TensorRT engine with TensorRT {trt.__version__} on "
                f"{self.cuda.device_name()}; an engine only runs with the TensorRT version and GPU it was built for"
            )
        self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        inputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        if len(inputs) != 1:
            raise LatoptError(f"the engine has {len(inputs)} inputs {inputs}; the latopt runtime expects exactly one")
        self._set_input_shape(inputs[0], self._input_shape(inputs[0], input_shape))
        self.specs: list[TensorSpec] = []
        for n in names:
            shape = tuple(int(d) for d in self.context.get_tensor_shape(n))
            if any(d < 0 for d in shape):
                raise LatoptError(f"TensorRT left tensor {n!r} with unresolved shape {list(shape)} after setting the "
                                  f"input shape; the engine cannot run at this input shape")
            try:
                dtype = np.dtype(trt.nptype(self.engine.get_tensor_dtype(n)))
            except (TypeError, KeyError, ValueError):
                raise LatoptError(f"tensor {n!r} has dtype {self.engine.get_tensor_dtype(n)} that numpy cannot hold") from None
            self.specs.append(TensorSpec(n, shape, dtype, n in inputs))
            self.buffers[n] = self.cuda.alloc(shape, dtype)
            if not self.context.set_tensor_address(n, self.cuda.ptr(self.buffers[n])):
                raise LatoptError(f"TensorRT refused the device address of tensor {n!r} (see the TensorRT log above)")
        self.input = next(s for s in self.specs if s.is_input)
        self.outputs = [s for s in self.specs if not s.is_input]
        fixed = np.random.default_rng(seed).standard_normal(self.input.shape).astype(self.input.dtype)
        self.cuda.htod(self.buffers[self.input.name], fixed)
        self.cuda.synchronize()

    def _set_input_shape(self, name: str, shape: tuple[int, ...]) -> None:
        """``set_input_shape``, checked: a shape outside the optimisation profile is a one-line error naming
        the profile's min and max (TensorRT returns False and would leave negative output shapes)."""
        if self.context.set_input_shape(name, shape):
            return
        what = f"input shape {list(shape)} is not accepted by the engine's input {name!r}"
        static = tuple(int(d) for d in self.engine.get_tensor_shape(name))
        if any(d < 0 for d in static):
            lo, _, hi = self.engine.get_tensor_profile_shape(name, 0)
            what += f": its optimisation profile allows min {[int(d) for d in lo]} to max {[int(d) for d in hi]}"
        raise LatoptError(what)

    def _input_shape(self, name: str, given: Sequence[int] | None) -> tuple[int, ...]:
        static = tuple(int(d) for d in self.engine.get_tensor_shape(name))
        if given is not None:
            given = tuple(int(d) for d in given)
            if len(given) != len(static) or any(s >= 0 and s != g for s, g in zip(static, given, strict=True)):
                raise LatoptError(f"input shape {list(given)} does not fit the engine's input {name!r} {list(static)}")
            return given
        if all(d >= 0 for d in static):
            return static
        return tuple(int(d) for d in self.engine.get_tensor_profile_shape(name, 0)[1])  # (min, opt, max)

    def _execute(self) -> None:
        if not self.context.execute_async_v3(self.cuda.stream_handle()):
            raise LatoptError("TensorRT execute_async_v3 failed (see the TensorRT log above)")

    def __call__(self) -> None:
        """One synchronised inference on the fixed input."""
        self._execute()
        self.cuda.synchronize()

    def run_all(self, x: np.ndarray) -> dict[str, np.ndarray]:
        x = np.asarray(x)
        if tuple(x.shape) != self.input.shape:
            raise LatoptError(f"input has shape {list(x.shape)}, the engine expects {list(self.input.shape)}")
        self.cuda.htod(self.buffers[self.input.name], x.astype(self.input.dtype, copy=False))
        self._execute()
        out = {s.name: self.cuda.dtoh(self.buffers[s.name], s.shape, s.dtype) for s in self.outputs}
        self.cuda.synchronize()
        return out

    def run(self, x: np.ndarray) -> np.ndarray:
        """Inference on ``x``; returns the first output."""
        return self.run_all(x)[self.outputs[0].name]

    def time_ms(self) -> float:
        """GPU time of one inference on the fixed input (CUDA events around ``execute_async_v3``)."""
        return self.cuda.time_ms(self._execute)

    def time_events_ms(self, repeats: int) -> list[float]:
        """GPU time of ``repeats`` inferences, one CUDA-event pair around each ``execute_async_v3``."""
        return [self.cuda.time_ms(self._execute) for _ in range(int(repeats))]

    def close(self) -> None:
        """Release the context, engine and buffers (idempotent)."""
        cuda, self.cuda = self.cuda, None  # type: ignore[assignment]
        if cuda is None:
            return
        cuda.synchronize()
        for attr in ("context", "engine", "runtime"):  # context before the engine it came from
            setattr(self, attr, None)
        for buf in self.buffers.values():
            cuda.free(buf)
        self.buffers = {}
        if self._own_cuda:
            cuda.close()

    def __enter__(self) -> TrtEngineRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------------- ONNX Runtime
_ORT_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
               "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(uint8)": np.uint8}
GPU_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider")
ORT_LOG_WARNING = 2  # ONNX Runtime's log_severity_level for warnings (0 verbose .. 4 fatal)
_ORT_DLLS_PRELOADED = False


def ort_install_hint() -> str:
    """How to get ONNX Runtime's GPU providers working here (one sentence). ``onnxruntime`` and
    ``onnxruntime-gpu`` install the same ``onnxruntime`` module, so with both installed whichever was
    written last wins, and uninstalling one breaks the other."""
    from importlib import metadata

    installed = set()
    for dist in ("onnxruntime", "onnxruntime-gpu"):
        try:
            metadata.distribution(dist)
        except metadata.PackageNotFoundError:
            continue
        installed.add(dist)
    if installed == {"onnxruntime", "onnxruntime-gpu"}:
        return ("both onnxruntime and onnxruntime-gpu are installed and overwrite each other: "
                "pip uninstall -y onnxruntime onnxruntime-gpu && pip install onnxruntime-gpu")
    if "onnxruntime-gpu" not in installed:
        return "pip uninstall -y onnxruntime && pip install onnxruntime-gpu (see README, GPU section)"
    return ("onnxruntime-gpu is installed but its CUDA/cuDNN libraries did not load (see ONNX Runtime's warning "
            "above): install the CUDA and cuDNN versions it was built for, e.g. pip install 'onnxruntime-gpu[cuda,cudnn]'")


def _preload_ort_dlls(ort: Any) -> None:
    """``onnxruntime.preload_dlls()`` (onnxruntime-gpu >= 1.21) once per process, before the first GPU
    session: it loads the CUDA/cuDNN libraries of the nvidia-* wheels (or torch's) that the CUDA provider
    would otherwise fail to find."""
    global _ORT_DLLS_PRELOADED
    preload = getattr(ort, "preload_dlls", None)
    if preload is None or _ORT_DLLS_PRELOADED:
        return
    _ORT_DLLS_PRELOADED = True
    preload()


def ort_errors() -> tuple[type[BaseException], ...]:
    """What ONNX Runtime raises for a model or an input it cannot take (its pybind11 exception classes):
    a corrupt, missing or unsupported model, an input of the wrong shape or type, a provider that fails.
    Anything else raised around a session is a bug and stays a traceback."""
    from onnxruntime.capi import onnxruntime_pybind11_state as s

    return (s.Fail, s.InvalidArgument, s.NoSuchFile, s.NoModel, s.InvalidProtobuf, s.InvalidGraph,
            s.NotImplemented, s.RuntimeException, s.EPFail)


class OrtRunner:
    """One ONNX Runtime session with one input: the deploy runner and the latency backend's runner.

    ``providers`` default to the CPU execution provider; a CUDA / TensorRT provider first (with its
    ``{"device_id": i}`` options) keeps the bound input and outputs on that GPU. Session options:
    ``intra_op_num_threads = threads`` (ONNX Runtime's default when ``threads`` is None or 0),
    ``inter_op_num_threads = 1``, sequential execution, ``ORT_ENABLE_ALL`` (ONNX Runtime's defaults, set
    explicitly because the latency backend reports them), ``log_severity`` when given (3 = errors only),
    ``spin=False``: the intra-op worker threads sleep between runs instead of spin-waiting (ONNX Runtime's
    ``session.intra_op.allow_spinning``; the latency backend's choice with more than one thread).

    A GPU provider first: ``onnxruntime.preload_dlls()`` runs before the session where it exists, ONNX
    Runtime's warnings stay visible (``log_severity`` is capped at 2) and the session must really use that
    provider (``session.get_providers()[0]``): ONNX Runtime lists the CUDA provider as available even when
    CUDA or cuDNN cannot be loaded and then quietly runs on the CPU, which would time CPU work as GPU work.

    The input shape defaults to the model's, dynamic dimensions 1; it is checked against the model's
    declared shape, then the model is run once on a seeded random input. That input and pre-allocated
    outputs are bound (IOBinding), so ``runner()``, the timed call, is one ``run_with_iobinding`` without
    Python-side copies. ``run(x)`` / ``run_all(x)`` run any input. A model that ONNX Runtime cannot load
    or run at the shape is a one-line LatoptError.
    """

    def __init__(self, model: str | Path, *, input_shape: Sequence[int] | None = None,
                 providers: Sequence[str | tuple[str, dict[str, Any]]] | None = None, threads: int | None = 1,
                 seed: int = 0, log_severity: int | None = None, spin: bool = True) -> None:
        try:
            import onnxruntime as ort
        except ImportError:
            raise LatoptError("onnxruntime is not installed: pip install onnxruntime") from None
        path = Path(model)
        _read_file(path, "ONNX model", read=False)
        providers = list(providers or ["CPUExecutionProvider"])
        first, first_opts = (providers[0], {}) if isinstance(providers[0], str) else providers[0]
        gpu = first in GPU_PROVIDERS
        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = int(threads)
        opts.inter_op_num_threads = 1
        if not spin:  # intra-op worker threads sleep between runs instead of spin-waiting
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if log_severity is not None:  # a GPU provider's "Failed to create CUDAExecutionProvider" is a warning
            opts.log_severity_level = min(int(log_severity), ORT_LOG_WARNING) if gpu else int(log_severity)
        if gpu:
            _preload_ort_dlls(ort)
        try:
            self.session = ort.InferenceSession(str(path), opts, providers=providers)
        except ort_errors() as e:
            raise LatoptError(f"ONNX Runtime cannot load {path}: {first_line(e)}") from None
        active = list(self.session.get_providers())
        if gpu and (not active or active[0] != first):
            raise LatoptError(f"ONNX Runtime did not start {first} (the session runs on {', '.join(active) or 'nothing'}), "
                              f"so it would time the CPU; {ort_install_hint()}")
        self.providers = active
        inputs = self.session.get_inputs()
        if len(inputs) != 1:
            raise LatoptError(f"{path} has {len(inputs)} inputs; the latopt runtime expects exactly one")
        inp = inputs[0]
        self.input_name = inp.name
        self.input_dtype = np.dtype(_ORT_DTYPES.get(inp.type, np.float32))
        declared = [d if isinstance(d, int) and d > 0 else None for d in inp.shape]
        if input_shape is not None:
            shape = tuple(int(d) for d in input_shape)
            if len(shape) != len(declared) or any(d is not None and d != s for d, s in zip(declared, shape, strict=True)):
                raise LatoptError(f"input shape {list(shape)} does not fit the model's input {inp.name!r} {inp.shape}")
        else:
            shape = tuple(d if d is not None else 1 for d in declared)
        self.input_shape = shape
        self.output_names = [o.name for o in self.session.get_outputs()]
        x = np.random.default_rng(seed).standard_normal(shape).astype(self.input_dtype)
        try:
            outs = self.session.run(self.output_names, {self.input_name: x})
        except ort_errors() as e:
            raise LatoptError(f"ONNX Runtime cannot run the model at input shape {list(shape)}: "
                              f"{first_line(e)}") from None
        device, device_id = ("cuda", int(first_opts.get("device_id", 0))) if gpu else ("cpu", 0)
        self._binding = self.session.io_binding()
        self._x = ort.OrtValue.ortvalue_from_numpy(x, device, device_id)
        self._binding.bind_ortvalue_input(self.input_name, self._x)
        self._outs = []
        for name, o in zip(self.output_names, outs, strict=True):
            v = ort.OrtValue.ortvalue_from_numpy(np.empty_like(o), device, device_id)
            self._binding.bind_ortvalue_output(name, v)
            self._outs.append(v)
        self._sync = gpu

    def __call__(self) -> None:
        """One inference on the bound input (synchronised with the GPU for a GPU provider)."""
        if self._sync:
            self._binding.synchronize_inputs()
        self.session.run_with_iobinding(self._binding)
        if self._sync:
            self._binding.synchronize_outputs()

    def run_all(self, x: np.ndarray) -> dict[str, np.ndarray]:
        x = np.ascontiguousarray(np.asarray(x).astype(self.input_dtype, copy=False))
        outs = self.session.run(self.output_names, {self.input_name: x})
        return dict(zip(self.output_names, outs, strict=True))

    def run(self, x: np.ndarray) -> np.ndarray:
        """Inference on ``x``; returns the first output."""
        return self.run_all(x)[self.output_names[0]]

    def close(self) -> None:
        self._binding = None
        self._outs = []
        self.session = None

    def __enter__(self) -> OrtRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------------------------ entry points
def _read_file(path: Path, what: str, *, read: bool = True) -> bytes:
    if not path.exists():
        raise LatoptError(f"{what} {path} does not exist")
    if not path.is_file():
        raise LatoptError(f"{what} {path} is not a file")
    return path.read_bytes() if read else b""


def load(path: str | Path, *, input_shape: Sequence[int] | None = None, device_index: int = 0,
         threads: int | None = 1, seed: int = 0) -> TrtEngineRunner | OrtRunner:
    """A runner for ``path``: ``.engine``/``.plan``/``.trt`` → TensorRT, ``.onnx`` → ONNX Runtime."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in ENGINE_SUFFIXES:
        return TrtEngineRunner(path, input_shape=input_shape, device_index=device_index, seed=seed)
    if suffix == ".onnx":
        return OrtRunner(path, input_shape=input_shape, threads=threads, seed=seed)
    raise LatoptError(f"unknown model type {path.name!r}: expected .engine (TensorRT) or .onnx (ONNX Runtime)")


def bench(runner: TrtEngineRunner | OrtRunner, n: int, warmup: int = 10) -> dict[str, float]:
    """Median and quartiles of ``n`` synchronised calls (wall clock; plus CUDA events for engines)."""
    for _ in range(warmup):
        runner()
    wall = []
    for _ in range(n):
        t0 = time.perf_counter()
        runner()
        wall.append((time.perf_counter() - t0) * 1e3)
    out = _summary(wall, "wall")
    if isinstance(runner, TrtEngineRunner):
        out.update(_summary(runner.time_events_ms(n), "gpu"))
    return out


def _summary(ms: list[float], key: str) -> dict[str, float]:
    s = TimingStats.from_samples(ms)
    return {f"{key}_median_ms": s.median_ms, f"{key}_q1_ms": s.q1_ms, f"{key}_q3_ms": s.q3_ms}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m latopt.runtime",
                                description="Run a latopt artefact (TensorRT .engine or .onnx) on one input.")
    p.add_argument("model", help="MODEL.engine (TensorRT) or MODEL.onnx (ONNX Runtime)")
    p.add_argument("--input", help="input tensor as .npy (default: seeded standard-normal noise)")
    p.add_argument("--output", help="write the first output to this .npy file")
    p.add_argument("--bench", type=int, default=0, metavar="N", help="time N synchronised inferences")
    p.add_argument("--gpu", type=int, default=0, help="CUDA device index for engines (default 0)")
    p.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the noise input (default 0)")
    args = p.parse_args(argv)
    try:
        return _main(args)
    except LatoptError as e:
        print(f"latopt.runtime: error: {e}", file=sys.stderr)
        return 2


def _main(args: argparse.Namespace) -> int:
    if args.bench < 0:
        raise LatoptError(f"--bench must be >= 0, got {args.bench}")
    if args.threads < 0:
        raise LatoptError(f"--threads must be >= 0 (0: ONNX Runtime's default), got {args.threads}")
    if args.gpu < 0:
        raise LatoptError(f"--gpu must be a CUDA device index >= 0, got {args.gpu}")
    x = _load_input(args.input) if args.input else None
    with load(args.model, input_shape=None if x is None else x.shape, device_index=args.gpu,
              threads=args.threads, seed=args.seed) as runner:
        if x is None:
            spec_shape = runner.input.shape if isinstance(runner, TrtEngineRunner) else runner.input_shape
            x = np.random.default_rng(args.seed).standard_normal(spec_shape).astype(np.float32)
        try:
            y = runner.run(x)
        except Exception as e:     # the runtime's own refusal of this input (shape, rank): one line
            raise LatoptError(f"{Path(args.model).name} refused the input of shape {list(x.shape)} "
                              f"({type(e).__name__}: {first_line(e, 160)})") from None
        flat = y.reshape(y.shape[0], -1) if y.ndim > 1 else y.reshape(1, -1)
        top = np.argsort(-flat[0])[:5].tolist()
        print(f"{Path(args.model).name}: input {list(x.shape)} -> output {list(y.shape)} {y.dtype}; "
              f"sample 0 top-5 {top}; |y|max {float(np.abs(y).max()):.6g}")
        if args.output:
            _save_npy(args.output, y)
            print(f"wrote {args.output}")
        if args.bench:
            stats = bench(runner, args.bench)
            print("  ".join(f"{k} {v:.4f}" for k, v in stats.items()))
    return 0


def _load_input(path: str) -> np.ndarray:
    """The ``--input`` tensor: one numeric array of at least one sample, as float32; else one line."""
    try:
        x = np.load(_check_path(path, "input"), allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise LatoptError(f"input {path} is not a valid .npy file ({first_line(e, 120)})") from None
    if not isinstance(x, np.ndarray):
        x.close()
        raise LatoptError(f"input {path} is an .npz archive of several arrays; give one array as .npy (numpy.save)")
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)) or x.dtype == np.bool_:
        raise LatoptError(f"input {path} holds {x.dtype} values; give numbers (float32 images, batch first)")
    if x.ndim < 2 or x.shape[0] < 1 or x.size == 0:
        raise LatoptError(f"input {path} has shape {list(x.shape)}; give a batch of at least one sample "
                          "(batch, channels, height, width)")
    if not np.isfinite(x).all():
        raise LatoptError(f"input {path} holds NaN or infinite values")
    return np.ascontiguousarray(x, dtype=np.float32)


def _check_path(path: str, what: str) -> str:
    _read_file(Path(path), what, read=False)
    return path


def _save_npy(path: str, arr: np.ndarray) -> None:
    """``arr`` as .npy at ``path``, which may be a FIFO or a pipe: numpy writes a file through its position
    (which a pipe has not), so the bytes are made in memory and written in one stream."""
    buf = io.BytesIO()
    np.save(buf, arr)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(buf.getvalue())


if __name__ == "__main__":
    sys.exit(main())
