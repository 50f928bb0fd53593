"""The TensorRT latency backend: what :func:`latopt.latency.backends.get_backend` opens for a ``tensorrt`` profile.

``create(profile)`` checks, in this order, that the precision is one TensorRT builds in latopt
(:func:`~latopt.latency.backends.tensorrt.precision.check_precision`, before any import), that ``tensorrt``
imports, that its version is supported, that a CUDA GPU is visible (buffers through pycuda when installed, else
torch CUDA tensors), that the GPU's compute capability is one this TensorRT version runs on
(:data:`~latopt.latency.backends.tensorrt.precision.SM_SUPPORT`) and that the live GPU matches
``profile.expected_gpu``; each failure is one :class:`LatoptError` line, the compute-capability one naming
the TensorRT version to install.

:class:`TensorRTBackend` builds engines (:func:`~latopt.latency.backends.tensorrt.build.build_serialized`, with
the profile's precision, workspace and timing cache) and hands out :class:`latopt.runtime.TrtEngineRunner`,
which deserializes them, binds I/O tensors by name (``set_tensor_address``) and runs ``execute_async_v3``; its
environment (recorded in every LUT) names the TensorRT, GPU, driver, precision mode and, for TensorRT >= 11
fp16, the FP16 conversion.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from latopt import runtime as _rt
from latopt.errors import LatoptError
from latopt.latency.backends import register_backend, require_gpu
from latopt.latency.backends.tensorrt.build import DEFAULT_WORKSPACE_MIB, build_serialized, timing_cache_path
from latopt.latency.backends.tensorrt.fp16 import fp16_conversion
from latopt.latency.backends.tensorrt.precision import (
    check_compute_capability,
    check_precision,
    precision_plan,
)
from latopt.latency.devices import DeviceProfile
from latopt.latency.onnx_io import export_onnx

MAX_WORKSPACE_MIB = 1 << 20  # TensorRT builder workspace (1 TiB; shipped: 1024 MiB)


class TensorRTProfile(DeviceProfile):
    """A device timed with TensorRT engines on the GPU ``cuda_device`` (checked against ``expected_gpu``)."""

    backend: Literal["tensorrt"] = "tensorrt"
    cuda_device: Annotated[int, Field(ge=0)] | None = None  # CUDA device index (none: 0)
    expected_gpu: str | None = None  # GPU name the live device must match (substring or glob)
    workspace_mib: Annotated[int, Field(ge=1, le=MAX_WORKSPACE_MIB)] | None = None  # builder workspace limit

    @property
    def is_gpu(self) -> bool:
        return True


def _device_index(value: Any) -> int:
    if value is None or value == "":
        return 0
    if isinstance(value, int):
        return value
    m = re.fullmatch(r"(?:cuda:)?(\d+)", str(value).strip())
    if not m:
        raise LatoptError(f"cuda_device must be an index like 0 or 'cuda:0', got {value!r}")
    return int(m.group(1))


class TensorRTBackend:
    """Builds engines for one device profile and hands out :class:`latopt.runtime.TrtEngineRunner`."""

    name = "tensorrt"

    def __init__(self, profile: Any, trt: Any, cuda: _rt.CudaApi) -> None:
        self.profile = profile
        self.trt = trt
        self.cuda = cuda
        self.precision = str(getattr(profile, "precision", "fp32"))
        self.workspace_mib = int(getattr(profile, "workspace_mib", None) or DEFAULT_WORKSPACE_MIB)
        self.cache_path = timing_cache_path(str(getattr(profile, "name", "default")), str(trt.__version__))
        self.last_build: dict[str, Any] = {}

    def build(self, onnx_path: str | Path, input_shape: Sequence[int] | None = None) -> bytes:
        plan, self.last_build = build_serialized(
            self.trt, onnx_path, precision=self.precision, input_shape=input_shape,
            workspace_mib=self.workspace_mib, cache_path=self.cache_path,
        )
        return plan

    def prepare(self, model: Any, input_shape: tuple[int, ...]) -> _rt.TrtEngineRunner:
        """The runner of ``model`` at ``input_shape``: an nn.Module or ONNX path is built into an engine here;
        a serialized engine (``.engine``/``.plan``/``.trt``) is loaded as it is, never parsed as ONNX."""
        if isinstance(model, (str, os.PathLike)) and Path(model).suffix.lower() in _rt.ENGINE_SUFFIXES:
            return _rt.TrtEngineRunner(Path(model), input_shape=input_shape, cuda=self.cuda)
        with tempfile.TemporaryDirectory(prefix="latopt-trt-") as tmp:
            if isinstance(model, (str, os.PathLike)):
                onnx_path = Path(model)
            else:
                onnx_path = export_onnx(model, tuple(input_shape), Path(tmp) / "model.onnx")
            plan = self.build(onnx_path, input_shape)
        return _rt.TrtEngineRunner(plan, input_shape=input_shape, cuda=self.cuda)

    def environment(self) -> dict[str, Any]:
        plan = precision_plan(self.trt.__version__, self.precision)
        env = {
            "backend": self.name,
            "tensorrt": self.trt.__version__,
            "gpu": self.cuda.device_name(),
            "compute_capability": "{}.{}".format(*self.cuda.compute_capability()),
            "driver": self.cuda.driver_version(),
            "cuda_buffers": self.cuda.name,
            "precision": self.precision,
            "precision_mode": plan.describe(),
            "workspace_mib": self.workspace_mib,
            "timing_cache": None if self.cache_path is None else str(self.cache_path),
        }
        if plan.fp16_onnx:
            env["fp16_conversion"] = fp16_conversion()
        return env

    def close(self) -> None:
        self.cuda.close()


@register_backend(TensorRTProfile, words=("trt",))
def create(profile: TensorRTProfile) -> TensorRTBackend:
    """The TensorRT backend for ``profile``; LatoptError (one line) when it cannot run here."""
    check_precision(str(getattr(profile, "precision", "fp32")))  # before the import: int8 is refused everywhere
    trt = _rt.import_tensorrt()
    precision_plan(trt.__version__, str(getattr(profile, "precision", "fp32")))  # the version, before any GPU work
    try:
        cuda = _rt.cuda_api(_device_index(getattr(profile, "cuda_device", None)))
    except LatoptError as e:
        raise LatoptError(f"TensorRT {trt.__version__} is installed but {e}") from None
    try:
        check_compute_capability(trt.__version__, cuda.compute_capability(), cuda.device_name(),
                                 str(getattr(profile, "precision", "fp32")))
        require_gpu(profile, cuda.device_name(), alternative="gpu-trt-fp16")
    except LatoptError:
        cuda.close()
        raise
    return TensorRTBackend(profile, trt, cuda)
