"""TensorRT backend: ONNX → engine through TensorRT's Python API, timed on a CUDA stream.

Supported TensorRT versions: 8.6, 10.x and 11.x (the three API lists in ``tests/data/tensorrt-*.names``
that ``tests/test_trt_api.py`` checks every call against).

``create(profile)`` checks, in this order, that ``tensorrt`` imports, that its version is supported, that
a CUDA GPU is visible (buffers through pycuda when installed, else torch CUDA tensors), that the GPU's
compute capability is one this TensorRT version runs on (:data:`SM_SUPPORT`) and that the live GPU matches
``profile.expected_gpu``; each failure is one :class:`LatoptError` line, the compute-capability one naming
the TensorRT version to install.

Build (``TensorRTBackend.build`` / :func:`build_engine`), after the NVIDIA samples
``samples/python/introductory_parser_samples/onnx_resnet50.py``, ``samples/python/common.py``
(``setup_timing_cache`` / ``save_timing_cache``) and ``samples/python/strongly_type_autocast/sample.py``
in github.com/NVIDIA/TensorRT:

- ``trt.Builder`` → ``create_network(flags)``. TensorRT 8.6: ``1 << EXPLICIT_BATCH`` (its ONNX parser needs an
  explicit-batch network). 10.x and 11.x: 0 — TensorRT 10 networks are always explicit-batch
  (``EXPLICIT_BATCH`` is "[DEPRECATED] Ignored", Python API ``Core/Builder.html``; 11 has no such member), and
  TensorRT 11 networks are always strongly typed (``STRONGLY_TYPED`` "Deprecated in TensorRT 11.0. Strongly typed
  mode is always enabled ... ignored", 11.0.0 ``_static/python-api/infer/Core/Builder.html``).
- ``trt.OnnxParser.parse_from_file``; on failure every ``parser.get_error(i)`` goes into the error line.
- ``config.set_memory_pool_limit(MemoryPoolType.WORKSPACE, profile.workspace_mib MiB, default 1024)``.
- precision (:func:`precision_plan`): TensorRT 8.6 and 10 fp16 set ``BuilderFlag.FP16`` on the fp32 ONNX model
  (weak typing; deprecated in 10, still there). TensorRT 11 removed ``BuilderFlag.FP16`` ("Removed Python APIs
  and Replacements": docs.nvidia.com/deeplearning/tensorrt/latest/api/migration/tensorrt-10x-to-11x-python-api-reference.html,
  replacement "Strong typing with ModelOpt AutoCast"), so fp16 there parses an FP16 copy of the ONNX model with
  fp32 inputs/outputs kept, always made by one conversion (:data:`FP16_CONVERSION`, recorded in the backend's
  environment and so in every LUT): ``onnxconverter_common.float16.convert_float_to_float16`` on the whole graph
  (``keep_io_types=True``; initializers clamped to fp16's own largest finite value, not the converter's 1e4).
  Not ModelOpt AutoCast, NVIDIA's documented route (.../tensorrt-10x-to-11x-python-api-patterns.html), even
  where it is installed: it keeps in fp32 the nodes a rule picks on random inputs, separately for every model it
  converts, so the parts of a LUT and its calibration networks could get different precision mixes.
  onnxconverter-common not installed → LatoptError saying so (the ``trt`` extra installs it).
  fp32 clears ``BuilderFlag.TF32`` (on by default) so "fp32" means fp32 on Ampere and newer. int8 is refused
  (:func:`check_precision`, before TensorRT is imported): latopt builds no INT8 engines.
- timing cache per device profile and TensorRT version, ``<cache>/trt/<device>-trt<version>.cache`` with
  ``<cache>`` = ``$LATOPT_CACHE_DIR``, else ``$XDG_CACHE_HOME/latopt``, else ``~/.cache/latopt`` (none without
  a home directory; a timing cache is valid only for the TensorRT version that wrote it):
  ``config.create_timing_cache(blob)`` + ``config.set_timing_cache(cache, False)`` before,
  ``config.get_timing_cache().serialize()`` written back atomically after the build. A cache file that cannot
  be read, that TensorRT cannot parse (``create_timing_cache`` returns None or raises) or that the builder
  refuses (other GPU) is replaced by an empty one, and one that cannot be written back (read-only or missing
  home, full disk) is left unsaved, each with a note in the build info and a warning; neither stops a build
  or loses its engine.
- one TensorRT logger per process (:func:`latopt.runtime.trt_logger`), shared by builds and runners.
- ``builder.build_serialized_network`` → bytes; the runner (:class:`latopt.runtime.TrtEngineRunner`)
  deserializes them, binds I/O tensors by name (``set_tensor_address``) and runs ``execute_async_v3``.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import onnx
from packaging.version import InvalidVersion, Version

from latopt import runtime as _rt
from latopt.artifacts import write_bytes_atomic
from latopt.errors import LatoptError, first_line
from latopt.latency.backends import require_gpu
from latopt.log import get_logger

_LOG = get_logger("tensorrt")
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


def tensorrt_version(version: str) -> tuple[int, int]:
    """(major, minor) of a TensorRT version string ("8.6.1.post1" → (8, 6)), read by ``packaging.version``."""
    try:
        release = Version(str(version)).release
    except InvalidVersion:
        raise LatoptError(f"cannot read the TensorRT version {version!r}") from None
    return release[0], (release + (0,))[1]


SUPPORTED = "8.6, 10.x or 11.x"


def check_precision(precision: str) -> None:
    """A one-line LatoptError unless TensorRT builds ``precision`` in latopt: fp32 or fp16 (no INT8 engines)."""
    if precision not in ("fp32", "fp16"):
        hint = ("; TensorRT INT8 is not supported by latopt: INT8 is ONNX Runtime static INT8 on the CPU "
                "(--device cpu-int8)") if precision == "int8" else ""
        raise LatoptError(f"TensorRT precision must be fp32 or fp16, got {precision!r}{hint}")


def precision_plan(version: str, precision: str) -> PrecisionPlan:
    """The builder settings for ``precision`` ("fp32" | "fp16") on TensorRT ``version`` (8.6, 10.x, 11.x)."""
    check_precision(precision)
    major, minor = tensorrt_version(version)
    if (major, minor) < (8, 6) or major == 9:
        raise LatoptError(f"TensorRT {version} is not supported: latopt needs TensorRT {SUPPORTED} "
                          f"(pip install 'tensorrt==8.6.1' for Maxwell/Pascal GPUs, else pip install -U tensorrt)")
    clear = ("TF32",) if precision == "fp32" else ()
    fp16_flag = ("FP16",) if precision == "fp16" else ()
    if major == 8:  # 8.6: explicit batch must be asked for; weak typing with BuilderFlag.FP16
        return PrecisionPlan(major, precision, ("EXPLICIT_BATCH",), fp16_flag, clear, False)
    if major == 10:  # explicit batch implicit (the flag is ignored); BuilderFlag.FP16 deprecated but present
        return PrecisionPlan(major, precision, (), fp16_flag, clear, False)
    return PrecisionPlan(major, precision, (), (), clear, precision == "fp16")  # 11+: strongly typed


# ----------------------------------------------------------------------- GPU compute capability
# Compute capabilities each TensorRT release runs on (first release of a row → (lowest SM, highest SM or None:
# no upper bound known)). Sources: TensorRT 8.5.2 release notes ("8.5 will be the last release supporting
# Kepler (SM 3.x) ... Maxwell (SM 5.x) dropped in 9.0"), 8.6.1 support matrix (Maxwell to Hopper 9.0);
# 10.0-10.4 release notes ("Volta (SM 7.0) deprecated", 10.1 support matrix: "SM 7.0 or higher"); 10.5 release
# notes ("Volta support removed"); 10.8 release notes (Blackwell added); 11.x builds only for CUDA 13, whose
# lowest target is Turing (SM 7.5) — NVIDIA's 11.x support matrix is an interactive page not read here.
SM_SUPPORT: tuple[tuple[tuple[int, int], tuple[int, int], tuple[int, int] | None], ...] = (
    ((8, 6), (5, 0), (9, 0)),
    ((10, 0), (7, 0), (9, 0)),
    ((10, 5), (7, 5), (9, 0)),
    ((10, 8), (7, 5), None),
    ((11, 0), (7, 5), None),
)


def sm_range(version: str) -> tuple[tuple[int, int], tuple[int, int] | None]:
    """(lowest, highest or None) compute capability TensorRT ``version`` runs on (:data:`SM_SUPPORT`)."""
    v = tensorrt_version(version)
    rows = [row for row in SM_SUPPORT if row[0] <= v]
    if not rows:
        raise LatoptError(f"TensorRT {version} is not supported: latopt needs TensorRT {SUPPORTED}")
    return rows[-1][1], rows[-1][2]


# Compute capabilities without FP16 in TensorRT's hardware/precision table (8.x support matrices: 6.1, e.g.
# TITAN X (Pascal) and Tesla P4/P40, and Maxwell 5.0/5.2 have only low-rate FP16: "FP16 No").
NO_FP16 = ((5, 0), (5, 2), (6, 1))


def check_compute_capability(version: str, sm: tuple[int, int], gpu: str, precision: str = "fp32") -> None:
    """LatoptError (one line naming the TensorRT version to install) when TensorRT ``version`` does not run
    on a GPU of compute capability ``sm``, or (one line) when that GPU has no fp16 in TensorRT."""
    lo, hi = sm_range(version)
    if lo <= sm and (hi is None or sm <= hi):
        if precision == "fp16" and tuple(sm) in NO_FP16:
            raise LatoptError(f"TensorRT has no fp16 on {gpu} (compute capability {sm[0]}.{sm[1]}: low-rate FP16 "
                              f"only, 'FP16: No' in NVIDIA's support matrix); use an fp32 profile (--device titanx "
                              f"or precision: fp32)")
        return
    cc = f"{sm[0]}.{sm[1]}"
    if sm < (5, 0):
        fix = ("no TensorRT release latopt supports runs on it (TensorRT 8.6 needs compute capability >= 5.0); "
               "use --device gpu-torch or --device cpu")
    elif sm < (7, 0):
        fix = ("install TensorRT 8.6, the last release for Maxwell and Pascal: pip install 'tensorrt==8.6.1' "
               "(Python <= 3.11)")
    elif sm < (7, 5):
        fix = "install TensorRT 10.4 or older (Volta was removed in 10.5): pip install 'tensorrt>=10.0,<10.5'"
    else:  # newer than this release knows
        fix = "install a newer TensorRT: pip install -U 'tensorrt>=10.8'"
    rng = f"{lo[0]}.{lo[1]}" + (f" to {hi[0]}.{hi[1]}" if hi else " and newer")
    raise LatoptError(f"TensorRT {version} does not run on {gpu} (compute capability {cc}; this release supports "
                      f"{rng}): {fix}")


# ---------------------------------------------------------------------------------- FP16 ONNX
FP16_CONVERTER = "onnxconverter_common.float16.convert_float_to_float16"
# The one fp16 conversion of TensorRT >= 11 (module docstring): every float of the whole graph (the converter's
# default op_block_list holds none of the operators latopt's networks use), fp32 inputs and outputs kept;
# initializers beyond fp16's largest finite value 65504 are clamped to it (the converter's default, 1e4, would
# also change weights that fp16 holds).
FP16_CONVERSION: dict[str, Any] = {"converter": FP16_CONVERTER, "keep_io_types": True, "max_finite_val": 65504.0,
                                   "op_block_list": "the converter's default"}


def fp16_conversion() -> dict[str, Any]:
    """:data:`FP16_CONVERSION` with the installed onnxconverter-common version (None when it is missing)."""
    try:
        version = metadata.version("onnxconverter-common")
    except metadata.PackageNotFoundError:
        version = None
    return {**FP16_CONVERSION, "onnxconverter_common": version}


def to_fp16_onnx(src: str | Path, dst: str | Path) -> str:
    """Write an FP16 copy of ``src`` (fp32 inputs/outputs kept) to ``dst`` with :data:`FP16_CONVERSION`, whatever
    else is installed; returns the converter's name."""
    try:
        from onnxconverter_common import float16
    except ImportError:
        raise LatoptError(
            "TensorRT >= 11 builds fp16 engines only from an FP16 ONNX model (BuilderFlag.FP16 was removed); "
            "pip install onnxconverter-common to convert it, or use an fp32 device profile"
        ) from None
    model = float16.convert_float_to_float16(onnx.load(str(src)), keep_io_types=FP16_CONVERSION["keep_io_types"],
                                             max_finite_val=FP16_CONVERSION["max_finite_val"])
    onnx.save(model, str(dst))
    return FP16_CONVERTER


