"""TensorRT backend: ONNX → engine through TensorRT's Python API, timed on a CUDA stream.

``create(profile)`` checks, in this order, that ``tensorrt`` imports, that its version is >= 10, that a
CUDA GPU is visible (buffers through pycuda when installed, else torch CUDA tensors) and that the live
GPU matches ``profile.expected_gpu``; each failure is one :class:`LatoptError` line.

Build (``TensorRTBackend.build`` / :func:`build_engine`), after the NVIDIA samples
``samples/python/introductory_parser_samples/onnx_resnet50.py``, ``samples/python/common.py``
(``setup_timing_cache`` / ``save_timing_cache``) and ``samples/python/strongly_type_autocast/sample.py``
in github.com/NVIDIA/TensorRT:

- ``trt.Builder`` → ``create_network(flags)``. Flags are 0 on both supported versions: TensorRT 10 networks are
  always explicit-batch (``EXPLICIT_BATCH`` is "[DEPRECATED] Ignored", Python API ``Core/Builder.html``), and
  TensorRT 11 networks are always strongly typed (``STRONGLY_TYPED`` "Deprecated in TensorRT 11.0. Strongly typed
  mode is always enabled ... ignored", 11.0.0 ``_static/python-api/infer/Core/Builder.html``).
- ``trt.OnnxParser.parse_from_file``; on failure every ``parser.get_error(i)`` goes into the error line.
- ``config.set_memory_pool_limit(MemoryPoolType.WORKSPACE, profile.workspace_mib MiB, default 1024)``.
- precision (:func:`precision_plan`): TensorRT 10 fp16 sets ``BuilderFlag.FP16`` on the fp32 ONNX model
  (weak typing). TensorRT 11 removed ``BuilderFlag.FP16`` ("Removed Python APIs and Replacements":
  docs.nvidia.com/deeplearning/tensorrt/latest/api/migration/tensorrt-10x-to-11x-python-api-reference.html,
  replacement "Strong typing with ModelOpt AutoCast"), so fp16 there parses an FP16 copy of the ONNX model with
  fp32 inputs/outputs kept (``keep_io_types=True``): ModelOpt AutoCast
  (``modelopt.onnx.autocast.convert_to_mixed_precision``, NVIDIA's documented route,
  .../tensorrt-10x-to-11x-python-api-patterns.html) when installed, else
  ``onnxconverter_common.float16.convert_float_to_float16``; neither installed → LatoptError saying so.
  fp32 clears ``BuilderFlag.TF32`` (on by default) so "fp32" means fp32 on Ampere and newer.
- timing cache per device profile, ``~/.cache/latopt/trt/<device>.cache`` (``$LATOPT_CACHE_DIR`` overrides
  ``~/.cache/latopt``): ``config.create_timing_cache(blob)`` + ``config.set_timing_cache(cache, False)`` before,
  ``config.get_timing_cache().serialize()`` written back atomically after the build. A cache the builder
  refuses (other GPU or TensorRT version) is replaced by an empty one.
- ``builder.build_serialized_network`` → bytes; the runner (:class:`latopt.runtime.TrtEngineRunner`)
  deserializes them, binds I/O tensors by name (``set_tensor_address``) and runs ``execute_async_v3``.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from latopt import runtime as _rt
from latopt.artifacts import write_bytes_atomic
from latopt.errors import LatoptError
from latopt.latency.backends import require_gpu

DEFAULT_WORKSPACE_MIB = 1024


# ------------------------------------------------------------------------------- version dispatch
@dataclass(frozen=True)
class PrecisionPlan:
    """How one precision is obtained on one TensorRT major version (pure data; see :func:`precision_plan`)."""

    major: int
    precision: str
    network_flags: tuple[str, ...]  # NetworkDefinitionCreationFlag members OR'd into create_network()
    set_flags: tuple[str, ...]  # BuilderFlag members to set
    clear_flags: tuple[str, ...]  # BuilderFlag members to clear (skipped when the version lacks them)
    fp16_onnx: bool  # parse an FP16 copy of the ONNX model (strongly typed fp16)

    def describe(self) -> str:
        if self.fp16_onnx:
            return "fp16: strongly typed network from an FP16 ONNX model (fp32 I/O)"
        if "FP16" in self.set_flags:
            return "fp16: BuilderFlag.FP16 on the fp32 ONNX model"
        return "fp32 (BuilderFlag.TF32 cleared)"


def tensorrt_major(version: str) -> int:
    m = re.match(r"\s*(\d+)\.", str(version))
    if not m:
        raise LatoptError(f"cannot read the TensorRT version {version!r}")
    return int(m.group(1))


def precision_plan(version: str, precision: str) -> PrecisionPlan:
    """The builder settings for ``precision`` ("fp32" | "fp16") on TensorRT ``version``."""
    if precision not in ("fp32", "fp16"):
        raise LatoptError(f"TensorRT precision must be fp32 or fp16, got {precision!r}")
    major = tensorrt_major(version)
    if major < 10:
        raise LatoptError(f"TensorRT {version} is too old: latopt needs TensorRT >= 10 (pip install -U tensorrt)")
    clear = ("TF32",) if precision == "fp32" else ()
    if major == 10:
        return PrecisionPlan(major, precision, (), ("FP16",) if precision == "fp16" else (), clear, False)
    return PrecisionPlan(major, precision, (), (), clear, precision == "fp16")


# ---------------------------------------------------------------------------------- FP16 ONNX
def to_fp16_onnx(src: str | Path, dst: str | Path) -> str:
    """Write an FP16 copy of ``src`` (fp32 inputs/outputs kept) to ``dst``; returns the converter used."""

    try:
        from modelopt.onnx.autocast import convert_to_mixed_precision
    except ImportError:
        convert_to_mixed_precision = None
    if convert_to_mixed_precision is not None:
        model = convert_to_mixed_precision(onnx_path=str(src), low_precision_type="fp16", keep_io_types=True)
        onnx.save(model, str(dst))
        return "modelopt.onnx.autocast"
    try:
        from onnxconverter_common import float16
    except ImportError:
        raise LatoptError(
            "TensorRT >= 11 builds fp16 engines only from an FP16 ONNX model (BuilderFlag.FP16 was removed); "
            "pip install onnxconverter-common (or nvidia-modelopt) to convert it, or use an fp32 device profile"
        ) from None
    model = float16.convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
    onnx.save(model, str(dst))
    return "onnxconverter_common.float16"


# ------------------------------------------------------------------------------- timing cache
def timing_cache_path(device: str) -> Path:
    base = Path(os.environ.get("LATOPT_CACHE_DIR") or Path.home() / ".cache" / "latopt")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", device) or "default"
    return base / "trt" / f"{safe}.cache"


def _load_timing_cache(config: Any, path: Path | None) -> dict[str, Any]:
    blob = path.read_bytes() if path is not None and path.is_file() else b""
    cache = config.create_timing_cache(blob)
    accepted = bool(config.set_timing_cache(cache, False))  # ignore_mismatch=False
    if not accepted:  # written on another GPU or TensorRT version: start afresh
        config.set_timing_cache(config.create_timing_cache(b""), False)
    return {"path": None if path is None else str(path), "loaded_bytes": len(blob) if accepted else 0}


def _save_timing_cache(config: Any, path: Path | None) -> int:
    if path is None:
        return 0
    data = bytes(memoryview(config.get_timing_cache().serialize()))
    write_bytes_atomic(path, data)
    return len(data)




# ------------------------------------------------------------------------------------- build
def build_serialized(trt: Any, onnx_path: str | Path, *, precision: str,
                     input_shape: Sequence[int] | None = None, workspace_mib: int = DEFAULT_WORKSPACE_MIB,
                     cache_path: Path | None = None) -> tuple[bytes, dict[str, Any]]:
    """Parse ``onnx_path`` and build a serialized engine with the ``trt`` module given; returns (plan, info)."""
    onnx_path = Path(onnx_path)
    if not onnx_path.is_file():
        raise LatoptError(f"ONNX model {onnx_path} does not exist")
    plan = precision_plan(trt.__version__, precision)
    info: dict[str, Any] = {"tensorrt": trt.__version__, "precision": precision, "mode": plan.describe()}
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = 0
    for name in plan.network_flags:
        flags |= 1 << int(getattr(trt.NetworkDefinitionCreationFlag, name))
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    config = builder.create_builder_config()
    with tempfile.TemporaryDirectory(prefix="latopt-trt-") as tmp:  # alive until the build is done
        source = onnx_path
        if plan.fp16_onnx:
            source = Path(tmp) / "model_fp16.onnx"
            info["fp16_converter"] = to_fp16_onnx(onnx_path, source)
        if not parser.parse_from_file(str(source)):
            errors = [str(parser.get_error(i)).replace("\n", " ") for i in range(parser.num_errors)]
            raise LatoptError(f"TensorRT's ONNX parser rejected {onnx_path}: " + " | ".join(errors or ["no detail"]))
        _input_profile(builder, network, config, input_shape)
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_mib) << 20)
        for name in plan.set_flags:
            if not hasattr(trt.BuilderFlag, name):
                raise LatoptError(f"TensorRT {trt.__version__} has no BuilderFlag.{name}; cannot build {precision}")
            config.set_flag(getattr(trt.BuilderFlag, name))
        for name in plan.clear_flags:
            if hasattr(trt.BuilderFlag, name):
                config.clear_flag(getattr(trt.BuilderFlag, name))
        info["timing_cache"] = _load_timing_cache(config, cache_path)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise LatoptError(f"TensorRT could not build an engine from {onnx_path} (see the TensorRT log above)")
        info["timing_cache"]["saved_bytes"] = _save_timing_cache(config, cache_path)
    return bytes(memoryview(serialized)), info


def _input_profile(builder: Any, network: Any, config: Any, input_shape: Sequence[int] | None) -> None:
    """Check the network's one input against ``input_shape``; pin dynamic dimensions with a profile."""
    if network.num_inputs != 1:
        raise LatoptError(f"the ONNX model has {network.num_inputs} inputs; latopt expects exactly one")
    inp = network.get_input(0)
    declared = tuple(int(d) for d in inp.shape)
    if input_shape is None:
        if any(d < 0 for d in declared):
            raise LatoptError(f"the ONNX input {inp.name!r} has dynamic shape {list(declared)}; give an input shape")
        return
    shape = tuple(int(d) for d in input_shape)
    if len(shape) != len(declared) or any(d >= 0 and d != s for d, s in zip(declared, shape, strict=True)):
        raise LatoptError(f"input shape {list(shape)} does not fit the ONNX input {inp.name!r} {list(declared)}")
    if any(d < 0 for d in declared):
        profile = builder.create_optimization_profile()
        profile.set_shape(inp.name, shape, shape, shape)
        config.add_optimization_profile(profile)


