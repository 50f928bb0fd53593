"""Atomic file output, JSON artifacts, and the names that become path components.

Every artifact is JSON with a ``schema`` field, written atomically (temp file in the same directory +
``os.replace``), so an interrupted run never leaves a half-written file. Whole output directories are
built in a temporary sibling and renamed into place by :func:`atomic_dir`. Reading them back is
:mod:`latopt.files.readers`; torch files are :mod:`latopt.files.torchfile`.

What this layer guarantees for every output (:func:`atomic_path`, :func:`atomic_dir` and the
``write_*`` helpers built on them):

- Modes honour the umask: the temporary file or directory is created with ``0o666`` / ``0o777``, which the
  kernel reduces by the umask (as ``open(path, "w")`` and ``mkdir`` do; not ``mkstemp``'s 0600 / ``mkdtemp``'s
  0700); a file or directory that replaces an existing one keeps the old one's permission bits.
- An output that cannot be written (permission denied, read-only or full file system, quota, file size
  limit, ...) is an :class:`OutputError`, a :class:`~latopt.errors.LatoptError` whose one line names the
  final path and why (``cannot write runs/x/base.pt: No space left on device; ...``); the temporary file or
  directory is removed. Writers report such a failure as Python's OSError (see :func:`_writer_errors`).
- An output path that is a character device or a FIFO (``/dev/null``, a terminal, a named pipe)
  is written straight to, never replaced by a regular file; any other non-regular file is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from latopt.errors import LatoptError, first_line
from latopt.signals import check_terminated

# at most 200 characters: the longest file name latopt builds from a name (a device's LUT being written,
# ".lut-<name>.json.xxxxxxxx.tmp") adds 24, and a file name has at most 255 bytes
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")

# Errors of the file system rather than of one file: whatever the writer was doing, the output failed.
_EDQUOT = getattr(errno, "EDQUOT", errno.ENOSPC)  # disk quota exceeded (not on Windows)
_FS_ERRNOS = frozenset({errno.ENOSPC, _EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO})
_HINTS = {errno.ENOSPC: "free some space or write elsewhere", _EDQUOT: "free some space or write elsewhere",
          errno.EROFS: "choose a writable location", errno.EACCES: "choose a writable location",
          errno.EPERM: "choose a writable location",
          errno.EFBIG: "the file size limit of this process (ulimit -f) or of the file system was reached: raise "
                       "it or write elsewhere"}


class OutputError(LatoptError):
    """An output could not be written; ``path`` is the final path the user asked for, ``reason`` why."""

    def __init__(self, path: str | Path, reason: str, hint: str | None = None) -> None:
        self.path, self.reason, self.hint = Path(path), reason, hint
        super().__init__(f"cannot write {path}: {reason}" + (f"; {hint}" if hint else ""))

    @classmethod
    def from_os(cls, path: str | Path, e: OSError, *, also: tuple[str | Path, ...] = ()) -> OutputError:
        """``e`` as the one line for ``path``; names ``e.filename`` when it is another file than ``path``,
        ``also`` or a temporary file of ``path`` (e.g. the parent directory that could not be created)."""
        reason = e.strerror if e.errno else ""        # errno 0 reads "Success", which it was not
        reason = reason or f"the write did not complete ({first_line(e, 80) if str(e) else type(e).__name__})"
        name = None if e.filename is None else str(e.filename)
        if name is not None and name not in {str(path), *map(str, also)} \
                and not Path(name).name.startswith(f".{Path(path).name}."):
            reason += f" ({name})"
        return cls(path, reason, _HINTS.get(e.errno or 0))


def check_name(name: Any, what: str, *, param: str | None = None) -> str:
    """``name`` when it is an identifier that can be one path component (``runs/<name>/``,
    ``profiles/<name>/``): letters, digits, ``.``, ``_``, ``-``, starting with a letter or digit, at most
    200 characters; else a LatoptError naming ``what`` (and the parameter ``param`` it came as). Names are
    never paths: no ``/``, no ``..``."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise LatoptError(f"{what} {name!r} is not a valid name: use letters, digits, '.', '_' and '-' "
                          "(starting with a letter or digit, at most 200 characters), not a path", param=param)
    return name


@contextlib.contextmanager
def _os_errors(final: Path, *also: Path) -> Iterator[None]:
    """An OSError of the block (creating, renaming the output) becomes an OutputError naming ``final``."""
    try:
        yield
    except OSError as e:
        raise OutputError.from_os(final, e, also=also) from None


