"""GPU acceptance check: train, resume, fold, torchrun and time on one CUDA GPU; one table.

    python tools/gpu_check.py [--out DIR] [--epochs 2]      on a machine with a CUDA GPU (rows' budgets: 345 s)
    python tools/gpu_check.py --cpu-smoke                    the same steps on the CPU, tiny (a check of the script)
    python tools/gpu_check.py --carry [DIR]                  download the wheels a bare GPU image lacks (into
                                                             .gpu-wheels/, git-ignored)

**A GPU machine that cannot download.** A GPU image with Python 3.12 (x86-64) and torch, torchvision, timm,
numpy, scipy, scikit-learn, PyYAML, tqdm, matplotlib, onnx, onnxscript and ONNX Runtime, but no pydantic,
needs only :data:`CARRY_WHEELS`: pydantic, pydantic-core, annotated-types, typing-inspection,
typing-extensions (pydantic needs typing-extensions >= 4.16; carried so that an older one in the image cannot
break it) and platformdirs (the TensorRT timing cache's directory), about 2.8 MB. ``--carry`` downloads exactly these (cp312, manylinux x86-64, ``pip download
--no-deps``; replacing the wheels in DIR) where pip can reach PyPI; ship ``.gpu-wheels/`` with the checkout and
run, in the checkout's root there (:data:`DEVICE_LINE`)::

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target .gpu-site .gpu-wheels/*.whl && PYTHONPATH=.gpu-site python3 tools/gpu_check.py

The script puts the checkout on ``sys.path`` itself (latopt need not be installed), and its subprocesses
inherit ``PYTHONPATH``. Nothing of latopt's search stack (optuna, SQLAlchemy, highspy) is imported by the
check.

Checks, in order (each one row of the table):

1. **train ×3**: ``latopt``'s base training (:func:`latopt.training.base_training.train_base`) of the quickstart config
   (MobileNetV2-0.5 on digits, 32 px) for ``--epochs`` epochs on ``cuda`` with ``train.amp`` none (fp32,
   with torch's default TF32 switches, as ``latopt train`` runs), bf16 and fp16: seconds of each epoch, test
   accuracy (recorded in float32); passes when the run finishes with finite losses and a test accuracy above
   3x chance. ``--cpu-smoke``: none and bf16 on the CPU, and fp16 must be *refused* with latopt's one-line
   error (fp16 needs CUDA); no accuracy bar (tiny data).
2. **resume**: ``latopt train`` (3 epochs, ``train.channels_last``, fp16; ``--cpu-smoke``: fp32 on the CPU)
   in a subprocess, SIGKILLed (its process group) as soon as its first epoch's resume state is on disk, then
   the same command again (the mechanism of the CPU tests of a killed-and-resumed ``latopt train``); passes
   when the kill came before the run finished, the rerun said it resumes, its metrics say
   ``resumed_after_epoch`` >= 1, 3 finite epoch losses, the device and the precision asked for, and the resume
   state is gone. Not compared with an uninterrupted run: CUDA fp16 training is not bit-reproducible.
3. **fold**: pre-fold + fold + post-fold (:func:`latopt.layerfold.run_fold`) of the fp32 base on the same
   device; passes when the fold gate passed (``fold_check``: max abs / max rel error of the folded network
   against the linearised σ_α one, on the CPU in float64/float32) and the linearised and folded networks'
   test accuracies on the device differ by at most one test sample (epoch s: the pre-fold epochs).
4. **torchrun**: ``torchrun --nproc-per-node 1 -m latopt train`` (1 epoch) in a subprocess; passes when it
   exits 0, its metrics say 1 process on ``cuda:0`` and rank 0 reported the process group on NCCL
   (``--cpu-smoke``: on the CPU with gloo).
5. **latency (torch) fp32 / fp16**: the base and the folded network of step 3 timed in one interleaved run
   by latopt's torch backend (``gpu-torch``: CUDA events on the backend's stream, fp32 with TF32 off, then
   the same at ``precision: fp16``; ``--cpu-smoke``: ``cpu-torch`` fp32, and the fp16 row is not exercised:
   fp16 timing is CUDA-only), timing capped (:data:`TIMING`); passes when both medians are finite and positive and the
   TF32 switches are restored after the backend closes.
6. **profile**: ``latopt profile`` of MobileNetV2-1.0 at 224 with the ``gpu-torch`` profile, its timing
   capped (:data:`TIMING`): the LUT's prediction error on the end-to-end networks held out of its
   calibration (``--cpu-smoke``: ``cpu-torch``, capped the same, 0.35 at 32).
7. **export**: ``latopt export`` of step 3's folded checkpoint on the same capped profile: its gates and the
   measured speed-up over the unfolded network.
8. **TensorRT** / **ORT CUDA** / **pycuda**: whether ``tensorrt`` imports, whether onnxruntime offers the CUDA
   provider, whether pycuda is installed. None of them is exercised by this script: each row says ``not
   exercised`` (and what is installed), never pass. A ``tensorrt`` that is installed but does not import is
   a failure.

**Time.** The whole check, with the start of a GPU machine (a minute or two), must fit one 10-minute call
with time to spare, so every GPU row has a budget (:data:`GPU_BUDGET_S`, 345 s in all): a subprocess is
killed at its row's budget, and a row that overruns it fails, saying how long it took (a slow machine or a
hang, not a wrong result). The basis is the ``--cpu-smoke`` rows' times, measured in a Python 3.12 venv
that holds only such an image's packages plus the carried wheels (torch 2.11.0, CUDA build, on the CPU; one
thread; a shared 2-core CPU at load 1.5-2.2; three runs): train fp32 0.8 s, bf16 0.9-1.0, fp16 refused 0.0,
resume 7.9-8.3, fold 1.4-1.5, torchrun 5.9-6.0, latency fp32 0.5-0.8, profile 4.9-5.3, export 4.8-5.3;
27-29 s of rows and 31-33 s in all (start-up and the import check included). Starting a Python process that
imports torch took 2.5-3.3 s of that; the resume row starts two, torchrun two (launcher and worker),
profile and export one each. Each GPU budget is that row's smoke time, plus up to 15 s per process for CUDA's
start (context, cuDNN, cuBLAS, NCCL), plus a generous allowance for the full-size work the smoke leaves out
(1 078 training images instead of 160 — 34 steps of 32 an epoch, launch-bound on a GPU; fold's 6 + 4 epochs
instead of 1 + 1; MobileNetV2-1.0 at 224 instead of 0.35 at 32, all its runners in one capped timing run).
Seconds: train fp32 35 (CUDA's first start), bf16 15, fp16 15, resume 60, fold 40, torchrun 45, latency
fp32 15, fp16 15, profile 60, export 45.

**Not a row: does measuring the GPU pay?** DP plans from a ``gpu-torch`` LUT against plans from a ``flops`` LUT, timed on
the GPU (MobileNetV2-1.0 and EfficientNet-Lite0 at 224, batches 1 and 128), is ``tools/gpu_plans.py``: a device
call of its own (about 4 minutes of work, too long for the rows' budgets), installed the same way (its
``DEVICE_LINE`` starts with :data:`INSTALL_LINE`); docs/gpu.md.

Exit codes: **3** when no row failed but rows were not exercised: the TensorRT path is not covered by this
check, so a clean run ends with 3, never with 0 (TensorRT is covered by ``pytest -m tensorrt`` on a machine
that has it); **1** when a row failed; **2** when the check cannot start (no GPU without ``--cpu-smoke``, or
a package latopt needs is missing or does not import: besides torch and timm that is numpy, pydantic, pyyaml,
scikit-learn — digits — and scipy; or ``--carry`` could not download), and when an argument is wrong (``--out`` or
``--carry`` not a writable directory — empty, a file, a link loop —, ``--epochs`` below 1: one line, before any
work). ``--carry`` exits 0 when it downloaded every wheel.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NEEDED = ("torch", "timm", "numpy", "pydantic", "yaml", "sklearn", "scipy")
# latopt's modules that the check's rows and its `latopt train / profile / export` subprocesses run: imported
# before the first row, so that a package missing on a bare image stops the check at once, in one line
CHECK_MODULES = ("latopt.config", "latopt.training.loop", "latopt.training.accel", "latopt.training.base_training", "latopt.training.resume",
                 "latopt.layerfold", "latopt.nets.models", "latopt.files.checkpoint", "latopt.latency.devices", "latopt.latency.profiler",
                 "latopt.latency.backends.torch", "latopt.latency.backends.onnxruntime", "latopt.latency.onnx_io",
                 "latopt.export", "latopt.cli", "latopt.cli.train", "latopt.cli.profile", "latopt.cli.export")

# --carry: the wheels a GPU image with torch, timm, onnx and ONNX Runtime but no pydantic lacks (cp312,
# manylinux x86-64; installed there with --no-deps, so this is the whole closure). pydantic and
# pydantic-core need typing-extensions >= 4.16.0, which is carried too: the image's version is not known.
CARRY_WHEELS = ("pydantic==2.14.4", "pydantic-core==2.50.5", "annotated-types==0.8.0", "typing-inspection==0.4.5",
                "typing-extensions==4.16.0", "platformdirs==4.14.9")
CARRY_DIR = ".gpu-wheels"
SITE_DIR = ".gpu-site"    # where the device line installs them, inside the checkout (git-ignored)
CARRY_LIMIT_MIB = 16  # what travels to a GPU machine is limited (64 MiB with the checkout): keep far below
CARRY_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                   "manylinux2014_x86_64", "manylinux1_x86_64")
INSTALL_LINE = (f"python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "
                f"{SITE_DIR} {CARRY_DIR}/*.whl")   # the carried wheels, offline (tools/gpu_plans.py runs after it too)
DEVICE_LINE = f"{INSTALL_LINE} && PYTHONPATH={SITE_DIR} python3 tools/gpu_check.py"

# Seconds per row on a GPU (the module docstring says where they come from); the keys are run()'s step names.
GPU_BUDGET_S: dict[str, float] = {
    "train fp32": 35, "train bf16": 15, "train fp16": 15, "resume": 60, "fold": 40, "torchrun": 45,
    "latency fp32": 15, "latency fp16": 15, "profile": 60, "export": 45}
SMOKE_TIMEOUT_S = 300.0  # a subprocess of the CPU smoke (shared CPUs: no budget, only a hang guard)
# timing of the latency rows and of `latopt profile` / `latopt export`: the device profile's settings (gpu-torch;
# cpu-torch in the smoke), capped so that each interleaved measurement ends within a few seconds
TIMING = {"min_repeats": 30, "max_repeats": 300, "budget_s": 4.0}
RESUME_EPOCHS = 3
NOT_EXERCISED = "not exercised"


@dataclass
class Row:
    check: str
    status: str                       # pass | FAIL | skipped (an earlier step failed) | not exercised
    epoch_s: list[float] = field(default_factory=list)
    acc: float | None = None
    detail: str = ""
    seconds: float | None = None      # wall time of the row


def _missing() -> list[str]:
    return [m for m in NEEDED if importlib.util.find_spec(m) is None]


def _unimportable() -> list[str]:
    """``module: error`` for each of :data:`CHECK_MODULES` that does not import (a package missing or too old)."""
    bad = []
    for m in CHECK_MODULES:
        try:
            importlib.import_module(m)
        except Exception as e:  # noqa: BLE001 - reported in one line each, the check does not start
            bad.append(f"{m}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200])
    return bad


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    """The environment of the check's subprocesses: the checkout first on PYTHONPATH, the rest kept."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}


