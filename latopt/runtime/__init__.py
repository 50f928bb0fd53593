"""Run an exported latopt artefact without the training stack: a TensorRT ``.engine`` or an ``.onnx`` model.

Install the latopt package on the device; its runtime imports only numpy, the runtime's own library
(``onnxruntime``, or ``tensorrt`` with ``pycuda`` or, failing that, ``torch`` holding the CUDA buffers) when a
model of that kind is loaded, and latopt's floor modules: :mod:`latopt.errors`, and for the command line's
atomic ``--output`` :mod:`latopt.files.artifacts` (numpy and the standard library); when the command line runs it also
reads latopt's own ``--threads`` bound and Ctrl-C/SIGTERM handling (:mod:`latopt.constants`,
:mod:`latopt.signals`: standard library only). Neither it nor its command line imports torch, timm, optuna or
onnx (tests/test_tensorrt.py checks that).

It is also the floor the latency backends build on (:mod:`latopt.latency.backends`): the one ONNX Runtime
runner, the TensorRT runner, the CUDA buffers/streams and the one CUDA-event timer, the one ``nvidia-smi``
driver query and the one summary of timed calls (re-exported by :mod:`latopt.latency.timing`), so
``--bench`` times exactly as the profiler does. Modules, one job each:

- :mod:`.runner`  :class:`Runner`, the interface both runners implement; :func:`bench` over any runner
- :mod:`.ort`     :class:`OrtRunner` (ONNX Runtime, IOBinding), :func:`ort_errors`, :func:`ort_install_hint`
- :mod:`.trt`     :class:`TrtEngineRunner` (one TensorRT engine), :func:`trt_logger`, :func:`import_tensorrt`
- :mod:`.cuda`    :class:`CudaApi` (pycuda or torch: buffers, stream, CUDA-event timer), :func:`driver_version`
- :mod:`.stats`   :class:`TimingStats` (median and quartiles of timed calls)
- :mod:`.cli`     the command line (``main``; ``__main__`` runs it)

Command line::

    python -m latopt.runtime MODEL.engine|MODEL.onnx [--input x.npy] [--output y.npy] [--bench N]

Python::

    from latopt.runtime import load
    with load("model.engine") as r:      # or "model.onnx"
        y = r.run(x)                     # numpy in, numpy out (first output)
        r()                              # one synchronised inference on a fixed input (for timing)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from latopt.errors import LatoptError
from latopt.runtime.cuda import CudaApi, PycudaApi, TorchCudaApi, cuda_api, driver_version
from latopt.runtime.ort import GPU_PROVIDERS, OrtRunner, ort_errors, ort_install_hint
from latopt.runtime.runner import Runner, bench
from latopt.runtime.stats import TimingStats
from latopt.runtime.trt import ENGINE_SUFFIXES, TensorSpec, TrtEngineRunner, import_tensorrt, trt_logger

__all__ = ["ENGINE_SUFFIXES", "GPU_PROVIDERS", "CudaApi", "OrtRunner", "PycudaApi", "Runner", "TensorSpec",
           "TimingStats", "TorchCudaApi", "TrtEngineRunner", "bench", "cuda_api", "driver_version",
           "import_tensorrt", "load", "ort_errors", "ort_install_hint", "trt_logger"]


def load(path: str | Path, *, input_shape: Sequence[int] | None = None, device_index: int = 0,
         threads: int | None = 1, seed: int = 0) -> Runner:
    """A runner for ``path``: ``.engine``/``.plan``/``.trt`` → TensorRT, ``.onnx`` → ONNX Runtime."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in ENGINE_SUFFIXES:
        return TrtEngineRunner(path, input_shape=input_shape, device_index=device_index, seed=seed)
    if suffix == ".onnx":
        return OrtRunner(path, input_shape=input_shape, threads=threads, seed=seed)
    raise LatoptError(f"unknown model type {path.name!r}: expected .engine (TensorRT) or .onnx (ONNX Runtime)",
                      param="path")
