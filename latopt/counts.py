"""Every count a user gives latopt, bounded in one place: :data:`COUNTS` (each count's name, its lowest and highest
value and what it counts) and :func:`check_count` (a count outside its bounds is one line, exit 2, before anything
runs).

A count too large for the machine is refused, never tried: ``--workers 1000`` started a thousand processes that
made no progress, ``--threads 100000`` aborted in libgomp, ``--trials 1000000`` asked for weeks. The bounds are
fixed numbers, so that a config valid on one machine is valid on the next, except local search workers, each of
which trains on a core of its own: at most this machine's cores. The run config's count keys
(:mod:`latopt.config`: ``data.workers``, ``threads``, ``search.trials``) take their bounds from here
(:data:`MAX_LOADER_WORKERS`, :data:`latopt.constants.MAX_THREADS`, :data:`MAX_TRIALS`).

Standard library and :mod:`latopt.errors` / :mod:`latopt.constants` only: :mod:`latopt.training.torch_settings` (a floor
module) checks every thread count it sets here.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from latopt.constants import MAX_THREADS
from latopt.errors import LatoptError

MAX_LOADER_WORKERS = 64   # data.workers: DataLoader processes per training process (1000 made no progress)
MAX_TRIALS = 1000         # a study's trials (search.trials, --trials): each trains a network


class Count(NamedTuple):
    lo: int
    hi: int | None   # None: this machine's cores
    what: str


COUNTS: dict[str, Count] = {
    "threads": Count(1, MAX_THREADS, "torch intra-op threads"),
    "workers": Count(1, None, "local search worker processes, each training on a core of its own"),
    "loader_workers": Count(0, MAX_LOADER_WORKERS, "DataLoader worker processes per training process"),
    "trials": Count(1, MAX_TRIALS, "trials of a study, each training a network"),
}


def count_bounds(name: str) -> tuple[int, int]:
    """(lowest, highest) of count ``name`` on this machine."""
    c = COUNTS[name]
    return c.lo, c.hi if c.hi is not None else max(1, os.cpu_count() or 1)


def check_count(value: object, name: str, *, param: str | None = None) -> int:
    """``value`` as the count ``name`` of :data:`COUNTS`, or one line saying its bounds and what it counts
    (``param``: the library parameter it came from, so that the CLI names its flag; default ``name``)."""
    lo, hi = count_bounds(name)
    what = COUNTS[name].what
    if isinstance(value, bool) or not isinstance(value, int):
        raise LatoptError(f"{param or name} must be an integer ({what}), got {value!r}", param=param or name)
    if not lo <= value <= hi:
        why = f"; this machine has {hi} cores" if COUNTS[name].hi is None else ""
        raise LatoptError(f"{param or name} must be in [{lo}, {hi}] ({what}{why}), got {value}", param=param or name)
    return value


__all__ = ["COUNTS", "MAX_LOADER_WORKERS", "MAX_TRIALS", "Count", "check_count", "count_bounds"]
