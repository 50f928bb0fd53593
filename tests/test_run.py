"""latopt run end to end on a tiny config: every stage, the report, and resuming instead of starting over.

Tiny settings (MobileNetV2-0.35 at 16 px on digits, 1-2 epochs, 2 trials, a short timing budget); nothing
here asserts on a time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from latopt.cli import main


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory: pytest.TempPathFactory, fast_cpu_device: str) -> Path:
    d = tmp_path_factory.mktemp("run")
    cfg = {"name": "tiny-run", "model": {"name": "mobilenetv2_035"},
           "data": {"task": "digits", "resolution": 16, "batch_size": 128},
           "train": {"epochs": 2, "optimizer": "adamw", "lr": 0.01},
           "fold": {"epochs": 1, "post_epochs": 1, "lr": 0.003, "alpha_lr": 0.1},
           "search": {"lambda_c": [0.5, 20.0], "tau": [0.5, 0.9], "p": [1.5, 3.0], "trials": 2,
                      "max_acc_drop": 0.5},
           "device": fast_cpu_device, "threads": 1}
    (d / "tiny.yaml").write_text(yaml.safe_dump(cfg))
    return d / "tiny.yaml"


def test_run_all_stages_then_resume(tiny_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    assert main(["run", str(tiny_config), "--runs-dir", str(runs)]) == 0
    first = capsys.readouterr().out
    root = runs / "tiny-run"
    for f in ("REPORT.md", "latency_blocks.png", "run.json", "export/export.json", "export/model.onnx",
              "base/base.pt", "config.yaml"):
        assert (root / f).is_file(), f
    state = json.loads((root / "run.json").read_text())
    assert set(state["stages"]) == {"base", "profile", "search", "export", "report"}
    exp = json.loads((root / "export" / "export.json").read_text())
    assert all(g["passed"] for g in exp["gates"]) and exp["latency"]["speedup"] > 0
    assert "speed-up" in first and "measured in this run" in first
    report = (root / "REPORT.md").read_text()
    assert "latency_blocks.png" in report and "speed-up" in report

    # a second invocation resumes every finished stage instead of redoing it
    assert main(["run", str(tiny_config), "--runs-dir", str(runs)]) == 0
    again = capsys.readouterr().out
    for stage in ("base", "profile", "search", "export"):
        assert f"{stage} — resumed" in again, stage
    assert "base epoch" not in again


def test_run_refuses_an_unusable_device_before_any_work(tiny_config: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    assert main(["run", str(tiny_config), "--runs-dir", str(runs), "--device", "gpu-trt-fp16"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("latopt: error:") and len(err.splitlines()) == 1
    assert not runs.exists()
