"""Local worker processes: ``workers=N`` (``--workers N``) starts N − 1 more processes on this machine.

Each is a :mod:`multiprocessing` process (the ``spawn`` context: a fresh interpreter, no forked torch or
database state) that runs the search function with this process's options (:func:`worker_options`: the
study, storage, base checkpoint and LUT this process resolved, one worker, no summary). It is started after
this process has created the storage's tables and the study, and loads that study like a worker on another
machine would, so they share trials through the storage exactly as such workers do. Each process gets
``cpu_count // N`` intra-op threads: on a 2-core machine, two 1-thread workers train far faster than
one process whose two OpenMP threads fight the other for the cores.

A worker logs at this process's verbosity (quiet when ``progress`` is off); its error is one
``latopt: error:`` line and its exit code (2, or 3 for a failed check), which :func:`join` reports.
SIGTERM and Ctrl-C stop it as they stop any latopt process (:mod:`latopt.signals`; exit 143 and 130).
A worker dies with the process that started it, even when that one is killed with SIGKILL: it is handed
its parent's pid and arms a parent-death SIGTERM (:func:`latopt.signals.die_with_parent`) before anything
else. Its running trial is then failed as it stops, and retried on the next run.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import sys
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from latopt import log
from latopt.config import RunConfig
from latopt.errors import LatoptError, first_line, one_line, out_of_memory
from latopt.search._options import SearchOptions
from latopt.signals import (
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    Terminated,
    die_with_parent,
    sigterm_raises,
    threads_ended,
)
from latopt.training.loop import seed_everything

_LOG = log.get_logger("search")


def default_threads(workers: int) -> int:
    return max(1, (os.cpu_count() or 1) // max(1, workers))


def worker_options(o: SearchOptions, *, config: RunConfig, study: str, study_dir: Path, storage: str, trials: int,
                   sampler: str, max_acc_drop: float, base: Path, lut: Path | None, timeout: float | None,
                   threads: int | None, refining: int = 0) -> SearchOptions:
    """The options of one extra worker: ``o`` with what this process resolved (the config as read, overrides
    applied; the study's name and directory; the base, already trained), one worker, no summary."""
    return dataclasses.replace(o, config=config, overrides={}, study=study, study_dir=study_dir, storage=storage,
                               trials=trials, sampler=sampler, max_acc_drop=max_acc_drop, base=base, lut=lut,
                               threads=threads, workers=1, summary=False, refining=refining,
                               timeout=None if timeout is None else max(1.0, timeout))


def start(search: Callable[[SearchOptions], Any], o: SearchOptions, n: int) -> list[BaseProcess]:
    """Start ``n`` worker processes, each running ``search(o)`` (a module-level function: it is pickled by name)."""
    ctx = multiprocessing.get_context("spawn")
    verbosity = log.verbosity() if o.progress else log.QUIET
    procs: list[BaseProcess] = [ctx.Process(target=_work, args=(search, o, os.getpid(), verbosity), name=f"latopt-search-worker-{i + 1}")
             for i in range(n)]
    for p in procs:
        p.start()
    return procs


def _work(search: Callable[[SearchOptions], Any], o: SearchOptions, parent: int, verbosity: int) -> None:
    """A worker process's body: die with ``parent``, log and seed as it does, run ``search(o)``, exit with
    latopt's codes."""
    die_with_parent(parent)
    log.setup(verbosity)
    try:
        with sigterm_raises():
            seed_everything(o.seed)
            search(o)
    except LatoptError as e:
        _LOG.error(one_line(str(e)))
        sys.exit(e.exit_code)
    except (Terminated, KeyboardInterrupt) as e:   # the cleanup has run while unwinding
        code = EXIT_TERMINATED if isinstance(e, Terminated) else EXIT_INTERRUPTED
        if not threads_ended():   # a library thread left running would keep the process alive
            sys.stderr.flush()
            os._exit(code)
        sys.exit(code)
    except Exception as e:
        if not out_of_memory(e):
            raise
        _LOG.error(f"out of memory in a search worker ({first_line(e, 120)}); lower the workers or the batch")
        sys.exit(2)


def join(procs: list[BaseProcess], *, ok: bool) -> None:
    """Wait for the extra workers (terminate them when this process failed); LatoptError if one failed."""
    if not ok:
        for p in procs:
            if p.is_alive():
                p.terminate()
    bad: list[Any] = []
    for p in procs:
        p.join()
        if p.exitcode != 0:
            bad.append((p.pid, p.exitcode))
    if ok and bad:
        raise LatoptError(f"{len(bad)} extra worker(s) failed (pid, exit code): {bad}; rerun the same search to resume")

