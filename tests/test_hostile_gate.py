"""One rule for export's accuracy gate (issue 29, hostile input): an export whose shipped network the checkpoint's
recorded test accuracy does not describe (another resolution than the one it was measured at, a fold or a plan
applied here without fine-tuning, a resolution the checkpoint does not record) is refused in one line (exit 2,
nothing written) unless the gate is turned off (``--no-accuracy-gate``: ``model.onnx``, recorded as not gated) or a
timing-only artefact is asked for (``--timing-only``: ``model.timing-only.*``, recorded as such). export.json never
says ``accuracy_gate: true`` for an export it did not gate.

Tiny: a MobileNetV2-0.35 with random weights at 16 px, its test accuracy on 96 digits measured here and recorded
(no training); a made-up LUT and a uniform DP plan; nothing asserts a time."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from latopt.cli import main
from latopt.errors import LatoptError
from latopt.files.checkpoint import CheckpointMeta, FoldHow, make_arch, save_checkpoint
from latopt.files.records import Accuracies
from latopt.nets.models import build_model
from tests.test_export_safety import _StandInEngine, stand_in_trt  # noqa: F401  (a fixture, used by name)

MODEL = "mobilenetv2_035"
RES = 16
META = {"task": "digits", "split_seed": 0, "resolution": RES, "max_samples": 96}
TIMING = "model.timing-only.onnx"
CONFIG = f"""
name: hostile
model: {{name: {MODEL}}}
data: {{task: digits, resolution: {RES}, batch_size: 32, max_samples: 96}}
"""


def _lut(path: Path) -> Path:
    """A made-up LUT of the model's blocks on the cpu profile at RES: every variant pays (so --fold auto folds)."""
    from latopt.latency.lut import LUT, BlockEntry, save_lut
    from latopt.latency.timing import TimingStats
    from latopt.nets.blocks import find_blocks

    blocks = []
    for b in find_blocks(build_model(MODEL, 10)):
        ms = {"none": 1.0, "full": 0.6, "pw": 0.2} | ({"drop": 0.0} if b.residual else {})
        blocks.append(BlockEntry(index=b.index, path=b.path, kind=b.kind, input_shape=(1, b.cin, 8, 8), foldable=True,
                                 reason="", raw={v: TimingStats(t, t, t, 0.0, 5) for v, t in ms.items() if v != "drop"},
                                 ms=ms))
    return save_lut(LUT(device="cpu", model=MODEL, resolution=RES, batch=1, blocks=blocks, fixed_ms=3.0,
                        variants=("full", "pw", "drop"), num_classes=10), path)


@pytest.fixture(scope="module")
def ck(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from latopt.config import load_config
    from latopt.dp import plan_only, write_plan
    from latopt.export import checkpoint_task
    from latopt.training.loop import evaluate

    root = tmp_path_factory.mktemp("hostile")
    torch.manual_seed(0)
    model = build_model(MODEL, num_classes=10).eval()
    for mod in model.modules():   # non-trivial BN statistics: the network's accuracy is its own
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.3, 0.3)
            mod.running_var.uniform_(0.5, 1.5)
    task = checkpoint_task(CheckpointMeta(**META), RES)
    acc = evaluate(model, torch.utils.data.DataLoader(task.test, batch_size=256))
    base = save_checkpoint(root / "base.pt", model, make_arch(model, MODEL, 10), CheckpointMeta(**META, test_acc=acc))
    # a fold that folded nothing (exact mode, 16x16): exported as it is, at its own size
    nothing = save_checkpoint(root / "nothing.pt", model,
                              make_arch(model, MODEL, 10, fold=FoldHow("exact", [RES, RES])),
                              CheckpointMeta(**META, acc=Accuracies(finetuned=acc)))
    lut = _lut(root / "lut.json")
    (root / "c.yaml").write_text(CONFIG)
    plan = write_plan(root / "plan.json", plan_only(load_config(root / "c.yaml"), lut, budget=0.55,
                                                      importance="uniform", progress=False))
    return {"root": root, "base": base, "nothing": nothing, "lut": lut, "plan": plan}


def _export(ckpt: Path, out: Path, *extra: str) -> int:
    return main(["export", "--checkpoint", str(ckpt), "--device", "cpu", "--no-measure", "--samples", "4",
                 "--out", str(out), *extra])


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    *progress, err = capsys.readouterr().err.strip().splitlines()
    assert err.startswith("latopt: error:") and all(re.match(r"\[[a-z]+\] ", s) for s in progress), progress + [err]
    return err


def _record(out: Path) -> dict:
    return json.loads((out / "export.json").read_text())


