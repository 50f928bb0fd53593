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
The CUDA provider runs float32 convolutions and GEMMs as TF32 on Ampere and newer unless its ``use_tf32``
option (ONNX Runtime >= 1.18, default 1) is 0: latopt passes ``use_tf32: 0`` (:data:`CUDA_FP32_OPTIONS`), so
"fp32" means fp32 as with TensorRT and ``gpu-torch``; the environment records every provider's options
(``provider_options``). ONNX Runtime's TensorRT provider has no such option: its engines keep TensorRT's
default, TF32 on; only the CUDA provider behind it gets ``use_tf32: 0``.

The runner is the deploy runner (:class:`latopt.runtime.OrtRunner`): it pre-binds the input and
pre-allocated outputs (IOBinding), so a timed call is one ``run_with_iobinding`` without Python-side
copies. Modules are exported once per (module, shape) into the backend's temporary directory
(:class:`latopt.latency.onnx_io.ExportCache`).

Threads: with more than one intra-op thread the worker threads do not spin-wait between runs
(``session.intra_op.allow_spinning = 0``). ONNX Runtime's default keeps them spinning after each run; in an
interleaved run every one of dozens of sessions keeps its own spinning pool, and they take the cores the
timed session needs: a batch-8, two-thread LUT of MobileNetV2 timed single blocks slower than the whole
network. A deployed single session may run faster with spinning; latopt times without it, the same for
every network it compares.

Precision: ``fp32``, or ``int8`` on the CPU provider. At ``int8`` every network the backend prepares (an
``nn.Module`` it exports, or an fp32 ONNX file) is timed as an ONNX Runtime static INT8 model made by
:func:`latopt.latency.quantize.quantize_int8` (QDQ, per-channel weights, U8 activations / S8 weights, MinMax)
into the same temporary directory; an ONNX file that is quantised already (a shipped ``model.int8.onnx``) is
timed as it is. The calibration inputs are :data:`CALIB_BATCHES` batches of random-normal tensors of the
network's input shape from a fixed seed: the calibration only sets the quantisation scales and zero points,
and which operators run, and so the time, does not depend on their values (export calibrates the model it
ships on real training images instead).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import onnxruntime as ort
from pydantic import Field

from latopt.errors import LatoptError
from latopt.latency.backends import register_backend
from latopt.latency.devices import DeviceProfile
from latopt.latency.onnx_io import ExportCache
from latopt.latency.quantize import INT8_SETTINGS, is_quantized, quantize_int8
from latopt.latency.timing import environment_info
from latopt.runtime import GPU_PROVIDERS, OrtRunner, ort_install_hint

LOG_ERRORS_ONLY = 3  # ONNX Runtime's log_severity_level for errors (0 verbose .. 4 fatal)
CALIB_BATCHES = 2    # int8: random-normal calibration batches per network (their values do not change the time)
CALIB_SEED = 0
CUDA_FP32_OPTIONS = {"use_tf32": 0}   # the CUDA provider's float32 without TF32 (module docstring)


class OrtProfile(DeviceProfile):
    """A device timed with ONNX Runtime: ``provider`` (default CPUExecutionProvider) on ``cuda_device``."""

    backend: Literal["onnxruntime"] = "onnxruntime"
    provider: str | None = None  # ONNX Runtime execution provider (default CPUExecutionProvider)
    cuda_device: Annotated[int, Field(ge=0)] | None = None  # CUDA device index of a GPU provider

    @property
    def is_gpu(self) -> bool:
        return self.cuda_device is not None or (self.provider is not None and self.provider != "CPUExecutionProvider")


