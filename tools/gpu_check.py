"""GPU acceptance check: train, fold, torchrun and time on one CUDA GPU; one table.

    python tools/gpu_check.py [--out DIR] [--epochs 2]      on a machine with a CUDA GPU (< 8 min on one GPU)
    python tools/gpu_check.py --cpu-smoke                    the same steps on the CPU, tiny (a check of the script)

Checks, in order (each one row of the table; a step that cannot run here is ``absent``/``skipped``, never
``pass``):

1. **train ×3**: ``latopt``'s base training (:func:`latopt.train.train_base`) of the quickstart config
   (MobileNetV2-0.5 on digits, 32 px) for ``--epochs`` epochs on ``cuda`` with ``train.amp`` none (fp32,
   with torch's default TF32 switches, as ``latopt train`` runs), bf16 and fp16: seconds of each epoch, test accuracy (recorded in float32); passes when the run finishes
   with finite losses and a test accuracy above 3x chance. ``--cpu-smoke``: none and bf16 on the CPU, and
   fp16 must be *refused* with latopt's one-line error (fp16 needs CUDA); no accuracy bar (tiny data).
2. **fold**: pre-fold + fold + post-fold (:func:`latopt.layerfold.run_fold`) of the fp32 base on the same
   device; passes when the fold gate passed (``fold_check``: max abs / max rel error of the folded network
   against the linearised σ_α one, on the CPU in float64/float32) and the linearised and folded networks'
   test accuracies on the device differ by at most one test sample (epoch s: the pre-fold epochs).
3. **torchrun**: ``torchrun --nproc-per-node 1 -m latopt train`` (1 epoch) in a subprocess; passes when it
   exits 0, its metrics say 1 process on ``cuda:0`` and rank 0 reported the process group on NCCL
   (``--cpu-smoke``: on the CPU with gloo).
4. **latency (torch)**: the base and the folded network of step 2 timed in one interleaved run by latopt's
   torch backend (``gpu-torch``: CUDA events on the backend's stream, fp32 with TF32 off; ``--cpu-smoke``:
   ``cpu-torch``) with a short budget; passes when both medians are finite and positive and the TF32
   switches are restored after the backend closes.
5. **profile**: ``latopt profile --device gpu-torch`` of MobileNetV2-1.0 at 224: the LUT's prediction
   error on the end-to-end networks held out of its calibration (``--cpu-smoke``: ``cpu-torch``, 0.35 at 32).
6. **export**: ``latopt export --device gpu-torch`` of step 2's folded checkpoint: its gates and
   the measured speed-up over the unfolded network.
7. **TensorRT** / **ORT CUDA**: whether ``tensorrt`` imports and whether onnxruntime offers the CUDA
   provider. Not exercised here: reported as ``absent`` (not installed) or ``skipped`` (present, not exercised), never as pass.

Exit 0 when every check that ran passed; 1 when one failed; 2 when it cannot start (no GPU without
``--cpu-smoke``, or a package latopt needs is missing: besides torch and timm that is numpy, pydantic, pyyaml,
scikit-learn — digits — and scipy).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import os
import re
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


@dataclass
class Row:
    check: str
    status: str                       # pass | FAIL | absent | skipped
    epoch_s: list[float] = field(default_factory=list)
    acc: float | None = None
    detail: str = ""


def _missing() -> list[str]:
    return [m for m in NEEDED if importlib.util.find_spec(m) is None]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _failed(check: str, e: BaseException) -> Row:
    tb = traceback.extract_tb(e.__traceback__)
    where = f" ({Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""
    return Row(check, "FAIL", detail=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}{where}"[:300])


class Checks:
    def __init__(self, args: argparse.Namespace) -> None:
        from latopt.config import load_config
        from latopt.engine import set_threads

        self.args = args
        self.smoke = args.cpu_smoke
        self.device = "cpu" if self.smoke else "cuda"
        self.out = Path(args.out)
        base: dict[str, Any] = {"train.epochs": args.epochs, "train.device": self.device}
        if self.smoke:  # a few steps of everything
            base |= {"data.max_samples": 160, "fold.epochs": 1, "fold.post_epochs": 1, "fold.lambda_c": 10.0,
                     "fold.tau": 0.6, "fold.alpha_lr": 0.5}  # and fold something in one epoch
        self.cfg = load_config("quickstart", base)
        set_threads(self.cfg.threads)  # as `latopt train` does (quickstart: 1 intra-op thread)
        self.rows: list[Row] = []
        self.bases: dict[str, Path] = {}
        self.fold_dir = self.out / "fold"

    # ------------------------------------------------------------------------------------------- 1. train
    def train(self, amp: str) -> Row:
        from latopt.accel import resolve
        from latopt.errors import LatoptError
        from latopt.train import train_base

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
        m = train_base(cfg, out, progress=False)
        secs = [float(h["seconds"]) for h in m["history"]]
        finite = all(math.isfinite(h["loss"]) for h in m["history"])
        bar = 0.0 if self.smoke else 3.0 / 10  # digits: 10 classes
        ok = finite and m["test_acc"] > bar and m["device"].startswith(self.device) and len(secs) == self.args.epochs
        self.bases[amp] = out / "base.pt"
        return Row(name, "pass" if ok else "FAIL", secs, float(m["test_acc"]),
                   f"device {m['device']}, final loss {m['history'][-1]['loss']:.3f}, val {m['val_acc']:.3f}"
                   + ("" if ok else f"; needs finite losses and test acc > {bar}"))

    # -------------------------------------------------------------------------------------------- 2. fold
    def fold(self) -> Row:
        from latopt.layerfold import run_fold

        if "none" not in self.bases:
            return Row("fold", "skipped", detail="no fp32 base (its training failed)")
        f = self.cfg.fold
        rep = run_fold(self.cfg, self.bases["none"], self.fold_dir, lambda_c=f.lambda_c, tau=f.tau, p=f.p,
                       progress=False)
        fc, acc = rep["fold_check"], rep["acc"]
        n_test = json.loads((self.bases["none"].parent / "metrics.json").read_text())["sizes"]["test"]
        gap = abs(acc["linearized"] - acc["folded"]) * n_test
        ok = bool(fc["passed"]) and gap <= 1 + 1e-9
        secs = [h["seconds"] for h in rep["history"]["prefold"]]  # the pre-fold epochs (σ_α training)
        return Row("fold (pre/fold/post)", "pass" if ok else "FAIL", secs, float(acc["finetuned"]),
                   f"{rep['seconds']['total']:.1f} s in all; {rep['n_folded']}/{rep['n_foldable']} blocks folded; gate max abs {fc['max_abs']:.2e}, max rel "
                   f"{fc['max_rel']:.2e} (limit {fc['limit']}); linearised vs folded test acc "
                   f"{acc['linearized']:.4f} / {acc['folded']:.4f} ({gap:.0f} samples)")

    # ---------------------------------------------------------------------------------------- 3. torchrun
    def torchrun(self) -> Row:
        out = self.out / "torchrun"
        cfg_path = self.out / "torchrun.yaml"
        from latopt.config import write_config

        write_config(self.cfg.with_overrides({"train.epochs": 1}), cfg_path)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "--master-port",
               str(_free_port()), "-m", "latopt", "train", "--config", str(cfg_path), "--out", str(out), "-v"]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        wall = time.perf_counter() - t0
        backend = "gloo" if self.smoke else "nccl"
        seen = re.search(r"rank 0/1 on (\S+) \((\w+)\)", r.stderr)
        if r.returncode != 0:
            tail = " | ".join(r.stderr.strip().splitlines()[-3:])
            return Row("torchrun 1 proc", "FAIL", detail=f"exit {r.returncode}: {tail}"[:300])
        m = json.loads((out / "metrics.json").read_text())
        want_dev = "cpu" if self.smoke else "cuda:0"
        ok = m["processes"] == 1 and m["device"] == want_dev and seen is not None and seen.group(2) == backend
        return Row("torchrun 1 proc", "pass" if ok else "FAIL", [float(h["seconds"]) for h in m["history"]],
                   float(m["test_acc"]), f"process group: {seen.group(0) if seen else 'no rank line'}; metrics: "
                   f"{m['processes']} process on {m['device']}; {wall:.0f} s with start-up")

    # ----------------------------------------------------------------------------------------- 4. latency
    def latency(self) -> Row:
        from latopt.accel import tf32_flags
        from latopt.latency.devices import load_device
        from latopt.latency.profiler import measure_networks
        from latopt.models import load_checkpoint

        folded_pt = self.fold_dir / "folded.pt"
        if "none" not in self.bases or not folded_pt.is_file():
            return Row("latency torch", "skipped", detail="no base and folded checkpoints (an earlier step failed)")
        prof = load_device("cpu-torch" if self.smoke else "gpu-torch")
        prof = prof.model_copy(update={"warmup": 10, "min_repeats": 30, "max_repeats": 300, "budget_s": 5.0 if
                                       self.smoke else 15.0})
        nets = {k: load_checkpoint(p)[0].eval() for k, p in (("base", self.bases["none"]), ("folded", folded_pt))}
        before = tf32_flags()
        res = self.cfg.data.resolution
        stats = measure_networks(nets, prof, (1, 3, res, res))
        b, f = stats["base"].median_ms, stats["folded"].median_ms
        ok = all(math.isfinite(v) and v > 0 for v in (b, f)) and tf32_flags() == before
        return Row(f"latency {prof.name}", "pass" if ok else "FAIL", detail=(
            f"batch 1 @{res}: base {b:.3f} ms [IQR {stats['base'].iqr_ms:.3f}], folded {f:.3f} ms "
            f"[IQR {stats['folded'].iqr_ms:.3f}], speed-up x{b / f:.2f}; n {stats['base'].n}/{stats['folded'].n}"
            + ("" if tf32_flags() == before else "; TF32 switches NOT restored")))

    # ------------------------------------------------------------------------- 5. profile, 6. export
    def _latopt(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
        return subprocess.run([sys.executable, "-m", "latopt", *argv, "-q"], capture_output=True, text=True,
                              env=env, cwd=self.out, timeout=timeout)

    def profile(self) -> Row:
        """``latopt profile --device gpu-torch`` of MobileNetV2-1.0 at 224 (smoke: cpu-torch, 0.35 at 32): the
        LUT's prediction error on the end-to-end networks it holds out of the calibration."""
        dev, model, res = ("cpu-torch", "mobilenetv2_035", 32) if self.smoke else ("gpu-torch", "mobilenetv2_100", 224)
        lut_path = self.out / f"lut-{dev}-{model}.json"
        r = self._latopt(["profile", "--device", dev, "--model", model, "--resolution", str(res), "--out",
                          str(lut_path)], timeout=240)
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
        """``latopt export --device gpu-torch`` of the folded checkpoint of step 2: gates and measured speed-up."""
        folded_pt = self.fold_dir / "folded.pt"
        if not folded_pt.is_file():
            return Row("export", "skipped", detail="no folded checkpoint (an earlier step failed)")
        dev = "cpu-torch" if self.smoke else "gpu-torch"
        out = self.out / "export"
        r = self._latopt(["export", "--checkpoint", str(folded_pt), "--device", dev, "--out", str(out)], timeout=240)
        if r.returncode != 0:
            return Row(f"export {dev}", "FAIL", detail=f"exit {r.returncode}: {r.stderr.strip()[-300:]}")
        lat = json.loads((out / "export.json").read_text()).get("latency") or {}
        ok = math.isfinite(float(lat.get("speedup", float("nan"))))
        lo, hi = lat.get("speedup_range", [float("nan")] * 2)
        return Row(f"export {dev}", "pass" if ok else "FAIL", detail=f"gates passed; measured speed-up "
                   f"x{lat.get('speedup', float('nan')):.2f} (quartile range {lo:.2f}-{hi:.2f}) over the unfolded network")

    # ---------------------------------------------------------------------------------------- 7. TRT / ORT
    @staticmethod
    def tensorrt() -> Row:
        if importlib.util.find_spec("tensorrt") is None:
            return Row("TensorRT", "absent", detail="skipped: tensorrt not installed")
        try:
            trt = importlib.import_module("tensorrt")
        except Exception as e:  # noqa: BLE001 - a broken install is reported, not raised
            return Row("TensorRT", "FAIL", detail=f"tensorrt is installed but does not import: {e}"[:300])
        return Row("TensorRT", "skipped", detail=f"tensorrt {trt.__version__} imports; its paths are not exercised "
                                                 "by this script")

    @staticmethod
    def ort_cuda() -> Row:
        if importlib.util.find_spec("onnxruntime") is None:
            return Row("ORT CUDA provider", "absent", detail="skipped: onnxruntime not installed")
        ort = importlib.import_module("onnxruntime")
        providers = ort.get_available_providers()
        if "CUDAExecutionProvider" not in providers:
            return Row("ORT CUDA provider", "absent", detail=f"onnxruntime {ort.__version__} is a CPU build "
                                                             f"(providers: {', '.join(providers)})")
        return Row("ORT CUDA provider", "skipped", detail=f"onnxruntime {ort.__version__} lists the CUDA provider; "
                                                          "not exercised by this script")

    def run(self) -> list[Row]:
        steps: list[tuple[str, Any]] = [(f"train {a}", lambda a=a: self.train(a)) for a in ("none", "bf16", "fp16")]
        steps += [("fold", self.fold), ("torchrun", self.torchrun), ("latency", self.latency),
                  ("profile", self.profile), ("export", self.export), ("TensorRT", self.tensorrt),
                  ("ORT CUDA", self.ort_cuda)]
        for name, step in steps:
            t0 = time.perf_counter()
            try:
                row = step()
            except Exception as e:  # noqa: BLE001 - one failed check is a row of the table, the others still run
                row = _failed(name, e)
            print(f"  {row.check}: {row.status} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
            self.rows.append(row)
        return self.rows


def format_table(rows: list[Row]) -> str:
    head = f"{'check':<24} {'result':<7} {'epoch s':<14} {'acc':>6}  detail"
    lines = [head, "-" * len(head)]
    for r in rows:
        secs = " ".join(f"{s:.2f}" for s in r.epoch_s) or "-"
        acc = f"{r.acc:.4f}" if r.acc is not None else "-"
        lines.append(f"{r.check:<24} {r.status:<7} {secs:<14} {acc:>6}  {r.detail}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu-smoke", action="store_true", help="run every step on the CPU on tiny data")
    ap.add_argument("--epochs", type=int, default=2, help="base-training epochs per precision (default 2)")
    ap.add_argument("--out", help="working directory (default: a temporary one, removed)")
    args = ap.parse_args(argv)
    missing = _missing()
    if missing:
        print(f"gpu_check: cannot start: missing Python packages {', '.join(missing)} (latopt needs them)",
              file=sys.stderr)
        return 2
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        print(f"gpu_check: torch {torch.__version__} sees no CUDA GPU; run on a GPU machine or use --cpu-smoke",
              file=sys.stderr)
        return 2
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() and not args.cpu_smoke else "cpu (smoke)"
    print(f"gpu_check: torch {torch.__version__} (CUDA {torch.version.cuda}), device {gpu}", file=sys.stderr)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp:
        args.out = args.out or tmp
        rows = Checks(args).run()
    print(format_table(rows))
    failed = [r.check for r in rows if r.status == "FAIL"]
    print(f"{len(rows) - len(failed)}/{len(rows)} checks without failure ({sum(r.status == 'pass' for r in rows)} "
          f"passed) in {time.perf_counter() - t0:.0f} s on {gpu}" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