# the ways round the gate: (name, checkpoint key, extra arguments, what the error line names)
UNGATEABLE = [
    ("another resolution", "base", ["--resolution", "8"], "recorded at 16 px"),
    ("another resolution, up", "base", ["--resolution", "40"], "recorded at 16 px"),
    ("a fold that folded nothing, at another size", "nothing", ["--resolution", "24"], "recorded at 16 px"),
    ("--fold all", "base", ["--fold", "all"], "without fine-tuning"),
    ("--fold 1,3", "base", ["--fold", "1,3"], "without fine-tuning"),
    ("--fold auto", "base", ["--fold", "auto", "--lut", "{lut}"], "without fine-tuning"),
    ("--plan", "base", ["--plan", "{plan}"], "without fine-tuning"),
]


def _args(ck: dict, extra: list[str]) -> list[str]:
    return [a.format(lut=ck["lut"], plan=ck["plan"]) for a in extra]


@pytest.mark.parametrize(("name", "which", "extra", "why"), UNGATEABLE, ids=[u[0] for u in UNGATEABLE])
def test_an_export_the_record_does_not_describe_is_refused(ck: dict, tmp_path: Path, name: str, which: str,
                                                           extra: list[str], why: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    assert _export(ck[which], out, *_args(ck, extra)) == 2
    err = _one_error_line(capsys)
    assert why in err and "timing-only" in err and "--no-accuracy-gate" in err, err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".o")]


@pytest.mark.parametrize(("name", "which", "extra", "why"), UNGATEABLE, ids=[u[0] for u in UNGATEABLE])
def test_timing_only_ships_a_file_named_so_and_says_it_was_not_gated(ck: dict, tmp_path: Path, name: str,
                                                                     which: str, extra: list[str], why: str) -> None:
    out = tmp_path / "t"
    assert _export(ck[which], out, *_args(ck, extra), "--timing-only") == 0
    assert (out / TIMING).is_file() and not (out / "model.onnx").exists()
    rec = _record(out)
    assert rec["files"] == [TIMING] and rec["timing_only"] is True and rec["accuracy_gate"] is False
    assert why in rec["accuracy_gate_reason"] and rec["accuracy"]["gated"] is False
    report = (out / "REPORT.md").read_text()
    assert "timing-only" in report.splitlines()[0] and TIMING in report


def test_no_accuracy_gate_ships_model_onnx_recorded_as_not_gated(ck: dict, tmp_path: Path) -> None:
    out = tmp_path / "u"
    assert _export(ck["base"], out, "--resolution", "8", "--no-accuracy-gate") == 0
    rec = _record(out)
    assert rec["files"] == ["model.onnx"] and rec["accuracy_gate"] is False and rec["timing_only"] is False
    assert "recorded at 16 px" in rec["accuracy_gate_reason"] and not rec["accuracy"]["gated"]
    assert "not gated" in (out / "REPORT.md").read_text()


def test_the_gated_path_says_it_was_gated(ck: dict, tmp_path: Path) -> None:
    for which, extra in (("base", []), ("base", ["--resolution", str(RES)]), ("nothing", [])):
        out = tmp_path / f"g-{which}-{len(extra)}"
        assert _export(ck[which], out, *extra) == 0
        rec = _record(out)
        assert rec["accuracy_gate"] is True and rec["timing_only"] is False and rec["accuracy"]["gated"] is True
        assert rec["accuracy_gate_reason"] is None and rec["files"] == ["model.onnx"]
        assert "timing-only" not in (out / "REPORT.md").read_text()


def test_timing_only_of_a_gateable_checkpoint_is_still_named_and_not_gated(ck: dict, tmp_path: Path) -> None:
    out = tmp_path / "t"
    assert _export(ck["base"], out, "--timing-only") == 0
    rec = _record(out)
    assert rec["files"] == [TIMING] and rec["timing_only"] is True and rec["accuracy_gate"] is False
    assert not rec["accuracy"]["gated"]


