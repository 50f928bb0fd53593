"""User-facing errors and exit codes.

A :class:`LatoptError` is a user mistake (unknown model, missing file, bad hyper-parameter, absent
TensorRT, ...). The CLI prints its message as one line and exits with code 2, without a traceback.
The message says what is wrong and how to fix it.

A :class:`VerificationError` is a check that did not hold (a fold against its unfolded twin, ONNX
against PyTorch, a checkpoint against its recorded SHA-256): not the user's fault but a latopt bug or a
corrupted artefact. One line too, exit code 3.
"""

from __future__ import annotations

import errno

EXIT_USAGE = 2         # the input is wrong: one line says what and how to fix it
EXIT_VERIFICATION = 3  # a check failed: the fold, a numeric gate, a checkpoint's integrity


class LatoptError(Exception):
    """A mistake the user can fix; printed as one line by the CLI, exit code 2.

    A library error names the *parameter* it is about (``param``: the keyword of the function that was
    called, e.g. ``"tau"``), never a command-line flag: the CLI knows which of its flags sets that parameter
    and adds it to the line (:func:`latopt.cli.flag_for`), so the same error reads right from Python and
    from the command line.
    """

    exit_code = EXIT_USAGE

    def __init__(self, message: str = "", *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class VerificationError(LatoptError):
    """A check failed (fold vs reference, ONNX vs PyTorch, compressed vs original, checkpoint digest).

    Exit code 3 from the CLI; the message carries the numbers.
    """

    exit_code = EXIT_VERIFICATION


MAX_ERROR_LINE = 600   # characters of an error line: a message quoting a huge value is cut, never megabytes


def one_line(text: str, limit: int = MAX_ERROR_LINE) -> str:
    """``text`` as one printable line of at most ``limit`` characters: control characters escaped (a newline in
    a path is ``\\n``, so it cannot split the line or hide the end of it), the rest cut with a count."""
    out = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    if len(out) > limit:
        cut = limit - 40
        out = f"{out[:cut]}… ({len(out) - cut} more characters)"
    return out


def first_line(e: BaseException | str, limit: int = 200) -> str:
    """The first non-empty line of an exception's message (its type name when empty), cut to ``limit``:
    what a one-line LatoptError quotes of the library error behind it."""
    for line in str(e).strip().splitlines():
        if line.strip():
            return line.strip()[:limit]
    return type(e).__name__ if isinstance(e, BaseException) else ""


_OOM = ("out of memory", "can't allocate memory", "failed to allocate memory", "bad_alloc", "cannot allocate memory")


def out_of_memory(e: BaseException) -> bool:
    """An allocation failure: MemoryError, ENOMEM, or a library's own exception for it (torch's
    "DefaultCPUAllocator: can't allocate memory" RuntimeError and its CUDA OutOfMemoryError, ONNX Runtime's
    "Failed to allocate memory")."""
    return (isinstance(e, MemoryError) or getattr(e, "errno", None) == errno.ENOMEM
            or any(m in str(e).lower() for m in _OOM))
