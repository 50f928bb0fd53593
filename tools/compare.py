"""The statistics of docs/evaluation.md: paired intervals over seeds and test items (a crossed design), the
±margin verdict, dominance checked both ways with Holm's correction over challengers, and fronts. Used by the
benchmarks' reports (tools/bench_methods.py, tools/bench_devices.py) and by tools/regenerate.py.

A *method's result* is, per seed, a boolean vector: which test items the exported network got right. Two
methods of one seed started from the same base, so their difference is paired. Every seed is tested on the
same items: seeds and items are *crossed*, and an item that is hard for one method is hard for it on every
seed. Test items come in *groups* that are not independent (digits-clutter: the 3 canvases of one source
digit); resampling draws whole groups.

The interval of a statistic T (a mean accuracy difference, a hypervolume difference) is a **seed-t interval
with the crossed item variance** (:func:`crossed_t`): mean over seeds ± t(0.975, S − 1) × se, where

    se² = var(T_s over seeds) / S  +  max(0, (S · A − B) / (S − 1)).

The first term (the seed-t) holds the seeds' variance and the item noise that differs between seeds. The
second is the variance that the items shared by all seeds add: A is the variance of the seeds' mean under
resampling the groups *once for all seeds* (crossed resampling), B the mean over seeds of each seed's variance
under the same draws; (S · A − B)/(S − 1) is the shared part (for a mean: σ²_item / items, as in the crossed
two-way ANOVA). For a mean the resampling variances are computed exactly; for a hypervolume by
:data:`N_ITEM_DRAWS` shared draws. t with S − 1 degrees of freedom is conservative where the shared items
dominate. tests/test_compare_crossed.py simulates a crossed design and checks the coverage.

Dominance (:func:`dominates`, :func:`duel`): A dominates B when it is at least as fast within the latency
match and non-inferior by the margin; a point with several challengers takes Holm's correction over them
(:func:`holm` on :meth:`Interval.p_non_inferior`); two points that dominate each other are *equivalent*, a
win for neither; only points on their own family's front (:func:`on_own_front`) are counted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st

N_ITEM_DRAWS = 2_000   # shared draws of the test groups, when a statistic's item variance has no formula
BOOT_SEED = 0          # the resampling is deterministic: the same data give the same interval everywhere
MIN_SEEDS = 5          # with fewer seeds no interval is claimed (per-seed values are shown instead)
MARGIN = 0.01          # ±1 point of accuracy, fixed before the runs
MATCH_TOL = 0.03       # speed-ups within ±3 % in the final run count as equal latency
LEVEL = 0.95           # two-sided; a non-inferiority claim is the one-sided test at (1 − LEVEL) / 2


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
    """The mean over seeds of a paired difference (a − b; accuracy as a fraction) and its 95 % interval
    (:func:`crossed_t`); ``lo``/``hi``/``se``/``df`` are None when fewer than :data:`MIN_SEEDS` seeds are paired
    (then ``per_seed`` is what is shown)."""

    mean: float
    lo: float | None
    hi: float | None
    seeds: tuple[int, ...]
    per_seed: tuple[float, ...]
    se: float | None = None
    df: int | None = None

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

    def p_non_inferior(self, margin: float = MARGIN) -> float | None:
        """The one-sided p-value of "a − b ≤ −margin" (t with ``df``): at most (1 − LEVEL)/2 exactly when
        :meth:`non_inferior`; None without an interval."""
        if self.se is None or self.df is None:
            return None
        if self.se == 0:
            return 0.0 if self.mean >= -margin else 1.0
        return float(_st.t.sf((self.mean + margin) / self.se, self.df))

    def text(self) -> str:
        """Points of accuracy: ``+1.23 [−0.40, +2.85]`` (or the per-seed values when there is no interval)."""
        if self.lo is None or self.hi is None:
            return f"{100 * self.mean:+.2f} (seeds: " + ", ".join(f"{100 * d:+.2f}" for d in self.per_seed) + ")"
        return f"{100 * self.mean:+.2f} [{100 * self.lo:+.2f}, {100 * self.hi:+.2f}]"


def t_interval(values: Sequence[float] | np.ndarray, extra_var: float = 0.0, level: float = LEVEL
               ) -> tuple[float, float, float, float, int]:
    """(mean, lo, hi, se, df): the t interval of the mean of ``values`` (one per replicate: seed, run), with
    ``extra_var`` added to the squared standard error (the crossed item variance of :func:`crossed_t`)."""
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        raise ValueError(f"a t interval needs at least 2 replicates, got {x.size}")
    mean, df = float(x.mean()), x.size - 1
    se = math.sqrt(float(x.var(ddof=1)) / x.size + max(0.0, extra_var))
    q = float(_st.t.ppf(0.5 + level / 2, df))
    return mean, mean - q * se, mean + q * se, se, df


def crossed_t(per_seed: Sequence[float], shared_var: float, own_var: float, seeds: tuple[int, ...],
              min_seeds: int = MIN_SEEDS) -> Interval:
    """The module's interval from the per-seed statistics and the crossed resampling's two variances:
    ``shared_var`` (A: of the seeds' mean, the groups drawn once for all seeds) and ``own_var`` (B: the mean over
    seeds of each seed's variance under the same draws). See the module's docstring."""
    t = tuple(float(v) for v in per_seed)
    mean = float(np.mean(t))
    if len(t) < min_seeds:
        return Interval(mean, None, None, seeds, t)
    s = len(t)
    m, lo, hi, se, df = t_interval(t, (s * shared_var - own_var) / (s - 1))
    return Interval(m, lo, hi, seeds, t, se, df)


def _paired_groups(a: Mapping[int, np.ndarray], b: Mapping[int, np.ndarray], group: int
                   ) -> tuple[tuple[int, ...], np.ndarray]:
    """The seeds both have and their per-group differences (seeds × groups)."""
    seeds = tuple(sorted(set(a) & set(b)))
    if not seeds:
        raise ValueError("no seed has both results: nothing to pair")
    diffs = []
    for s in seeds:
        x, y = np.asarray(a[s], dtype=float), np.asarray(b[s], dtype=float)
        if x.shape != y.shape or x.size % group:
            raise ValueError(f"seed {s}: {x.size} and {y.size} items cannot be paired in groups of {group}")
        diffs.append((x - y).reshape(-1, group).mean(1))
    if len({d.size for d in diffs}) > 1:
        raise ValueError("the seeds were tested on different numbers of items: not a crossed design")
    return seeds, np.stack(diffs)


def paired_interval(a: Mapping[int, np.ndarray], b: Mapping[int, np.ndarray], group: int = 1,
                    min_seeds: int = MIN_SEEDS) -> Interval:
    """The mean over seeds of acc(a) − acc(b) with its 95 % crossed seed-t interval (:func:`crossed_t`; the
    resampling variances of a mean are exact: var(group means) / groups). ``a``/``b``: per seed, per test item
    (the same items for every seed), correct or not; ``group`` consecutive items form one group."""
    seeds, d = _paired_groups(a, b, group)
    n_g = d.shape[1]
    shared = float(d.mean(0).var()) / n_g                   # A: the seeds' mean, groups drawn once for all
    own = float(d.var(axis=1).mean()) / n_g                  # B: each seed's own, under the same draws
    return crossed_t(d.mean(1), shared, own, seeds, min_seeds)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (same order as given): reject where adjusted ≤ α controls the
    family-wise error at α over the hypotheses given."""
    p = np.asarray(pvalues, dtype=float)
    order = np.argsort(p, kind="stable")
    k = p.size
    adj = np.empty(k)
    run = 0.0
    for rank, i in enumerate(order):
        run = max(run, min(1.0, (k - rank) * p[i]))
        adj[i] = run
    return adj.tolist()


def at_least_as_fast(speedup_a: float, speedup_b: float, tol: float = MATCH_TOL) -> bool:
    """A is at least as fast as B within the latency match: s(A) ≥ s(B) × (1 − tol)."""
    return speedup_a >= speedup_b * (1 - tol)


def dominates(speedup_a: float, speedup_b: float, diff: Interval, margin: float = MARGIN,
              tol: float = MATCH_TOL, p_adjusted: float | None = None) -> bool:
    """A dominates B: at least as fast (within ``tol``) and as accurate or better (``diff`` = A − B is
    non-inferior by ``margin``; with ``p_adjusted``, A's Holm-adjusted non-inferiority p-value among B's
    challengers, that p-value is ≤ (1 − LEVEL)/2 instead). Apply it both ways (the other way is B against A
    with B − A's interval): when both hold the two points are *equivalent*, not one better (:func:`duel`)."""
    if not at_least_as_fast(speedup_a, speedup_b, tol):
        return False
    if p_adjusted is None:
        return diff.non_inferior(margin)
    return p_adjusted <= (1 - LEVEL) / 2


def duel(speedup_a: float, speedup_b: float, a_minus_b: Interval, b_minus_a: Interval,
         margin: float = MARGIN, tol: float = MATCH_TOL, p_adjusted: float | None = None) -> str:
    """B against challenger A: ``dominated`` (A dominates B and not the other way), ``equivalent`` (each
    dominates the other: same latency within the match, accuracy within the margin), or ``no``."""
    if not dominates(speedup_a, speedup_b, a_minus_b, margin, tol, p_adjusted):
        return "no"
    return "equivalent" if dominates(speedup_b, speedup_a, b_minus_a, margin, tol) else "dominated"


def on_own_front(points: Mapping[str, tuple[float, float]]) -> set[str]:
    """The names of ``points`` = {name: (speed-up, accuracy)} on their own family's front: no other point of
    the family is at least as fast and at least as accurate, better in one (point estimates). A point off its
    own front is one its own method would not pick, so it is not counted in dominance."""
    out = set()
    for n, (s, a) in points.items():
        if not any(s2 >= s and a2 >= a and (s2 > s or a2 > a) for m, (s2, a2) in points.items() if m != n):
            out.add(n)
    return out


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


Front = Mapping[int, Mapping[str, tuple[float, np.ndarray]]]   # seed -> point -> (speed-up, per-item correctness)


def paired_hv_interval(a: Front, b: Front, group: int = 1,
                       ref: tuple[float, float] | Mapping[int, tuple[float, float]] = (1.0, 0.0),
                       n_draws: int = N_ITEM_DRAWS, seed: int = BOOT_SEED, min_seeds: int = MIN_SEEDS,
                       accuracy: Callable[[np.ndarray], np.ndarray] | None = None) -> Interval:
    """Hypervolume of front A minus that of front B, paired by seed, with the crossed seed-t interval of
    :func:`crossed_t`: ``n_draws`` draws of the test groups, each shared by every seed and re-scoring every
    point of both fronts. ``a[seed][point] = (speed-up, per-item correctness)``; ``ref``: one reference
    point, or one per seed (held fixed in the resampling). ``accuracy`` maps a point's per-group accuracies
    (groups × draws) to the accuracy used (default: as measured; an exploratory reading sets it to 1)."""
    seeds = tuple(sorted(set(a) & set(b)))
    if not seeds:
        raise ValueError("no seed has both fronts")
    refs = {s: (ref[s] if isinstance(ref, Mapping) else ref) for s in seeds}

    def grouped(front: Mapping[str, tuple[float, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        sp = np.array([s for s, _ in front.values()])
        acc = np.stack([np.asarray(c, dtype=float).reshape(-1, group).mean(1) for _, c in front.values()])
        return sp, acc                                       # points, points × groups

    fa = {s: grouped(a[s]) for s in seeds}
    fb = {s: grouped(b[s]) for s in seeds}
    n_g = {fa[s][1].shape[1] for s in seeds} | {fb[s][1].shape[1] for s in seeds}
    if len(n_g) > 1:
        raise ValueError("the seeds' points were tested on different numbers of items: not a crossed design")
    n_g = n_g.pop()

    def hv(sp: np.ndarray, acc: np.ndarray, r: tuple[float, float]) -> float:
        if accuracy is not None:
            acc = accuracy(acc)
        return hypervolume(list(zip(sp, acc, strict=True)), r)

    def hv_diff(s: int, idx: np.ndarray | None) -> float:
        (spa, ga), (spb, gb) = fa[s], fb[s]
        acc_a = ga.mean(1) if idx is None else ga[:, idx].mean(1)
        acc_b = gb.mean(1) if idx is None else gb[:, idx].mean(1)
        return hv(spa, acc_a, refs[s]) - hv(spb, acc_b, refs[s])

    per_seed = [hv_diff(s, None) for s in seeds]
    if len(seeds) < min_seeds:
        return crossed_t(per_seed, 0.0, 0.0, seeds, min_seeds)
    rng = np.random.default_rng(seed)
    draws = np.empty((n_draws, len(seeds)))
    for i in range(n_draws):
        idx = rng.integers(0, n_g, size=n_g)                 # one draw of groups for every seed: crossed
        draws[i] = [hv_diff(s, idx) for s in seeds]
    return crossed_t(per_seed, float(draws.mean(1).var()), float(draws.var(axis=0).mean()), seeds, min_seeds)
