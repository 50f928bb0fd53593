"""Hostile input (issue 29): every JSON file latopt reads back is strict (a key given twice, NaN, Infinity, a
number that overflows to infinity, a directory for a file: one error line each), a plan file is one validated
record (:class:`latopt.dp.planfile.PlanRecord`: unknown fields refused, every field typed and bounded, span
indices bounded before anything is expanded), and a span's recorded kernel is checked at export against what
its blocks compose to. Tiny: test_dp's MobileNetV2-0.35 at 16 px (17 blocks); nothing is trained."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from latopt.cli import main
from latopt.config import load_config
from latopt.dp import plan_only, read_plan, write_plan
from latopt.errors import LatoptError
from latopt.export.shipped import build_plan
from latopt.files.checkpoint import CheckpointMeta, FoldHow, load_checkpoint, make_arch, save_checkpoint
from latopt.files.readers import read_json
from latopt.latency.lut import save_lut
from latopt.nets.models import build_model
from latopt.rewrite import fold_blocks
from tests.test_dp import MODEL, TINY, _lut_for, _with_spans

N_BLOCKS = 17  # MODEL's blocks


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A plan with spans (uniform importance: no training) and an untrained base checkpoint of its network."""
    root = tmp_path_factory.mktemp("hostile")
    lut = save_lut(_with_spans(_lut_for(MODEL, 16), MODEL, 16), root / "lut.json")
    plan = plan_only(load_config("quickstart", TINY), lut, budget=0.45, importance="uniform", progress=False)
    assert plan.spans and len(plan.blocks) == N_BLOCKS
    model = build_model(MODEL, 10).eval()
    ckpt = save_checkpoint(root / "base.pt", model, make_arch(model, MODEL, 10), CheckpointMeta(resolution=16))
    return {"root": root, "record": plan, "plan": plan.to_json(), "ckpt": ckpt}


def _write(path: Path, data: dict[str, Any]) -> Path:
    """A plan file holding ``data`` as it is (the writer, write_plan, takes only a valid PlanRecord)."""
    path.write_text(json.dumps(data))
    return path


