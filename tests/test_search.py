"""latopt search end to end on the CPU: a tiny study, kill -9 + resume, two workers on PostgreSQL.

Tiny settings (MobileNetV2-0.35 at 16 px on the digits task, 1-2 epochs) keep each trial to seconds;
the LUT is profiled for real with a short timing budget. Nothing here asserts on a time. Every test needs the
module's study (about a minute on 2 cores): the module is marked ``slow``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import optuna
import pytest
import sqlalchemy.exc
import yaml
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from latopt.latency.lut import costs, load_lut, predict
from latopt.search import REFINES, SearchOptions, drop_bound, pareto_front, recommend, run_search

pytestmark = pytest.mark.slow

MODEL, RES = "mobilenetv2_035", 16
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, fast_cpu_device):
    """Config + real (short-budget) LUT, and one 3-trial study run in-process (the base is trained by it)."""
    import torch

    from latopt.latency.devices import load_device
    from latopt.latency.lut import save_lut
    from latopt.latency.profiler import profile_model

    d = tmp_path_factory.mktemp("search")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        lut = profile_model(MODEL, load_device(fast_cpu_device), RES, 1, progress=False, num_classes=10)
        save_lut(lut, d / "lut.json")
        cfg = {"name": "tiny", "model": {"name": MODEL}, "method": "layerfold",
               "data": {"task": "digits", "resolution": RES, "batch_size": 128},
               "train": {"epochs": 2, "optimizer": "adamw", "lr": 0.01},
               "fold": {"epochs": 1, "post_epochs": 1, "lr": 0.003, "alpha_lr": 0.1},
               "search": {"lambda_c": [0.5, 20.0], "tau": [0.5, 0.9], "p": [1.5, 3.0], "trials": 3,
                          "max_acc_drop": 0.05},
               "device": fast_cpu_device, "lut": str(d / "lut.json")}
        (d / "tiny.yaml").write_text(yaml.safe_dump(cfg))
        res = run_search(SearchOptions(config=d / "tiny.yaml", runs_dir=d / "runs", progress=False))
    finally:
        torch.set_num_threads(threads)
    return d, res


def _cli(d: Path, *args: str, command: str = "search", **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "latopt", command, "--config", "tiny.yaml", *args], cwd=d,
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def test_tiny_study_end_to_end(tiny):
    d, res = tiny
    assert res.finished and res.n_complete == 3
    study = optuna.load_study(study_name="tiny", storage=res.storage)
    trials = study.get_trials(states=(TrialState.COMPLETE,))
    assert [t.number for t in trials] == [0, 1, 2]
    base = trials[0]
    assert base.user_attrs["base"] and base.user_attrs["fold_set"] == {}
    assert base.params["lambda_c"] == 0.5 and base.params["tau"] == 0.9    # enqueued base operating point
    lut_asis = base.user_attrs["latency_ms"]
    lut = load_lut(d / "lut.json")
    lut_costs = {str(i): c for i, c in costs(lut).items()}
    assert lut_asis == pytest.approx(predict(lut, []))
    for t in trials[1:]:
        a = t.user_attrs
        assert Path(a["checkpoint"]).is_file() and Path(a["report"]).is_file()
        rep = json.loads(Path(a["report"]).read_text())
        assert t.values[0] == pytest.approx(rep["val_acc_finetuned"])
        assert a["fold_set"] == rep["folded"]
        assert rep["costs"] == lut_costs                          # c_l came from the study's LUT
        assert t.values[1] == pytest.approx(a["latency_ms"])
        assert a["latency_ms"] == pytest.approx(predict(lut, {int(i): v for i, v in a["fold_set"].items()}))
        assert (t.values[1] < lut_asis) == bool(a["fold_set"])   # folding anything lowers the LUT latency
        assert t.constraints["acc_drop"] == pytest.approx(a["acc_drop"] - 0.05)
    assert {t.number for t in pareto_front(study)} == set(res.front)
    # the recommendation, worked out here: the fastest trial within 0.05 of the base's accuracy on the selection
    # part (ties: the more accurate, then the earlier) whose drop is confirmed on the confirmation part (bound
    # within 0.05); the base itself qualifies, so there is one
    base_acc = base.values[0]
    ok = [t for t in trials if base_acc - t.values[0] <= 0.05 + 1e-12]
    split = study.user_attrs["confirm"]
    assert all(t.user_attrs["confirm_n"] == split["n_confirmation"] for t in trials)
    want = next(t for t in sorted(ok, key=lambda t: (t.values[1], -t.values[0], t.number))
                if t.user_attrs.get("base") or drop_bound(t.user_attrs["confirm_lost"], t.user_attrs["confirm_won"],
                                                      t.user_attrs["confirm_n"]) <= 0.05 + 1e-12)
    assert res.recommended == want.number and recommend(study).number == want.number
    assert {t.number for t in trials if t.user_attrs["acc_drop"] <= 0.05} == {t.number for t in ok}
    # --show writes the front files; a rerun of the finished study resumes and runs nothing
    r = subprocess.run([sys.executable, "-m", "latopt", "search", "--show", "--study", "tiny", "--out", "show"],
                       cwd=d, env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    front = json.loads((d / "show" / "pareto.json").read_text())
    assert front["recommended"] == res.recommended and front["base_trial"] == 0
    assert (d / "show" / "pareto.csv").is_file() and (d / "show" / "pareto.png").stat().st_size > 1000
    assert "RECOMMENDED" in r.stdout and "base" in r.stdout
    again = run_search(SearchOptions(config=d / "tiny.yaml", runs_dir=d / "runs", progress=False))
    assert again.finished and again.n_complete == 3 and len(study.trials) == 3
    # --timeout stops before starting a trial; the study keeps what it has
    part = run_search(SearchOptions(config=d / "tiny.yaml", trials=5, timeout=1e-3, runs_dir=d / "runs",
                                    progress=False))
    assert not part.finished and part.n_complete == 3 and len(study.trials) == 3
    # a study made for one objective refuses another
    bad = _cli(d, "--study", "tiny", "--runs-dir", "runs", "--objective", "depth")
    out, _ = bad.communicate(timeout=120)
    assert bad.returncode == 2 and "created with objective 'latency', not 'depth'" in out


def test_measure_objective_is_a_same_run_ratio(tiny):
    """--measure: each candidate is timed against the base in one interleaved run; the objective is the ratio."""
    import torch

    d, res = tiny
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        m = run_search(SearchOptions(config=d / "tiny.yaml", study="measured", trials=2, measure=True,
                                     base=res.study_dir / "base" / "base.pt", runs_dir=d / "runs", progress=False))
    finally:
        torch.set_num_threads(threads)
    study = optuna.load_study(study_name="measured", storage=m.storage)
    assert study.user_attrs["metric_names"] == ["val_acc", "measured_ratio"]
    base, cand = study.get_trials(states=(TrialState.COMPLETE,))
    assert base.values[1] == 1.0 and base.user_attrs["measured_ms"] == base.user_attrs["measured_base_ms"] > 0
    a = cand.user_attrs
    assert cand.values[1] == pytest.approx(a["measured_ms"] / a["measured_base_ms"]) and a["measured_ms"] > 0


def test_the_dp_front_is_a_study_beside_the_search(tiny):
    """`latopt plan` without --budget: the study tiny-dp, one fine-tuned trial per budget of
    --budgets (and the base), in the search's format; --show of tiny draws both fronts."""
    import math

    from latopt.dp import candidates, select_plan

    d, res = tiny
    lut = load_lut(d / "lut.json")
    _, info = select_plan(lut, {i: dict.fromkeys(c, 0.0) for i, c in candidates(lut).items()}, 1.0)
    fastest = info.fastest_ms / info.asis_ms
    budgets = [math.ceil((fastest + (1 - fastest) * f) * 1000) / 1000 for f in (0.3, 0.8)]
    p = _cli(d, "--importance", "uniform", "--budgets", ",".join(map(str, budgets)), command="plan")
    out, _ = p.communicate(timeout=600)
    assert p.returncode == 0, out
    assert "study 'tiny-dp'" in out and "RECOMMENDED" in out
    study = optuna.load_study(study_name="tiny-dp", storage=f"sqlite:///{d / 'runs' / 'tiny-dp' / 'search' / 'study.db'}")
    assert study.metric_names == ["val_acc", "latency_ms"] and study.user_attrs["method"] == "dp"
    base, *trials = study.get_trials(states=(TrialState.COMPLETE,))
    assert base.user_attrs["base"] and base.params["budget"] == 1.0
    assert base.user_attrs["checkpoint"] == str(res.study_dir / "base" / "base.pt")    # the search's base
    # one trial per budget, then the fastest within reach fine-tuned again (dp.refine), each at its trial's budget
    first = [t for t in trials if REFINES not in t.user_attrs]
    assert sorted(t.params["budget"] for t in first) == budgets
    refined = {int(t.user_attrs[REFINES]): t for t in trials if REFINES in t.user_attrs}
    assert all(t.params["budget"] == next(f for f in first if f.number == n).params["budget"] for n, t in refined.items())
    for t in trials:
        a = t.user_attrs
        rep = json.loads(Path(a["report"]).read_text())
        assert rep["method"] == "dp" and a["fold_set"] == rep["folded"] and t.values[0] == rep["val_acc_finetuned"]
        assert t.values[1] == pytest.approx(a["latency_ms"]) == pytest.approx(rep["selection"]["predicted_ms"])
        # the budget loop may solve at a corrected budget (latopt.dp.budgetloop): the LUT's ratio is within that one
        assert rep["budget"] == t.params["budget"] and a["predicted_ratio"] <= rep["selection"]["budget"] + 1e-12
    r = subprocess.run([sys.executable, "-m", "latopt", "search", "--show", "--study", "tiny", "--out", "both"],
                       cwd=d, env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "study 'tiny'" in r.stdout and "study 'tiny-dp'" in r.stdout
    front = json.loads((d / "both" / "pareto.json").read_text())
    assert [o["study"] for o in front["others"]] == ["tiny-dp"] and front["others"][0]["base_trial"] == 0


def _wait_running(storage: str, name: str, proc: subprocess.Popen, timeout: float = 300) -> int:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        assert proc.poll() is None, proc.stdout.read()
        if Path(storage.removeprefix("sqlite:///")).is_file():
            try:
                study = optuna.load_study(study_name=name, storage=storage)
                running = [t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)) if t.number >= 1]
                if running:
                    return running[0].number
            except (KeyError, sqlalchemy.exc.SQLAlchemyError):  # the worker may still be creating the schema
                pass
        time.sleep(0.3)
    raise AssertionError("no trial started running")


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_kill9_then_rerun_finishes_the_study(tiny):
    d, res = tiny
    base = str(d / "runs" / "tiny" / "search" / "base" / "base.pt")
    # 8 pre-fold epochs make a trial last seconds, so the kill lands inside it
    args = ("--study", "killed", "--objective", "depth", "--trials", "3", "--base", base, "--set", "fold.epochs=8",
            "--heartbeat-interval", "1", "--grace-period", "3")
    storage = f"sqlite:///{d / 'runs' / 'killed' / 'search' / 'study.db'}"
    proc = _cli(d, *args)
    killed = _wait_running(storage, "killed", proc)
    time.sleep(1.2)                                   # inside the trial, heartbeats recorded
    study = optuna.load_study(study_name="killed", storage=storage)
    assert study.trials[killed].state == TrialState.RUNNING
    done_before = {t.number: t.values for t in study.get_trials(states=(TrialState.COMPLETE,))}
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert not (d / "runs" / "killed" / "search" / f"trial-{killed}").exists()   # nothing half-written

    rerun = _cli(d, *args)
    out, _ = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, out
    study = optuna.load_study(study_name="killed", storage=storage)
    by_number = {t.number: t for t in study.trials}
    for n, values in done_before.items():              # completed trials kept as they were
        assert by_number[n].state == TrialState.COMPLETE and by_number[n].values == values
    assert by_number[killed].state == TrialState.FAIL
    retries = [t for t in study.trials if RetryHeartbeatStaleTrialCallback.retried_trial_number(t) == killed]
    assert len(retries) == 1 and retries[0].state == TrialState.COMPLETE
    assert retries[0].params == by_number[killed].params
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 3
    assert not study.get_trials(states=(TrialState.RUNNING, TrialState.WAITING))


