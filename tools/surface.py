#!/usr/bin/env python3
"""Hostile input and interruptions against the whole ``latopt`` command line: a fuzz suite and a fault suite.

    python tools/surface.py fuzz   [--n N] [--seed 0] [--json OUT] [--work DIR] [--in-process]
    python tools/surface.py faults [--n 15]  [--seed 0] [--json OUT] [--work DIR]

Both run against the checkout this file lives in (its root goes first on ``PYTHONPATH``), build their
fixtures with that checkout's own commands (a tiny ``mobilenetv2_035`` at 32 px on 64 digits: config,
fast CPU device profile, base/folded checkpoints, a LUT, a study, a small MLP, fake CIFAR and image
folders), and print how many cases were tried, how many were clean, and each failure kind with one
example. ``--json`` writes every case. ``tests/test_fuzz.py`` and ``tests/test_faults.py`` run a small
deterministic subset of the same cases.

**Fuzz.** A slot is an artefact kind, a mutation from that kind's table (``CHECKPOINT``, ``LUT``,
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

**Faults.** Each case runs one of ``train``, ``fold``, ``search``, ``export``, ``run`` (tiny settings) and
sends SIGKILL, SIGTERM (both to the process) or SIGINT (to its process group, like Ctrl-C) at a random
time within the uninterrupted run's duration, or just after the first hidden temp entry appears. Then
it checks what is visible (every file loads; an output directory that exists is complete; after
SIGTERM/SIGINT no hidden temp entry; no process of the group left running) and reruns the command: it
must exit 0 and its artefacts must equal those of an uninterrupted run with the same seed: tensors
exactly, JSON/YAML minus timing fields, paths normalised. Fields that differ between two uninterrupted
runs are not compared (they are listed in the JSON output). Hidden temp files a SIGKILL leaves behind
are noted, not counted: no process can clean up after SIGKILL.

Failure kinds: traceback, wrong exit code, multi-line error, leftover files, device replaced, pickle
executed, wrong result, timeout (fuzz); traceback, wrong exit code, leftover files, partial files, orphan
processes, artefact mismatch, timeout (faults). A case can show several.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import hashlib
import io
import json
import logging
import math
import os
import pickle
import random
import re
import resource
import shutil
import signal
import sqlite3
import stat
import struct
import subprocess
import sys
import time
import traceback
import warnings
import zipfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NAN, INF = float("nan"), float("inf")
PROGRESS = re.compile(r"^\[[a-z][a-z0-9_.]*\] ")     # latopt's own progress lines: "[stage] message"
CHECKPOINT_SCHEMA = "latopt.checkpoint/2"
TRACEBACK = "Traceback (most recent call last)"
LOCK = re.compile(r"^\..*\.lock$")            # lock files (filelock) are not temp files
MEMORY_LIMIT = 8 << 30                         # RLIMIT_AS of every command the harness starts
FUZZ_TIMEOUT_S = 300
MODEL, RES, SAMPLES = "mobilenetv2_035", 32, 64


# ============================================================================== running a command
@dataclasses.dataclass
class Run:
    rc: int | None          # None: killed at the timeout
    out: str
    err: str
    seconds: float


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**{k: v for k, v in os.environ.items() if k != "LATOPT_PROFILES_DIR"}, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.update(extra or {})
    return env


def _limits(fsize: int | None) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        if fsize is not None:   # a full disk: writes past fsize bytes fail with EFBIG (SIGXFSZ ignored)
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    return apply


RUNTIME = "@runtime"    # argv[0] of a case that runs the deployment runner `python -m latopt.runtime`


def start(argv: list[str], cwd: Path, env: dict[str, str] | None = None, fsize: int | None = None,
          output: Any = subprocess.PIPE) -> subprocess.Popen:
    """``python -m latopt ARGV`` in its own session (its process group is the session; killpg reaches workers);
    stdout and stderr go to pipes, or to the file ``output`` (nobody reads a pipe while a fault waits)."""
    module = ["latopt.runtime", *argv[1:]] if argv[:1] == [RUNTIME] else ["latopt", *argv]
    return subprocess.Popen([sys.executable, "-m", *module], cwd=cwd, env=child_env(env), stdin=subprocess.DEVNULL,
                            stdout=output, stderr=subprocess.PIPE if output is subprocess.PIPE else subprocess.STDOUT,
                            start_new_session=True, preexec_fn=_limits(fsize))


def kill_group(p: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, signal.SIGKILL)


def latopt(argv: list[str], cwd: Path, *, env: dict[str, str] | None = None, in_process: bool = False,
           timeout: float = FUZZ_TIMEOUT_S, fsize: int | None = None) -> Run:
    """Run one latopt command; in-process (``latopt.cli.main``, for speed) or as a subprocess."""
    if in_process and fsize is None:
        return _in_process(argv, cwd, env or {})
    t0 = time.perf_counter()
    p = start(argv, cwd, env, fsize)
    try:
        out, err = p.communicate(timeout=timeout)
        rc: int | None = p.returncode
    except subprocess.TimeoutExpired:
        kill_group(p)
        out, err = p.communicate()
        rc = None
    finally:
        kill_group(p)      # extra workers of `search --workers` / `run` must not outlive a case
    return Run(rc, out.decode(errors="replace"), err.decode(errors="replace"), time.perf_counter() - t0)


def _in_process(argv: list[str], cwd: Path, env: dict[str, str]) -> Run:
    from latopt.cli import main as latopt_main
    from latopt.runtime import main as runtime_main

    main, argv = (runtime_main, argv[1:]) if argv[:1] == [RUNTIME] else (latopt_main, argv)
    out, err = io.StringIO(), io.StringIO()
    old_cwd, old_env = os.getcwd(), {k: os.environ.get(k) for k in env}
    # libraries' own log handlers (optuna's) hold the stderr of when they were made: point them here too
    handlers = [h for lg in [logging.getLogger(), *logging.root.manager.loggerDict.values()]
                for h in getattr(lg, "handlers", []) if type(h) is logging.StreamHandler]
    streams = [h.setStream(err) for h in handlers]
    t0 = time.perf_counter()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.resetwarnings()   # a fresh interpreter's filters: each warning shows again, as it would there
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", category)
            try:
                rc = main(argv)
            except SystemExit as e:       # argparse
                rc = e.code if isinstance(e.code, int) else int(e.code is not None)
            except BaseException:         # what the interpreter would print, and its exit code
                traceback.print_exc()
                rc = 1
    finally:
        os.chdir(old_cwd)
        for h, stream in zip(handlers, streams, strict=True):
            h.setStream(stream)
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return Run(int(rc or 0), out.getvalue(), err.getvalue(), time.perf_counter() - t0)


def exception_line(text: str) -> str:
    """The exception a traceback in ``text`` ends with (its first unindented line after the frames)."""
    after = text.split(TRACEBACK)[-1].splitlines()[1:]
    return next((ln for ln in after if ln.strip() and not ln.startswith(" ")), "?")[:300]


def error_lines(err: str) -> list[str]:
    """stderr without blank lines and latopt's own ``[stage]`` progress lines."""
    return [ln for ln in err.splitlines() if ln.strip() and not PROGRESS.match(ln)]


