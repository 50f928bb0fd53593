"""The TensorRT side: :class:`TrtEngineRunner` (one deserialized engine), the process's one logger, the import.

``tensorrt`` is imported when an engine is loaded (:func:`import_tensorrt`), its CUDA buffers come from
:mod:`latopt.runtime.cuda` (pycuda, else torch).

TensorRT API used (names present in TensorRT 8.6, 10 and 11, checked by tests/test_trt_api.py; see the
NVIDIA samples ``samples/python/common_runtime.py`` in github.com/NVIDIA/TensorRT and the Python API pages
https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/python-api/infer/Core/ExecutionContext.html):
``trt.Runtime(logger).deserialize_cuda_engine``, ``engine.num_io_tensors / get_tensor_name / get_tensor_mode /
get_tensor_shape / get_tensor_dtype / get_tensor_profile_shape``, ``context.set_input_shape``,
``context.set_tensor_address`` and ``context.execute_async_v3(stream_handle)``; the results of
``set_input_shape`` and ``set_tensor_address`` are checked. One TensorRT logger per process (:func:`trt_logger`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from latopt.errors import LatoptError
from latopt.runtime.cuda import CPU_INSTEAD, CudaApi, cuda_api
from latopt.runtime.runner import Runner, existing_file

ENGINE_SUFFIXES = (".engine", ".plan", ".trt")
TRT_INSTALL_HINT = f"pip install 'latopt[trt]' on a machine with an NVIDIA GPU, or {CPU_INSTEAD}"
ENGINE_HINT = ("pip install tensorrt on a machine with an NVIDIA GPU (CUDA buffers through pycuda when installed, "
               "else torch), or run the .onnx model")


def import_tensorrt(hint: str = TRT_INSTALL_HINT, param: str | None = "device") -> Any:
    """The ``tensorrt`` module; a one-line LatoptError ending in ``hint`` (about ``param``) when it is missing.
    The default hint is the device profile's (``param="device"``): install it, or time on the CPU."""
    try:
        import tensorrt as trt
    except ImportError:
        raise LatoptError(f"TensorRT is not installed: {hint}", param=param) from None
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


class TrtEngineRunner(Runner):
    """Executes one deserialized TensorRT engine: fixed buffers bound by tensor name, one stream.

    ``engine`` is the serialized plan (bytes) or a path to it. ``input_shape`` fixes dynamic input
    dimensions (default: the optimisation profile's "opt" shape). ``cuda`` is shared when given
    (the backend passes its own) and then not closed here.
    """

    def __init__(self, engine: bytes | str | Path, *, input_shape: Sequence[int] | None = None,
                 device_index: int = 0, cuda: CudaApi | None = None, seed: int = 0) -> None:
        if isinstance(engine, (str, Path)):
            engine = existing_file(engine, "TensorRT engine").read_bytes()
        trt = import_tensorrt(ENGINE_HINT, param="engine")
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

    @property
    def input_shape(self) -> tuple[int, ...]:  # type: ignore[override]
        return self.input.shape

    @property
    def input_dtype(self) -> np.dtype:  # type: ignore[override]
        return self.input.dtype

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
