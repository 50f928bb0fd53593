"""tools.jobqueue: the benchmarks' resumable queue shared through lock files."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tools.jobqueue import JobQueue, try_lock

JOBS = [("s0-base", 0, []), ("s0-fold", 0, ["s0-base"]), ("s1-base", 1, []), ("s1-fold", 1, ["s1-base"])]


def test_jobs_run_after_their_dependencies_and_a_rerun_runs_nothing(tmp_path) -> None:
    calls: list[str] = []
    lines: list[str] = []
    q = JobQueue(tmp_path, say=lines.append, poll_s=0.01)
    assert q.run(JOBS, lambda name, seed: calls.append(name) or {"seed_seen": seed}) == []
    assert calls.index("s0-base") < calls.index("s0-fold") and calls.index("s1-base") < calls.index("s1-fold")
    rec = q.done("s1-fold")
    assert rec is not None and rec["cell"] == "s1-fold" and rec["seed"] == 1 and rec["seed_seen"] == 1
    assert rec["wall_s"] >= 0
    assert not list((tmp_path / "locks").glob("*.lock"))
    calls.clear()
    assert q.run(JOBS, lambda name, seed: calls.append(name) or {}) == []
    assert calls == []   # resumed: every job was done


def test_a_failed_job_skips_its_dependents_and_not_the_others(tmp_path) -> None:
    lines: list[str] = []

    def work(name: str, seed: int) -> dict:
        if name == "s0-base":
            raise RuntimeError("diverged")
        return {}

    q = JobQueue(tmp_path, say=lines.append, poll_s=0.01)
    assert q.run(JOBS, work) == ["s0-base", "s0-fold"]
    assert q.done("s0-base") is None and q.done("s0-fold") is None
    assert q.done("s1-base") is not None and q.done("s1-fold") is not None
    failed = [ln for ln in lines if "FAILED" in ln]
    assert len(failed) == 1 and "s0-base" in failed[0] and "RuntimeError: diverged" in failed[0]
    assert any(ln.startswith("s0-fold: skipped") for ln in lines)
    assert not list((tmp_path / "locks").glob("*.lock"))


def test_a_job_waiting_for_a_job_outside_the_queue_that_is_not_done_is_skipped(tmp_path) -> None:
    q = JobQueue(tmp_path, say=lambda s: None, poll_s=0.01)
    assert q.run([("s0-fold", 0, ["s0-base"])], lambda n, s: {}) == ["s0-fold"]
    (tmp_path / "cells").mkdir(exist_ok=True)
    (tmp_path / "cells" / "s0-base.json").write_text(json.dumps({"cell": "s0-base"}))
    assert q.run([("s0-fold", 0, ["s0-base"])], lambda n, s: {}) == []   # done elsewhere: it runs


def test_a_lock_of_a_gone_process_is_taken_over_and_a_live_one_is_not(tmp_path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    lock = tmp_path / "locks" / "a.lock"
    lock.parent.mkdir()
    lock.write_text(f"{socket.gethostname()} {int(gone.stdout)}")
    assert try_lock(lock)
    assert lock.read_text() == f"{socket.gethostname()} {os.getpid()}"
    assert not try_lock(lock)   # held by this (live) process
    other_host = tmp_path / "locks" / "b.lock"
    other_host.write_text(f"not-{socket.gethostname()} {int(gone.stdout)}")
    assert not try_lock(other_host)   # another host's process cannot be checked: left alone


def _worker(root: str, marks: str) -> None:
    def work(name: str, seed: int) -> dict:
        with open(Path(marks) / name, "a") as f:
            f.write(f"{os.getpid()}\n")
        return {}

    JobQueue(root, say=lambda s: None, poll_s=0.01).run(
        [(f"j{i}", i, [f"j{i - 2}"] if i >= 2 else []) for i in range(8)], work)


def test_two_processes_share_the_queue_and_run_each_job_once(tmp_path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(str(tmp_path / "q"), str(marks))) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    assert sorted(f.name for f in marks.iterdir()) == [f"j{i}" for i in range(8)]
    assert all(len(f.read_text().split()) == 1 for f in marks.iterdir())   # once each
    assert all((tmp_path / "q" / "cells" / f"j{i}.json").is_file() for i in range(8))


def test_the_progress_line_estimates_the_time_left_per_kind(tmp_path) -> None:
    q = JobQueue(tmp_path, kind=lambda name: name.split("-", 1)[1])
    (tmp_path / "cells").mkdir()
    for name, wall in (("s0-base", 600.0), ("s0-fold", 60.0)):
        (tmp_path / "cells" / f"{name}.json").write_text(json.dumps({"cell": name, "wall_s": wall}))
    assert q.eta([n for n, _, _ in JOBS]) == "2/4 done; ~11 min left with 1 running"   # 600 s + 60 s
    assert q.eta(["s0-base", "s0-fold"]) == "2/2 done"
    assert "no estimate yet for probe jobs" in q.eta(["s0-base", "s0-probe", "s1-base"])
    assert q.eta(["s0-probe"]) == "0/1 done; no estimate yet (probe jobs: none done)"


@pytest.mark.parametrize("bad", ["", "host", "host notapid"])
def test_a_garbled_lock_is_left_alone(tmp_path, bad) -> None:
    lock = tmp_path / "x.lock"
    lock.write_text(bad)
    assert not try_lock(lock) and lock.read_text() == bad
