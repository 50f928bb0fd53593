"""`latopt inspect` through latopt.cli.main: table, --check-fold, JSON output, exit-code-2 paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import latopt.rewrite.compose as compose
from latopt.cli import main
from latopt.nets.models import build_model, count_flops

pytestmark = pytest.mark.floor   # .ci/run's lower-bounds run selects these tests


def test_inspect_table_and_check_fold(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_json = tmp_path / "inspect.json"
    rc = main(["inspect", "mobilenetv2_050", "--resolution", "64", "--check-fold", "--json", str(out_json)])
    out = capsys.readouterr().out
    assert rc == 0, out
    lines = out.splitlines()
    assert lines[1].split()[:3] == ["idx", "path", "kind"]
    rows = [ln for ln in lines if ln.strip().split(" ")[0].isdigit() and "blocks." in ln]
    assert len(rows) == 17 and rows[0].split()[1] == "blocks.0.0"
    assert "fixed parts: stem (conv_stem, bn1)" in out and "overall relative error" in out
    data = json.loads(out_json.read_text())
    assert data["schema"] == "latopt.inspect/1" and len(data["blocks"]) == 17
    assert data["check_fold"]["max_rel"] <= 1e-4
    assert len(data["check_fold"]["per_block"]) == 17
    # block 1 (expand 1x1 at 32x32, depthwise 3x3 stride 2, project 1x1 at 16x16) against its one folded 3x3
    # stride-2 convolution, from the layer shapes (2 FLOPs per multiply-add; BN and additions not counted)
    block = build_model("mobilenetv2_050").blocks[1][0]
    cin, hidden, cout = block.conv_pw.in_channels, block.conv_pw.out_channels, block.conv_pwl.out_channels
    b1 = data["blocks"][1]
    assert b1["flops"] == 2 * (32 * 32 * hidden * cin + 16 * 16 * hidden * 9 + 16 * 16 * cout * hidden)
    assert b1["flops_folded"] == 2 * 16 * 16 * cout * cin * 9
    assert b1["fold_lowers_flops"] == (b1["flops_folded"] < b1["flops"])
    # FLOPs come from FlopCounterMode: the stem conv at 64 px is 2 * 32*32 * 16*3*9 multiply-adds (width 0.5)
    assert data["stem_flops"] == 2 * 32 * 32 * 16 * 3 * 9


def test_inspect_paper_mode_torchvision(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["inspect", "torchvision/mobilenet_v2?width=0.5", "--resolution", "33", "--mode", "paper",
               "--check-fold", "--num-classes", "10"])
    out = capsys.readouterr().out
    assert rc == 0 and "paper mode: interior per-block error" in out and "features.1 " in out


def test_check_fold_fails_on_a_broken_fold(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A fold without the border correction must be caught in exact mode (exit 3, numbers in the line)."""
    def constant_bias(ac, input_size):  # the paper-mode bias everywhere: wrong on the border
        k = ac.weight.shape[-1]
        shape = compose.conv_geometry(torch.ones(1, 1, *input_size, dtype=ac.const.dtype),
                                      torch.zeros(1, 1, k, k, dtype=ac.const.dtype), ac.stride, ac.padding).shape
        return ac.interior_bias[:, None, None].expand(-1, *shape[-2:]).clone()

    monkeypatch.setattr(compose, "bias_map", constant_bias)
    rc = main(["inspect", "mobilenetv2_035", "--resolution", "32", "--check-fold"])
    captured = capsys.readouterr()
    assert rc == 3
    assert captured.err.startswith("latopt: error: fold check failed: relative error")
    assert len(captured.err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv,msg", [
    (["inspect", "resnet_bogus"], "unknown model 'resnet_bogus'; supported: mobilenetv2_035"),
    (["inspect", "torchvision/not_a_model"], "unknown model 'torchvision/not_a_model'; supported: mobilenetv2_035"),
    (["inspect", "mobilenetv2_035", "--resolution", "4"], "--resolution 4 is too small"),
    (["inspect", "torchvision/mobilenet_v2?width=x"], "bad width 'x'"),
    (["inspect", "mobilenetv2_035", "--num-classes", "0"], "num_classes must be in [1, 100000]"),
])
def test_bad_input_exit_2(argv: list[str], msg: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1


def _checkpoint(path: Path, classes: int = 10) -> Path:
    from latopt.files.checkpoint import CheckpointMeta, make_arch, save_checkpoint

    torch.manual_seed(0)
    m = build_model("mobilenetv2_035", classes)
    save_checkpoint(path, m, make_arch(m, "mobilenetv2_035", classes), CheckpointMeta(resolution=32))
    return path


def test_check_fold_of_a_checkpoint_on_the_tasks_images(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint keeps its own BN statistics (--random-bn asks otherwise); --data checks on the task's images;
    its class count and resolution are the checkpoint's; the summary says what exact promises."""
    ckpt = _checkpoint(tmp_path / "c.pt")
    out_json = tmp_path / "i.json"
    assert main(["inspect", "--checkpoint", str(ckpt), "--check-fold", "--data", "digits", "--json",
                 str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "fold check (the network's own BN statistics, digits validation inputs;" in out
    assert "exact means: each folded network computes what the network with those blocks' activations removed" in out
    data = json.loads(out_json.read_text())
    assert data["resolution"] == 32 and data["check_fold"]["random_bn"] is False
    assert data["check_fold"]["inputs"] == "digits validation" and data["check_fold"]["max_rel"] <= 1e-4
    assert main(["inspect", "--checkpoint", str(ckpt), "--check-fold", "--random-bn"]) == 0
    assert "fold check (random BN statistics, random inputs;" in capsys.readouterr().out


def test_a_saturated_reference_is_said_and_not_counted() -> None:
    """Logits that are the same for every input (here: a zero classifier) make the whole-model comparison pass
    whatever the fold did: the check says so and gates the per-block error alone."""
    from latopt.nets.block_table import check_fold, format_check

    torch.manual_seed(0)
    m = build_model("mobilenetv2_035", 10)
    with torch.no_grad():
        m.classifier.weight.zero_()
        m.classifier.bias.fill_(1.0)
    res = check_fold(m, 32)
    assert res.saturated and res.output is not None and res.output.max_rel == 0.0
    assert res.gated("exact") == res.worst() and "compare two constants and show nothing" in format_check(res, "exact")
    torch.manual_seed(0)
    assert not check_fold(build_model("mobilenetv2_035", 10), 32).saturated


@pytest.mark.parametrize("argv,msg", [
    (["inspect"], "give a model name or --checkpoint"),
    (["inspect", "mobilenetv2_035", "--data", "digits"], "--data applies to --check-fold"),
    (["inspect", "mobilenetv2_050", "--checkpoint", "CKPT"], "is mobilenetv2_035, not mobilenetv2_050"),
    (["inspect", "--checkpoint", "CKPT", "--num-classes", "3"], "has 10 classes, not --num-classes 3"),
])
def test_bad_checkpoint_input_exit_2(argv: list[str], msg: str, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = _checkpoint(tmp_path / "c.pt")
    assert main([str(ckpt) if a == "CKPT" else a for a in argv]) == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1, err


def test_count_flops_matches_formula() -> None:
    conv = torch.nn.Conv2d(4, 6, 3, padding=1)
    assert count_flops(conv, (2, 4, 5, 5)) == 2 * 2 * 25 * 6 * 4 * 9


def test_a_model_of_a_fixed_input_size_at_another_resolution_is_one_line(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """timm's vision transformers take only their own input size: inspect and train say so (exit 2, the flag
    named), instead of timm's AssertionError from the forward pass; at their size they run."""
    from latopt.cli import main
    from latopt.config import load_config
    from latopt.errors import LatoptError
    from latopt.training.base_training import train_base

    assert main(["inspect", "vit_tiny_patch16_224", "--resolution", "32"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "takes only 224x224 inputs" in err[0] and "--resolution" in err[0]
    cfg = load_config("quickstart", {"model.name": "vit_tiny_patch16_224", "data.max_samples": 8})
    with pytest.raises(LatoptError, match="takes only 224x224 inputs"):
        train_base(cfg, tmp_path / "base", progress=False)
    assert not (tmp_path / "base" / "base.pt").exists()
