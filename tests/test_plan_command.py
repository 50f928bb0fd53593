"""``latopt plan``: the DP's budgeted plan as its own command. It makes what its library calls make
(:func:`latopt.search.plan_file`, :func:`latopt.search.run_plan`: the same plan file, fold and printed summary); one
plan at a budget is a one-trial study whose plan is confirmed; ``latopt search --method dp`` (the old spelling) is
refused in one line, exit 2, that gives the ``latopt plan`` command to run instead."""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from latopt.cli import build_parser, main
from latopt.config import load_config, write_config
from latopt.dp import format_dp_summary, format_plan_summary, read_plan
from latopt.dp.plan_record import DPReport
from latopt.latency.lut import save_lut
from latopt.layerfold.fold_record import read_report
from latopt.search import SearchOptions, plan_confirmation, plan_file, plan_report, run_plan
from latopt.training.base_training import train_base
from latopt.training.loop import seed_everything
from tests.test_dp import MODEL, TINY, _lut_for

VOLATILE = ("created", "seconds")   # the plan file's time of making and how long it took


def _plan(path: Path) -> dict[str, Any]:
    return {k: v for k, v in json.loads(path.read_text()).items() if k not in VOLATILE}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """test_dp's tiny DP setup: its config and made-up LUT (no training: the base is trained where a test needs it)."""
    root = tmp_path_factory.mktemp("plan-command")
    write_config(load_config("quickstart", TINY), root / "tiny.yaml")
    return {"root": root, "config": root / "tiny.yaml", "lut": save_lut(_lut_for(MODEL, 16), root / "lut.json")}


def test_plan_only_writes_the_plan_search_method_dp_wrote(setup: dict[str, Path], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "--config", str(setup["config"]), "--plan-only", "--budget", "0.55", "--importance", "uniform",
            "--lut", str(setup["lut"]), "--runs-dir", str(tmp_path / "runs"), "-q"]
    assert main([*args, "--out", str(tmp_path / "plan.json")]) == 0
    out = capsys.readouterr().out
    # the library call: the same options, the same plan
    seed_everything(0)
    want = plan_file(SearchOptions(config=setup["config"], lut=setup["lut"], runs_dir=tmp_path / "runs",
                                   overrides={"dp.importance": "uniform"}, progress=False), 0.55, tmp_path / "want.json")
    assert want[1] == tmp_path / "want.json"
    assert _plan(tmp_path / "plan.json") == _plan(tmp_path / "want.json")
    assert out == format_plan_summary(read_plan(tmp_path / "plan.json"), tmp_path / "plan.json") + "\n"
    assert "DP plan at budget 0.55 (uniform importance)" in out
    # without --out: the default file of the study, as before
    assert main(args) == 0
    default = tmp_path / "runs" / "tinydp" / "search" / "plan-budget0.55.json"
    assert _plan(default) == _plan(tmp_path / "want.json")
    assert sorted(p.name for p in (tmp_path / "runs" / "tinydp" / "search").iterdir()) == ["plan-budget0.55.json"]


