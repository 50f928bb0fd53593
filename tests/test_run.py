"""latopt run end to end on a tiny config: every stage, the report, and reruns that reuse a stage only when
what it is made from is unchanged (fingerprints in run.json), never a stale one.

Tiny settings (MobileNetV2-0.35 at 16 px on digits, 1-2 epochs, 2 trials, a short timing budget); nothing
here asserts on a time. The tests that need the complete first run are marked ``slow`` (it takes 1-2 minutes
on 2 cores).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from latopt.cli import main
from latopt.errors import LatoptError


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory: pytest.TempPathFactory, fast_cpu_device: str) -> Path:
    d = tmp_path_factory.mktemp("run")
    cfg = {"name": "tiny-run", "model": {"name": "mobilenetv2_035"}, "method": "layerfold",
           "data": {"task": "digits", "resolution": 16, "batch_size": 128},
           "train": {"epochs": 2, "optimizer": "adamw", "lr": 0.01},
           "fold": {"epochs": 1, "post_epochs": 1, "lr": 0.003, "alpha_lr": 0.1},
           "search": {"lambda_c": [0.5, 20.0], "tau": [0.5, 0.9], "p": [1.5, 3.0], "trials": 2,
                      "max_acc_drop": 0.5},
           "device": fast_cpu_device, "threads": 1}
    (d / "tiny.yaml").write_text(yaml.safe_dump(cfg))
    return d / "tiny.yaml"


@pytest.fixture(scope="module")
def first_run(tiny_config: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One complete run of the tiny config (the runs directory and what it printed); tests work on copies."""
    runs = tmp_path_factory.mktemp("first") / "runs"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["run", str(tiny_config), "--runs-dir", str(runs)]) == 0
    return runs, out.getvalue()


