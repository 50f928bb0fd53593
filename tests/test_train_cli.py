"""`latopt train` / `latopt fold` through latopt.cli.main: the happy path and bad input (one line, exit 2,
nothing written)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from latopt.cli import main

CONFIG = """
name: clitiny
model: {name: mobilenetv2_035}
data: {task: digits, resolution: 16, batch_size: 32, max_samples: 64}
train: {epochs: 1, optimizer: sgd, lr: 0.01, schedule: step, step_size: 1, label_smoothing: 0.1}
fold: {epochs: 1, post_epochs: 1, lambda_c: 5.0, alpha_lr: 0.3}
"""



@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("cli")
    cfg = root / "c.yaml"
    cfg.write_text(CONFIG)
    base = root / "base"
    assert main(["train", "--config", str(cfg), "--out", str(base), "--quiet", "--seed", "1"]) == 0
    return {"root": root, "cfg": cfg, "ckpt": base / "base.pt"}


def test_train_and_fold_commands(env: dict, capsys: pytest.CaptureFixture) -> None:
    assert env["ckpt"].is_file()
    metrics = json.loads((env["root"] / "base" / "metrics.json").read_text())
    assert metrics["model"] == "mobilenetv2_035" and metrics["seed"] == 1 and metrics["epochs"] == 1
    out = env["root"] / "fold"
    rc = main(["fold", "--config", str(env["cfg"]), "--checkpoint", str(env["ckpt"]), "--out", str(out),
               "--tau", "0.6", "--p", "3", "--mode", "paper", "--granularity", "block", "--quiet"])
    assert rc == 0
    summary = capsys.readouterr().out
    assert "test acc base" in summary and str(out / "folded.pt") in summary
    report = json.loads((out / "report.json").read_text())
    assert report["params_fold"] == {"lambda_c": 5.0, "tau": 0.6, "p": 3.0, "granularity": "block",
                                     "distill": "none", "mode": "paper", "unfolded_alpha": "zero", "lut": None}
    assert report["fold_check"]["limit"] is None  # paper mode: border differences are reported, not enforced
    # the timm t=1 block and the timm blocks are discovered too
    assert report["n_foldable"] == 17


def _lut(path: Path, model: str, resolution: int) -> Path:
    from latopt.latency.lut import LUT, BlockEntry, save_lut

    block = BlockEntry(index=0, path="blocks.0.0", kind="k", input_shape=(1, 3, 8, 8), foldable=False,
                       reason="", raw={}, ms={"none": 1.0})  # a LUT has blocks
    return save_lut(LUT(device="cpu", model=model, resolution=resolution, batch=1, blocks=[block],
                        fixed_ms=1.0), path)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--lambda-c", "-1"], "'fold.lambda_c' must be >= 0, got -1.0"),
        (["--tau", "0"], r"'fold.tau' must be in \(0, 1\], got 0.0"),
        (["--tau", "1.5"], r"'fold.tau' must be in \(0, 1\], got 1.5"),
        (["--p", "1"], "'fold.p' must be > 1, got 1.0"),
        (["--lut", "{root}/other_model.json"], "profiled for model"),
        (["--lut", "{root}/other_res.json"], "profiled for resolution"),
        (["--lut", "{root}/missing.json"], "does not exist"),
        (["--checkpoint", "{root}/nope.pt"], "does not exist"),
        (["--checkpoint", "{root}/c.yaml"], "not a latopt checkpoint"),
        (["--data", "digits-clutter"], "trained with data"),
    ],
)
def test_fold_bad_input(env: dict, capsys: pytest.CaptureFixture, args: list[str], match: str) -> None:
    root = env["root"]
    _lut(root / "other_model.json", "mobilenetv2_100", 16)
    _lut(root / "other_res.json", "mobilenetv2_035", 224)
    out = root / "bad-fold"
    argv = ["fold", "--config", str(env["cfg"]), "--checkpoint", str(env["ckpt"]), "--out", str(out), "--quiet"]
    argv += [a.format(root=root) for a in args]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("latopt: error: ") and err.count("\n") == 1
    assert re.search(match, err), err
    assert not out.exists()


def test_train_bad_input(env: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    no_val = tmp_path / "noval"
    (no_val / "train" / "a").mkdir(parents=True)
    cases = [
        (["--data", f"imagefolder:{empty}"], "no train/ or val/ sub-folder"),
        (["--data", f"imagefolder:{no_val}"], "no val/ sub-folder"),
        (["--data", f"cifar10:{empty}"], "lacks data_batch_1"),
        (["--data", "emnist"], "unknown data task"),
        (["--epochs", "-1"], "--epochs must be >= 0"),
        (["--threads", "0"], "'threads' must be in [1, 1024]"),
        (["--checkpoint", str(tmp_path / "none.pt")], "does not exist"),
        (["--checkpoint", str(env["ckpt"]), "--pretrained"], "either checkpoint (or model.weights) or pretrained, not both (option --checkpoint)"),
    ]
    for args, match in cases:
        out = tmp_path / "out"
        capsys.readouterr()
        assert main(["train", "--config", str(env["cfg"]), "--out", str(out), *args]) == 2, args
        err = capsys.readouterr().err
        assert match in err and err.count("\n") == 1, (args, err)
        assert not out.exists()
    a_file = tmp_path / "a-file"    # an --out that is a file: refused before the resume state beside it is written
    a_file.write_text("x")
    assert main(["train", "--config", str(env["cfg"]), "--out", str(a_file), "--quiet"]) == 2
    assert "exists and is a file" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "empty", "noval"] and a_file.read_text() == "x"
    assert main(["train", "--config", str(tmp_path / "missing.yaml")]) == 2


def test_library_errors_name_parameters_and_the_cli_adds_its_flag(monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture) -> None:
    """A library error names the parameter (``param``); the CLI adds the flag that sets it, found by its dest
    (nested sub-commands included); a parameter the command has no flag for reads as it is."""
    from latopt import cli
    from latopt.errors import LatoptError

    parser = cli.build_parser()
    assert cli.flag_for(parser, "search", "max_acc_drop") == "--max-acc-drop"
    assert cli.flag_for(parser, "train-mlp", "l1") == "--l1"
    assert cli.flag_for(parser, "export", "no_such_parameter") is None
    assert cli.flag_for(parser, None, "tau") is None

    def fails(param: str):
        def run(args):  # noqa: ANN001, ANN202 - the command's func
            raise LatoptError(f"{param} = 7 is out of range", param=param)
        return run

    for param, line in [("tau", "latopt: error: tau = 7 is out of range (option --tau)\n"),
                        ("no_such_parameter", "latopt: error: no_such_parameter = 7 is out of range\n")]:
        real = cli.build_parser

        def patched(real=real, param=param):  # noqa: ANN001, ANN202
            p = real()
            for a in p._actions:
                if hasattr(a, "choices") and isinstance(a.choices, dict) and "fold" in a.choices:
                    a.choices["fold"].set_defaults(func=fails(param))
            return p

        monkeypatch.setattr(cli, "build_parser", patched)
        assert cli.main(["fold", "--config", "c.yaml", "--checkpoint", "x.pt"]) == 2
        assert capsys.readouterr().err == line
