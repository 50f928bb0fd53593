"""The fuzz suite: which commands consume each kind of artefact, hostile option values and
environments, drawing a case with hypothesis, and running the cases.

A slot is an artefact kind, a mutation from that kind's table (``CHECKPOINT``, ``LUT``,
``CONFIG``, ``DEVICE``, ``STUDY``, ``MLP``; ``OPTIONS`` for hostile option values, ``ENV`` for outputs that
are devices and a full disk, i.e. ``RLIMIT_FSIZE``) and a command that consumes it (``CONSUMERS``). The
cases take the slots in a seeded random order (``--n`` defaults to every slot once) and hypothesis draws
what is inside each (values, positions, which checkpoint). The command runs as a subprocess (under an
8 GiB address-space limit; ``--in-process`` calls ``latopt.cli.main`` instead: faster, but without the
limits, so without the ``ENV`` cases; compare before/after figures of the same mode) in a fresh
directory two levels below the one whose listing is compared before and after (so a name like
``../../x`` that escapes is seen). A case is clean when the command ends with

- exit 0, the input was not one that must be refused, and the result is correct (the outputs exist
  and load; per command: ``export`` exports what the checkpoint records, with its recorded accuracy
  within one test sample when exported as it is; ``search`` has a base trial; ``profile`` has finite
  non-negative times; ...), new files appear only under the case's output directories and none is a
  hidden temp file; or
- exit 2 (bad input) or 3 (a failed check) with exactly one stderr line ``latopt: error: ...`` (latopt's
  own ``[stage]`` progress lines aside; argparse's usage error is accepted too) and no new file at all;

and never prints a traceback, never turns a device node into a file, and never runs pickled code:
pickle payloads call ``open(MARKER, "a")`` and the marker must not appear.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import shutil
import stat
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from .files import ckpt_summary, load_pt, same_tensors
from .fixtures import MODEL, RES, Fixtures
from .judge import CHECKS, Case, Outcome, run_case
from .mutations import CHECKPOINT, CONFIG, DEVICE, LUT, MLP, STUDY, re_sign
from .process import RUNTIME, fill


# --- consumers: the commands that read each kind of artefact ({A} is the mutated artefact)
@dataclasses.dataclass(frozen=True)
class Consumer:
    name: str
    argv: tuple[str, ...]
    check: str                       # key of CHECKS
    as_is: bool = False              # export without --fold: the result must be what the checkpoint records


SEARCH_FAST = ("--heartbeat-interval", "1", "--grace-period", "5", "--quiet")
EXPORT = ("export", "--device", "{device}", "--samples", "4", "--no-measure", "--out", "{out}/export")
CONSUMERS: dict[str, list[Consumer]] = {
    "checkpoint": [
        Consumer("export", (*EXPORT, "--checkpoint", "{A}"), "export", as_is=True),
        # a fold applied without fine-tuning is not what the checkpoint's accuracy describes: timed, never shipped
        Consumer("export --fold all", (*EXPORT, "--checkpoint", "{A}", "--fold", "all", "--timing-only"),
                 "export-timing"),
        Consumer("fold", ("fold", "--config", "{config}", "--checkpoint", "{A}", "--out", "{out}/fold", "--quiet"),
                 "fold"),
        Consumer("train --checkpoint", ("train", "--config", "{config}", "--checkpoint", "{A}", "--out", "{out}/base",
                                        "--quiet"), "train"),
        Consumer("search --base", ("search", "--config", "{config}", "--base", "{A}", "--lut", "{lut}", "--trials", "1",
                                   "--runs-dir", "{runs}", *SEARCH_FAST), "search"),
    ],
    "lut": [
        Consumer("export --fold auto --lut", (*EXPORT, "--checkpoint", "{base}", "--fold", "auto", "--lut", "{A}",
                                              "--timing-only"), "export-timing"),
        Consumer("fold --lut", ("fold", "--config", "{config}", "--checkpoint", "{base}", "--lut", "{A}", "--out",
                                "{out}/fold", "--quiet"), "fold"),
        Consumer("search --lut", ("search", "--config", "{config}", "--base", "{base}", "--lut", "{A}", "--trials", "1",
                                  "--runs-dir", "{runs}", *SEARCH_FAST), "search"),
        Consumer("run (config lut)", ("run", "{config_lut}", "--trials", "1", "--runs-dir", "{runs}"), "run"),
    ],
    "config": [
        Consumer("train", ("train", "--config", "{A}", "--quiet"), "train"),
        Consumer("fold", ("fold", "--config", "{A}", "--checkpoint", "{base}", "--quiet"), "fold"),
        Consumer("search", ("search", "--config", "{A}", "--base", "{base}", "--lut", "{lut}", "--trials", "1",
                            *SEARCH_FAST), "search"),
        Consumer("run", ("run", "{A}", "--trials", "1"), "run"),
    ],
    "device": [
        Consumer("profile", ("profile", "--device", "{A}", "--model", MODEL, "--resolution", str(RES), "--num-classes",
                             "10", "--quiet"), "profile"),
        Consumer("export", ("export", "--checkpoint", "{folded}", "--device", "{A}", "--samples", "4", "--out",
                            "{out}/export"), "export", as_is=True),
        Consumer("run --device", ("run", "{config}", "--device", "{A}", "--trials", "1", "--runs-dir", "{runs}"), "run"),
    ],
    "study": [
        Consumer("search (resume)", ("search", "--config", "{config}", "--base", "{base}", "--lut", "{lut}", "--trials",
                                     "1", "--runs-dir", "{runs}", *SEARCH_FAST), "search"),
        Consumer("search --show", ("search", "--show", "--study", "tiny", "--runs-dir", "{runs}", "--out", "{out}/show"),
                 "show"),
    ],
    "mlp": [
        Consumer("regions", ("regions", "{A}", "--grid", "50", "--out", "{out}/regions"), "regions"),
        Consumer("compress", ("compress", "{A}", "--samples", "500", "--time-limit", "5", "--out", "{out}/compress"),
                 "compress"),
        Consumer("shallow", ("shallow", "{A}", "--samples", "1000", "--out", "{out}/shallow"), "shallow"),
    ],
}
ARTEFACT = {  # kind -> (table, fixture it mutates, file name in the case, where it goes)
    "checkpoint": (CHECKPOINT, None, "in/model.pt"),
    "lut": (LUT, "lut", "in/lut.json"),
    "config": (CONFIG, "config", "in/config.yaml"),
    "device": (DEVICE, "device", "in/device.yaml"),
    "study": (STUDY, "study_db", "runs/tiny/search/study.db"),
    "mlp": (MLP, "mlp", "in/mlp.pt"),
}


# --- hostile option values: (command, flag, values); every value must be refused
BASE_ARGV: dict[str, tuple[str, ...]] = {
    "inspect": ("inspect", MODEL, "--resolution", str(RES), "--num-classes", "10", "--json", "{out}/inspect.json"),
    "export": ("export", "--checkpoint", "{folded}", "--device", "{device}", "--samples", "4", "--no-measure",
               "--out", "{out}/export"),
    "export-base": ("export", "--checkpoint", "{base}", "--device", "{device}", "--samples", "4", "--no-measure",
                    "--fold", "all", "--out", "{out}/export"),
    "train": ("train", "--config", "{config}", "--out", "{out}/base", "--quiet"),
    "fold": ("fold", "--config", "{config}", "--checkpoint", "{base}", "--out", "{out}/fold", "--quiet"),
    "search": ("search", "--config", "{config}", "--base", "{base}", "--lut", "{lut}", "--trials", "1",
               "--runs-dir", "{runs}", *SEARCH_FAST),
    "run": ("run", "{config}", "--trials", "1", "--runs-dir", "{runs}"),
    "profile": ("profile", "--device", "{device}", "--model", MODEL, "--resolution", str(RES), "--num-classes", "10",
                "--out", "{out}/lut.json", "--quiet"),
    "train-mlp": ("train-mlp", "--data", "digits", "--hidden", "8,8", "--epochs", "2", "--out", "{out}/mlp.pt"),
    "regions": ("regions", "{mlp}", "--grid", "50", "--out", "{out}/regions"),
    "shallow": ("shallow", "{mlp}", "--samples", "1000", "--out", "{out}/shallow"),
    "compress": ("compress", "{mlp}", "--samples", "500", "--time-limit", "5", "--out", "{out}/compress"),
    "runtime": (RUNTIME, "{onnx}", "--output", "{out}/y.npy"),
}
OPTIONS: list[tuple[str, str, list[str]]] = [
    ("inspect", "--resolution", ["-1", "0", "7", "1025", "100000"]),
    ("inspect", "--num-classes", ["0", "-1"]),
    ("inspect", "MODEL", ["../x", "", "torchvision/mobilenet_v2?width=nan", "torchvision/mobilenet_v2?width=inf",
                          "torchvision/mobilenet_v2?width=1e400", "timm/../x", "torchvision/mobilenet_v2?width=0.25&x=1"]),
    ("inspect", "--json", ["{out}", "{file}/x.json"]),
    ("export", "--samples", ["0", "-1"]),
    ("export", "--resolution", ["0", "7", "100000", "48"]),
    ("export", "--fold", ["all"]),
    ("export-base", "--fold", ["99", "-1", ",", "x"]),
    ("export", "--out", ["{file}", "{file}/x"]),
    ("export", "--lut", ["{out}", "/nonexistent.json"]),
    ("train", "--epochs", ["-1"]),
    ("train", "--threads", ["0", "-1"]),
    ("train", "--data", ["bogus", "cifar10:", "imagefolder:/nonexistent", "cifar10:/dev/null"]),
    ("train", "--checkpoint", ["{out}", "/nonexistent.pt", "/dev/null"]),
    ("train", "--out", ["{file}"]),
    ("fold", "--tau", ["0", "1.5", "nan", "-1"]),
    ("fold", "--lambda-c", ["-1", "nan", "inf"]),
    ("fold", "--p", ["1", "0.5", "nan"]),
    ("fold", "--threads", ["0"]),
    ("search", "--trials", ["0", "-1"]),
    ("search", "--workers", ["0", "-1"]),
    ("search", "--timeout", ["0", "-1", "nan"]),
    ("search", "--max-acc-drop", ["nan", "-0.1", "2"]),
    ("search", "--heartbeat-interval", ["0", "-1"]),
    ("search", "--set", ["x", "=1", "fold.tau=2", "a.b.c=1", "name=../x", "data.resolution=[", "train=5"]),
    ("search", "--storage", ["notaurl", "sqlite:///{out}/", "mysql://u@127.0.0.1:1/x"]),
    ("search", "--base", ["{out}", "/nonexistent.pt", "{file}"]),
    ("search", "--lut", ["/nonexistent.json", "{out}"]),
    ("run", "--trials", ["0", "-1"]),
    ("run", "--device", ["nosuchdevice", "../../x", "/nonexistent.yaml"]),
    ("profile", "--resolution", ["0", "7", "100000"]),
    ("profile", "--batch", ["0", "-1"]),
    ("profile", "--num-classes", ["0"]),
    ("profile", "--model", ["bogus", "../x"]),
    ("train-mlp", "--lr", ["nan", "inf", "-1"]),
    ("train-mlp", "--hidden", ["0", "a", "", "8,-1", ","]),
    ("train-mlp", "--epochs", ["-1"]),
    ("train-mlp", "--batch", ["0", "-1"]),
    ("train-mlp", "--l1", ["nan", "-1"]),
    ("regions", "--box", ["1,0", "nan,1", "a", "0,1,2", "0,inf"]),
    ("regions", "--max-regions", ["0"]),
    ("shallow", "--epsilon", ["nan", "0", "-1", "inf"]),
    ("compress", "--time-limit", ["0", "nan", "-1"]),
    ("compress", "--verify-points", ["5"]),
    ("runtime", "--bench", ["-1"]),
    ("runtime", "--threads", ["0", "-1"]),
    ("runtime", "--input", ["{file}", "/nonexistent.npy", "{out}"]),
    ("runtime", "--output", ["{out}", "{file}/y.npy"]),
]
# --- the environment: outputs that are devices, and a full disk
ENV_DEVICE_OUT: list[tuple[str, str]] = [("inspect", "--json"), ("profile", "--out"), ("train-mlp", "--out"),
                                         ("runtime", "--output")]
ENV_FULL_DISK: list[tuple[str, int]] = [("train", 64 << 10), ("fold", 64 << 10), ("export", 64 << 10),
                                        ("profile", 1024), ("inspect", 256), ("train-mlp", 0), ("compress", 1024)]
KINDS = (*ARTEFACT, "options", "env")


def with_option(argv: list[str], flag: str, value: str) -> list[str]:
    argv = list(argv)
    if flag == "MODEL":
        argv[1] = value
    elif flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    return argv


# ============================================================================== drawing a case
def can_mknod() -> bool:
    return hasattr(os, "mknod") and os.geteuid() == 0


Slot = tuple[str, ...]


def slots(kinds: tuple[str, ...] = KINDS, commands: tuple[str, ...] | None = None, *, in_process: bool = False
          ) -> list[Slot]:
    """Every (kind, mutation, command) pair of the tables; a case takes one and hypothesis draws the rest."""
    def wanted(command: str) -> bool:
        return commands is None or command in commands

    out: list[Slot] = []
    for kind in kinds:
        if kind in ARTEFACT:
            out += [(kind, m.name, c.name) for m in ARTEFACT[kind][0] for c in CONSUMERS[kind]
                    if wanted(c.check) or wanted(c.name)]
        elif kind == "options":
            out += [("options", command, flag) for command, flag, _ in OPTIONS if wanted(command.split("-base")[0])]
        elif kind == "env" and not in_process:
            if can_mknod():
                out += [("env", "device output", c, flag) for c, flag in ENV_DEVICE_OUT if wanted(c)]
            out += [("env", "full disk", c, str(limit)) for c, limit in ENV_FULL_DISK if wanted(c)]
    return out


def draw_case(data: Any, fx: Fixtures, jail: Path, slot: Slot) -> Case:
    """The case of ``slot``, its parameters drawn by hypothesis (``data`` is ``st.data()``), set up under ``jail``."""
    draw = data.draw
    cwd = jail / "j1" / "j2"
    (cwd / "in").mkdir(parents=True)
    (cwd / "out").mkdir()
    a_file = cwd / "in" / "a-file"
    a_file.write_text("x\n")
    paths = {"config": str(fx.config), "base": str(fx.base), "folded": str(fx.folded), "lut": str(fx.lut),
             "device": str(fx.device), "mlp": str(fx.mlp), "onnx": str(fx.export / "model.onnx"),
             "out": str(cwd / "out"), "runs": str(cwd / "runs"), "file": str(a_file)}
    env: dict[str, str] = {}     # device profiles and LUTs: ./profiles in the case's working directory
    kind = slot[0]
    if kind == "options":
        command, flag = slot[1], slot[2]
        values = next(v for c, f, v in OPTIONS if (c, f) == (command, flag))
        value = fill([draw(st.sampled_from(values), label="value")], paths)[0]
        argv = with_option(fill(BASE_ARGV[command], paths), flag, value)
        name = command.split("-base")[0]
        return Case("options", f"{flag} {value!r}", name, argv, cwd, jail, True, CHECKS.get(name), env=env)
    if kind == "env" and slot[1] == "device output":
        command, flag = slot[2], slot[3]
        which = draw(st.sampled_from([("null", 3), ("full", 7)]), label="device")
        node = cwd / "out" / f"dev-{which[0]}"
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, which[1]))
        argv = with_option(fill(BASE_ARGV[command], paths), flag, str(node))
        return Case("env", f"output is a device like /dev/{which[0]}", command, argv, cwd, jail, which[0] == "full",
                    None, env=env)
    if kind == "env":
        command, limit = slot[2], int(slot[3])
        return Case("env", f"full disk (files capped at {limit} bytes)", command, fill(BASE_ARGV[command], paths),
                    cwd, jail, True, CHECKS.get(command), env=env, fsize=limit)
    table, fixture, rel = ARTEFACT[kind]
    mutation = next(m for m in table if m.name == slot[1])
    consumer = next(c for c in CONSUMERS[kind] if c.name == slot[2])
    # a slot may name the checkpoint it mutates (4th element); otherwise hypothesis picks one
    source = getattr(fx, fixture or (slot[3] if len(slot) > 3 else draw(st.sampled_from(mutation.sources),
                                                                          label="checkpoint")))
    dst = cwd / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    mutation.apply(draw, source, dst, {"marker": jail / "PICKLE_RAN", "jail": jail, "fx": fx})
    if kind == "checkpoint":
        _resolve_placeholders(dst, paths)
    paths["A"] = str(dst)
    if "{config_lut}" in consumer.argv:
        cfg = yaml.safe_load(fx.config.read_text())
        cfg["lut"] = str(dst)
        (cwd / "in" / "config-lut.yaml").write_text(yaml.safe_dump(cfg))
        paths["config_lut"] = str(cwd / "in" / "config-lut.yaml")
    refuse = mutation.refuse
    if isinstance(refuse, tuple):
        refuse = consumer.check in refuse
    info: dict[str, Any] = {}
    if kind in ("checkpoint", "mlp") or consumer.as_is:
        ckpt = dst if kind in ("checkpoint", "mlp") else fx.folded
        summary = ckpt_summary(ckpt) if ckpt.is_file() else None
        if refuse == "auto":
            original = ckpt_summary(source)
            refuse = summary is None or not same_tensors(summary["state"], original["state"] if original else None)
        if summary is not None and kind != "mlp":
            info = {"as_is": consumer.as_is, "plan": summary["plan"], "acc": summary["acc"]}
    mutation_name = mutation.name + (f" [{source.parent.name}/{source.name}]" if kind == "checkpoint" else "")
    return Case(kind, mutation_name, consumer.name, fill(consumer.argv, paths), cwd, jail, bool(refuse),
                CHECKS[consumer.check], info, env)


def _resolve_placeholders(ckpt: Path, paths: dict[str, str]) -> None:
    """``{base}`` in a mutated checkpoint's meta (prefold_checkpoint) is the fixture's base checkpoint."""
    import torch

    with contextlib.suppress(Exception):
        obj = load_pt(ckpt)
        meta = obj.get("meta") if isinstance(obj, dict) else None
        if isinstance(meta, dict) and meta.get("prefold_checkpoint") == "{base}":
            meta["prefold_checkpoint"] = paths["base"]
            torch.save(re_sign(obj), ckpt)


# ============================================================================== running the cases
def drawn_case(fx: Fixtures, jail: Path, slot: Slot, seed: int, derandomize: bool = False) -> Case:
    """The case of ``slot`` with its contents drawn by hypothesis.

    Hypothesis' first example is always the simplest one (the first value of every table), so each case
    is the second example of its own two-example run, seeded with ``seed`` (or derandomized)."""
    made: list[Case] = []

    @settings(max_examples=2, database=None, deadline=None, phases=[Phase.generate], derandomize=derandomize,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def setup(data: Any) -> None:
        shutil.rmtree(jail, ignore_errors=True)
        made.append(draw_case(data, fx, jail, slot))

    if not derandomize:
        setup = hypothesis_seed(seed)(setup)
    setup()
    return made[-1]


def run(fx: Fixtures, work: Path, n: int | None, seed: int, *, in_process: bool = False,
         kinds: tuple[str, ...] = KINDS, commands: tuple[str, ...] | None = None, order: list[Slot] | None = None,
         derandomize: bool = False, log: Callable[[str], None] = print) -> list[Outcome]:
    """Run ``n`` cases (default: every slot once) and return every outcome (nothing stops at a failure).

    The slots (``order``, else those of ``kinds``/``commands`` shuffled with ``seed``) are taken in turn,
    so ``n`` cases cover ``min(n, #slots)`` distinct (mutation, command) pairs; hypothesis draws what is
    inside each case."""
    if order is None:
        order = slots(kinds, commands, in_process=in_process)
        random.Random(seed).shuffle(order)
    n = len(order) if n is None else n
    outcomes: list[Outcome] = []
    for i in range(n):
        jail = work / "cases" / f"{i:04d}"
        slot = order[i % len(order)]
        try:
            case = drawn_case(fx, jail, slot, seed * 1_000_003 + i, derandomize)
        except Exception as e:
            outcomes.append(Outcome(" / ".join(slot), slot[0], slot[1], "-", [], None, 0.0,
                                    [("harness error", f"{type(e).__name__}: {e} {traceback.format_exc(limit=4)}")]))
            continue
        out = run_case(case, in_process)
        outcomes.append(out)
        log(f"[harness] {i + 1:>4}/{n} {'clean' if out.clean else ', '.join(k for k, _ in out.failures):<28} "
            f"{out.seconds:6.1f} s  {out.case}")
        if out.clean:
            shutil.rmtree(jail, ignore_errors=True)
    return outcomes
