"""The backend of export and its TensorRT engine: built through the profiler's backend, run by the shipped runner.

Public API::

    at_precision(device, precision) -> DeviceProfile          the profile with ``precision`` (``--precision``)
    open_backend(device, precision, *, engine, measure) -> backend | None
                              the one backend of an export (LatoptError when the device is not a TensorRT one
                              and an engine is asked for, or when this machine cannot drive it)
    write_engine(backend, plan, out_dir, say, name="model.engine") -> Path
                                                              ``out_dir/name`` (batch ``ENGINE_BATCH``, static shape)
    open_engine(backend, engine_path, resolution) -> TrtEngineRunner   what a user runs, on the file as written
    engine_timing(device, lut, notes) -> (device, lut)       the profile and LUT export times the shipped engine with
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from latopt.errors import LatoptError
from latopt.export.shipped import Plan
from latopt.latency.backends import get_backend
from latopt.latency.backends.tensorrt.build import build_engine
from latopt.latency.onnx_io import export_onnx
from latopt.runtime import TrtEngineRunner
from latopt.training.torch_settings import torch_threads

ENGINE_BATCH = 1   # the shipped engine's static batch: what the accuracy gate runs and what export times


def at_precision(device: Any, precision: str) -> Any:
    """``device`` measuring at ``precision`` (the profile itself when that is its own precision)."""
    return device if precision == device.precision else device.model_copy(update={"precision": precision})


def open_backend(device: Any, precision: str, *, engine: bool, measure: bool) -> Any | None:
    """The one backend of an export at ``precision``: it builds the engine (``engine``) and times the networks
    (``measure``); None when neither is asked for. The caller closes it (``close_backend``) on every path."""
    if engine and device.backend != "tensorrt":
        raise LatoptError(f"an engine needs a TensorRT device profile, but device {device.name!r} uses "
                          f"{device.backend}; use device titanx or gpu-trt-fp16", param="device")
    if not (engine or measure):
        return None
    with torch_threads(torch.get_num_threads()):  # the torch backend sets its thread count: not for the gates
        return get_backend(at_precision(device, precision))


def write_engine(backend: Any, p: Plan, out_dir: Path, say: Callable[[str], None], name: str = "model.engine") -> Path:
    """``out_dir/name`` (``model.engine``; a timing-only export's ``model.timing-only.engine``) built by ``backend`` (already open: no second backend or CUDA context) from a
    static-shape (batch :data:`ENGINE_BATCH`) ONNX export of the network."""
    static = out_dir / ".static.onnx"
    shape = (ENGINE_BATCH, 3, p.resolution, p.resolution)
    export_onnx(p.folded, shape, static)
    say(f"building TensorRT engine ({backend.precision})")
    try:
        return build_engine(backend, static, out_dir / name, input_shape=shape)
    finally:
        static.unlink()


def open_engine(backend: Any, engine_path: Path, resolution: int) -> TrtEngineRunner:
    """The shipped runner (``latopt.runtime``) on the engine file as written, on the backend's CUDA context."""
    return TrtEngineRunner(engine_path, input_shape=(ENGINE_BATCH, 3, resolution, resolution), cuda=backend.cuda)


def engine_timing(device: Any, lut: Any | None, notes: list[str]) -> tuple[Any, Any | None]:
    """(profile, LUT) with which export times the shipped ``model.engine`` file itself against the as-is network:
    the engine runs only at its static batch :data:`ENGINE_BATCH`, so a profile of another batch is timed at that
    batch (both networks), and its LUT, timed at the profile's batch, is not compared; ``notes`` says so.
    (Timing a second engine built from the network would time other kernels: TensorRT picks them by timing.)"""
    if device.batch == ENGINE_BATCH:
        return device, lut
    notes.append(f"latency measured at batch {ENGINE_BATCH}, the shipped engine's static input shape, not at the "
                 f"profile's batch {device.batch}" + ("; the LUT (timed at that batch) is not compared with it"
                                                       if lut is not None else ""))
    return device.model_copy(update={"batch": ENGINE_BATCH}), None
