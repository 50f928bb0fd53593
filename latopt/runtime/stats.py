"""The one summary of timed calls: median and quartiles (:class:`TimingStats`).

Used by the deploy runner's ``bench`` (:func:`latopt.runtime.bench`) and by the profiler's interleaved timing
(:mod:`latopt.latency.timing` re-exports it), so ``python -m latopt.runtime --bench`` summarises its calls
exactly as the profiler does. Standard library only.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TimingStats:
    """Median and quartiles (ms) of ``n`` timed calls; ``samples_ms[i]`` is the call of round ``i``."""

    median_ms: float
    q1_ms: float
    q3_ms: float
    iqr_ms: float
    n: int
    wall_median_ms: float | None = None  # host wall-clock median when another clock was the primary one
    samples_ms: tuple[float, ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def from_samples(cls, samples: Sequence[float], wall: Sequence[float] | None = None) -> TimingStats:
        """Quartiles by ``statistics.quantiles(method="inclusive")``; one sample is its own median."""
        s = [float(v) for v in samples]
        if not s:
            raise ValueError("no samples")
        wmed = statistics.median(wall) if wall else None
        if len(s) == 1:
            return cls(s[0], s[0], s[0], 0.0, 1, wmed, tuple(s))
        q1, med, q3 = statistics.quantiles(s, n=4, method="inclusive")
        return cls(med, q1, q3, q3 - q1, len(s), wmed, tuple(s))

    def per_round_ratio(self, other: TimingStats) -> TimingStats:
        """Median and quartiles over rounds of t(self) / t(other); both from one interleaved run (sample ``i``
        of each is round ``i``), so each ratio compares two calls made moments apart."""
        return TimingStats.from_samples([x / y for x, y in zip(self.samples_ms, other.samples_ms, strict=True)])

    def to_dict(self) -> dict[str, float | int]:
        d: dict[str, float | int] = {"median_ms": self.median_ms, "q1_ms": self.q1_ms, "q3_ms": self.q3_ms,
                                     "iqr_ms": self.iqr_ms, "n": self.n}
        if self.wall_median_ms is not None:
            d["wall_median_ms"] = self.wall_median_ms
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TimingStats:
        w = d.get("wall_median_ms")
        return cls(float(d["median_ms"]), float(d["q1_ms"]), float(d["q3_ms"]), float(d["iqr_ms"]), int(d["n"]),
                   None if w is None else float(w))