def _failed(check: str, e: BaseException) -> Row:
    tb = traceback.extract_tb(e.__traceback__)
    where = f" ({Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""
    return Row(check, "FAIL", detail=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}{where}"[:300])


def _tail(text: str, n: int = 3) -> str:
    return " | ".join(text.strip().splitlines()[-n:])


class Checks:
    def __init__(self, args: argparse.Namespace) -> None:
        from latopt.config import load_config
        from latopt.training.torch_settings import set_threads

        self.args = args
        self.smoke = args.cpu_smoke
        self.device = "cpu" if self.smoke else "cuda"
        self.out = Path(args.out).resolve()  # the subprocesses run in it
        base: dict[str, Any] = {"train.epochs": args.epochs, "train.device": self.device}
        if self.smoke:  # a few steps of everything
            base |= {"data.max_samples": 160, "fold.epochs": 1, "fold.post_epochs": 1, "fold.lambda_c": 10.0,
                     "fold.tau": 0.6, "fold.alpha_lr": 0.5}  # and fold something in one epoch
        self.cfg = load_config("quickstart", base)
        set_threads(self.cfg.threads)  # as `latopt train` does (quickstart: 1 intra-op thread)
        self.rows: list[Row] = []
        self.bases: dict[str, Path] = {}
        self.fold_dir = self.out / "fold"
        self.step = ""  # the step running now (its budget: _timeout)

    def _timeout(self) -> float:
        return SMOKE_TIMEOUT_S if self.smoke else float(GPU_BUDGET_S[self.step])

    def _device_profile(self) -> Any:
        """``gpu-torch`` (smoke: ``cpu-torch``) with :data:`TIMING`."""
        from latopt.latency.devices import load_device

        return load_device("cpu-torch" if self.smoke else "gpu-torch").model_copy(update=TIMING)

    def _device_file(self) -> str:
        """The device for `latopt profile / export`: a YAML file of :meth:`_device_profile` (same name)."""
        import yaml

        prof = self._device_profile()
        path = self.out / f"{prof.name}-check.yaml"
        path.write_text(yaml.safe_dump(prof.model_dump(mode="json", exclude={"path"}, exclude_none=True)))
        return str(path)

    # ------------------------------------------------------------------------------------------- 1. train
    def train(self, amp: str) -> Row:
        from latopt.errors import LatoptError
        from latopt.training.accel import resolve
        from latopt.training.base_training import train_base

        name = f"train {'fp32' if amp == 'none' else amp}"
        cfg = self.cfg.with_overrides({"train.amp": amp})
        if self.smoke and amp == "fp16":
            try:
                resolve(cfg)
            except LatoptError as e:
                ok = "fp16 needs a CUDA GPU" in str(e) and "\n" not in str(e)
                return Row(f"{name} (refused)", "pass" if ok else "FAIL", detail=str(e)[:120])
            return Row(f"{name} (refused)", "FAIL", detail="fp16 on the CPU was not refused")
        out = self.out / f"base-{amp}"
        m = train_base(cfg, out, progress=False).metrics
        secs = [float(h["seconds"]) for h in m.history]
        finite = all(math.isfinite(h["loss"]) for h in m.history)
        bar = 0.0 if self.smoke else 3.0 / 10  # digits: 10 classes
        ok = finite and m.test_acc > bar and m.device.startswith(self.device) and len(secs) == self.args.epochs
        self.bases[amp] = out / "base.pt"
        return Row(name, "pass" if ok else "FAIL", secs, m.test_acc,
                   f"device {m.device}, final loss {m.history[-1]['loss']:.3f}, val {m.val_acc:.3f}"
                   + ("" if ok else f"; needs finite losses and test acc > {bar}"))

    # ------------------------------------------------------------------------------------------ 2. resume
    def resume(self) -> Row:
        """``latopt train`` SIGKILLed after its first epoch's state is written, then rerun: it resumes."""
        from latopt.config import write_config
        from latopt.training.resume import resume_path

        amp = "none" if self.smoke else "fp16"
        name = f"resume {'fp32' if amp == 'none' else amp} NHWC"
        cfg_path = self.out / "resume.yaml"
        write_config(self.cfg.with_overrides({"train.epochs": RESUME_EPOCHS, "train.amp": amp,
                                              "train.channels_last": True}), cfg_path)
        out = self.out / "resume"
        state = resume_path(out)
        cmd = [sys.executable, "-m", "latopt", "train", "--config", str(cfg_path), "--out", str(out)]
        deadline = time.monotonic() + self._timeout()
        log = self.out / "resume-killed.log"
        with log.open("w") as err:
            p = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
            try:
                while not state.exists() and p.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.01)
                written = state.exists()
            finally:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)  # the process group: no cleanup runs, no worker survives
                p.wait()
        if not written:
            why = (f"exit {p.returncode} before an epoch state was written: {_tail(log.read_text())}"
                   if p.returncode != -signal.SIGKILL else f"no epoch state within its budget of {self._timeout():.0f} s")
            return Row(name, "FAIL", detail=why[:300])
        if out.exists():
            return Row(name, "FAIL", detail=f"the run finished before the kill (its {RESUME_EPOCHS} epochs were too "
                                            "fast to interrupt): nothing was resumed")
        r = subprocess.run(cmd, env=_env(), capture_output=True, text=True,
                           timeout=max(1.0, deadline - time.monotonic()))
        if r.returncode != 0:
            return Row(name, "FAIL", detail=f"rerun exit {r.returncode}: {_tail(r.stderr)}"[:300])
        m = json.loads((out / "metrics.json").read_text())
        losses = [float(h["loss"]) for h in m["history"]]
        resumed = "resuming from" in r.stderr
        ok = (resumed and int(m.get("resumed_after_epoch") or 0) >= 1 and len(losses) == RESUME_EPOCHS
              and all(math.isfinite(v) for v in losses) and not state.exists()
              and str(m["device"]).startswith(self.device) and m.get("amp") == amp)
        return Row(name, "pass" if ok else "FAIL", [float(h["seconds"]) for h in m["history"]], float(m["test_acc"]),
                   f"killed after epoch 1 (SIGKILL); rerun {'resumed' if resumed else 'did NOT say it resumed'} after "
                   f"epoch {m.get('resumed_after_epoch')}; {len(losses)} epochs, final loss {losses[-1]:.3f} on "
                   f"{m['device']} ({m.get('amp')}, channels_last); resume state "
                   + ("removed" if not state.exists() else "LEFT BEHIND"))

    # -------------------------------------------------------------------------------------------- 3. fold
    def fold(self) -> Row:
        from latopt.layerfold import run_fold

        if "none" not in self.bases:
            return Row("fold", "skipped", detail="no fp32 base (its training failed)")
        rep = run_fold(self.cfg, self.bases["none"], self.fold_dir, progress=False).report.to_json()
        fc, acc = rep["fold_check"], rep["acc"]
        n_test = json.loads((self.bases["none"].parent / "metrics.json").read_text())["sizes"]["test"]
        gap = abs(acc["linearized"] - acc["folded"]) * n_test
        ok = bool(fc["passed"]) and gap <= 1 + 1e-9
        secs = [h["seconds"] for h in rep["history"]["prefold"]]  # the pre-fold epochs (σ_α training)
        return Row("fold (pre/fold/post)", "pass" if ok else "FAIL", secs, float(acc["finetuned"]),
                   f"{rep['seconds']['total']:.1f} s in all; {rep['n_folded']}/{rep['n_foldable']} blocks folded; gate max abs {fc['max_abs']:.2e}, max rel "
                   f"{fc['max_rel']:.2e} (limit {fc['limit']}); linearised vs folded test acc "
                   f"{acc['linearized']:.4f} / {acc['folded']:.4f} ({gap:.0f} samples)")

    # ---------------------------------------------------------------------------------------- 4. torchrun
    def torchrun(self) -> Row:
        out = self.out / "torchrun"
        cfg_path = self.out / "torchrun.yaml"
        from latopt.config import write_config

        write_config(self.cfg.with_overrides({"train.epochs": 1}), cfg_path)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "--master-port",
               str(_free_port()), "-m", "latopt", "train", "--config", str(cfg_path), "--out", str(out), "-v"]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=self._timeout())
        wall = time.perf_counter() - t0
        backend = "gloo" if self.smoke else "nccl"
        seen = re.search(r"rank 0/1 on (\S+) \((\w+)\)", r.stderr)
        if r.returncode != 0:
            return Row("torchrun 1 proc", "FAIL", detail=f"exit {r.returncode}: {_tail(r.stderr)}"[:300])
        m = json.loads((out / "metrics.json").read_text())
        want_dev = "cpu" if self.smoke else "cuda:0"
        ok = m["processes"] == 1 and m["device"] == want_dev and seen is not None and seen.group(2) == backend
        return Row("torchrun 1 proc", "pass" if ok else "FAIL", [float(h["seconds"]) for h in m["history"]],
                   float(m["test_acc"]), f"process group: {seen.group(0) if seen else 'no rank line'}; metrics: "
                   f"{m['processes']} process on {m['device']}; {wall:.0f} s with start-up")

    # ----------------------------------------------------------------------------------------- 5. latency
    def latency(self, precision: str) -> Row:
        from latopt.files.checkpoint import load_checkpoint
        from latopt.latency.profiler import measure_networks
        from latopt.training.torch_settings import tf32_flags

        prof = self._device_profile()
        name = f"latency {'gpu-torch' if self.smoke else prof.name} {precision}"
        if self.smoke and precision != "fp32":
            return Row(name, NOT_EXERCISED, detail=f"{precision} timing needs CUDA (gpu-torch); the smoke runs on the CPU")
        folded_pt = self.fold_dir / "folded.pt"
        if "none" not in self.bases or not folded_pt.is_file():
            return Row(name, "skipped", detail="no base and folded checkpoints (an earlier step failed)")
        prof = prof.model_copy(update={"precision": precision, "warmup": 10})
        nets = {k: load_checkpoint(p)[0].eval() for k, p in (("base", self.bases["none"]), ("folded", folded_pt))}
        before = tf32_flags()
        res = self.cfg.data.resolution
        stats = measure_networks(nets, prof, (1, 3, res, res))
        b, f = stats["base"].median_ms, stats["folded"].median_ms
        ok = all(math.isfinite(v) and v > 0 for v in (b, f)) and tf32_flags() == before
        return Row(f"latency {prof.name} {precision}", "pass" if ok else "FAIL", detail=(
            f"batch 1 @{res}: base {b:.3f} ms [IQR {stats['base'].iqr_ms:.3f}], folded {f:.3f} ms "
            f"[IQR {stats['folded'].iqr_ms:.3f}], speed-up x{b / f:.2f}; n {stats['base'].n}/{stats['folded'].n}"
            + ("" if tf32_flags() == before else "; TF32 switches NOT restored")))

    # ------------------------------------------------------------------------- 6. profile, 7. export
    def _latopt(self, argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "latopt", *argv, "-q"], capture_output=True, text=True,
                              env=_env(), cwd=self.out, timeout=self._timeout())

    def profile(self) -> Row:
        """``latopt profile`` of MobileNetV2-1.0 at 224 on the capped gpu-torch (smoke: cpu-torch, 0.35 at 32):
        the LUT's prediction error on the end-to-end networks it holds out of the calibration."""
        dev, model, res = ("cpu-torch", "mobilenetv2_035", 32) if self.smoke else ("gpu-torch", "mobilenetv2_100", 224)
        lut_path = self.out / f"lut-{dev}-{model}.json"
        r = self._latopt(["profile", "--device", self._device_file(), "--model", model, "--resolution", str(res),
                          "--out", str(lut_path)])
        if r.returncode != 0:
            return Row(f"profile {dev}", "FAIL", detail=f"exit {r.returncode}: {r.stderr.strip()[-300:]}")
        lut = json.loads(lut_path.read_text())
        held = {k: e for k, e in lut["end_to_end"].items() if not e.get("calibration")}
        errs = {k: float(e["error"]) for k, e in held.items() if e.get("error") is not None}
        ok = bool(errs) and all(math.isfinite(v) for v in errs.values())
        return Row(f"profile {dev}", "pass" if ok else "FAIL", detail=f"{model} @{res}: {len(lut['blocks'])} blocks "
                   f"in {lut['profiling_s']:.0f} s; held-out prediction error "
                   + (", ".join(f"{k} {v:+.1%}" for k, v in errs.items()) or "none recorded"))

    def export(self) -> Row:
        """``latopt export`` of the folded checkpoint of step 3 (capped gpu-torch): gates and measured speed-up."""
        folded_pt = self.fold_dir / "folded.pt"
        dev = "cpu-torch" if self.smoke else "gpu-torch"
        if not folded_pt.is_file():
            return Row(f"export {dev}", "skipped", detail="no folded checkpoint (an earlier step failed)")
        out = self.out / "export"
        r = self._latopt(["export", "--checkpoint", str(folded_pt), "--device", self._device_file(), "--out", str(out)])
        if r.returncode != 0:
            return Row(f"export {dev}", "FAIL", detail=f"exit {r.returncode}: {r.stderr.strip()[-300:]}")
        lat = json.loads((out / "export.json").read_text()).get("latency") or {}
        ok = math.isfinite(float(lat.get("speedup", float("nan"))))
        lo, hi = lat.get("speedup_range", [float("nan")] * 2)
        return Row(f"export {dev}", "pass" if ok else "FAIL", detail=f"gates passed; measured speed-up "
                   f"x{lat.get('speedup', float('nan')):.2f} (quartile range {lo:.2f}-{hi:.2f}) over the unfolded network")

    # ------------------------------------------------------------------------------ 8. TRT / ORT / pycuda
    @staticmethod
    def tensorrt() -> Row:
        if importlib.util.find_spec("tensorrt") is None:
            return Row("TensorRT", NOT_EXERCISED, detail="tensorrt is not installed")
        try:
            trt = importlib.import_module("tensorrt")
        except Exception as e:  # noqa: BLE001 - a broken install is reported, not raised
            return Row("TensorRT", "FAIL", detail=f"tensorrt is installed but does not import: {e}"[:300])
        return Row("TensorRT", NOT_EXERCISED, detail=f"tensorrt {trt.__version__} imports; this script has no "
                                                      "TensorRT step (pytest -m tensorrt covers it)")

    @staticmethod
    def ort_cuda() -> Row:
        if importlib.util.find_spec("onnxruntime") is None:
            return Row("ORT CUDA provider", NOT_EXERCISED, detail="onnxruntime is not installed")
        ort = importlib.import_module("onnxruntime")
        providers = ort.get_available_providers()
        if "CUDAExecutionProvider" not in providers:
            return Row("ORT CUDA provider", NOT_EXERCISED, detail=f"onnxruntime {ort.__version__} is a CPU build "
                                                                  f"(providers: {', '.join(providers)})")
        return Row("ORT CUDA provider", NOT_EXERCISED, detail=f"onnxruntime {ort.__version__} lists the CUDA "
                                                              "provider; this script does not run it")

    @staticmethod
    def pycuda() -> Row:
        if importlib.util.find_spec("pycuda") is None:
            return Row("pycuda", NOT_EXERCISED, detail="pycuda is not installed (TensorRT's buffers would come "
                                                       "from torch)")
        return Row("pycuda", NOT_EXERCISED, detail=f"pycuda {_version('pycuda')} is installed; only TensorRT "
                                                   "uses it, and this script has no TensorRT step")

    def steps(self) -> list[tuple[str, Any]]:
        steps: list[tuple[str, Any]] = [(f"train {'fp32' if a == 'none' else a}", lambda a=a: self.train(a))
                                        for a in ("none", "bf16", "fp16")]
        steps += [("resume", self.resume), ("fold", self.fold), ("torchrun", self.torchrun),
                  ("latency fp32", lambda: self.latency("fp32")), ("latency fp16", lambda: self.latency("fp16")),
                  ("profile", self.profile), ("export", self.export), ("TensorRT", self.tensorrt),
                  ("ORT CUDA", self.ort_cuda), ("pycuda", self.pycuda)]
        return steps

    def run(self) -> list[Row]:
        for name, step in self.steps():
            self.step = name
            t0 = time.perf_counter()
            try:
                row = step()
            except subprocess.TimeoutExpired as e:
                row = Row(name, "FAIL", detail=f"over its {'GPU budget' if not self.smoke else 'time limit'} of "
                                               f"{e.timeout:.0f} s: {' '.join(map(str, e.cmd[-6:]))} was killed")
            except Exception as e:  # noqa: BLE001 - one failed check is a row of the table, the others still run
                row = _failed(name, e)
            row.seconds = time.perf_counter() - t0
            budget = GPU_BUDGET_S.get(name)
            if not self.smoke and budget is not None and row.seconds > budget and row.status == "pass":
                row.status = "FAIL"
                row.detail += f"; took {row.seconds:.0f} s, over its GPU budget of {budget:.0f} s"
            print(f"  {row.check}: {row.status} ({row.seconds:.1f} s)", file=sys.stderr, flush=True)
            self.rows.append(row)
        return self.rows


