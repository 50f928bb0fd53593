"""Listings of a directory before and after a command, and loading what a command wrote."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import stat
from pathlib import Path
from typing import Any

import yaml

LOCK = re.compile(r"^\..*\.lock$")            # lock files (filelock) are not temp files


# ============================================================================== listings
def listing(root: Path) -> dict[str, str]:
    """{relative path: type letter} of everything under ``root``, hidden entries included."""
    entries: dict[str, str] = {}
    if not root.exists():
        return entries
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            mode = os.lstat(p).st_mode
            kind = ("d" if stat.S_ISDIR(mode) else "c" if stat.S_ISCHR(mode) else "p" if stat.S_ISFIFO(mode)
                    else "l" if stat.S_ISLNK(mode) else "f")
            entries[os.path.relpath(p, root)] = kind
    return entries


def hidden(paths: list[str] | set[str]) -> list[str]:
    """Hidden temp entries: a path component starting with '.', lock files aside."""
    return sorted(p for p in paths if any(part.startswith(".") and not LOCK.match(part) for part in Path(p).parts))


def under(path: Path, roots: list[Path]) -> bool:
    real = Path(os.path.normpath(path))
    return any(real == r or r in real.parents for r in roots)


# ============================================================================== loading artefacts
def load_pt(p: Path) -> Any:
    import torch

    return torch.load(p, map_location="cpu", weights_only=True)


def load_any(p: Path) -> Any:
    """Load a file by its type (raises when it is unreadable: a partial or corrupt file)."""
    suffix = p.suffix
    if suffix == ".pt":
        return load_pt(p)
    if suffix == ".json":
        return json.loads(p.read_text())
    if suffix in (".yaml", ".yml"):
        return yaml.safe_load(p.read_text())
    if suffix == ".onnx":
        import onnx

        return onnx.load(str(p))
    if suffix == ".npy":
        import numpy as np

        return np.load(p, allow_pickle=False)
    if suffix == ".png":
        data = p.read_bytes()
        if not data.endswith(b"IEND\xaeB`\x82"):
            raise ValueError("PNG without its IEND chunk")
        return data
    if suffix == ".db":
        with contextlib.closing(sqlite3.connect(f"file:{p}?mode=ro", uri=True)) as db:
            if db.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
                raise ValueError("sqlite integrity check failed")
        return None
    if p.stat().st_size == 0:
        raise ValueError("empty file")
    return p.read_bytes()


def ckpt_summary(p: Path) -> dict[str, Any] | None:
    """What a latopt checkpoint records (fold plan, test accuracy), or None when torch cannot read it."""
    try:
        obj = load_pt(p)
    except Exception:
        return None
    arch = obj.get("arch") if isinstance(obj, dict) else None
    meta = obj.get("meta") if isinstance(obj, dict) else None
    fold = arch.get("fold") if isinstance(arch, dict) else None
    plan = fold.get("plan") if isinstance(fold, dict) else None
    acc = None
    if isinstance(meta, dict):
        acc = meta["acc"].get("finetuned") if isinstance(meta.get("acc"), dict) else meta.get("test_acc")
    return {"plan": {str(k): v for k, v in plan.items()} if isinstance(plan, dict) else {},
            "acc": acc if isinstance(acc, (int, float)) and not isinstance(acc, bool) else None,
            "state": obj.get("state_dict") if isinstance(obj, dict) else None}


def same_tensors(a: Any, b: Any) -> bool:
    import torch

    if not (isinstance(a, dict) and isinstance(b, dict)) or a.keys() != b.keys():
        return False
    return all(isinstance(a[k], torch.Tensor) and isinstance(b[k], torch.Tensor) and a[k].dtype == b[k].dtype
               and a[k].shape == b[k].shape and torch.equal(a[k], b[k]) for k in a)
