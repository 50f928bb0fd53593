"""TensorRT backend: ONNX → engine through TensorRT's Python API, timed on a CUDA stream.

Supported TensorRT versions: 8.6, 10.x and 11.x (the three API lists in ``tests/data/tensorrt-*.names``
that ``tests/test_trt_api.py`` checks every call against). One job per module:

- :mod:`.precision`: how each precision is built on each TensorRT major version (:func:`precision_plan`) and
  which GPUs each TensorRT release runs on (:data:`SM_SUPPORT`, :func:`check_compute_capability`); pure data
  and rules, no TensorRT import.
- :mod:`.fp16`: the one FP16 ONNX conversion of TensorRT >= 11 (onnxconverter-common, imported when used).
- :mod:`.build`: ONNX → serialized engine (:func:`build_serialized`), the timing cache kept per device profile
  and TensorRT version (:func:`timing_cache_path`), and an engine file written by an open backend
  (:func:`build_engine`, what ``latopt export --format engine`` ships).
- :mod:`.backend`: the latency backend, ``create(profile)`` → :class:`TensorRTBackend`, what
  :func:`latopt.latency.backends.get_backend` opens for a profile whose backend is ``tensorrt``.

Importing this package imports none of them, and none imports ``tensorrt`` at module level: the backend
imports it in ``create`` (through :func:`latopt.runtime.import_tensorrt`) and hands the module on.
"""
