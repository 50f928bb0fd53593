"""What one ``latopt search`` worker is asked to do (the command line's flags as a dataclass; a local worker
process is handed one, :mod:`latopt.search._workers`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from latopt.search._storage import DEFAULT_GRACE_S, DEFAULT_HEARTBEAT_S


@dataclass
class SearchOptions:
    """Inputs of one ``latopt search`` worker (CLI flags; None = the config's value)."""

    config: str | Path | None
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
    plan: PlanOptions | None = None   # the DP's study or plan (``latopt plan``); None: Layer Folding's study


@dataclass(frozen=True)
class PlanOptions:
    """The DP's part of a search (``latopt plan``): with ``budget``, one plan at that budget
    (:func:`latopt.search.run_dp_search`); without, the DP's study, a trial per budget of ``budgets``."""

    budget: float | None = None     # the latency budget, a fraction of the as-is LUT latency
    importance: str = "proxy"       # how each (block, variant) is scored (latopt.dp.IMPORTANCE_METHODS)
    variants: tuple[str, ...] | None = None   # the variants the blocks may take (default: the LUT's)
    budgets: tuple[float, ...] | None = None  # the DP's study: a trial per budget (default 0.5..0.9)
    plan_only: bool = False         # with budget: write the plan file only (latopt.dp.plan_only): no training
    plan_out: str | Path | None = None   # plan-only: the plan file (default runs/<study>/search/plan-budget<B>.json)
