"""torch files: written atomically through memory, and what ``torch.load`` raises on a file that is not one.

``torch.save`` to a path writes through torch's C++ writer, which reports a full disk or a file size limit
(``ulimit -f``) as a RuntimeError of its own ("unexpected pos ..."), indistinguishable from a bug.
:func:`write_torch_atomic` serialises into memory and writes the bytes with Python, so that such a failure is the
OSError it is, and :func:`latopt.files.artifacts.atomic_path` turns it into a one-line
:class:`~latopt.files.artifacts.OutputError` naming the path.
"""

from __future__ import annotations

import io
import pickle
import struct
import zipfile
from pathlib import Path
from typing import Any

import torch

from latopt.files.artifacts import write_bytes_atomic

# What torch.load(weights_only=True) raises on a file that is not a readable torch file (truncated, bytes
# flipped, not a zip, a hostile pickle stream): its unpickler and zip reader fail with any of these.
TORCH_LOAD_ERRORS: tuple[type[BaseException], ...] = (
    RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError, AttributeError, UnicodeDecodeError,
    IndexError, KeyError, TypeError, struct.error, OverflowError, pickle.UnpicklingError)


def write_torch_atomic(path: str | Path, obj: Any) -> Path:
    """``torch.save(obj)`` to ``path`` atomically (:func:`latopt.files.artifacts.write_bytes_atomic`); a failure to
    write is a one-line :class:`~latopt.files.artifacts.OutputError`."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    return write_bytes_atomic(path, buf.getvalue())
