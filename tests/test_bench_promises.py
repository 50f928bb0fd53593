"""tools/bench_promises.py: (the tools tier) a smoke run of the budget benchmark (one small model, one budget,
tiny timing budgets), the records it writes and publishing them; and the verdicts and tables on hand-made results
(cases that pass and cases that fail). Times are never asserted on."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tools import bench_promises as bp
from tools import regenerate

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ the smoke run
@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = tmp_path_factory.mktemp("promises")
    assert bp.main(["budget", "--runs-dir", str(runs), "--smoke", "--models", "tiny", "--targets", "cpu",
                    "--budgets", "0.7"]) == 0
    return runs


@pytest.mark.tools   # on the smoke run (~7 s on 2 cores): the tools tier
def test_smoke_budget_cell_has_the_record(smoke_runs: Path) -> None:
    cells = smoke_runs / "budget" / "cells"
    assert sorted(p.name for p in cells.glob("*.json")) == ["budget-tiny.cpu@0.7.json", "lut-tiny.cpu.json"]
    rec = json.loads((cells / "budget-tiny.cpu@0.7.json").read_text())
    for key in ("model", "model_name", "resolution", "target", "device", "budget", "weights", "importance", "plan",
                "loop", "first_round", "export", "measured_ratio", "band", "side", "wall_s", "smoke"):
        assert key in rec, key
    assert rec["model_name"] == "mobilenetv2_035" and rec["resolution"] == 32 and rec["device"] == "cpu-smoke"
    assert rec["weights"] == "random" and rec["importance"] == "uniform" and rec["smoke"] is True
    # the loop measured the DP's first plan on the target: the LUT's error there is predicted / measured − 1
    assert rec["loop"]["status"] in ("met", "under", "over", "noisy") and rec["loop"]["rounds"]
    r0, fr = rec["loop"]["rounds"][0], rec["first_round"]
    assert fr["lut_error"] == pytest.approx(r0["predicted_ratio"] / r0["measured_ratio"] - 1)
    assert r0["budget"] == pytest.approx(0.7)
    # the measured ratio is export's interleaved run: t(plan) / t(as-is)
    e = rec["export"]
    assert rec["measured_ratio"] == pytest.approx(e["folded_ms"] / e["as_is_ms"])
    assert rec["measured_ratio"] == pytest.approx(1 / e["speedup"])
    low, high = rec["band"]
    assert low == pytest.approx(0.7 * 0.97) and high == pytest.approx(0.7 * 1.02)
    assert rec["side"] == ("within" if low <= rec["measured_ratio"] <= high else
                           "over" if rec["measured_ratio"] > high else "under")
    # the export applied the plan file the DP wrote
    out = smoke_runs / "budget" / "budget" / "tiny.cpu" / "b0.7"
    plan = json.loads((out / "plan.json").read_text())
    exp = json.loads((out / "export" / "export.json").read_text())
    assert exp["timing_only"] is True and exp["plan"]["budget"] == 0.7
    assert {k: v for k, v in plan["blocks"].items() if v != "none"} == rec["plan"]["changed"] == exp["folded"]


@pytest.mark.tools   # on the smoke run (~7 s on 2 cores): the tools tier
def test_a_rerun_skips_finished_cells(smoke_runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cell = smoke_runs / "budget" / "cells" / "budget-tiny.cpu@0.7.json"
    before = cell.read_text()
    assert bp.main(["budget", "--runs-dir", str(smoke_runs), "--smoke", "--models", "tiny", "--targets", "cpu",
                    "--budgets", "0.7"]) == 0
    assert cell.read_text() == before
    assert "2 cells (2 done)" in capsys.readouterr().out


@pytest.mark.tools   # on the smoke run (~7 s on 2 cores): the tools tier
def test_publish_and_render_the_smoke_run(smoke_runs: Path, tmp_path: Path) -> None:
    dest = tmp_path / "results"
    assert bp.main(["publish", "--runs-dir", str(smoke_runs), "--results", str(dest)]) == 0
    assert not (dest / "accuracy.json").exists()     # no accuracy run: its table still says "not run"
    text = (dest / "budget.json").read_text()
    assert str(smoke_runs) not in text and str(Path.home()) not in text   # no machine paths
    R = json.loads(text)
    assert R["schema"] == bp.RESULTS_SCHEMA and R["smoke"] is True and len(R["cells"]) == 2
    V = bp.budget_verdict(R)
    assert V["n"] == V["total"] == 1 and V["within"] + V["over"] + V["under"] == 1
    table = bp.render_budget(dest)
    assert "smoke" in table and "B = 0.7" in table and "| tiny | cpu | random |" in table
    assert "has not been run yet" in bp.render_accuracy(dest)


@pytest.mark.tools   # on the smoke run (~7 s on 2 cores): the tools tier
def test_publish_merge_keeps_earlier_sessions(smoke_runs: Path, tmp_path: Path) -> None:
    """A stage run over two sessions: --merge keeps the cells published before, replaces a cell published
    again, and names each session's machine in the table's first line."""
    dest = tmp_path / "results"
    assert bp.main(["publish", "--runs-dir", str(smoke_runs), "--results", str(dest)]) == 0
    assert bp.main(["publish", "--runs-dir", str(smoke_runs), "--results", str(dest), "--merge"]) == 0
    R = json.loads((dest / "budget.json").read_text())
    assert len(R["cells"]) == 2 and len(R["sessions"]) == 1     # republished: replaced, not doubled
    later = tmp_path / "later" / "budget" / "cells"
    later.mkdir(parents=True)
    rec = json.loads((smoke_runs / "budget" / "cells" / "budget-tiny.cpu@0.7.json").read_text())
    (later / "budget-tiny.cpu@0.9.json").write_text(json.dumps(rec | {"cell": "budget-tiny.cpu@0.9", "budget": 0.9}))
    assert bp.main(["publish", "--runs-dir", str(tmp_path / "later"), "--results", str(dest), "--merge"]) == 0
    R = json.loads((dest / "budget.json").read_text())
    assert {r["cell"] for r in R["cells"]} >= {"budget-tiny.cpu@0.7", "budget-tiny.cpu@0.9"} and len(R["cells"]) == 3
    assert [len(g["cells"]) for g in R["sessions"]] == [2, 1]
    assert bp.render_budget(dest).startswith("2 cells: commit")
    # without --merge a publish starts the file again
    assert bp.main(["publish", "--runs-dir", str(tmp_path / "later"), "--results", str(dest)]) == 0
    assert len(json.loads((dest / "budget.json").read_text())["cells"]) == 1


# ------------------------------------------------------------------ the budget's verdict, hand-made
def _budget_cell(model: str, b: float, ratio: float, lut_error: float | None, res: int = 224) -> dict[str, Any]:
    first = None if lut_error is None else {"predicted_ratio": ratio * (1 + lut_error), "measured_ratio": ratio,
                                            "lut_error": lut_error, "trusted": True}
    return {"cell": f"budget-{model}.cpu@{b:g}", "model": model, "model_name": model, "resolution": res,
            "target": "cpu", "device": "cpu", "budget": b, "weights": "random", "importance": "uniform",
            "plan": {"changed": {}, "spans": [], "predicted_ratio": b}, "first_round": first,
            "loop": {"status": "met", "note": None, "rounds_max": 3, "chosen": 0, "rounds": [{}]},
            "export": {}, "measured_ratio": ratio}


def _budget_results(ratios: dict[str, list[float]], lut_errors: list[float | None], res: int = 224,
                    drop: int = 0) -> dict[str, Any]:
    """Two models × cpu × 5 budgets (10 cases), the measured ratio of each given as a factor of B."""
    p = {**bp.protocol(), "models": {m: m.upper() for m in ratios}, "targets": ["cpu"]}
    cells = [_budget_cell(m, b, b * f, lut_errors[i * 5 + j], res)
             for i, (m, fs) in enumerate(ratios.items()) for j, (b, f) in enumerate(zip(p["budgets"], fs, strict=True))]
    cells = cells[:len(cells) - drop] + [{"cell": "lut-a.cpu", "model": "a", "target": "cpu", "profiling_s": 1.0}]
    return {"schema": bp.RESULTS_SCHEMA, "smoke": False, "protocol": p, "cells": cells, "commit": "abc",
            "published": "now", "environment": {"cpu": "test", "cpu_count": 2}}


def test_budget_verdict_counts_the_band_at_its_edges() -> None:
    ok = [1.0, 0.971, 1.019, 0.99, 1.01]
    R = _budget_results({"a": ok, "b": [1.0, 1.0, 1.0, 1.0, 1.03]}, [0.01] * 10)   # one over: 9 of 10 within
    V = bp.budget_verdict(R)
    assert (V["n"], V["total"], V["within"], V["over"], V["under"], V["missing"]) == (10, 10, 9, 1, 0, 0)
    assert V["met"]                                                         # ≥ 90 %
    sides = {(c["model"], c["budget"]): c["side"] for c in V["cases"]}
    assert sides[("b", 0.9)] == "over" and sides[("a", 0.6)] == "within" and sides[("a", 0.7)] == "within"
    R = _budget_results({"a": ok, "b": [0.96, 1.0, 1.0, 1.0, 1.03]}, [0.01] * 10)  # and one under: 8 of 10
    V = bp.budget_verdict(R)
    assert (V["within"], V["over"], V["under"], V["met"]) == (8, 1, 1, False)


def test_budget_verdict_counts_a_missing_case_as_a_miss(tmp_path: Path) -> None:
    R = _budget_results({"a": [1.0] * 5, "b": [1.0] * 5}, [0.0] * 10, drop=1)
    V = bp.budget_verdict(R)
    assert (V["n"], V["total"], V["within"], V["missing"]) == (9, 10, 9, 1)
    assert V["met"]                                                         # 9 of 10 is still ≥ 90 %
    (tmp_path / "budget.json").write_text(json.dumps(R))
    t = bp.render_budget(tmp_path)
    assert "Within the band: 9 of 10 cases (0 over, 0 under, 1 not run)" in t and "| not run |" in t
    assert "**pending**" in t and "**met**" not in t   # a stage run over sessions: decided once every case ran
    R = _budget_results({"a": [1.0, 1.1, 1.1, 1.0, 1.0], "b": [1.0] * 5}, [0.0] * 10, drop=1)   # 7 within, 1 missing
    (tmp_path / "budget.json").write_text(json.dumps(R))
    assert "**not met** (at most 8 of 10 even if every case not run yet lands in the band)" in bp.render_budget(tmp_path)
    V = bp.budget_verdict(_budget_results({"a": [1.0] * 5, "b": [1.0, 1.0, 1.0, 1.1, 1.0]}, [0.0] * 10, drop=1))
    assert (V["within"], V["total"], V["met"]) == (8, 10, False)


def test_lut_goal_per_resolution() -> None:
    errs = [0.02, -0.029, 0.01, 0.0, 0.031, -0.02, 0.02, 0.01, 0.0, None]   # 224 px: 3 %; 8 of 10 within
    V = bp.budget_verdict(_budget_results({"a": [1.0] * 5, "b": [1.0] * 5}, errs))
    g = V["lut"][224]
    assert (g["cases"], g["within"], g["goal"], g["met"]) == (10, 8, 0.03, False)
    assert g["max"] == pytest.approx(0.031)
    errs32 = [0.045, -0.049, 0.01, 0.0, 0.031, -0.02, 0.02, 0.01, 0.0, 0.06]  # 32 px: 5 %; 9 of 10 within
    g = bp.budget_verdict(_budget_results({"a": [1.0] * 5, "b": [1.0] * 5}, errs32, res=32))["lut"][32]
    assert (g["within"], g["goal"], g["met"]) == (9, 0.05, True)


def test_render_budget_on_hand_made_results(tmp_path: Path) -> None:
    R = _budget_results({"a": [1.0, 1.0, 1.0, 1.0, 1.0], "b": [1.0, 0.9, 1.0, 1.0, 1.05]}, [0.01] * 10)
    (tmp_path / "budget.json").write_text(json.dumps(R))
    t = bp.render_budget(tmp_path)
    assert "| A | cpu | random |" in t and "| B | cpu | random |" in t
    assert "**over**" in t and "*under*" in t
    assert "Within the band: 8 of 10 cases (1 over, 1 under); goal ≥ 90 %: **not met**" in t
    assert "| 224 px | ≤ 3.0 % | 10 of 10 |" in t and "smoke" not in t
    R["schema"] = "other/1"
    (tmp_path / "budget.json").write_text(json.dumps(R))
    with pytest.raises(ValueError, match="schema"):
        bp.render_budget(tmp_path)


# ------------------------------------------------------------------ the accuracy constraint, hand-made
def _acc_cell(config: str, seed: int, n: int, lost: int, won: int, bound: float | None,
              recommended: str = "fold") -> dict[str, Any]:
    return {"cell": f"acc-{config}.s{seed}", "run_config": config, "seed": seed, "max_acc_drop": 0.01,
            "trial": 3, "recommended": recommended, "fold_set": {"1": "full"}, "base_test_acc": 0.9,
            "trial_test_acc": 0.9 - (lost - won) / n, "test": {"n": n, "lost": lost, "won": won},
            "confirm": {"n": 180, "lost": 1, "won": 0, "drop": 1 / 180, "bound": bound, "passed": True}}


def _acc_results(cells: list[dict[str, Any]], configs: dict[str, list[int]] | None = None) -> dict[str, Any]:
    p = {**bp.protocol(), "accuracy_configs": configs or {"q": [0, 1, 2]}}
    return {"schema": bp.RESULTS_SCHEMA, "smoke": False, "protocol": p, "cells": cells, "commit": "abc",
            "published": "now", "environment": {}}


def test_paired_se_is_the_sd_of_the_differences_over_root_n() -> None:
    d = np.array([1] * 30 + [-1] * 10 + [0] * 960, dtype=float)
    assert bp.paired_se(1000, 30, 10) == pytest.approx(d.std(ddof=1) / math.sqrt(d.size))
    assert bp.paired_se(500, 0, 0) == 0.0


def test_accuracy_verdict_the_two_se_rule_and_coverage(tmp_path: Path) -> None:
    within = _acc_cell("q", 0, 1000, 10, 5, 0.01)          # drop 0.5 pt
    over_in_se = _acc_cell("q", 1, 1000, 30, 10, 0.025)    # drop 2.0 pt > 1 pt, but 1 + 2 SE ≈ 2.26 pt
    V = bp.accuracy_verdict(_acc_results([within, over_in_se, _acc_cell("q", 2, 360, 0, 0, 0.0, "base")]))
    assert [c["miss"] for c in V["cases"]] == [False, False, False]
    assert V["cases"][1]["test_drop"] == pytest.approx(0.02) and 0.01 + 2 * V["cases"][1]["test_se"] > 0.02
    assert V["met"] and V["covered_all"] and V["misses"] == 0
    miss = _acc_cell("q", 2, 1000, 50, 5, 0.03)            # drop 4.5 pt > 1 + 2 SE ≈ 2.46 pt; bound 3 pt < 4.5
    V = bp.accuracy_verdict(_acc_results([within, over_in_se, miss]))
    assert [c["miss"] for c in V["cases"]] == [False, False, True]
    assert [c["covered"] for c in V["cases"]] == [True, True, False]    # bound 3.0 pt < drop 4.5 pt
    assert (V["misses"], V["uncovered"], V["met"], V["covered_all"]) == (1, 1, False, False)
    (tmp_path / "accuracy.json").write_text(json.dumps(_acc_results([within, over_in_se, miss])))
    t = bp.render_accuracy(tmp_path)
    assert "**yes: miss**" in t and "| q | 2 |" in t and "**no**" in t
    assert "more than 2 standard errors: 1 of 3: **not met**" in t and "covers the test drop in 2 of 3: **not met**" in t


def test_accuracy_verdict_counts_a_run_not_done(tmp_path: Path) -> None:
    R = _acc_results([_acc_cell("q", 0, 1000, 0, 0, 0.0)], {"q": [0, 1]})
    V = bp.accuracy_verdict(R)
    assert (V["n"], V["total"], V["missing"], V["misses"], V["met"]) == (1, 2, 1, 0, False)
    (tmp_path / "accuracy.json").write_text(json.dumps(R))   # a stage run over sessions: not decided yet
    t = bp.render_accuracy(tmp_path)
    assert "0 of 1; 1 of 2 runs not done: **pending**" in t and "in 1 of 1: **pending**" in t


def test_accuracy_record_reads_a_run_directory(tmp_path: Path) -> None:
    """The record of a finished ``latopt run`` directory (hand-made here, with random-weight checkpoints on the
    digits task): run.json's constraint and confirmation, the paired counts on the whole test split."""
    import torch

    from latopt.config import load_config, write_config
    from latopt.data import load_task
    from latopt.export import write_export_record
    from latopt.files.checkpoint import CheckpointMeta, make_arch, save_checkpoint
    from latopt.nets.models import build_model
    from latopt.run.run_record import BaseStage, SearchPick
    from latopt.search.study_record import Confirmation, ConfirmSplit, Rejected
    from tests.harness.records import export_record

    model = "mobilenetv2_035"
    root = tmp_path / "quickstart"
    cfg = load_config("quickstart", {"model.name": model})
    write_config(cfg, root / "config.yaml")
    for name, seed in (("base/base.pt", 0), ("search/trial-1/folded.pt", 1)):
        torch.manual_seed(seed)
        m = build_model(model, num_classes=10).eval()
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        save_checkpoint(root / name, m, make_arch(m, model, 10), CheckpointMeta(resolution=32))
    confirm = {"n": 180, "lost": 2, "won": 1, "drop": 1 / 180, "bound": 0.02, "level": 0.95, "passed": False}
    split = ConfirmSplit(seed=0, n_selection=180, n_confirmation=180, level=0.95, method="exact-binomial",
                         confirmation_sha256="x")
    search = SearchPick(trial=1, checkpoint=str(root / "search/trial-1/folded.pt"), fold_set={"2": "full"},
                        max_acc_drop=0.01, confirm=Confirmation(**confirm), rejected=[Rejected(trial=2)],
                        confirm_split=split)
    run = {"schema": "latopt.run/2", "stages": {"base": BaseStage(checkpoint="base/base.pt", test_acc=0.1).to_json(),
                                                 "search": search.to_json()}}
    (root / "run.json").write_text(json.dumps(run))
    acc = export_record().accuracy
    assert acc is not None
    write_export_record(root / "export" / "export.json",
                        export_record(accuracy=acc.model_copy(update={"test_acc": 0.11})))
    rec = bp.accuracy_record(root, "quickstart", 0)
    n = len(load_task(cfg).test)
    assert rec["test"]["n"] == n and rec["recommended"] == "fold" and rec["trial"] == 1
    t = rec["test"]
    assert rec["base_test_acc"] - rec["trial_test_acc"] == pytest.approx((t["lost"] - t["won"]) / n)
    assert rec["confirm"] == {k: confirm[k] for k in ("n", "lost", "won", "drop", "bound", "level", "passed")}
    assert rec["shipped_test_acc"] == 0.11 and rec["rejected"] == 1 and "confirmation_sha256" not in rec["confirm_split"]
    # the base recommended: the drop is 0 by construction
    run["stages"]["search"]["checkpoint"] = None
    (root / "run.json").write_text(json.dumps(run))
    rec = bp.accuracy_record(root, "quickstart", 0)
    assert rec["recommended"] == "base" and rec["test"]["lost"] == rec["test"]["won"] == 0


