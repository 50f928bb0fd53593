"""The profiler for real on tiny models (ONNX Runtime and torch CPU) and the ``latopt profile`` CLI."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from latopt.cli import main
from latopt.latency.devices import load_device
from latopt.latency.lut import LUT_SCHEMA, costs, load_lut, predict
from latopt.latency.profiler import HELD_OUT, HELD_OUT_MIXED, format_lut, measure_networks, profile_model
from latopt.nets.blocks import find_blocks
from latopt.nets.models import build_model

pytestmark = pytest.mark.floor   # .ci/run's lower-bounds run selects these tests

FAST = {"warmup": 1, "min_repeats": 5, "max_repeats": 6, "budget_s": 5.0}


def tiny_effnet() -> torch.nn.Module:
    """Three blocks: t=1 depthwise-separable, a foldable inverted residual, and one with SE (not foldable)."""
    from timm.models._efficientnet_builder import decode_arch_def
    from timm.models.efficientnet import EfficientNet

    torch.manual_seed(0)
    arch = decode_arch_def([["ds_r1_k3_s1_c8"], ["ir_r1_k3_s2_e2_c16"], ["ir_r1_k5_s1_e3_c16_se0.25"]])
    return EfficientNet(arch, num_classes=10, num_features=32, stem_size=8).eval()


@pytest.mark.parametrize("device", ["cpu", "cpu-torch"])
def test_profile_tiny_model(device: str, tmp_path) -> None:
    threads = torch.get_num_threads()
    try:
        prof = load_device(device).model_copy(update=FAST)
        model = tiny_effnet()
        lut = profile_model(model, prof, 32, batch=1, variants=("expand_dw", "dw_project", "pw"), progress=False,
                            name="tiny")
    finally:
        torch.set_num_threads(threads)
    assert (lut.model, lut.device, lut.resolution, lut.batch, lut.partial) == ("tiny", device, 32, 1, True)
    assert lut.variants == ("full", "expand_dw", "dw_project", "pw")  # full always, FOLD_VARIANTS order
    assert lut.num_classes == 10  # read from the module's logits
    assert not any(m.training for m in model.modules())  # the caller's model is left as it was
    b0, b1, b2 = lut.blocks
    assert list(lut.fixed) == ["stem", "head", "classifier"]
    assert lut.fixed_ms == pytest.approx(lut.calibration.scales["none"] * sum(s.median_ms for s in lut.fixed.values()))
    assert set(b0.raw) == {"none", "full", "pw"}  # t = 1: no partial fold
    assert set(b1.raw) == {"none", "full", "expand_dw", "dw_project", "pw"}
    assert set(b2.raw) == {"none"} and not b2.foldable and "squeeze" in b2.reason
    assert b1.input_shape == (1, 8, 16, 16) and b2.input_shape == (1, 16, 8, 8)  # stride-2 stem, stride-2 b1
    assert all(s.n >= 5 and s.q1_ms <= s.median_ms <= s.q3_ms for b in lut.blocks for s in b.raw.values())
    scales = lut.calibration.scales
    for b in lut.blocks:
        for v, ms in b.ms.items():
            assert ms == pytest.approx(scales[v] * b.raw[v].median_ms)
    assert set(lut.end_to_end) == {"asis", "full", "all-expand_dw", "all-dw_project", "all-pw", HELD_OUT,
                                   HELD_OUT_MIXED}
    for k, e in lut.end_to_end.items():
        plan = {int(i): v for i, v in e.folded.items()}
        assert e.predicted_ms == pytest.approx(lut.fixed_ms + sum(b.ms[plan.get(b.index, "none")] for b in lut.blocks))
        assert e.error == pytest.approx(e.predicted_ms / e.measured.median_ms - 1)
        assert e.calibration == (k not in (HELD_OUT, HELD_OUT_MIXED))
    # the fitted networks are reproduced by construction; the held-out one is a genuine check
    assert lut.end_to_end["asis"].error == pytest.approx(0, abs=1e-9)
    assert costs(lut) == {0: pytest.approx(max(0, b0.ms["none"] - b0.ms["full"])),
                          1: pytest.approx(max(0, b1.ms["none"] - b1.ms["full"]))}
    assert "held out" in format_lut(lut)
    stats = measure_networks({"a": model, "b": model}, prof, (1, 3, 32, 32))
    assert set(stats) == {"a", "b"} and stats["a"].n >= 5


def test_profile_int8_times_every_network_as_static_int8(tmp_path, monkeypatch) -> None:
    """cpu-int8: every part, variant and calibration network is timed as its ONNX Runtime static INT8 (QDQ)
    model; the LUT says int8, and the device check of load_lut keeps it from standing for the fp32 cpu."""
    import latopt.latency.backends.onnxruntime as ort_backend
    from latopt.errors import LatoptError
    from latopt.latency.lut import save_lut
    from latopt.latency.quantize import is_quantized

    timed: list[tuple[tuple[int, ...], bool]] = []

    class Runner(ort_backend.OrtRunner):   # what each runner runs, read while the file exists
        def __init__(self, path, **kw) -> None:  # type: ignore[no-untyped-def]
            super().__init__(path, **kw)
            timed.append((tuple(kw["input_shape"]), is_quantized(path)))

    monkeypatch.setattr(ort_backend, "OrtRunner", Runner)
    lut = profile_model(tiny_effnet(), load_device("cpu-int8").model_copy(update=FAST), 32, progress=False, name="tiny")
    assert lut.precision == "int8" and lut.device == "cpu-int8" and lut.environment["precision"] == "int8"
    assert lut.environment["int8"]["format"] == "QDQ"
    # the 1-op call-overhead model (a lone Relu) has nothing to quantise; everything else is QDQ
    assert len(timed) == 3 + 3 + 2 + 3 + 1 and [q for shape, q in timed if shape != (1, 8)] == [True] * (len(timed) - 1)
    assert set(lut.end_to_end) == {"asis", "full", HELD_OUT} and "cpu-int8 (onnxruntime, int8)" in format_lut(lut)
    path = save_lut(lut, tmp_path / "lut.json")
    assert load_lut(path).precision == "int8"
    with pytest.raises(LatoptError, match="device 'cpu-int8', not 'cpu'"):
        load_lut(path, device="cpu")


def _fast_yaml(tmp_path) -> str:
    p = tmp_path / "fastcpu.yaml"
    p.write_text("name: fastcpu\nbackend: onnxruntime\nthreads: 1\nclock: thread\nwarmup: 1\nmin_repeats: 5\n"
                 "max_repeats: 6\nbudget_s: 5\n")
    return str(p)


def test_cli_profile_writes_lut(tmp_path, capsys) -> None:
    out = tmp_path / "lut.json"
    rc = main(["profile", "--device", _fast_yaml(tmp_path), "--model", "mobilenetv2_035", "--resolution", "32",
               "--num-classes", "10", "--out", str(out), "--quiet", "--seed", "1", "--variants", "pw,drop"])
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["schema"] == LUT_SCHEMA and data["model"] == "mobilenetv2_035" and data["device"] == "fastcpu"
    assert data["environment"]["versions"]["onnxruntime"]
    # every block of the model, timed at the input it really gets (seen here with forward hooks)
    model = build_model("mobilenetv2_035", 10).eval()
    seen: dict[str, list[int]] = {}

    def record(path: str):  # type: ignore[no-untyped-def]
        def hook(module, args) -> None:  # type: ignore[no-untyped-def]
            seen[path] = list(args[0].shape)
        return hook

    for b in find_blocks(model):
        model.get_submodule(b.path).register_forward_pre_hook(record(b.path))
    with torch.no_grad():
        model(torch.zeros(1, 3, 32, 32))
    assert [(b["index"], b["path"], b["input_shape"], b["foldable"]) for b in data["blocks"]] == \
        [(i, path, shape, True) for i, (path, shape) in enumerate(seen.items())]
    # the file's own numbers: a prediction is the fixed parts plus each block in its variant; c_l = none − full
    none = sum(b["ms"]["none"] for b in data["blocks"])
    full = sum(b["ms"]["full"] for b in data["blocks"])
    lut = load_lut(out, model="mobilenetv2_035", resolution=32)
    assert predict(lut, []) == pytest.approx(data["fixed_ms"] + none)
    assert predict(lut, "all") == pytest.approx(data["fixed_ms"] + full)
    assert data["end_to_end"]["asis"]["predicted_ms"] == pytest.approx(data["fixed_ms"] + none)
    assert data["costs"] == {str(b["index"]): pytest.approx(max(0.0, b["ms"]["none"] - b["ms"]["full"]))
                             for b in data["blocks"]}
    # pw timed for every block, drop 0 ms for the residual ones only (not timed); a mixed network held out
    assert data["variants"] == ["full", "pw", "drop"]
    assert all("pw" in b["raw"] and "drop" not in b["raw"] for b in data["blocks"])
    assert [b["index"] for b in data["blocks"] if "drop" in b["ms"]] == [b.index for b in find_blocks(model) if b.residual]
    assert all(b["ms"]["drop"] == 0.0 for b in data["blocks"] if "drop" in b["ms"])
    mixed = data["end_to_end"][HELD_OUT_MIXED]
    assert not mixed["calibration"] and set(mixed["folded"].values()) == {"full", "pw", "drop"}
    assert data["end_to_end"]["all-pw"]["calibration"] and "all-drop" not in data["end_to_end"]
    text = capsys.readouterr().out
    assert "end-to-end asis" in text and f"wrote {out}" in text and "held-out-mixed" in text


def test_every_spelling_of_a_model_records_one_name_in_one_file(tmp_path, monkeypatch, capsys) -> None:
    """``latopt profile`` records a model's canonical name and files it at one default path, whichever spelling
    it is given (a tiny network stands for the model: the name, not the timing, is under test)."""
    import latopt.latency.profiler as profiler
    from latopt.latency.lut import default_lut_path

    monkeypatch.setattr(profiler, "build_model", lambda name, num_classes: tiny_effnet())
    monkeypatch.setenv("LATOPT_PROFILES_DIR", str(tmp_path / "profiles"))
    device = _fast_yaml(tmp_path)
    written = set()
    for spelling in ("torchvision/mobilenet_v2?width=1.0", "torchvision/mobilenet_v2"):
        assert main(["profile", "--device", device, "--model", spelling, "--resolution", "32", "--quiet"]) == 0
        path = default_lut_path("fastcpu", spelling, 32, 1)
        assert json.loads(path.read_text())["model"] == "torchvision/mobilenet_v2"
        written.add(path)
    assert len(written) == 1 and list((tmp_path / "profiles" / "fastcpu").iterdir()) == list(written)
    assert f"wrote {written.pop()}" in capsys.readouterr().out


def test_cli_error_paths(tmp_path, capsys) -> None:
    assert main(["profile", "--device", "nope", "--model", "mobilenetv2_100"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("latopt: error: unknown device 'nope'; known devices:") and "cpu" in err
    assert err.count("\n") == 1
    assert main(["profile", "--device", "cpu", "--model", "mobilenetv2_100", "--variants", "full,half"]) == 2
    err = capsys.readouterr().err
    assert err == "latopt: error: unknown variant 'half'; variants are full, expand_dw, dw_project, pw, drop\n"
    assert main(["profile", "--device", _fast_yaml(tmp_path), "--model", "resnet_bogus"]) == 2
    assert "unknown model" in capsys.readouterr().err
    assert main(["profile", "--device", _fast_yaml(tmp_path), "--model", "mobilenetv2_035",
                 "--num-classes", "0"]) == 2
    assert "--num-classes" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.json"))


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is not None, reason="tensorrt is installed here")
def test_cli_tensorrt_device_without_tensorrt(capsys) -> None:
    assert main(["profile", "--device", "titanx", "--model", "mobilenetv2_100"]) == 2
    err = capsys.readouterr().err
    assert "TensorRT is not installed" in err and err.count("\n") == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cli_gpu_torch_without_cuda(capsys) -> None:
    assert main(["profile", "--device", "gpu-torch", "--model", "mobilenetv2_100"]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "use the device cpu" in err and err.count("\n") == 1
    assert err.rstrip().endswith("on this machine (option --device)")  # the library names the parameter, the CLI its flag


@pytest.mark.cuda
def test_profile_gpu_torch(tmp_path) -> None:
    prof = load_device("gpu-torch").model_copy(update={"warmup": 3, "min_repeats": 10, "max_repeats": 20})
    lut = profile_model(tiny_effnet(), prof, 32, progress=False, num_classes=10, name="tiny")
    assert lut.backend == "torch" and "gpu" in lut.environment
    assert all(b.raw["none"].median_ms > 0 for b in lut.blocks)


class _ClosingBackend:
    """A backend stand-in whose runners fail to close (as a CUDA error surfacing at synchronize would)."""

    name = "stand-in"

    def __init__(self, profile) -> None:  # type: ignore[no-untyped-def]
        self.closed = 0

    def prepare(self, model, input_shape):  # type: ignore[no-untyped-def]
        class Runner:
            def __call__(self) -> None:
                pass

            def time_ms(self) -> float:
                return 1.0

            def close(self) -> None:
                raise RuntimeError("a runner failed to close")

        return Runner()

    def environment(self) -> dict:
        return {}

    def close(self) -> None:
        self.closed += 1


def test_backends_closed_when_a_runner_fails_to_close(monkeypatch) -> None:
    """The backend (with pycuda, a pushed CUDA context) is closed on every path of
    measure_networks and profile_model, even when closing a runner raises."""
    import latopt.latency.profiler as profiler

    opened: list[_ClosingBackend] = []
    monkeypatch.setattr(profiler, "get_backend", lambda dev: opened.append(_ClosingBackend(dev)) or opened[-1])
    device = load_device("cpu").model_copy(update={"warmup": 0, "min_repeats": 3, "max_repeats": 3, "clock": "wall"})
    with pytest.raises(RuntimeError, match="failed to close"):
        measure_networks({"relu": torch.nn.ReLU()}, device, (1, 4))
    with pytest.raises(RuntimeError, match="failed to close"):
        profile_model("mobilenetv2_035", device, resolution=32, num_classes=10, progress=False)
    assert [b.closed for b in opened] == [1, 1]


def test_profile_times_spans_and_calibrates_them(tmp_path) -> None:
    """``span`` among the variants: every exact span is timed in the same run (one module per span and kernel),
    at the scale of the variant its convolution is like (pw for 1x1, full for k×k), checked on two held-out
    networks of spans, predicted with its spans, and the LUT keeps them through a file."""
    from latopt.latency.lut import save_lut
    from latopt.latency.merged_spans import span_candidates

    model = tiny_effnet()
    lut = profile_model(model, load_device("cpu").model_copy(update=FAST), 32, variants=("pw", "span"),
                        progress=False, name="tiny")
    assert lut.variants == ("full", "pw")  # span is not a block variant
    # blocks 0 (stride 1) and 1 (stride 2) make the only span; block 2 (SE) cannot be folded
    assert [(s.start, s.end, s.kernel, s.fulls) for s in lut.spans] == [(0, 1, 1, ()), (0, 1, 3, (0, 1))]
    shapes = {b.index: tuple(b.input_shape) for b in lut.blocks}
    assert [c[:3] for c in span_candidates(find_blocks(model), shapes, ("full", "pw"))] == [(0, 1, 1), (0, 1, 3)]
    scales = lut.calibration.scales
    assert "span" not in scales and all(
        s.ms == pytest.approx(scales["pw" if s.kernel == 1 else "full"] * s.raw.median_ms) and s.raw.n >= 5
        for s in lut.spans)
    assert not lut.end_to_end["all-span"].calibration and not lut.end_to_end["held-out-spans"].calibration
    for k in ("all-span", "held-out-spans"):
        e = lut.end_to_end[k]
        plan = {int(i): v for i, v in e.folded.items()}
        assert e.spans and e.predicted_ms == pytest.approx(predict(lut, plan, [tuple(s) for s in e.spans]))
    assert predict(lut, {0: "pw", 1: "pw"}, [(0, 1, 1)]) == pytest.approx(
        lut.fixed_ms + lut.spans[0].ms + lut.blocks[2].ms["none"])
    again = load_lut(save_lut(lut, tmp_path / "lut.json"))
    assert again.spans == lut.spans
