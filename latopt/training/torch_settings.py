"""torch's process-wide switches that latopt sets: intra-op threads and TF32.

A bottom-floor module (torch, the standard library and :mod:`latopt.counts`, which bounds every thread count):
the training engine (:mod:`latopt.training.loop`),
the stages and the latency layer (the profiler, the torch backend, export's gates) set threads and TF32
through it without importing each other.

Public API::

    set_threads(n)                          torch intra-op threads (None: leave torch's choice)
    torch_threads(n) -> context manager     ``n`` intra-op threads while it runs, the old count restored
    tf32_flags() -> dict[str, bool]         torch's TF32 switches (cuDNN convolutions, cuBLAS matmuls)
    set_tf32_flags(flags)                   set them (a dict as tf32_flags gives)
    TF32_OFF                                both switches off: float32 computed as float32
    strict_fp32() -> context manager        TF32 off while it runs, restored after

Threads: on a machine shared with other jobs one thread per process was many times faster than two (one
eager MobileNetV2 forward took 2.5-5.6 s with torch's default 2 threads at load ~10 and 0.06-0.08 s with
one thread: spinning worker threads starve each other). TF32: cuDNN's is on by default, so an "fp32"
convolution on Ampere and newer is TF32 unless it is switched off; every *recorded* accuracy
(:func:`latopt.training.loop.evaluate`) and every fp32 time of the torch latency backend is taken with it off.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from latopt.counts import check_count

TF32_OFF = {"cudnn.allow_tf32": False, "cuda.matmul.allow_tf32": False}


def set_threads(threads: int | None) -> None:
    """torch's intra-op threads for this process (None leaves torch's default); a count out of
    :func:`latopt.counts.check_count`'s bounds is one line, never handed to torch."""
    if threads is not None:
        torch.set_num_threads(check_count(threads, "threads"))


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run torch on ``n`` intra-op threads while the block runs; the old count is restored afterwards."""
    old = torch.get_num_threads()
    set_threads(n)
    try:
        yield
    finally:
        set_threads(old)


def tf32_flags() -> dict[str, bool]:
    """torch's TF32 switches for fp32 work on CUDA (process-wide)."""
    return {"cudnn.allow_tf32": bool(torch.backends.cudnn.allow_tf32),
            "cuda.matmul.allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32)}


def set_tf32_flags(flags: dict[str, bool]) -> None:
    torch.backends.cudnn.allow_tf32 = bool(flags["cudnn.allow_tf32"])
    torch.backends.cuda.matmul.allow_tf32 = bool(flags["cuda.matmul.allow_tf32"])


@contextlib.contextmanager
def strict_fp32() -> Iterator[None]:
    """float32 as float32 on CUDA: TF32 off for convolutions and matmuls while the block runs (restored after).
    Autocast is never active where this is used (evaluation runs outside the training step)."""
    old = tf32_flags()
    set_tf32_flags(TF32_OFF)
    try:
        yield
    finally:
        set_tf32_flags(old)