def _front_row(trial: int, ms: float, drop: float, **kw: Any) -> dict[str, Any]:
    return {"trial": trial, "val_acc": 0.9 - drop, "metric": ms, "acc_drop": drop, "feasible": True,
            "confirm_drop": drop, "confirm_bound": drop + 0.006, "confirmed": None, "lambda_c": None, "tau": None,
            "p": None, "granularity": None, "budget": kw.get("budget"), "n_folded": kw.get("n", 0), "fold_set": {},
            "base": trial == 0, "on_front": True, "on_full_front": kw.get("full", True),
            "recommended": kw.get("rec", False), "checkpoint": None, "latency_ms": ms, "measured_ms": None,
            "measured_ratio": None, "nonlinear_layers": None}


def test_front_record_says_what_became_of_each_candidate(tmp_path: Path) -> None:
    """The candidates of a run's pareto.json, fastest first: the shipped one, the one whose bound failed, the one
    the fixed sequence never reached, a slower one not needed, the base; LUT speed-ups over the base's latency.
    A run without a search stage has none; the main-job table prints them."""
    from latopt.search import FrontSummary

    assert bp.front_record(tmp_path) is None
    rows = [_front_row(0, 0.2, 0.0), _front_row(3, 0.16, 0.002, budget=0.8, n=3),
            _front_row(4, 0.125, 0.004, budget=0.6, n=8, rec=True), _front_row(5, 0.11, 0.008, budget=0.55, n=9),
            _front_row(6, 0.1, 0.012, budget=0.5, n=10), _front_row(7, 0.09, 0.03, full=False),
            _front_row(8, 0.095, 0.02, budget=0.45, n=11) | {"feasible": False}]
    rec = {"trial": 4, "max_acc_drop": 0.01, "rejected": [{"trial": 6, "why": "not tested: the sequence stopped at "
                                                          "trial 5"}, {"trial": 5}]}
    s = FrontSummary.model_validate({"study": "s", "objective": "latency", "metric_names": ["val_acc", "latency_ms"],
                                     "max_acc_drop": 0.01, "base_acc": 0.9, "base_trial": 0, "recommended": 4,
                                     "recommendation": rec, "confirm_split": None, "n_front": 6, "n_full_front": 5,
                                     "trial_states": {"COMPLETE": 6}, "rows": rows})
    (tmp_path / "search").mkdir()
    (tmp_path / "search" / "pareto.json").write_text(json.dumps(s.to_json()))
    front = bp.front_record(tmp_path)
    assert front is not None
    assert [(f["trial"], f["outcome"]) for f in front] == [(8, "over the constraint"), (6, "not tested"),
                                                            (5, "rejected"), (4, "shipped"),
                                                            (3, "not needed"), (0, "base")]
    assert front[3]["lut_speedup"] == pytest.approx(1.6) and front[3]["n_folded"] == 8
    assert front[2]["confirm_bound"] == pytest.approx(0.014)
    cell = _acc_cell("fashion_mnist", 0, 1000, 10, 5, 0.009) | {"front": front}
    (tmp_path / "accuracy.json").write_text(json.dumps(_acc_results([cell], {"fashion_mnist": [0]})))
    t = bp.render_main_job(tmp_path)
    assert "| fashion_mnist | 0 | 5 | 0.55 | 9 | 1.82× | +0.80 pt | +0.80 pt (1.40 pt) | rejected |" in t
    assert "| fashion_mnist | 0 | 6 | 0.5 | 10 | 2.00× |" in t and t.count("| fashion_mnist | 0 |") == 7


