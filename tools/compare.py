"""The statistics of docs/evaluation.md: paired bootstrap intervals over seeds and test items, the ±margin
verdict, and dominance checked both ways. Used by the benchmarks' reports (tools/bench_methods.py) and by
tools/regenerate.py; numpy only.

A *method's result* is, per seed, a boolean vector: which test items the exported network got right. Two
methods of one seed started from the same base, so their difference is paired. Test items come in
*groups* that are not independent (digits-clutter: the 3 canvases of one source digit); the bootstrap
resamples whole groups.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

N_BOOT = 10_000
BOOT_SEED = 0          # the resampling is deterministic: the same data give the same interval everywhere
MIN_SEEDS = 5          # with fewer seeds no interval is claimed (per-seed values are shown instead)
MARGIN = 0.01          # ±1 point of accuracy, fixed before the runs
MATCH_TOL = 0.03       # speed-ups within ±3 % in the final run count as equal latency


def pack_bits(correct: Sequence[bool] | np.ndarray) -> str:
    """A boolean vector as hex (for results/ JSON): ``unpack_bits(pack_bits(v), len(v)) == v``."""
    return np.packbits(np.asarray(correct, dtype=bool)).tobytes().hex()


def unpack_bits(hexstr: str, n: int) -> np.ndarray:
    bits = np.unpackbits(np.frombuffer(bytes.fromhex(hexstr), dtype=np.uint8))
    if len(bits) < n or bits[n:].any():
        raise ValueError(f"a packed vector of {len(bits)} bits cannot hold {n} items")
    return bits[:n].astype(bool)


@dataclass(frozen=True)
class Interval:
    """The mean paired difference (a − b, accuracy as a fraction) and its percentile interval; ``lo``/``hi``
    are None when fewer than :data:`MIN_SEEDS` seeds are paired (then ``per_seed`` is what is shown)."""

    mean: float
    lo: float | None
    hi: float | None
    seeds: tuple[int, ...]
    per_seed: tuple[float, ...]

    def verdict(self, margin: float = MARGIN) -> str:
        """``better`` (lo > +m), ``worse`` (hi < −m), ``as accurate`` (inside [−m, +m]), ``not worse``
        (lo ≥ −m, hi > +m), ``not better`` (hi ≤ +m, lo < −m), ``not resolved`` (wider than both), or ``no
        interval`` (too few seeds)."""
        if self.lo is None or self.hi is None:
            return "no interval"
        if self.lo > margin:
            return "better"
        if self.hi < -margin:
            return "worse"
        if self.lo >= -margin and self.hi <= margin:
            return "as accurate"
        if self.lo >= -margin:
            return "not worse"
        if self.hi <= margin:
            return "not better"
        return "not resolved"

    def non_inferior(self, margin: float = MARGIN) -> bool:
        """"As accurate or better" by the margin rule: the interval's lower end is ≥ −margin."""
        return self.lo is not None and self.lo >= -margin

    def text(self) -> str:
        """Points of accuracy: ``+1.23 [−0.40, +2.85]`` (or the per-seed values when there is no interval)."""
        if self.lo is None or self.hi is None:
            return f"{100 * self.mean:+.2f} (seeds: " + ", ".join(f"{100 * d:+.2f}" for d in self.per_seed) + ")"
        return f"{100 * self.mean:+.2f} [{100 * self.lo:+.2f}, {100 * self.hi:+.2f}]"


def paired_bootstrap(a: Mapping[int, np.ndarray], b: Mapping[int, np.ndarray], group: int = 1,
                     n_boot: int = N_BOOT, seed: int = BOOT_SEED, min_seeds: int = MIN_SEEDS) -> Interval:
    """The mean over seeds of acc(a) − acc(b) with a 95 % percentile interval from a two-level bootstrap:
    resample the seeds, then within each drawn seed resample its test groups (``group`` consecutive items
    form one group: the canvases of one source digit). ``a``/``b``: per seed, per test item, correct or not."""
    seeds = tuple(sorted(set(a) & set(b)))
    if not seeds:
        raise ValueError("no seed has both results: nothing to pair")
    diffs = []
    for s in seeds:
        x, y = np.asarray(a[s], dtype=float), np.asarray(b[s], dtype=float)
        if x.shape != y.shape or x.size % group:
            raise ValueError(f"seed {s}: {x.size} and {y.size} items cannot be paired in groups of {group}")
        diffs.append((x - y).reshape(-1, group).mean(1))
    d = np.stack(diffs)                                  # seeds × groups
    per_seed = tuple(float(v) for v in d.mean(1))
    mean = float(d.mean())
    if len(seeds) < min_seeds:
        return Interval(mean, None, None, seeds, per_seed)
    rng = np.random.default_rng(seed)
    n_s, n_g = d.shape
    stats = np.empty(n_boot)
    chunk = 500
    for i in range(0, n_boot, chunk):
        k = min(chunk, n_boot - i)
        si = rng.integers(0, n_s, size=(k, n_s))
        gi = rng.integers(0, n_g, size=(k, n_s, n_g))
        stats[i:i + k] = d[si[:, :, None], gi].mean(axis=(1, 2))
    lo, hi = np.quantile(stats, [0.025, 0.975])
    return Interval(mean, float(lo), float(hi), seeds, per_seed)


