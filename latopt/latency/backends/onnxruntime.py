"""ONNX Runtime backend: one :class:`latopt.runtime.OrtRunner` per model, timed through IOBinding.

Session options follow the profile: ``intra_op_num_threads = profile.threads`` (1 on the ``cpu``
profile: on the 2-vCPU machines 2 threads were slower and far noisier), ``inter_op_num_threads = 1``,
sequential execution, ``ORT_ENABLE_ALL`` graph optimisation (on x86 this includes the NCHWc layout
transform; ``ENABLE_EXTENDED`` ran MobileNetV2 at less than half the speed here), errors-only logging
(warnings too with a GPU provider). Execution provider: ``profile.provider`` (default
``CPUExecutionProvider``); ``CUDAExecutionProvider`` and ``TensorrtExecutionProvider`` need
``onnxruntime-gpu`` (not installable beside ``onnxruntime``: README, GPU section) and use
``profile.cuda_device``. ONNX Runtime lists the CUDA provider even where CUDA or cuDNN cannot load and
then runs on the CPU: the runner refuses a session whose first provider is not the one asked for
(:class:`latopt.runtime.OrtRunner`), after ``onnxruntime.preload_dlls()`` where it exists.

The runner is the deploy runner (:class:`latopt.runtime.OrtRunner`): it pre-binds the input and
pre-allocated outputs (IOBinding), so a timed call is one ``run_with_iobinding`` without Python-side
copies. Modules are exported once per (module, shape) into the backend's temporary directory
(:class:`latopt.latency.onnx_io.ExportCache`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import onnxruntime as ort

from latopt.errors import LatoptError
from latopt.latency.onnx_io import ExportCache
from latopt.latency.timing import environment_info
from latopt.runtime import GPU_PROVIDERS, OrtRunner, ort_install_hint

LOG_ERRORS_ONLY = 3  # ONNX Runtime's log_severity_level for errors (0 verbose .. 4 fatal)


class OrtBackend:
    name = "onnxruntime"

    def __init__(self, profile: Any, providers: list[Any]) -> None:
        self.profile = profile
        self.providers = providers
        self.cache = ExportCache()

    def prepare(self, model: Any, input_shape: tuple[int, ...]) -> OrtRunner:
        """A runner for ``model`` (nn.Module, exported here, or an ONNX path) at ``input_shape``."""
        path = Path(model) if isinstance(model, (str, os.PathLike)) else self.cache.get(model, input_shape)
        return OrtRunner(path, input_shape=input_shape, providers=self.providers, threads=int(self.profile.threads),
                         log_severity=LOG_ERRORS_ONLY)

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
        hint = (f"on a machine with an NVIDIA GPU: {ort_install_hint()}; or use --device cpu"
                if provider in GPU_PROVIDERS else "check the provider name in the device profile")
        raise LatoptError(f"device {profile.name!r} asks for ONNX Runtime provider {provider!r}, which is not "
                          f"available here (available: {', '.join(available)}); {hint}")
    device_id = int(profile.cuda_device or 0)
    if provider in GPU_PROVIDERS:
        providers: list[Any] = [(provider, {"device_id": device_id})]
        if provider == "TensorrtExecutionProvider":
            providers.append(("CUDAExecutionProvider", {"device_id": device_id}))
        providers.append("CPUExecutionProvider")
        return OrtBackend(profile, providers)
    return OrtBackend(profile, [provider])
