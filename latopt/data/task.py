"""The product of every data task: :class:`Task`, three splits of (image tensor 3xRxR, int label),
:func:`limit_task` (every split cut to its first samples, for smoke runs), :func:`subsample_train` (a seeded
subset of the training split, ``data.train_samples``) and :func:`split_validation` (the validation split cut
into a selection part and a confirmation part, for a search's recommendation)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from torch.utils.data import Dataset, Subset

from latopt.errors import LatoptError

Norm = tuple[tuple[float, float, float], tuple[float, float, float]]   # (mean, std) per channel, [0, 1] pixels


@dataclass
class Task:
    """A classification task: three splits of (image tensor 3xRxR, int label)."""

    name: str  # the spec, e.g. "digits" or "imagefolder:/data/x"
    num_classes: int
    classes: list[str]
    resolution: int
    train: Dataset
    val: Dataset
    test: Dataset
    split: str = ""  # how the splits were made, where the task says (recorded in metrics.json)
    norm: Norm | None = None  # how its images are normalised: (mean, std) per channel of [0, 1] pixels

    def sizes(self) -> dict[str, int]:
        return {s: len(getattr(self, s)) for s in ("train", "val", "test")}


def limit_task(task: Task, max_samples: int | None) -> Task:
    """The same task with every split cut to its first ``max_samples`` samples (None = unchanged)."""
    if max_samples is None:
        return task

    def cut(ds: Dataset) -> Dataset:
        n = len(ds)  # type: ignore[arg-type]
        return ds if n <= max_samples else Subset(ds, range(max_samples))

    return replace(task, train=cut(task.train), val=cut(task.val), test=cut(task.test))


def subsample_train(task: Task, n: int | None, seed: int) -> Task:
    """The same task with the training split cut to ``n`` of its samples, drawn by a permutation seeded by
    ``seed`` (kept in their order); validation and test unchanged (None = unchanged)."""
    if n is None:
        return task
    total = len(task.train)  # type: ignore[arg-type]
    if n > total:
        raise LatoptError(f"data.train_samples {n} exceeds the {total} images of {task.name}'s training split; "
                          f"give at most {total} (or null for all)", param="train_samples")
    keep = np.sort(np.random.default_rng([seed, 1]).permutation(total)[:n])
    return replace(task, train=Subset(task.train, keep.tolist()))


def split_validation(task: Task, fraction: float, seed: int) -> tuple[Task, Dataset, dict[str, Any]]:
    """The validation split cut in two, deterministically: (the task with ``val`` = the *selection* part, the
    *confirmation* part, what was done). ``round(fraction * n)`` of the ``n`` validation samples, drawn by a
    permutation seeded by ``seed`` (stream ``[seed, 2]``; ``subsample_train`` draws from ``[seed, 1]``), are the
    confirmation part; the rest, in their order, the selection part. The split depends on ``n``, ``fraction`` and
    ``seed`` only (not stratified); the record holds them, both sizes and the SHA-256 of the confirmation indices.
    Both parts must be non-empty."""
    n = len(task.val)  # type: ignore[arg-type]
    k = round(float(fraction) * n)
    if not 0 < k < n:
        raise LatoptError(f"the validation split of {task.name} has {n} images: too few to hold out "
                          f"{fraction:g} of it for confirmation and keep the rest; give a task with a larger "
                          "validation split", param="val")
    perm = np.random.default_rng([seed, 2]).permutation(n)
    confirm, select = np.sort(perm[:k]), np.sort(perm[k:])
    info = {"fraction": float(fraction), "seed": int(seed), "n_validation": n, "n_selection": n - k,
            "n_confirmation": k,
            "confirmation_sha256": hashlib.sha256(confirm.astype("<i8").tobytes()).hexdigest()}
    return replace(task, val=Subset(task.val, select.tolist())), Subset(task.val, confirm.tolist()), info
