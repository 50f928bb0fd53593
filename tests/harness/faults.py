"""The fault suite: interrupt a command, check what is visible, rerun, compare with an uninterrupted run.

Each case runs one of ``train``, ``fold``, ``search``, ``export``, ``run`` (tiny settings) and
sends SIGKILL, SIGTERM (both to the process) or SIGINT (to its process group, like Ctrl-C) at a random
time within the uninterrupted run's duration, or just after the first hidden temp entry appears. Then
it checks what is visible (every file loads; an output directory that exists is complete; after
SIGTERM/SIGINT no hidden temp entry; no process of the group left running) and reruns the command: it
must exit 0 and its artefacts must equal those of an uninterrupted run with the same seed: tensors
exactly, JSON/YAML minus timing fields, paths normalised. Fields that differ between two uninterrupted
runs are not compared (they are listed in the JSON output). Hidden temp files a SIGKILL leaves behind
are noted, not counted: no process can clean up after SIGKILL.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from .files import hidden, listing, load_any
from .fixtures import FOLD_SOME, Fixtures
from .judge import Outcome
from .process import TRACEBACK, error_lines, exception_line, fill, kill_group, latopt, start

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
    # train, fold and export write what the fixtures hold (same arguments): fixture_reference() reuses them
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
        r = latopt(fill(cmd.argv, fault_paths(fx, run_dir)), run_dir, timeout=cmd.timeout)
        if r.rc != 0:
            raise SystemExit(f"the uninterrupted `latopt {cmd.name}` failed (exit {r.rc}):\n{r.err[-3000:]}")
        seconds.append(r.seconds)
        digests.append(digest_tree(run_dir / cmd.output, [run_dir, fx.root]))
        keep = work / cmd.name / f"reference-{i}"
        shutil.rmtree(keep, ignore_errors=True)
        os.replace(run_dir, keep)
        log(f"[harness] reference {cmd.name} #{i + 1}: {r.seconds:.1f} s, {len(digests[-1])} leaves")
    unstable = {k for k in set(digests[0]) | set(digests[-1]) if digests[0].get(k) != digests[-1].get(k)}
    return Reference(digests[0], max(seconds), unstable)


def fault_case(cmd: FaultCommand, fx: Fixtures, work: Path, ref: Reference, sig: str, point: tuple[str, float]
               ) -> Outcome:
    """Interrupt ``cmd`` with ``sig`` at ``point`` (("time", s) or ("event", delay after the first hidden
    entry)), check what is visible, rerun, compare with the reference."""
    run_dir = work / cmd.name / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    argv = fill(cmd.argv, fault_paths(fx, run_dir))
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


def run(fx: Fixtures, work: Path, n: int, seed: int, *, commands: tuple[str, ...] | None = None,
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
        log(f"[harness] {i + 1:>3}/{n} {'clean' if out.clean else ', '.join(k for k, _ in out.failures):<28} "
            f"{out.seconds:6.1f} s  {out.case}")
    noise = {name: sorted(r.unstable) for name, r in refs.items()}
    return outcomes, noise
