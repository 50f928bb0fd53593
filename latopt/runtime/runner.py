"""What every deploy runner is (:class:`Runner`) and what is done with any of them (:func:`bench`).

A runner holds one model on one runtime (:class:`latopt.runtime.OrtRunner` for ONNX Runtime,
:class:`latopt.runtime.TrtEngineRunner` for a TensorRT engine) with one input:

- ``input_shape`` / ``input_dtype``: the fixed input it was opened at;
- ``run(x)``: numpy in, the first output out (``run_all(x)``: every output by name, in the model's order);
- ``runner()``: one synchronised inference on a fixed input (what is timed);
- ``close()`` (idempotent), and the runner is its own context manager.

A runner on a GPU also has the device's own timer, ``time_ms()`` and ``time_events_ms(n)`` (CUDA events): the
same optional methods :mod:`latopt.latency.timing` looks for, so :func:`bench` and the profiler agree on which
runners have a GPU clock. The latency backends' runner protocol (:class:`latopt.latency.backends.TimedRunner`:
call, ``run``, ``close``) is a part of this interface, so these runners also serve as the backends' runners.
"""

from __future__ import annotations

import abc
import time
from pathlib import Path
from typing import TypeVar

import numpy as np

from latopt.errors import LatoptError
from latopt.runtime.stats import TimingStats

R = TypeVar("R", bound="Runner")

MAX_BENCH = 1_000_000  # `--bench N`: timed calls, one float each (and a CUDA event pair on a GPU) held at once


class Runner(abc.ABC):
    """One model with one input on one runtime; see the module docstring."""

    input_shape: tuple[int, ...]
    input_dtype: np.dtype

    @abc.abstractmethod
    def __call__(self) -> None:
        """One synchronised inference on the fixed input."""

    @abc.abstractmethod
    def run_all(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """Inference on ``x``; every output by name, in the model's order."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the session or engine and its buffers (idempotent)."""

    def run(self, x: np.ndarray) -> np.ndarray:
        """Inference on ``x``; returns the first output."""
        return next(iter(self.run_all(x).values()))

    def __enter__(self: R) -> R:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def existing_file(path: str | Path, what: str) -> Path:
    """``path`` when it is a file; else a one-line LatoptError naming it as ``what`` ("ONNX model")."""
    path = Path(path)
    if not path.exists():
        raise LatoptError(f"{what} {path} does not exist")
    if path.is_dir():
        raise LatoptError(f"{what} {path} is a directory, not a file")
    if not path.is_file():
        raise LatoptError(f"{what} {path} is not a file")
    return path


def bench(runner: Runner, n: int, warmup: int = 10) -> dict[str, float]:
    """Median and quartiles of ``n`` synchronised calls after ``warmup`` untimed ones: the host's wall clock,
    plus the device's own timer (``gpu_*``) for a runner that has one (``time_events_ms``). The command line's
    ``--bench`` is at most :data:`MAX_BENCH`."""
    for _ in range(warmup):
        runner()
    wall = []
    for _ in range(n):
        t0 = time.perf_counter()
        runner()
        wall.append((time.perf_counter() - t0) * 1e3)
    out = _summary(wall, "wall")
    events = getattr(runner, "time_events_ms", None)
    if callable(events):
        out.update(_summary(events(n), "gpu"))
    return out


def _summary(ms: list[float], key: str) -> dict[str, float]:
    s = TimingStats.from_samples(ms)
    return {f"{key}_median_ms": s.median_ms, f"{key}_q1_ms": s.q1_ms, f"{key}_q3_ms": s.q3_ms}
