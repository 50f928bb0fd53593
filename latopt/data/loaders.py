"""The data loaders of one process: :func:`make_loaders` (the training sampler shared by all processes of a
torchrun job, seeded per epoch) and :class:`ShardSampler` (evaluation: each process its every W-th sample)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, DistributedSampler, Sampler, default_collate

from latopt.data.arrays import Batch
from latopt.data.task import Task
from latopt.errors import LatoptError
from latopt.training.accel import Accel


def make_loaders(task: Task, batch_size: int, seed: int = 0, *, accel: Accel | None = None
                 ) -> tuple[DataLoader, DataLoader, DataLoader]:
    """(train, val, test) loaders of this process (``accel``: its rank, world size and loader settings;
    default one CPU process, no workers).

    Training: ``batch_size`` is the global batch, ``batch_size / world_size`` per process (it must
    divide, and give each process 2 or more images); a :class:`DistributedSampler` shuffles every epoch with the
    seed ``seed + epoch``
    (:func:`latopt.training.loop.fit` calls ``set_epoch``), one permutation of which each process takes every
    W-th index — so step k of W processes sees the samples step k of one process sees (when W does not
    divide the training set, the sampler repeats up to W−1 samples per epoch to even the shards), and a
    resumed run sees the order it would have seen. An epoch's last batch is dropped when it would hold one image
    (batch norm cannot train on one: on a 1x1 map it has one value per channel), and a training split of fewer
    than 2 images per process is refused with one line. The loader's generator, which seeds the random numbers
    of its worker processes (augmentation), is seeded with ``seed + rank``: each process draws its own.
    A dataset with ``__getitems__`` returning a :class:`~latopt.data.arrays.Batch` (the in-memory tasks) makes
    each batch in one pass (:func:`collate`); any other dataset is read per sample and collated by torch.
    Evaluation: each process takes every W-th sample, without padding (:class:`ShardSampler`);
    :func:`latopt.training.loop.evaluate` sums the counts."""
    accel = accel or Accel()
    world, rank = accel.world_size, accel.rank
    if batch_size % world:
        raise LatoptError(f"data.batch_size {batch_size} does not split over {world} processes; "
                          f"use a multiple of {world} (it is the global batch)", param="batch_size")
    per_process = batch_size // world
    if per_process < 2:
        each = f" for each of {world} processes" if world > 1 else ""
        raise LatoptError(f"data.batch_size {batch_size} is {per_process} image per training step{each}: batch norm "
                          f"needs 2 or more; use a batch of {2 * world} or more", param="batch_size")
    sampler: DistributedSampler = DistributedSampler(task.train, num_replicas=world, rank=rank, shuffle=True, seed=seed)
    shard = len(sampler)   # this process's training images per epoch
    if shard < 2:
        each = f", {shard} for each of {world} processes" if world > 1 else ""
        raise LatoptError(f"the training split of {task.name} holds {len(task.train)} image(s){each}: "  # type: ignore[arg-type]
                          "batch norm needs 2 or more to train; raise data.train_samples / data.max_samples (or give "
                          "a larger data set)", param="train_samples")
    loader: dict[str, Any] = {"num_workers": accel.workers, "pin_memory": accel.pin_memory,
              "persistent_workers": accel.persistent_workers and accel.workers > 0, "collate_fn": collate}
    # a last batch of one image is dropped (batch norm cannot train on it: 1x1 maps hold one value per channel)
    train = DataLoader(task.train, batch_size=per_process, sampler=sampler, drop_last=shard % per_process == 1,
                       generator=torch.Generator().manual_seed(seed + rank), **loader)  # it seeds the workers
    val, test = (DataLoader(ds, batch_size=max(per_process, 256), sampler=ShardSampler(len(ds), world, rank),  # type: ignore[arg-type]
                            **loader) for ds in (task.val, task.test))
    return train, val, test


def collate(samples: list | Batch) -> tuple:
    """A batch from what the loader fetched: a batched dataset's :class:`~latopt.data.arrays.Batch` as it is
    (``__getitems__`` made it in one pass), else torch's default collation of the samples."""
    return tuple(samples) if isinstance(samples, Batch) else default_collate(samples)


class ShardSampler(Sampler[int]):
    """Indices ``rank, rank + world, ...`` of ``range(n)``: every sample once over all processes, no padding."""

    def __init__(self, n: int, world: int = 1, rank: int = 0) -> None:
        self.n, self.world, self.rank = int(n), int(world), int(rank)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.n, self.world))

    def __len__(self) -> int:
        return len(range(self.rank, self.n, self.world))
