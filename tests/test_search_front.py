"""Search machinery without training: space validation, storage errors, study identity, Pareto front."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution

from latopt.config import RunConfig, config_from_dict
from latopt.errors import LatoptError
from latopt.methods import make_method
from latopt.search import (
    front_summary,
    open_storage,
    open_study,
    pareto_front,
    recommend,
    write_front,
)

pytestmark = pytest.mark.floor   # .ci/run's lower-bounds run selects these tests

DISTS = {"lambda_c": FloatDistribution(0.05, 5.0, log=True), "tau": FloatDistribution(0.7, 0.95),
         "p": FloatDistribution(1.5, 4.0)}


def _add(study: optuna.Study, acc: float, ms: float, *, base: bool = False, base_acc: float = 0.90,
         max_drop: float = 0.02, folded: int = 0, budget: float | None = None) -> None:
    """A COMPLETE trial; its predictions on the confirmation part are the base's (confirmed at any constraint:
    the confirmation itself is tests/test_confirm.py's)."""
    if "confirm" not in study.user_attrs:   # a study with a confirmation part (latopt.search._confirm)
        study.set_user_attr("confirm", {"n_selection": 5000, "n_confirmation": 5000, "seed": 0, "level": 0.95,
                                        "method": "exact McNemar"})
    drop = 0.0 if base else base_acc - acc
    params, dists = ({"lambda_c": 0.5, "tau": 0.9, "p": 2.0}, DISTS) if budget is None else \
        ({"budget": budget}, {"budget": FloatDistribution(0.5, 1.0)})
    study.add_trial(optuna.create_trial(
        values=[acc, ms], params=params, distributions=dists,
        user_attrs={"base": base, "val_acc": acc, "fold_set": {str(i): "full" for i in range(folded)},
                    "checkpoint": f"/x/{acc}.pt", "confirm_n": 5000, "confirm_lost": 0, "confirm_won": 0},
        system_attrs={"constraints:acc_drop": drop - max_drop}))


@pytest.fixture
def study(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path}/s.db", heartbeat_interval=None)
    st = open_study(storage, "t", "latency", {"model": "m", "max_acc_drop": 0.02}).study
    st.set_user_attr("max_acc_drop", 0.02)
    _add(st, 0.90, 10.0, base=True)            # 0 base
    _add(st, 0.895, 8.0, folded=3)            # 1 front
    _add(st, 0.885, 6.0, folded=6)            # 2 front, fastest feasible -> recommended
    _add(st, 0.86, 4.0, folded=9)             # 3 infeasible (drop 0.04)
    _add(st, 0.88, 9.0, folded=2)             # 4 dominated by 1 and 2
    return st