def at_least_as_fast(speedup_a: float, speedup_b: float, tol: float = MATCH_TOL) -> bool:
    """A is at least as fast as B within the latency match: s(A) ≥ s(B) × (1 − tol)."""
    return speedup_a >= speedup_b * (1 - tol)


def dominates(speedup_a: float, speedup_b: float, diff: Interval, margin: float = MARGIN,
              tol: float = MATCH_TOL) -> bool:
    """A dominates B: at least as fast (within ``tol``) and as accurate or better (``diff`` = A − B is
    non-inferior by ``margin``). Apply it both ways (the other way is B against A with B − A's interval);
    both or neither can hold."""
    return at_least_as_fast(speedup_a, speedup_b, tol) and diff.non_inferior(margin)


def median_ci(samples: Sequence[float] | np.ndarray, n_boot: int = N_BOOT, seed: int = BOOT_SEED
              ) -> tuple[float, float, float]:
    """The median of ``samples`` (e.g. per-round time ratios of one interleaved run) and a 95 % percentile
    bootstrap interval of it: (median, lo, hi)."""
    x = np.asarray(samples, dtype=float)
    if x.size == 0:
        raise ValueError("no samples")
    rng = np.random.default_rng(seed)
    meds = np.empty(n_boot)
    chunk = 1000
    for i in range(0, n_boot, chunk):
        k = min(chunk, n_boot - i)
        meds[i:i + k] = np.median(x[rng.integers(0, x.size, size=(k, x.size))], axis=1)
    lo, hi = np.quantile(meds, [0.025, 0.975])
    return float(np.median(x)), float(lo), float(hi)


def hypervolume(points: Sequence[tuple[float, float]], ref: tuple[float, float] = (1.0, 0.0)) -> float:
    """The area dominated by ``points`` = (speed-up, accuracy), both to be maximised, above ``ref`` (the
    protocol's reference: the as-is latency, speed-up 1, and accuracy 0). Points not beyond ``ref`` in both
    coordinates add nothing."""
    pts = sorted(((s, a) for s, a in points if s > ref[0] and a > ref[1]), key=lambda p: -p[0])
    area, best_a = 0.0, ref[1]
    for s, a in pts:                # sweep from the fastest point down: each adds its strip above the best so far
        if a > best_a:
            area += (s - ref[0]) * (a - best_a)
            best_a = a
    return area


def paired_hv_bootstrap(a: Mapping[int, Mapping[str, tuple[float, np.ndarray]]],
                        b: Mapping[int, Mapping[str, tuple[float, np.ndarray]]], group: int = 1,
                        ref: tuple[float, float] = (1.0, 0.0), n_boot: int = N_BOOT, seed: int = BOOT_SEED,
                        min_seeds: int = MIN_SEEDS) -> Interval:
    """Hypervolume of front A minus that of front B, paired by seed, with the two-level bootstrap of
    :func:`paired_bootstrap` (seeds, then test groups: one draw of groups re-scores every point of both
    fronts of that seed). ``a[seed][point] = (speed-up, per-item correctness)``."""
    seeds = tuple(sorted(set(a) & set(b)))
    if not seeds:
        raise ValueError("no seed has both fronts")

    def grouped(front: Mapping[str, tuple[float, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        sp = np.array([s for s, _ in front.values()])
        acc = np.stack([np.asarray(c, dtype=float).reshape(-1, group).mean(1) for _, c in front.values()])
        return sp, acc                                       # points, points × groups

    fa = {s: grouped(a[s]) for s in seeds}
    fb = {s: grouped(b[s]) for s in seeds}

    def hv_diff(s: int, idx: np.ndarray | None) -> float:
        (spa, ga), (spb, gb) = fa[s], fb[s]
        acc_a = ga.mean(1) if idx is None else ga[:, idx].mean(1)
        acc_b = gb.mean(1) if idx is None else gb[:, idx].mean(1)
        return hypervolume(list(zip(spa, acc_a, strict=True))) - hypervolume(list(zip(spb, acc_b, strict=True)))

    per_seed = tuple(float(hv_diff(s, None)) for s in seeds)
    mean = float(np.mean(per_seed))
    if len(seeds) < min_seeds:
        return Interval(mean, None, None, seeds, per_seed)
    rng = np.random.default_rng(seed)
    n_g = fa[seeds[0]][1].shape[1]
    stats = np.empty(n_boot)
    for i in range(n_boot):
        drawn = rng.integers(0, len(seeds), size=len(seeds))
        stats[i] = np.mean([hv_diff(seeds[j], rng.integers(0, n_g, size=n_g)) for j in drawn])
    lo, hi = np.quantile(stats, [0.025, 0.975])
    return Interval(mean, float(lo), float(hi), seeds, per_seed)
