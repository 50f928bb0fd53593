"""latopt export: ONNX + numeric gates + latency check on the CPU; refusals and bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import onnx
import pytest
import torch

from latopt.cli import main
from latopt.errors import VerificationError
from latopt.export.export_record import read_export_record
from latopt.export.options import CheckOptions
from latopt.files.checkpoint import CheckpointMeta, make_arch, save_checkpoint
from latopt.nets.models import build_model

UNGATED4 = CheckOptions(samples=4, measure=False, gate_accuracy=False)   # the gates on 4 inputs, no accuracy gate

MODEL = "mobilenetv2_035"
RES = 32


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    m = build_model(MODEL, num_classes=10)
    for mod in m.modules():  # non-trivial BN statistics, so a wrong fold cannot pass by accident
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.3, 0.3)
            mod.running_var.uniform_(0.5, 1.5)
            mod.weight.data.uniform_(0.5, 1.0)
            mod.bias.data.uniform_(-0.2, 0.2)
    path = tmp_path_factory.mktemp("ckpt") / "base.pt"
    save_checkpoint(path, m, make_arch(m, MODEL, 10), CheckpointMeta(resolution=RES))
    return path


def test_export_fold_all_end_to_end(ckpt: Path, tmp_path: Path, fast_cpu_device: str,
                                    check_fold_structure) -> None:
    from latopt.nets.blocks import find_blocks

    out = tmp_path / "out"
    rc = main(["export", "--no-accuracy-gate", "--checkpoint", str(ckpt), "--device", fast_cpu_device, "--fold", "all",
               "--samples", "8", "--out", str(out)])
    assert rc == 0
    rec = json.loads((out / "export.json").read_text())
    assert rec["schema"] == "latopt.export/1"
    assert read_export_record(out / "export.json").to_json() == rec   # the file is the record, key for key
    names = [g["name"] for g in rec["gates"]]
    assert any("float64" in n for n in names) and any("ONNX Runtime" in n for n in names)
    assert all(g["passed"] and g["rel"] <= g["tol"] for g in rec["gates"])
    # --fold all: every foldable block, fully; the shipped graph has exactly that many fewer Conv/activations
    foldable = [b.index for b in find_blocks(build_model(MODEL, num_classes=10)) if b.foldable]
    assert len(foldable) == 17 and rec["folded"] == {str(i): "full" for i in foldable}
    check_fold_structure(out / "model.onnx", MODEL, 10, rec["folded"])
    m = onnx.load(str(out / "model.onnx"))
    onnx.checker.check_model(m, full_check=True)
    assert m.opset_import[0].version >= 17
    blocks = json.loads(next(p.value for p in m.metadata_props if p.key == "latopt.blocks"))
    assert {k for k, v in blocks.items() if v["folded"] == "full"} == set(rec["folded"])
    assert any(n.name.startswith("b01/") for n in m.graph.node)
    lat = rec["latency"]   # times are not asserted on; the record's arithmetic is
    assert lat["speedup"] == pytest.approx(lat["as_is_ms"] / lat["folded_ms"])
    assert lat["speedup_range"][0] <= lat["speedup"] <= lat["speedup_range"][1]
    assert min(lat["repeats"].values()) >= 5            # the profile's min_repeats
    assert f"**{lat['speedup']:.2f}×**" in (out / "REPORT.md").read_text()


def test_gate_refuses_a_corrupted_fold(ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       fast_cpu_device: str) -> None:
    from latopt.export import export, gates
    from latopt.export import shipped as plan
    from latopt.export.options import ShipOptions
    from latopt.rewrite import FoldedBlock

    real = plan.fold_blocks

    def corrupted(model, blocks, mode="exact", input_size=None):  # type: ignore[no-untyped-def]
        out = real(model, blocks, mode=mode, input_size=input_size)
        fb = next(m for m in out.modules() if isinstance(m, FoldedBlock))
        conv = next(m for m in fb.modules() if isinstance(m, torch.nn.Conv2d))
        with torch.no_grad():
            conv.weight[0, 0, 1, 1] += 0.05  # one wrong tap
        return out

    for module in (plan, gates):  # the exported network and the fold the gates recompute: both corrupted
        monkeypatch.setattr(module, "fold_blocks", corrupted)
    out = tmp_path / "bad"
    with pytest.raises(VerificationError, match="numeric gate failed"):
        export(ckpt, fast_cpu_device, out, ship=ShipOptions(fold="all"), checks=UNGATED4, progress=False)
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".bad")]


def test_gate_checks_the_shipped_network_not_a_recomputed_fold(ckpt: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                fast_cpu_device: str) -> None:
    """Only the network export ships is corrupted (the gates' own fold is right): still refused."""
    from latopt.export import export
    from latopt.export import shipped as plan
    from latopt.export.options import ShipOptions
    from latopt.rewrite import FoldedBlock

    real = plan.fold_blocks

    def corrupted(model, blocks, mode="exact", input_size=None):  # type: ignore[no-untyped-def]
        out = real(model, blocks, mode=mode, input_size=input_size)
        fb = next(m for m in out.modules() if isinstance(m, FoldedBlock))
        with torch.no_grad():
            fb.conv.weight[0, 0, 1, 1] += 0.05
        return out

    monkeypatch.setattr(plan, "fold_blocks", corrupted)
    out = tmp_path / "bad"
    with pytest.raises(VerificationError, match="shipped folded network vs linearised"):
        export(ckpt, fast_cpu_device, out, ship=ShipOptions(fold="all"), checks=UNGATED4, progress=False)
    assert not out.exists()


def test_bad_inputs_are_one_line_exit_2(ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.pt"
    torch.save({"weights": torch.zeros(3)}, junk)
    text = tmp_path / "text.pt"
    text.write_text("not a checkpoint")
    a_file = tmp_path / "file"
    a_file.write_text("x")
    cases = [
        ["--checkpoint", str(junk), "--fold", "all"],
        ["--checkpoint", str(text), "--fold", "all"],
        ["--checkpoint", str(tmp_path / "missing.pt")],
        ["--checkpoint", str(ckpt), "--fold", "all", "--out", str(a_file)],
        ["--checkpoint", str(ckpt), "--fold", "x,y"],
        ["--checkpoint", str(ckpt), "--fold", ","],
        ["--checkpoint", str(ckpt), "--fold", "1,,3"],
        ["--checkpoint", str(ckpt), "--fold", "1,1"],
        ["--checkpoint", str(ckpt), "--fold", "all", "--format", "engine", "--device", "gpu-trt-fp16"],
        ["--checkpoint", str(ckpt), "--fold", "all", "--format", "engine", "--device", "cpu"],
    ]
    for extra in cases:
        out = tmp_path / "o"
        args = ["export", "-q", "--no-measure", *extra] + ([] if "--out" in extra else ["--out", str(out)])
        assert main(args) == 2, extra
        err = capsys.readouterr().err.strip()
        assert err.startswith("latopt: error:") and len(err.splitlines()) == 1, (extra, err)
        assert not out.exists(), extra
    assert a_file.read_text() == "x"


def test_int8_is_onnx_runtime_on_the_cpu_only(ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--precision int8 is ONNX Runtime static INT8: no TensorRT engine, no GPU or torch device; one line, exit 2,
    before any work (the default precision is the device's: --device cpu-int8 alone means int8)."""
    cases = {
        ("--format", "engine", "--precision", "int8"): "fmt 'engine' with precision int8: TensorRT INT8 is not "
                                                       r"supported by latopt; use fmt 'onnx' .*\(option --format\)$",
        ("--format", "all", "--device", "cpu-int8"): "fmt 'all' with precision int8: TensorRT INT8 is not supported",
        ("--precision", "int8", "--device", "gpu-torch"): r"needs an ONNX Runtime CPU device .*'gpu-torch' \(torch on a GPU\) "
                                                          r"\(option --device\)$",
        ("--precision", "int8", "--device", "titanx"): r"needs an ONNX Runtime CPU device .*'titanx' \(tensorrt on a GPU\)",
    }
    for extra, msg in cases.items():
        out = tmp_path / "o"
        assert main(["export", "-q", "--no-accuracy-gate", "--checkpoint", str(ckpt), "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("latopt: error:") and len(err.splitlines()) == 1 and re.search(msg, err), (extra, err)
        assert not out.exists(), extra


def test_plain_activations_restore_sigma_where_alpha_is_zero() -> None:
    from latopt.rewrite import AlphaActivation, get_alphas, install_alpha, plain_activations_

    torch.manual_seed(0)
    m = build_model(MODEL, num_classes=10).eval()
    params = install_alpha(m)
    with torch.no_grad():
        params[3][0].fill_(0.4)  # one block keeps a real σ_α
    x = torch.randn(2, 3, RES, RES)
    y0 = m(x)
    n = plain_activations_(m)
    assert n > 0 and torch.equal(m(x), y0)
    assert list(get_alphas(m)) == [3]
    assert sum(isinstance(a, AlphaActivation) for a in m.modules()) == 2


def test_export_paper_mode_checks_blocks_away_from_the_border(ckpt: Path, tmp_path: Path) -> None:
    from latopt.export import export
    from latopt.export.options import ShipOptions

    rec = export(ckpt, "cpu", tmp_path / "paper", ship=ShipOptions(fold="all", mode="paper"), checks=UNGATED4,
                 progress=False)
    assert rec.mode == "paper"
    assert [g.name for g in rec.gates][0].startswith("fold algebra per block, away from the border")
    assert all(g.passed for g in rec.gates) and any("paper mode" in n for n in rec.notes)


def test_export_resolution_comes_from_the_checkpoint_record() -> None:
    from latopt.errors import LatoptError
    from latopt.export.shipped import export_resolution
    from latopt.files.checkpoint import read_arch

    unfolded = read_arch({"model": MODEL, "num_classes": 10})
    folded = read_arch({"model": MODEL, "num_classes": 10,
                        "fold": {"mode": "exact", "input_size": [48, 48], "plan": {"1": "full"}}})
    at_32 = CheckpointMeta(resolution=32)
    assert export_resolution(folded, at_32, None) == 48  # an exact fold's own size first
    assert export_resolution(unfolded, at_32, None) == 32
    assert export_resolution(unfolded, at_32, 64) == 64
    # only meta.resolution (latopt.data.data_meta) is read: a "config" record kept in meta is not
    with pytest.raises(LatoptError, match="does not record its input resolution"):
        export_resolution(unfolded, CheckpointMeta(config={"data": {"resolution": 32}}), None)


def test_a_stale_engine_never_outlives_a_new_export_and_out_dot_is_refused_first(
        ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.engine").write_bytes(b"an engine of an earlier export")
    (out / "notes.txt").write_text("the user's")
    assert main(["export", "--no-accuracy-gate", "--checkpoint", str(ckpt), "--no-measure", "--samples", "4", "--out", str(out)]) == 0
    assert not (out / "model.engine").exists() and (out / "notes.txt").read_text() == "the user's"
    assert "model.engine" not in json.loads((out / "export.json").read_text())["files"]
    capsys.readouterr()
    monkeypatch.chdir(tmp_path)
    for where in (".", "..", str(tmp_path)):
        assert main(["export", "--no-accuracy-gate", "--checkpoint", str(ckpt), "--no-measure", "--out", where]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("latopt: error: output directory") and "current directory" in err
        assert "[export] loading" not in err               # refused before any work
