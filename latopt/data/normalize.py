"""The input normalisation of a task: every task serves images normalised its own way (:attr:`Task.norm`: the
training split's mean/std for the grey tasks, ImageNet's for image folders, CIFAR-10's for ``cifar10``);
``data.normalize`` (a name of :data:`~latopt.constants.NORMALIZE_NAMES` or ``{mean: [3], std: [3]}``, [0, 1]
pixel units) serves them another way instead, the one a network's weights were trained with (a pretrained
network's batch-norm statistics fit its own normalisation). :func:`config_norm` is what a run config asks for
(``null``: what the starting checkpoint, ``model.weights``, records, else the task's own); :func:`renormalize`
wraps each split in :class:`Renormalized`, an exact per-channel affine map from the task's normalisation to the
one asked for (padding filled black stays black)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from latopt.config import RunConfig
from latopt.constants import NORMALIZE_NAMES
from latopt.data.arrays import Batch
from latopt.data.task import Norm, Task
from latopt.errors import LatoptError
from latopt.files.checkpoint import load_checkpoint
from latopt.files.records import Normalize, NormalizeStats, validated


def norm_of(spec: Any) -> Norm | None:
    """The (mean, std) of a ``data.normalize`` value (:data:`latopt.files.records.Normalize`: a name of
    :data:`~latopt.constants.NORMALIZE_NAMES`, or the statistics); ``"task"`` or None: None (the task's own)."""
    if spec is None or spec == "task":
        return None
    if isinstance(spec, str):
        if spec not in NORMALIZE_NAMES:
            raise LatoptError(f"normalize {spec!r} must be task, {', '.join(NORMALIZE_NAMES)} or "
                              "{mean: [m, m, m], std: [s, s, s]}", param="normalize")
        return NORMALIZE_NAMES[spec]
    stats = spec if isinstance(spec, NormalizeStats) else validated(NormalizeStats, spec, prefix="normalize: ")
    return stats.mean, stats.std


def config_norm(cfg: RunConfig) -> Normalize:
    """The normalisation a run config asks for: ``data.normalize`` when set, else the one its starting checkpoint
    (``model.weights``, as ``latopt import --normalize`` or a run records it) carries, else ``"task"``."""
    if cfg.data.normalize is not None:
        return cfg.data.normalize
    weights = cfg.model.weights
    if weights is None or not Path(weights).is_file():   # a missing file is refused where the weights are read
        return "task"
    meta = load_checkpoint(weights)[2]
    return meta.normalize if meta.normalize is not None else "task"


class Renormalized(Dataset):
    """A split normalised with ``norm`` instead of ``task_norm``: ``x * scale + shift`` per channel, where
    ``scale = task std / std`` and ``shift = (task mean − mean) / std``; batched (``__getitems__``) when the split
    is."""

    def __init__(self, ds: Dataset, task_norm: Norm, norm: Norm) -> None:
        (tm, ts), (m, s) = task_norm, norm
        self.ds = ds
        self.scale = torch.tensor([a / b for a, b in zip(ts, s, strict=True)], dtype=torch.float32).view(3, 1, 1)
        self.shift = torch.tensor([(a - b) / c for a, b, c in zip(tm, m, s, strict=True)], dtype=torch.float32).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.ds)  # type: ignore[arg-type]

    def _map(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + self.shift

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x, y = self.ds[i]
        return self._map(x), y

    def __getitems__(self, indices: Sequence[int]) -> Batch | list:
        get = getattr(self.ds, "__getitems__", None)
        if get is None:
            return [self[int(i)] for i in indices]
        got = get(indices)
        if isinstance(got, Batch):
            return Batch(self._map(got.x), got.y)
        return [(self._map(x), y) for x, y in got]


def renormalize(task: Task, spec: Any) -> Task:
    """``task`` served with the normalisation ``spec`` names (:func:`norm_of`; ``task`` or None: as it is)."""
    norm = norm_of(spec)
    if norm is None or norm == task.norm:
        return task
    if task.norm is None:
        raise LatoptError(f"task {task.name!r} does not say how it normalises its images, so it cannot be served "
                          "with another normalisation; leave data.normalize at task", param="normalize")
    return replace(task, train=Renormalized(task.train, task.norm, norm), val=Renormalized(task.val, task.norm, norm),
                   test=Renormalized(task.test, task.norm, norm), norm=norm)


__all__ = ["Norm", "Renormalized", "config_norm", "norm_of", "renormalize"]
