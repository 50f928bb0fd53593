"""Running one latopt command: as a subprocess under resource limits, or in-process; reading its stderr."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import os
import re
import resource
import signal
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]   # the checkout under test

PROGRESS = re.compile(r"^\[[a-z][a-z0-9_.]*\] ")     # latopt's own progress lines: "[stage] message"
TRACEBACK = "Traceback (most recent call last)"
MEMORY_LIMIT = 8 << 30                         # RLIMIT_AS of every command the harness starts
FUZZ_TIMEOUT_S = 300


@dataclasses.dataclass
class Run:
    rc: int | None          # None: killed at the timeout
    out: str
    err: str
    seconds: float


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env = {**{k: v for k, v in os.environ.items() if k != "LATOPT_PROFILES_DIR"}, "PYTHONPATH": path,
           "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.update(extra or {})
    return env


def _limits(fsize: int | None) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        if fsize is not None:   # a full disk: writes past fsize bytes fail with EFBIG (SIGXFSZ ignored)
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    return apply


RUNTIME = "@runtime"    # argv[0] of a case that runs the deployment runner `python -m latopt.runtime`


def start(argv: list[str], cwd: Path, env: dict[str, str] | None = None, fsize: int | None = None,
          output: Any = subprocess.PIPE) -> subprocess.Popen:
    """``python -m latopt ARGV`` in its own session (its process group is the session; killpg reaches workers);
    stdout and stderr go to pipes, or to the file ``output`` (nobody reads a pipe while a fault waits)."""
    module = ["latopt.runtime", *argv[1:]] if argv[:1] == [RUNTIME] else ["latopt", *argv]
    return subprocess.Popen([sys.executable, "-m", *module], cwd=cwd, env=child_env(env), stdin=subprocess.DEVNULL,
                            stdout=output, stderr=subprocess.PIPE if output is subprocess.PIPE else subprocess.STDOUT,
                            start_new_session=True, preexec_fn=_limits(fsize))


def kill_group(p: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, signal.SIGKILL)


def latopt(argv: list[str], cwd: Path, *, env: dict[str, str] | None = None, in_process: bool = False,
           timeout: float = FUZZ_TIMEOUT_S, fsize: int | None = None) -> Run:
    """Run one latopt command; in-process (``latopt.cli.main``, for speed) or as a subprocess."""
    if in_process and fsize is None:
        return _in_process(argv, cwd, env or {})
    t0 = time.perf_counter()
    p = start(argv, cwd, env, fsize)
    try:
        out, err = p.communicate(timeout=timeout)
        rc: int | None = p.returncode
    except subprocess.TimeoutExpired:
        kill_group(p)
        out, err = p.communicate()
        rc = None
    finally:
        kill_group(p)      # extra workers of `search --workers` / `run` must not outlive a case
    return Run(rc, out.decode(errors="replace"), err.decode(errors="replace"), time.perf_counter() - t0)


def _in_process(argv: list[str], cwd: Path, env: dict[str, str]) -> Run:
    from latopt.cli import main as latopt_main
    from latopt.runtime.cli import main as runtime_main

    main, argv = (runtime_main, argv[1:]) if argv[:1] == [RUNTIME] else (latopt_main, argv)
    out, err = io.StringIO(), io.StringIO()
    old_cwd, old_env = os.getcwd(), {k: os.environ.get(k) for k in env}
    # libraries' own log handlers (optuna's) hold the stderr of when they were made: point them here too
    handlers = [h for lg in [logging.getLogger(), *logging.root.manager.loggerDict.values()]
                for h in getattr(lg, "handlers", []) if type(h) is logging.StreamHandler]
    streams = [h.setStream(err) for h in handlers]
    t0 = time.perf_counter()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.resetwarnings()   # a fresh interpreter's filters: each warning shows again, as it would there
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", category)
            try:
                rc = main(argv)
            except SystemExit as e:       # argparse
                rc = e.code if isinstance(e.code, int) else int(e.code is not None)
            except BaseException:         # what the interpreter would print, and its exit code
                traceback.print_exc()
                rc = 1
    finally:
        os.chdir(old_cwd)
        for h, stream in zip(handlers, streams, strict=True):
            h.setStream(stream)
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return Run(int(rc or 0), out.getvalue(), err.getvalue(), time.perf_counter() - t0)


def exception_line(text: str) -> str:
    """The exception a traceback in ``text`` ends with (its first unindented line after the frames)."""
    after = text.split(TRACEBACK)[-1].splitlines()[1:]
    return next((ln for ln in after if ln.strip() and not ln.startswith(" ")), "?")[:300]


def error_lines(err: str) -> list[str]:
    """stderr without blank lines and latopt's own ``[stage]`` progress lines."""
    return [ln for ln in err.splitlines() if ln.strip() and not PROGRESS.match(ln)]


def one_line_error(err: str) -> bool:
    lines = error_lines(err)
    if len(lines) == 1 and lines[0].startswith(("latopt: error:", "latopt.runtime: error:")):
        return True
    # argparse's own usage error: "usage: ..." lines, then "latopt CMD: error: ..."
    usage_error = re.compile(r"^(latopt [\w-]+|python -m latopt\.runtime): error: ")
    return bool(lines) and lines[0].startswith("usage:") and usage_error.match(lines[-1]) is not None

def fill(template: tuple[str, ...] | list[str], paths: dict[str, str]) -> list[str]:
    return [re.sub(r"\{(\w+)\}", lambda m: paths.get(m.group(1), m.group(0)), a) for a in template]
