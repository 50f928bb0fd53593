"""Hostile input (issue 49, class G): a stage's record in run.json is its hashed outputs. A path in the record
edited to point at another file (another base, whose accuracy the record does not describe) is not reused: the
stage is made again. Nothing is trained: run.json is written by :class:`latopt.run.state.RunState` directly."""

from __future__ import annotations

import json
from pathlib import Path

from latopt.run.state import RunState

STAGES = ("base", "profile", "search", "export", "report")
MADE_FROM = {"config section train": {"epochs": 1}, "seed": 0}


def _finished_base(root: Path) -> Path:
    """A run directory whose base stage finished: base/base.pt hashed, its accuracy recorded."""
    (root / "base").mkdir(parents=True)
    (root / "base" / "base.pt").write_bytes(b"the run's own base")
    state = RunState(root, root / "config.yaml", False, STAGES)
    state.start("base", MADE_FROM)
    state.finish("base", {"checkpoint": str(root / "base" / "base.pt"), "test_acc": 0.1, "val_acc": 0.1})
    return root / "run.json"


def _stale(root: Path) -> list[str]:
    return RunState(root, root / "config.yaml", False, STAGES).stale("base", MADE_FROM)


def test_an_intact_record_is_reused(tmp_path: Path) -> None:
    _finished_base(tmp_path / "run")
    assert _stale(tmp_path / "run") == []


def test_a_record_pointed_at_another_base_is_made_again(tmp_path: Path) -> None:
    root = tmp_path / "run"
    run_json = _finished_base(root)
    other = tmp_path / "other" / "base.pt"            # another base, e.g. a better-trained one
    other.parent.mkdir()
    other.write_bytes(b"another base")
    for pointed in (str(other), "../other/base.pt", "base/other.pt"):
        (root / "base" / "other.pt").write_bytes(b"another base")
        data = json.loads(run_json.read_text())
        data["stages"]["base"]["checkpoint"] = pointed
        run_json.write_text(json.dumps(data))
        assert _stale(root) == [f"its record's checkpoint {pointed} is not an output it hashed"], pointed
        state = RunState(root, root / "config.yaml", False, STAGES)
        assert state.record("base") is not None      # read as it is; the plan re-makes the stage


def test_a_directory_output_is_tied_too(tmp_path: Path) -> None:
    """The export stage's record names a directory: its path must be the directory whose files were hashed."""
    root = tmp_path / "run"
    (root / "export").mkdir(parents=True)
    (root / "export" / "export.json").write_text("{}")
    (root / "elsewhere").mkdir()
    (root / "elsewhere" / "export.json").write_text("{}")
    state = RunState(root, root / "config.yaml", False, STAGES)
    state.start("export", MADE_FROM)
    state.finish("export", {"dir": str(root / "export")})
    assert _stale_export(root) == []
    data = json.loads((root / "run.json").read_text())
    data["stages"]["export"]["dir"] = "elsewhere"
    (root / "run.json").write_text(json.dumps(data))
    assert _stale_export(root) == ["its record's dir elsewhere is not an output it hashed"]


def _stale_export(root: Path) -> list[str]:
    return RunState(root, root / "config.yaml", False, STAGES).stale("export", MADE_FROM)
