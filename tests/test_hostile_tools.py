"""Hostile input (issue 49, class H): the tools follow the CLI's conventions. A refusal is one line naming the
tool, exit 2, with nothing written; the published results are replaced only when asked, and never by a run in
which a model could not be checked. Nothing here trains or times a network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools import bench_costs as bc
from tools import bench_methods as bm
from tools import compat
from tools import depth_table as dt


def _refused(capsys: pytest.CaptureFixture[str], tool: str, call, *args) -> str:
    """``call(*args)`` exits 2 with one line on stderr naming ``tool``; that line."""
    with pytest.raises(SystemExit) as e:
        call(*args)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and err.startswith(f"{tool}: error: "), (e.value, err)
    return err


@pytest.fixture
def published(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the published compatibility file standing in for it (a regression cannot touch the real one)."""
    path = tmp_path / "results" / "compat.json"
    path.parent.mkdir()
    path.write_bytes(compat.DEFAULT_OUT.read_bytes())
    monkeypatch.setattr(compat, "DEFAULT_OUT", path)
    monkeypatch.setattr(compat, "ROOT", tmp_path)
    return path


def test_compat_never_replaces_the_published_file_unasked(published: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    before = published.read_bytes()
    err = _refused(capsys, "compat", compat.main, ["--models", "mobilenetv2_035"])   # a few: --out or --merge
    assert "--out -" in err and "--merge" in err
    out = tmp_path / "few.json"
    for argv, says in ((["--models", "no_such_model_x"], "unknown model 'no_such_model_x'"),
                       (["--models", "no_such_model_x", "--out", str(out)], "unknown model 'no_such_model_x'"),
                       (["--models", "no_such_model_x", "--merge"], "unknown model 'no_such_model_x'"),
                       (["--resolution", "100000"], "--resolution 100000 is too large"),
                       (["--models", "mobilenetv2_035", "--resolution", "100000", "--out", "-"], "too large"),
                       (["--models", "mobilenetv2_035,,x", "--out", "-"], "each once"),
                       (["--models", "mobilenetv2_035", "--merge", "--out", str(tmp_path / "none.json")],
                        "does not exist")):
        if argv == ["--models", "no_such_model_x"]:
            argv = [*argv, "--out", "-"]
        assert says in _refused(capsys, "compat", compat.main, argv), argv
    assert not out.exists() and published.read_bytes() == before

    def broken(name: str, resolution: int = 32, seed: int = 0) -> dict:
        raise RuntimeError("a fold check that crashed")

    monkeypatch.setattr(compat, "MODELS", ("mobilenetv2_035",))
    monkeypatch.setattr(compat, "check_model", broken)
    assert compat.main([]) == 1                                        # a failed check keeps its own code ...
    assert "is kept as it was" in capsys.readouterr().err
    assert published.read_bytes() == before                            # ... and never replaces the results
    assert compat.main(["--out", str(out)]) == 1                      # asked for: written, still exit 1
    assert json.loads(out.read_text())["models"][0]["error"].startswith("RuntimeError")


def test_depth_table_refuses_what_is_not_a_published_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "holds no published run" in _refused(capsys, "depth_table", dt.main, [str(tmp_path / "missing")])
    (tmp_path / "cells").mkdir()
    (tmp_path / "run.json").write_text('{"schema": "latopt.method_table/1", "model": "resn')   # truncated
    assert "run.json is not a JSON file" in _refused(capsys, "depth_table", dt.main, [str(tmp_path)])
    (tmp_path / "run.json").write_text("{}")                                                  # edited by hand
    assert "is not a run bench_methods published" in _refused(capsys, "depth_table", dt.main, [str(tmp_path)])
    _refused(capsys, "depth_table", dt.main, [])


def test_publish_refusals_exit_2_and_write_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs, res = tmp_path / "runs", tmp_path / "results"
    assert "no final run" in _refused(capsys, "bench_methods", bm.main,
                                      ["publish", "--runs-dir", str(runs), "--results", str(res)])
    assert "must be a part of the protocol's seeds" in _refused(capsys, "bench_methods", bm._check_group, {9}, {})
    assert "no final run" in _refused(capsys, "bench_costs", bc.main,
                                      ["publish", "--runs-dir", str(runs), "--results", str(res)])
    assert "E2: no final runs" in _refused(capsys, "bench_costs", bc.main, ["publish", "--runs-dir", str(runs),
                                                                            "--results", str(res), "--experiments", "e2"])
    assert "needs --results" in _refused(capsys, "bench_costs", bc.main, ["publish", "--runs-dir", str(runs)])
    assert not res.exists()


def test_bench_promises_merge_refusal_writes_no_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """publish --merge refused for the accuracy file (another schema) writes no budget.json either: every file
    is made and checked before any is written."""
    from tools import bench_promises as bp

    runs, dest = tmp_path / "runs", tmp_path / "results"
    for stage, cell in (("budget", "budget-tiny.cpu@0.7"), ("accuracy", "acc-quickstart.s0")):
        (runs / stage / "cells").mkdir(parents=True)
        (runs / stage / "cells" / f"{cell}.json").write_text(json.dumps(
            {"cell": cell, "seed": 0, "run_config": "quickstart", "name": "quickstart"}))
    dest.mkdir()
    (dest / "accuracy.json").write_text(json.dumps({"schema": "something/else", "cells": []}))
    err = _refused(capsys, "bench_promises", bp.main, ["publish", "--runs-dir", str(runs), "--results", str(dest),
                                                        "--merge"])
    assert "has schema 'something/else'" in err
    assert sorted(p.name for p in dest.iterdir()) == ["accuracy.json"]   # budget.json not written