def one_line_error(err: str) -> bool:
    lines = error_lines(err)
    if len(lines) == 1 and lines[0].startswith(("latopt: error:", "latopt.runtime: error:")):
        return True
    # argparse's own usage error: "usage: ..." lines, then "latopt CMD: error: ..."
    usage_error = re.compile(r"^(latopt [\w-]+|python -m latopt\.runtime): error: ")
    return bool(lines) and lines[0].startswith("usage:") and usage_error.match(lines[-1]) is not None


# ============================================================================== listings
def listing(root: Path) -> dict[str, str]:
    """{relative path: type letter} of everything under ``root``, hidden entries included."""
    entries: dict[str, str] = {}
    if not root.exists():
        return entries
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            mode = os.lstat(p).st_mode
            kind = ("d" if stat.S_ISDIR(mode) else "c" if stat.S_ISCHR(mode) else "p" if stat.S_ISFIFO(mode)
                    else "l" if stat.S_ISLNK(mode) else "f")
            entries[os.path.relpath(p, root)] = kind
    return entries


def hidden(paths: list[str] | set[str]) -> list[str]:
    """Hidden temp entries: a path component starting with '.', lock files aside."""
    return sorted(p for p in paths if any(part.startswith(".") and not LOCK.match(part) for part in Path(p).parts))


def under(path: Path, roots: list[Path]) -> bool:
    real = Path(os.path.normpath(path))
    return any(real == r or r in real.parents for r in roots)


# ============================================================================== loading artefacts
def load_pt(p: Path) -> Any:
    import torch

    return torch.load(p, map_location="cpu", weights_only=True)


def load_any(p: Path) -> Any:
    """Load a file by its type (raises when it is unreadable: a partial or corrupt file)."""
    suffix = p.suffix
    if suffix == ".pt":
        return load_pt(p)
    if suffix == ".json":
        return json.loads(p.read_text())
    if suffix in (".yaml", ".yml"):
        return yaml.safe_load(p.read_text())
    if suffix == ".onnx":
        import onnx

        return onnx.load(str(p))
    if suffix == ".npy":
        import numpy as np

        return np.load(p, allow_pickle=False)
    if suffix == ".png":
        data = p.read_bytes()
        if not data.endswith(b"IEND\xaeB`\x82"):
            raise ValueError("PNG without its IEND chunk")
        return data
    if suffix == ".db":
        with contextlib.closing(sqlite3.connect(f"file:{p}?mode=ro", uri=True)) as db:
            if db.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
                raise ValueError("sqlite integrity check failed")
        return None
    if p.stat().st_size == 0:
        raise ValueError("empty file")
    return p.read_bytes()


def ckpt_summary(p: Path) -> dict[str, Any] | None:
    """What a latopt checkpoint records (fold plan, test accuracy), or None when torch cannot read it."""
    try:
        obj = load_pt(p)
    except Exception:
        return None
    arch = obj.get("arch") if isinstance(obj, dict) else None
    meta = obj.get("meta") if isinstance(obj, dict) else None
    fold = arch.get("fold") if isinstance(arch, dict) else None
    plan = fold.get("plan") if isinstance(fold, dict) else None
    acc = None
    if isinstance(meta, dict):
        acc = meta["acc"].get("finetuned") if isinstance(meta.get("acc"), dict) else meta.get("test_acc")
    return {"plan": {str(k): v for k, v in plan.items()} if isinstance(plan, dict) else {},
            "acc": acc if isinstance(acc, (int, float)) and not isinstance(acc, bool) else None,
            "state": obj.get("state_dict") if isinstance(obj, dict) else None}


def same_tensors(a: Any, b: Any) -> bool:
    import torch

    if not (isinstance(a, dict) and isinstance(b, dict)) or a.keys() != b.keys():
        return False
    return all(isinstance(a[k], torch.Tensor) and isinstance(b[k], torch.Tensor) and a[k].dtype == b[k].dtype
               and a[k].shape == b[k].shape and torch.equal(a[k], b[k]) for k in a)


# ============================================================================== fixtures
TINY_CONFIG = {
    "name": "tiny", "model": {"name": MODEL},
    "data": {"task": "digits", "resolution": RES, "batch_size": 64, "max_samples": SAMPLES},
    "train": {"epochs": 1, "optimizer": "adamw", "lr": 0.01},
    "fold": {"epochs": 1, "post_epochs": 1, "lr": 0.003, "alpha_lr": 0.5},
    "search": {"lambda_c": [0.5, 50.0], "tau": [0.3, 0.9], "p": [1.5, 3.0], "trials": 2, "max_acc_drop": 0.5},
    "threads": 1,
}
FAST_DEVICE = {"name": "cpu-fuzz", "warmup": 1, "min_repeats": 3, "max_repeats": 5, "budget_s": 1}
FOLD_SOME = ["--lambda-c", "50", "--tau", "0.3", "--p", "1.5"]   # folds most blocks of the tiny model
FOLD_NONE = ["--lambda-c", "0", "--tau", "1"]                    # folds nothing


