"""JSON artifacts and atomic file output.

Every artifact is JSON with a ``schema`` field, written atomically (temp file in the same directory +
``os.replace``), so an interrupted run never leaves a half-written file. Whole output directories are
built in a temporary sibling and renamed into place by :func:`atomic_dir`.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from latopt.errors import LatoptError


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; it replaces ``path`` only when the block succeeds.

    Creates parent directories; refuses a ``path`` that is a directory. The one place latopt makes a
    file appear atomically (JSON, text, checkpoints, engines)."""
    path = Path(path)
    if path.is_dir():
        raise LatoptError(f"output path {path} is a directory; give a file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json_atomic(path: str | Path, obj: Any, *, indent: int = 2) -> Path:
    """Write ``obj`` as JSON to ``path`` atomically; creates parent directories."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=indent, default=_json_default) + "\n")
    return Path(path)


def write_text_atomic(path: str | Path, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def read_json(path: str | Path, *, schema: str | None = None, what: str = "file") -> dict[str, Any]:
    """Read a JSON artifact; check its ``schema`` field when ``schema`` is given."""
    path = Path(path)
    if not path.is_file():
        raise LatoptError(f"{what} {path} does not exist")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LatoptError(f"{what} {path} is not valid JSON ({e}); re-create it") from None
    if not isinstance(data, dict):
        raise LatoptError(f"{what} {path} is not a JSON object")
    if schema is not None and data.get("schema") != schema:
        raise LatoptError(
            f"{what} {path} has schema {data.get('schema')!r}, expected {schema!r}; is it the right kind of file?"
        )
    return data


@contextlib.contextmanager
def atomic_dir(final: str | Path, *, overwrite: bool = True) -> Iterator[Path]:
    """Yield a temporary directory that is renamed to ``final`` only if the block succeeds.

    Files already in ``final`` are kept unless the block writes a file of the same name (the temp dir
    starts as a copy of ``final`` when it exists). On error, ``final`` is untouched.
    """
    final = Path(final)
    if final.exists() and not final.is_dir():
        raise LatoptError(f"output directory {final} exists and is a file; choose another --out")
    if final.exists() and not overwrite:
        raise LatoptError(f"output directory {final} already exists")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        if final.exists():
            shutil.copytree(final, tmp, dirs_exist_ok=True)
        yield tmp
        if final.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old.", dir=final.parent))
            os.replace(final, old / "d")
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU results are then deterministic for the same inputs)."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def _json_default(o: Any) -> Any:
    import dataclasses

    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    if isinstance(o, Path):
        return str(o)
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
