"""latopt export never ships a wrong model: a fold that folded nothing is exported as it is, corrupted or
consistent-but-wrong weights are refused (exit 3), exact-mode checkpoints only at their own size, bounded
--samples / --resolution, the "--fold auto" note, and ONNX gate tolerances from the float32 noise floor.

Tiny: MobileNetV2-0.35 at 16 px on 96 digits per split, one epoch per phase; nothing asserts a time."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper
from torch import nn

from latopt.cli import main
from latopt.config import load_config
from latopt.errors import LatoptError, VerificationError
from latopt.export import checkpoint_task, noise_floor, onnx_gate, torch_out
from latopt.files.checkpoint import (
    CheckpointMeta,
    FoldArch,
    load_checkpoint,
    make_arch,
    recorded_test_acc,
    save_checkpoint,
)
from latopt.files.records import Accuracies
from latopt.latency.onnx_io import export_onnx
from latopt.layerfold import run_fold
from latopt.nets.models import build_model
from latopt.training.base_training import train_base
from latopt.training.loop import evaluate

MODEL = "mobilenetv2_035"
RES = 16
CONFIG = f"""
name: safety
model: {{name: {MODEL}}}
data: {{task: digits, resolution: {RES}, batch_size: 32, max_samples: 96}}
train: {{epochs: 1, optimizer: adamw, lr: 0.01}}
fold: {{epochs: 1, post_epochs: 1, lambda_c: 1.0, alpha_lr: 0.01, lr: 0.001, post_lr: 0.001}}
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("safety")
    (root / "c.yaml").write_text(CONFIG)
    cfg = load_config(root / "c.yaml")
    train_base(cfg, root / "base", progress=False, seed=0)
    base = root / "base" / "base.pt"
    # λ_c = 0 and τ = 1 with a slow α: nothing can be folded
    nothing = run_fold(cfg.with_overrides({"fold.lambda_c": 0.0, "fold.tau": 1.0, "fold.p": 2.0}), base,
                       root / "nothing", progress=False, seed=0)
    assert nothing.report.n_folded == 0
    some = run_fold(cfg.with_overrides({"fold.alpha_lr": 0.3, "fold.lambda_c": 5.0, "fold.tau": 0.6, "fold.p": 2.0}),
                    base, root / "some", progress=False, seed=0)
    assert some.report.n_folded >= 1
    return {"root": root, "base": base, "nothing": root / "nothing" / "folded.pt", "some": root / "some" / "folded.pt"}


