"""LUT: schema round trip, predict, c_l, variant times, calibration, load_lut mismatch errors, the LUT as data
(validated alone, no model built; check_blocks against a model's block list)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from latopt.errors import LatoptError
from latopt.files.records import validated
from latopt.latency.lut import (
    LUT,
    LUT_SCHEMA,
    BlockEntry,
    calibrate,
    check_blocks,
    costs,
    default_lut_path,
    load_lut,
    lut_model_name,
    predict,
    save_lut,
    variant_times,
)
from latopt.latency.timing import TimingStats
from latopt.nets.blocks import find_blocks
from latopt.nets.models import build_model


def st(ms: float) -> TimingStats:
    return TimingStats(ms, ms * 0.9, ms * 1.1, ms * 0.2, 40, ms * 1.5)


def make_lut() -> LUT:
    blocks = [
        BlockEntry(index=0, path="blocks.0.0", kind="timm.DepthwiseSeparableConv", input_shape=(1, 32, 112, 112),
                   foldable=True, raw={"none": st(0.4), "full": st(0.8)}, ms={"none": 0.4, "full": 0.8}),
        BlockEntry(index=1, path="blocks.1.0", kind="timm.InvertedResidual", input_shape=(1, 16, 112, 112),
                   foldable=True,
                   raw={v: st(t) for v, t in {"none": 0.7, "full": 0.3, "expand_dw": 0.5, "dw_project": 0.6}.items()},
                   ms={"none": 0.7, "full": 0.3, "expand_dw": 0.5, "dw_project": 0.6}),
        BlockEntry(index=2, path="blocks.2.0", kind="timm.InvertedResidual", input_shape=(1, 24, 56, 56),
                   foldable=False, reason="squeeze-excitation",
                   raw={"none": st(0.25)}, ms={"none": 0.25}),
    ]
    return LUT(device="cpu", model="mobilenetv2_100", resolution=224, batch=1, blocks=blocks, fixed_ms=1.0,
               fixed={"stem": st(0.3), "head": st(0.7)}, backend="onnxruntime", variants=("full", "expand_dw", "dw_project"),
               calibration={"method": "per-variant scale", "scales": {"none": 1.0}},
               end_to_end={"asis": {"folded": {}, "measured": st(2.35).to_dict(), "predicted_ms": 2.35}},
               environment={"cpu": "test"}, created="2026-01-01T00:00:00+00:00", call_overhead_ms=0.02)


def test_round_trip(tmp_path) -> None:
    lut = make_lut()
    path = save_lut(lut, tmp_path / "lut.json")
    data = json.loads(path.read_text())
    assert data["schema"] == LUT_SCHEMA and data["costs"] == {"0": 0.0, "1": pytest.approx(0.4)}
    assert data["blocks"][1]["raw"]["none"]["wall_median_ms"] == pytest.approx(1.05)
    back = load_lut(path, resolution=224)   # (a 3-block stand-in: not checked against mobilenetv2_100)
    assert back.to_dict() == lut.to_dict()
    assert back.blocks[1].raw["expand_dw"] == lut.blocks[1].raw["expand_dw"]


def test_lut_without_variants_times_full_and_one_with_partial_is_refused(tmp_path) -> None:
    """``variants`` defaults to ("full",); a LUT recording the older ``partial`` flag instead is refused: re-profile."""
    data = make_lut().to_dict()
    del data["variants"]
    (tmp_path / "full.json").write_text(json.dumps(data))
    lut = load_lut(tmp_path / "full.json")
    assert lut.variants == ("full",) and not lut.partial
    for partial in (True, False):
        (tmp_path / "old.json").write_text(json.dumps({**data, "partial": partial}))
        with pytest.raises(LatoptError, match=r"old\.json.*corrupt.*'partial'.*older") as e:
            load_lut(tmp_path / "old.json")
        assert "\n" not in str(e.value)


def test_loading_a_lut_needs_no_model_stack(tmp_path) -> None:
    """A LUT is data: loading it builds no model, so it loads where timm cannot even be imported."""
    path = save_lut(make_lut(), tmp_path / "lut.json")
    code = textwrap.dedent(f"""
        import sys
        sys.modules["timm"] = None   # any import of timm now fails
        from latopt.latency.lut import load_lut, predict
        lut = load_lut({str(path)!r}, model="mobilenetv2_100", resolution=224)
        assert "timm" not in [m.split(".")[0] for m in sys.modules if sys.modules[m] is not None]
        print(len(lut.blocks), round(predict(lut, "all"), 6))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["3", str(round(predict(make_lut(), "all"), 6))]