def format_table(rows: list[Row]) -> str:
    head = f"{'check':<24} {'result':<13} {'s':>5} {'epoch s':<14} {'acc':>6}  detail"
    lines = [head, "-" * len(head)]
    for r in rows:
        secs = " ".join(f"{s:.2f}" for s in r.epoch_s) or "-"
        acc = f"{r.acc:.4f}" if r.acc is not None else "-"
        took = f"{r.seconds:.1f}" if r.seconds is not None else "-"
        lines.append(f"{r.check:<24} {r.status:<13} {took:>5} {secs:<14} {acc:>6}  {r.detail}")
    return "\n".join(lines)


def exit_code(rows: list[Row]) -> int:
    """1 when a row failed; else 3 when a row was not exercised (the TensorRT row always is); else 0."""
    if any(r.status == "FAIL" for r in rows):
        return 1
    return 3 if any(r.status == NOT_EXERCISED for r in rows) else 0


def carry(dest: Path) -> int:
    """Download :data:`CARRY_WHEELS` (cp312, manylinux x86-64, no dependencies) into ``dest``, replacing the
    wheels there; print what to run on the GPU machine."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".carry-", dir=dest) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
               "--implementation", "cp", *[a for p in CARRY_PLATFORMS for a in ("--platform", p)], "-d", tmp,
               *CARRY_WHEELS]
        r = subprocess.run(cmd, capture_output=True, text=True)
        got = sorted(Path(tmp).glob("*.whl"))
        names = {re.sub(r"[-_.]+", "-", w.name.split("-")[0]).lower() for w in got}
        want = {re.sub(r"[-_.]+", "-", s.split("==")[0]).lower() for s in CARRY_WHEELS}
        if r.returncode != 0 or names != want:
            print(f"gpu_check --carry: pip download failed (exit {r.returncode}; got {', '.join(sorted(names)) or 'none'}): "
                  f"{_tail(r.stderr, 4)}", file=sys.stderr)
            return 2
        size = sum(w.stat().st_size for w in got)
        if size > CARRY_LIMIT_MIB * 2**20:
            print(f"gpu_check --carry: {size / 2**20:.1f} MiB of wheels, over {CARRY_LIMIT_MIB} MiB", file=sys.stderr)
            return 2
        for old in dest.glob("*.whl"):
            old.unlink()
        for w in got:
            print(f"  {w.name}  {w.stat().st_size:>9} B")
            shutil.move(str(w), dest / w.name)
    print(f"{len(got)} wheels, {size / 2**20:.2f} MiB, in {dest}. On the GPU machine, in the checkout's root "
          f"(with {CARRY_DIR}/ shipped along):\n  {DEVICE_LINE}")
    return 0


def _writable_dir(flag: str, value: str) -> Path | str:
    """The directory ``value`` given to ``flag``, made when missing and checked by writing a file there (and removing
    it); or, when it cannot be used (empty, a file, a link loop, not writable), the line that says why."""
    if not value.strip():
        return f"{flag} is empty: give a directory"
    try:
        path = Path(value).resolve()
    except (OSError, RuntimeError) as e:   # a link loop: RuntimeError before Python 3.13, OSError from 3.13
        return f"{flag} {value!r}: cannot resolve the path ({e or type(e).__name__}); give a directory"
    if path.exists() and not path.is_dir():
        return f"{flag} {value!r}: {path} is not a directory; give a directory"
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".gpu_check-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return f"{flag} {value!r}: cannot write there ({e.strerror or type(e).__name__}); give a writable directory"
    return path


def _usage(line: str) -> int:
    print(f"gpu_check: {' '.join(line.split())}"[:600], file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu-smoke", action="store_true", help="run every step on the CPU on tiny data")
    ap.add_argument("--epochs", type=int, default=2, help="base-training epochs per precision (default 2)")
    ap.add_argument("--out", help="working directory (default: a temporary one, removed)")
    ap.add_argument("--carry", nargs="?", const=str(ROOT / CARRY_DIR), metavar="DIR",
                    help=f"download the wheels a GPU image without pydantic needs into DIR (default {CARRY_DIR}/) "
                         "and print the line to run there")
    args = ap.parse_args(argv)
    # the arguments are checked before any work: one line, exit 2 (a failed row is exit 1)
    if args.epochs < 1:
        return _usage(f"--epochs {args.epochs}: give at least 1 base-training epoch")
    if args.carry is not None:
        dest = _writable_dir("--carry", args.carry)
        return _usage(dest) if isinstance(dest, str) else carry(dest)
    if args.out is not None:
        out = _writable_dir("--out", args.out)
        if isinstance(out, str):
            return _usage(out)
        args.out = str(out)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # latopt from this checkout, installed or not
    missing = _missing()
    if missing:
        print(f"gpu_check: cannot start: missing Python packages {', '.join(missing)} (latopt needs them; "
              f"on a machine that cannot download see --carry)", file=sys.stderr)
        return 2
    bad = _unimportable()
    if bad:
        print(f"gpu_check: cannot start: latopt does not import: {'; '.join(bad[:3])}", file=sys.stderr)
        return 2
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        print(f"gpu_check: torch {torch.__version__} sees no CUDA GPU; run on a GPU machine or use --cpu-smoke",
              file=sys.stderr)
        return 2
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() and not args.cpu_smoke else "cpu (smoke)"
    print(f"gpu_check: torch {torch.__version__} (CUDA {torch.version.cuda}), device {gpu}; Python "
          f"{sys.version.split()[0]}, " + ", ".join(f"{d} {_version(d)}" for d in ("timm", "onnx", "onnxruntime",
                                                                                   "pydantic")), file=sys.stderr)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp:
        args.out = args.out or tmp
        Path(args.out).mkdir(parents=True, exist_ok=True)
        rows = Checks(args).run()
    print(format_table(rows))
    code = exit_code(rows)
    failed = [r.check for r in rows if r.status == "FAIL"]
    idle = [r.check for r in rows if r.status == NOT_EXERCISED]
    print(f"{len(rows) - len(failed)}/{len(rows)} checks without failure ({sum(r.status == 'pass' for r in rows)} "
          f"passed) in {time.perf_counter() - t0:.0f} s on {gpu}" + (f"; FAILED: {', '.join(failed)}" if failed else "")
          + (f"; not exercised: {', '.join(idle)}" if idle else "") + f"; exit {code}"
          + (" (the TensorRT path is not covered)" if code == 3 else ""))
    return code


if __name__ == "__main__":
    sys.exit(main())