def _copy(first_run: tuple[Path, str], tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    shutil.copytree(first_run[0], runs)
    return runs


def _config(tiny_config: Path, tmp_path: Path, **sections: Any) -> Path:
    cfg = yaml.safe_load(tiny_config.read_text())
    for name, values in sections.items():
        cfg[name] = {**cfg.get(name, {}), **values} if isinstance(values, dict) else values
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _forbid(monkeypatch: pytest.MonkeyPatch, *stages: str) -> None:
    """Make the given stages' work functions fail the test if the run calls them."""
    targets = {"base": "latopt.run.stages.train_base", "profile": "latopt.run.stages.profile_model",
               "search": "latopt.run.stages.run_search", "export": "latopt.run.stages.export"}

    for stage in stages:
        def called(*a, _stage=stage, **k):
            raise AssertionError(f"stage {_stage} was re-run")

        monkeypatch.setattr(targets[stage], called)


def _study_trials(root: Path) -> list:
    import optuna

    study = optuna.load_study(study_name="tiny-run", storage=f"sqlite:///{root / 'search' / 'study.db'}")
    return study.trials


@pytest.mark.slow
def test_run_all_stages(first_run: tuple[Path, str], check_fold_structure) -> None:
    runs, first = first_run
    root = runs / "tiny-run"
    for f in ("REPORT.md", "latency_blocks.png", "run.json", "export/export.json", "export/model.onnx",
              "base/base.pt", "config.yaml"):
        assert (root / f).is_file(), f
    state = json.loads((root / "run.json").read_text())
    assert set(state["stages"]) == {"base", "profile", "search", "export", "report"}
    assert all(rec["done"] for rec in state["stages"].values())
    # the exported trial is the study's fastest within max_acc_drop (0.5) of the base on the selection part, ties
    # to accuracy, whose drop is confirmed on the confirmation part; worked out here from the trials themselves
    from latopt.search import drop_bound

    trials = [t for t in _study_trials(root) if t.values is not None]
    base_acc = next(t.values[0] for t in trials if t.user_attrs["base"])
    # the fixed sequence: the trials within the constraint that no other such trial beats on both objectives, slowest
    # first, confirmed until one is not; the fastest confirmed one (the base when none is)
    within = [t for t in trials if base_acc - t.values[0] <= 0.5 and not t.user_attrs.get("base")]
    front = [t for t in within if not any(o.values[0] >= t.values[0] and o.values[1] <= t.values[1]
                                          and tuple(o.values) != tuple(t.values) for o in within)]
    sequence = sorted(front, key=lambda t: (-t.values[1], -t.values[0], t.number))
    confirmed = []
    for t in sequence:
        if drop_bound(t.user_attrs["confirm_lost"], t.user_attrs["confirm_won"], t.user_attrs["confirm_n"]) > 0.5:
            break
        confirmed.append(t)
    want = min(confirmed, key=lambda t: (t.values[1], -t.values[0], t.number),
               default=next(t for t in trials if t.user_attrs.get("base")))
    assert state["stages"]["search"]["trial"] == want.number
    exp = json.loads((root / "export" / "export.json").read_text())
    assert exp["folded"] == want.user_attrs["fold_set"] and all(g["passed"] for g in exp["gates"])
    # what makes the folded network faster: the shipped graph lost one Conv and one activation per fold
    check_fold_structure(root / "export" / "model.onnx", "mobilenetv2_035", 10, exp["folded"])
    assert exp["latency"]["speedup"] == pytest.approx(exp["latency"]["as_is_ms"] / exp["latency"]["folded_ms"])
    assert "speed-up" in first and "measured in this run" in first
    assert "constraint      accuracy drop ≤ 50.00 pt" in first and "test drop" in first   # the accuracy promise
    assert "stages          base ran (new); profile ran (new); search ran (new); export ran (new)" in first
    assert "not run yet" not in first and "error" not in first.split("LUT prediction")[1].splitlines()[0]
    report = (root / "REPORT.md").read_text()
    assert "| base | ran (new) |" in report
    assert "latency_blocks.png" in report and "speed-up" in report


@pytest.mark.slow
def test_rerun_with_the_same_config_reuses_every_stage(first_run: tuple[Path, str], tiny_config: Path,
                                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    runs = _copy(first_run, tmp_path)     # a moved run directory stays valid (paths are recorded relative)
    before = json.loads((runs / "tiny-run" / "run.json").read_text())["stages"]
    _forbid(monkeypatch, "base", "profile", "search", "export")
    assert main(["run", str(tiny_config), "--runs-dir", str(runs)]) == 0
    out, err = capsys.readouterr()
    for i, stage in enumerate(("base", "profile", "search", "export"), 1):   # progress: stderr
        assert f"[run] stage {i}/5: {stage} — reused" in err, stage
    assert "stages          base reused; profile reused; search reused; export reused" in out           # the summary: stdout, and only it
    assert "[run]" not in out and out.splitlines()[-1].startswith("finished in ")
    state = json.loads((runs / "tiny-run" / "run.json").read_text())
    assert all(state["last_invocation"][s]["reused"] for s in ("base", "profile", "search", "export"))
    assert {s: r["finished"] for s, r in state["stages"].items() if s != "report"} == \
        {s: r["finished"] for s, r in before.items() if s != "report"}
    assert "| base | reused |" in (runs / "tiny-run" / "REPORT.md").read_text()


@pytest.mark.slow
def test_changed_fold_settings_rerun_search_and_export_only(first_run: tuple[Path, str], tiny_config: Path,
                                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    runs = _copy(first_run, tmp_path)
    root = runs / "tiny-run"
    base_pt = (root / "base" / "base.pt").read_bytes()
    old_trials = {t.datetime_start for t in _study_trials(root)}
    config = _config(tiny_config, tmp_path, fold={"lr": 0.002})
    _forbid(monkeypatch, "base", "profile")
    assert main(["run", str(config), "--runs-dir", str(runs), "--trials", "1"]) == 0   # 1: the base trial only
    out = capsys.readouterr().out
    inv = json.loads((root / "run.json").read_text())["last_invocation"]
    assert inv["base"]["reused"] and inv["profile"]["reused"]
    assert inv["search"]["why"] == "fold.lr changed (0.003 → 0.002)"
    assert inv["export"]["why"] == "search is re-run"
    assert ("stages          base reused; profile reused; search re-run: fold.lr changed (0.003 → 0.002); "
            "export re-run: search is re-run") in out
    assert (root / "base" / "base.pt").read_bytes() == base_pt
    trials = _study_trials(root)                       # a new study: none of the old trials is in it
    assert len(trials) == 1 and not {t.datetime_start for t in trials} & old_trials
    assert yaml.safe_load((root / "config.yaml").read_text())["fold"]["lr"] == 0.002


@pytest.mark.slow
def test_a_value_the_method_does_not_read_reruns_nothing(first_run: tuple[Path, str], tiny_config: Path,
                                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Layer Folding's trials sample λ_c, τ and p: the config's fold.lambda_c, fold.tau and fold.p, and the DP's
    section, are not what its search is made from."""
    runs = _copy(first_run, tmp_path)
    config = _config(tiny_config, tmp_path, fold={"lambda_c": 7.0, "tau": 0.6, "p": 3.0},
                     dp={"budgets": [0.6], "importance": "uniform"})
    _forbid(monkeypatch, "base", "profile", "search", "export")
    assert main(["run", str(config), "--runs-dir", str(runs)]) == 0
    assert "stages          base reused; profile reused; search reused; export reused" in capsys.readouterr().out


@pytest.mark.slow
def test_method_dp_is_one_key(first_run: tuple[Path, str], tiny_config: Path, tmp_path: Path,
                              monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``method: dp`` makes the run profile the DP's variants and search over the DP's budgets: the base is
    reused, the profile and the search are made again, and what is exported is the DP's trial or the base."""
    runs = _copy(first_run, tmp_path)
    root = runs / "tiny-run"
    config = _config(tiny_config, tmp_path, method="dp", dp={"budgets": [0.7], "importance": "uniform",
                                                              "budget_rounds": 0})
    _forbid(monkeypatch, "base")
    assert main(["run", str(config), "--runs-dir", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "stages          base reused; profile re-run: variants changed; search re-run: profile is re-run" in out
    state = json.loads((root / "run.json").read_text())
    assert state["stages"]["profile"]["made_from"]["variants"] == ["full", "pw", "drop"]
    assert state["stages"]["search"]["made_from"]["method"] == "dp"
    assert set(json.loads((root / "lut-cpu-test.json").read_text())["variants"]) >= {"full", "pw", "drop"}
    trials = _study_trials(root)
    # the base trial, the one budget, and that candidate fine-tuned longer (dp.refine: it is within reach)
    assert sorted(t.params["budget"] for t in trials) == [0.7, 0.7, 1.0]
    assert [t.user_attrs.get("refines") for t in sorted(trials, key=lambda t: t.number)] == [None, None, 1]
    pick = state["stages"]["search"]
    assert pick["trial"] in (0, 2) and (pick["checkpoint"] is None) == (pick["trial"] == 0)   # 1 is superseded by 2
    if pick["checkpoint"] is not None:   # the DP's fold, as run_dp writes it
        assert json.loads((root / Path(pick["checkpoint"]).parent / "report.json").read_text())["method"] == "dp"


class _Stop(Exception):
    pass


@pytest.mark.slow
@pytest.mark.parametrize("change", ["train", "tampered base", "seed", "hand-edited run.json"])
def test_a_changed_base_input_reruns_every_stage(first_run: tuple[Path, str], tiny_config: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                 change: str) -> None:
    """The plan, and the stale artefacts withdrawn before the base is retrained (the full re-run itself is
    exercised by the --fresh test)."""
    runs = _copy(first_run, tmp_path)
    root = runs / "tiny-run"
    config, args, why = tiny_config, [], "config section train changed"
    if change == "train":
        config = _config(tiny_config, tmp_path, train={"lr": 0.02})
    elif change == "tampered base":
        with (root / "base" / "base.pt").open("ab") as f:
            f.write(b"\0")
        why = "its output base/base.pt changed since it was made"
    elif change == "seed":
        args, why = ["--seed", "1"], "seed changed (0 → 1)"
    else:
        state = json.loads((root / "run.json").read_text())
        state["stages"]["base"]["made_from"] = "x"
        (root / "run.json").write_text(json.dumps(state))
        why = "its record in run.json is unreadable"

    def train_base(*a, **k):
        raise _Stop

    monkeypatch.setattr("latopt.run.stages.train_base", train_base)
    with pytest.raises(_Stop):
        main(["run", str(config), "--runs-dir", str(runs), *args])
    err = capsys.readouterr().err
    assert f"[run] run base ({why}), profile (base is re-run), search (base is re-run), export (base is re-run)" in err
    state = json.loads((root / "run.json").read_text())
    assert list(state["stages"]) == ["base"] and not state["stages"]["base"]["done"]
    for stale in ("config.yaml", "REPORT.md", "export", "search", "lut-cpu-test.json", "base"):
        assert not (root / stale).exists(), stale      # nothing claims to come from the new settings


@pytest.mark.slow
def test_fresh_starts_a_new_study(first_run: tuple[Path, str], tiny_config: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    runs = _copy(first_run, tmp_path)
    root = runs / "tiny-run"
    old_trials = {t.datetime_start for t in _study_trials(root)}
    (root / "search" / "trial-9").mkdir()
    assert main(["run", str(tiny_config), "--runs-dir", str(runs), "--fresh", "--trials", "1"]) == 0
    out = capsys.readouterr().out
    assert ("stages          base ran (new: --fresh); profile ran (new: --fresh); search ran (new: --fresh); "
            "export ran (new: --fresh)") in out
    trials = _study_trials(root)
    assert len(trials) == 1 and not {t.datetime_start for t in trials} & old_trials
    assert not (root / "search" / "trial-9").exists()
    assert json.loads((root / "run.json").read_text())["stages"]["search"]["done"]


@pytest.mark.slow
def test_a_configured_storage_study_is_never_deleted(first_run: tuple[Path, str], tiny_config: Path,
                                                     tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import optuna

    runs = _copy(first_run, tmp_path)
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    optuna.create_study(study_name="tiny-run", storage=url)
    config = _config(tiny_config, tmp_path, search={"storage": url})
    state = (runs / "tiny-run" / "run.json").read_bytes()
    for extra in ([], ["--fresh"]):
        assert main(["run", str(config), "--runs-dir", str(runs), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "optuna delete-study --study-name tiny-run" in err, err
        assert (runs / "tiny-run" / "run.json").read_bytes() == state        # nothing deleted or rewritten
        assert (runs / "tiny-run" / "search" / "study.db").is_file()
        assert "tiny-run" in optuna.get_all_study_names(url)


@pytest.mark.parametrize("n", ["0", "1000000"])
def test_run_refuses_a_trial_count_out_of_bounds_before_any_work(n: str, tiny_config: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(tiny_config), "--runs-dir", str(tmp_path / "runs"), "--trials", n]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"latopt: error: trials must be in [1, 1000] (trials of a study, each training a network), "
                   f"got {n} (option --trials)")
    assert not (tmp_path / "runs").exists()


def test_run_refuses_an_unusable_device_before_any_work(tiny_config: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    assert main(["run", str(tiny_config), "--runs-dir", str(runs), "--device", "gpu-trt-fp16"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("latopt: error:") and len(err.splitlines()) == 1
    assert not runs.exists()


@pytest.mark.parametrize("edit", [{"lut": "NOTALUT"}, {"data": {"task": "cifar10:/nonexistent", "resolution": 16}}])
def test_run_checks_its_lut_and_data_before_writing_anything(tiny_config: Path, tmp_path: Path, edit: dict,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    # a config whose LUT was not a LUT, or whose data could not be read, left runs/<name>/ (run.json, a
    # half-trained base) behind before the error
    cfg = yaml.safe_load(tiny_config.read_text())
    if "lut" in edit:
        bad = tmp_path / "lut.json"
        bad.write_text('{"schema": "something else"}')
        edit = {"lut": str(bad)}
    cfg.update(edit)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    runs = tmp_path / "runs"
    assert main(["run", str(path), "--runs-dir", str(runs)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("latopt: error:") and len(err.splitlines()) == 1, err
    assert not runs.exists()


def test_run_removes_the_directory_it_created_when_its_data_turns_out_bad(tiny_config: Path, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # a corrupt image is found only when training reads it: runs/<name>/ (run.json of a started base stage)
    # was left behind although no stage finished
    from PIL import Image

    root = tmp_path / "images"
    for split in ("train", "val"):
        for c in ("a", "b"):
            (root / split / c).mkdir(parents=True)
            for i in range(3):
                Image.new("RGB", (8, 8), (i * 40, 0, 0)).save(root / split / c / f"{i}.png")
    (root / "train" / "b" / "2.png").write_bytes(b"\x89PNG truncated")
    cfg = yaml.safe_load(tiny_config.read_text())
    cfg["data"] = {"task": f"imagefolder:{root}", "resolution": 16, "batch_size": 2}
    cfg["search"]["max_acc_drop"] = 1.0   # 3 confirmation images: any smaller constraint is refused before training
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    runs = tmp_path / "runs"
    assert main(["run", str(path), "--runs-dir", str(runs)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("latopt: error:") and "not a readable image" in err[-1]
    assert not runs.exists()


def test_the_summary_names_what_each_stage_did() -> None:
    from latopt.run.run_report import action
    from latopt.run.state import NOT_RUN_YET

    assert action(None) == "reused"
    assert action(NOT_RUN_YET) == "ran (new)"
    assert action("--fresh") == "ran (new: --fresh)"
    assert action("fold.lr changed (0.005 → 0.002)") == "re-run: fold.lr changed (0.005 → 0.002)"


def test_a_fold_that_beats_its_base_by_more_than_the_noise_says_the_base_looks_under_trained() -> None:
    from latopt.layerfold import undertrained_warning

    # a fold 7.22 points above its base: 82.22 % -> 89.44 % on 360 test images
    line = undertrained_warning(0.8222, 0.8944, 360)
    assert line is not None and "under-trained" in line and "7.22 points" in line
    # within the noise of 360 images (two standard errors of the difference near 96 %: 2.9 points), or a loss
    assert undertrained_warning(0.9611, 0.9694, 360) is None
    assert undertrained_warning(0.96, 0.90, 360) is None
    assert undertrained_warning(None, 0.9, 360) is None and undertrained_warning(0.5, 0.9, None) is None
    # never less than two test samples, even near 100 %
    assert undertrained_warning(1.0, 1.0, 360) is None
    assert undertrained_warning(0.99, 0.995, 1000) is None and undertrained_warning(0.99, 0.9999, 100_000) is not None


def test_the_lut_prediction_is_a_speed_up_not_two_absolute_times() -> None:
    from latopt.export.export_record import ExportRecord, LatencySection
    from latopt.export.export_report import lut_prediction_line, render_report

    lat = LatencySection.model_validate({
        "as_is_ms": 0.350, "as_is_iqr_ms": 0.01, "folded_ms": 0.174, "folded_iqr_ms": 0.01, "speedup": 2.0,
        "speedup_range": [1.9, 2.1], "repeats": {"as_is": 50, "folded": 50}, "precision": "fp32", "batch": 1,
        "clock": "wall", "lut_as_is_ms": 0.333, "lut_folded_ms": 0.180, "lut_error_as_is": -0.05,
        "lut_error_folded": 0.03, "lut_speedup": 0.333 / 0.180, "lut_speedup_error": 0.333 / 0.180 / 2.0 - 1,
        "lut_created": "2026-12-01T12:00:00+00:00"})
    line = lut_prediction_line(lat)
    assert "1.85× (per-block times summed from the LUT, timed 2026-12-01T12:00:00+00:00)" in line
    assert "2.00× measured in this run: -7.5%" in line
    report = render_report(ExportRecord(
        checkpoint="c", device="cpu", model="m", resolution=32, mode="exact", precision="fp32", folded={}, spans=[],
        bias_maps=None, notes=[], accuracy_gate=False, accuracy_gate_reason="--timing-only", timing_only=True,
        gates=[], accuracy=None, latency=lat, files=["model.timing-only.onnx"]))
    assert line in report and "-5.0%" not in report and "+3.0%" not in report   # no absolute-time "errors"


def test_fresh_deletes_only_what_latopt_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from latopt.run.state import clear

    root = tmp_path / "runs" / "r"
    (root / "base").mkdir(parents=True)
    (root / "base" / "base.pt").write_text("x")
    for name in ("run.json", "REPORT.md", "lut-cpu.json", ".run.json.0123abcd.tmp", "my.yaml"):
        (root / name).write_text("x")
    (tmp_path / "precious").mkdir()
    (root / "link").symlink_to(tmp_path / "precious")
    (tmp_path / "precious" / "data.txt").write_text("keep")
    (root / "notes.txt").write_text("mine")
    with pytest.raises(LatoptError, match=r"did not write \(link, notes\.txt\)"):
        clear(root, [root / "my.yaml"], root / "lut-cpu.json")
    assert (root / "run.json").exists() and (tmp_path / "precious" / "data.txt").exists()   # nothing removed
    (root / "link").unlink()
    (root / "notes.txt").unlink()
    clear(root, [root / "my.yaml"], root / "lut-cpu.json")
    assert sorted(p.name for p in root.iterdir()) == ["my.yaml"]


def test_the_declared_stages_read_only_earlier_stages() -> None:
    """Each stage's ``inputs`` name stages before it: the order the pipeline runs and reruns them in."""
    from latopt.run.stages import BASE, EXPORT, REPORT, SEARCH, STAGES, check_order

    assert [s.name for s in STAGES] == ["base", "profile", "search", "export", "report"]
    assert check_order(STAGES) == STAGES
    with pytest.raises(ValueError, match=r"'search' reads \['base', 'profile'\]"):
        check_order((SEARCH, BASE, EXPORT, REPORT))


def test_run_takes_its_config_as_a_flag_too(capsys: pytest.CaptureFixture) -> None:
    from latopt.cli import build_parser, main

    args = build_parser().parse_args(["run", "--config", "fashion_mnist"])
    assert args.config is None and args.config_flag == "fashion_mnist"
    assert main(["run", "quickstart", "--config", "fashion_mnist"]) == 2
    err = capsys.readouterr().err
    assert "two configs given: 'quickstart' and --config 'fashion_mnist'" in err and err.count("\n") == 1


@pytest.mark.parametrize("command", ["run", "search"])
def test_a_constraint_the_confirmation_part_cannot_confirm_is_refused_before_any_training(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    """Digits' 360 validation images leave 180 to confirm on: even an unchanged network's bound (2.25 pt) is over
    a 1-point constraint. One line, exit 2, before a base is trained or a study is made."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"name": "power", "model": {"name": "mobilenetv2_035"},
                                   "data": {"task": "digits", "resolution": 16}, "search": {"max_acc_drop": 0.01}}))
    runs = tmp_path / "runs"
    argv = {"run": ["run", str(cfg)], "search": ["search", "--config", str(cfg), "--objective", "depth"]}[command]
    assert main([*argv, "--runs-dir", str(runs)]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("latopt: error: the confirmation part has 180 images"), err
    assert "2.25%" in errors[0] and "search.max_acc_drop >= 0.0225" in errors[0]
    assert not runs.exists() or not any(p.is_file() for p in runs.rglob("*"))