def test_front_and_recommendation(study, tmp_path):
    front = pareto_front(study)
    assert [t.number for t in front] == [2, 1, 0]     # feasible, non-dominated, fastest first
    assert recommend(study).number == 2
    assert recommend(study, max_acc_drop=0.05).number == 3   # a looser constraint admits the fastest
    assert recommend(study, max_acc_drop=0.0).number == 0    # only the base is within 0
    s = front_summary(study)
    assert s.base_trial == 0 and s.recommended == 2 and s.n_front == 3
    files = write_front(study, tmp_path / "out")
    data = json.loads(files["json"].read_text())
    assert data["schema"] == "latopt.pareto/1"
    assert [r["trial"] for r in data["rows"] if r["recommended"]] == [2]
    assert [r["trial"] for r in data["rows"] if r["base"]] == [0]
    rows = list(csv.DictReader(files["csv"].open()))
    # the infeasible trial 3 is listed (front without the constraint), the dominated trial 4 is not
    assert [int(r["trial"]) for r in rows] == [3, 2, 1, 0]
    assert [(r["on_front"], r["on_full_front"], r["feasible"]) for r in rows[:2]] == \
        [("False", "True", "False"), ("True", "True", "True")]
    assert rows[1]["recommended"] == "True"
    assert files["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_study_and_its_trials_are_read_as_records(study):
    """The user attributes latopt sets are read through typed records (latopt.search.study_record), the keys they
    do not name kept; a value of the wrong kind is one line naming the trial and the attribute."""
    from latopt.search._pareto import REFINES
    from latopt.search.study_record import StudyAttrs, TrialAttrs, TrialParams

    assert REFINES in TrialAttrs.model_fields
    t = study.trials[1]
    a = TrialAttrs.of(t)
    assert (a.base, a.val_acc, len(a.fold_set), a.counts, a.refines) == (False, 0.895, 3, (0, 0, 5000), None)
    assert (TrialParams.of(t).lambda_c, TrialParams.of(t).budget) == (0.5, None)
    attrs = StudyAttrs.of(study)
    assert (attrs.schema_, attrs.objective, attrs.metric_names) == ("latopt.study/1", "latency", ["val_acc", "latency_ms"])
    assert attrs.confirm is not None and attrs.confirm.n_confirmation == 5000
    assert attrs.model_extra == {"model": "m"}                               # an identity key it does not name
    assert TrialAttrs.model_validate({"predicted_ratio": 0.5}).model_extra == {"predicted_ratio": 0.5}
    bad = optuna.trial.create_trial(values=[0.9, 1.0], user_attrs={"val_acc": "high"})
    with pytest.raises(LatoptError, match=r"^trial -1: user attribute 'val_acc' .*, got 'high'$"):
        TrialAttrs.of(bad)


def test_recommendation_ties_go_to_accuracy_then_to_the_earlier_trial(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path}/s.db", heartbeat_interval=None)
    st = open_study(storage, "t", "latency", {}).study
    st.set_user_attr("max_acc_drop", 0.02)
    _add(st, 0.90, 10.0, base=True)            # 0
    _add(st, 0.885, 6.0, folded=5)             # 1  fastest feasible, less accurate
    _add(st, 0.89, 6.0, folded=5)              # 2  as fast, more accurate -> recommended
    _add(st, 0.89, 6.0, folded=5)              # 3  the same as 2, later
    _add(st, 0.87, 5.0, folded=8)              # 4  faster but 0.03 below the base
    assert recommend(st).number == 2
    assert recommend(st, max_acc_drop=0.03).number == 4
    st.set_user_attr("max_acc_drop", None)
    with pytest.raises(LatoptError, match="does not record one"):
        recommend(st)


def test_dominated_base_still_shown(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path}/s.db", heartbeat_interval=None)
    st = open_study(storage, "t", "latency", {}).study
    st.set_user_attr("max_acc_drop", 0.01)
    _add(st, 0.90, 10.0, base=True)
    _add(st, 0.91, 7.0, folded=4, max_drop=0.01)     # better on both: base is dominated
    s = front_summary(st)
    assert s.front == [1]
    base_row = [r for r in s.rows if r.base]
    assert len(base_row) == 1 and base_row[0].on_front is False


@pytest.mark.parametrize("section, msg", [
    ({"lambda_c": [2.0, 1.0]}, "'search.lambda_c' = [2.0, 1.0] has lo > hi"),
    ({"lambda_c": [0.0, 1.0]}, "'search.lambda_c[0]' must be > 0"),
    ({"tau": [0.5, 1.2]}, "'search.tau[1]' must be in (0, 1]"),
    ({"p": [1.0, 3.0]}, "'search.p[0]' must be > 1"),
    ({"granularity": ["layer"]}, "'search.granularity[0]' is 'layer'; choose one of block, activation"),
    ({"granularity": []}, "'search.granularity' must not be empty"),
])
def test_invalid_ranges(section, msg):
    """The config validates the ranges (the space samples them as they are)."""
    with pytest.raises(LatoptError, match=re.escape(msg)):
        config_from_dict({"search": section})


def test_space_is_the_config_ranges():
    # Layer Folding's: the config's defaults are the space's, one tau range
    assert make_method(config_from_dict({"method": "layerfold"})).space().as_dict() == {
        "lambda_c": [0.05, 5.0], "tau": [0.7, 0.95], "p": [1.5, 4.0], "granularity": ["block"]}
    # the DP's (the default method): the config's budgets
    assert make_method(RunConfig()).space().as_dict() == {"budgets": list(RunConfig().dp.budgets)}


def test_space_suggest_and_base_params():
    cfg = config_from_dict({"method": "layerfold", "search": {"lambda_c": [0.1, 1.0], "granularity": ["block", "activation"]}})
    sp = make_method(cfg).space()
    st = optuna.create_study(directions=["maximize", "minimize"])
    st.enqueue_trial(sp.base_params())
    t = st.ask()
    params = sp.suggest(t)
    assert params == {"lambda_c": 0.1, "tau": 0.95, "p": 1.5, "granularity": "block"}
    assert t.distributions["lambda_c"].log and not t.distributions["tau"].log
    assert (t.distributions["tau"].low, t.distributions["tau"].high) == cfg.search.tau


def test_study_identity_is_checked(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path}/s.db", heartbeat_interval=None)
    assert open_study(storage, "t", "latency", {"model": "a"}).created
    assert optuna.load_study(study_name="t", storage=storage).metric_names == ["val_acc", "latency_ms"]
    again = open_study(storage, "t", "latency", {"model": "a"})
    assert not again.created and again.attrs["objective"] == "latency"
    with pytest.raises(LatoptError, match="objective 'latency', not 'depth'"):
        open_study(storage, "t", "depth", {"model": "a"})
    with pytest.raises(LatoptError, match="model='a'"):
        open_study(storage, "t", "latency", {"model": "b"})


def test_unreachable_and_malformed_storage():
    with pytest.raises(LatoptError, match="cannot reach storage postgresql"):
        open_storage("postgresql+psycopg2://u:secret@127.0.0.1:1/db")
    with pytest.raises(LatoptError, match="not a valid SQLAlchemy URL"):
        open_storage("nonsense-url")


def test_cli_bad_input_one_line_exit_2(tmp_path, monkeypatch, capsys):
    from latopt.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "ok.yaml").write_text("name: ok\nsearch: {max_acc_drop: 0.05}\n")   # digits: 180 confirmation images
    (tmp_path / "nolut.yaml").write_text("name: n\nmodel: {name: mobilenetv2_035}\ndata: {resolution: 40}\n")
    (tmp_path / "bad.yaml").write_text("name: bad\nsearch: {tau: [0.9, 0.5]}\n")
    cases = [
        (["--config", "ok.yaml", "--objective", "depth", "--storage", "postgresql+psycopg2://u:pw@127.0.0.1:1/db"],
         "cannot reach storage postgresql+psycopg2://u:***@127.0.0.1:1/db"),
        (["--config", "bad.yaml"], "search.tau"),
        (["--config", "ok.yaml", "--objective", "depth", "--trials", "0"],
         "trials must be in [1, 1000] (trials of a study, each training a network), got 0 (option --trials)"),
        (["--show", "--study", "nope"], "no study database"),
        (["--config", "nolut.yaml"], "run: latopt profile --device cpu --model mobilenetv2_035 --resolution 40"),
        (["--config", "ok.yaml", "--objective", "depth", "--base", "missing.pt"],
         "base checkpoint missing.pt does not exist"),
    ]
    for args, msg in cases:
        rc = main(["search", *args, "-q"])      # -q: stderr holds the error line only
        err = capsys.readouterr().err
        assert rc == 2, (args, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("latopt: error: "), err
        assert msg in lines[0], (msg, lines[0])
    assert not (tmp_path / "runs").exists()      # nothing written for bad input


def test_a_local_worker_runs_the_study_this_process_resolved(tmp_path):
    """workers=N starts N-1 processes, each running the search with what this process resolved."""
    from latopt.search import SearchOptions
    from latopt.search._workers import worker_options

    o = SearchOptions(config=tmp_path / "c.yaml", objective="depth", costs="uniform", seed=7, runs_dir=tmp_path,
                      heartbeat_interval=5, grace_period=20, overrides={"fold.post_epochs": 2}, workers=3)
    cfg = RunConfig().with_overrides({"fold.post_epochs": 2})
    w = worker_options(o, config=cfg, study="s", study_dir=tmp_path / "s", storage="sqlite:///x.db", trials=9,
                       sampler="nsga2", max_acc_drop=0.015, base=tmp_path / "b.pt", lut=None, timeout=0.2, threads=1)
    assert (w.study, w.study_dir, w.storage, w.trials, w.sampler, w.max_acc_drop, w.base, w.lut, w.threads) == \
        ("s", tmp_path / "s", "sqlite:///x.db", 9, "nsga2", 0.015, tmp_path / "b.pt", None, 1)
    assert (w.workers, w.summary, w.timeout) == (1, False, 1.0)        # one process each, at least a second
    # the config as this process read it, overrides applied: a worker reads no file
    assert (w.config, w.overrides) == (cfg, {})
    assert (w.objective, w.costs, w.seed, w.runs_dir, w.heartbeat_interval, w.grace_period) \
        == ("depth", "uniform", 7, tmp_path, 5, 20)
    # a worker of the DP's study runs the same study: the method and its settings are the config's
    dp = cfg.with_overrides({"method": "dp", "dp.budgets": [0.55, 0.7], "dp.importance": "uniform"})
    w = worker_options(SearchOptions(config=tmp_path / "c.yaml", workers=2), config=dp, study="s-dp",
                       study_dir=tmp_path / "s-dp", storage="sqlite:///x.db", trials=3, sampler="tpe",
                       max_acc_drop=0.01, base=tmp_path / "b.pt", lut=None, timeout=None, threads=1)
    assert (w.config.method, w.config.dp.budgets, w.study, w.timeout) == ("dp", (0.55, 0.7), "s-dp", None)


def _report(o) -> None:
    """A stand-in for run_search in a worker process: what it was given and how it logs."""
    import os

    from latopt import log

    (Path(o.runs_dir) / "seen.json").write_text(json.dumps({"study": o.study, "verbosity": log.verbosity(),
                                                            "parent": os.getppid()}))
    if o.study == "refused":
        raise LatoptError("study 'refused' is refused")


def test_local_workers_are_processes_that_log_as_their_parent(tmp_path, capfd):
    import os

    from latopt import log
    from latopt.search import SearchOptions
    from latopt.search._workers import join, start

    for d in ("ok", "bad"):
        (tmp_path / d).mkdir()
    log.setup(log.VERBOSE)
    try:
        ok = start(_report, SearchOptions(config=None, study="s", runs_dir=tmp_path / "ok"), 1)
        bad = start(_report, SearchOptions(config=None, study="refused", runs_dir=tmp_path / "bad", progress=False), 1)
    finally:
        log.setup(log.DEFAULT)
    join(ok, ok=True)
    with pytest.raises(LatoptError, match=r"1 extra worker.*failed.*\[\(\d+, 2\)\]"):
        join(bad, ok=True)
    seen = json.loads((tmp_path / "ok" / "seen.json").read_text())
    assert seen == {"study": "s", "verbosity": log.VERBOSE, "parent": os.getpid()}
    assert json.loads((tmp_path / "bad" / "seen.json").read_text())["verbosity"] == log.QUIET   # progress off
    assert "latopt: error: study 'refused' is refused" in capfd.readouterr().err


def _wsgi_get(app, path: str) -> dict:
    """One GET request to a WSGI application; its JSON body."""
    import io

    status = []
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": "localhost",
               "SERVER_PORT": "80", "SERVER_PROTOCOL": "HTTP/1.1", "wsgi.url_scheme": "http",
               "wsgi.input": io.BytesIO(), "wsgi.errors": io.StringIO(), "wsgi.multithread": False,
               "wsgi.multiprocess": False, "wsgi.run_once": False}
    body = b"".join(app(environ, lambda s, headers, exc_info=None: status.append(s)))
    assert status and status[0].startswith("200"), (path, status, body[:300])
    return json.loads(body)