@dataclasses.dataclass
class Fixtures:
    """Inputs every case starts from, built once by the checkout's own commands."""

    root: Path
    in_process: bool = False

    def __getattr__(self, name: str) -> Path:   # fx.base, fx.folded, ... (see PATHS)
        if name in self.PATHS:
            return self.root / self.PATHS[name]
        raise AttributeError(name)

    PATHS = {"config": "tiny.yaml", "device": "device.yaml", "base": "base/base.pt", "folded": "fold/folded.pt",
             "folded_nothing": "fold0/folded.pt", "lut": "lut.json", "study_runs": "runs",
             "study_db": "runs/tiny/search/study.db", "mlp": "mlp.pt", "export": "export", "cifar_ok": "cifar-ok",
             "images_ok": "images-ok", "images_corrupt": "images-corrupt"}

    def build(self, log: Callable[[str], None] = print) -> Fixtures:
        ready = self.root / "READY"
        if ready.is_file():
            return self
        self.root.mkdir(parents=True, exist_ok=True)
        device = yaml.safe_load((ROOT / "latopt" / "profiles" / "cpu.yaml").read_text())
        device.update(FAST_DEVICE)
        self.device.write_text(yaml.safe_dump(device))
        self.config.write_text(yaml.safe_dump({**TINY_CONFIG, "device": str(self.device)}))
        steps = [
            ("train", ["train", "--config", str(self.config), "--out", str(self.root / "base"), "--quiet"]),
            ("fold", ["fold", "--config", str(self.config), "--checkpoint", str(self.base), "--out",
                      str(self.root / "fold"), "--quiet", *FOLD_SOME]),
            ("fold (nothing)", ["fold", "--config", str(self.config), "--checkpoint", str(self.base), "--out",
                                str(self.root / "fold0"), "--quiet", *FOLD_NONE]),
            ("profile", ["profile", "--device", str(self.device), "--model", MODEL, "--resolution", str(RES),
                         "--num-classes", "10", "--out", str(self.lut), "--quiet"]),
            ("search", ["search", "--config", str(self.config), "--base", str(self.base), "--lut", str(self.lut),
                        "--trials", "1", "--runs-dir", str(self.study_runs), "--quiet"]),
            ("export", ["export", "--checkpoint", str(self.folded), "--device", str(self.device), "--samples", "4",
                        "--no-measure", "--out", str(self.export)]),
            ("train-mlp", ["train-mlp", "--data", "random", "--inputs", "2", "--hidden", "8,8", "--outputs", "1",
                           "--out", str(self.mlp)]),
        ]
        for what, argv in steps:
            log(f"[surface] fixture: {what}")
            r = latopt(argv, self.root, in_process=self.in_process)
            if r.rc != 0:
                raise SystemExit(f"fixture step {what!r} failed (exit {r.rc}) on this checkout:\n{r.err[-3000:]}")
        make_cifar(self.cifar_ok, None)
        make_images(self.images_ok, corrupt=False)
        make_images(self.images_corrupt, corrupt=True)
        ready.write_text("ok\n")
        return self