class OrtBackend:
    name = "onnxruntime"

    def __init__(self, profile: Any, providers: list[Any]) -> None:
        self.profile = profile
        self.providers = providers
        self.precision = str(getattr(profile, "precision", "fp32"))
        self.spin = int(profile.threads) <= 1   # module docstring: no spin-waiting threads in an interleaved run
        self.cache = ExportCache()
        self._int8: dict[tuple[Path, tuple[int, ...]], Path] = {}

    def prepare(self, model: Any, input_shape: tuple[int, ...]) -> OrtRunner:
        """A runner for ``model`` (nn.Module, exported here, or an ONNX path) at ``input_shape``; at ``int8``
        the network's static INT8 model (module docstring)."""
        path = Path(model) if isinstance(model, (str, os.PathLike)) else self.cache.get(model, input_shape)
        if self.precision == "int8":
            path = self._quantized(path, tuple(int(d) for d in input_shape))
        return OrtRunner(path, input_shape=input_shape, providers=self.providers, threads=int(self.profile.threads),
                         log_severity=LOG_ERRORS_ONLY, spin=self.spin)

    def _quantized(self, path: Path, shape: tuple[int, ...]) -> Path:
        """The INT8 model timed for ``path``: itself when it is quantised already, else its static INT8 model
        (made once per file and shape, calibrated on seeded random-normal inputs of ``shape``)."""
        if not path.is_file() or is_quantized(path):  # a missing file: the runner says so
            return path
        key = (path.resolve(), shape)
        if key not in self._int8:
            calib = np.random.default_rng(CALIB_SEED).standard_normal((CALIB_BATCHES * shape[0], *shape[1:]))
            self._int8[key] = quantize_int8(path, self.cache.dir / f"q{len(self._int8):04d}-{path.stem}.int8.onnx",
                                            calib.astype(np.float32))
        return self._int8[key]

    def environment(self) -> dict[str, Any]:
        first = self.providers[0]   # a GPU provider comes with its options, device_id among them
        env = environment_info(None if isinstance(first, str) else int(first[1]["device_id"]))
        env.update({"backend": self.name, "onnxruntime": ort.__version__, "providers": [
            p if isinstance(p, str) else p[0] for p in self.providers],
            "provider_options": {p[0]: dict(p[1]) for p in self.providers if not isinstance(p, str)},
            "intra_op_threads": int(self.profile.threads),
            "graph_optimization": "ORT_ENABLE_ALL", "execution_mode": "sequential", "precision": self.precision,
            "intra_op_spinning": self.spin})
        if self.precision == "int8":
            env["int8"] = {**INT8_SETTINGS, "calibration": f"{CALIB_BATCHES} batches of random-normal inputs of each "
                           f"network's input shape (seed {CALIB_SEED}); a file quantised already is timed as it is"}
        return env

    def close(self) -> None:
        self.cache.close()


@register_backend(OrtProfile, words=("ort",))
def create(profile: OrtProfile) -> OrtBackend:
    precision = getattr(profile, "precision", "fp32")
    provider = profile.provider or "CPUExecutionProvider"
    if precision not in ("fp32", "int8") or (precision == "int8" and provider != "CPUExecutionProvider"):
        raise LatoptError(f"device {profile.name!r}: the onnxruntime backend times fp32 (any provider) and int8 "
                          f"(CPUExecutionProvider), not {precision} on {provider}; use a tensorrt device for fp16")
    available = ort.get_available_providers()
    if provider not in available:
        hint = (f"on a machine with an NVIDIA GPU: {ort_install_hint()}; or use the device cpu"
                if provider in GPU_PROVIDERS else "check the provider name in the device profile")
        raise LatoptError(f"device {profile.name!r} asks for ONNX Runtime provider {provider!r}, which is not "
                          f"available here (available: {', '.join(available)}); {hint}", param="device")
    device_id = int(profile.cuda_device or 0)
    if provider in GPU_PROVIDERS:
        cuda = ("CUDAExecutionProvider", {"device_id": device_id, **CUDA_FP32_OPTIONS})
        providers: list[Any] = [cuda] if provider == cuda[0] else [(provider, {"device_id": device_id}), cuda]
        providers.append("CPUExecutionProvider")
        return OrtBackend(profile, providers)
    return OrtBackend(profile, [provider])
