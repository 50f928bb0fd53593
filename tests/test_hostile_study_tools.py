"""Hostile input to the DP's front study (``latopt plan --budgets``) and to the tools that follow the
package's error rules (``tools/regenerate.py``, ``tools/gpu_check.py``): one line and exit 2 for a mistake, before any
work, and nothing half-done left behind (issue 29)."""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from latopt.errors import LatoptError
from tests.test_dp import MODEL, TINY, _lut_for
from tools import gpu_check, regenerate

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ----------------------------------------------------------------------------------------- the DP's study
@pytest.fixture(scope="module")
def dp_tiny(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A tiny trained base, its config and a made-up LUT that times full, pw and drop (tests/test_dp.py's)."""
    from latopt.config import load_config, write_config
    from latopt.latency.lut import save_lut
    from latopt.training.base_training import train_base

    root = tmp_path_factory.mktemp("hostile-dp")
    cfg = load_config("quickstart", {**TINY, "name": "hs", "dp.refine": 0})   # each budget's trial once
    write_config(cfg, root / "hs.yaml")
    train_base(cfg, root / "base", progress=False, seed=0)
    save_lut(_lut_for(MODEL, 16), root / "lut.json")
    return {"root": root, "config": root / "hs.yaml", "base": root / "base" / "base.pt", "lut": root / "lut.json"}


def _dp_args(t: dict, runs: Path, *more: str) -> list[str]:
    return ["plan", "--config", str(t["config"]), "--importance", "uniform", "--base",
            str(t["base"]), "--lut", str(t["lut"]), "--runs-dir", str(runs), "--threads", "1", *more]


def test_a_grid_of_one_budget_runs_past_the_base_trial() -> None:
    # GridSampler.after_trial read the base trial's grid_id (it has none: it is enqueued outside the grid) once a
    # single grid point was left: KeyError 'grid_id' after the base trial of `--budgets 0.6`
    from latopt.config import RunConfig
    from latopt.methods import make_method

    def space_of(budgets):
        return make_method(RunConfig().with_overrides({"method": "dp", "dp.budgets": list(budgets)})).space()

    for budgets in ((0.6,), (1.0,), (0.5, 0.7)):
        space = space_of(budgets)
        study = optuna.create_study(directions=["maximize", "minimize"], sampler=space.sampler(0, 3, "tpe"))
        study.enqueue_trial(space.base_params(), user_attrs={"base": True})
        for _ in range(len(budgets) + 1):
            study.optimize(lambda t, s=space: (0.0, s.suggest(t)["budget"]), n_trials=1)
        assert [t.state for t in study.trials] == [TrialState.COMPLETE] * (len(budgets) + 1)
        assert study.trials[0].params["budget"] == 1.0
        assert sorted(t.params["budget"] for t in study.trials[1:]) == sorted(budgets)
    # a base trial enqueued again late (its first run failed), when one grid point is left, is outside the grid too
    space = space_of((0.6, 0.7))
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=space.sampler(0, 3, "tpe"))
    study.enqueue_trial(space.base_params(), user_attrs={"base": True})
    study.optimize(lambda t: (0.0, space.suggest(t)["budget"]), n_trials=2)
    study.enqueue_trial(space.base_params(), user_attrs={"base": True})
    study.optimize(lambda t: (0.0, space.suggest(t)["budget"]), n_trials=2)
    assert sorted(t.params["budget"] for t in study.trials) == [0.6, 0.7, 1.0, 1.0]


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_one_budget_gives_a_finished_study_and_its_front(dp_tiny: dict, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    import torch

    from latopt.cli import main

    threads = torch.get_num_threads()
    try:
        assert main(_dp_args(dp_tiny, tmp_path / "runs", "--budgets", "0.6", "-q")) == 0, capsys.readouterr().err
    finally:
        torch.set_num_threads(threads)
    study_dir = tmp_path / "runs" / "hs-dp" / "search"
    assert (study_dir / "pareto.json").is_file() and (study_dir / "pareto.csv").is_file()
    study = optuna.load_study(study_name="hs-dp", storage=f"sqlite:///{study_dir / 'study.db'}")
    assert [(t.state, t.params["budget"]) for t in study.trials] == [(TrialState.COMPLETE, 1.0),
                                                                     (TrialState.COMPLETE, 0.6)]


@pytest.mark.parametrize("text", ["", ",", " , ", "0.5,,0.7", "0.5,", "0.5,0.5", "0.5,0.50", "0.6,6e-1", "nan",
                                  "inf", "-inf", "0", "-0.5", "1.5", "1.0000001", "abc", "0.5;0.7", "0x1"])
def test_bad_budgets_are_one_line_naming_the_flag_before_any_work(text: str, dp_tiny: dict, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture) -> None:
    import latopt.search
    from latopt.cli import main

    def work(*a, **kw):
        raise AssertionError("the search started")

    monkeypatch.setattr(latopt.search, "run_plan", work)
    assert main(_dp_args(dp_tiny, tmp_path / "runs", f"--budgets={text}")) == 2
    assert "--budgets" in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "runs").exists()


def test_good_budgets_are_read_as_given() -> None:
    from latopt.cli.search import _budgets

    assert _budgets(" 0.5, 0.7 ,1") == (0.5, 0.7, 1.0)
    assert _budgets("1e-1") == (0.1,)
    assert _budgets(None) is None


def test_the_library_refuses_no_budgets_and_duplicates(dp_tiny: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    import latopt.search._run as run
    from latopt.search import SearchOptions, run_plan

    def work(*a, **kw):
        raise AssertionError("the search started")

    monkeypatch.setattr(run, "resolve_lut", work)
    for budgets, what in (([0.6, 0.7, 0.6], "twice"), ([], "must not be empty")):
        # an empty list silently became the five default budgets once
        with pytest.raises(LatoptError, match=what) as e:
            run_plan(SearchOptions(config=dp_tiny["config"], overrides={"dp.budgets": budgets}, progress=False))
        assert "'dp.budgets'" in str(e.value)


def _wait_inside_a_trial(url: str, name: str, proc: subprocess.Popen, timeout: float = 300) -> int:
    """The number of a non-base trial that is RUNNING and inside the objective (its worker recorded)."""
    db = Path(url.removeprefix("sqlite:///"))
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        assert proc.poll() is None, proc.communicate()
        if db.is_file():
            try:
                study = optuna.load_study(study_name=name, storage=url)
                for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                    if not t.user_attrs.get("base") and "worker" in t.user_attrs:
                        return t.number
            except Exception:  # noqa: BLE001 - the schema or the study may not exist yet
                pass
        time.sleep(0.2)
    raise AssertionError("no DP trial started running")


@pytest.mark.slow   # two latopt processes
@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_a_sigterm_fails_the_running_dp_trial_at_once_and_the_rerun_does_not_wait(dp_tiny: dict,
                                                                                  tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    url = f"sqlite:///{runs / 'hs-dp' / 'search' / 'study.db'}"
    # a long fine-tune: the SIGTERM lands inside the DP trial
    proc = subprocess.Popen([sys.executable, "-m", "latopt", *_dp_args(dp_tiny, runs, "--budgets", "0.6,0.8",
                                                                        "--set", "fold.post_epochs=5000", "-q")],
                            cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        killed = _wait_inside_a_trial(url, "hs-dp", proc)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, out
    study = optuna.load_study(study_name="hs-dp", storage=url)
    by_number = {t.number: t for t in study.trials}
    assert by_number[killed].state == TrialState.FAIL          # not RUNNING until a heartbeat goes stale
    retries = [t for t in study.trials if RetryHeartbeatStaleTrialCallback.retried_trial_number(t) == killed]
    assert [t.state for t in retries] == [TrialState.WAITING]
    assert retries[0].params == by_number[killed].params
    # the rerun would wait for a stale heartbeat if a trial were left RUNNING: give it a grace period of an hour
    t0 = datetime.datetime.now()
    r = subprocess.run([sys.executable, "-m", "latopt", *_dp_args(dp_tiny, runs, "--budgets", "0.6,0.8",
                                                                  "--grace-period", "3600", "-q")],
                       cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stderr, datetime.datetime.now() - t0)
    study = optuna.load_study(study_name="hs-dp", storage=url)
    done = study.get_trials(states=(TrialState.COMPLETE,))
    assert sorted(t.params["budget"] for t in done) == [0.6, 0.8, 1.0]    # each budget once, the killed one retried
    assert not study.get_trials(states=(TrialState.RUNNING, TrialState.WAITING))


# ----------------------------------------------------------------------------------------- tools/regenerate.py
@pytest.fixture
def pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout of two pages whose blocks ``a`` and ``b`` are made by stand-in generators."""
    (tmp_path / "docs").mkdir()
    monkeypatch.setattr(regenerate, "ROOT", tmp_path)
    monkeypatch.setattr(regenerate, "GENERATORS", {"a": lambda: "A1\nA2\n", "b": lambda: "B1"})
    return tmp_path


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


GOOD = ("# Title\n\nhand-written 1\n<!-- regenerate a -->\nold a\n<!-- /regenerate -->\nhand-written 2\n"
        "<!-- regenerate b -->\nold b\n<!-- /regenerate -->\nhand-written 3\n")
BROKEN = {
    # the end marker of a is lost: a would be paired with b's end marker and `hand-written 2` deleted
    "lost end": GOOD.replace("old a\n<!-- /regenerate -->\n", "old a\n"),
    "nested": "<!-- regenerate a -->\n<!-- regenerate b -->\nx\n<!-- /regenerate -->\n<!-- /regenerate -->\n",
    "end before start": "text\n<!-- /regenerate -->\n<!-- regenerate a -->\nx\n<!-- /regenerate -->\n",
    "start without end": "text\n<!-- regenerate a -->\nx\nmore text\n",
    "crossed names": "<!-- regenerate a -->\nx\n<!-- /regenerate b -->\n",
    "malformed marker": "<!-- regenerate Seed_Sweep -->\nx\n<!-- /regenerate -->\n",
    "marker in a code fence": "```\n<!-- regenerate a -->\nexample\n<!-- /regenerate -->\n```\n",
    "unclosed fence hides a block": "```\ncode\n<!-- regenerate a -->\nold\n<!-- /regenerate -->\n",
    "unknown block": "<!-- regenerate zz -->\nx\n<!-- /regenerate -->\n",
}


@pytest.mark.parametrize("check", [False, True])
@pytest.mark.parametrize("case", sorted(BROKEN))
def test_unpaired_crossed_or_nested_markers_are_refused_and_nothing_is_written(
        case: str, check: bool, pages: Path, capsys: pytest.CaptureFixture) -> None:
    (pages / "README.md").write_text(GOOD)           # stale, valid: it is not rewritten either
    (pages / "docs" / "x.md").write_text(BROKEN[case])
    before = _snapshot(pages)
    assert regenerate.main(["--check"] if check else []) == 2
    line = _one_line(capsys.readouterr().err)
    assert "docs/x.md" in line
    assert _snapshot(pages) == before


def test_a_rewrite_touches_only_the_text_between_markers(pages: Path, capsys: pytest.CaptureFixture) -> None:
    text = ("prose naming `<!-- regenerate NAME -->` and `<!-- /regenerate -->` inline\n"
            "<!-- regenerate -->\n```\npython tools/regenerate.py\n```\n<!-- /regenerate -->\n" + GOOD
            + "```\n<!-- not a marker -->\n```\n")
    (pages / "README.md").write_text(text)
    assert regenerate.main(["--check"]) == 1
    assert regenerate.main([]) == 0
    new = (pages / "README.md").read_text()
    assert new == text.replace("old a\n", "A1\nA2\n").replace("old b\n", "B1\n")
    assert regenerate.main(["--check"]) == 0 and regenerate.main([]) == 0
    assert (pages / "README.md").read_text() == new


def test_a_generated_block_holding_a_marker_is_refused(pages: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setitem(regenerate.GENERATORS, "a", lambda: "x\n<!-- /regenerate -->\ny")
    (pages / "README.md").write_text(GOOD)
    before = _snapshot(pages)
    assert regenerate.main([]) == 2
    assert "a" in _one_line(capsys.readouterr().err)
    assert _snapshot(pages) == before


@pytest.mark.parametrize("content", ['{"runs": [{"seed": 0, "acc', "", "[]", b"\xff\xfe"])
def test_a_damaged_results_file_is_one_line(content: str | bytes, pages: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture) -> None:
    results = pages / "results"
    results.mkdir()
    monkeypatch.setattr(regenerate, "RESULTS", results)
    monkeypatch.setattr(regenerate, "GENERATORS", {"seed-sweep": regenerate._seed_table("seed-sweep.json")})
    p = results / "seed-sweep.json"
    p.write_bytes(content) if isinstance(content, bytes) else p.write_text(content)
    (pages / "README.md").write_text("<!-- regenerate seed-sweep -->\nold\n<!-- /regenerate -->\n")
    before = _snapshot(pages)
    for argv in (["--check"], []):
        assert regenerate.main(argv) == 2
        assert "seed-sweep" in _one_line(capsys.readouterr().err)
    p.unlink()                                       # missing too
    assert regenerate.main(["--check"]) == 2
    assert "seed-sweep" in _one_line(capsys.readouterr().err)
    assert _snapshot(pages) == {k: v for k, v in before.items() if k != "results/seed-sweep.json"}


# ----------------------------------------------------------------------------------------- tools/gpu_check.py
def _no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any start of the check or of pip fails the test: a bad path must be refused before."""
    def work(*a, **kw):
        raise AssertionError("the check started")

    monkeypatch.setattr(gpu_check, "_missing", work)
    monkeypatch.setattr(gpu_check.subprocess, "run", work)


def _bad_dirs(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "file").write_text("x")
    os.symlink(tmp_path / "loop-b", tmp_path / "loop-a")
    os.symlink(tmp_path / "loop-a", tmp_path / "loop-b")
    bad = {"a file": str(tmp_path / "file"), "under a file": str(tmp_path / "file" / "sub"),
           "a link loop": str(tmp_path / "loop-a"), "under a link loop": str(tmp_path / "loop-a" / "sub"),
           "empty": ""}
    if Path("/proc/self").is_dir():   # a directory nobody can write, root included
        bad["unwritable (/proc)"] = "/proc"
    return bad


@pytest.mark.parametrize("flag", ["--carry", "--out"])
def test_a_bad_directory_is_one_line_exit_2_before_any_work(flag: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture) -> None:
    _no_work(monkeypatch)
    for what, path in _bad_dirs(tmp_path).items():
        argv = [flag, path] if flag == "--carry" else ["--cpu-smoke", flag, path]
        assert gpu_check.main(argv) == 2, what
        captured = capsys.readouterr()
        assert flag in _one_line(captured.err), what
        assert captured.out == "", what
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "loop-a", "loop-b"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
@pytest.mark.parametrize("flag", ["--carry", "--out"])
def test_a_read_only_directory_is_refused(flag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture) -> None:
    _no_work(monkeypatch)
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    try:
        argv = [flag, str(ro)] if flag == "--carry" else ["--cpu-smoke", flag, str(ro)]
        assert gpu_check.main(argv) == 2
        assert flag in _one_line(capsys.readouterr().err)
    finally:
        ro.chmod(0o755)


def test_epochs_below_one_are_refused(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    _no_work(monkeypatch)
    assert gpu_check.main(["--cpu-smoke", "--epochs", "0"]) == 2
    assert "--epochs" in _one_line(capsys.readouterr().err)


def test_crlf_and_a_byte_order_mark_are_kept_and_their_blocks_rewritten(pages: Path) -> None:
    # the page was read with universal newlines and written back with "\n": a rewrite turned every CRLF of the page,
    # hand-written lines included, into LF
    text = "\ufeff<!-- regenerate a -->\r\nold\r\n<!-- /regenerate -->\r\nhand-written\r\n"
    (pages / "README.md").write_bytes(text.encode())
    assert regenerate.main(["--check"]) == 1
    assert regenerate.main([]) == 0
    assert (pages / "README.md").read_bytes() == text.replace("old\r\n", "A1\r\nA2\r\n").encode()
