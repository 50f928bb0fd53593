"""ONNX Runtime backend: an InferenceSession per model, run through IOBinding on a fixed input.

Session options follow the profile: ``intra_op_num_threads = profile.threads`` (1 on the ``cpu``
profile: on the 2-vCPU machines 2 threads were slower and far noisier), ``inter_op_num_threads = 1``,
sequential execution, ``ORT_ENABLE_ALL`` graph optimisation (on x86 this includes the NCHWc layout
transform; ``ENABLE_EXTENDED`` ran MobileNetV2 at less than half the speed here).
Execution provider: ``profile.provider`` (default ``CPUExecutionProvider``); ``CUDAExecutionProvider``
and ``TensorrtExecutionProvider`` need ``onnxruntime-gpu`` and use ``profile.cuda_device``.

The runner pre-binds the input and pre-allocated outputs (IOBinding), so a timed call is one
``run_with_iobinding`` without Python-side copies. Modules are exported once per (module, shape) into
the backend's temporary directory (:class:`latopt.latency.onnx_io.ExportCache`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from latopt.errors import LatoptError, first_line
from latopt.latency.onnx_io import ExportCache
from latopt.latency.timing import environment_info

GPU_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider")


class OrtRunner:
    """One ONNX Runtime session with a fixed random input bound through IOBinding."""

    def __init__(self, session: Any, input_shape: tuple[int, ...], device: str, device_id: int, seed: int = 0):
        self.session = session
        inputs = session.get_inputs()
        if len(inputs) != 1:
            raise LatoptError(f"the ONNX model has {len(inputs)} inputs; latency runners take exactly one")
        self.input_name = inputs[0].name
        self.output_names = [o.name for o in session.get_outputs()]
        self.input_shape = tuple(int(s) for s in input_shape)
        x = np.random.default_rng(seed).standard_normal(self.input_shape).astype(np.float32)
        try:
            outs = session.run(self.output_names, {self.input_name: x})
        except Exception as e:  # ORT raises its own exception types
            raise LatoptError(f"ONNX Runtime cannot run the model at input shape {list(self.input_shape)}: "
                              f"{first_line(e)}") from None
        self._binding = session.io_binding()
        self._x = ort.OrtValue.ortvalue_from_numpy(x, device, device_id)
        self._binding.bind_ortvalue_input(self.input_name, self._x)
        self._outs = []
        for name, o in zip(self.output_names, outs, strict=True):
            v = ort.OrtValue.ortvalue_from_numpy(np.empty_like(o), device, device_id)
            self._binding.bind_ortvalue_output(name, v)
            self._outs.append(v)
        self._sync = device != "cpu"

    def __call__(self) -> None:
        if self._sync:
            self._binding.synchronize_inputs()
        self.session.run_with_iobinding(self._binding)
        if self._sync:
            self._binding.synchronize_outputs()

    def run(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
        return self.session.run(self.output_names[:1], {self.input_name: x})[0]

    def close(self) -> None:
        self._binding = None
        self._outs = []
        self.session = None


class OrtBackend:
    name = "onnxruntime"

    def __init__(self, profile: Any, providers: list[Any], device: str, device_id: int) -> None:
        self.profile = profile
        self.providers = providers
        self.device = device
        self.device_id = device_id
        self.cache = ExportCache()

    def session_options(self) -> Any:
        so = ort.SessionOptions()
        so.intra_op_num_threads = int(self.profile.threads)
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 3
        return so

    def prepare(self, model: Any, input_shape: tuple[int, ...]) -> OrtRunner:
        if isinstance(model, (str, os.PathLike)):
            path = Path(model)
            if not path.is_file():
                raise LatoptError(f"ONNX model {path} does not exist")
        else:
            path = self.cache.get(model, input_shape)
        try:
            sess = ort.InferenceSession(str(path), self.session_options(), providers=self.providers)
        except Exception as e:
            raise LatoptError(f"ONNX Runtime cannot load {path}: {first_line(e)}") from None
        return OrtRunner(sess, tuple(input_shape), self.device, self.device_id)

    def environment(self) -> dict[str, Any]:

        env = environment_info()
        env.update({"backend": self.name, "onnxruntime": ort.__version__, "providers": [
            p if isinstance(p, str) else p[0] for p in self.providers], "intra_op_threads": int(self.profile.threads),
            "graph_optimization": "ORT_ENABLE_ALL", "execution_mode": "sequential"})
        return env

    def close(self) -> None:
        self.cache.close()


def create(profile: Any) -> OrtBackend:
    if getattr(profile, "precision", "fp32") != "fp32":
        raise LatoptError(f"device {profile.name!r}: the onnxruntime backend times fp32 models only; "
                          f"set precision: fp32 or use a tensorrt device for fp16")
    provider = profile.provider or "CPUExecutionProvider"
    available = ort.get_available_providers()
    if provider not in available:
        hint = ("install onnxruntime-gpu on a machine with an NVIDIA GPU, or use --device cpu"
                if provider in GPU_PROVIDERS else "check the provider name in the device profile")
        raise LatoptError(f"device {profile.name!r} asks for ONNX Runtime provider {provider!r}, which is not "
                          f"available here (available: {', '.join(available)}); {hint}")
    device_id = int(profile.cuda_device or 0)
    if provider in GPU_PROVIDERS:
        providers: list[Any] = [(provider, {"device_id": device_id})]
        if provider == "TensorrtExecutionProvider":
            providers.append(("CUDAExecutionProvider", {"device_id": device_id}))
        providers.append("CPUExecutionProvider")
        return OrtBackend(profile, providers, "cuda", device_id)
    return OrtBackend(profile, [provider], "cpu", 0)
