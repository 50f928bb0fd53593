"""Latency: device profiles, timing backends, interleaved timing, the per-block LUT and the profiler.

Modules: :mod:`.devices` (device profiles, YAML), :mod:`.backends` (onnxruntime, tensorrt, torch),
:mod:`.timing` (interleaved median/IQR), :mod:`.onnx_io` (export), :mod:`.lut` (the table, predict,
c_l), :mod:`.profiler` (``latopt profile``). Heavy libraries are imported lazily.
"""
