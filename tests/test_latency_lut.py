"""LUT: schema round trip, predict, c_l, variant times, calibration, load_lut mismatch errors."""

from __future__ import annotations

import json

import pytest

from latopt.errors import LatoptError
from latopt.latency.lut import (
    LUT,
    LUT_SCHEMA,
    BlockEntry,
    calibrate,
    costs,
    default_lut_path,
    load_lut,
    predict,
    save_lut,
    variant_times,
)
from latopt.latency.timing import TimingStats


def st(ms: float) -> TimingStats:
    return TimingStats(ms, ms * 0.9, ms * 1.1, ms * 0.2, 40, ms * 1.5)


def make_lut() -> LUT:
    blocks = [
        BlockEntry(0, "blocks.0.0", "timm.DepthwiseSeparableConv", (1, 32, 112, 112), True, "",
                   {"none": st(0.4), "full": st(0.8)}, {"none": 0.4, "full": 0.8}),
        BlockEntry(1, "blocks.1.0", "timm.InvertedResidual", (1, 16, 112, 112), True, "",
                   {v: st(t) for v, t in {"none": 0.7, "full": 0.3, "expand_dw": 0.5, "dw_project": 0.6}.items()},
                   {"none": 0.7, "full": 0.3, "expand_dw": 0.5, "dw_project": 0.6}),
        BlockEntry(2, "blocks.2.0", "timm.InvertedResidual", (1, 24, 56, 56), False, "squeeze-excitation",
                   {"none": st(0.25)}, {"none": 0.25}),
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


@pytest.mark.parametrize("partial,variants", [(True, ("full", "expand_dw", "dw_project")), (False, ("full",)),
                                              (None, ("full",))])
def test_lut_written_before_variants_loads(tmp_path, partial, variants) -> None:
    """A LUT older than the fold variants has ``partial`` (or nothing) instead of ``variants``."""
    data = make_lut().to_dict()
    del data["variants"]
    if partial is not None:
        data["partial"] = partial
    (tmp_path / "old.json").write_text(json.dumps(data))
    lut = load_lut(tmp_path / "old.json")
    assert lut.variants == variants and lut.partial == bool(partial)


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
    with pytest.raises(LatoptError, match="no time for block 0 in variant 'expand_dw'.*--variants full,expand_dw"):
        predict(lut, {0: "expand_dw"})
    with pytest.raises(LatoptError, match="fold set 'some'"):
        predict(lut, "some")


def test_load_lut_errors(tmp_path) -> None:
    path = save_lut(make_lut(), tmp_path / "lut.json")
    with pytest.raises(LatoptError, match="profiled for model 'mobilenetv2_100', not 'efficientnet_lite0'"):
        load_lut(path, model="efficientnet_lite0")
    with pytest.raises(LatoptError, match="resolution 224, not 160.*latopt profile .*--resolution 160"):
        load_lut(path, resolution=160)
    with pytest.raises(LatoptError, match="batch 1, not 8"):
        load_lut(path, batch=8)
    # a LUT of exact folds (bias maps timed) used to fold in paper mode, or the reverse
    with pytest.raises(LatoptError, match="fold_mode 'exact', not 'paper'.*--fold-mode paper"):
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


# ----------------------------------------------------------------------------- malformed LUTs
def _set(d: dict, path: tuple, value) -> dict:  # type: ignore[no-untyped-def]
    node = d
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return d


@pytest.mark.parametrize("path,value,match", [
    (("blocks", 1, "ms", "full"), -0.3, r"block 1 variant 'full' ms is -0.3; times must be finite numbers >= 0"),
    (("blocks", 0, "ms", "none"), float("nan"), r"block 0 variant 'none' ms is nan"),
    (("blocks", 1, "raw", "expand_dw", "median_ms"), float("inf"), r"block 1 variant 'expand_dw' raw median_ms is inf"),
    (("blocks", 2, "raw", "none", "q1_ms"), -1, r"block 2 variant 'none' raw q1_ms is -1"),
    (("fixed_ms",), float("-inf"), r"LUT fixed_ms is -inf"),
    (("fixed", "stem", "iqr_ms"), float("nan"), r"LUT fixed\['stem'\] iqr_ms is nan"),
    (("call_overhead_ms",), -0.01, r"LUT call_overhead_ms is -0.01"),
    (("profiling_s",), "1.0", r"LUT profiling_s is '1.0'"),
    (("blocks", 1, "ms", "none"), 10**400, r"block 1 variant 'none' ms is 1000"),  # too large for a float
    (("blocks",), [], r"LUT: blocks must be a non-empty list, not \[\]"),
    (("blocks",), {"0": {}}, r"LUT: blocks must be a non-empty list"),
    (("blocks", 2, "index"), 1, r"LUT: block index 1 appears twice \(blocks\[2\]\)"),
    (("blocks", 1, "index"), "1", r"blocks\[1\]: index must be an integer >= 0, not '1'"),
    (("blocks", 1, "index"), -1, r"blocks\[1\]: index must be an integer >= 0, not -1"),
    (("blocks", 0), "block", r"blocks\[0\] must be a mapping, not 'block'"),
    (("blocks", 0, "input_shape"), [1, -3, 4], r"block 0: input_shape must be a non-empty list of positive integers"),
    (("blocks", 0, "foldable"), "yes", r"block 0: foldable must be true or false, not 'yes'"),
    (("blocks", 2, "foldable"), True, r"block 2: foldable but ms has no time for variant 'full'"),
    (("blocks", 0, "path"), None, r"block 0: path must be a string, not None"),
    (("blocks", 0, "ms"), [0.4], r"block 0 ms must be a mapping, not \[0.4\]"),
    (("blocks", 0, "ms", "half"), 0.1, r"block 0: ms has unknown variant 'half'"),
    (("blocks", 1, "raw", "full", "n"), 0, r"block 1 variant 'full' raw: n must be an integer >= 1, not 0"),
    (("resolution",), "224", r"LUT: resolution must be an integer >= 1, not '224'"),
    (("batch",), 0, r"LUT: batch must be an integer >= 1, not 0"),
    (("device",), 5, r"LUT: device must be a non-empty string, not 5"),
    (("fold_mode",), "fast", r"LUT: fold_mode must be one of exact, paper, not 'fast'"),
    (("variants",), "full", r"LUT: variants must be a list of variant names, not 'full'"),
    (("variants",), ["full", "half"], r"LUT: variants: unknown variant 'half'"),
    (("fixed",), [1], r"LUT fixed must be a mapping"),
    (("end_to_end", "asis"), 3, r"LUT end_to_end\['asis'\] must be a mapping, not 3"),
])
def test_malformed_lut_is_one_line_naming_the_field(tmp_path, path, value, match) -> None:
    data = _set(make_lut().to_dict(), path, value)
    (tmp_path / "lut.json").write_text(json.dumps(data))
    with pytest.raises(LatoptError, match=rf"latency LUT .*lut\.json is corrupt: {match}") as e:
        load_lut(tmp_path / "lut.json")
    assert "\n" not in str(e.value) and str(e.value).endswith("re-create it with latopt profile")


def test_lut_without_as_is_time_or_required_field(tmp_path) -> None:
    data = make_lut().to_dict()
    del data["blocks"][1]["ms"]["none"]
    with pytest.raises(LatoptError, match=r"block 1: ms has no time for variant 'none'"):
        LUT.from_dict(data)
    data = make_lut().to_dict()
    del data["blocks"][0]["raw"]["none"]["median_ms"]
    with pytest.raises(LatoptError, match=r"block 0 variant 'none' raw: missing field 'median_ms'"):
        LUT.from_dict(data)
    with pytest.raises(LatoptError, match=r"LUT must be a mapping"):
        LUT.from_dict([])


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
                lut = LUT.from_dict(data)
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


@pytest.mark.parametrize("edit", ["drop-middle", "drop-last", "index-999", "no-raw"])
def test_a_lut_must_time_every_block_of_its_model(tmp_path, edit) -> None:
    # a LUT with a block missing (or renumbered out of range, or without its measured times) was accepted:
    # export --fold auto / fold / search then silently treated the missing blocks as free to keep
    data = make_lut().to_dict()
    if edit == "drop-middle":
        del data["blocks"][1]
    elif edit == "drop-last":
        del data["blocks"][-1]
    elif edit == "index-999":
        data["blocks"][-1]["index"] = 999
    else:
        del data["blocks"][0]["raw"]
    (tmp_path / "lut.json").write_text(json.dumps(data))
    if edit == "drop-last":   # indices still 0..n-1: only the model says a block is missing
        load_lut(tmp_path / "lut.json")
        data["model"] = "mobilenetv2_035"
        (tmp_path / "lut.json").write_text(json.dumps(data))
    with pytest.raises(LatoptError) as e:
        load_lut(tmp_path / "lut.json", model="mobilenetv2_035" if edit == "drop-last" else None)
    assert "\n" not in str(e.value)
