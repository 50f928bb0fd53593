"""A resumable queue of named jobs that several processes share through lock files: what the benchmarks in
``tools/`` run their cells with (a cell trains one seed's base, folds it at one λ, times it ...).

A job is ``(name, seed, deps)``: it starts once every job named in ``deps`` has finished. A finished job has
``ROOT/cells/<name>.json`` (the dict its work returned, with ``cell``, ``seed`` and ``wall_s`` added), written
atomically, and every later run skips it: a queue stopped at any point resumes where it stopped (a job killed
half-way runs again from its start). Processes take a job through ``ROOT/locks/<name>.lock`` (host and pid); a
lock left by a process that is gone on this host is taken over. A job that raises is logged with its traceback
and not retried by this process, the jobs that depend on it are skipped, and the others go on: :meth:`run`
returns the names left undone. Before each job a progress line gives the jobs done and the time left (per kind
of job, the mean wall time of those done times those left, over the processes running).

Why lock files and not a pool: the processes are whole benchmark commands (one per core: two 1-thread workers
train faster than one 2-thread process), started apart and restartable one by one.

    JobQueue(root, say=print, kind=None)    .result_file(name)  .done(name)  .run(jobs, work) -> not done
    spawn_workers(script, argv, stage, workers, work)   # work() here, and workers - 1 more processes
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from latopt.files.artifacts import write_json_atomic

Job = tuple[str, int, Sequence[str]]   # (name, seed, the names it waits for)
POLL_S = 20.0   # how often a process with nothing to start looks again (its jobs wait for other processes')


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def try_lock(path: Path) -> bool:
    """Create ``path`` holding this host and pid, unless another live process holds it; a lock of a process
    that is gone (this host) is taken over."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                host, pid = path.read_text().split()
                if host == socket.gethostname() and not _alive(int(pid)):
                    path.unlink(missing_ok=True)
                    continue
            except (OSError, ValueError):
                pass
            return False
        with os.fdopen(fd, "w") as f:
            f.write(f"{socket.gethostname()} {os.getpid()}")
        return True
    return False


class JobQueue:
    """The jobs' results under ``root`` (``cells/``, ``locks/``); ``say`` takes the progress and failure lines;
    ``kind(name)`` groups jobs whose wall times are alike for the estimate of the time left (default: one
    group)."""

    def __init__(self, root: str | Path, *, say: Callable[[str], Any] = print,
                 kind: Callable[[str], str] | None = None, poll_s: float = POLL_S) -> None:
        self.root = Path(root)
        self.say = say
        self.kind = kind or (lambda name: "")
        self.poll_s = poll_s

    def result_file(self, name: str) -> Path:
        return self.root / "cells" / f"{name}.json"

    def done(self, name: str) -> dict[str, Any] | None:
        """The finished job's record, or None."""
        f = self.result_file(name)
        return json.loads(f.read_text()) if f.is_file() else None   # as written (a NaN accuracy is a value)

    def eta(self, names: Iterable[str]) -> str:
        """Jobs done of ``names`` and the time left."""
        names = list(names)
        recs = {n: self.done(n) for n in names}
        left, unknown = 0.0, set()
        for k in dict.fromkeys(self.kind(n) for n in names):
            walls = [float(r["wall_s"]) for n, r in recs.items() if r is not None and self.kind(n) == k]
            n_left = sum(r is None for n, r in recs.items() if self.kind(n) == k)
            if n_left and walls:
                left += n_left * sum(walls) / len(walls)
            elif n_left:
                unknown.add(k or "these")
        busy = max(1, len(list((self.root / "locks").glob("*.lock"))))
        n_done = sum(r is not None for r in recs.values())
        text = f"{n_done}/{len(names)} done"
        if n_done < len(names) and not left:
            text += f"; no estimate yet ({', '.join(sorted(unknown))} jobs: none done)"
        elif n_done < len(names):
            text += f"; ~{left / busy / 60:.0f} min left with {busy} running" + (
                f" (no estimate yet for {', '.join(sorted(unknown))} jobs)" if unknown else "")
        return text

    def run(self, jobs: Sequence[Job], work: Callable[[str, int], dict[str, Any]]) -> list[str]:
        """Run ``work(name, seed)`` for every job not done, in order as their dependencies allow, sharing the
        queue with other processes; return the names that are not done (failed, or skipped for a failed
        dependency) as seen by this process."""
        failed: set[str] = set()
        known = {name for name, _, _ in jobs}
        while True:
            pending = [j for j in jobs if j[0] not in failed and self.done(j[0]) is None]
            if not pending:
                break
            started = False
            for name, seed, deps in pending:
                if any(d in failed or (d not in known and self.done(d) is None) for d in deps):
                    failed.add(name)
                    self.say(f"{name}: skipped, a job it needs failed or is missing")
                    started = True
                    break
                if any(self.done(d) is None for d in deps):
                    continue
                lock = self.root / "locks" / f"{name}.lock"
                if not try_lock(lock):
                    continue
                started = True   # done, skipped or failed: scan the queue again at once
                try:
                    if self.done(name) is not None:
                        continue
                    load = " ".join(f"{v:.1f}" for v in os.getloadavg())
                    self.say(f"{name}: start (load {load}); {self.eta(known)}")
                    t0 = time.perf_counter()
                    try:
                        rec = dict(work(name, seed))
                    except Exception as e:  # noqa: BLE001 - one failed job must not stop the others
                        self.say(f"{name}: FAILED: {type(e).__name__}: {e}\n{traceback.format_exc()}")
                        failed.add(name)
                        continue
                    rec |= {"cell": name, "seed": seed, "wall_s": time.perf_counter() - t0}
                    write_json_atomic(self.result_file(name), rec)
                    # no accuracy here: a cell's test figure is read once, when its results are published
                    self.say(f"{name}: done in {rec['wall_s']:.0f} s")
                finally:
                    lock.unlink(missing_ok=True)
                break
            if not started:
                time.sleep(self.poll_s)
        if failed:
            self.say(f"not done: {sorted(failed)}")
        return sorted(failed)


def spawn_workers(script: str, argv: Sequence[str] | None, stage: str, workers: int,
                  work: Callable[[], Any]) -> None:
    """Run ``work`` (a queue) here and, beside it, ``workers - 1`` more processes of ``script`` with this command
    line (``argv``, default ``sys.argv[1:]``) but stage ``run`` and ``--workers 1``, started 5 s apart, sharing
    the queue through its lock files; return when all are done (their exit codes are not looked at: a job that
    failed is in the queue's files)."""
    procs = []
    if workers > 1:
        argv_w = list(argv if argv is not None else sys.argv[1:])
        argv_w[argv_w.index(stage)] = "run"
        argv_w += ["--workers", "1"]
        for _ in range(workers - 1):
            procs.append(subprocess.Popen([sys.executable, script, *argv_w]))
            time.sleep(5)
    work()
    for p in procs:
        p.wait()