class RunsOnUnpickle:
    """Pickles as a call ``open(marker, "a")``: a full unpickler that loads it creates the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple:
        return (open, (self.marker, "a"))


def make_cifar(root: Path, marker: Path | None) -> None:
    """A 5 x 20 + 20 image ``cifar-10-batches-py``; with ``marker``, ``batches.meta`` holds a pickle global."""
    import numpy as np

    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {"data": rng.integers(0, 256, (20, 3072), dtype=np.uint8), "labels": [i % 10 for i in range(20)]}
        (d / name).write_bytes(pickle.dumps(batch, protocol=2))
    meta: dict[str, Any] = {"label_names": [f"class{i}" for i in range(10)]}
    if marker is not None:
        meta["x"] = RunsOnUnpickle(marker)
    (d / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))


def make_images(root: Path, corrupt: bool) -> None:
    """An image folder (train/val, 2 classes x 4/2 PNGs); ``corrupt``: an image that is not the first of
    its split is junk, in both splits."""
    from PIL import Image

    for split, n in (("train", 4), ("val", 2)):
        for c, colour in (("a", (200, 30, 30)), ("b", (30, 30, 200))):
            d = root / split / c
            d.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                Image.new("RGB", (12, 12), colour).save(d / f"img{i}.png")
    if corrupt:
        for junk in (root / "train" / "a" / "img2.png", root / "val" / "a" / "img1.png"):
            junk.write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(64))


# ============================================================================== cases
@dataclasses.dataclass
class Case:
    kind: str                       # artefact kind (table name)
    mutation: str
    command: str
    argv: list[str]
    cwd: Path                       # where the command runs: jail/j1/j2
    jail: Path                      # the directory whose listing is compared
    must_refuse: bool               # exit 0 is wrong for this input
    check: Callable[[Case], str | None] | None = None
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    fsize: int | None = None

    @property
    def out(self) -> Path:
        return self.cwd / "out"

    @property
    def outputs(self) -> list[Path]:
        """Where new files may appear on exit 0 (explicit --out, and the default runs/ and profiles/)."""
        return [self.cwd / "out", self.cwd / "runs", self.cwd / "profiles"]

    @property
    def marker(self) -> Path:
        return self.jail / "PICKLE_RAN"

    def describe(self) -> str:
        return f"{self.kind}: {self.mutation} → {self.command}"


@dataclasses.dataclass
class Outcome:
    case: str
    kind: str
    mutation: str
    command: str
    argv: list[str]
    rc: int | None
    seconds: float
    failures: list[tuple[str, str]]         # (failure kind, detail)
    stderr: str = ""
    notes: str = ""

    @property
    def clean(self) -> bool:
        return not self.failures

    def describe(self) -> str:
        head = f"{self.case} (exit {self.rc}): latopt {' '.join(self.argv)}".replace(f"latopt {RUNTIME}",
                                                                                    "python -m latopt.runtime")
        return head + "".join(f"\n  {k}: {d}" for k, d in self.failures) + (
            f"\n  stderr: {self.stderr[-1500:]}" if self.failures else "")


def judge(case: Case, run: Run, before: dict[str, str], after: dict[str, str]) -> list[tuple[str, str]]:
    """The failure kinds a finished command shows (empty: clean)."""
    fails: list[tuple[str, str]] = []
    if case.marker.exists():
        fails.append(("pickle executed", f"{case.marker.name} was created: an input's pickled code ran"))
    if run.rc is None:
        return fails + [("timeout", f"still running after {run.seconds:.0f} s")]
    traced = TRACEBACK in run.err or TRACEBACK in run.out
    if traced:
        fails.append(("traceback", exception_line(run.err + run.out)))
    if run.rc == 0 and case.must_refuse:
        fails.append(("wrong exit code", "exit 0 on input that must be refused"))
    elif run.rc not in (0, 2, 3) and not (traced and run.rc == 1):   # exit 1 is the traceback's own
        fails.append(("wrong exit code", f"exit {run.rc}"))
    elif run.rc in (2, 3) and not one_line_error(run.err):
        lines = error_lines(run.err)
        fails.append(("multi-line error", f"{len(lines)} stderr lines: " + " | ".join(ln[:120] for ln in lines[:4])))
    devices = [p for p, k in before.items() if k == "c" and after.get(p) != "c"]
    if devices:
        fails.append(("device replaced", f"{devices[0]} is no longer a device ({after.get(devices[0], 'gone')})"))
    new = sorted(set(after) - set(before) - {str(case.marker.relative_to(case.jail))})   # the marker: counted above
    if run.rc == 0:
        stray = [p for p in new if not under(case.jail / p, case.outputs)]
        temps = hidden(new)
        if stray or temps:
            what = stray[:1] or temps[:1]
            fails.append(("leftover files", f"exit 0 left {what[0]!r} (outside the outputs or a hidden temp file)"))
        if not fails and case.check is not None:
            problem = case.check(case)
            if problem:
                fails.append(("wrong result", problem))
    elif run.rc in (2, 3) and new:
        fails.append(("leftover files", f"exit {run.rc} left {len(new)} new path(s), e.g. {new[0]!r}"))
    return fails


def run_case(case: Case, in_process: bool = False) -> Outcome:
    before = listing(case.jail)
    run = latopt(case.argv, case.cwd, env=case.env, in_process=in_process, fsize=case.fsize)
    after = listing(case.jail)
    try:
        fails = judge(case, run, before, after)
    except Exception as e:   # a harness bug must not hide the rest of the run
        fails = [("harness error", f"{type(e).__name__}: {e}")]
    return Outcome(case.describe(), case.kind, case.mutation, case.command, case.argv, run.rc, round(run.seconds, 2),
                   fails, run.err[-4000:])


# ============================================================================== exit-0 checks
def _found(case: Case, pattern: str) -> list[Path]:
    return sorted(p for root in case.outputs if root.is_dir() for p in root.rglob(pattern)
                  if not hidden([str(p.relative_to(root))]))


def needs(*patterns: str, then: Callable[[Case, dict[str, Path]], str | None] | None = None
          ) -> Callable[[Case], str | None]:
    """Check: each pattern matches a file under the outputs and every match loads; then ``then``."""
    def check(case: Case) -> str | None:
        got: dict[str, Path] = {}
        for pattern in patterns:
            found = _found(case, pattern)
            if not found:
                return f"exit 0 but no {pattern} was written"
            for p in found:
                try:
                    load_any(p)
                except Exception as e:
                    return f"{p.relative_to(case.cwd)} does not load ({type(e).__name__}: {str(e)[:100]})"
            got[pattern] = found[0]
        return then(case, got) if then else None
    return check


def _export_ok(case: Case, got: dict[str, Path]) -> str | None:
    rec = json.loads(got["export.json"].read_text())
    if rec.get("schema") != "latopt.export/1":
        return f"export.json has schema {rec.get('schema')!r}"
    failed = [g.get("name") for g in rec.get("gates", []) if not g.get("passed")]
    if failed:
        return f"export.json records failed gates with exit 0: {failed}"
    if case.info.get("as_is"):
        want, got_plan = case.info.get("plan") or {}, rec.get("folded") or {}
        if got_plan != want:
            return (f"exported with {len(got_plan)} block(s) folded ({sorted(got_plan, key=int)[:6]}...) but the "
                    f"checkpoint records {len(want)} folded")
        recorded, acc = case.info.get("acc"), (rec.get("accuracy") or {}).get("test_acc")
        if recorded is not None and isinstance(acc, (int, float)) and abs(acc - recorded) > 1 / SAMPLES + 1e-9:
            return f"the exported model's test accuracy {acc:.4f} is not the checkpoint's recorded {recorded:.4f}"
    return None


def _pt_schema(schema: str) -> Callable[[Case, dict[str, Path]], str | None]:
    def then(case: Case, got: dict[str, Path]) -> str | None:
        for p in got.values():
            if p.suffix == ".pt":
                obj = load_pt(p)
                if not isinstance(obj, dict) or obj.get("schema") != schema:
                    return f"{p.name} is not a {schema} file"
        return None
    return then


def _search_ok(case: Case, got: dict[str, Path]) -> str | None:
    rec = json.loads(got["pareto.json"].read_text())
    if rec.get("base_trial") is None:
        return "the study has no completed base trial (the base operating point is missing from the front)"
    return None


def _run_ok(case: Case, got: dict[str, Path]) -> str | None:
    state = json.loads(got["run.json"].read_text())
    missing = {"base", "profile", "search", "export", "report"} - set(state.get("stages", {}))
    if missing:
        return f"run.json lacks stages {sorted(missing)} after exit 0"
    return _export_ok(dataclasses.replace(case, info={}), {"export.json": got["export.json"]})


def _lut_ok(case: Case, got: dict[str, Path]) -> str | None:
    lut = json.loads(got["*.json"].read_text())
    times = [lut.get("fixed_ms")] + [t for b in lut.get("blocks", []) for t in (b.get("ms") or {}).values()]
    bad = [t for t in times if not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0]
    return f"the LUT has times {bad[:3]}" if bad else None


def _inspect_ok(case: Case, got: dict[str, Path]) -> str | None:
    rec = json.loads(got["*.json"].read_text())
    return None if rec.get("schema") == "latopt.inspect/1" else f"inspect JSON has schema {rec.get('schema')!r}"


CHECKS: dict[str, Callable[[Case], str | None]] = {
    "export": needs("export.json", "model.onnx", "REPORT.md", then=_export_ok),
    "train": needs("base.pt", "metrics.json", then=_pt_schema(CHECKPOINT_SCHEMA)),
    "fold": needs("folded.pt", "prefold.pt", "report.json", then=_pt_schema(CHECKPOINT_SCHEMA)),
    "search": needs("pareto.json", then=_search_ok),
    "show": needs("pareto.json"),
    "run": needs("run.json", "export.json", "REPORT.md", then=_run_ok),
    "profile": needs("*.json", then=_lut_ok),
    "inspect": needs("*.json", then=_inspect_ok),
    "regions": needs("report.json"),
    "compress": needs("report.json", "compressed.pt", then=_pt_schema("latopt.mlp/1")),
    "shallow": needs("report.json", "eps_network.pt"),
    "train-mlp": needs("*.pt", then=_pt_schema("latopt.mlp/1")),
    "runtime": needs("*.npy"),
}


# ============================================================================== mutations
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
        from latopt.checkpoint import checkpoint_digest
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
        Consumer("export --fold all", (*EXPORT, "--checkpoint", "{A}", "--fold", "all"), "export"),
        Consumer("fold", ("fold", "--config", "{config}", "--checkpoint", "{A}", "--out", "{out}/fold", "--quiet"),
                 "fold"),
        Consumer("train --checkpoint", ("train", "--config", "{config}", "--checkpoint", "{A}", "--out", "{out}/base",
                                        "--quiet"), "train"),
        Consumer("search --base", ("search", "--config", "{config}", "--base", "{A}", "--lut", "{lut}", "--trials", "1",
                                   "--runs-dir", "{runs}", *SEARCH_FAST), "search"),
    ],
    "lut": [
        Consumer("export --fold auto --lut", (*EXPORT, "--checkpoint", "{base}", "--fold", "auto", "--lut", "{A}"), "export"),
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
def _fill(template: tuple[str, ...] | list[str], paths: dict[str, str]) -> list[str]:
    return [re.sub(r"\{(\w+)\}", lambda m: paths.get(m.group(1), m.group(0)), a) for a in template]


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
        value = _fill([draw(st.sampled_from(values), label="value")], paths)[0]
        argv = with_option(_fill(BASE_ARGV[command], paths), flag, value)
        name = command.split("-base")[0]
        return Case("options", f"{flag} {value!r}", name, argv, cwd, jail, True, CHECKS.get(name), env=env)
    if kind == "env" and slot[1] == "device output":
        command, flag = slot[2], slot[3]
        which = draw(st.sampled_from([("null", 3), ("full", 7)]), label="device")
        node = cwd / "out" / f"dev-{which[0]}"
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, which[1]))
        argv = with_option(_fill(BASE_ARGV[command], paths), flag, str(node))
        return Case("env", f"output is a device like /dev/{which[0]}", command, argv, cwd, jail, which[0] == "full",
                    None, env=env)
    if kind == "env":
        command, limit = slot[2], int(slot[3])
        return Case("env", f"full disk (files capped at {limit} bytes)", command, _fill(BASE_ARGV[command], paths),
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
    return Case(kind, mutation_name, consumer.name, _fill(consumer.argv, paths), cwd, jail, bool(refuse),
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


# ============================================================================== the fuzz suite
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


def fuzz(fx: Fixtures, work: Path, n: int | None, seed: int, *, in_process: bool = False,
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
        log(f"[surface] {i + 1:>4}/{n} {'clean' if out.clean else ', '.join(k for k, _ in out.failures):<28} "
            f"{out.seconds:6.1f} s  {out.case}")
        if out.clean:
            shutil.rmtree(jail, ignore_errors=True)
    return outcomes


# ============================================================================== the fault suite
TIMING_KEYS = {"seconds", "train_seconds", "wall_seconds", "profiling_s", "created", "environment", "latency",
               "worker", "loadavg_during_timing",
               "sha256",   # a checkpoint's digest covers its timing fields too; its content is compared leaf by leaf
               "resumed_after_epoch",   # how the run went (it resumed), not what it made
               "last_invocation"}       # run.json: what the latest invocation did (reused / why), not what it made
ATOMIC: dict[str, set[str]] = {  # output directories that must appear whole: glob -> the files they hold
    "base": {"base.pt", "metrics.json", "config.yaml"},
    "search/base": {"base.pt", "metrics.json", "config.yaml"},
    "fold": {"folded.pt", "prefold.pt", "report.json", "report.txt", "config.yaml"},
    "export": {"model.onnx", "export.json", "REPORT.md"},
}
FAULT_SIGNALS = ("SIGKILL", "SIGTERM", "SIGINT")


@dataclasses.dataclass(frozen=True)
class FaultCommand:
    name: str
    argv: tuple[str, ...]           # {run} is the run directory (same path for every run of this command)
    output: str                     # what it writes under {run}: the artefacts compared
    timeout: float = 600


FAULT_COMMANDS = {c.name: c for c in [
    # train, fold and export write what the fixtures hold (same arguments): Fixtures.reference() reuses them
    FaultCommand("train", ("train", "--config", "{config}", "--out", "{run}/base", "--quiet"), "base"),
    FaultCommand("fold", ("fold", "--config", "{config}", "--checkpoint", "{base}", "--out", "{run}/fold",
                          "--quiet", *FOLD_SOME), "fold"),
    FaultCommand("export", ("export", "--checkpoint", "{folded}", "--device", "{device}", "--samples", "4",
                            "--no-measure", "--out", "{run}/export"), "export"),
    FaultCommand("search", ("search", "--config", "{config}", "--base", "{base}", "--lut", "{lut}", "--trials", "3",
                            "--runs-dir", "{run}/runs", "--heartbeat-interval", "1", "--grace-period", "3", "--quiet"),
                 "runs"),
    FaultCommand("run", ("run", "{config_lut}", "--trials", "2", "--runs-dir", "{run}/runs"), "runs", timeout=900),
]}


def fault_paths(fx: Fixtures, run_dir: Path) -> dict[str, str]:
    cfg = yaml.safe_load(fx.config.read_text())
    cfg["lut"] = str(fx.lut)      # a given LUT: `run` does not re-profile, so its search can be reproduced
    config_lut = fx.root / "config-lut.yaml"
    if not config_lut.is_file():
        config_lut.write_text(yaml.safe_dump(cfg))
    return {"config": str(fx.config), "base": str(fx.base), "folded": str(fx.folded), "lut": str(fx.lut),
            "device": str(fx.device), "config_lut": str(config_lut), "run": str(run_dir)}


def _norm(value: Any, roots: list[str]) -> Any:
    if isinstance(value, str):
        for r in roots:
            value = value.replace(r, "<RUN>")
        return re.sub(r"trial-\d+", "trial-N", value)
    if isinstance(value, float):
        return repr(value)
    return value


def flatten(obj: Any, prefix: str, roots: list[str], out: dict[str, Any]) -> None:
    """Leaves of JSON-like data (and tensors, by digest) as {path: value}; timing keys (and digests) dropped."""
    import torch

    if isinstance(obj, dict):
        for k, v in obj.items():
            if str(k) not in TIMING_KEYS:
                flatten(v, f"{prefix}/{k}", roots, out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            flatten(v, f"{prefix}[{i}]", roots, out)
    elif isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        digest = hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()[:16]
        out[prefix] = f"tensor {t.dtype} {tuple(t.shape)} {digest}"
    else:
        out[prefix] = _norm(obj, roots)


def digest_file(p: Path, key: str, roots: list[str], out: dict[str, Any]) -> None:
    if p.suffix == ".onnx":
        from onnx import numpy_helper

        m = load_any(p)
        for init in m.graph.initializer:
            arr = numpy_helper.to_array(init)
            out[f"{key}:{init.name}"] = f"{arr.dtype} {arr.shape} {hashlib.sha256(arr.tobytes()).hexdigest()[:16]}"
        out[f"{key}:ops"] = hashlib.sha256(" ".join(n.op_type for n in m.graph.node).encode()).hexdigest()[:16]
    elif p.suffix in (".pt", ".json", ".yaml", ".yml"):
        flatten(load_any(p), key, roots, out)
    else:
        out[key] = "present"


def _trial_key(trial_dir: Path) -> str:
    """A search trial by what it is (the base, or its hyper-parameters), not by its number."""
    if (trial_dir / "trial.json").is_file():
        return "trial[base]"
    report = trial_dir / "report.json"
    if report.is_file():
        pf = json.loads(report.read_text()).get("params_fold", {})
        return "trial[" + ",".join(f"{k}={pf.get(k)!r}" for k in ("lambda_c", "tau", "p", "granularity")) + "]"
    return f"trial[incomplete {trial_dir.name}]"


def digest_tree(root: Path, prefixes: list[Path]) -> dict[str, Any]:
    """Every visible artefact under ``root`` as comparable leaves; ``prefixes`` (the run directory, the
    fixtures) in recorded paths become ``<RUN>``."""
    roots = sorted({str(p) for q in prefixes for p in (q, q.resolve())}, key=len, reverse=True)
    out: dict[str, Any] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if not p.is_file() or hidden([str(rel)]) or p.suffix in (".db", ".lock"):
            continue
        parts = list(rel.parts)
        for i, part in enumerate(parts):
            if re.fullmatch(r"trial-\d+", part):
                parts[i] = _trial_key(root.joinpath(*rel.parts[:i + 1]))
        if parts[-1] == "pareto.json":
            _digest_pareto(p, "/".join(parts), roots, out)
        else:
            digest_file(p, "/".join(parts), roots, out)
    return out


def _digest_pareto(p: Path, key: str, roots: list[str], out: dict[str, Any]) -> None:
    """pareto.json with its rows keyed by hyper-parameters and without trial numbers or state counts."""
    rec = json.loads(p.read_text())
    for k in ("base_acc", "max_acc_drop", "objective", "n_front", "n_full_front", "metric_names"):
        flatten(rec.get(k), f"{key}/{k}", roots, out)
    for row in rec.get("rows", []):
        rk = "base" if row.get("base") else ",".join(f"{k}={row.get(k)!r}" for k in ("lambda_c", "tau", "p"))
        flatten({k: v for k, v in row.items() if k not in ("trial", "checkpoint")}, f"{key}/row[{rk}]", roots, out)


def differences(ref: dict[str, Any], live: dict[str, Any], ignore: set[str]) -> list[str]:
    """What differs, coarsest first: whole files or trials missing or new, then single leaves."""
    def group(key: str) -> str:
        parts = key.split("/")
        cut = next((i for i, p in enumerate(parts) if p.startswith("trial[") or "." in p.split(":")[0]), len(parts) - 1)
        return "/".join(parts[:cut + 1]).split(":")[0]

    keys = sorted((set(ref) | set(live)) - ignore)
    ref_groups, live_groups = {group(k) for k in ref}, {group(k) for k in live}
    out = [f"{g} missing after the rerun" for g in sorted(ref_groups - live_groups)]
    out += [f"{g} new after the rerun" for g in sorted(live_groups - ref_groups)]
    out += [f"{k}: {ref.get(k, '<missing>')!s:.60} != {live.get(k, '<missing>')!s:.60}" for k in keys
            if ref.get(k, "<missing>") != live.get(k, "<missing>") and group(k) in ref_groups & live_groups]
    return out


def partial_files(root: Path) -> list[str]:
    """Visible files that do not load, and atomic output directories that are incomplete."""
    problems = []
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if hidden([rel]):
            continue
        if p.is_file() and p.suffix not in (".lock",):
            try:
                load_any(p)
            except Exception as e:
                problems.append(f"{rel} does not load ({type(e).__name__})")
        if p.is_dir():
            for pattern, files in ATOMIC.items():
                if rel == pattern or rel.endswith("/" + pattern):
                    missing = files - {c.name for c in p.iterdir()}
                    if missing:
                        problems.append(f"{rel}/ lacks {sorted(missing)}")
            if re.search(r"(^|/)trial-\d+$", rel):
                names = {c.name for c in p.iterdir()}
                if "trial.json" not in names and not ATOMIC["fold"] <= names:
                    problems.append(f"{rel}/ is incomplete: {sorted(names)}")
    return problems


def group_alive(pgid: int) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == pgid and fields[0] != "Z":
                    pids.append(int(d.name))
    return pids


@dataclasses.dataclass
class Reference:
    digest: dict[str, Any]          # of the uninterrupted run's output
    seconds: float                  # how long it ran (the range of time points)
    unstable: set[str]              # leaves that differ between two uninterrupted runs: not compared


def fixture_reference(fx: Fixtures, command: str, seconds: float = 10.0) -> Reference:
    """The fixtures' own train/fold/export output as the uninterrupted run (same arguments and seed)."""
    output = FAULT_COMMANDS[command].output
    return Reference(digest_tree(fx.root / output, [fx.root]), seconds, set())