def _plan_error(path: Path) -> str:
    """read_plan's one error line for ``path`` (a LatoptError about the plan, naming the file)."""
    with pytest.raises(LatoptError) as e:
        read_plan(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and e.value.param == "plan", (msg, e.value.param)
    return msg


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.startswith("latopt: error: ") and err.count("\n") == 1, err
    return err


# ------------------------------------------------------------------------------------ read_json
@pytest.mark.parametrize("text, key", [('{"schema": "s", "blocks": {"0": "none"}, "blocks": {"0": "full"}}', "blocks"),
                                       ('{"a": [{"k": 1, "k": 1}]}', "k")])
def test_read_json_refuses_a_key_given_twice(tmp_path: Path, text: str, key: str) -> None:
    # json.loads keeps the last: a second "blocks" silently replaced the plan
    path = tmp_path / "f.json"
    path.write_text(text)
    with pytest.raises(LatoptError) as e:
        read_json(path, what="plan file")
    assert f"{key!r}" in str(e.value) and "twice" in str(e.value) and str(path) in str(e.value), str(e.value)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400", "-1E999"])
def test_read_json_refuses_nan_and_infinity(tmp_path: Path, literal: str) -> None:
    # json.loads took them (1e400 as inf): a NaN budget went on into an export.json strict parsers reject
    path = tmp_path / "f.json"
    path.write_text(f'{{"budget": {literal}}}')
    with pytest.raises(LatoptError) as e:
        read_json(path)
    assert literal in str(e.value) and str(path) in str(e.value), str(e.value)


@pytest.mark.parametrize("path, value, field", [
    (("blocks", 0, "ms", "none"), float("nan"), "blocks[0].ms.none"),
    (("blocks", 1, "raw", "expand_dw", "median_ms"), float("inf"), "blocks[1].raw.expand_dw.median_ms"),
    (("fixed_ms",), float("-inf"), "fixed_ms"),
    (("fixed", "stem", "iqr_ms"), float("nan"), "fixed.stem.iqr_ms"),
])
def test_a_lut_with_nan_or_infinity_is_refused_naming_the_field(tmp_path: Path, path: tuple, value: float,
                                                                field: str) -> None:
    # these were test_latency_lut's "must be a finite number" cases: the JSON reader now refuses them first
    from latopt.latency.lut import load_lut
    from tests.test_latency_lut import _set, make_lut

    (tmp_path / "lut.json").write_text(json.dumps(_set(make_lut().to_dict(), path, value)))
    with pytest.raises(LatoptError) as e:
        load_lut(tmp_path / "lut.json")
    literal = json.dumps(value)  # NaN, Infinity, -Infinity
    assert f"field {field!r} is {literal}" in str(e.value) and "not a finite number" in str(e.value), str(e.value)
    assert str(e.value).startswith(f"latency LUT {tmp_path / 'lut.json'}") and "\n" not in str(e.value)


def test_read_json_says_a_directory_is_a_directory(tmp_path: Path) -> None:
    with pytest.raises(LatoptError) as e:
        read_json(tmp_path, what="plan file")
    assert "is a directory" in str(e.value) and "does not exist" not in str(e.value), str(e.value)
    with pytest.raises(LatoptError, match="does not exist"):
        read_json(tmp_path / "missing.json")


def test_read_json_refuses_a_huge_integer_in_one_line(tmp_path: Path) -> None:
    # beyond Python's 4300 digits int() raised a ValueError that escaped as a traceback
    path = tmp_path / "f.json"
    path.write_text('{"resolution": ' + "9" * 5000 + "}")
    with pytest.raises(LatoptError) as e:
        read_json(path)
    assert "5000 digits" in str(e.value) and len(str(e.value)) < 600, str(e.value)[:300]


# ------------------------------------------------------------------------------------ the plan record
def test_read_plan_returns_the_plan_as_written(tiny: dict[str, Any], tmp_path: Path) -> None:
    path = write_plan(tmp_path / "plan.json", tiny["record"])
    got = read_plan(path)
    assert got == tiny["record"] and got.to_json() == json.loads(path.read_text()) == tiny["plan"]
    assert got.changed == tiny["record"].changed and got.lut.device == "cpu"


def _with(plan: dict[str, Any], edit: Any) -> dict[str, Any]:
    out = copy.deepcopy(plan)
    edit(out)
    return out


def _rekey(blocks: dict[str, str], old: str, new: str) -> None:
    blocks[new] = blocks.pop(old)


HOSTILE = [  # (id, edit of a good plan, what the error line must name)
    ("lut a list", lambda p: p.update(lut=[]), "lut"),
    ("lut a string", lambda p: p.update(lut="cpu"), "lut"),
    ("lut device a number", lambda p: p["lut"].update(device=3), "lut.device"),
    ("lut sha256 not hex", lambda p: p["lut"].update(sha256="xyz"), "lut.sha256"),
    ("superscript two key", lambda p: _rekey(p["blocks"], "2", "²"), "blocks"),
    ("arabic-indic three key", lambda p: p["blocks"].update({"٣": "drop"}), "blocks"),
    ("leading zero key", lambda p: _rekey(p["blocks"], "3", "03"), "blocks"),
    ("signed key", lambda p: _rekey(p["blocks"], "3", "+3"), "blocks"),
    ("negative key", lambda p: _rekey(p["blocks"], "16", "-1"), "blocks"),
    ("spaced key", lambda p: _rekey(p["blocks"], "3", " 3"), "blocks"),
    ("key out of range", lambda p: _rekey(p["blocks"], "16", "17"), "blocks"),
    ("huge key", lambda p: _rekey(p["blocks"], "16", "9" * 5000), "blocks"),
    ("missing block", lambda p: p["blocks"].pop("5"), "blocks"),
    ("no blocks", lambda p: p.update(blocks={}), "blocks"),
    ("unknown variant", lambda p: p["blocks"].update({"0": "sideways"}), "blocks.0"),
    ("nested junk", lambda p: p["blocks"].update({"0": {"a": [[[]]]}}), "blocks.0"),
    ("budget negative", lambda p: p.update(budget=-0.5), "budget"),
    ("budget zero", lambda p: p.update(budget=0), "budget"),
    ("budget over 1", lambda p: p.update(budget=1.5), "budget"),
    ("budget a string", lambda p: p.update(budget="0.45"), "budget"),
    ("budget a bool", lambda p: p.update(budget=True), "budget"),
    ("span far beyond the blocks", lambda p: p.update(spans=[[0, 10**12, 1]]), "spans"),
    ("span starting beyond", lambda p: p.update(spans=[[10**12, 10**12 + 1, 1]]), "spans"),
    ("span end = start", lambda p: p.update(spans=[[3, 3, 1]]), "spans"),
    ("span backwards", lambda p: p.update(spans=[[5, 3, 1]]), "spans"),
    ("span of 4 numbers", lambda p: p.update(spans=[[0, 1, 1, 1]]), "spans"),
    ("span a mapping", lambda p: p.update(spans=[{"start": 0, "end": 3}]), "spans"),
    ("span index a bool", lambda p: p.update(spans=[[False, True, 1]]), "spans"),
    ("kernel 0", lambda p: p["spans"][0].__setitem__(2, 0), "spans"),
    ("kernel even", lambda p: p["spans"][0].__setitem__(2, 2), "spans"),
    ("kernel negative", lambda p: p["spans"][0].__setitem__(2, -1), "spans"),
    ("kernel huge", lambda p: p["spans"][0].__setitem__(2, 10**6 + 1), "spans"),
    ("kernel a float", lambda p: p["spans"][0].__setitem__(2, 1.0), "spans"),
    ("spans overlap", lambda p: p.update(spans=[[0, 2, 1], [2, 3, 1]]), "spans"),
    ("span over an as-is block", lambda p: p["blocks"].update({str(p["spans"][0][0]): "none"}), "spans"),
    ("unknown field", lambda p: p.update(blockz={}), "blockz"),
    ("predicted missing", lambda p: p.pop("predicted"), "predicted"),
    ("predicted negative", lambda p: p["predicted"].update(ms=-1.0), "predicted.ms"),
    ("predicted inconsistent", lambda p: p["predicted"].update(speedup=100.0), "predicted"),
    ("importance unknown", lambda p: p.update(importance="finetune"), "importance"),
    ("variant list junk", lambda p: p.update(variants=["sideways"]), "variants"),
    ("block variant not allowed", lambda p: p.update(variants=["full"]), "blocks"),
    ("fold modes differ", lambda p: p.update(fold_mode="paper"), "fold_mode"),
    ("model empty", lambda p: p.update(model=""), "model"),
    ("model a megabyte", lambda p: p.update(model="m" * 10**6), "model' must have at most 200 characters"),
    ("resolution huge", lambda p: p.update(resolution=10**30), "resolution"),
    ("resolution a bool", lambda p: p.update(resolution=True), "resolution"),
    ("num_classes 0", lambda p: p.update(num_classes=0), "num_classes"),
    ("selection a list", lambda p: p.update(selection=[1]), "selection"),
    ("losses of a bad block", lambda p: p["losses"].update({"٣": {"none": 0.0}}), "losses"),
    ("losses junk", lambda p: p["losses"].update({"0": {"none": "x"}}), "losses.0.none"),
]


@pytest.mark.parametrize("edit, field", [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_read_plan_refuses_a_hostile_field(tiny: dict[str, Any], tmp_path: Path, edit: Any, field: str) -> None:
    # before: a list or string lut was an AttributeError at export, "²" passed isdigit() and int() raised, "٣"
    # silently overrode block 3, a NaN/negative budget passed, [0, 10**12, 1] was expanded with range() (out of
    # memory), any kernel >= 0 passed, unknown fields were ignored
    path = _write(tmp_path / "plan.json", _with(tiny["plan"], edit))
    msg = _plan_error(path)
    assert f"'{field}" in msg and "re-create it" in msg, msg


def test_fuzzed_plan_is_read_or_refused_in_one_line(tiny: dict[str, Any], tmp_path: Path) -> None:
    """Every field of a plan replaced by every kind of junk (or deleted): read_plan returns a plan whose
    consumers work, or refuses in one LatoptError line; never another exception."""
    from latopt.dp import check_plan, format_plan_summary
    from tests.test_latency_lut import _leaves

    junk = [None, True, -1, 0, 1.5, 10**30, "", "x", "٣", [], [1], {}, {"a": 1}, "<delete>"]
    path, cases, refused = tmp_path / "plan.json", 0, 0
    for leaf in list(_leaves(tiny["plan"])):
        for value in junk:
            data = copy.deepcopy(tiny["plan"])
            parent = data
            for k in leaf[:-1]:
                parent = parent[k]
            if value == "<delete>":
                del parent[leaf[-1]]
            else:
                parent[leaf[-1]] = value
            path.write_text(json.dumps(data))
            cases += 1
            try:
                plan = read_plan(path)
            except LatoptError as e:
                assert "\n" not in str(e) and e.param == "plan", str(e)
                refused += 1
                continue
            _ = plan.changed
            format_plan_summary(plan, path)
            try:
                check_plan(plan, path, model=MODEL, resolution=16, num_classes=10)
            except LatoptError:
                pass
    assert cases > 1000 and 0 < refused < cases, (cases, refused)


@pytest.mark.parametrize("text, what", [(lambda t: t.replace('"blocks": {', '"blocks": {}, "blocks": {', 1), "'blocks'"),
                                        (lambda t: t.replace('"budget": 0.45', '"budget": NaN', 1), "NaN"),
                                        (lambda t: t.replace('"budget": 0.45', '"budget": 1e999', 1), "1e999")])
def test_a_plan_file_with_a_key_twice_or_nan_is_one_line_from_export(tiny: dict[str, Any], tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str],
                                                                    text: Any, what: str) -> None:
    path = tmp_path / "plan.json"
    good = json.dumps(tiny["plan"])
    path.write_text(text(good))
    assert path.read_text() != good
    out = tmp_path / "e"
    assert main(["export", "--checkpoint", str(tiny["ckpt"]), "--plan", str(path), "--no-measure",
                 "--no-accuracy-gate", "--out", str(out), "-q"]) == 2
    err = _one_error_line(capsys)
    assert what in err and str(path) in err, err
    assert not out.exists()


def test_export_says_a_plan_directory_is_a_directory(tiny: dict[str, Any], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "--checkpoint", str(tiny["ckpt"]), "--plan", str(tmp_path), "--no-measure",
                 "--no-accuracy-gate", "--out", str(tmp_path / "e"), "-q"]) == 2
    assert "is a directory" in _one_error_line(capsys)


# ------------------------------------------------------------------------------------ span kernels at export
def _forged(kernel: int) -> int:
    return 7 if kernel != 7 else 5


def test_export_refuses_a_plan_whose_span_kernel_is_not_what_its_blocks_compose_to(
        tiny: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # before: the forged kernel went into export.json, REPORT.md and the prediction; the ONNX shipped the real one
    a, b, k = tiny["plan"]["spans"][0]
    forged = _with(tiny["plan"], lambda p: p["spans"][0].__setitem__(2, _forged(k)))
    path = _write(tmp_path / "plan.json", forged)
    assert read_plan(path).spans[0] == [a, b, _forged(k)]  # well-formed: only the network tells
    out = tmp_path / "e"
    assert main(["export", "--checkpoint", str(tiny["ckpt"]), "--plan", str(path), "--no-measure",
                 "--no-accuracy-gate", "--out", str(out), "-q"]) == 2
    err = _one_error_line(capsys)
    assert f"span {a}-{b}" in err and f"{_forged(k)}x{_forged(k)}" in err and f"{k}x{k}" in err, err
    assert "(option --plan)" in err and not out.exists()


def test_build_plan_checks_the_span_kernels_of_a_plan_and_of_a_folded_checkpoint(tiny: dict[str, Any],
                                                                                tmp_path: Path) -> None:
    plan = tiny["record"]
    loaded = load_checkpoint(tiny["ckpt"])
    variants = plan.changed
    good = build_plan(tiny["ckpt"], loaded, fold=variants, lut=None, res=16, spans=plan.spans)
    assert good.spans == plan.spans
    for a, b, k in plan.spans:
        spans = [[x, y, _forged(k) if (x, y) == (a, b) else z] for x, y, z in plan.spans]
        with pytest.raises(LatoptError) as e:
            build_plan(tiny["ckpt"], load_checkpoint(tiny["ckpt"]), fold=variants, lut=None, res=16, spans=spans)
        assert f"span {a}-{b}" in str(e.value) and e.value.param == "plan", str(e.value)
    # a folded checkpoint's recorded spans (arch.fold.spans) are checked the same way
    a, b, k = plan.spans[0]
    folded = fold_blocks(build_model(MODEL, 10).eval(), variants, mode="exact", input_size=(16, 16)).eval()
    fold = FoldHow("exact", [16, 16], [[a, b, _forged(k)]])
    ckpt = save_checkpoint(tmp_path / "folded.pt", folded, make_arch(folded, MODEL, 10, fold=fold), CheckpointMeta(resolution=16))
    with pytest.raises(LatoptError) as e:
        build_plan(ckpt, load_checkpoint(ckpt), fold=None, lut=None, res=16)
    assert f"span {a}-{b}" in str(e.value) and e.value.param == "checkpoint", str(e.value)
