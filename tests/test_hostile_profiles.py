"""Hostile input to device profiles, LUTs, the profiler and the deploy runner (issue 29): all work bounded, bad
input refused in one line (LatoptError: exit 2 from the command lines, the key or flag named).

No assertion on absolute times: a test of the time budget counts calls."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch

from latopt.errors import LatoptError
from latopt.latency.devices import load_device
from latopt.latency.lut import LUT, BlockEntry, SpanEntry, check_blocks, load_lut, save_lut
from latopt.latency.timing import TimingPolicy, TimingStats, compare
from latopt.nets.blocks import block_input_shapes, find_blocks
from latopt.nets.models import build_model

FAST = {"warmup": 1, "min_repeats": 5, "max_repeats": 6, "budget_s": 5.0}


def _refused(tmp_path, text: str, name: str = "dev.yaml") -> str:
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(LatoptError) as e:
        load_device(str(f))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"device profile {f}"), msg
    return msg


# ------------------------------------------------------------------------------ 1. unbounded work
@pytest.mark.parametrize("key,text", [
    ("warmup", "warmup: 100000000\nbudget_s: 2\n"),
    ("warm_calls", "warm_calls: 100000\n"),
    ("min_repeats", "min_repeats: 10000000\nmax_repeats: 10000000\n"),
    ("max_repeats", "max_repeats: 10000000\n"),
    ("budget_s", "budget_s: 1.0e+12\n"),
    ("workspace_mib", "backend: tensorrt\nclock: wall\nworkspace_mib: 1000000000000\n"),
])
def test_every_count_of_a_profile_has_an_upper_bound(tmp_path, key, text) -> None:
    msg = _refused(tmp_path, "name: x\n" + text)
    assert f"key '{key}' must be in " in msg and "got" in msg, msg


def test_the_budget_bounds_the_warm_up_too() -> None:
    """warmup: 1000 calls of a 1 ms runner with a 10 ms budget: the warm-up stops when the budget is spent (it
    used to run all 1000, and `warmup: 100000000` ran until killed); then the minimum 5 rounds."""
    calls = []

    def slow() -> None:
        calls.append(1)
        time.sleep(0.001)

    stats = compare({"a": slow}, TimingPolicy(warmup=1000, min_repeats=5, max_repeats=5, budget_s=0.01,
                                              warm_calls=0))
    assert stats["a"].n == 5
    assert len(calls) - 5 < 1000  # far fewer: the budget (10 ms) is spent after ~10 calls


# ------------------------------------------------------------------------------ 2. the deploy runner
def _runtime(argv, capsys) -> tuple[int, str]:
    from latopt.runtime.cli import main

    try:
        rc = main(argv)
    except KeyboardInterrupt:  # not to stop pytest itself
        pytest.fail("KeyboardInterrupt escaped python -m latopt.runtime")
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("argv,flag", [
    (["--threads", "100000"], "--threads"),
    (["--bench", "1000000000"], "--bench"),
    (["--seed", "-1"], "--seed"),
])
def test_runtime_flags_are_bounded(tmp_path, capsys, argv, flag) -> None:
    """Refused before any model is opened (the model does not even exist): 100000 ONNX Runtime threads never
    finished starting."""
    rc, err = _runtime([str(tmp_path / "nope.onnx"), *argv], capsys)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("latopt.runtime: error:") and flag in lines[0], err


class _Interrupted:
    """A runner whose timed call is interrupted (Ctrl-C during --bench)."""

    input_shape = (1, 3, 4, 4)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def run(self, x: np.ndarray) -> np.ndarray:
        return np.zeros((1, 10), np.float32)

    def __call__(self) -> None:
        raise KeyboardInterrupt


def test_runtime_ctrl_c_is_one_line_and_exit_130(tmp_path, capsys, monkeypatch) -> None:
    import latopt.runtime.cli as cli

    monkeypatch.setattr(cli, "load", lambda *a, **k: _Interrupted())
    rc, err = _runtime([str(tmp_path / "m.onnx"), "--bench", "5"], capsys)
    assert rc == 130 and err.strip().splitlines() == ["latopt.runtime: interrupted"], err


@pytest.mark.parametrize("name", ["d.yaml", "sub"])
def test_a_directory_given_as_a_device_profile_is_named_one(tmp_path, name) -> None:
    d = tmp_path / name
    d.mkdir()
    with pytest.raises(LatoptError, match="is a directory") as e:
        load_device(str(d) + ("" if name.endswith(".yaml") else "/"))
    assert "does not exist" not in str(e.value)


# ------------------------------------------------------------------------------ 3. name vs content, options
@pytest.mark.parametrize("text,field", [
    ("name: cpu-int8\nprecision: fp32\n", "precision"),       # an fp32 LUT filed as INT8
    ("name: cpu-int8\n", "precision"),                         # (fp32 by default)
    ("name: edge-fp16\nbackend: tensorrt\nclock: wall\n", "precision"),
    ("name: box-int8\nprecision: fp16\nbackend: torch\ncuda_device: 0\nclock: wall\n", "precision"),
    ("name: my-trt\nbackend: onnxruntime\n", "backend"),
    ("name: cpu-torch\nbackend: onnxruntime\n", "backend"),
    ("name: gpu-ort\n", "GPU"),                                # the CPU provider
    ("name: cpu\nbackend: torch\ncuda_device: 0\nclock: wall\n", "CPU"),
])
def test_a_profile_name_must_match_its_content(tmp_path, text, field) -> None:
    msg = _refused(tmp_path, text)
    assert "'name'" in msg and field in msg, msg


@pytest.mark.parametrize("text", [
    "name: cpu\nbackend: torch\n",
    "name: ort-cuda\nprovider: CUDAExecutionProvider\ncuda_device: 0\n",
    "name: trt-b4\nbackend: tensorrt\nprecision: fp32\nbatch: 4\n",
    "name: int8-box\nprecision: int8\n",
    "name: gpu-torch-fp16\nbackend: torch\ncuda_device: 0\nprecision: fp16\n",
    "name: edge\n",
])
def test_names_that_agree_with_the_content_load(tmp_path, text) -> None:
    f = tmp_path / "dev.yaml"
    f.write_text(text)
    load_device(str(f))


def test_a_profile_found_by_name_must_carry_that_name(tmp_path, monkeypatch) -> None:
    """``--device cpu`` reading profiles/cpu.yaml whose name is another device's would file its LUTs there."""
    monkeypatch.setenv("LATOPT_PROFILES_DIR", str(tmp_path))
    (tmp_path / "cpu.yaml").write_text("name: cpu-int8\nprecision: int8\n")
    with pytest.raises(LatoptError, match=r"name 'cpu-int8'.*'cpu'") as e:
        load_device("cpu")
    assert "\n" not in str(e.value)
    assert load_device(str(tmp_path / "cpu.yaml")).name == "cpu-int8"  # by path: the file's own name


