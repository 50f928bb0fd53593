"""How each kind of artefact is mutated: the mutation helpers and the tables, one per kind."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import json
import os
import pickle
import random
import shutil
import sqlite3
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from .files import load_pt
from .fixtures import RunsOnUnpickle, make_cifar

NAN, INF = float("nan"), float("inf")


# A mutation writes the mutated artefact to ``dst`` from the fixture ``src``: ``apply(draw, src, dst, ctx)``,
# where ``draw`` is hypothesis' ``data.draw`` and ``ctx`` holds the case's paths (marker, jail, ...).
# ``refuse``: the command must not exit 0: True / False / "auto" (when torch cannot read the mutated
# checkpoint or its tensors differ from the original's) / a tuple of the commands (CHECKS keys) that must.
@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    apply: Callable[..., None]
    refuse: bool | str | tuple[str, ...] = False
    sources: tuple[str, ...] = ()        # fixture names it applies to (checkpoints: base/folded/folded_nothing)


Draw = Callable[..., Any]
JUNK = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                 st.text(max_size=12), st.lists(st.integers(-3, 3), max_size=3),
                 st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))
BAD_TIMES = st.sampled_from([-1.0, -1e-6, NAN, INF, -INF])
NOT_NUMBERS = st.sampled_from([None, [], {}, "x", "NaN"])
PATH_NAMES = ["../../x", "../../../x", "a/b", "..", ".", "", "x\x00y", "{abs}"]
OTHER_MODELS = ["mobilenetv2_050", "torchvision/mobilenet_v2?width=0.25", "efficientnet_lite0"]


def _ctx_value(v: Any, ctx: dict[str, Any]) -> Any:
    return str(ctx["jail"] / "escaped") if v == "{abs}" else v


def _walk(obj: Any, path: tuple, draw: Draw) -> tuple[Any, Any]:
    """(container, key) at ``path`` in ``obj``; "*" picks any index/key, a strategy draws the key."""
    for i, key in enumerate(path):
        if isinstance(key, st.SearchStrategy):
            key = draw(key)
        elif key == "*":
            keys = list(range(len(obj))) if isinstance(obj, list) else sorted(obj)
            key = draw(st.sampled_from(keys))
        if i == len(path) - 1:
            return obj, key
        obj = obj[key]
    raise ValueError("empty path")


def set_field(path: tuple, values: st.SearchStrategy) -> Callable[[Draw, Any, dict], Any]:
    def fn(draw: Draw, obj: Any, ctx: dict) -> Any:
        container, key = _walk(obj, path, draw)
        container[key] = _ctx_value(draw(values), ctx)
        return obj
    return fn


def del_field(path: tuple) -> Callable[[Draw, Any, dict], Any]:
    def fn(draw: Draw, obj: Any, ctx: dict) -> Any:
        container, key = _walk(obj, path, draw)
        del container[key]
        return obj
    return fn


def re_sign(obj: Any) -> Any:
    """``obj`` with its ``sha256`` recomputed by the checkout's own ``checkpoint_digest`` (as a tool that
    rewrites checkpoints would), when it has one and the payload's parts are of types the digest takes;
    otherwise as it is (the stale digest stays)."""
    try:
        from latopt.nets.models import checkpoint_digest
    except ImportError:       # a checkout without digests
        return obj
    if isinstance(obj, dict) and "sha256" in obj:
        with contextlib.suppress(Exception):
            obj["sha256"] = checkpoint_digest(obj["arch"], obj.get("meta") or {}, obj["state_dict"])
    return obj


def torch_payload(fn: Callable[[Draw, Any, dict], Any], sign: bool = True) -> Callable[..., None]:
    """A mutation of the dict a checkpoint holds (loaded with weights_only, saved with torch.save).

    ``sign``: the edited payload gets a digest that matches it (:func:`re_sign`), so the edit reaches the
    checks behind the digest; without, it models damage the digest itself must catch."""
    def apply(draw: Draw, src: Path, dst: Path, ctx: dict) -> None:
        import torch

        obj = fn(draw, load_pt(src), ctx)
        torch.save(re_sign(obj) if sign else obj, dst)
    return apply


def json_doc(fn: Callable[[Draw, Any, dict], Any]) -> Callable[..., None]:
    def apply(draw: Draw, src: Path, dst: Path, ctx: dict) -> None:
        dst.write_text(json.dumps(fn(draw, json.loads(src.read_text()), ctx), indent=1))
    return apply


def yaml_doc(fn: Callable[[Draw, Any, dict], Any]) -> Callable[..., None]:
    def apply(draw: Draw, src: Path, dst: Path, ctx: dict) -> None:
        dst.write_text(yaml.safe_dump(fn(draw, yaml.safe_load(src.read_text()), ctx)))
    return apply


def raw_bytes(fn: Callable[[Draw, bytes, dict], bytes]) -> Callable[..., None]:
    def apply(draw: Draw, src: Path, dst: Path, ctx: dict) -> None:
        dst.write_bytes(fn(draw, src.read_bytes(), ctx))
    return apply


def text(values: list[str | bytes]) -> Callable[..., None]:
    """Replace the whole file with one of ``values`` ({marker} is the case's marker path)."""
    def apply(draw: Draw, src: Path, dst: Path, ctx: dict) -> None:
        v = draw(st.sampled_from(values))
        dst.write_bytes(v if isinstance(v, bytes) else v.replace("{marker}", str(ctx["marker"])).encode())
    return apply


def unchanged(draw: Draw, src: Path, dst: Path, ctx: dict) -> None:
    shutil.copyfile(src, dst)


def not_a_file(draw: Draw, src: Path, dst: Path, ctx: dict) -> None:
    how = draw(st.sampled_from(["directory", "missing", "dangling symlink", "symlink loop"]))
    if how == "directory":
        dst.mkdir()
    elif how == "dangling symlink":
        dst.symlink_to(dst.parent / "nowhere")
    elif how == "symlink loop":
        dst.symlink_to(dst)


# --- byte-level helpers
def truncate(draw: Draw, data: bytes, ctx: dict) -> bytes:
    return data[:draw(st.integers(0, max(0, len(data) - 1)))]


def flip_bytes(draw: Draw, data: bytes, ctx: dict) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 8))):
        i = draw(st.integers(0, len(out) - 1))
        out[i] ^= draw(st.integers(1, 255))
    return bytes(out)


