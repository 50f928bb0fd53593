"""What one search worker is asked to do (``latopt search``'s and ``latopt plan``'s flags as a dataclass; a local
worker process is handed one, :mod:`latopt.search._workers`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from latopt.config import RunConfig
from latopt.search._storage import DEFAULT_GRACE_S, DEFAULT_HEARTBEAT_S


@dataclass
class SearchOptions:
    """Inputs of one search worker (CLI flags; None = the config's value). The study's method is the config's
    ``method`` (``latopt search`` sets ``layerfold``, ``latopt plan`` ``dp``, as overrides)."""

    config: str | Path | RunConfig | None   # a path, a shipped config's name, or a config already read
    trials: int | None = None
    storage: str | None = None
    study: str | None = None
    sampler: str | None = None
    objective: str = "latency"
    max_acc_drop: float | None = None
    measure: bool = False
    timeout: float | None = None
    base: str | Path | None = None
    lut: str | Path | None = None
    costs: str = "lut"
    seed: int = 0
    runs_dir: str | Path = "runs"
    heartbeat_interval: int = DEFAULT_HEARTBEAT_S
    grace_period: int = DEFAULT_GRACE_S
    max_retry: int = 3
    poll_s: float = 2.0
    workers: int = 1                # local worker processes on this machine (this one + workers - 1)
    threads: int | None = None      # torch intra-op threads per worker (default cpu_count // workers)
    progress: bool = True           # progress lines (logger latopt.search) and bars; False: none, quiet workers
    summary: bool = True            # write pareto.* at the end (``latopt search`` then prints the front table)
    overrides: dict[str, Any] = field(default_factory=dict)
    study_dir: str | Path | None = None   # default runs/<study>/search
    base_dir: str | Path | None = None    # where the base is trained once when none is given (default: study_dir)
    refining: int = 0   # of ``trials``, how many make earlier trials again (a worker of the study's refining phase)
