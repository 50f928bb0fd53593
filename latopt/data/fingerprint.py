"""What a run records about its data: :func:`data_meta` (kept in a checkpoint, checked again when it is
folded) and :func:`data_fingerprint` (whether a training state may be resumed on the data at hand)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from latopt.config import RunConfig
from latopt.data.normalize import config_norm
from latopt.data.registry import task_root


def data_meta(cfg: RunConfig) -> dict[str, Any]:
    """What a checkpoint records about its data, checked again when it is folded."""
    return {"task": cfg.data.task, "split_seed": cfg.data.split_seed, "resolution": cfg.data.resolution,
            "train_samples": cfg.data.train_samples, "max_samples": cfg.data.max_samples,
            "normalize": config_norm(cfg)}


def data_fingerprint(spec: str) -> str:
    """What a task's data is, for deciding whether a training state may be resumed: the bundled tasks by
    name; a directory task (``imagefolder:``, ``cifar10:``) by the SHA-256 of its listing (every file's
    relative path, size and modification time; links not followed), so data changed in place is seen."""
    root = task_root(spec)
    if root is None:
        return spec
    h = hashlib.sha256(spec.encode())
    for top, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            p = Path(top) / name
            try:
                st = p.lstat()
            except OSError:
                continue
            h.update(f"{p.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode(errors="surrogateescape"))
    return h.hexdigest()