# ------------------------------------------------------------------ arguments, docs
@pytest.mark.parametrize("argv, says", [
    (["budget", "--budgets", "1.5"], "--budgets"),
    (["budget", "--models", "resnet"], "unknown resnet"),
    (["budget", "--targets", "flops"], "counts"),
    (["budget", "--base", "quickstart=/no/such.pt"], "no such file"),
    (["accuracy", "--configs", "quickstart:3-1"], "not a seed"),
    (["accuracy", "--configs", "quickstart"], "CONFIG:SEEDS"),
    (["accuracy", "--configs", "nosuchconfig:0"], "nosuchconfig"),
    (["publish"], "--results"),
    (["publish", "--results", "out"], "nothing to publish"),
])
def test_bad_arguments_are_one_line_exit_2(argv: list[str], says: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        bp.main([*argv, "--runs-dir", str(tmp_path / "runs")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("bench_promises: error:") and says in err
    assert not (tmp_path / "runs").exists()


def test_parse_configs() -> None:
    assert bp.parse_configs(["quickstart:0-4", "fashion_mnist:0,2"]) == {"quickstart": (0, 1, 2, 3, 4),
                                                                          "fashion_mnist": (0, 2)}
    with pytest.raises(ValueError, match="twice"):
        bp.parse_configs(["quickstart:0-2,1"])


def test_the_docs_blocks_say_not_run_until_results_exist() -> None:
    page = (ROOT / "docs" / "promises.md").read_text()
    for block, render, name in (("promises-budget", bp.render_budget, "budget.json"),
                                ("promises-accuracy", bp.render_accuracy, "accuracy.json")):
        assert f"<!-- regenerate {block} -->" in page
        made = regenerate.GENERATORS[block]()
        assert made == render(ROOT / "results" / "promises")
        if not (ROOT / "results" / "promises" / name).exists():
            assert "has not been run yet" in made and made.rstrip("\n") in page
