"""The product of every data task: :class:`Task`, three splits of (image tensor 3xRxR, int label), and
:func:`limit_task` (every split cut to its first samples, for smoke runs)."""

from __future__ import annotations

from dataclasses import dataclass

from torch.utils.data import Dataset, Subset


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

    def sizes(self) -> dict[str, int]:
        return {s: len(getattr(self, s)) for s in ("train", "val", "test")}  # type: ignore[arg-type]


def limit_task(task: Task, max_samples: int | None) -> Task:
    """The same task with every split cut to its first ``max_samples`` samples (None = unchanged)."""
    if max_samples is None:
        return task

    def cut(ds: Dataset) -> Dataset:
        n = len(ds)  # type: ignore[arg-type]
        return ds if n <= max_samples else Subset(ds, range(max_samples))

    return Task(task.name, task.num_classes, task.classes, task.resolution, cut(task.train), cut(task.val),
                cut(task.test))