@contextlib.contextmanager
def _writer_errors(final: Path, tmp: Path) -> Iterator[None]:
    """An exception of the block that writes ``tmp`` becomes an OutputError when it is a failure to write.

    That is: an OSError of the file system (full, read-only, quota, file size limit, I/O) or about ``tmp``; or an
    OutputError of a file inside ``tmp`` (renamed to the file under ``final``). Anything else is re-raised as it
    is. Writers must report a failed write as the OSError it is: Python's own file writes do; a C++ writer that
    words it otherwise (``torch.save`` to a path) writes through memory (:func:`latopt.files.torchfile.write_torch_atomic`).
    """
    try:
        yield
    except OutputError as e:
        try:
            inner = e.path.relative_to(tmp)
        except ValueError:
            raise e from None
        raise OutputError(final / inner, e.reason, e.hint) from None
    except LatoptError:
        raise
    except OSError as e:
        name = "" if e.filename is None else str(e.filename)
        if e.errno in _FS_ERRNOS or name == str(tmp) or name.startswith(str(tmp) + os.sep):
            raise OutputError.from_os(final, e, also=(tmp,)) from None
        raise


def _stat(path: Path) -> os.stat_result | None:
    with _os_errors(path):
        try:
            return path.stat()
        except FileNotFoundError:
            return None


@contextlib.contextmanager
def atomic_path(path: str | Path, *, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; it replaces ``path`` only when the block succeeds.

    ``suffix`` ends the temporary name (for writers that choose the format by extension). The one place latopt makes a file appear atomically (JSON, text, checkpoints, engines). Creates
    parent directories; refuses a ``path`` that is a directory. A ``path`` that is a character device or
    a FIFO is yielded itself: the block writes straight to it (``/dev/null`` stays a device; a write
    error such as ENOSPC on ``/dev/full`` is an :class:`OutputError`); a block device, socket or other
    special file is refused. The new file gets ``0o666 & ~umask``, or the mode of the regular file it
    replaces. Failures to write are one-line :class:`OutputError` naming ``path``; the temp file is removed.
    A symbolic link is written through, never replaced (:func:`through_link`).
    """
    path = through_link(Path(path))
    st = _stat(path)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise LatoptError(f"output path {path} is a directory; give a file name")
    if st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        try:
            with _writer_errors(path, path):
                yield path
        except BrokenPipeError:     # not a broken stdout (exit 0): a short write to this output
            raise OutputError(path, "its reader closed it before everything was written",
                              "keep the reading end open until latopt exits") from None
        return
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise LatoptError(f"output path {path} is not a regular file (a block device or socket); give a file name")
    with _os_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
    claimed: list[Path] = []         # named before it exists: a signal at any moment finds the cleanup armed
    tmp = path
    try:
        with _os_errors(path):
            tmp = _claim(path, suffix, lambda t: os.close(os.open(t, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)),
                         claimed)
        if st is not None:               # new: 0o666 less the umask (the kernel's); replacing: the old mode
            with _os_errors(path, tmp):
                os.chmod(tmp, st.st_mode & 0o777)
        with _writer_errors(path, tmp):
            yield tmp
        check_terminated()               # a SIGTERM whose exception was lost commits nothing
        with _os_errors(path, tmp):
            os.replace(tmp, path)
    except BaseException:
        for t in claimed:
            with contextlib.suppress(OSError):
                os.unlink(t)
        raise


def make_dirs(path: str | Path) -> Path:
    """``mkdir -p path``; a failure (a file where a directory must be, no permission, a full disk) is one
    :class:`OutputError` line naming ``path`` and why."""
    path = Path(path)
    with _os_errors(path):
        path.mkdir(parents=True, exist_ok=True)
    return path


def through_link(path: Path) -> Path:
    """Where a write to ``path`` goes: ``path`` itself, or the path a symbolic link ``path`` leads to (as ``cp``
    and editors write through a link; latopt never replaces a link it did not create). A link to a character
    device or FIFO is kept as it is: opening it writes to what it leads to (``/proc/self/fd/1``). A link loop is
    one :class:`OutputError` line."""
    if not path.is_symlink():
        return path
    st = _stat(path)                  # follows the link
    if st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        return path
    return Path(os.path.realpath(path))


def _copy_existing(final: Path, tmp: Path) -> None:
    """Copy the output directory ``final`` into ``tmp`` as it is: symbolic links as links (never followed: a
    link to ``/dev/zero`` would be read for ever), regular files and directories; anything else there (a FIFO,
    a device, a socket) is refused in one line before anything is copied."""
    for top, dirs, files in os.walk(final):
        for name in [*dirs, *files]:
            p = Path(top) / name
            mode = p.lstat().st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                raise LatoptError(f"output directory {final} holds {p}, which is not a regular file, directory or "
                                  "link (a FIFO, device or socket); latopt keeps what it finds in an output directory "
                                  "and cannot copy it: remove it or choose another output directory", param="out")
    shutil.copytree(final, tmp, symlinks=True, dirs_exist_ok=True)  # copies final's mode onto tmp too


def _claim(path: Path, suffix: str, create: Callable[[Path], None], claimed: list[Path]) -> Path:
    """Create a new hidden entry beside ``path`` (``.NAME.XXXXXXXX[suffix]``) with ``create`` (which must fail
    with FileExistsError when the name is taken: another name is then tried) and return it. The name is in
    ``claimed`` before it exists and only while it is ours, so the caller's cleanup (inside whose ``try`` this
    runs) removes it after a Ctrl-C or SIGTERM at any moment (``tempfile.mkstemp`` / ``mkdtemp`` leave a
    window between creating and naming) and never removes another writer's entry."""
    while True:
        name = path.parent / f".{path.name}.{secrets.token_hex(4)}{suffix}"
        claimed[:] = [name]
        try:
            create(name)
        except FileExistsError:
            claimed.clear()
            continue
        return name


