"""The TensorRT engine of export: built through the profiler's TensorRT backend, run by the shipped runner.

Public API::

    tensorrt_backend(device, precision) -> TensorRTBackend   LatoptError when the device is not a TensorRT one
    write_engine(backend, plan, out_dir, say) -> Path        ``out_dir/model.engine`` (batch 1, static shape)
    open_engine(backend, engine_path, resolution) -> TrtEngineRunner   what a user runs, on the file as written
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from latopt.errors import LatoptError
from latopt.export.plan import Plan
from latopt.latency.backends import get_backend
from latopt.latency.backends.tensorrt import build_engine
from latopt.latency.onnx_io import export_onnx
from latopt.runtime import TrtEngineRunner


def tensorrt_backend(device: Any, precision: str) -> Any:
    """The TensorRT backend of ``device`` at ``precision`` (export calls it first: nothing is written yet)."""
    if device.backend != "tensorrt":
        raise LatoptError(f"--format engine needs a TensorRT device profile, but {device.name!r} uses "
                          f"{device.backend}; use --device titanx or --device gpu-trt-fp16")
    prof = device.model_copy(update={"precision": precision}) if precision != device.precision else device
    return get_backend(prof)


def write_engine(backend: Any, p: Plan, out_dir: Path, say: Callable[[str], None]) -> Path:
    """``out_dir/model.engine`` built from a static-shape (batch 1) ONNX export of the network."""
    static = out_dir / ".static.onnx"
    export_onnx(p.folded, (1, 3, p.resolution, p.resolution), static)
    say(f"building TensorRT engine ({backend.precision})")
    engine_path = build_engine(static, backend.profile, out_dir / "model.engine")
    static.unlink()
    return engine_path


def open_engine(backend: Any, engine_path: Path, resolution: int) -> TrtEngineRunner:
    """The shipped runner (``latopt.runtime``) on the engine file as written, on the backend's CUDA context."""
    return TrtEngineRunner(engine_path, input_shape=(1, 3, resolution, resolution), cuda=backend.cuda)
