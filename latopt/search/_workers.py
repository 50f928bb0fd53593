"""Local worker processes: ``--workers N`` starts N − 1 more ``latopt search`` processes on this machine.

They are ordinary workers (the same command pointed at the same storage URL and study), so they share
trials through the storage exactly like workers on other machines. Each process gets
``cpu_count // N`` intra-op threads: on a 2-core machine, two 1-thread workers train far faster than
one process whose two OpenMP threads fight the other for the cores.

A worker dies with the process that started it, even when that one is killed with SIGKILL: ``spawn``
passes its pid in ``LATOPT_PARENT_PID`` and the worker's ``latopt.cli.main`` arms a parent-death SIGTERM
(:func:`latopt.signals.die_with_parent`). Its running trial then goes stale and is retried on the next run.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from latopt.errors import LatoptError
from latopt.log import verbosity_flags
from latopt.search._options import SearchOptions
from latopt.signals import PARENT_ENV, sigterm_raises


def default_threads(workers: int) -> int:
    return max(1, (os.cpu_count() or 1) // max(1, workers))


def worker_argv(o: SearchOptions, *, study: str, storage: str, trials: int, sampler: str, max_acc_drop: float,
                base: Path, lut: Path | None, timeout: float | None, threads: int) -> list[str]:
    """The command line of one extra worker (absolute paths; the base is already trained)."""
    argv = [sys.executable, "-m", "latopt", "search", "--seed", str(o.seed), "--trials", str(trials),
            "--study", study, "--storage", storage, "--sampler", sampler, "--objective", o.objective,
            "--max-acc-drop", repr(max_acc_drop), "--base", str(base), "--costs", o.costs,
            "--runs-dir", str(Path(o.runs_dir).resolve()), "--heartbeat-interval", str(o.heartbeat_interval),
            "--grace-period", str(o.grace_period), "--threads", str(threads), "--no-summary"]
    if o.config is not None:
        argv += ["--config", str(Path(o.config).resolve())]
    if o.method == "dp":   # the DP's study (``study`` is the Layer Folding study's name, as on the command line)
        argv += ["--method", "dp", "--importance", o.importance]
        if o.variants is not None:
            argv += ["--variants", ",".join(o.variants)]
        if o.budgets is not None:
            argv += ["--budgets", ",".join(repr(float(b)) for b in o.budgets)]
    if lut is not None:
        argv += ["--lut", str(Path(lut).resolve())]
    if timeout is not None:
        argv += ["--timeout", repr(max(1.0, timeout))]
    for k, v in (o.overrides or {}).items():
        argv += ["--set", f"{k}={json.dumps(v)}"]
    return argv + (verbosity_flags() if o.progress else ["--quiet"])   # a worker logs as this process does


def spawn(argvs: list[list[str]]) -> list[subprocess.Popen]:
    env = {**os.environ, PARENT_ENV: str(os.getpid())}
    return [subprocess.Popen(a, env=env) for a in argvs]


def join(procs: list[subprocess.Popen], *, ok: bool) -> None:
    """Wait for the extra workers (terminate them when this process failed); LatoptError if one failed."""
    if not ok:
        for p in procs:
            if p.poll() is None:
                p.terminate()
    bad: list[Any] = []
    for p in procs:
        rc = p.wait()
        if rc != 0:
            bad.append((p.pid, rc))
    if ok and bad:
        raise LatoptError(f"{len(bad)} extra worker(s) failed (pid, exit code): {bad}; rerun the same command to resume")


def terminate_on_sigterm(active: bool) -> contextlib.AbstractContextManager[None]:
    """While local workers run, SIGTERM raises :class:`latopt.signals.Terminated` here (the CLI already
    does so; this covers ``run_search`` called as a library), so ``join`` terminates them too."""
    return sigterm_raises(active)
