"""Timing: warm-up, interleaved rounds, median and inter-quartile range, adaptive repeats.

Public API::

    TimingPolicy(warmup=10, min_repeats=30, max_repeats=300, budget_s=30.0, stable_rel=0.01, clock="wall",
                 warm_calls=1)        the repeat policy; a DeviceProfile is one (its YAML's timing keys);
                                      every count bounded (MAX_WARMUP, MAX_WARM_CALLS, MAX_REPEATS, MAX_BUDGET_S)
    TimingStats(median_ms, q1_ms, q3_ms, iqr_ms, n)                        .samples_ms: one per round
        (defined in :mod:`latopt.runtime.stats`, part of the deploy runner, whose ``--bench`` summarises
        its calls with it: one statistics routine for both)
    compare(runners: Mapping[str, TimedRunner], policy) -> dict[str, TimingStats]
    environment_info(cuda_device=None) -> dict        CPU, load, library versions; the GPU ``cuda_device`` if given

Method: every runner is warmed up, then the runners are called in rounds,
one call each per round (A B C, B C A, C A B, ...: the start rotates so no runner always follows the
same one), so slow drifts of the machine (other processes, clocks) hit all candidates alike. Every
``check_every`` rounds the medians are recomputed; timing stops when at least ``min_repeats`` rounds are
done and no median moved by more than ``stable_rel`` (relative) since the last check, or at
``max_repeats`` rounds, or when ``budget_s`` seconds are spent (after at least 5 rounds). The budget counts
from the first warm-up call: the warm-up stops when it is spent, so a run takes at most ``budget_s`` plus
the rounds that complete the minimum of 5 (each of ``warm_calls`` + 1 calls per runner, ``warm_calls`` <=
:data:`MAX_WARM_CALLS`).
Sample ``i`` of every runner comes from round ``i``, so per-round ratios between runners are available.
Each timed call is preceded by ``warm_calls`` (default 1) untimed calls of the same runner: with dozens
of runners in a profile, a strictly alternating call finds its weights evicted by the others and runs
"cold" (on the quickstart model, 2.3x slower than the same network timed against one other), while a
deployed network runs back to back, warm. ``warm_calls: 0`` in a profile gives the cold regime.

A runner is a zero-argument callable doing one synchronised inference. Clocks:

- a runner with ``time_ms()`` (or ``time_events_ms(n)``, as :class:`latopt.runtime.TrtEngineRunner`) is
  timed by the device's own timer (CUDA events);
- ``clock="wall"``: the host's monotonic clock around the call (``time.perf_counter``);
- ``clock="thread"``: the CPU time of the calling thread (``CLOCK_THREAD_CPUTIME_ID``). Only valid when the
  inference runs on the calling thread (ONNX Runtime / torch with ONE intra-op thread). It equals the wall
  time on an idle machine and leaves out the time the thread waited for a CPU on a shared one: with 4-5
  runnable processes on the 2-vCPU development machine MobileNetV2 took 4.3 ms of thread time
  (IQR 0.2 ms) against a bimodal 8–12 ms wall median (one scheduler slice more or less per call).
  The wall-clock median is recorded next to it (``TimingStats.wall_median_ms``). A call over which the
  thread's CPU time did not advance is timed again (up to ``THREAD_CLOCK_TRIES`` calls): a zero sample has
  no per-round ratio. One was seen (2026-12-03, a fresh-clone CI run of the smoke test on the loaded 2-vCPU
  development machine, ONNX Runtime calls of 30–60 µs); why the clock read 0 there was not established.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Annotated, Any

import torch
from pydantic import Field, model_validator

from latopt.constants import Clock
from latopt.errors import LatoptError
from latopt.files.records import Positive, StrictModel
from latopt.runtime import TimingStats

# Upper bounds of the policy's counts: a profile is user input, and `warmup: 100000000` or `warm_calls: 100000`
# used to time until killed. Each is 10x or more what a shipped profile or tool uses.
MAX_WARMUP = 10_000       # untimed warm-up calls per runner (shipped: <= 50); the budget stops them earlier
MAX_WARM_CALLS = 100      # untimed calls before each timed one (default 1: one call brings the weights back)
MAX_REPEATS = 10_000      # rounds (shipped: <= 1000); every runner keeps one sample (and a wall time) per round
MAX_BUDGET_S = 3600.0     # seconds of timing, warm-up included (shipped: <= 60)
MIN_ROUNDS = 5            # rounds timed even when the budget is spent (a median and quartiles need samples)
THREAD_CLOCK_TRIES = 10   # calls of one sample whose thread CPU time may read 0 before clock "thread" gives up


class TimingPolicy(StrictModel):
    """How :func:`compare` times (the module docstring); the one definition of these keys and their defaults.
    A device profile (:class:`latopt.latency.devices.DeviceProfile`) extends it: its YAML's timing keys are
    these fields, and a profile is passed to :func:`compare` as it is."""

    warmup: Annotated[int, Field(ge=0, le=MAX_WARMUP)] = 10  # untimed calls per runner before timing (within the budget)
    min_repeats: Annotated[int, Field(ge=1, le=MAX_REPEATS)] = 30
    max_repeats: Annotated[int, Field(ge=1, le=MAX_REPEATS)] = 300
    budget_s: Annotated[float, Field(gt=0, le=MAX_BUDGET_S)] = 30.0  # all the timing, warm-up included
    stable_rel: Positive = 0.01
    clock: Clock = "wall"  # "wall" (host clock) or "thread" (CPU time of the one inference thread)
    # untimed calls of a runner right before each of its timed calls (0 = cold)
    warm_calls: Annotated[int, Field(ge=0, le=MAX_WARM_CALLS)] = 1

    @model_validator(mode="after")
    def _repeats(self) -> TimingPolicy:
        if self.min_repeats > self.max_repeats:
            raise ValueError(f"min_repeats > max_repeats ({self.min_repeats} > {self.max_repeats})")
        return self


def _timer(runner: Any, clock: str) -> Callable[[], tuple[float, float]]:
    """A function doing one call of ``runner`` and returning (its time, the wall time) in ms."""
    if callable(getattr(runner, "time_ms", None)):
        dev = runner.time_ms
    elif callable(getattr(runner, "time_events_ms", None)):
        def dev() -> float:
            return float(runner.time_events_ms(1)[0])
    else:
        dev = None
    if dev is not None:
        def device() -> tuple[float, float]:
            t0 = time.perf_counter_ns()
            ms = dev()
            return ms, (time.perf_counter_ns() - t0) / 1e6

        return device
    if clock == "thread":
        def thread() -> tuple[float, float]:
            for _ in range(THREAD_CLOCK_TRIES):
                t0 = time.perf_counter_ns()
                c0 = time.thread_time_ns()
                runner()
                c1 = time.thread_time_ns()
                if c1 > c0:
                    return (c1 - c0) / 1e6, (time.perf_counter_ns() - t0) / 1e6
            raise LatoptError(f"the thread clock did not advance over {THREAD_CLOCK_TRIES} calls of a runner; "
                              "time this machine with clock: wall", param="clock")

        return thread

    def host() -> tuple[float, float]:
        t0 = time.perf_counter_ns()
        runner()
        ms = (time.perf_counter_ns() - t0) / 1e6
        return ms, ms

    return host


def compare(runners: Mapping[str, Any], policy: TimingPolicy | None = None, *,
            progress: Callable[[int, float], None] | None = None) -> dict[str, TimingStats]:
    """Time ``runners`` against each other in one interleaved run (see the module docstring)."""
    if not runners:
        raise LatoptError("nothing to time: no runners given")
    pol = policy or TimingPolicy()
    names = list(runners)
    timers = [_timer(runners[n], pol.clock) for n in names]
    start = time.perf_counter()  # the budget bounds the warm-up too: it stops when the budget is spent
    for t in (t for _ in range(pol.warmup) for t in timers):
        if time.perf_counter() - start >= pol.budget_s:
            break
        t()
    samples: list[list[float]] = [[] for _ in names]
    walls: list[list[float]] = [[] for _ in names]
    k = len(names)
    check_every = max(5, min(pol.min_repeats, 20))
    prev: list[float] | None = None
    r = 0
    while True:
        for j in range(k):
            i = (r + j) % k
            for _ in range(pol.warm_calls):  # bring this runner's weights back into cache, untimed
                runners[names[i]]()
            ms, wall = timers[i]()
            samples[i].append(ms)
            walls[i].append(wall)
        r += 1
        elapsed = time.perf_counter() - start
        if r >= pol.max_repeats or (elapsed >= pol.budget_s and r >= MIN_ROUNDS):
            break
        if r % check_every == 0:
            meds = [statistics.median(s) for s in samples]
            if progress is not None:
                progress(r, elapsed)
            if r >= pol.min_repeats and prev is not None and all(
                    abs(m - p) <= pol.stable_rel * max(p, 1e-9) for m, p in zip(meds, prev, strict=True)):
                break
            prev = meds
    return {n: TimingStats.from_samples(s, w if w != s else None) for n, s, w in zip(names, samples, walls, strict=True)}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# the instruction-set flags that change which kernels (and so which float rounding and speed) a CPU gets
KERNEL_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512_vnni",
                "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16", "asimd", "asimddp", "sve")


def _cpu_flags() -> list[str]:
    """Which of :data:`KERNEL_FLAGS` the CPU reports (Linux ``/proc/cpuinfo``; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("flags", "features")):
                    have = set(line.split(":", 1)[1].split())
                    return [x for x in KERNEL_FLAGS if x in have]
    except OSError:
        pass
    return []


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def environment_info(cuda_device: int | None = None) -> dict[str, Any]:
    """Where a measurement was taken: host, CPU model and cores, load, library versions and, for a GPU profile,
    the GPU it names (``cuda_device``, its index). Without ``cuda_device`` no CUDA call is made: asking for
    the current device would create a CUDA context on GPU 0 for a CPU profile, and record GPU 0's name for a
    profile that times another GPU."""
    info: dict[str, Any] = {
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": _cpu_model(),
        "cpu_flags": _cpu_flags(),
        "cpu_count": os.cpu_count(),
    }
    try:
        info["loadavg"] = [round(v, 2) for v in os.getloadavg()]
    except OSError:  # pragma: no cover
        pass
    info["versions"] = {d: _version(d) for d in
                        ("latopt", "torch", "onnx", "onnxruntime", "onnxruntime-gpu", "timm", "numpy", "tensorrt")
                        if _version(d) is not None}
    if cuda_device is None:
        return info
    try:
        if torch.cuda.is_available():
            i = int(cuda_device)
            info["gpu"] = torch.cuda.get_device_name(i)
            info["cuda"] = torch.version.cuda
            info["gpu_capability"] = list(torch.cuda.get_device_capability(i))
    except Exception:  # pragma: no cover - environment probing never fails a run
        pass
    return info
