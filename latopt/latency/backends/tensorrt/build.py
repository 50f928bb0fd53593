"""ONNX → serialized TensorRT engine, with a timing cache per device profile and TensorRT version.

:func:`build_serialized` takes the ``tensorrt`` module it is given (never imports it), after the NVIDIA samples
``samples/python/introductory_parser_samples/onnx_resnet50.py`` and ``samples/python/common.py``
(``setup_timing_cache`` / ``save_timing_cache``) in github.com/NVIDIA/TensorRT:

- ``trt.Builder`` → ``create_network(flags)`` with the network flags of :func:`precision_plan`.
- ``trt.OnnxParser.parse_from_file`` (an FP16 copy of the model first where the plan says so:
  :func:`latopt.latency.backends.tensorrt.fp16.to_fp16_onnx`); on failure every ``parser.get_error(i)`` goes
  into the error line.
- ``config.set_memory_pool_limit(MemoryPoolType.WORKSPACE, workspace_mib MiB, default 1024)``; the plan's
  builder flags set and cleared.
- timing cache per device profile and TensorRT version, ``<cache>/trt/<device>-trt<version>.cache`` with
  ``<cache>`` = ``$LATOPT_CACHE_DIR``, else ``platformdirs.user_cache_dir("latopt")`` (:func:`cache_dir`; on
  Linux ``$XDG_CACHE_HOME/latopt``, an absolute ``XDG_CACHE_HOME`` only, else ``~/.cache/latopt``; none without
  a home directory; a timing cache is valid only for the TensorRT version that wrote it):
  ``config.create_timing_cache(blob)`` + ``config.set_timing_cache(cache, False)`` before,
  ``config.get_timing_cache().serialize()`` written back atomically after the build. A cache file that cannot
  be read, that TensorRT cannot parse (``create_timing_cache`` returns None or raises) or that the builder
  refuses (other GPU) is replaced by an empty one, and one that cannot be written back (read-only or missing
  home, full disk) is left unsaved, each with a note in the build info and a warning; neither stops a build
  or loses its engine.
- one TensorRT logger per process (:func:`latopt.runtime.trt_logger`), shared by builds and runners.
- ``builder.build_serialized_network`` → bytes, which :class:`latopt.runtime.TrtEngineRunner` runs.

:func:`build_engine` writes the engine an open backend builds to a file (``latopt export --format engine``).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import platformdirs

from latopt import runtime as _rt
from latopt.errors import LatoptError, first_line
from latopt.files.artifacts import write_bytes_atomic
from latopt.latency.backends.tensorrt.fp16 import to_fp16_onnx
from latopt.latency.backends.tensorrt.precision import precision_plan
from latopt.log import get_logger

_LOG = get_logger("tensorrt")
DEFAULT_WORKSPACE_MIB = 1024


# ------------------------------------------------------------------------------- timing cache
def cache_dir() -> Path | None:
    """latopt's cache directory: ``$LATOPT_CACHE_DIR``, else ``platformdirs.user_cache_dir("latopt")`` (on Linux
    ``$XDG_CACHE_HOME/latopt``, only an absolute ``XDG_CACHE_HOME`` counts, else ``~/.cache/latopt``); None when
    there is no home directory to put it in (no ``HOME`` and no password entry, as in some containers): then
    nothing is cached."""
    if os.environ.get("LATOPT_CACHE_DIR"):
        return Path(os.environ["LATOPT_CACHE_DIR"])
    try:
        return Path(platformdirs.user_cache_dir("latopt", appauthor=False))
    except RuntimeError:   # platformdirs: "could not determine the home directory"
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


def build_engine(backend: Any, onnx_path: str | Path, out_path: str | Path, *,
                 input_shape: Sequence[int] | None = None) -> Path:
    """The engine ``backend`` (an open :class:`latopt.latency.backends.tensorrt.backend.TensorRTBackend`: its
    TensorRT, precision, timing cache and CUDA context) builds from ``onnx_path``, written atomically to
    ``out_path``."""
    return write_bytes_atomic(Path(out_path), backend.build(onnx_path, input_shape))
