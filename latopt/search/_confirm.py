"""Confirmation of a recommendation on validation data the search did not choose on.

A search study splits its validation data once (:func:`latopt.data.split_validation`, seeded by the search's
``seed``): the *selection* part is what every trial sees as its validation split (the best post-fold epoch,
the objective ``val_acc``, the accuracy-drop constraint, the DP's importance); the *confirmation* part
(``CONFIRM_FRACTION`` of it) is evaluated once per trial, after training, and read only by the recommendation
(:func:`latopt.search.recommend`). Choosing and confirming on the same images is a winner's-curse selection:
the trial that looks best on them looks better than it is.

The base model is not the trials': when latopt trains it (``latopt train``, the run's base stage), its best
epoch is chosen on the whole validation split, the confirmation part included. That can only favour the base
on those images, so the confirmed drop errs high (on the safe side).

A trial's confirmation record is paired: over the ``n`` confirmation images, ``lost`` is how many the base
model classifies right and the trial wrong, ``won`` the reverse. The confirmed drop is ``(lost − won) / n``.

**The bound (a decision).** :func:`drop_bound` is an exact one-sided upper bound on the drop conditional on
the number of discordant images ``d = lost + won`` (the exact McNemar construction): given ``d``, ``lost`` is
Binomial(d, π), π the chance that a disagreement goes against the trial; π's one-sided Clopper-Pearson upper
bound π_U at ``level`` gives the bound ``d / n · (2 π_U − 1)``. Inverted, it is McNemar's exact test of
"drop ≥ max_acc_drop" with the observed disagreement rate. Why this one: it is exact in the one unknown it
bounds, needs two counts, and two networks that agree on every confirmation image get a bound of 0 (what a
fold that changes no prediction deserves). What it does not bound: the chance that the two networks disagree
is taken as observed (``d / n``), not bounded; an unconditional bound (Clopper-Pearson on ``lost``, Wilson,
Newcombe) cannot go below about 3/n even when nothing changed — 1.7 points on quickstart's 180 confirmation
images, more than the default 1-point constraint — so it would confirm no fold at that size. Whether the
bound covers the test drop is measured by a benchmark, not assumed.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from scipy.stats import beta
from torch.utils.data import DataLoader, Dataset

from latopt.accel import Accel
from latopt.data import collate
from latopt.search.record import Confirmation
from latopt.torch_settings import strict_fp32

CONFIRM_FRACTION = 0.5   # of the validation split: the confirmation part (the rest: the selection part)
CONFIRM_LEVEL = 0.95     # one-sided confidence of drop_bound
CONFIRM_METHOD = "exact McNemar (conditional Clopper-Pearson on the discordant images)"


def upper_pi(k: int, d: int, level: float) -> float:
    """One-sided Clopper-Pearson upper bound at ``level`` on a binomial probability from ``k`` of ``d``."""
    if not 0 <= k <= d:
        raise ValueError(f"need 0 <= k <= d, got k={k}, d={d}")
    if d == 0 or k == d:
        return 1.0
    return float(beta.ppf(level, k + 1, d - k))


def drop_bound(lost: int, won: int, n: int, level: float = CONFIRM_LEVEL) -> float:
    """One-sided upper bound at ``level`` on the accuracy drop (base − trial) from paired counts on ``n`` images:
    ``d / n · (2 π_U − 1)`` with ``d = lost + won`` and π_U the Clopper-Pearson bound on ``lost`` of ``d`` (module
    doc); 0 when the two agree on every image, negative when the trial is better beyond the bound."""
    if n <= 0 or lost < 0 or won < 0 or lost + won > n:
        raise ValueError(f"counts lost={lost}, won={won} do not fit {n} images")
    d = lost + won
    return 0.0 if d == 0 else d / n * (2 * upper_pi(lost, d, level) - 1)


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
