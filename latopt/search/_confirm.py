"""Confirmation of a recommendation on validation data the search did not choose on.

A search study splits its validation data once (:func:`latopt.data.split_validation`, seeded by the search's
``seed``): the *selection* part is what every trial sees as its validation split (the best post-fold epoch,
the objective ``val_acc``, the accuracy-drop constraint, the DP's importance); the *confirmation* part
(``CONFIRM_FRACTION`` of it) is evaluated once per trial, after training, and read only by the recommendation
(:func:`latopt.search.recommend`). Choosing and confirming on the same images is a winner's-curse selection:
the trial that looks best on them looks better than it is.

The base model keeps its best epoch (``train.keep_best``) on the selection part too: :func:`latopt.training.base_training.train_base`
cuts the split with its own seed, the seed the run's search (and a search that trains its base) cuts it with. A
base chosen on all of the validation split is optimistic on exactly the confirmation images (about a point of
confirmed drop in a measured case: ``results/pilots/2026-12-04-dp-quickstart.md``); a base given with ``--base``
and trained with another seed is, and its confirmed drops err high.

A trial's confirmation record is paired: over the ``n`` confirmation images, ``lost`` is how many the base
model classifies right and the trial wrong, ``won`` the reverse. The confirmed drop is ``(lost − won) / n``.

**The bound (a decision).** :func:`drop_bound` is an exact *unconditional* one-sided upper confidence bound on the
drop δ = p_L − p_W (p_L: the chance that an image is lost, p_W: won), the inversion of the test of "δ ≥ Δ" that
rejects for small ``lost − won``. Its p-value is the largest tail probability P(L − W ≤ lost − won) over the
nuisance parameter, the disagreement rate π = p_L + p_W, restricted to a one-sided Clopper-Pearson set for π at
level 1 − γ, plus γ (Berger and Boos 1994; γ = :data:`GAMMA_SHARE` of α): valid whatever π is, one-sided
disagreements (a candidate that only loses images) included, where the conditional exact McNemar bound (which
took π as observed) covered only about half the time. ``tests/test_confirm.py`` checks the coverage by exact
enumeration. Even two networks that agree on every image get a bound above 0, about 4/n (n = 180: 2.2 points):
:func:`floor` is that bound, the least a confirmation part of n images can confirm
(:func:`check_power` refuses a constraint below it before any training).

**Several candidates (a decision).** The recommendation confirms candidates in a *fixed sequence*: those within
the constraint on the selection part that no other such candidate beats on both selection accuracy and latency,
from the slowest to the fastest (a set and an order made without the confirmation images), each at the full level; the sequence stops at the first candidate not confirmed, and the fastest confirmed
before it is recommended. The chance that any shipped candidate's drop exceeds its bound is then at most α, however
many candidates there are (a fixed-sequence procedure controls the family-wise error at α).
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import numpy as np
import torch
from scipy.stats import beta, binom
from torch.utils.data import DataLoader, Dataset

from latopt.data import collate
from latopt.errors import LatoptError
from latopt.search.study_record import Confirmation
from latopt.training.accel import Accel
from latopt.training.torch_settings import strict_fp32

CONFIRM_LEVEL = 0.95     # one-sided confidence of drop_bound
GAMMA_SHARE = 0.1        # of α: the Berger-Boos restriction of the disagreement rate
CONFIRM_METHOD = ("exact unconditional bound on the paired drop (Berger-Boos, disagreement rate restricted at "
                  "0.1 α); candidates in a fixed sequence, slowest first")
_GRID = 48               # disagreement rates tried for the supremum, besides the ends of the set
_TOL = 1e-6              # the bound's precision (a fraction of accuracy)


def upper_pi(k: int, d: int, level: float) -> float:
    """One-sided Clopper-Pearson upper bound at ``level`` on a binomial probability from ``k`` of ``d``."""
    if not 0 <= k <= d:
        raise ValueError(f"need 0 <= k <= d, got k={k}, d={d}")
    if d == 0 or k == d:
        return 1.0
    return float(beta.ppf(level, k + 1, d - k))


def _tail(t: int, n: int, delta: float, pi: float) -> float:
    """P(L − W <= t) when (L, W, rest) ~ Multinomial(n; p_L, p_W, 1 − π), p_L − p_W = ``delta``, p_L + p_W = ``pi``:
    the number of disagreements D ~ Binomial(n, π), and given D = k, L ~ Binomial(k, p_L / π)."""
    if pi <= 0.0:
        return 1.0 if t >= 0 else 0.0
    k = np.arange(n + 1)
    q = min(1.0, max(0.0, (pi + delta) / (2.0 * pi)))
    return float(np.sum(binom.pmf(k, n, min(pi, 1.0)) * binom.cdf(np.floor((t + k) / 2.0), k, q)))


def _p_value(t: int, n: int, delta: float, pi_hi: float, gamma: float) -> float:
    """The Berger-Boos p-value of "drop >= delta" at the observed ``t = lost − won``: γ plus the largest tail over
    the disagreement rates π in [|delta|, pi_hi] (π below |delta| is impossible; an empty set gives γ)."""
    lo = abs(delta)
    if lo > pi_hi:
        return gamma
    pis = np.unique(np.concatenate([np.linspace(lo, pi_hi, _GRID), np.geomspace(max(lo, 1e-9), pi_hi, _GRID)
                                    if pi_hi > 0 else [0.0], [lo, pi_hi]]))
    return gamma + max(_tail(t, n, delta, float(p)) for p in pis)


@functools.lru_cache(maxsize=4096)
def drop_bound(lost: int, won: int, n: int, level: float = CONFIRM_LEVEL) -> float:
    """One-sided upper bound at ``level`` on the accuracy drop (base − trial) from paired counts on ``n`` images: the
    largest drop Δ that the exact unconditional test (module doc) does not reject; negative when the trial is
    better beyond the bound."""
    if n <= 0 or lost < 0 or won < 0 or lost + won > n:
        raise ValueError(f"counts lost={lost}, won={won} do not fit {n} images")
    alpha = 1.0 - level
    gamma = GAMMA_SHARE * alpha
    t, d = lost - won, lost + won
    pi_hi = 1.0 if d == n else float(beta.ppf(1.0 - gamma, d + 1, n - d))   # Clopper-Pearson, one-sided
    inside, outside = t / n, 1.0 + _TOL     # the observed drop is in the confidence set; above 1 nothing is
    if _p_value(t, n, inside, pi_hi, gamma) <= alpha:   # (only when the disagreements are implausibly few)
        return inside
    while outside - inside > _TOL:
        mid = (inside + outside) / 2.0
        if _p_value(t, n, mid, pi_hi, gamma) > alpha:
            inside = mid
        else:
            outside = mid
    return min(1.0, inside)


def floor(n: int, level: float = CONFIRM_LEVEL) -> float:
    """The bound of a candidate that changes no prediction on ``n`` images: the least drop ``n`` images confirm."""
    return drop_bound(0, 0, n, level)


def images_for(max_acc_drop: float, level: float = CONFIRM_LEVEL) -> int:
    """The fewest confirmation images whose :func:`floor` is within ``max_acc_drop``."""
    n = max(1, int(3.0 / max(max_acc_drop, 1e-6)))
    while floor(n, level) > max_acc_drop:
        n = int(n * 1.1) + 1
    lo, hi = n // 2, n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if floor(mid, level) > max_acc_drop else (lo, mid)
    return hi


def check_power(n: int, max_acc_drop: float, level: float = CONFIRM_LEVEL) -> None:
    """One line, before any training, when ``n`` confirmation images cannot confirm ``max_acc_drop`` even for a
    candidate that changes no prediction: what would (the constraint, or the images)."""
    least = floor(n, level)
    if least > max_acc_drop + 1e-12:
        raise LatoptError(
            f"the confirmation part has {n} images: even a network that changes no prediction gets a bound of "
            f"{least:.2%} on its drop, above the constraint {max_acc_drop:.2%}, so nothing could be shipped; give "
            f"search.max_acc_drop >= {least:.4f}, or a validation split with {images_for(max_acc_drop, level)} "
            "confirmation images (half the validation split)", param="max_acc_drop")


def confirm(lost: int, won: int, n: int, max_acc_drop: float, level: float = CONFIRM_LEVEL) -> Confirmation:
    """The confirmation of one trial: its drop, the bound and whether the bound is within ``max_acc_drop``."""
    bound = drop_bound(lost, won, n, level)
    return Confirmation(n=n, lost=lost, won=won, drop=(lost - won) / n, bound=bound, level=level,
                        passed=bound <= float(max_acc_drop) + 1e-12)


@torch.no_grad()
def correct(model: torch.nn.Module, data: Dataset, accel: Accel, batch_size: int) -> np.ndarray:
    """Per image of ``data``, in order: does ``model`` (a copy, on ``accel``'s device, float32) classify it right."""
    net = accel.prepare(copy.deepcopy(model)).eval()
    out = []
    with strict_fp32():
        for x, y in DataLoader(data, batch_size=max(batch_size, 256), shuffle=False, collate_fn=collate):
            x, y = accel.batch(x, y)
            out.append((net(x).argmax(1) == y).cpu())
    return torch.cat(out).numpy()


def paired_counts(base_ok: np.ndarray, trial_ok: np.ndarray) -> dict[str, Any]:
    """The trial's confirmation record from per-image correctness: ``n``, ``lost``, ``won``, both accuracies."""
    n = int(base_ok.size)
    return {"confirm_n": n, "confirm_lost": int(np.sum(base_ok & ~trial_ok)),
            "confirm_won": int(np.sum(~base_ok & trial_ok)), "confirm_acc": float(trial_ok.mean()),
            "confirm_base_acc": float(base_ok.mean())}