def test_predict_costs_and_variants() -> None:
    lut = make_lut()
    base = 1.0 + 0.4 + 0.7 + 0.25
    assert predict(lut, []) == pytest.approx(base)
    assert predict(lut, [1]) == pytest.approx(base - 0.7 + 0.3)
    assert predict(lut, "all") == pytest.approx(1.0 + 0.8 + 0.3 + 0.25)
    assert predict(lut, {1: "expand_dw"}) == pytest.approx(base - 0.7 + 0.5)
    assert predict(lut, {0: "full", 1: "dw_project"}) == pytest.approx(1.0 + 0.8 + 0.6 + 0.25)
    assert predict(lut, {0: "none"}) == pytest.approx(base)
    # c_l = max(0, t_asis - t_full): block 0 gets slower when folded -> 0; non-foldable blocks are absent
    assert costs(lut) == {0: 0.0, 1: pytest.approx(0.4)}
    assert variant_times(lut, 1) == {"none": 0.7, "full": 0.3, "expand_dw": 0.5, "dw_project": 0.6}
    with pytest.raises(LatoptError, match="cannot be folded: squeeze-excitation"):
        predict(lut, [2])
    with pytest.raises(LatoptError, match="block 7 is not in the LUT"):
        predict(lut, [7])
    with pytest.raises(LatoptError, match=r"block 0 .*'expand_dw'.*full,expand_dw"):
        predict(lut, {0: "expand_dw"})
    with pytest.raises(LatoptError, match="fold set 'some'"):
        predict(lut, "some")