def test_a_study_opens_in_optuna_dashboard(tmp_path):
    """A study as latopt search writes it (named objectives, the trials' records as user attributes) read
    through optuna-dashboard's WSGI app, as `optuna-dashboard sqlite:///.../study.db` serves it."""
    import numpy as np

    from latopt.search._trial import record

    dashboard = pytest.importorskip("optuna_dashboard")
    url = f"sqlite:///{tmp_path}/study.db"
    study = open_study(open_storage(url, heartbeat_interval=None), "t", "latency", {"model": "m"}).study
    recs = [  # what a base trial and a fold trial record (NumPy scalars and paths as the code may hand them)
        {"val_acc": 0.9, "base_acc": 0.9, "fold_set": {}, "latency_ms": np.float64(2.0), "base": True,
         "nonlinear_layers": np.int64(17), "checkpoint": tmp_path / "base.pt", "acc_drop": 0.0},
        {"val_acc": 0.89, "base_acc": 0.9, "fold_set": {"1": "full", "3": "pw"}, "latency_ms": np.float64(1.5),
         "nonlinear_layers": np.int64(15), "checkpoint": tmp_path / "trial-1" / "folded.pt", "acc_drop": 0.01,
         "measured_ms": 0.7, "measured_ratio": 0.8, "flops": None},
    ]
    for rec in recs:
        trial = study.ask()
        record(trial, {**rec, "constraint": rec["acc_drop"] - 0.02})
        study.tell(trial, [rec["val_acc"], float(rec["latency_ms"])])

    app = dashboard.wsgi(url)
    listed = _wsgi_get(app, "/api/studies")["study_summaries"]
    assert [(s["study_name"], s["directions"]) for s in listed] == [("t", ["maximize", "minimize"])]
    detail = _wsgi_get(app, f"/api/studies/{listed[0]['study_id']}")
    assert detail["objective_names"] == ["val_acc", "latency_ms"]
    assert sorted(t["number"] for t in detail["best_trials"]) == [0, 1]
    base, fold = ({a["key"]: a["value"] for a in t["user_attrs"]} for t in detail["trials"])
    assert json.loads(fold["fold_set"]) == {"1": "full", "3": "pw"} and json.loads(base["fold_set"]) == {}
    assert float(fold["latency_ms"]) == 1.5 and int(fold["nonlinear_layers"]) == 15
    assert float(fold["measured_ms"]) == 0.7 and float(fold["measured_ratio"]) == 0.8 and "flops" not in fold
    assert Path(fold["checkpoint"]) == tmp_path / "trial-1" / "folded.pt" and base["base"] == "True"
    assert float(fold["constraint"]) == pytest.approx(-0.01)
    # the values Optuna hands back are plain types too
    attrs = optuna.load_study(study_name="t", storage=url).trials[1].user_attrs
    assert type(attrs["nonlinear_layers"]) is int and type(attrs["checkpoint"]) is str