def test_plan_budget_folds_and_fine_tunes_as_search_method_dp_did(setup: dict[str, Path], tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    cfg = load_config(setup["config"])
    train_base(cfg, tmp_path / "base", progress=False, seed=0)
    base = tmp_path / "base" / "base.pt"
    args = ["plan", "--config", str(setup["config"]), "--budget", "0.7", "--importance", "uniform", "--base",
            str(base), "--lut", str(setup["lut"]), "--runs-dir", str(tmp_path / "cli"), "-q"]
    assert main(args) == 0
    out = capsys.readouterr().out
    study = tmp_path / "cli" / "tinydp" / "search" / "dp-budget0.7"   # a one-trial study: the base and the plan
    fold = study / "trial-1"
    report = json.loads((fold / "report.json").read_text())
    assert (fold / "folded.pt").is_file() and (study / "study.db").is_file()
    assert out.startswith(format_dp_summary(read_report(fold / "report.json", DPReport)) + "\n")
    assert "DP at budget 0.7" in out
    # the plan's accuracy drop is confirmed on the held-out validation images, as every study's candidates are
    last = out.splitlines()[-1]
    assert last.startswith("accuracy drop on 48 held-out validation images") and "against the constraint 50.00%" in last
    assert last.endswith((": confirmed", "(latopt run would ship the network as it is)")), last
    seed_everything(0)
    res = run_plan(SearchOptions(config=setup["config"], base=base, lut=setup["lut"], runs_dir=tmp_path / "lib",
                                 overrides={"dp.importance": "uniform"}, progress=False), budget=0.7)
    want = plan_report(res)
    assert out == (format_dp_summary(want) + "\n" + plan_confirmation(res) + "\n").replace(
        str(tmp_path / "lib"), str(tmp_path / "cli"))   # the same but for where it was written
    assert report["folded"] == want.folded and report["selection"] == want.selection.model_dump()
    assert sorted(p.name for p in fold.iterdir()) == sorted(
        p.name for p in (tmp_path / "lib" / "tinydp" / "search" / "dp-budget0.7" / "trial-1").iterdir())
    # the --out of a plan file is --plan-only's
    assert main([*args, "--out", "x.json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("latopt: error: --out applies to --plan-only") and err.count("\n") == 1, err


OLD = [
    (["search", "--method", "dp", "--config", "quickstart", "--budget", "0.6"],
     "latopt search: error: --method dp is now its own command: latopt plan --config quickstart --budget 0.6"),
    (["search", "--config", "quickstart", "--method=dp", "--plan-only", "--budget", "0.6", "--importance", "uniform",
      "--out", "my plan.json", "-q"],
     "latopt search: error: --method dp is now its own command: latopt plan --config quickstart --plan-only "
     "--budget 0.6 --importance uniform --out 'my plan.json' -q"),
    # the DP's study over budgets; --sampler never applied to it and is left out
    (["search", "--config", "quickstart", "--method", "dp", "--budgets", "0.5,0.7", "--sampler", "tpe", "--trials", "3"],
     "latopt search: error: --method dp is now its own command: latopt plan --config quickstart --budgets 0.5,0.7 "
     "--trials 3"),
    # a DP option without --method dp (it applied to --method dp alone)
    (["search", "--config", "quickstart", "--budget-rounds", "1"],
     "latopt search: error: --budget-rounds is an option of the DP, now its own command: latopt plan --config "
     "quickstart --budget-rounds 1"),
    (["search", "--method", "optuna", "--config", "quickstart", "--budget", "0.6"],
     "latopt search: error: --budget is an option of the DP, now its own command: latopt plan --config quickstart "
     "--budget 0.6"),
    # --show drew both methods' fronts, with or without --method dp: it is latopt search's, without it
    (["search", "--show", "--method", "dp", "--study", "q"],
     "latopt search: error: --method dp is gone; --show draws both methods' fronts without it: latopt search --show "
     "--study q"),
]


@pytest.mark.parametrize(("argv", "line"), OLD)
def test_the_old_spelling_is_one_line_naming_latopt_plan(argv: list[str], line: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == line + "\n"
    assert not list(tmp_path.iterdir())     # nothing written
    # the command it gives is one latopt takes as it is
    given = shlex.split(line[line.index(": latopt ") + 2:])
    assert given[0] == "latopt"
    args = build_parser().parse_args(given[1:])
    assert args.command == given[1]


def test_the_old_spelling_from_the_shell(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "latopt", "search", "--config", "quickstart", "--method", "dp",
                        "--budget", "0.6"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == ("latopt search: error: --method dp is now its own command: latopt plan --config quickstart "
                        "--budget 0.6\n")


def test_search_keeps_method_optuna_and_nothing_else() -> None:
    parser = build_parser()
    assert parser.parse_args(["search", "--config", "c"]).method == "optuna"
    assert parser.parse_args(["search", "--config", "c", "--method", "optuna"]).method == "optuna"
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    search_flags = {o for a in sub.choices["search"]._actions for o in a.option_strings}
    plan_flags = {o for a in sub.choices["plan"]._actions for o in a.option_strings}
    dp = {"--budget", "--budgets", "--importance", "--variants", "--budget-rounds", "--plan-only"}
    assert not dp & search_flags and dp <= plan_flags and "--method" not in plan_flags