# ------------------------------------------------------------------------------------ backend
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
        self.cache_path = timing_cache_path(str(getattr(profile, "name", "default")))
        self.last_build: dict[str, Any] = {}

    def build(self, onnx_path: str | Path, input_shape: Sequence[int] | None = None) -> bytes:
        plan, self.last_build = build_serialized(
            self.trt, onnx_path, precision=self.precision, input_shape=input_shape,
            workspace_mib=self.workspace_mib, cache_path=self.cache_path,
        )
        return plan

    def prepare(self, model: Any, input_shape: tuple[int, ...]) -> _rt.TrtEngineRunner:
        """Build an engine for ``model`` (nn.Module or ONNX path) at ``input_shape`` and return its runner."""
        with tempfile.TemporaryDirectory(prefix="latopt-trt-") as tmp:
            if isinstance(model, (str, os.PathLike)):
                onnx_path = Path(model)
            else:
                from latopt.latency.onnx_io import export_onnx

                onnx_path = export_onnx(model, tuple(input_shape), Path(tmp) / "model.onnx")
            plan = self.build(onnx_path, input_shape)
        return _rt.TrtEngineRunner(plan, input_shape=input_shape, cuda=self.cuda)

    def environment(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "tensorrt": self.trt.__version__,
            "gpu": self.cuda.device_name(),
            "driver": self.cuda.driver_version(),
            "cuda_buffers": self.cuda.name,
            "precision": self.precision,
            "precision_mode": precision_plan(self.trt.__version__, self.precision).describe(),
            "workspace_mib": self.workspace_mib,
            "timing_cache": str(self.cache_path),
        }

    def close(self) -> None:
        self.cuda.close()


