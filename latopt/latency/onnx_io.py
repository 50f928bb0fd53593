"""ONNX export for timing: one explicit exporter, static shapes, checked models, a per-run cache.

Public API::

    OPSET = 17
    export_onnx(module, input_shape, path, dynamic_batch=False, *, opset=OPSET) -> Path
    ExportCache(dir=None)      .get(module, input_shape) -> Path   (one export per (module, shape))

Exporter choice: the TorchScript-based exporter (``torch.onnx.export(..., dynamo=False)``). It still
ships with torch 2.14 (deprecated, default changed to dynamo in 2.9) and exports a whole MobileNetV2 in
~0.25 s against ~3 s for the dynamo exporter on the 2-vCPU development machine; the profiler exports
~40-70 modules per model, so the difference decides whether profiling fits in two minutes. Both give the
same ONNX Runtime latency for MobileNetV2 (4.13 vs 4.13 ms here). When a future torch drops the
TorchScript exporter, ``export_onnx`` falls back to the dynamo exporter (needs ``onnxscript``).
Shapes are static (a fixed batch) unless ``dynamic_batch=True``; every file passes ``onnx.checker``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import shutil
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx
import torch

from latopt.errors import LatoptError, first_line
from latopt.files.artifacts import atomic_path

OPSET = 17
INPUT_NAME = "input"
OUTPUT_NAME = "output"


def _export_torchscript(module: Any, x: Any, path: Path, opset: int, dynamic_batch: bool) -> None:
    dyn = {INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}} if dynamic_batch else None
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), str(path), dynamo=False, opset_version=opset, input_names=[INPUT_NAME],
                          output_names=[OUTPUT_NAME], dynamic_axes=dyn, do_constant_folding=True)


def _export_dynamo(module: Any, x: Any, path: Path, opset: int, dynamic_batch: bool) -> None:
    dyn = ({0: torch.export.Dim("batch")},) if dynamic_batch else None
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        prog = torch.onnx.export(module, (x,), dynamo=True, opset_version=max(opset, 18), input_names=[INPUT_NAME],
                                 output_names=[OUTPUT_NAME], dynamic_shapes=dyn, external_data=False)
        assert prog is not None  # what dynamo=True returns
        prog.save(str(path))


def torchscript_exporter_available() -> bool:
    """True when torch still ships the TorchScript-based ONNX exporter (``dynamo=False``)."""

    try:
        return importlib.util.find_spec("torch.onnx._internal.torchscript_exporter") is not None
    except ModuleNotFoundError:  # pragma: no cover
        return False


def export_onnx(module: Any, input_shape: Sequence[int], path: str | os.PathLike[str],
                dynamic_batch: bool = False, *, opset: int = OPSET) -> Path:
    """Export ``module`` (eval mode, float32 input of ``input_shape``) to ``path``; checked by onnx.checker.

    The train/eval flag of every submodule is restored afterwards. Written atomically (temp file + rename).
    """

    if opset < 17:
        raise LatoptError(f"ONNX opset {opset} is too old; latopt exports opset >= 17")
    shape = tuple(int(s) for s in input_shape)
    if not shape or any(s <= 0 for s in shape):
        raise LatoptError(f"input shape {shape} must have positive sizes")
    path = Path(path)
    modes = [(m, m.training) for m in module.modules()]  # restored one by one: a fresh nn.Sequential
    module.eval()  # around shared eval-mode children reports training=True and must not flip them
    try:
        with atomic_path(path, suffix=".onnx") as tmp:
            p = next(module.parameters(), None)
            x = torch.zeros(shape, dtype=torch.float32, device=p.device if p is not None else "cpu")
            with torch.no_grad():
                exporter = _export_torchscript if torchscript_exporter_available() else _export_dynamo
                try:
                    exporter(module, x, tmp, opset, dynamic_batch)
                except RuntimeError as e:  # torch's exporter errors (OnnxExporterError) and shape errors
                    raise LatoptError(f"ONNX export of {type(module).__name__} failed (input shape {list(shape)}): "
                                      f"{first_line(e)}") from None
            try:
                onnx.checker.check_model(str(tmp))
            except onnx.checker.ValidationError as e:
                raise LatoptError(f"exported ONNX model of {type(module).__name__} fails onnx.checker: "
                                  f"{first_line(e)}") from None
    finally:
        for m, mode in modes:
            m.training = mode
    return path


class ExportCache:
    """Exports each (module, input shape) once into a temporary directory for one profiling run.

    Keyed on the module object (a reference is kept so its id stays unique) and the shape. Use as a
    context manager, or call :meth:`close`, to delete the directory.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self._own = directory is None
        self.dir = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="latopt-onnx-"))
        self._paths: dict[tuple[int, tuple[int, ...]], tuple[Any, Path]] = {}

    def get(self, module: Any, input_shape: Sequence[int]) -> Path:
        shape = tuple(int(s) for s in input_shape)
        key = (id(module), shape)
        hit = self._paths.get(key)
        if hit is not None and hit[0] is module:
            return hit[1]
        path = self.dir / f"m{len(self._paths):04d}-{'x'.join(map(str, shape))}.onnx"
        export_onnx(module, shape, path)
        self._paths[key] = (module, path)
        return path

    def __len__(self) -> int:
        return len(self._paths)

    def close(self) -> None:
        self._paths.clear()
        if self._own:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> ExportCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