@pytest.mark.postgres
def test_two_workers_on_postgresql(tiny, pg_url):
    d, _ = tiny
    base = str(d / "runs" / "tiny" / "search" / "base" / "base.pt")
    name = f"pg-{uuid.uuid4().hex[:10]}"
    args = ("--study", name, "--objective", "depth", "--trials", "4", "--base", base, "--storage", pg_url,
            "--heartbeat-interval", "2", "--grace-period", "20")
    workers = [_cli(d, *args) for _ in range(2)]
    outs = [w.communicate(timeout=600)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outs
    study = optuna.load_study(study_name=name, storage=pg_url)
    trials = study.trials
    assert sorted(t.number for t in trials) == list(range(len(trials)))       # no lost number
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 4
    # a worker that started a 5th trial at the same moment as the other prunes it as surplus, unrun
    assert all(t.state == TrialState.PRUNED and t.user_attrs["surplus"] for t in trials if t not in complete)
    assert sum(bool(t.user_attrs.get("base")) for t in complete) == 1
    ckpts = [t.user_attrs["checkpoint"] for t in complete if not t.user_attrs.get("base")]
    assert len(set(ckpts)) == len(ckpts) and all(Path(c).is_file() for c in ckpts)     # no duplicated trial
    assert len({t.user_attrs["worker"] for t in complete}) == 2                        # both workers worked


def _junk_base(d: Path) -> dict[str, Path]:
    """Files that are not the tiny config's base checkpoint."""
    import torch

    from latopt.files.checkpoint import make_arch, save_checkpoint
    from latopt.nets.models import build_model
    from latopt.rewrite import install_alpha

    junk = d / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    model = build_model(MODEL, 5)
    five = save_checkpoint(d / "five-classes.pt", model, make_arch(model, MODEL, 5))
    model = build_model(MODEL, 10)
    install_alpha(model)
    prefolded = save_checkpoint(d / "prefolded.pt", model, make_arch(model, MODEL, 10))
    torch.save({"weights": torch.zeros(2)}, d / "plain.pt")
    return {"junk": junk, "five": five, "prefolded": prefolded, "plain": d / "plain.pt", "missing": d / "none.pt"}


@pytest.mark.parametrize(("kind", "match"), [("junk", "not a latopt checkpoint"), ("plain", "not a latopt checkpoint"),
                                             ("missing", "does not exist"), ("five", "has 5 classes"),
                                             ("prefolded", "already pre-folded/folded")])
def test_a_bad_base_or_lut_is_refused_before_the_study_is_touched(tiny, tmp_path, capsys, kind, match):
    from latopt.cli import main

    d, _ = tiny
    path = _junk_base(tmp_path)[kind]
    runs = tmp_path / "runs"
    assert main(["search", "--config", str(d / "tiny.yaml"), "--runs-dir", str(runs), "--base", str(path),
                 "--study", "bad", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("latopt: error:") and len(err.splitlines()) == 1 and match in err, err
    assert not runs.exists()                     # no storage, no study, no failed base trial
    (tmp_path / "lut.json").write_text("{}")
    assert main(["search", "--config", str(d / "tiny.yaml"), "--runs-dir", str(runs), "--lut",
                 str(tmp_path / "lut.json"), "--study", "bad", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "latency LUT" in err, err
    assert not runs.exists()


def test_a_failed_base_trial_is_enqueued_again(tiny, tmp_path, monkeypatch):
    """A study whose base trial failed (for any reason) gets it back on the next run, so it can recommend."""
    from latopt.errors import LatoptError

    d, res = tiny
    opts = {"config": d / "tiny.yaml", "study": "poisoned", "trials": 1, "objective": "depth",
            "base": res.study_dir / "base" / "base.pt", "runs_dir": tmp_path / "runs", "progress": False}

    def broken(*a, **k):
        raise LatoptError("the base cannot be evaluated")

    monkeypatch.setattr("latopt.search._trial.evaluate_base", broken)
    with pytest.raises(LatoptError, match="cannot be evaluated"):
        run_search(SearchOptions(**opts))
    monkeypatch.undo()
    again = run_search(SearchOptions(**opts))
    study = optuna.load_study(study_name="poisoned", storage=again.storage)
    states = [(t.state, bool(t.user_attrs.get("base"))) for t in study.trials]
    assert states == [(TrialState.FAIL, True), (TrialState.COMPLETE, True)]
    assert again.finished and again.recommended == 1


@pytest.mark.parametrize("sampler", ["tpe", "nsga2", "random"])
def test_a_resumed_search_proposes_what_an_uninterrupted_one_would(sampler: str) -> None:
    # A sampler seeded once per process made a resumed study (a new process, a fresh sampler) propose other
    # candidates than the uninterrupted one: the rerun of an interrupted `latopt search` did not reproduce it.
    from latopt.methods.sampler import TrialSeeded

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        x, y = trial.suggest_float("x", 0, 1), trial.suggest_float("y", 0, 1)
        return x + y, (x - 0.3) ** 2 + y

    def params(study: optuna.Study) -> list[dict]:
        return [t.params for t in study.get_trials(states=(TrialState.COMPLETE,))]

    one = optuna.create_study(directions=["maximize", "minimize"], sampler=TrialSeeded(sampler, 7, 12))
    one.optimize(objective, n_trials=12)
    storage = optuna.storages.InMemoryStorage()
    resumed = optuna.create_study(storage=storage, study_name="s", directions=["maximize", "minimize"],
                                  sampler=TrialSeeded(sampler, 7, 12))
    resumed.optimize(objective, n_trials=5)
    killed = resumed.ask()    # a trial whose process was killed: it goes stale and is failed, without a value
    killed.suggest_float("x", 0, 1)
    storage.set_trial_state_values(killed._trial_id, TrialState.FAIL)
    for _ in range(7):   # every trial in a "new process": a new sampler object
        again = optuna.load_study(study_name="s", storage=storage, sampler=TrialSeeded(sampler, 7, 12))
        again.optimize(objective, n_trials=1)
    assert params(again) == params(one)
    other = optuna.create_study(directions=["maximize", "minimize"], sampler=TrialSeeded(sampler, 8, 12))
    other.optimize(objective, n_trials=3)
    assert params(other) != params(one)[:3]       # the seed matters


def test_a_trial_that_failed_its_check_is_not_drawn_again() -> None:
    from latopt.methods.sampler import FAILED_CHECK, TrialSeeded

    study = optuna.create_study(sampler=TrialSeeded("random", 3, 10))
    first = study.ask()
    x = first.suggest_float("x", 0, 1)
    study.tell(first, state=TrialState.FAIL)         # killed: the next trial draws what it would have drawn
    again = study.ask()
    assert again.suggest_float("x", 0, 1) == x
    again.set_user_attr(FAILED_CHECK, "fold gate")
    study.tell(again, state=TrialState.FAIL)         # failed its numeric check: the next one draws anew
    assert study.ask().suggest_float("x", 0, 1) != x


def test_a_damaged_study_database_is_one_line(tmp_path, capsys) -> None:
    # a trial state edited to a value Optuna's schema does not define made `search --show` a LookupError traceback
    import sqlite3

    from latopt.cli import main

    db = tmp_path / "runs" / "s" / "search" / "study.db"
    db.parent.mkdir(parents=True)
    study = optuna.create_study(study_name="s", storage=f"sqlite:///{db}")
    study.set_user_attr("schema", "latopt.study/1")
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    with sqlite3.connect(db) as con:
        con.execute("UPDATE trials SET state = 'BOGUS'")
    assert main(["search", "--show", "--study", "s", "--runs-dir", str(tmp_path / "runs"),
                 "--out", str(tmp_path / "show")]) == 2
    err = capsys.readouterr().err.strip()
    assert "is the database damaged" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "show").exists()


def test_a_search_directory_belongs_to_one_study_of_one_storage(tmp_path) -> None:
    import shutil

    from latopt.errors import LatoptError
    from latopt.search._storage import check_study_dir, default_storage_url

    d = tmp_path / "runs" / "s" / "search"
    url = default_storage_url(d)
    check_study_dir(d, url, "s")
    assert not d.exists()                                                  # nothing written before the study exists
    check_study_dir(d, url, "s", study_id=1)
    assert (d / "study.json").is_file()
    check_study_dir(d, url, "s", study_id=1)                              # the same study again: fine
    with pytest.raises(LatoptError, match=r"'s' in storage default.*u:\*\*\*@h"):
        check_study_dir(d, "postgresql://u:secret@h/db", "s")
    with pytest.raises(LatoptError, match="deleted and created again"):
        check_study_dir(d, url, "s", study_id=2)
    moved = tmp_path / "elsewhere" / "s" / "search"                        # the directory's own SQLite, moved
    shutil.copytree(d, moved)
    check_study_dir(moved, default_storage_url(moved), "s", study_id=1)


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_an_in_memory_storage_with_workers_is_refused(tmp_path, capsys, url) -> None:
    from latopt.cli import main

    assert main(["search", "--config", "quickstart", "--storage", url, "--workers", "2",
                 "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert "in-memory database" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("url", "hint"), [("postgresql://u@127.0.0.1:1/db", "postgresql+psycopg2://"),
                                           ("mysql://u@127.0.0.1:1/db", "mysql+pymysql://")])
def test_a_missing_driver_names_the_module_and_the_url_that_works(url, hint, monkeypatch) -> None:
    import builtins

    from latopt.errors import LatoptError
    from latopt.search._storage import open_storage

    real_import = builtins.__import__

    def no_driver(name, *a, **k):   # whatever is installed here: the driver SQLAlchemy picks is missing
        if name.split(".")[0] in ("psycopg", "MySQLdb"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name.split(".")[0])
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_driver)
    with pytest.raises(LatoptError, match="needs the database driver module") as e:
        open_storage(url, heartbeat_interval=None)
    assert hint in str(e.value) and "\n" not in str(e.value)