def test_the_dp_study_samples_each_budget_once():
    space = make_method(RunConfig().with_overrides({"method": "dp", "dp.budgets": [0.8, 0.6, 0.7]})).space()
    assert space.grid() == [0.6, 0.7, 0.8]
    with pytest.raises(LatoptError, match=re.escape("'dp.budgets[1]' must be in (0, 1]")):
        RunConfig().with_overrides({"dp.budgets": [0.5, 1.5]})
    with pytest.raises(LatoptError, match="twice"):   # one trial per budget: a repeat is a typo
        RunConfig().with_overrides({"dp.budgets": [0.8, 0.6, 0.7, 0.6]})
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=space.sampler(0, 4, "tpe"))
    study.enqueue_trial(space.base_params(), user_attrs={"base": True})
    for _ in range(4):
        study.optimize(lambda t: (0.0, space.suggest(t)["budget"]), n_trials=1)
    assert [t.params["budget"] for t in study.trials][0] == 1.0
    assert sorted(t.params["budget"] for t in study.trials[1:]) == [0.6, 0.7, 0.8]


def test_show_draws_the_dp_front_beside_the_layer_folding_front(tmp_path, capsys):
    """`latopt search --show --study t` summarises and draws the DP's study t-dp with t, on one plot."""
    from latopt.cli import main

    runs = tmp_path / "runs"
    studies = {}
    for name, identity in (("t", {}), ("t-dp", {"method": "dp"})):
        storage = open_storage(f"sqlite:///{runs / name / 'search' / 'study.db'}", heartbeat_interval=None)
        studies[name] = open_study(storage, name, "latency", identity).study
        studies[name].set_user_attr("max_acc_drop", 0.02)
        _add(studies[name], 0.90, 10.0, base=True)
    _add(studies["t"], 0.885, 6.0, folded=6)
    _add(studies["t-dp"], 0.895, 7.0, folded=4, budget=0.7)     # the DP's front: 7 ms and 5 ms
    _add(studies["t-dp"], 0.889, 5.0, folded=7, budget=0.5)     # -> recommended in t-dp
    assert main(["search", "--show", "--study", "t", "--runs-dir", str(runs), "-q"]) == 0
    out = capsys.readouterr().out
    assert "study 't'" in out and "study 't-dp'" in out and "budget 0.5" in out
    data = json.loads((runs / "t" / "search" / "pareto.json").read_text())
    assert [o["study"] for o in data["others"]] == ["t-dp"]
    dp = data["others"][0]
    assert dp["recommended"] == 2 and [r["budget"] for r in dp["rows"] if r["on_front"] and not r["base"]] == [0.5, 0.7]
    assert data["recommended"] == 1 and (runs / "t" / "search" / "pareto.png").stat().st_size > 1000
    # the DP's study alone shows its own front
    assert main(["search", "--show", "--study", "t-dp", "--runs-dir", str(runs), "-q"]) == 0
    assert "study 't-dp'" in capsys.readouterr().out
