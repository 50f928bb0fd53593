"""tools/seed_sweep.py trains each run in a subprocess: that subprocess must import the same checkout's latopt as
the sweep (a worktree beside an editable install once trained with one checkout's code and a config the other
wrote: every run failed on an unknown config key)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tools import seed_sweep


def test_the_training_subprocess_imports_this_checkout(monkeypatch, tmp_path: Path) -> None:
    seen: dict = {}

    def fake_run(cmd, **kw):
        seen["cmd"], seen["env"] = cmd, kw.get("env")
        return subprocess.CompletedProcess(cmd, 2, "", "latopt: error: stop here")

    monkeypatch.setattr(seed_sweep.subprocess, "run", fake_run)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    row = seed_sweep._one(tmp_path / "c.yaml", 0, 1, tmp_path)
    assert row["exit"] == 2 and row["error"] == "latopt: error: stop here"
    assert seen["cmd"][1:3] == ["-m", "latopt"]
    paths = seen["env"]["PYTHONPATH"].split(os.pathsep)
    assert paths == [str(Path(seed_sweep.__file__).resolve().parents[1]), "/elsewhere"]