def test_an_edited_resolution_record_does_not_switch_the_gate_off(ck: dict, tmp_path: Path, edit_checkpoint,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A folded checkpoint is exported at its fold's size: meta.resolution edited (SHA-256 recomputed) used to make
    the accuracy "reported, not gated" while export.json said accuracy_gate true, so scrambled weights shipped."""
    def forge(d: dict) -> None:
        for k, v in d["state_dict"].items():
            if v.is_floating_point() and "running" not in k:
                v.copy_(torch.randn_like(v))
        d["meta"]["resolution"] = 24

    forged = edit_checkpoint(ck["nothing"], tmp_path / "forged.pt", forge)
    assert _export(forged, tmp_path / "o") == 2
    assert "recorded at 24 px" in _one_error_line(capsys) and not (tmp_path / "o").exists()


def test_a_resolution_the_checkpoint_does_not_record_is_refused(ck: dict, tmp_path: Path, edit_checkpoint,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    unsaid = edit_checkpoint(ck["base"], tmp_path / "unsaid.pt", lambda d: d["meta"].pop("resolution"))
    assert _export(unsaid, tmp_path / "o", "--resolution", str(RES)) == 2
    assert "records no resolution" in _one_error_line(capsys) and not (tmp_path / "o").exists()


def test_the_python_api_refuses_too_and_names_the_parameter(ck: dict, tmp_path: Path) -> None:
    from latopt.export import CheckOptions, ShipOptions, export

    with pytest.raises(LatoptError, match="without fine-tuning") as e:
        export(ck["base"], "cpu", tmp_path / "o", ship=ShipOptions(fold="all"), checks=CheckOptions(samples=4, measure=False),
               progress=False)
    assert type(e.value) is LatoptError and e.value.param == "gate_accuracy" and not (tmp_path / "o").exists()
    rec = export(ck["base"], "cpu", tmp_path / "t", ship=ShipOptions(plan=ck["plan"]),
                 checks=CheckOptions(samples=4, measure=False, timing_only=True), progress=False)
    assert rec.files == [TIMING] and rec.timing_only and not rec.accuracy_gate


def test_a_gated_and_a_timing_only_export_never_leave_each_others_files(ck: dict, tmp_path: Path) -> None:
    out = tmp_path / "same"
    assert _export(ck["base"], out, "--plan", str(ck["plan"]), "--timing-only") == 0
    assert _export(ck["base"], out) == 0
    assert sorted(p.name for p in out.iterdir()) == ["REPORT.md", "export.json", "model.onnx"]
    assert _export(ck["base"], out, "--timing-only") == 0
    assert sorted(p.name for p in out.iterdir()) == ["REPORT.md", "export.json", TIMING]


def test_timing_only_int8_is_named_so(ck: dict, tmp_path: Path) -> None:
    out = tmp_path / "q"
    assert _export(ck["base"], out, "--plan", str(ck["plan"]), "--precision", "int8", "--timing-only") == 0
    rec = _record(out)
    assert rec["files"] == [TIMING, "model.timing-only.int8.onnx"] and rec["int8"]["file"] == "model.timing-only.int8.onnx"
    assert not rec["int8"]["gated"] and not rec["accuracy_gate"]
    assert sorted(p.name for p in out.iterdir()) == ["REPORT.md", "export.json", "model.timing-only.int8.onnx", TIMING]


def test_timing_only_engine_is_named_so(ck: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        stand_in_trt) -> None:  # noqa: F811
    export_mod = stand_in_trt

    class Engine(_StandInEngine):   # the stand-in reads the ONNX file beside the engine: here the timing-only one
        def __init__(self, path: Path, *, input_shape, cuda) -> None:  # type: ignore[no-untyped-def]
            from latopt.runtime import OrtRunner

            assert Path(path).name == "model.timing-only.engine" and Path(path).read_bytes() == b"engine"
            self.ort = OrtRunner(Path(path).with_name(TIMING), input_shape=input_shape)

    monkeypatch.setattr(export_mod.engine, "TrtEngineRunner", Engine)
    out = tmp_path / "e"
    rec = export_mod.export(ck["base"], "titanx", out, fmt="all", ship=export_mod.ShipOptions(plan=ck["plan"]),
                            checks=export_mod.CheckOptions(samples=4, measure=False, timing_only=True), progress=False)
    assert rec.files == [TIMING, "model.timing-only.engine"] and not rec.accuracy_gate
    assert sorted(p.name for p in out.iterdir()) == ["REPORT.md", "export.json", "model.timing-only.engine", TIMING]


@pytest.mark.parametrize(("edit", "why"), [(lambda m: m.pop("task"), "it names no task"),
                                           (lambda m: m.pop("test_acc"), "it records no test accuracy")])
def test_a_checkpoint_that_cannot_be_gated_at_all_may_be_timed(ck: dict, tmp_path: Path, edit_checkpoint, edit,
                                                              why: str) -> None:
    ungateable = edit_checkpoint(ck["base"], tmp_path / "u.pt", lambda d: edit(d["meta"]))
    out = tmp_path / "t"
    assert _export(ungateable, out, "--timing-only") == 0
    rec = _record(out)
    assert rec["files"] == [TIMING] and rec["timing_only"] and rec["accuracy_gate"] is False
    assert why in rec["accuracy_gate_reason"]


def test_both_flags_make_a_timing_only_artefact(ck: dict, tmp_path: Path) -> None:
    out = tmp_path / "b"
    assert _export(ck["base"], out, "--fold", "all", "--timing-only", "--no-accuracy-gate") == 0
    rec = _record(out)
    assert rec["files"] == [TIMING] and rec["timing_only"] and rec["accuracy_gate_reason"].startswith("--timing-only")
