"""The ONNX Runtime side: :class:`OrtRunner` (one session, IOBinding), what ONNX Runtime raises
(:func:`ort_errors`) and how to get its GPU providers working (:func:`ort_install_hint`).

``onnxruntime`` is imported when a runner is opened (or :func:`ort_errors` is called), never at import.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from latopt.errors import LatoptError, first_line
from latopt.runtime.runner import Runner, existing_file

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


class OrtRunner(Runner):
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
        path = existing_file(model, "ONNX model")
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

    def close(self) -> None:
        self._binding = None
        self._outs = []
        self.session = None
