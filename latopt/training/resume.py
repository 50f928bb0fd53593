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
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from timm.scheduler.scheduler import Scheduler
from torch import Generator, Tensor, nn

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


@dataclass
class _NumpyRng:
    """numpy's global generator (MT19937, its legacy state tuple), as the state file holds it (a dict of these
    fields; the key as an int64 tensor, since the file is read with ``weights_only``)."""

    bit_generator: str
    pos: int
    key: Tensor
    has_gauss: int
    gauss: float

    @classmethod
    def now(cls) -> _NumpyRng:
        state = np.random.get_state(legacy=True)
        assert isinstance(state, tuple)   # numpy's global RandomState is always MT19937: its legacy state is a tuple
        name, key, pos, has_gauss, gauss = state
        return cls(bit_generator=str(name), pos=int(pos), key=torch.from_numpy(key.astype(np.int64)),
                   has_gauss=int(has_gauss), gauss=float(gauss))

    def restore(self) -> None:
        np.random.set_state((self.bit_generator, self.key.numpy().astype(np.uint32), self.pos, self.has_gauss,
                             self.gauss))


@dataclass
class _RngState:
    """The random number generators of one process (saved as a dict of these fields, ``numpy`` a dict too)."""

    torch: Tensor
    cuda: Tensor | None
    numpy: _NumpyRng
    python: tuple[Any, ...]
    loader: Tensor | None

    @classmethod
    def now(cls, accel: Accel, generator: Generator | None) -> _RngState:
        return cls(torch=torch.get_rng_state(),
                   cuda=torch.cuda.get_rng_state(accel.device) if accel.device.type == "cuda" else None,
                   numpy=_NumpyRng.now(), python=random.getstate(),
                   loader=generator.get_state() if generator is not None else None)

    @classmethod
    def read(cls, saved: dict[str, Any]) -> _RngState:
        """From the saved dict (TypeError when its keys are not these fields)."""
        return cls(**{**saved, "numpy": _NumpyRng(**saved["numpy"])})

    def restore(self, accel: Accel, generator: Generator | None) -> None:
        torch.set_rng_state(self.torch)
        if self.cuda is not None and accel.device.type == "cuda":
            torch.cuda.set_rng_state(self.cuda, accel.device)
        self.numpy.restore()
        random.setstate(self.python)
        if generator is not None and self.loader is not None:
            generator.set_state(self.loader)


@dataclass
class _ResumeState:
    """The state file's content (saved as a dict with these keys, in this order: :meth:`saved`)."""

    schema: str
    fingerprint: str
    history: list[dict[str, float]]
    rng: list[_RngState]      # every process's, by rank
    model: dict[str, Tensor]
    optimizer: dict[str, Any]
    scheduler: dict[str, Any] | None
    scaler: dict[str, Any] | None
    best: dict[str, Any] | None = None    # BestWeights.state_dict()

    @classmethod
    def read(cls, saved: dict[str, Any]) -> _ResumeState:
        """From the saved dict (TypeError or KeyError when it is not one)."""
        state = cls(**saved)
        state.rng = [_RngState.read(r) for r in saved["rng"]]
        return state

    def saved(self) -> dict[str, Any]:
        """The dict written (tensors as they are: no copy)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**out, "rng": [asdict(r) for r in self.rng]}


class EpochCheckpoint:
    """The resume state of one training run (see the module doc)."""

    def __init__(self, path: str | Path, fingerprint: str, accel: Accel, *, model: nn.Module,
                 optimizer: torch.optim.Optimizer, scheduler: Scheduler | None,
                 scaler: torch.amp.GradScaler | None, loader: Any, best: BestWeights | None = None) -> None:
        self.path, self.fingerprint, self.accel, self.best = Path(path), fingerprint, accel, best
        self.model, self.optimizer, self.scheduler, self.scaler = model, optimizer, scheduler, scaler
        self.generator: torch.Generator | None = getattr(loader, "generator", None)

    def _read(self) -> _ResumeState | None:
        """Rank 0's reading of the file: the state, or None (absent, unreadable or stale: said why)."""
        if not self.path.is_file():
            return None
        try:
            saved = torch.load(self.path, map_location="cpu", weights_only=True)
        except TORCH_LOAD_ERRORS as e:
            _LOG.warning(f"not resuming from {self.path}: it cannot be read ({first_line(e, 120)}); starting afresh")
            return None
        try:
            state = _ResumeState.read(saved) if isinstance(saved, dict) else None
        except (TypeError, KeyError):   # other keys than a resume state's
            state = None
        if state is None or state.schema != RESUME_SCHEMA:
            _LOG.warning(f"not resuming from {self.path}: not a latopt resume state; starting afresh")
            return None
        if state.fingerprint != self.fingerprint:
            _LOG.warning(f"not resuming from {self.path}: it was written by a run with other settings (model, "
                         "data, train section, seed or initial weights); starting afresh")
            return None
        return state

    def resume(self) -> tuple[int, list[dict[str, float]]]:
        """Restore the state, if there is a usable one (every process calls this): (epochs done, their records)."""
        state: _ResumeState | None = self.accel.broadcast(self._read() if self.accel.is_main else None)
        if state is None:
            return 0, []
        self.model.load_state_dict(state.model)
        self.optimizer.load_state_dict(state.optimizer)
        if self.scheduler is not None and state.scheduler is not None:
            self.scheduler.load_state_dict(state.scheduler)
        if self.scaler is not None and state.scaler is not None:
            self.scaler.load_state_dict(state.scaler)
        if self.best is not None and state.best is not None:
            self.best.load_state_dict(state.best)
        rngs = state.rng
        if len(rngs) == self.accel.world_size:
            rngs[self.accel.rank].restore(self.accel, self.generator)
        else:
            _LOG.warning(f"the resume state was written by {len(rngs)} process(es), this run has "
                         f"{self.accel.world_size}: random streams (augmentation, dropout) are not restored")
        history = list(state.history)
        _LOG.info(f"resuming from {self.path}: {len(history)} epoch(s) done")
        return len(history), history

    def save(self, history: list[dict[str, float]]) -> None:
        """Write the state after an epoch (every process calls this: the generators are gathered)."""
        rngs = self.accel.gather(_RngState.now(self.accel, self.generator))
        if not self.accel.is_main:
            return
        state = _ResumeState(schema=RESUME_SCHEMA, fingerprint=self.fingerprint, history=history, rng=rngs,
                             model={k: v.detach().cpu() for k, v in self.model.state_dict().items()},
                             optimizer=self.optimizer.state_dict(),
                             scheduler=self.scheduler.state_dict() if self.scheduler is not None else None,
                             scaler=self.scaler.state_dict() if self.scaler is not None else None,
                             best=self.best.state_dict() if self.best is not None else None)
        write_torch_atomic(self.path, state.saved())

    def remove(self) -> None:
        if self.accel.is_main:
            self.path.unlink(missing_ok=True)


__all__ = ["RESUME_SCHEMA", "EpochCheckpoint", "fingerprint", "resume_path"]