def reference(cmd: FaultCommand, fx: Fixtures, work: Path, copies: int, log: Callable[[str], None]) -> Reference:
    """Uninterrupted run(s) in the same directory the faulted runs use; with 2 copies, what differs
    between them is noise (not compared)."""
    run_dir = work / cmd.name / "run"
    digests, seconds = [], []
    for i in range(copies):
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        r = latopt(_fill(cmd.argv, fault_paths(fx, run_dir)), run_dir, timeout=cmd.timeout)
        if r.rc != 0:
            raise SystemExit(f"the uninterrupted `latopt {cmd.name}` failed (exit {r.rc}):\n{r.err[-3000:]}")
        seconds.append(r.seconds)
        digests.append(digest_tree(run_dir / cmd.output, [run_dir, fx.root]))
        keep = work / cmd.name / f"reference-{i}"
        shutil.rmtree(keep, ignore_errors=True)
        os.replace(run_dir, keep)
        log(f"[surface] reference {cmd.name} #{i + 1}: {r.seconds:.1f} s, {len(digests[-1])} leaves")
    unstable = {k for k in set(digests[0]) | set(digests[-1]) if digests[0].get(k) != digests[-1].get(k)}
    return Reference(digests[0], max(seconds), unstable)


def fault_case(cmd: FaultCommand, fx: Fixtures, work: Path, ref: Reference, sig: str, point: tuple[str, float]
               ) -> Outcome:
    """Interrupt ``cmd`` with ``sig`` at ``point`` (("time", s) or ("event", delay after the first hidden
    entry)), check what is visible, rerun, compare with the reference."""
    run_dir = work / cmd.name / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    argv = _fill(cmd.argv, fault_paths(fx, run_dir))
    label = f"{cmd.name}: {sig} at " + (f"{point[1]:.1f} s" if point[0] == "time" else f"first temp entry +{point[1]:.2f} s")
    fails: list[tuple[str, str]] = []
    t0 = time.perf_counter()
    log_path = run_dir.parent / "interrupted.log"     # beside the run directory, not in it
    with open(log_path, "wb") as log_file:
        p = start(argv, run_dir, output=log_file)
    interrupted = _interrupt(p, run_dir, sig, point, t0, ref.seconds)
    try:
        p.wait(timeout=120)
    except subprocess.TimeoutExpired:
        kill_group(p)
        p.wait()
        fails.append(("timeout", f"still running 120 s after {sig}"))
    err_s = log_path.read_bytes().decode(errors="replace")
    time.sleep(0.5)
    deadline = time.monotonic() + 5
    while group_alive(p.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    orphans = group_alive(p.pid)
    if orphans:
        fails.append(("orphan processes", f"{len(orphans)} process(es) of the command still running 5 s after it "
                                          f"exited ({sig})"))
    kill_group(p)
    if TRACEBACK in err_s:
        fails.append(("traceback", f"after {sig}: {exception_line(err_s)}"))
    after_kill = listing(run_dir)
    temps = hidden(after_kill)
    if temps and sig != "SIGKILL":
        fails.append(("leftover files", f"after {sig}: {temps[0]!r} left behind"))
    for problem in partial_files(run_dir)[:1]:
        fails.append(("partial files", f"after {sig}: {problem}"))
    rerun = latopt(argv, run_dir, timeout=cmd.timeout)
    if rerun.rc != 0 or TRACEBACK in rerun.err:
        kind = "traceback" if TRACEBACK in rerun.err else "wrong exit code"
        fails.append((kind, f"the rerun exited {rerun.rc}: {(error_lines(rerun.err) or ['?'])[-1][:200]}"))
    else:
        new_temps = sorted(set(hidden(listing(run_dir))) - set(temps))   # those after the signal: counted above
        if new_temps:
            fails.append(("leftover files", f"after the rerun: {new_temps[0]!r}"))
        diff = differences(ref.digest, digest_tree(run_dir / cmd.output, [run_dir, fx.root]), ref.unstable)
        if diff:
            fails.append(("artefact mismatch", f"differs from the uninterrupted run: {'; '.join(diff[:3])}"
                                               + (f" (+{len(diff) - 3} more)" if len(diff) > 3 else "")))
    notes = f"interrupted={interrupted} exit={p.returncode}" + (f"; SIGKILL left {len(temps)} hidden temp entries"
                                                                 if temps and sig == "SIGKILL" else "")
    return Outcome(label, "fault", sig, cmd.name, argv, p.returncode, round(time.perf_counter() - t0, 1), fails,
                   err_s[-3000:], notes)


def _interrupt(p: subprocess.Popen, run_dir: Path, sig: str, point: tuple[str, float], t0: float,
               ref_seconds: float) -> bool:
    """Wait for the point, then send the signal; False when the command finished first.

    The process is stopped (SIGSTOP) first, so it cannot finish between the check and the signal."""
    if point[0] == "time":
        while p.poll() is None and time.perf_counter() - t0 < point[1]:
            time.sleep(0.01)
    else:
        end = t0 + max(ref_seconds * 3, 60)
        while p.poll() is None and time.perf_counter() < end and not hidden(listing(run_dir)):
            time.sleep(0.002)
        time.sleep(point[1])
    # SIGINT is Ctrl-C: the whole foreground process group; SIGTERM/SIGKILL (`kill`, the OOM killer): the process
    send = os.killpg if sig == "SIGINT" else os.kill
    try:
        send(p.pid, signal.SIGSTOP)
        if p.poll() is not None:
            return False
        send(p.pid, getattr(signal, sig))
        send(p.pid, signal.SIGCONT)
    except ProcessLookupError:
        return False
    return True


def faults(fx: Fixtures, work: Path, n: int, seed: int, *, commands: tuple[str, ...] | None = None,
           log: Callable[[str], None] = print) -> tuple[list[Outcome], dict[str, Any]]:
    rng = random.Random(seed)
    chosen = [c for c in FAULT_COMMANDS.values() if commands is None or c.name in commands]
    refs = {c.name: reference(c, fx, work, 2, log) for c in chosen}
    outcomes = []
    for i in range(n):
        cmd = chosen[i % len(chosen)]
        sig = rng.choice(FAULT_SIGNALS)
        point = ("time", rng.uniform(0, refs[cmd.name].seconds)) if rng.random() < 0.5 else ("event", rng.uniform(0, 0.3))
        out = fault_case(cmd, fx, work, refs[cmd.name], sig, point)
        outcomes.append(out)
        log(f"[surface] {i + 1:>3}/{n} {'clean' if out.clean else ', '.join(k for k, _ in out.failures):<28} "
            f"{out.seconds:6.1f} s  {out.case}")
    noise = {name: sorted(r.unstable) for name, r in refs.items()}
    return outcomes, noise


# ============================================================================== report
def summary(outcomes: list[Outcome]) -> dict[str, Any]:
    kinds: dict[str, dict[str, Any]] = {}
    for o in outcomes:
        for kind, detail in o.failures:
            k = kinds.setdefault(kind, {"cases": 0, "example": {"case": o.case, "argv": o.argv, "exit": o.rc,
                                                                "detail": detail}})
            k["cases"] += 1
    pairs = Counter(f"{o.kind}: {o.mutation.split(' [')[0]} → {o.command}" for o in outcomes)
    return {"tried": len(outcomes), "clean": sum(o.clean for o in outcomes), "kinds": kinds,
            "distinct_mutation_command_pairs": len(pairs)}


def print_summary(suite: str, s: dict[str, Any]) -> None:
    print(f"\n{suite}: {s['tried']} cases tried, {s['clean']} clean, {s['tried'] - s['clean']} with failures "
          f"({s['distinct_mutation_command_pairs']} distinct mutation/command pairs; a case can show several kinds)")
    for kind, k in sorted(s["kinds"].items(), key=lambda kv: -kv[1]["cases"]):
        ex = k["example"]
        print(f"  {kind:<20} {k['cases']:>4}   e.g. {ex['case']}: {ex['detail'][:160]}")


def checkout() -> str:
    with contextlib.suppress(Exception):
        return subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                              text=True, check=True).stdout.strip()
    return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("suite", choices=("fuzz", "faults"))
    ap.add_argument("--n", type=int, default=None, help="cases (default: fuzz every mutation/command pair once, "
                    "faults 15)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write every case and the summary here")
    ap.add_argument("--work", help="working directory (default: a new one under /tmp); fixtures are reused from it")
    ap.add_argument("--in-process", action="store_true", help="fuzz: run cases through latopt.cli.main (faster; "
                    "no memory/file-size limits, so the 'env' cases are skipped)")
    ap.add_argument("--kinds", nargs="*", default=list(KINDS), help=f"fuzz: artefact kinds (default all: {KINDS})")
    ap.add_argument("--commands", nargs="*", help="faults: commands (default all)")
    args = ap.parse_args(argv)
    import tempfile

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix=f"latopt-{args.suite}-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"[surface] {args.suite} on checkout {checkout()} ({ROOT}); work dir {work}")
    if args.in_process:
        import torch

        torch.set_num_threads(1)
    fx = Fixtures(work / "fixtures", in_process=args.in_process).build()
    t0 = time.perf_counter()
    noise: dict[str, Any] = {}
    if args.suite == "fuzz":
        outcomes = fuzz(fx, work, args.n, args.seed, in_process=args.in_process, kinds=tuple(args.kinds))
    else:
        outcomes, noise = faults(fx, work, args.n or 15, args.seed,
                                 commands=tuple(args.commands) if args.commands else None)
    s = summary(outcomes)
    print_summary(args.suite, s)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "suite": args.suite, "checkout": checkout(), "seed": args.seed, "n": args.n, "seconds": time.perf_counter() - t0,
            "mode": "in-process" if args.in_process else "subprocess",
            **s, "not_compared_between_uninterrupted_runs": noise,
            "cases": [dataclasses.asdict(o) | {"clean": o.clean} for o in outcomes]}, indent=1, default=str))
        print(f"[surface] wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