# ------------------------------------------------------------------------------- timing cache
def cache_dir() -> Path | None:
    """latopt's cache directory: ``$LATOPT_CACHE_DIR``, else ``$XDG_CACHE_HOME/latopt`` (the XDG base directory
    rule: only an absolute ``XDG_CACHE_HOME`` counts), else ``~/.cache/latopt``; None when there is no home
    directory to put it in (no ``HOME`` and no password entry, as in some containers): then nothing is cached."""
    if os.environ.get("LATOPT_CACHE_DIR"):
        return Path(os.environ["LATOPT_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "latopt"
    try:
        return Path.home() / ".cache" / "latopt"
    except (RuntimeError, KeyError):   # Path.home(): "Could not determine home directory" (KeyError on 3.10)
        return None


def timing_cache_path(device: str, version: str | None = None) -> Path | None:
    """``<cache>/trt/<device>[-trt<version>].cache`` (:func:`cache_dir`): one timing cache per device profile and
    TensorRT version; None without a cache directory."""
    base = cache_dir()
    if base is None:
        return None
    name = device if version is None else f"{device}-trt{version}"
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "default"
    return base / "trt" / f"{safe}.cache"


# What TensorRT's Python bindings raise for a blob they cannot take (pybind11 turns C++ exceptions into
# RuntimeError, a refused argument (a None cache) into TypeError); OSError: the file cannot be read.
_CACHE_ERRORS = (RuntimeError, TypeError, ValueError)


def _load_timing_cache(config: Any, path: Path | None) -> dict[str, Any]:
    """Give the builder the timing cache at ``path``; anything wrong with it (unreadable, corrupt, from another
    TensorRT version or GPU) starts afresh with an empty cache and a note, never stops the build."""
    info: dict[str, Any] = {"path": None if path is None else str(path), "loaded_bytes": 0}
    blob, why = b"", None
    if path is not None:
        try:
            blob = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):   # nothing cached there yet
            pass
        except OSError as e:        # a directory, no permission (also on a parent: is_file() would raise it)
            why = f"unreadable ({e.strerror or e})"
    if blob:
        try:
            cache = config.create_timing_cache(blob)
            if cache is None:
                why = "TensorRT could not read it (corrupt, or written by another TensorRT version)"
            elif config.set_timing_cache(cache, False):  # ignore_mismatch=False
                info["loaded_bytes"] = len(blob)
                return info
            else:
                why = "the builder refused it (written on another GPU or TensorRT version)"
        except _CACHE_ERRORS as e:
            why = f"TensorRT could not read it ({type(e).__name__}: {first_line(e)})"
    if why:
        info["note"] = f"timing cache {path} not used: {why}; started afresh"
        _LOG.warning(info["note"])
    config.set_timing_cache(config.create_timing_cache(b""), False)
    return info


def _save_timing_cache(config: Any, path: Path | None, info: dict[str, Any]) -> None:
    """Write the builder's timing cache back to ``path`` (``info["saved_bytes"]``). Called after the build: a
    cache that cannot be written (a read-only or missing home, a full disk) is a note and a warning, never the
    loss of the engine just built (the next build times its kernels afresh)."""
    info["saved_bytes"] = 0
    if path is None:
        return
    try:
        data = bytes(memoryview(config.get_timing_cache().serialize()))
        write_bytes_atomic(path, data)
    except (OSError, LatoptError, *_CACHE_ERRORS) as e:   # write_bytes_atomic: OutputError, a LatoptError
        note = f"timing cache {path} not saved ({type(e).__name__}: {first_line(e)}); the engine is built"
        info["note"] = f"{info['note']}; {note}" if info.get("note") else note
        _LOG.warning(note)
        return
    info["saved_bytes"] = len(data)




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
    logger = _rt.trt_logger(trt)
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
        _save_timing_cache(config, cache_path, info["timing_cache"])
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
                from latopt.latency.onnx_io import export_onnx

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


def create(profile: Any) -> TensorRTBackend:
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
