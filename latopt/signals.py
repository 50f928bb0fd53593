"""How a latopt process stops when it is told to: SIGTERM, and the death of the process that started it.

SIGTERM. While :func:`sigterm_raises` is active (``latopt.cli.main`` activates it for every command),
SIGTERM raises :class:`Terminated` in the main thread: a ``SystemExit`` with code 143 (128 + 15), so
every ``finally`` and ``except BaseException`` cleanup runs exactly as for Ctrl-C
(:func:`latopt.files.artifacts.atomic_path` / :func:`~latopt.files.artifacts.atomic_dir` remove their temporary
files, ``latopt search`` terminates its local workers), and ``latopt`` prints ``latopt: terminated``
and exits 143. A second SIGTERM while the first is being handled is ignored, so it cannot cut that
cleanup short (SIGKILL still stops the process at once). The exception can be lost: a signal that lands
while Python runs a callback whose exceptions it only reports (``Exception ignored in ...``: a weakref or
import-lock callback, a ``__del__``) unwinds nothing. So once SIGTERM has come, nothing more is committed:
:func:`check_terminated` raises :class:`Terminated` again where :func:`~latopt.files.artifacts.atomic_path` and
:func:`~latopt.files.artifacts.atomic_dir` would make their output appear, and where a command returns.

Parent death. A local search worker (a process started by ``latopt search --workers N``,
:mod:`latopt.search._workers`) is handed its parent's pid; :func:`die_with_parent` makes it receive SIGTERM when
that parent dies, even by SIGKILL: on Linux with ``prctl(PR_SET_PDEATHSIG, SIGTERM)``, elsewhere with a
daemon thread that polls ``os.getppid()``. The worker then stops like any terminated latopt process: a
search fails the trial it was running as it unwinds and enqueues its retry (:func:`latopt.search._storage.abandon_trial`),
so the rerun of the same command runs it again without waiting. Only a process killed without cleanup (SIGKILL)
leaves its trial RUNNING in the study: it goes stale (no heartbeat) and is failed and retried by whichever
worker next runs the study (see :mod:`latopt.search._run`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

EXIT_TERMINATED = 128 + int(signal.SIGTERM)  # 143, the shell's code for "killed by SIGTERM"
EXIT_INTERRUPTED = 130                        # Ctrl-C
STRAY_THREAD_GRACE_S = 5.0   # after an interruption: how long non-daemon threads may take to end (threads_ended)
PR_SET_PDEATHSIG = 1                          # <linux/prctl.h>

_terminating = False


class Terminated(SystemExit):
    """Raised in the main thread by SIGTERM (exit code 143); cleanup runs as for KeyboardInterrupt."""

    def __init__(self) -> None:
        super().__init__(EXIT_TERMINATED)


def _raise_terminated(signum: int, frame: Any) -> None:
    global _terminating
    if _terminating:  # already unwinding from the first SIGTERM: let its cleanup finish
        return
    _terminating = True
    raise Terminated()


def terminating() -> bool:
    """Whether a SIGTERM has come in the active :func:`sigterm_raises` block. An exception raised while it
    unwinds may be its consequence, not a fault: a SIGTERM inside a C extension's initialisation surfaces as that
    import's ``ImportError``."""
    return _terminating


def check_terminated() -> None:
    """Raise :class:`Terminated` when a SIGTERM has come in the active :func:`sigterm_raises` block (its first
    :class:`Terminated` may have been swallowed; see the module's docstring). Called before output is committed."""
    if _terminating:
        raise Terminated()


@contextlib.contextmanager
def sigterm_raises(active: bool = True) -> Iterator[None]:
    """While the block runs, SIGTERM raises :class:`Terminated` here (main thread only; nests)."""
    global _terminating
    if not active or threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
        if old is not _raise_terminated:  # the outermost block: a later SIGTERM is a new one
            _terminating = False


def threads_ended(grace_s: float = STRAY_THREAD_GRACE_S) -> bool:
    """After Ctrl-C or SIGTERM the cleanup has run, but a library thread that was starting when the signal came
    can be left without anyone to stop it (e.g. Optuna's heartbeat thread, when the signal lands inside its
    ``__enter__``), and the interpreter would wait for it forever at exit. Gives the non-daemon threads
    ``grace_s`` seconds to end; False when one is left (the process must then end with ``os._exit``)."""
    deadline = time.monotonic() + grace_s
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    for t in others:
        t.join(max(0.0, deadline - time.monotonic()))
    return not any(t.is_alive() for t in others)


def die_with_parent(parent: int, *, poll_s: float = 0.5) -> str:
    """Receive SIGTERM when process ``parent`` (this process's parent) dies; returns the mechanism used.

    Linux: ``prctl(PR_SET_PDEATHSIG, SIGTERM)`` (the kernel sends it when the parent's thread that started
    this process exits; latopt starts workers from the main thread). Elsewhere, or when prctl fails: a
    daemon thread that sends SIGTERM to this process once ``os.getppid()`` is no longer ``parent``. A
    parent that died before this call is caught by the same ``getppid`` check.
    """
    mechanism = "prctl" if _set_pdeathsig(signal.SIGTERM) else "poll"
    if mechanism == "poll":
        threading.Thread(target=_watch_parent, args=(parent, poll_s), name="latopt-parent-watch",
                         daemon=True).start()
    if os.getppid() != parent:  # it died before the death signal was armed
        os.kill(os.getpid(), signal.SIGTERM)
    return mechanism


def _set_pdeathsig(sig: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int, poll_s: float) -> None:
    while os.getppid() == parent:
        time.sleep(poll_s)
    os.kill(os.getpid(), signal.SIGTERM)