def test_load_lut_errors(tmp_path) -> None:
    path = save_lut(make_lut(), tmp_path / "lut.json")
    with pytest.raises(LatoptError, match="'mobilenetv2_100'.*'efficientnet_lite0'"):
        load_lut(path, model="efficientnet_lite0")
    with pytest.raises(LatoptError, match="resolution 224, not 160.*latopt profile"):
        load_lut(path, resolution=160)
    with pytest.raises(LatoptError, match="batch 1, not 8"):
        load_lut(path, batch=8)
    # a LUT of exact folds (bias maps timed) used to fold in paper mode, or the reverse
    with pytest.raises(LatoptError, match="'exact', not 'paper'.*fold mode paper"):
        load_lut(path, fold_mode="paper")
    assert load_lut(path, fold_mode="exact").fold_mode == "exact"
    with pytest.raises(LatoptError, match="does not exist"):
        load_lut(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(LatoptError, match="not valid JSON"):
        load_lut(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text(json.dumps({"schema": "latopt.checkpoint/1"}))
    with pytest.raises(LatoptError, match="expected 'latopt.lut/1'"):
        load_lut(tmp_path / "other.json")
    data = json.loads(path.read_text())
    del data["blocks"][0]["ms"]
    (tmp_path / "corrupt.json").write_text(json.dumps(data))
    with pytest.raises(LatoptError, match="is corrupt"):
        load_lut(tmp_path / "corrupt.json")


def test_calibrate_recovers_known_scales() -> None:
    raw = {0: {"none": 1.0, "full": 0.5}, 1: {"none": 2.0, "full": 1.0, "expand_dw": 1.5}, 2: {"none": 0.5}}
    fixed = 1.0
    s_none, s_full, s_ed = 0.8, 0.9, 0.7
    asis = s_none * (fixed + 1.0 + 2.0 + 0.5)
    full = s_none * (fixed + 0.5) + s_full * (0.5 + 1.0)
    ed = s_none * (fixed + 1.0 + 0.5) + s_ed * 1.5
    nets = {"asis": ({}, asis), "full": ({0: "full", 1: "full"}, full), "ed": ({1: "expand_dw"}, ed)}
    scales, notes = calibrate(raw, fixed, nets)
    assert scales == pytest.approx({"none": s_none, "full": s_full, "expand_dw": s_ed}) and notes == []
    # no network for expand_dw: it borrows the full scale, and says so
    scales, notes = calibrate(raw, fixed, {k: nets[k] for k in ("asis", "full")})
    assert scales["expand_dw"] == pytest.approx(s_full) and "no end-to-end network for 'expand_dw'" in notes[0]
    # an absurd measurement is clipped to [0.5, 2] x the as-is scale, with a note
    scales, notes = calibrate(raw, fixed, {"asis": ({}, asis), "full": ({0: "full", 1: "full"}, 100.0)})
    assert scales["full"] == pytest.approx(2 * s_none) and "clipped" in notes[0]
    with pytest.raises(LatoptError, match="as-is network was not measured"):
        calibrate(raw, fixed, {"full": nets["full"]})


def test_default_path() -> None:
    p = default_lut_path("cpu", "mobilenetv2_100", 224, 1)
    assert p.parts[-3:] == ("profiles", "cpu", "mobilenetv2_100-r224-b1.json")
    assert default_lut_path("cpu", "torchvision/mobilenet_v2?width=0.75", 160, 4).name == \
        "torchvision_mobilenet_v2_width_0.75-r160-b4.json"


def test_every_spelling_of_a_model_has_one_default_path_and_recorded_name() -> None:
    spellings = ("torchvision/mobilenet_v2", "torchvision/mobilenet_v2?width=1.0",
                 "torchvision/mobilenet_v2?width=1&strides=1,2,2,2,1,2,1")
    assert {lut_model_name(m) for m in spellings} == {"torchvision/mobilenet_v2"}
    assert len({default_lut_path("cpu", m, 224, 1) for m in spellings}) == 1
    assert lut_model_name("timm/mobilenetv2_100") == "mobilenetv2_100"
    assert default_lut_path("cpu", "timm/mobilenetv2_100", 224, 1) == default_lut_path("cpu", "mobilenetv2_100", 224, 1)
    # other models keep their own names and paths; a name latopt does not know (a module's label) is kept as given
    assert lut_model_name("torchvision/mobilenet_v2?width=0.75") == "torchvision/mobilenet_v2?width=0.75"
    assert lut_model_name("tiny") == "tiny"


# ----------------------------------------------------------------------------- malformed LUTs
def _set(d: dict, path: tuple, value) -> dict:  # type: ignore[no-untyped-def]
    node = d
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return d


@pytest.mark.parametrize("path,value,match", [
    (("blocks", 1, "ms", "full"), -0.3, r"field 'blocks\[1\].ms.full' must be >= 0, got -0.3"),
    # NaN and Infinity in the file: refused by read_json first (tests/test_hostile_plans.py)
    (("blocks", 2, "raw", "none", "q1_ms"), -1, r"field 'blocks\[2\].raw.none.q1_ms' must be >= 0(.0)?, got -1"),
    (("call_overhead_ms",), -0.01, r"field 'call_overhead_ms' must be >= 0, got -0.01"),
    (("profiling_s",), "1.0", r"field 'profiling_s' must be a number, got '1.0'"),
    (("blocks", 1, "ms", "none"), 10**400, r"field 'blocks\[1\].ms.none' must be a number, got 1000"),  # too large
    (("blocks",), [], r"field 'blocks' must not be empty"),
    (("blocks",), {"0": {}}, r"field 'blocks' must be a list"),
    (("blocks", 2, "index"), 1, r"block index 1 appears twice \(blocks\[1\] and blocks\[2\]\)"),
    (("blocks", 2, "path"), "blocks.1.0", r"block path 'blocks.1.0' appears twice"),
    (("blocks", 1, "index"), "1", r"field 'blocks\[1\].index' must be an integer, got '1'"),
    (("blocks", 1, "index"), -1, r"field 'blocks\[1\].index' must be >= 0, got -1"),
    (("blocks", 0), "block", r"field 'blocks\[0\]' must be a mapping, got 'block'"),
    (("blocks", 0, "input_shape"), [1, -3, 4], r"field 'blocks\[0\].input_shape\[1\]' must be >= 1, got -3"),
    (("blocks", 0, "input_shape"), [], r"field 'blocks\[0\].input_shape' must not be empty"),
    (("blocks", 0, "foldable"), "yes", r"field 'blocks\[0\].foldable' must be true or false, got 'yes'"),
    (("blocks", 2, "foldable"), True, r"field 'blocks\[2\]' is foldable but has no ms time for variant 'full'"),
    (("blocks", 0, "path"), None, r"field 'blocks\[0\].path' must be a string, got None"),
    (("blocks", 0, "ms"), [0.4], r"field 'blocks\[0\].ms' must be a mapping, got \[0.4\]"),
    (("blocks", 0, "ms", "half"), 0.1, r"field 'blocks\[0\].ms' has a key that is 'half'; choose one of none, full"),
    (("blocks", 1, "raw", "full", "n"), 0, r"field 'blocks\[1\].raw.full.n' must be >= 1, got 0"),
    (("blocks", 0, "speed"), 1, r"unknown field 'blocks\[0\].speed'"),
    (("resolution",), "224", r"field 'resolution' must be an integer, got '224'"),
    (("batch",), 0, r"field 'batch' must be >= 1, got 0"),
    (("device",), 5, r"field 'device' must be a string, got 5"),
    (("device",), "", r"field 'device' must be a non-empty string"),
    (("fold_mode",), "fast", r"field 'fold_mode' is 'fast'; choose one of exact, paper"),
    (("variants",), "full", r"field 'variants' must be a list, got 'full'"),
    (("variants",), ["full", "half"], r"field 'variants\[1\]' is 'half'; choose one of full, expand_dw"),
    (("fixed",), [1], r"field 'fixed' must be a mapping"),
    (("end_to_end", "asis"), 3, r"field 'end_to_end.asis' must be a mapping, got 3"),
])
def test_malformed_lut_is_one_line_naming_the_field(tmp_path, path, value, match) -> None:
    data = _set(make_lut().to_dict(), path, value)
    (tmp_path / "lut.json").write_text(json.dumps(data))
    with pytest.raises(LatoptError, match=rf"lut\.json is corrupt: {match}") as e:
        load_lut(tmp_path / "lut.json")
    assert "\n" not in str(e.value) and str(e.value).endswith("re-create it with latopt profile")


def test_lut_without_as_is_time_or_required_field(tmp_path) -> None:
    data = make_lut().to_dict()
    del data["blocks"][1]["ms"]["none"]
    with pytest.raises(LatoptError, match=r"'blocks\[1\]'.*variant 'none'"):
        validated(LUT, data, key="field")
    data = make_lut().to_dict()
    del data["blocks"][0]["raw"]["none"]["median_ms"]
    with pytest.raises(LatoptError, match="is missing") as e:
        validated(LUT, data, key="field")
    assert "'blocks[0].raw.none.median_ms'" in str(e.value)
    with pytest.raises(LatoptError, match=r"expected a mapping of fields, got \[\]"):
        validated(LUT, [], key="field")
    (tmp_path / "list.json").write_text(json.dumps([]))
    with pytest.raises(LatoptError, match=r"list\.json is not a JSON object"):
        load_lut(tmp_path / "list.json")


def _leaves(d, path=()):  # type: ignore[no-untyped-def]
    items = d.items() if isinstance(d, dict) else enumerate(d) if isinstance(d, list) else ()
    for k, v in items:
        yield (*path, k)
        yield from _leaves(v, (*path, k))


def test_fuzzed_lut_never_raises_anything_but_a_one_line_error() -> None:
    """Every field of a LUT replaced by every kind of junk (or deleted): from_dict accepts it, and then
    predict / costs give finite times, or it refuses with a LatoptError; never another exception."""
    junk = [None, True, -1, 0, 1.5, float("nan"), float("inf"), 10**400, "", "x", [], [1], {}, {"a": 1}]
    base = make_lut().to_dict()
    cases = refused = 0
    for path in list(_leaves(base)):
        for value in [*junk, "<delete>"]:
            data = json.loads(json.dumps(base))
            if value == "<delete>":
                parent = data
                for k in path[:-1]:
                    parent = parent[k]
                del parent[path[-1]]
            else:
                _set(data, path, value)
            cases += 1
            try:
                lut = validated(LUT, data, key="field")
            except LatoptError as e:
                assert "\n" not in str(e)
                refused += 1
                continue
            for folded in ([], "all"):
                try:
                    t = predict(lut, folded)
                except LatoptError as e:                          # e.g. a foldable block without "full"
                    assert "\n" not in str(e)
                    continue
                assert t == t and t < float("inf")                # finite
            assert all(0 <= c < float("inf") for c in costs(lut).values())
    assert cases > 1000 and 0 < refused < cases


@pytest.mark.parametrize("edit", ["drop-middle", "drop-last", "index-999", "no-raw", "other-path"])
def test_a_lut_must_time_every_block_of_its_model(tmp_path, edit) -> None:
    # a LUT with a block missing (or renumbered out of range, or without its measured times) was accepted:
    # export --fold auto / fold / search then silently treated the missing blocks as free to keep. The LUT
    # alone refuses what it can tell (indices 0..n-1, raw times); the model's block list tells the rest.
    lut = make_lut()
    model_blocks = find_blocks(build_model("mobilenetv2_035", num_classes=10))
    entries = [BlockEntry(index=b.index, path=b.path, kind=b.kind, input_shape=(1, b.cin, 8, 8), foldable=False,
                          raw={}, ms={"none": 1.0}) for b in model_blocks]
    check_blocks(lut.model_copy(update={"blocks": entries}), model_blocks)   # every block, same paths: fine
    data = lut.model_copy(update={"blocks": entries}).to_dict()
    if edit == "drop-middle":
        del data["blocks"][1]
    elif edit == "drop-last":
        del data["blocks"][-1]
    elif edit == "index-999":
        data["blocks"][-1]["index"] = 999
    elif edit == "other-path":
        data["blocks"][3]["path"] = "blocks.9.9"
    else:
        del data["blocks"][0]["raw"]
    (tmp_path / "lut.json").write_text(json.dumps(data))
    with pytest.raises(LatoptError) as e:
        check_blocks(load_lut(tmp_path / "lut.json"), model_blocks, tmp_path / "lut.json")
    assert "\n" not in str(e.value)
    if edit == "drop-last":   # indices still 0..n-1: only the model says a block is missing
        assert f"times {len(model_blocks) - 1} blocks" in str(e.value) and f"has {len(model_blocks)}" in str(e.value)
    if edit == "other-path":
        assert "block 3 at 'blocks.9.9'" in str(e.value)


@pytest.mark.parametrize("span,match", [
    ({"start": 0, "end": 1, "kernel": 3, "fulls": []}, r"a k×k span names its full-fold blocks"),
    ({"start": 0, "end": 1, "kernel": 1, "fulls": [0]}, r"a k×k span names its full-fold blocks \(inside it\), a 1x1"),
    ({"start": 0, "end": 1, "kernel": 3, "fulls": [2]}, r"a k×k span names its full-fold blocks \(inside it\)"),
    ({"start": 1, "end": 1, "kernel": 1}, r"span 1-1: end must be after start"),
    ({"start": 1, "end": 3, "kernel": 1}, r"spans must be distinct \(start, end, kernel\) within the blocks"),
    ({"start": 0, "end": 1, "kernel": 1, "ms": -1.0}, r"must be >= 0, got -1"),
])
def test_malformed_spans_are_refused(tmp_path, span, match) -> None:
    """A LUT's timed spans (latopt profile --variants ...,span) are validated with the rest of the file."""
    data = make_lut().to_dict()
    data["spans"] = [{"raw": st(0.2).to_dict(), "ms": 0.2, **span}]
    (tmp_path / "lut.json").write_text(json.dumps(data))
    with pytest.raises(LatoptError, match=rf"lut\.json is corrupt: .*{match}") as e:
        load_lut(tmp_path / "lut.json")
    assert "\n" not in str(e.value)
    data["spans"] = [{"start": 0, "end": 1, "kernel": 1, "raw": st(0.2).to_dict(), "ms": 0.2}]
    (tmp_path / "ok.json").write_text(json.dumps(data))
    lut = load_lut(tmp_path / "ok.json")
    assert predict(lut, {0: "full", 1: "full"}, [(0, 1, 1)]) == pytest.approx(1.0 + 0.2 + 0.25)
    with pytest.raises(LatoptError, match="span 0-1 as a 3x3"):
        predict(lut, {0: "full", 1: "full"}, [(0, 1, 3)])


def test_load_lut_takes_any_spelling_of_its_model(tmp_path) -> None:
    # a LUT records the name it was profiled with, a checkpoint the canonical one (defaults dropped): the two
    # spellings of torchvision's MobileNetV2 at width 1.0 are one model, a different width is not
    lut = make_lut().model_copy(update={"model": "torchvision/mobilenet_v2?width=1.0"})
    path = save_lut(lut, tmp_path / "lut.json")
    assert load_lut(path, model="torchvision/mobilenet_v2").model == "torchvision/mobilenet_v2?width=1.0"
    assert load_lut(path, model="torchvision/mobilenet_v2?width=1").resolution == 224
    with pytest.raises(LatoptError, match=r"width=1\.0', not '.*width=0\.5'"):
        load_lut(path, model="torchvision/mobilenet_v2?width=0.5")


def test_check_plan_takes_any_spelling_of_its_model(tmp_path) -> None:
    # a plan file records the LUT's model name; the checkpoint the canonical one
    from latopt.dp.planfile import PlanRecord, check_plan

    plan = PlanRecord.model_construct(model="torchvision/mobilenet_v2?width=1.0", resolution=32, num_classes=10)
    check_plan(plan, tmp_path / "p.json", model="torchvision/mobilenet_v2", resolution=32, num_classes=10)
    with pytest.raises(LatoptError, match="was made for model"):
        check_plan(plan, tmp_path / "p.json", model="torchvision/mobilenet_v2?width=0.5", resolution=32,
                   num_classes=10)