def file_sha256(path: str | Path) -> str:
    """SHA-256 (hex) of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_json_atomic(path: str | Path, obj: Any, *, indent: int = 2) -> Path:
    """Write ``obj`` as JSON to ``path`` atomically; creates parent directories."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=indent, default=_json_default) + "\n")
    return Path(path)


def json_plain(obj: Any) -> Any:
    """``obj`` as plain JSON types (dict with str keys, list, str, int, float, bool, None), converted as
    :func:`write_json_atomic` converts it (paths, NumPy scalars and arrays, sets, dataclasses)."""
    return json.loads(json.dumps(obj, default=_json_default))


def write_text_atomic(path: str | Path, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_figure_atomic(path: str | Path, fig: Any, **savefig: Any) -> Path:
    """Save a ``matplotlib.figure.Figure`` to ``path`` atomically; ``savefig`` are ``Figure.savefig``'s
    options (``format`` defaults to the suffix of ``path``, else PNG)."""
    buf = io.BytesIO()
    savefig.setdefault("format", Path(path).suffix.lstrip(".") or "png")
    fig.savefig(buf, **savefig)
    return write_bytes_atomic(path, buf.getvalue())


@contextlib.contextmanager
def atomic_dir(final: str | Path, *, overwrite: bool = True) -> Iterator[Path]:
    """Yield a temporary directory that is renamed to ``final`` only if the block succeeds.

    Files already in ``final`` are kept unless the block writes a file of the same name (the temp dir
    starts as a copy of ``final`` when it exists, mode included; a new one gets ``0o777 & ~umask``). On
    error, ``final`` is untouched and the temp dir removed; a failure to write (here or in an
    :func:`atomic_path` inside it) is one-line :class:`OutputError` naming the path under ``final``. Links in
    ``final`` are kept as links, never followed (:func:`_copy_existing`); a ``final`` that is a link to a
    directory is written through (:func:`through_link`).
    """
    final = through_link(Path(final))
    st = check_output_dir(final, overwrite=overwrite)
    with _os_errors(final):
        final.parent.mkdir(parents=True, exist_ok=True)
    claimed: list[Path] = []         # see atomic_path
    tmp = final
    try:
        with _os_errors(final):
            tmp = _claim(final, "", lambda t: t.mkdir(mode=0o777), claimed)   # less the umask
        if st is not None:
            with _os_errors(final, tmp):
                _copy_existing(final, tmp)
        with _writer_errors(final, tmp):
            yield tmp
        check_terminated()
        with _os_errors(final, tmp):
            _swap_in(tmp, final)
    except BaseException:
        for t in claimed:
            shutil.rmtree(t, ignore_errors=True)
        raise


def check_output_dir(final: str | Path, *, overwrite: bool = True) -> os.stat_result | None:
    """Refuse an output directory :func:`atomic_dir` could not replace (a file there; an existing one without
    ``overwrite``), before any work; returns its ``lstat`` (None when it does not exist). Its errors name the
    parameter ``out`` (every stage's output directory)."""
    final = Path(final)
    if final.name in ("", ".", "..") or final.resolve() in Path.cwd().resolve().parents or \
            final.resolve() == Path.cwd().resolve():
        raise LatoptError(f"output directory {final} is the current directory or one above it, which latopt would "
                          "have to replace; give a directory of its own (e.g. export)", param="out")
    st = _stat(final)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise LatoptError(f"output directory {final} exists and is a file; choose another output directory",
                          param="out")
    if st is not None and not overwrite:
        raise LatoptError(f"output directory {final} already exists", param="out")
    return st


def _swap_in(tmp: Path, final: Path) -> None:
    """Rename ``tmp`` to ``final``; an existing ``final`` is moved aside first and put back on failure
    (an error or a signal)."""
    if not final.exists():
        os.replace(tmp, final)
        return
    claimed: list[Path] = []
    try:
        old = _claim(final, ".old", lambda t: t.mkdir(mode=0o700), claimed)
        os.replace(final, old / "d")
        os.replace(tmp, final)
    except BaseException:
        for old in claimed:
            if (old / "d").exists() and not final.exists():
                os.replace(old / "d", final)  # if even this fails, the previous output stays in ``old``
            else:
                shutil.rmtree(old, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _json_default(o: Any) -> Any:
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