def create(profile: Any) -> TensorRTBackend:
    """The TensorRT backend for ``profile``; LatoptError (one line) when it cannot run here."""
    trt = _rt.import_tensorrt()
    precision_plan(trt.__version__, str(getattr(profile, "precision", "fp32")))  # version and precision first
    try:
        cuda = _rt.cuda_api(_device_index(getattr(profile, "cuda_device", None)))
    except LatoptError as e:
        raise LatoptError(f"TensorRT {trt.__version__} is installed but {e}") from None
    try:
        require_gpu(profile, cuda.device_name(), alternative="gpu-trt-fp16")
    except LatoptError:
        cuda.close()
        raise
    return TensorRTBackend(profile, trt, cuda)


def build_engine(onnx_path: str | Path, profile: Any, out_path: str | Path, *,
                 input_shape: Sequence[int] | None = None, backend: TensorRTBackend | None = None) -> Path:
    """Build a serialized engine for ``profile`` from ``onnx_path`` and write it atomically to ``out_path``."""
    own = backend is None
    backend = backend or create(profile)
    try:
        plan = backend.build(onnx_path, input_shape)
    finally:
        if own:
            backend.close()
    return write_bytes_atomic(Path(out_path), plan)


def event_times_ms(runner: _rt.TrtEngineRunner, repeats: int) -> list[float]:
    """CUDA-event GPU time (ms) of ``repeats`` inferences of ``runner``, one event pair each."""
    return runner.time_events_ms(repeats)
