"""Epoch checkpoints of a training run: an interrupted ``latopt train`` resumes after its last finished epoch.

The state of a run writing ``OUT/`` lives beside it, in ``OUT.resume.pt`` (the output directory itself
appears only when the run is done, atomically). Rank 0 rewrites it atomically after every epoch and removes
it once the run's output is written. It holds the model's and optimizer's state, the schedule's, the fp16
loss scaler's, the finished epochs' records, the best-validation weights so far
(:class:`latopt.training.loop.BestWeights`, when the run keeps them), and the random number generators of *every* process (torch,
CUDA, numpy, python, the DataLoader's generator that seeds its workers), gathered to rank 0. The training
order needs no state: it is a function of the seed and the epoch (:func:`latopt.data.make_loaders`).

A rerun of the same command resumes: rank 0 reads the file and sends it to every process (no shared file
system needed), each takes its own generators. So a run killed at any point (SIGKILL included) and
resumed trains exactly as the uninterrupted run would have, where that run is deterministic (CPU, same
thread count): same weights. Exceptions, said when they apply: DataLoader workers kept across epochs
(``persistent_workers``) draw augmentation from where they were started, and a state written by another
number of processes restores everything but the generators.

A state is used only when its *fingerprint* matches: the SHA-256 of what the training result depends on
(model, data and train settings, seed, the *content* of the initial checkpoint and of a directory task's files:
:func:`latopt.training.base_training._fingerprint`), not of where it runs (``train.device``,
``channels_last``, loader workers, the timeout). A stale state (another config) is not resumed: a warning
says so and the run starts afresh, overwriting it.

Public API::

    resume_path(out_dir) -> Path                       where a run writing out_dir keeps its state
    fingerprint(parts) -> str                          SHA-256 of JSON-able parts
    EpochCheckpoint(path, fingerprint, accel, model, optimizer, scheduler, scaler, loader, best=None)
        .resume() -> (start_epoch, history)            every process; (0, []) without a usable state
        .save(history)                                 every process (collective); rank 0 writes
        .remove()                                      rank 0 deletes the file
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from timm.scheduler.scheduler import Scheduler
from torch import nn

from latopt.errors import first_line
from latopt.files.torchfile import TORCH_LOAD_ERRORS, write_torch_atomic
from latopt.log import get_logger
from latopt.training.accel import Accel
from latopt.training.loop import BestWeights

RESUME_SCHEMA = "latopt.train_resume/1"
_LOG = get_logger("train")


def resume_path(out_dir: str | Path) -> Path:
    out = Path(out_dir)
    return out.parent / f"{out.name}.resume.pt"


def fingerprint(parts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _rng_state(accel: Accel, generator: torch.Generator | None) -> dict[str, Any]:
    np_state = np.random.get_state(legacy=False)
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state(accel.device) if accel.device.type == "cuda" else None,
            "numpy": {"bit_generator": np_state["bit_generator"], "pos": int(np_state["state"]["pos"]),
                      "key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
                      "has_gauss": int(np_state["has_gauss"]), "gauss": float(np_state["gauss"])},
            "python": random.getstate(),
            "loader": generator.get_state() if generator is not None else None}


def _set_rng_state(state: dict[str, Any], accel: Accel, generator: torch.Generator | None) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and accel.device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], accel.device)
    n = state["numpy"]
    np.random.set_state({"bit_generator": n["bit_generator"], "has_gauss": n["has_gauss"], "gauss": n["gauss"],
                         "state": {"key": n["key"].numpy().astype(np.uint32), "pos": n["pos"]}})
    random.setstate(state["python"])
    if generator is not None and state["loader"] is not None:
        generator.set_state(state["loader"])


class EpochCheckpoint:
    """The resume state of one training run (see the module doc)."""

    def __init__(self, path: str | Path, fingerprint: str, accel: Accel, *, model: nn.Module,
                 optimizer: torch.optim.Optimizer, scheduler: Scheduler | None,
                 scaler: torch.amp.GradScaler | None, loader: Any, best: BestWeights | None = None) -> None:
        self.path, self.fingerprint, self.accel, self.best = Path(path), fingerprint, accel, best
        self.model, self.optimizer, self.scheduler, self.scaler = model, optimizer, scheduler, scaler
        self.generator: torch.Generator | None = getattr(loader, "generator", None)

    def _read(self) -> dict[str, Any] | None:
        """Rank 0's reading of the file: the state, or None (absent, unreadable or stale: said why)."""
        if not self.path.is_file():
            return None
        try:
            state = torch.load(self.path, map_location="cpu", weights_only=True)
        except TORCH_LOAD_ERRORS as e:
            _LOG.warning(f"not resuming from {self.path}: it cannot be read ({first_line(e, 120)}); starting afresh")
            return None
        if not isinstance(state, dict) or state.get("schema") != RESUME_SCHEMA:
            _LOG.warning(f"not resuming from {self.path}: not a latopt resume state; starting afresh")
            return None
        if state.get("fingerprint") != self.fingerprint:
            _LOG.warning(f"not resuming from {self.path}: it was written by a run with other settings (model, "
                         "data, train section, seed or initial weights); starting afresh")
            return None
        return state

    def resume(self) -> tuple[int, list[dict[str, float]]]:
        """Restore the state, if there is a usable one (every process calls this): (epochs done, their records)."""
        state = self.accel.broadcast(self._read() if self.accel.is_main else None)
        if state is None:
            return 0, []
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state["scheduler"] is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None and state["scaler"] is not None:
            self.scaler.load_state_dict(state["scaler"])
        if self.best is not None and state.get("best") is not None:
            self.best.load_state_dict(state["best"])
        rngs = state["rng"]
        if len(rngs) == self.accel.world_size:
            _set_rng_state(rngs[self.accel.rank], self.accel, self.generator)
        else:
            _LOG.warning(f"the resume state was written by {len(rngs)} process(es), this run has "
                         f"{self.accel.world_size}: random streams (augmentation, dropout) are not restored")
        history = list(state["history"])
        _LOG.info(f"resuming from {self.path}: {len(history)} epoch(s) done")
        return len(history), history

    def save(self, history: list[dict[str, float]]) -> None:
        """Write the state after an epoch (every process calls this: the generators are gathered)."""
        rngs = self.accel.gather(_rng_state(self.accel, self.generator))
        if not self.accel.is_main:
            return
        state = {"schema": RESUME_SCHEMA, "fingerprint": self.fingerprint, "history": history, "rng": rngs,
                 "model": {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
                 "optimizer": self.optimizer.state_dict(),
                 "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
                 "scaler": self.scaler.state_dict() if self.scaler is not None else None,
                 "best": self.best.state_dict() if self.best is not None else None}
        write_torch_atomic(self.path, state)

    def remove(self) -> None:
        if self.accel.is_main:
            self.path.unlink(missing_ok=True)


__all__ = ["RESUME_SCHEMA", "EpochCheckpoint", "fingerprint", "resume_path"]
