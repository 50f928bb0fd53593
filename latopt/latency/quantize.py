"""ONNX Runtime static INT8: the one place latopt turns an fp32 ONNX model into an INT8 one.

Public API::

    INT8_SETTINGS                                   how every INT8 model is made (recorded where one is timed or shipped)
    quantize_int8(fp32_onnx, out, calib) -> Path    static INT8 of ``fp32_onnx`` written atomically to ``out``
    is_quantized(onnx_path) -> bool                 the file holds quantised operators already
    calibration_images(task, n) -> np.ndarray       the first ``n`` training images of a task (export's calibration)
    CALIB_IMAGES = 256                              how many export calibrates on

The model is ONNX Runtime's static quantisation in QDQ format (``QuantizeLinear`` / ``DequantizeLinear``
pairs around each quantised operator, which ONNX Runtime's CPU provider fuses into integer kernels):
per-channel weights, U8 activations and S8 weights, MinMax calibration, after
``quant_pre_process(..., skip_symbolic_shape=True)`` (ONNX shape inference and graph clean-up; ONNX Runtime's
symbolic shape inference is skipped: the only dynamic dimension of latopt's models is the batch). Two callers: the onnxruntime backend at
``precision: int8`` quantises every network it times (random calibration inputs: timing does not depend on
the scales), and ``latopt export --precision int8`` quantises the shipped model on training images.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from latopt.errors import LatoptError, first_line
from latopt.files.artifacts import atomic_path

# names of onnxruntime.quantization's enums (QuantFormat, QuantType, CalibrationMethod) as passed to it
INT8_SETTINGS: dict[str, Any] = {
    "method": "onnxruntime.quantization.quantize_static", "format": "QDQ", "per_channel": True,
    "activation_type": "QUInt8", "weight_type": "QInt8", "calibrate_method": "MinMax",
    "pre_process": "quant_pre_process(skip_symbolic_shape=True)",
}
CALIB_IMAGES = 256   # latopt export --precision int8: calibrated on the first 256 training images of the task
QUANTIZED_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "ConvInteger",
                           "MatMulInteger", "QLinearConv", "QLinearMatMul"})


def _load(path: Path) -> Any:
    import onnx
    from google.protobuf.message import DecodeError

    try:
        return onnx.load(str(path), load_external_data=False)
    except (OSError, ValueError, DecodeError) as e:
        raise LatoptError(f"cannot read ONNX model {path}: {first_line(e)}") from None


def is_quantized(onnx_path: str | os.PathLike[str]) -> bool:
    """True when the model holds quantised operators (QDQ pairs, or ONNX Runtime's QOperator / integer ops)."""
    return any(n.op_type in QUANTIZED_OPS for n in _load(Path(onnx_path)).graph.node)


def _input_batch(model: Any) -> tuple[str, int]:
    """(name, batch) of the model's one data input; batch 1 when its first dimension is dynamic."""
    init = {i.name for i in model.graph.initializer}
    inp = next((i for i in model.graph.input if i.name not in init), None)
    if inp is None:
        raise LatoptError("the ONNX model has no data input to calibrate")
    dims = inp.type.tensor_type.shape.dim
    return inp.name, int(dims[0].dim_value) if dims and dims[0].HasField("dim_value") and dims[0].dim_value > 0 else 1


@contextlib.contextmanager
def _root_logging_kept() -> Iterator[None]:
    """Undo what ONNX Runtime's quantisation does to the root logger: it logs through ``logging.info`` /
    ``logging.warning``, which call ``logging.basicConfig`` when the root has no handler. The root would then
    print every later latopt line a second time (latopt's lines also propagate to the root: :mod:`latopt.log`)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for h in root.handlers[:]:
            if h not in handlers:
                root.removeHandler(h)
        root.setLevel(level)


def quantize_int8(fp32_onnx: Path, out: Path, calib: np.ndarray) -> Path:
    """ONNX Runtime static INT8 of ``fp32_onnx`` (:data:`INT8_SETTINGS`), calibrated on ``calib`` (N samples,
    fed in batches of the model's static batch size, one at a time when its batch is dynamic), written to
    ``out`` atomically (a temporary file beside it, then ``os.replace``: :func:`latopt.files.artifacts.atomic_path`);
    an existing ``out`` is replaced. The pre-processed intermediate model lives in a temporary directory that
    is removed. A model ONNX Runtime cannot quantise is a one-line LatoptError."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from latopt.runtime import ort_errors

    fp32_onnx, out = Path(fp32_onnx), Path(out)
    name, batch = _input_batch(_load(fp32_onnx))
    calib = np.ascontiguousarray(calib, dtype=np.float32)
    if len(calib) < batch or len(calib) % batch:
        raise LatoptError(f"INT8 calibration of {fp32_onnx}: {len(calib)} samples do not fill batches of {batch} "
                          "(the model's static batch size)")

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter([{name: calib[i:i + batch]} for i in range(0, len(calib), batch)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    s = INT8_SETTINGS
    with (tempfile.TemporaryDirectory(prefix="latopt-int8-") as work, atomic_path(out, suffix=".onnx") as tmp,
          _root_logging_kept()):
        pre = Path(work) / "pre.onnx"   # the pre-processed model: removed with its directory
        try:
            quant_pre_process(str(fp32_onnx), str(pre), skip_symbolic_shape=True)
            quantize_static(str(pre), str(tmp), Reader(), quant_format=QuantFormat[s["format"]],
                            per_channel=s["per_channel"], activation_type=QuantType[s["activation_type"]],
                            weight_type=QuantType[s["weight_type"]],
                            calibrate_method=CalibrationMethod[s["calibrate_method"]])
        except ort_errors() as e:
            raise LatoptError(f"ONNX Runtime cannot quantise {fp32_onnx} to INT8: {first_line(e)}") from None
    return out


def calibration_images(task: Any, n: int) -> np.ndarray:
    """The first ``n`` training images of ``task`` (all when it has fewer) as one float32 array: a fixed set,
    without augmentation when the task was loaded without it (``latopt.data.get_task``'s default)."""
    n = min(int(n), len(task.train))
    if n < 1:
        raise LatoptError(f"the training split of {task.name} is empty: nothing to calibrate INT8 on")
    return np.stack([np.asarray(task.train[i][0], dtype=np.float32) for i in range(n)])