def overwrite_region(draw: Draw, data: bytes, ctx: dict) -> bytes:
    start_at = draw(st.integers(0, max(0, len(data) - 1)))
    n = draw(st.integers(1, 4096))
    return data[:start_at] + random.Random(start_at).randbytes(n) + data[start_at + n:]


def deep_nesting(opener: str, closer: str) -> str:
    return opener * 100_000 + closer * 100_000


# --- checkpoint (torch zip) helpers
def tensor_op(op: str, floating: bool = False) -> Callable[[Draw, Any, dict], Any]:
    """Change one state_dict tensor (``floating``: a floating-point one): values, one element, NaN/inf, shape
    or dtype."""
    def fn(draw: Draw, obj: Any, ctx: dict) -> Any:
        import torch

        sd = obj["state_dict"]
        key = draw(st.sampled_from(sorted(k for k, v in sd.items() if v.numel() > 0
                                          and (v.is_floating_point() or not floating))))
        t = sd[key].clone()
        if op == "values":
            t = torch.randn(t.shape, generator=torch.Generator().manual_seed(draw(st.integers(0, 9)))).to(t.dtype) \
                if t.is_floating_point() else t + 1
        elif op == "nudge":
            i = draw(st.integers(0, t.numel() - 1))
            flat = t.view(-1)
            flat[i] = torch.nextafter(flat[i], torch.tensor(INF, dtype=t.dtype)) if t.is_floating_point() else flat[i] + 1
        elif op == "nonfinite" and t.is_floating_point():
            t.view(-1)[draw(st.integers(0, t.numel() - 1))] = draw(st.sampled_from([NAN, INF, -INF]))
        elif op == "nonfinite":
            t = t.double() * NAN
        elif op == "shape":
            flat = t.reshape(-1)
            shapes = {"flatten": flat, "drop one": flat[:-1], "scalar": flat[0], "add one": torch.cat([flat, flat[:1]])}
            reshaped = shapes[draw(st.sampled_from(sorted(shapes)))]
            t = reshaped if reshaped.shape != t.shape else shapes["add one"]   # flattening a vector changes nothing
        elif op == "dtype":
            t = t.to(draw(st.sampled_from([torch.float64, torch.float16, torch.int32, torch.bool, torch.complex64])))
        sd[key] = t
        return obj
    return fn