@pytest.mark.parametrize("backend", ["backend: onnxruntime\n", "backend: torch\n", "backend: tensorrt\nclock: wall\n"])
def test_keys_no_backend_reads_are_refused(tmp_path, backend) -> None:
    """Each backend's record declares the keys it reads: an ``options`` mapping no backend read is refused, and so
    is a key of another backend, naming it."""
    msg = _refused(tmp_path, "name: x\n" + backend + "options: {fast: true}\n")
    assert "unknown key 'options'" in msg and "known:" in msg, msg
    msg = _refused(tmp_path, "name: x\n" + backend + "count: macs\n")
    assert "key 'count' is read by the count backend" in msg, msg


# ------------------------------------------------------------------------------ 4. forged span kernels
def _lut_with_spans(model_name: str | torch.nn.Module, resolution: int) -> tuple[LUT, list]:
    """A made-up LUT of the model's real blocks (their input shapes) with every exact span it has."""
    from latopt.latency.merged_spans import span_candidates

    model = build_model(model_name, num_classes=10).eval() if isinstance(model_name, str) else model_name
    blocks = find_blocks(model)
    shapes = block_input_shapes(model, (1, 3, resolution, resolution))
    st = TimingStats(1.0, 1.0, 1.0, 0.0, 5)
    entries = [BlockEntry(index=b.index, path=b.path, kind=b.kind, input_shape=tuple(shapes[b.index]),
                          foldable=b.foldable, reason=b.reason, raw={"none": st, "full": st, "pw": st},
                          ms={"none": 1.0, "full": 0.6, "pw": 0.2} | ({"drop": 0.0} if b.residual else {}))
               for b in blocks]
    spans = [SpanEntry(start=a, end=e, kernel=k, fulls=fulls, raw=st, ms=0.3)
             for a, e, k, fulls in span_candidates(blocks, shapes, ("full", "pw", "drop"))]
    lut = LUT(device="cpu", model=model_name if isinstance(model_name, str) else "tiny", resolution=resolution, batch=1, blocks=entries,
              fixed_ms=1.0, variants=("full", "pw", "drop"), num_classes=10, spans=spans)
    return lut, blocks


