"""User-facing errors.

A :class:`LatoptError` is a user mistake (unknown model, missing file, bad hyper-parameter, absent
TensorRT, ...). The CLI prints its message as one line and exits with code 2, without a traceback.
The message says what is wrong and how to fix it.
"""

from __future__ import annotations


class LatoptError(Exception):
    """A mistake the user can fix; printed as one line by the CLI, exit code 2."""

    exit_code = 2


class VerificationError(LatoptError):
    """A numeric check failed (fold vs reference, ONNX vs PyTorch, compressed vs original).

    Still exit code 2 from the CLI; the message carries the numbers.
    """


def first_line(e: BaseException | str, limit: int = 200) -> str:
    """The first non-empty line of an exception's message (its type name when empty), cut to ``limit``:
    what a one-line LatoptError quotes of the library error behind it."""
    for line in str(e).strip().splitlines():
        if line.strip():
            return line.strip()[:limit]
    return type(e).__name__ if isinstance(e, BaseException) else ""