def _export(ckpt: Path, out: Path, *extra: str) -> int:
    return main(["export", "--checkpoint", str(ckpt), "--device", "cpu", "--no-measure", "--samples", "4",
                 "--out", str(out), *extra])


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line, after nothing but progress lines (``[export] ...``): no traceback."""
    *progress, err = capsys.readouterr().err.strip().splitlines()
    assert err.startswith("latopt: error:") and all(re.match(r"\[[a-z]+\] ", s) for s in progress), progress + [err]
    return err


# ----------------------------------------------------------------------------- item 1: as it is, never all-folded
def test_a_fold_that_folded_nothing_is_exported_as_it_is(runs: dict, tmp_path: Path,
                                                         check_fold_structure) -> None:
    _, arch, meta = load_checkpoint(runs["nothing"])
    assert arch.fold == FoldArch(mode="exact", input_size=[RES, RES], plan={})  # folded, with nothing folded
    out = tmp_path / "nothing"
    assert _export(runs["nothing"], out) == 0  # no --fold, as `latopt run` exports its recommended trial
    rec = json.loads((out / "export.json").read_text())
    assert rec["folded"] == {}
    check_fold_structure(out / "model.onnx", MODEL, 10, {})
    acc = rec["accuracy"]
    recorded, where = recorded_test_acc(meta)
    assert where == "meta.acc.finetuned" and acc["recorded"] == recorded and acc["gated"]
    assert abs(acc["test_acc"] - recorded) <= 1 / acc["samples"]
    assert any("folded no block" in n for n in rec["notes"])


def test_an_unfolded_checkpoint_without_fold_is_exported_as_it_is(runs: dict, tmp_path: Path,
                                                                  check_fold_structure) -> None:
    out = tmp_path / "base"
    assert _export(runs["base"], out) == 0
    rec = json.loads((out / "export.json").read_text())
    assert rec["folded"] == {}
    check_fold_structure(out / "model.onnx", MODEL, 10, {})
    assert rec["accuracy"]["recorded_at"] == "meta.test_acc" and rec["accuracy"]["gated"]
    assert any("no --fold" in n for n in rec["notes"])
    # folding is explicit: --fold all folds, without fine-tuning, so the recorded accuracy is not the shipped
    # network's: refused, unless as a timing-only artefact, whose accuracy is reported beside the recorded one
    assert _export(runs["base"], tmp_path / "all", "--fold", "all") == 2 and not (tmp_path / "all").exists()
    assert _export(runs["base"], tmp_path / "all", "--fold", "all", "--timing-only") == 0
    rec = json.loads((tmp_path / "all" / "export.json").read_text())
    assert rec["folded"] == {str(i): "full" for i in range(17)}      # every block of MobileNetV2 folds
    check_fold_structure(tmp_path / "all" / "model.timing-only.onnx", MODEL, 10, rec["folded"])
    assert rec["accuracy"]["recorded"] is not None and not rec["accuracy"]["gated"] and not rec["accuracy_gate"]


# ----------------------------------------------------------------------------- item 2: corrupted weights
def test_consistent_but_wrong_weights_fail_the_accuracy_gate(runs: dict, tmp_path: Path, edit_checkpoint,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    _, _, meta = load_checkpoint(runs["some"])
    recorded, _ = recorded_test_acc(meta)
    task = checkpoint_task(meta, RES)
    loader = torch.utils.data.DataLoader(task.test, batch_size=256)
    data = torch.load(runs["some"], weights_only=True)
    convs = [k for k, v in data["state_dict"].items() if k.endswith("weight") and v.dim() == 4]
    bad = None
    for i, name in enumerate(reversed(convs)):  # one conv weight randomised; the first that moves the accuracy
        g = torch.Generator().manual_seed(i)

        def scramble(d: dict, name: str = name, g: torch.Generator = g) -> None:
            w = d["state_dict"][name]
            w.copy_(torch.randn(w.shape, generator=g) * 3 * float(w.std()))

        path = edit_checkpoint(runs["some"], tmp_path / f"bad{i}.pt", scramble)
        if abs(evaluate(load_checkpoint(path)[0], loader) - recorded) > 1 / len(task.test):
            bad = path
            break
    assert bad is not None, "no single randomised conv weight changed the test accuracy"
    out = tmp_path / "out"
    assert _export(bad, out) == 3  # every numeric gate passes: the file is consistent, only the accuracy shows it
    err = _one_error_line(capsys)
    assert "accuracy gate failed" in err and "nothing written" in err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]
    # the same randomisation without recomputing the digest: refused on load
    corrupted = edit_checkpoint(bad, tmp_path / "corrupted.pt", lambda d: d["state_dict"][convs[0]].mul_(2),
                                digest=False)
    assert _export(corrupted, out) == 3
    assert "SHA-256" in _one_error_line(capsys) and not out.exists()


def test_the_untampered_folded_checkpoint_passes_every_gate(runs: dict, tmp_path: Path,
                                                           check_fold_structure) -> None:
    assert _export(runs["some"], tmp_path / "ok") == 0
    rec = json.loads((tmp_path / "ok" / "export.json").read_text())
    _, arch, _ = load_checkpoint(runs["some"])
    assert arch.fold is not None and rec["folded"] == arch.fold.plan != {}               # the checkpoint's own plan, shipped
    check_fold_structure(tmp_path / "ok" / "model.onnx", MODEL, 10, rec["folded"])
    assert all(g["passed"] for g in rec["gates"]) and rec["accuracy"]["gated"]
    onnx_gate_rec = next(g for g in rec["gates"] if g["name"].startswith("ONNX Runtime"))
    assert onnx_gate_rec["floor"] is not None and onnx_gate_rec["tol"] >= 1e-4
    report = (tmp_path / "ok" / "REPORT.md").read_text()
    assert "float32 noise floor" in report and "meta.acc.finetuned" in report


# ----------------------------------------------------------------------------- item 3: bad sizes, bad counts
def test_exact_checkpoint_at_another_resolution_is_refused_first(runs: dict, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    assert _export(runs["some"], out, "--resolution", str(RES + 8)) == 2
    err = _one_error_line(capsys)
    assert f"exact mode for {RES}x{RES}" in err and "paper mode" in err and "fold again" in err
    assert not out.exists()
    # nothing folded: no bias map, any size is fine (its accuracy was recorded at RES: not gated, said so)
    assert _export(runs["nothing"], out, "--resolution", str(RES + 8), "--no-accuracy-gate") == 0
    assert json.loads((out / "export.json").read_text())["accuracy_gate"] is False


@pytest.mark.parametrize("args,what", [
    (["--samples", "0"], "--samples"), (["--samples", "-3"], "--samples"), (["--samples", "100000"], "--samples"),
    (["--resolution", "100000"], "resolution 100000 is too large; use 8 .. 1024 (e.g. 224) (option --resolution)"), (["--resolution", "4"], "too small"),
    (["--resolution", "0"], "too small"),
])
def test_export_counts_and_sizes_are_bounded(runs: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             args: list[str], what: str) -> None:
    out = tmp_path / "o"
    assert main(["export", "--checkpoint", str(runs["base"]), "--no-measure", "--out", str(out), *args]) == 2
    assert what in _one_error_line(capsys) and not out.exists()


@pytest.mark.parametrize("meta,what", [
    ({"split_seed": "x"}, "'split_seed'"), ({"max_samples": 0}, "'max_samples'"), ({"task": 7}, "'task'"),
    ({"resolution": "abc"}, "'resolution'"), ({"resolution": 100000}, "'resolution'"), ({"test_acc": "high"}, "'test_acc'"),
    ({"acc": {"finetuned": 2}}, "'acc.finetuned'"), ({"plan": {"01": "full"}}, "'plan'"),
])
def test_hand_edited_meta_is_one_line_exit_2(runs: dict, tmp_path: Path, edit_checkpoint,
                                            capsys: pytest.CaptureFixture[str], meta: dict, what: str) -> None:
    path = edit_checkpoint(runs["base"], tmp_path / "edited.pt", lambda d: d["meta"].update(meta))
    assert _export(path, tmp_path / "o") == 2   # the record is read in one place: each field named, exit 2
    line = _one_error_line(capsys)
    assert "meta field" in line and what in line and not (tmp_path / "o").exists()


def test_inspect_and_profile_resolution_bounds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", MODEL, "--resolution", "100000"]) == 2
    assert "too large" in _one_error_line(capsys)
    assert main(["profile", "--device", "cpu", "--model", MODEL, "--resolution", "100000",
                 "--out", str(tmp_path / "lut.json")]) == 2
    assert "too large" in _one_error_line(capsys) and not (tmp_path / "lut.json").exists()


# ----------------------------------------------------------------------------- item 5: the --fold auto note
def test_fold_auto_that_folds_nothing_says_why(runs: dict, tmp_path: Path) -> None:
    from latopt.latency.lut import LUT, BlockEntry, save_lut
    from latopt.nets.blocks import find_blocks

    blocks = find_blocks(build_model(MODEL, 10))
    entries = [BlockEntry(index=b.index, path=b.path, kind=b.kind, input_shape=(1, b.cin, 8, 8),
                          foldable=b.foldable, reason=b.reason, raw={},
                          ms={"none": 1.0, "full": 1.5}) for b in blocks]  # no fold pays on this "device"
    lut = save_lut(LUT(device="cpu", model=MODEL, resolution=RES, batch=1, blocks=entries, fixed_ms=0.25),
                   tmp_path / "lut.json")
    assert _export(runs["base"], tmp_path / "o", "--fold", "auto", "--lut", str(lut)) == 0
    notes = json.loads((tmp_path / "o" / "export.json").read_text())["notes"]
    assert any(n.startswith("--fold auto:") and "exported as it is" in n for n in notes), notes
    assert not any("--fold none" in n for n in notes)


# ----------------------------------------------------------------------------- item 6: the float32 noise floor
class Cancelling(nn.Module):
    """y = head(mean(V * x)) computed as (s·W * x) + (V − s·W) * x: the large terms cancel, their float32
    rounding stays, so float32 itself is ~s × 1e-7 away from float64 (ONNX Runtime no less exact)."""

    def __init__(self, s: float = 1e4, c: int = 8, k: int = 10) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        w, v = torch.randn(c, 3, 3, 3, generator=g), torch.randn(c, 3, 3, 3, generator=g)
        self.conv = nn.Conv2d(3, 2 * c, 3, padding=1, bias=False)
        self.mix = nn.Conv2d(2 * c, c, 1, bias=False)
        self.head = nn.Linear(c, k)
        with torch.no_grad():
            self.conv.weight.copy_(torch.cat([s * w, v - s * w]))
            self.mix.weight.copy_(torch.cat([torch.eye(c), torch.eye(c)], 1)[:, :, None, None])
            self.head.weight.copy_(torch.randn(k, c, generator=g))
            self.head.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.mix(self.conv(x)).mean((2, 3)))


def test_onnx_gate_tolerance_follows_the_noise_floor(tmp_path: Path) -> None:
    from latopt.export import NOISE_K, TOL_ONNX

    net = Cancelling().eval()
    x = torch.randn(8, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    floor = noise_floor(net, x)
    assert floor > TOL_ONNX  # float32 alone is further from float64 than the base tolerance
    path = export_onnx(net, (1, 3, 16, 16), tmp_path / "net.onnx", dynamic_batch=True)
    gate, _ = onnx_gate(net, path, x, "random normal")
    assert gate.rel > TOL_ONNX, "ONNX Runtime differs from PyTorch by more than 1e-4 here (the old gate refused it)"
    assert gate.passed and gate.floor == floor and gate.tol == pytest.approx(NOISE_K * floor)
    assert "noise floor" in gate.line()
    # a corrupted ONNX (one weight changed) still fails
    m = onnx.load(str(path))
    init = next(i for i in m.graph.initializer if tuple(numpy_helper.to_array(i).shape) == (10, 8))
    w = numpy_helper.to_array(init).copy()
    w[0, 0] += 0.5
    init.CopyFrom(numpy_helper.from_array(w, init.name))
    onnx.save(m, str(tmp_path / "bad.onnx"))
    bad, _ = onnx_gate(net, tmp_path / "bad.onnx", x, "random normal")
    assert not bad.passed and bad.rel > bad.tol


def test_noise_floor_of_an_ordinary_network_keeps_the_base_tolerance(tmp_path: Path) -> None:
    net = build_model(MODEL, 10).eval()
    x = torch.randn(2, 3, RES, RES)
    floor = noise_floor(net, x)
    assert 0 <= floor < 1e-5
    path = export_onnx(net, (1, 3, RES, RES), tmp_path / "m.onnx", dynamic_batch=True)
    gate, ort = onnx_gate(copy.deepcopy(net), path, x, "random normal")
    assert gate.passed and gate.tol == 1e-4 and np.isfinite(ort).all()


def _deep_cancelling(s: float = 300.0, depth: int = 12) -> nn.Module:
    """A correct deep network whose float32 noise floor is above 2.5e-6: ``depth`` seeded 3x3 convolutions with
    ReLU6, then :class:`Cancelling` (its large terms cancel, as a deep folded network's bias maps can)."""
    g = torch.Generator().manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        conv = nn.Conv2d(3, 3, 3, padding=1)
        with torch.no_grad():
            conv.weight.copy_(torch.randn(3, 3, 3, 3, generator=g) / 27 ** 0.5)
            conv.bias.copy_(0.1 * torch.randn(3, generator=g))
        layers += [conv, nn.ReLU6()]
    return nn.Sequential(*layers, Cancelling(s)).eval()


def test_fp16_engine_gate_scales_the_noise_floor_by_fp16_roundoff() -> None:
    """fp16's unit roundoff is 2^13 times float32's, so a correct fp16 engine is about 2^13 × the float32 noise
    floor away from ONNX Runtime: above a floor of ~2.5e-6 that exceeds the fixed 2e-2 (and 8 × the floor), which
    refused it. The gate scales the floor by 2^13; a wrong network still fails."""
    from latopt.export.gates import NOISE_K, ROUNDOFF_VS_FP32, TOL_ENGINE, compare_outputs, engine_gate

    net = _deep_cancelling()
    x = torch.randn(8, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    floor = noise_floor(net, x)
    assert floor > TOL_ENGINE["fp16"] / 2 ** 13   # ~2.5e-6
    ref = torch_out(net, x)   # stands for ONNX Runtime's float32 outputs
    noise = np.random.default_rng(0).uniform(-1.0, 1.0, ref.shape)
    fp16_like = ref + 2 ** 13 * floor * np.abs(ref).max() * noise / np.abs(noise).max()   # synthetic fp16 error
    with torch.no_grad():
        fp16_cpu = copy.deepcopy(net).half()(x.half()).double().numpy()   # the network run in fp16 here
    for out in (fp16_like, fp16_cpu):
        assert not compare_outputs("TensorRT (fp16) vs ONNX Runtime", out, ref, TOL_ENGINE["fp16"], "random normal",
                                   floor).passed   # the tolerance before: max(2e-2, 8 × the floor)
        gate = engine_gate("fp16", out, ref, "random normal", floor)
        assert gate.passed and gate.rel > TOL_ENGINE["fp16"]
    assert ROUNDOFF_VS_FP32["fp16"] == 2 ** 13 and gate.tol == pytest.approx(NOISE_K * 2 ** 13 * floor)
    assert "× 8192 (unit roundoff vs float32)" in gate.line()
    wrong = copy.deepcopy(net)
    with torch.no_grad():
        wrong[-1].head.weight.mul_(-1)   # wrong weights, with the same fp16 rounding on top
    bad = engine_gate("fp16", torch_out(wrong, x) + (fp16_like - ref), ref, "random normal", floor)
    assert not bad.passed
    fp32 = engine_gate("fp32", fp16_like, ref, "random normal", floor)   # fp32 engines: unchanged
    assert fp32.tol == max(TOL_ENGINE["fp32"], NOISE_K * floor) and not fp32.passed


def test_recorded_accuracy_where_each_checkpoint_keeps_it(tmp_path: Path, edit_checkpoint) -> None:
    assert recorded_test_acc(CheckpointMeta(test_acc=0.5)) == (0.5, "meta.test_acc")
    fold_meta = CheckpointMeta(test_acc=0.4, acc=Accuracies(base=0.4, finetuned=0.6))
    assert recorded_test_acc(fold_meta) == (0.6, "meta.acc.finetuned")
    assert recorded_test_acc(CheckpointMeta(plan={})) is None
    m = build_model(MODEL, 10)
    path = save_checkpoint(tmp_path / "x.pt", m, make_arch(m, MODEL, 10), CheckpointMeta(test_acc=0.5))
    # an edited file, its digest recomputed: refused when it is read
    edit_checkpoint(path, path, lambda d: d["meta"].update(test_acc="high"))
    with pytest.raises(LatoptError, match="test_acc") as e:
        load_checkpoint(path)
    assert "meta field" in str(e.value) and "a number" in str(e.value)


# ----------------------------------------------------------------------------- the engine branch, without a GPU
class _StandInEngine:
    """Stands in for latopt.runtime.TrtEngineRunner: runs the model.onnx written beside the "engine" with
    ONNX Runtime (``shift`` adds a wrong offset to one class). Tests export's control flow only — no
    figure from it is a TensorRT result (test_tensorrt.py runs the real thing on a GPU)."""

    shift = 0.0

    def __init__(self, path: Path, *, input_shape, cuda) -> None:
        from latopt.runtime import OrtRunner

        assert Path(path).read_bytes() == b"engine" and cuda == "cuda-of-the-backend"
        self.ort = OrtRunner(Path(path).with_name("model.onnx"), input_shape=input_shape)

    def run(self, x: np.ndarray) -> np.ndarray:
        out = self.ort.run(x).copy()
        out[:, 0] += self.shift
        return out

    def __enter__(self) -> _StandInEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.ort.close()


class _StandInRunner:
    """A timed stand-in: ``time_ms`` is its "device timer" (compare() uses it), ``()`` an untimed call."""

    def __init__(self, ms: float) -> None:
        self.ms = ms

    def __call__(self) -> None:
        pass

    def time_ms(self) -> float:
        return self.ms

    def close(self) -> None:
        pass


class _StandInTrtBackend:
    """Stands in for the TensorRT backend export opens (latopt.export.engine.get_backend): ``build`` returns
    the "engine" bytes the stand-in runner expects, ``prepare`` hands out timed stand-ins (the as-is network
    2 ms, the folded one 1 ms). Records what export asks of it; no figure from it is a TensorRT result."""

    opened: list[_StandInTrtBackend] = []
    name = "tensorrt"
    cuda = "cuda-of-the-backend"

    def __init__(self, profile) -> None:  # type: ignore[no-untyped-def]
        self.profile, self.precision, self.closed, self.built, self.prepared = profile, profile.precision, 0, [], []
        self.timed: list = []   # what prepare() was given: a module, or a file with its bytes at that moment
        _StandInTrtBackend.opened.append(self)

    def build(self, onnx_path, input_shape) -> bytes:  # type: ignore[no-untyped-def]
        assert Path(onnx_path).is_file()
        self.built.append(tuple(input_shape))
        return b"engine"

    def prepare(self, model, input_shape):  # type: ignore[no-untyped-def]
        self.prepared.append(tuple(input_shape))
        self.timed.append((Path(model).name, Path(model).read_bytes()) if isinstance(model, (str, Path)) else model)
        return _StandInRunner(2.0 if len(self.prepared) == 1 else 1.0)

    def environment(self) -> dict:
        return {}

    def close(self) -> None:
        self.closed += 1


@pytest.fixture
def stand_in_trt(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    import latopt.export as export_mod

    _StandInTrtBackend.opened = []
    monkeypatch.setattr(export_mod.engine, "get_backend", _StandInTrtBackend)
    return export_mod


@pytest.mark.parametrize("shift", [0.0, 100.0])
def test_engine_branch_gates_and_accuracy(runs: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          stand_in_trt, shift: float) -> None:
    """--format all on a TensorRT device: the engine is built by the one backend export opened (no second
    backend / CUDA context), run by the shipped runner, gated, and that backend is closed on success and on
    failure."""
    export_mod = stand_in_trt
    monkeypatch.setattr(export_mod.engine, "TrtEngineRunner", type("E", (_StandInEngine,), {"shift": shift}))
    out = tmp_path / "engine"
    if shift:
        with pytest.raises(VerificationError, match="TensorRT .* FAILED"):
            export_mod.export(runs["some"], "titanx", out, fmt="all", checks=export_mod.CheckOptions(samples=4, measure=False),
                              progress=False)
        assert not out.exists()
        (backend,) = _StandInTrtBackend.opened
        assert backend.closed == 1
        return
    rec = export_mod.export(runs["some"], "titanx", out, fmt="all", checks=export_mod.CheckOptions(samples=4, measure=False),
                              progress=False)
    (backend,) = _StandInTrtBackend.opened
    assert backend.closed == 1 and backend.built == [(1, 3, RES, RES)]
    assert rec.files == ["model.onnx", "model.engine"] and (out / "model.engine").read_bytes() == b"engine"
    assert not (out / ".static.onnx").exists()
    engine_gate = next(g for g in rec.gates if g.name.startswith("TensorRT"))
    assert engine_gate.passed and engine_gate.floor is not None
    acc = rec.accuracy
    assert acc.gated and acc.engine_test_acc == acc.test_acc
    assert f"engine {acc.engine_test_acc:.4f}" in (out / "REPORT.md").read_text()


def test_export_measures_at_the_requested_precision_with_its_one_backend(runs: dict, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        stand_in_trt) -> None:
    """--precision fp16 on the fp32 titanx profile: the engine is built and both networks are timed at fp16
    (not at the profile's fp32), by the same backend, closed once at the end."""
    export_mod = stand_in_trt
    monkeypatch.setattr(export_mod.engine, "TrtEngineRunner", _StandInEngine)
    out = tmp_path / "fp16"
    rec = export_mod.export(runs["some"], "titanx", out, fmt="all", precision="fp16",
                            checks=export_mod.CheckOptions(samples=4), progress=False)
    (backend,) = _StandInTrtBackend.opened
    assert backend.profile.name == "titanx" and backend.profile.precision == "fp16" and backend.precision == "fp16"
    assert backend.prepared == [(1, 3, RES, RES)] * 2 and backend.closed == 1
    lat = rec.latency
    assert lat.precision == "fp16" and lat.speedup == pytest.approx(2.0) and rec.precision == "fp16"
    report = (out / "REPORT.md").read_text()
    assert "## Latency (fp16, measured end to end" in report
    engine_gate = next(g for g in rec.gates if g.name == "TensorRT (fp16) vs ONNX Runtime")
    assert engine_gate.roundoff == 2 ** 13 and "the fp16 engine's floor is scaled by 2^13" in report


def test_export_times_the_shipped_engine_file(runs: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              stand_in_trt) -> None:
    """--format engine: the folded network timed is the shipped model.engine file itself (the backend loads it:
    no second engine is built for the measurement, whose kernels TensorRT could pick differently), at the
    engine's static batch 1, with the as-is network at the same shape, even on a profile of batch 4 (noted)."""
    export_mod = stand_in_trt
    monkeypatch.setattr(export_mod.engine, "TrtEngineRunner", _StandInEngine)
    profile = tmp_path / "trt-b4.yaml"
    profile.write_text("name: trt-b4\nbackend: tensorrt\nprecision: fp32\nbatch: 4\n")
    out = tmp_path / "engine-b4"
    rec = export_mod.export(runs["some"], str(profile), out, fmt="engine", checks=export_mod.CheckOptions(samples=4),
                            progress=False)
    (backend,) = _StandInTrtBackend.opened
    assert backend.built == [(1, 3, RES, RES)]   # one engine: the shipped one
    asis, folded = backend.timed
    assert isinstance(asis, nn.Module) and folded == ("model.engine", b"engine")
    assert backend.prepared == [(1, 3, RES, RES)] * 2
    lat = rec.latency
    assert lat.folded_file == "model.engine" and lat.batch == 1
    assert any(n.startswith("latency measured at batch 1, the shipped engine's") for n in rec.notes)
    assert "folded: the shipped `model.engine`" in (out / "REPORT.md").read_text()


def test_export_precision_the_device_cannot_time_fails_first(runs: dict, tmp_path: Path) -> None:
    """ONNX Runtime times fp32 and int8, not fp16: --precision fp16 on the cpu profile fails before any work (it
    used to be measured at fp32 and reported as fp16)."""
    from latopt.export import CheckOptions, export

    out = tmp_path / "x"
    with pytest.raises(LatoptError, match=r"onnxruntime .*not fp16") as e:
        export(runs["some"], "cpu", out, precision="fp16", checks=CheckOptions(samples=4), progress=False)
    assert "\n" not in str(e.value) and not out.exists()


# ------------------------------------------------------- --precision int8: ONNX Runtime static INT8
def _qdq_nodes(path: Path) -> int:
    return sum(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in onnx.load(str(path)).graph.node)


def test_export_int8_ships_a_gated_int8_model_and_times_that_file(runs: dict, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   fast_cpu_device: str) -> None:
    """--precision int8 on a cpu profile: model.onnx as at fp32, plus model.int8.onnx (QDQ) calibrated on the
    task's training images, its accuracy gated against the ONNX file's; the folded network timed is the
    shipped model.int8.onnx itself, byte for byte, and the as-is one is quantised by the backend."""
    import latopt.export.export_report as report_mod
    from latopt.export import ACC_TOL_INT8, CheckOptions, export
    from latopt.latency.quantize import is_quantized

    timed: dict[str, object] = {}
    real_measure = report_mod.measure_networks

    def spy(nets, device, shape, *, backend=None, progress=False):  # type: ignore[no-untyped-def]
        timed.update(precision=device.precision, backend=backend.precision, folded=nets["folded"],
                     quantized=is_quantized(nets["folded"]), folded_bytes=Path(nets["folded"]).read_bytes(),
                     asis=nets["as-is"])
        return real_measure(nets, device, shape, backend=backend, progress=progress)

    monkeypatch.setattr(report_mod, "measure_networks", spy)
    out = tmp_path / "int8"
    rec = export(runs["base"], fast_cpu_device, out, precision="int8", checks=CheckOptions(samples=4), progress=False)
    assert rec.precision == "int8" and rec.files == ["model.onnx", "model.int8.onnx"]
    assert _qdq_nodes(out / "model.int8.onnx") > 0 and _qdq_nodes(out / "model.onnx") == 0
    q, acc = rec.int8, rec.accuracy
    assert q.file == "model.int8.onnx" and q.gated and acc.gated
    assert q.onnx_test_acc == acc.test_acc and 0.0 <= q.test_acc <= 1.0
    assert q.tolerance == pytest.approx(ACC_TOL_INT8 + 1 / acc.samples) and q.samples == acc.samples
    assert q.onnx_test_acc - q.test_acc <= q.tolerance
    assert q.calibration.count == 96 and "training images of digits" in q.calibration.source
    assert (q.quantization.format, q.quantization.per_channel) == ("QDQ", True)
    assert timed["precision"] == timed["backend"] == "int8" and rec.latency.precision == "int8"
    assert Path(timed["folded"]).name == "model.int8.onnx" and timed["quantized"]
    assert timed["folded_bytes"] == (out / "model.int8.onnx").read_bytes()
    assert isinstance(timed["asis"], nn.Module) and rec.latency.folded_file == "model.int8.onnx"
    report = (out / "REPORT.md").read_text()
    assert "## INT8" in report and f"INT8 {q.test_acc:.4f}, ONNX fp32 {q.onnx_test_acc:.4f}" in report
    assert "## Latency (int8, measured end to end in one interleaved run; folded: the shipped `model.int8.onnx`)" in report
    # an fp32 export into the same --out removes the stale INT8 file
    assert _export(runs["base"], out) == 0 and not (out / "model.int8.onnx").exists()


def test_a_failed_int8_gate_writes_nothing(runs: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import latopt.export as export_mod
    from latopt.runtime import OrtRunner

    class Runner(OrtRunner):   # remembers which file it runs
        def __init__(self, model, **kw) -> None:  # type: ignore[no-untyped-def]
            super().__init__(model, **kw)
            self.path = Path(model)

    real = export_mod.runner_accuracy

    def accuracy(runner, task, batch):  # type: ignore[no-untyped-def]
        acc = real(runner, task, batch)   # the INT8 model made far less accurate than it is: no item right
        return 0.0 if runner.path.name == "model.int8.onnx" else acc

    monkeypatch.setattr(export_mod, "OrtRunner", Runner)
    monkeypatch.setattr(export_mod, "runner_accuracy", accuracy)
    out = tmp_path / "bad"
    with pytest.raises(VerificationError, match=r"INT8 accuracy gate failed.*0\.01.*1/96") as e:
        export_mod.export(runs["base"], "cpu", out, precision="int8",
                          checks=export_mod.CheckOptions(samples=4, measure=False), progress=False)
    assert "\n" not in str(e.value)
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".bad")]


def test_int8_without_the_accuracy_gate_is_reported_not_gated(runs: dict, tmp_path: Path) -> None:
    out = tmp_path / "ungated"
    assert _export(runs["base"], out, "--precision", "int8", "--no-accuracy-gate") == 0
    rec = json.loads((out / "export.json").read_text())
    assert not rec["int8"]["gated"] and rec["int8"]["test_acc"] is not None and not rec["accuracy_gate"]
    assert any("INT8 accuracy is reported beside the fp32 ONNX one, not gated" in n for n in rec["notes"])
    assert "not gated (`--no-accuracy-gate`)" in (out / "REPORT.md").read_text()


# ------------------------------------------------------- non-finite weights never ship
@pytest.mark.parametrize(("what", "edit"), [
    ("Inf weight", lambda sd: sd["conv_stem.weight"].view(-1)[0].fill_(float("inf"))),
    ("NaN weight", lambda sd: sd["classifier.weight"].view(-1)[3].fill_(float("nan"))),
    ("negative BN variance", lambda sd: sd["bn1.running_var"].view(-1)[0].fill_(-1.0)),
])
def test_a_checkpoint_with_invalid_values_is_refused_everywhere(tmp_path: Path, edit_checkpoint, what: str, edit,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    model = build_model(MODEL, 10)
    good = save_checkpoint(tmp_path / "good.pt", model, make_arch(model, MODEL, 10),
                           CheckpointMeta(task="digits", resolution=RES, max_samples=96))
    bad = edit_checkpoint(good, tmp_path / "bad.pt", lambda d: edit(d["state_dict"]))   # SHA-256 recomputed
    with pytest.raises(LatoptError, match=r"non-finite|negative batch-norm"):
        load_checkpoint(bad)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    for argv in (["export", "--checkpoint", str(bad), "--no-measure", "--out", str(tmp_path / "e")],
                 ["train", "--config", str(cfg), "--checkpoint", str(bad), "--epochs", "0", "--out", str(tmp_path / "t")]):
        assert main(argv) == 2, (what, argv[0])
        err = [ln for ln in capsys.readouterr().err.splitlines() if not ln.startswith("[")]   # not progress
        assert len(err) == 1 and err[0].startswith("latopt: error: checkpoint") and "bad.pt" in err[0], err
        assert "learning rate" not in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.pt", "c.yaml", "good.pt"]


def test_a_model_with_invalid_values_is_never_written(tmp_path: Path) -> None:
    model = build_model(MODEL, 10)
    with torch.no_grad():
        model.bn1.running_var[0] = -1.0
    with pytest.raises(LatoptError, match=r"negative batch-norm.*'bn1'"):
        save_checkpoint(tmp_path / "m.pt", model, make_arch(model, MODEL, 10))
    assert list(tmp_path.iterdir()) == []


def test_a_gate_against_non_finite_outputs_never_passes() -> None:
    from latopt.export.gates import compare_outputs

    ref = np.array([[np.nan, 1.0]])
    assert not compare_outputs("self", ref.copy(), ref, 1e-3, "zero").passed
    assert compare_outputs("fine", np.array([[1.0, 2.0]]), np.array([[1.0, 2.0]]), 1e-3, "x").passed


# ------------------------------------------------ the accuracy gate cannot be edited away
@pytest.mark.parametrize(("edit", "why"), [
    (lambda m: m.update(max_samples=1), "its test split has 1 sample(s)"),
    (lambda m: m.pop("task"), "it names no task"),
    (lambda m: m.pop("test_acc"), "it records no test accuracy"),
])
def test_metadata_edited_to_skip_the_accuracy_gate_is_refused(runs: dict, tmp_path: Path, edit_checkpoint, edit,
                                                                why: str, capsys: pytest.CaptureFixture[str]) -> None:
    def scramble(d: dict) -> None:              # random weights, then the metadata that would hide them
        # small random weights: a network no better than chance whose activations stay near 1, so that the
        # numeric gates (ONNX Runtime against PyTorch) pass on every CPU; N(0, 1) weights made outputs of ~300,
        # where the two runtimes' float32 kernels differed beyond the gate on a CPU without AVX-512
        g = torch.Generator().manual_seed(0)
        for k, v in d["state_dict"].items():
            if v.is_floating_point() and "running" not in k:
                v.copy_(0.1 * torch.randn(v.shape, generator=g, dtype=v.dtype))
        edit(d["meta"])

    forged = edit_checkpoint(runs["base"], tmp_path / "forged.pt", scramble)      # SHA-256 recomputed
    assert _export(forged, tmp_path / "out") == 2
    err = _one_error_line(capsys)
    assert why in err and "--no-accuracy-gate" in err and not (tmp_path / "out").exists()
    assert _export(forged, tmp_path / "out", "--no-accuracy-gate") == 0       # explicit, and recorded
    rec = json.loads((tmp_path / "out" / "export.json").read_text())
    assert rec["accuracy_gate"] is False and any("--no-accuracy-gate" in n and why in n for n in rec["notes"])
    assert "--no-accuracy-gate" in (tmp_path / "out" / "REPORT.md").read_text()


def test_a_copied_fold_is_checked_against_its_own_prefold(runs: dict, tmp_path: Path) -> None:
    # cp -r A B, then a re-fold into A: exporting B/folded.pt must check against B's pre-fold (the digest it
    # records), not the path it records (A's, now another fold's)
    import shutil

    cfg = load_config(runs["root"] / "c.yaml").with_overrides({"fold.alpha_lr": 0.3, "fold.lambda_c": 5.0,
                                                               "fold.tau": 0.6, "fold.p": 2.0})
    a, b = tmp_path / "A", tmp_path / "B"
    run_fold(cfg, runs["base"], a, progress=False, seed=0)
    shutil.copytree(a, b)
    run_fold(cfg, runs["base"], a, progress=False, seed=1)   # another σ_α network
    assert _export(b / "folded.pt", tmp_path / "out") == 0
    rec = json.loads((tmp_path / "out" / "export.json").read_text())
    assert any(f"({b / 'prefold.pt'})" in n for n in rec["notes"]), rec["notes"]
    assert any(g["name"].startswith("fold") for g in rec["gates"])
    (b / "prefold.pt").unlink()                    # only A's, which is not this fold's: gates skipped, said so
    assert _export(b / "folded.pt", tmp_path / "out2") == 0
    rec = json.loads((tmp_path / "out2" / "export.json").read_text())
    assert any("not the one this fold came from" in n for n in rec["notes"]), rec["notes"]


def test_a_lut_of_another_device_or_batch_is_refused_by_export(runs: dict, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from latopt.latency.lut import LUT, BlockEntry, save_lut
    from latopt.nets.blocks import find_blocks

    blocks = find_blocks(build_model(MODEL, 10))
    entries = [BlockEntry(index=b.index, path=b.path, kind=b.kind, input_shape=(1, b.cin, 8, 8),
                          foldable=b.foldable, reason=b.reason, raw={},
                          ms={"none": 1.0, "full": 0.5}) for b in blocks]
    for device, batch, what in (("gpu-torch", 1, "device 'gpu-torch', not 'cpu'"), ("cpu", 8, "batch 8, not 1")):
        lut = save_lut(LUT(device=device, model=MODEL, resolution=RES, batch=batch, blocks=entries,
                           fixed_ms=0.25), tmp_path / f"{device}-{batch}.json")
        assert _export(runs["base"], tmp_path / "o", "--fold", "auto", "--lut", str(lut)) == 2
        assert f"was profiled for {what}" in _one_error_line(capsys)
        assert not (tmp_path / "o").exists()