@pytest.mark.parametrize("forge", ["kernel", "stride-before-full", "not-foldable"])
def test_a_forged_span_kernel_is_refused(forge) -> None:
    """A LUT's span that is not what its blocks compose to: predicted and reported, while export ships the
    composition. check_blocks, which every stage that uses a LUT with its model runs, refuses it."""
    lut, blocks = _lut_with_spans(_tiny_effnet() if forge == "not-foldable" else "mobilenetv2_035", 32)
    check_blocks(lut, blocks)  # the real spans: fine
    kxk = next(s for s in lut.spans if s.kernel > 1)
    if forge == "kernel":       # recorded 5x5 where the blocks compose to a 3x3
        bad = kxk.model_copy(update={"kernel": 5})
    elif forge == "stride-before-full":  # a strided block before the full fold: a dilated kernel, no span
        i = next(i for i in range(1, len(blocks)) if blocks[i - 1].stride > 1 and blocks[i].kernel > 1)
        bad = SpanEntry(start=i - 1, end=i, kernel=blocks[i].kernel, fulls=(i,), raw=kxk.raw, ms=0.1)
    else:                        # over block 2 of the tiny model, which cannot be folded (squeeze-excitation)
        assert not blocks[2].foldable
        bad = SpanEntry(start=1, end=2, kernel=1, raw=kxk.raw, ms=0.1)
    forged = lut.model_copy(update={"spans": [s for s in lut.spans if s.key != bad.key] + [bad]})
    with pytest.raises(LatoptError, match=rf"span {bad.start}-{bad.end}") as e:
        check_blocks(forged, blocks, "lut.json")
    assert "\n" not in str(e.value) and "lut.json" in str(e.value)


# ------------------------------------------------------------------------------ 5. spans: exact mode, what they need
def _tiny_effnet() -> torch.nn.Module:
    from timm.models._efficientnet_builder import decode_arch_def
    from timm.models.efficientnet import EfficientNet

    torch.manual_seed(0)
    arch = decode_arch_def([["ds_r1_k3_s1_c8"], ["ir_r1_k3_s2_e2_c16"], ["ir_r1_k5_s1_e3_c16_se0.25"]])
    return EfficientNet(arch, num_classes=10, num_features=32, stem_size=8).eval()


@pytest.fixture
def no_timing(monkeypatch):
    """Refusals come up front: nothing is prepared or timed."""
    import latopt.latency.profiler as profiler

    def timed(*a, **k):
        raise AssertionError("the profiler started preparing/timing before refusing")

    monkeypatch.setattr(profiler, "get_backend", timed)
    monkeypatch.setattr(profiler, "compare", timed)


@pytest.mark.parametrize("variants,fold_mode,param,want", [
    (("pw", "drop", "span"), "paper", "fold_mode", "exact"),
    (("span",), "exact", "variants", "pw"),
    (("full", "span"), "exact", "variants", "drop"),
])
def test_spans_are_refused_up_front_where_they_cannot_ship(no_timing, variants, fold_mode, param, want) -> None:
    from latopt.latency.profiler import profile_model

    with pytest.raises(LatoptError, match=want) as e:
        profile_model(_tiny_effnet(), load_device("cpu").model_copy(update=FAST), 32, variants=variants,
                      progress=False, fold_mode=fold_mode, name="tiny")
    assert e.value.param == param and "span" in str(e.value) and "\n" not in str(e.value)


def test_cli_refuses_paper_spans_in_one_line(no_timing, capsys) -> None:
    from latopt.cli import main

    rc = main(["profile", "--device", "cpu", "--model", "mobilenetv2_035", "--resolution", "16",
               "--variants", "full,pw,drop,span", "--fold-mode", "paper", "-q"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "--fold-mode" in lines[0], lines


def test_a_paper_mode_lut_with_spans_is_refused(tmp_path) -> None:
    """A LUT of paper folds that times spans (made before profile refused it) cannot be planned from: export
    merges spans in exact mode only."""
    lut, _ = _lut_with_spans("mobilenetv2_035", 32)
    data = lut.model_copy(update={"fold_mode": "paper"}).to_dict()
    (tmp_path / "lut.json").write_text(json.dumps(data))
    with pytest.raises(LatoptError, match="exact") as e:
        load_lut(tmp_path / "lut.json")
    assert "span" in str(e.value) and "\n" not in str(e.value)
    assert load_lut(save_lut(lut.model_copy(update={"fold_mode": "paper", "spans": []}), tmp_path / "ok.json"))


@pytest.mark.parametrize("argv,flag", [
    (["--batch", "100000"], "--batch"),            # a profile's batch is at most 4096; the flag overrode it
    (["--num-classes", "1000000000"], "--num-classes"),   # a checkpoint's bound: 100000
])
def test_cli_profile_sizes_are_bounded(no_timing, capsys, argv, flag) -> None:
    """Refused before any module is built at that size (a 10^9-class classifier, a batch of 10^5 images)."""
    from latopt.cli import main

    rc = main(["profile", "--device", "cpu", "--model", "mobilenetv2_035", "--resolution", "16", "-q", *argv])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and flag in lines[0] and "must be in [1, " in lines[0], lines
