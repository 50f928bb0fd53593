"""The product of every data task: :class:`Task`, three splits of (image tensor 3xRxR, int label),
:func:`limit_task` (every split cut to its first samples, for smoke runs) and :func:`subsample_train` (a seeded
subset of the training split, ``data.train_samples``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from torch.utils.data import Dataset, Subset

from latopt.errors import LatoptError


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

    def sizes(self) -> dict[str, int]:
        return {s: len(getattr(self, s)) for s in ("train", "val", "test")}  # type: ignore[arg-type]


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