def state_dict_keys(draw: Draw, obj: Any, ctx: dict) -> Any:
    import torch

    sd = obj["state_dict"]
    key = draw(st.sampled_from(sorted(sd)))
    how = draw(st.sampled_from(["remove", "rename", "add"]))
    if how == "remove":
        del sd[key]
    elif how == "rename":
        sd[key + "_"] = sd.pop(key)
    else:
        sd["extra.weight"] = torch.zeros(3)
    return obj


def pickle_global_in_meta(draw: Draw, obj: Any, ctx: dict) -> Any:
    obj["meta"]["note"] = RunsOnUnpickle(ctx["marker"])
    return obj


def pickle_global_file(draw: Draw, src: Path, dst: Path, ctx: dict) -> None:
    import torch

    how = draw(st.sampled_from(["zip", "legacy", "plain pickle"]))
    payload = {"schema": "latopt.checkpoint/1", "state_dict": {}, "x": RunsOnUnpickle(ctx["marker"])}
    if how == "zip":
        torch.save(payload, dst)
    elif how == "legacy":
        torch.save(payload, dst, _use_new_zipfile_serialization=False)
    else:
        dst.write_bytes(pickle.dumps(payload, protocol=2))


def zip_members(op: str) -> Callable[..., None]:
    """Rewrite the zip container: data.pkl replaced by junk, or one tensor record removed."""
    def apply(draw: Draw, src: Path, dst: Path, ctx: dict) -> None:
        with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
            names = zin.namelist()
            victim = draw(st.sampled_from(sorted(n for n in names if "/data/" in n))) if op == "drop record" else None
            for n in names:
                if n == victim:
                    continue
                data = zin.read(n)
                if op == "junk pickle" and n.endswith("/data.pkl"):
                    data = draw(st.sampled_from([b"", b"\x80\x02.", b"garbage", os.urandom(64), data[: len(data) // 2]]))
                zout.writestr(n, data)
    return apply


def tensor_record_bytes(draw: Draw, data: bytes, ctx: dict) -> bytes:
    """Flip bytes inside one stored tensor record (a silent corruption torch does not detect)."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        infos = [i for i in z.infolist() if "/data/" in i.filename and i.file_size > 0]
    info = draw(st.sampled_from(infos))
    h = info.header_offset
    name_len, extra_len = struct.unpack("<HH", data[h + 26:h + 30])
    at = h + 30 + name_len + extra_len + draw(st.integers(0, info.file_size - 1))
    out = bytearray(data)
    out[at] ^= draw(st.integers(1, 255))
    return bytes(out)


CKPTS = ("base", "folded", "folded_nothing")


def gate_fields(draw: Draw, obj: Any, ctx: dict) -> Any:
    """The metadata an accuracy gate could hinge on, edited away: a one-sample test split, no task, or no
    recorded accuracy (each once exported random weights with exit 0)."""
    meta = obj.get("meta") if isinstance(obj, dict) else None
    if isinstance(meta, dict):
        field = draw(st.sampled_from(["max_samples", "task", "test_acc"]))
        if field == "max_samples":
            meta["max_samples"] = 1
        else:
            meta.pop(field, None)
    return obj


def duplicate_key(draw: Draw, src: Path, dst: Path, ctx: dict) -> None:
    """The file with one of its top-level keys given again at its end (YAML's last-wins hid it)."""
    doc = yaml.safe_load(src.read_text())
    key = draw(st.sampled_from(sorted(k for k in doc if k == "name" or isinstance(doc[k], dict))))
    dst.write_text(src.read_text().rstrip("\n") + "\n" + yaml.safe_dump({key: doc[key]}))
CHECKPOINT = [
    Mutation("unchanged", unchanged, False, CKPTS),
    Mutation("schema: other value", torch_payload(set_field(("schema",), st.sampled_from(
        ["latopt.checkpoint/0", "latopt.mlp/1", "", None, 1]))), True, CKPTS),
    Mutation("arch: not a dict", torch_payload(set_field(("arch",), st.sampled_from([None, [], "x", 3]))), True, CKPTS),
    Mutation("arch: key removed", torch_payload(del_field(("arch", "*"))), "auto", CKPTS),
    Mutation("arch.model: another model", torch_payload(set_field(("arch", "model"), st.sampled_from(OTHER_MODELS))),
             True, CKPTS),
    Mutation("arch.model: junk", torch_payload(set_field(("arch", "model"), st.one_of(
        st.sampled_from(["", "../x", "torchvision/mobilenet_v2?width=nan", "mobilenetv2_035\x00"]), JUNK))), True, CKPTS),
    Mutation("arch.num_classes: wrong", torch_payload(set_field(("arch", "num_classes"), st.sampled_from(
        [0, -1, 11, 1000, 10**12, "10", 10.5, True, None, [10]]))), True, CKPTS),
    Mutation("arch.alpha: junk", torch_payload(set_field(("arch", "alpha"), st.sampled_from(
        [[], "block", 1, {"granularity": "block"}, {"granularity": "block", "blocks": "1"},
         {"granularity": "bogus", "blocks": [1]}, {"granularity": "block", "blocks": [999]},
         {"granularity": "block", "blocks": [-1]}, {"granularity": "block", "blocks": ["a"]},
         {"granularity": "block", "blocks": [1.5]}, {"granularity": "block", "blocks": [1]}]))), True, CKPTS),
    Mutation("arch.fold: junk", torch_payload(set_field(("arch", "fold"), st.sampled_from(
        [[], "exact", 1, {"mode": "exact"}, {"mode": "bogus", "plan": {"1": "full"}}, {"mode": "exact", "plan": []},
         {"mode": "exact", "plan": {"a": "full"}}, {"mode": "exact", "plan": {"1": "bogus"}},
         {"mode": "exact", "plan": {"999": "full"}}, {"mode": "exact", "plan": {"-1": "full"}},
         {"mode": "exact", "input_size": "x", "plan": {"1": "full"}},
         {"mode": "exact", "input_size": [0, 0], "plan": {"1": "full"}},
         {"mode": "exact", "input_size": [32], "plan": {"1": "full"}}]))), True, CKPTS),
    Mutation("arch.fold: removed", torch_payload(set_field(("arch", "fold"), st.just(None))), False, CKPTS),
    Mutation("meta: not a dict", torch_payload(set_field(("meta",), st.sampled_from([[], "x", 1, [1, 2]]))), False, CKPTS),
    Mutation("meta.resolution: junk", torch_payload(set_field(("meta", "resolution"), st.sampled_from(
        [0, -1, 7, "32", 32.5, None, 100000, 48, True]))), False, CKPTS),
    Mutation("meta.task: other", torch_payload(set_field(("meta", "task"), st.sampled_from(
        ["", "cifar10:/nonexistent", "imagefolder:", "bogus", 42, None, "digits-clutter", "../x"]))), False, CKPTS),
    Mutation("meta.max_samples/split_seed: junk", torch_payload(set_field(("meta", st.sampled_from(
        ["max_samples", "split_seed"])), st.sampled_from(
        [0, -1, "x", 1.5, 10**9, 8]))), False, CKPTS),
    # the export check compares the exported model's test accuracy with the recorded one
    Mutation("meta.test_acc: recorded accuracy changed", torch_payload(set_field(("meta", "test_acc"), st.sampled_from(
        [1.0, 0.99, -1.0, 2.0]))), False, ("base",)),
    Mutation("meta.acc: recorded accuracy changed", torch_payload(set_field(("meta", "acc"), st.sampled_from(
        [{"finetuned": 1.0}, {"finetuned": 0.99}, {"finetuned": -1.0}]))), False, ("folded", "folded_nothing")),
    Mutation("meta: recorded accuracy junk", torch_payload(set_field(("meta", st.sampled_from(["acc", "test_acc"])),
                                                                     st.sampled_from(["x", None, [], {}]))), False, CKPTS),
    Mutation("meta.prefold_checkpoint: other", torch_payload(set_field(("meta", "prefold_checkpoint"), st.sampled_from(
        ["/nonexistent.pt", "../x", 42, "{base}", "/dev/null"]))), False, ("folded",)),
    Mutation("tensor: values randomised", torch_payload(tensor_op("values"), sign=False), True, CKPTS),
    Mutation("tensor: one element moved by one ulp", torch_payload(tensor_op("nudge"), sign=False), True, CKPTS),
    Mutation("tensor: NaN/inf", torch_payload(tensor_op("nonfinite"), sign=False), True, CKPTS),
    # well-formed but wrong, the SHA-256 recomputed (a digest proves nothing about values or fields)
    # a weight or BN statistic (an integer buffer such as num_batches_tracked holds no NaN, and casting one
    # in does not change what the network computes)
    Mutation("tensor: NaN/inf, SHA recomputed", torch_payload(tensor_op("nonfinite", floating=True)), True, CKPTS),
    Mutation("meta: accuracy-gate fields removed or cut, SHA recomputed", torch_payload(gate_fields), ("export",),
             ("base",)),
    Mutation("tensor: shape changed", torch_payload(tensor_op("shape"), sign=False), True, CKPTS),
    Mutation("tensor: dtype changed", torch_payload(tensor_op("dtype"), sign=False), True, CKPTS),
    Mutation("state_dict: key removed/renamed/added", torch_payload(state_dict_keys), True, CKPTS),
    Mutation("state_dict: junk", torch_payload(set_field(("state_dict",), st.sampled_from([None, [], "x", {}, 1]))),
             True, CKPTS),
    Mutation("pickle: global in meta (marker)", torch_payload(pickle_global_in_meta), True, CKPTS),
    Mutation("pickle: global as the payload (marker)", pickle_global_file, True, ("base",)),
    Mutation("zip: tensor bytes flipped", raw_bytes(tensor_record_bytes), True, CKPTS),
    Mutation("zip: truncated", raw_bytes(truncate), "auto", CKPTS),
    Mutation("zip: random bytes flipped", raw_bytes(flip_bytes), "auto", CKPTS),
    Mutation("zip: data.pkl junk", zip_members("junk pickle"), True, CKPTS),
    Mutation("zip: a tensor record removed", zip_members("drop record"), True, CKPTS),
    Mutation("file: not a checkpoint", text(["", "not a checkpoint", "{}", b"PK\x03\x04", b"\x80\x02}q\x00.",
                                             b"\x00" * 4096]), True, ("base",)),
    Mutation("path: not a regular file", not_a_file, True, ("base",)),
]


# --- LUT
def lut_blocks(op: str) -> Callable[[Draw, Any, dict], Any]:
    def fn(draw: Draw, lut: Any, ctx: dict) -> Any:
        blocks = lut["blocks"]
        i = draw(st.integers(0, len(blocks) - 1))
        if op == "empty":
            lut["blocks"] = []
        elif op == "duplicate":
            blocks.insert(i, copy.deepcopy(blocks[draw(st.integers(0, len(blocks) - 1))]))
        elif op == "remove":
            del blocks[i]
        return lut
    return fn


LUT = [
    Mutation("unchanged", unchanged, False),
    Mutation("block time: negative/NaN/inf", json_doc(set_field(("blocks", "*", "ms", "none"), BAD_TIMES)), True),
    Mutation("block fold time: negative/NaN/inf", json_doc(set_field(("blocks", 1, "ms", "full"), BAD_TIMES)), True),
    Mutation("block time: not a number", json_doc(set_field(("blocks", "*", "ms", "none"), NOT_NUMBERS)), True),
    Mutation("measured median: negative/NaN/inf", json_doc(set_field(("blocks", "*", "raw", "none", "median_ms"),
                                                                     BAD_TIMES)), True),
    Mutation("fixed_ms: negative/NaN/inf", json_doc(set_field(("fixed_ms",), BAD_TIMES)), True),
    Mutation("blocks: empty", json_doc(lut_blocks("empty")), True),
    Mutation("blocks: duplicate index", json_doc(lut_blocks("duplicate")), True),
    Mutation("blocks: one missing", json_doc(lut_blocks("remove")), True),
    Mutation("block index: junk", json_doc(set_field(("blocks", "*", "index"), st.sampled_from(
        [-1, 999, 3.5, None, "x", [1]]))), True),
    Mutation("block key removed", json_doc(del_field(("blocks", "*", st.sampled_from(
        ["index", "ms", "raw", "foldable", "input_shape", "path", "kind"])))), True),
    Mutation("block: not a dict", json_doc(set_field(("blocks", "*"), st.sampled_from([None, [], "x", 1]))), True),
    Mutation("top-level key removed", json_doc(del_field((st.sampled_from(
        ["schema", "model", "resolution", "blocks", "fixed_ms"]),))), True),
    Mutation("resolution: junk", json_doc(set_field(("resolution",), st.sampled_from(
        ["x", None, [], {}, -32, 0]))), True),
    Mutation("model: another model", json_doc(set_field(("model",), st.sampled_from(OTHER_MODELS + [42, None]))), True),
    Mutation("resolution: another", json_doc(set_field(("resolution",), st.sampled_from([16, 64]))), True),
    Mutation("blocks: not a list", json_doc(set_field(("blocks",), st.sampled_from([None, {}, "x", 3]))), True),
    Mutation("schema: other", json_doc(set_field(("schema",), st.sampled_from(["latopt.lut/0", "", None]))), True),
    Mutation("not JSON", text(["", "{", "[]", "null", b"\xff\xfe", "{\"schema\": \"latopt.lut/1\"}",
                               deep_nesting("[", "]"), deep_nesting("{\"a\":", "}")]), True),
    Mutation("path: not a regular file", not_a_file, True),
]


# --- config (YAML)
CONFIG_TYPES = {  # dotted key -> values of the wrong type for it
    "data.resolution": ["32", 32.5, True, [32], {"a": 1}, None], "data.batch_size": ["64", 6.5, False, None],
    "data.max_samples": ["64", 6.5, True], "train.epochs": ["1", 1.5, True, None], "train.lr": ["0.1", True, [0.1], None],
    "fold.tau": ["0.5", False, None, {}], "fold.lambda_c": ["1", [1], None], "search.trials": ["2", 2.5, None],
    "search.lambda_c": [[1], [1, 2, 3], "1,2", 1, ["a", "b"]], "threads": ["1", 1.5, True],
    "name": [42, 4.2, True, [], {}, None], "model.name": [42, None, [], True], "data.task": [42, None, [], True],
    "device": [42, None, [], True], "data.augment": ["yes", 1, None], "train.optimizer": [1, None, True],
}
CONFIG_RANGE = {  # dotted key -> out-of-range values
    "data.resolution": [0, 7, 1025, 100000, -32], "data.batch_size": [0, -1], "data.max_samples": [0, -5],
    "train.epochs": [-1], "train.lr": [0, -0.1, NAN, INF], "train.momentum": [1.0, -0.5], "fold.tau": [0, 1.5, -0.2],
    "fold.p": [1.0, 0.5], "fold.lambda_c": [-1], "fold.epochs": [0], "search.trials": [0, -3],
    "search.lambda_c": [[0, 1], [5, 1], [-1, 2]], "search.max_acc_drop": [1.5, -0.1], "threads": [0, -2],
    "train.optimizer": ["sgdd", ""], "fold.mode": ["exactly"], "search.sampler": ["grid"],
}


def config_set(table: dict[str, list[Any]]) -> Callable[[Draw, Any, dict], Any]:
    def fn(draw: Draw, cfg: Any, ctx: dict) -> Any:
        key = draw(st.sampled_from(sorted(table)))
        *sections, leaf = key.split(".")
        node = cfg
        for s in sections:
            node = node.setdefault(s, {})
        node[leaf] = draw(st.sampled_from(table[key]))
        return cfg
    return fn


def config_task(draw: Draw, cfg: Any, ctx: dict) -> Any:
    fx = ctx["fx"]
    cfg["data"]["task"] = draw(st.sampled_from([
        f"cifar10:{fx.cifar_ok}", f"imagefolder:{fx.images_ok}", "cifar10:", "imagefolder:/nonexistent",
        f"cifar10:{fx.root}", "digits-clutter"]))
    return cfg


def config_evil_cifar(draw: Draw, cfg: Any, ctx: dict) -> Any:
    make_cifar(ctx["jail"] / "cifar-evil", ctx["marker"])
    cfg["data"]["task"] = f"cifar10:{ctx['jail'] / 'cifar-evil'}"
    return cfg


def config_corrupt_images(draw: Draw, cfg: Any, ctx: dict) -> Any:
    cfg["data"]["task"] = f"imagefolder:{ctx['fx'].images_corrupt}"
    return cfg


def unknown_key(draw: Draw, cfg: Any, ctx: dict) -> Any:
    where = draw(st.sampled_from(["epochs", "Name", "train.epoch", "fold.lambda", "data.tsk", "search.trial"]))
    *sections, leaf = where.split(".")
    node = cfg
    for s in sections:
        node = node[s]
    node[leaf] = 3
    return cfg


CONFIG = [
    Mutation("unchanged", unchanged, False),
    Mutation("value of the wrong type", yaml_doc(config_set(CONFIG_TYPES)), True),
    Mutation("value out of range", yaml_doc(config_set(CONFIG_RANGE)), True),
    Mutation("unknown key", yaml_doc(unknown_key), True),
    Mutation("section not a mapping", yaml_doc(set_field((st.sampled_from(["train", "fold", "data", "search", "model"]),),
                                                         st.sampled_from([[1], "x", 1]))), True),
    Mutation("name: a path", yaml_doc(set_field(("name",), st.sampled_from(PATH_NAMES))), True),
    Mutation("yaml: a key given twice", duplicate_key, True),
    Mutation("data.task: another dataset", yaml_doc(config_task), False),
    Mutation("data.task: CIFAR batches with a pickle global (marker)", yaml_doc(config_evil_cifar), True),
    Mutation("data.task: image folder with a corrupt image", yaml_doc(config_corrupt_images), True),
    Mutation("lut: not a LUT", yaml_doc(set_field(("lut",), st.sampled_from(["/nonexistent.json", "/dev/null", ".",
                                                                            "{abs}"]))), ("fold", "run")),
    Mutation("not a config", text(["name: [unclosed", "\tname: x", "- a\n- b", "42", b"\xff\xfe\x00",
                                   "name: !!python/object/apply:builtins.open ['{marker}', 'a']",
                                   deep_nesting("[", "]")]), True),
    Mutation("path: not a regular file", not_a_file, True),
]


# --- device profile (YAML)
DEVICE_INTS = ("batch", "threads", "warmup", "warm_calls", "min_repeats", "max_repeats")


def device_ints(draw: Draw, d: Any, ctx: dict) -> Any:
    d[draw(st.sampled_from(DEVICE_INTS))] = draw(st.sampled_from([-1, 1.5, "2", True, None, [1]]))
    return d


def device_unknown(draw: Draw, d: Any, ctx: dict) -> Any:
    d[draw(st.sampled_from(["budget", "Name", "thread", "precison"]))] = 1
    return d


def device_repeats(draw: Draw, d: Any, ctx: dict) -> Any:
    d.update(min_repeats=10, max_repeats=3)
    return d


def wall_clock(fn: Callable[[Draw, Any, dict], Any]) -> Callable[[Draw, Any, dict], Any]:
    """GPU fields conflict with the fixture's CPU-time clock: use the wall clock, so the field itself is tested."""
    def with_wall(draw: Draw, d: Any, ctx: dict) -> Any:
        d["clock"] = "wall"
        return fn(draw, d, ctx)
    return with_wall


DEVICE = [
    Mutation("unchanged", unchanged, False),
    Mutation("name: a path", yaml_doc(set_field(("name",), st.sampled_from(PATH_NAMES))), True),
    Mutation("name: not a name", yaml_doc(set_field(("name",), st.sampled_from([None, [], {}, [1, 2]]))), True),
    Mutation("name: missing", yaml_doc(del_field(("name",))), True),
    Mutation("integer field: invalid", yaml_doc(device_ints), True),
    Mutation("budget_s/stable_rel: invalid", yaml_doc(set_field((st.sampled_from(["budget_s", "stable_rel"]),),
                                                                st.sampled_from([0, -1, NAN, "1", True, None, -INF]))),
             True),
    Mutation("min_repeats > max_repeats", yaml_doc(device_repeats), True),
    Mutation("clock: invalid", yaml_doc(set_field(("clock",), st.sampled_from(["cpu", 1, None]))), True),
    Mutation("backend: unknown", yaml_doc(set_field(("backend",), st.sampled_from(["onnx", "", 1, None]))), True),
    Mutation("backend: tensorrt", yaml_doc(wall_clock(set_field(("backend",), st.just("tensorrt")))), False),
    Mutation("precision: invalid", yaml_doc(set_field(("precision",), st.sampled_from(["fp8", "", None, 16]))), True),
    Mutation("provider: not a name", yaml_doc(set_field(("provider",), st.sampled_from([42, [], {"a": 1}]))), True),
    Mutation("cuda_device: invalid", yaml_doc(wall_clock(set_field(("cuda_device",), st.sampled_from([-1, "0", 1.5])))),
             True),
    Mutation("options: not a mapping", yaml_doc(set_field(("options",), st.sampled_from(["x", [1], 1]))), True),
    Mutation("unknown key", yaml_doc(device_unknown), True),
    Mutation("yaml: a key given twice", duplicate_key, True),
    Mutation("not a profile", text(["", "name: [unclosed", "- a", "42", b"\xff\xfe",
                                    "name: !!python/object/apply:builtins.open ['{marker}', 'a']",
                                    deep_nesting("[", "]")]), True),
]


# --- study database (SQLite)
OPTUNA_TABLES = ["studies", "trials", "trial_values", "trial_params", "study_user_attributes", "trial_user_attributes",
                 "study_directions", "version_info", "alembic_version", "trial_heartbeats", "trial_system_attributes"]
STUDY_SQL = [
    "DELETE FROM trials", "DELETE FROM study_user_attributes", "DELETE FROM trial_values",
    "UPDATE trial_values SET value = NULL", "UPDATE study_user_attributes SET value_json = '{bad'",
    "UPDATE trial_user_attributes SET value_json = 'not json'", "UPDATE trials SET state = 'RUNNING'",
    "UPDATE trials SET state = 'BOGUS'", "UPDATE study_directions SET direction = 'SIDEWAYS'",
    "UPDATE version_info SET schema_version = 999",
]


def sql(statements: list[str]) -> Callable[..., None]:
    def apply(draw: Draw, src: Path, dst: Path, ctx: dict) -> None:
        shutil.copyfile(src, dst)
        statement = draw(st.sampled_from(statements))
        with contextlib.closing(sqlite3.connect(dst)) as db:
            with contextlib.suppress(sqlite3.DatabaseError):   # a table a statement names may not exist
                db.execute(statement)
                db.commit()
    return apply


STUDY = [
    Mutation("unchanged", unchanged, False),
    Mutation("truncated", raw_bytes(truncate), False),
    Mutation("bytes overwritten", raw_bytes(overwrite_region), False),
    Mutation("header destroyed", raw_bytes(lambda draw, data, ctx: os.urandom(100) + data[100:]), True),
    Mutation("random bytes", raw_bytes(lambda draw, data, ctx: random.Random(len(data)).randbytes(len(data))), True),
    Mutation("table dropped", sql([f"DROP TABLE {t}" for t in OPTUNA_TABLES]), False),
    Mutation("rows deleted / values corrupted", sql(STUDY_SQL), False),
    Mutation("empty file", text([""]), False),
    Mutation("path: a directory", lambda draw, src, dst, ctx: dst.mkdir(), True),
]


# --- MLP checkpoint (latopt.mlp/1)
MLP = [
    Mutation("unchanged", unchanged, False),
    Mutation("layers: junk", torch_payload(set_field(("layers",), st.sampled_from(
        [[], [2], [2, 0, 1], "2,8,1", [2, 8, 8, 2], None, [2.0, 8, 8, 1], [2, -8, 8, 1]]))), True),
    Mutation("activation: other", torch_payload(set_field(("activation",), st.sampled_from(["tanh", None, 1]))), True),
    Mutation("schema: other", torch_payload(set_field(("schema",), st.sampled_from(["latopt.checkpoint/1", None]))), True),
    Mutation("weights: NaN/inf", torch_payload(tensor_op("nonfinite"), sign=False), True),
    Mutation("weights: other values", torch_payload(tensor_op("values"), sign=False), False),
    Mutation("weights: shape changed", torch_payload(tensor_op("shape"), sign=False), True),
    Mutation("state_dict: key removed/renamed/added", torch_payload(state_dict_keys), True),
    Mutation("state_dict: junk", torch_payload(set_field(("state_dict",), st.sampled_from([None, [], "x", 1]))), True),
    Mutation("meta.box: junk", torch_payload(set_field(("meta", "box"), st.sampled_from(
        [[1, 0], ["a", "b"], [NAN, 1], "0,1", [0], [0, INF]]))), False),
    Mutation("pickle: global in meta (marker)", torch_payload(pickle_global_in_meta), True),
    Mutation("pickle: global as the payload (marker)", pickle_global_file, True),
    Mutation("zip: truncated", raw_bytes(truncate), "auto"),
    Mutation("file: not a checkpoint", text(["", "x", b"\x80\x02}q\x00.", b"PK\x03\x04"]), True),
]
