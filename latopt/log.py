"""One logging setup for latopt: progress and warnings on stderr, results on stdout.

- **Results** a user reads or pipes (tables, summaries, ``wrote PATH``, JSON) are printed to stdout by the
  command line (:mod:`latopt.cli`); the stage APIs return them and never print.
- **Progress and status** lines go through the ``latopt`` logger (:func:`get_logger`, one child logger per
  stage) to stderr, as ``[stage] message``; warnings as ``latopt: warning: message`` (errors are printed
  by :func:`latopt.cli.main` as ``latopt: error: message``). A stage API's ``progress`` argument turns
  its progress lines and bars off; the logger's level (:func:`setup`) filters what remains.
- **Progress bars** (tqdm, :func:`progress_bar`) are drawn only when stderr is a terminal and progress
  is logged, so a log file, a pipe, a test or CI never holds one.

The ``latopt`` logger has this module's stderr handler from the first import (like Optuna's ``optuna``
logger), so a library caller sees progress at INFO without configuring anything; messages also
propagate to the root logger (pytest's ``caplog``, an application's own handlers).
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from tqdm import tqdm

ROOT = "latopt"
QUIET, DEFAULT, VERBOSE = -1, 0, 1          # the verbosity of `-q`, neither, `-v`
_LEVELS = {QUIET: logging.WARNING, DEFAULT: logging.INFO, VERBOSE: logging.DEBUG}

T = TypeVar("T")


class _Formatter(logging.Formatter):
    """``[stage] message`` (every line of it) below WARNING; ``latopt: warning: message`` from WARNING up."""

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        if record.levelno >= logging.WARNING:
            return f"{ROOT}: {record.levelname.lower()}: {msg}"
        stage = record.name.removeprefix(ROOT + ".") or ROOT
        return "\n".join(f"[{stage}] {line}" for line in msg.splitlines() or [""])


class _StderrHandler(logging.StreamHandler):
    """Writes to ``sys.stderr`` as it is when a message is emitted (a redirected or captured stream
    included), like :data:`logging.lastResort`."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:  # StreamHandler.__init__ assigns it; sys.stderr is always used
        pass


_root = logging.getLogger(ROOT)
_handler = _StderrHandler()
_handler.setFormatter(_Formatter())
_root.addHandler(_handler)
_root.setLevel(logging.INFO)


def get_logger(stage: str) -> logging.Logger:
    """The logger of one stage (``get_logger("export")`` → ``latopt.export``, lines ``[export] ...``)."""
    return logging.getLogger(f"{ROOT}.{stage}")


def setup(verbosity: int = DEFAULT) -> None:
    """Set what latopt logs: ``QUIET`` (-1: warnings and errors), ``DEFAULT`` (0: progress too) or
    ``VERBOSE`` (1: debug too). Called once by :func:`latopt.cli.main`; calling it again replaces the level.

    Python warnings (latopt issues none: its own go through the logger) come from the libraries it uses
    (matplotlib, torch, ...) and mean nothing the user can act on: they become debug lines, shown with
    ``-v`` only, instead of multi-line text on stderr that even ``-q`` printed."""
    _root.setLevel(_LEVELS[max(QUIET, min(VERBOSE, int(verbosity)))])
    warnings.showwarning = _library_warning


def _library_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                     file: Any = None, line: str | None = None) -> None:
    _root.getChild("lib").debug(f"{category.__name__} from {Path(filename).name}:{lineno}: "
                                f"{' '.join(str(message).split())}")


def verbosity() -> int:
    """The current verbosity (what :func:`setup` was given), e.g. to pass it on to a worker process."""
    if _root.isEnabledFor(logging.DEBUG):
        return VERBOSE
    return DEFAULT if _root.isEnabledFor(logging.INFO) else QUIET


def progress_bar(iterable: Iterable[T], *, desc: str, enabled: bool = True, **kwargs: Any) -> tqdm[T]:
    """``iterable`` with a tqdm bar on stderr, drawn only when ``enabled``, progress is logged (not
    ``-q``) and stderr is a terminal; otherwise tqdm passes the items through without drawing anything."""
    from tqdm import tqdm  # noqa: F811  start-up time: tqdm (~0.1 s) loads with the first bar, not for `latopt --help`

    show = enabled and _root.isEnabledFor(logging.INFO) and sys.stderr.isatty()
    return tqdm(iterable, desc=desc, disable=not show, file=sys.stderr, leave=False, dynamic_ncols=True, **kwargs)


def time_left(seconds: list[float], remaining: int) -> str:
    """An estimate of the time ``remaining`` more units of work take at the mean of ``seconds`` (the units done
    so far), as ``"12 min"`` / ``"40 s"``."""
    if not seconds or remaining <= 0:
        return "0 s"
    left = sum(seconds) / len(seconds) * remaining
    return f"{left / 60:.0f} min" if left >= 90 else f"{left:.0f} s"

