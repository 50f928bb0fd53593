#!/usr/bin/env python
"""Does measuring the GPU pay? DP plans from a measured LUT (``gpu-torch``) and a counted one (``flops``), timed on
the GPU against the as-is network, in one device call.

    python tools/gpu_plans.py --out DIR [--time-limit 360]     on a machine with a CUDA GPU (about 4 minutes)
    python tools/gpu_plans.py --cpu-smoke --out DIR              the same pipeline on the CPU, tiny (~15 s)

On a lent GPU machine whose image lacks pydantic (``python tools/gpu_check.py --carry`` fetches the wheels; docs/gpu.md),
in the checkout's root (:data:`DEVICE_LINE`)::

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target .gpu-site .gpu-wheels/*.whl && PYTHONPATH=.gpu-site python3 tools/gpu_plans.py --out $OUT/gpu-plans

For each model (MobileNetV2-1.0 and EfficientNet-Lite0 at 224 px, random weights: only speed is asked) and each
batch (1 and 128), one step after the other, each step written to ``DIR`` as soon as it ends:

1. **LUTs.** ``gpu-torch`` (PyTorch eager on CUDA device 0, CUDA-event timing, fp32 with TF32 off) with its
   ``batch`` set to the cell's (``model_copy(update={"batch": ...})``, as ``latopt export`` derives a profile),
   its timing capped (:data:`PROFILE_TIMING`) and ``threads`` the machine's cores (the CPU work of profiling at
   batch 128: shapes and folds; the GPU timing is the same); and ``flops`` (multiply-adds counted: the
   device-blind baseline) at the same batch. Both with the variants ``full, pw, drop`` (the DP's move set), by
   :func:`latopt.latency.profiler.ensure_lut` (gpu-torch, in this process) and ``latopt profile`` (flops: one
   process per LUT, all started at once, because counting at batch 128 runs every part on one CPU thread, ~45 s
   each; they run on other cores while the GPU times). A LUT already in ``DIR/lut/`` is reused (a rerun).
2. **Plans.** :func:`latopt.dp.select_plan` with the ``uniform`` importance (every changed block costs the same,
   so the DP changes as few blocks as the budget allows: no checkpoint, no data) at budgets 0.5, 0.6, 0.7, 0.8
   of each LUT's predicted as-is latency: the LUT's plan (no budget loop: the question is what each LUT alone
   gives). A budget below the fastest network the variants allow has no plan (the cell says why).
3. **Timing.** The as-is network and every distinct plan, built as export ships them
   (:func:`tools.bench_devices.network`: random BatchNorm statistics, exact folds, deferred bias maps), timed in
   ONE interleaved run at the cell's batch on the GPU (:func:`latopt.latency.timing.compare`: round-robin, the
   start rotating, one untimed call before each timed one, as many rounds as :data:`MEASURE_TIMING`'s seconds
   allow) with gpu-torch's backend. At batch 1 every network is timed twice in that run: **eager** (as the LUT
   was profiled; on a fast GPU eager batch 1 is bound by kernel launches) and replayed as a **CUDA graph**
   (``torch.cuda.graph``: what the network costs without launch overhead). A failed capture drops the graph
   timings, with a note (``timing.<model|batch>.graph``). Batch 128 is GPU-bound: eager only.
4. **Cells.** Per model × batch × LUT × budget: the plan (the blocks it changes and how), the LUT-predicted
   speed-up (and what the gpu-torch LUT predicts for it), and per timing mode the median and quartiles of the
   per-round ratio t(plan) / t(as-is); speed-up = 1 / ratio (its quartiles: 1 / the ratio's); the budget is
   **met** when the median ratio ≤ the budget (measured latency ≤ budget × as-is). Per model × batch × budget
   the comparison of the two plans: the blocks where they differ, each one's speed-up, the per-round ratio
   t(gpu-torch plan) / t(flops plan), and a verdict: *measuring pays* when the gpu-torch plan meets the budget
   and the flops plan does not, or both meet it and the gpu-torch plan changes fewer blocks; *costs* the other
   way round; *same plan*, *both miss* or *even* otherwise.

Outputs in ``DIR``: ``plans.json`` (:data:`SCHEMA`: settings, environment, steps, luts, cells, comparisons,
timing), ``plans.txt`` (the same as text), ``timing/<model>-b<batch>.json`` (every runner's per-round samples),
``lut/`` (the LUTs). Both summaries are rewritten after every step, so a run killed part-way leaves what it had
(``status`` says ``running``, ``steps`` what was done); commit them as ``results/gpu/plans/`` (docs/gpu.md).

**Time.** ``--time-limit`` (default 360 s from the start): no step starts after it (the rest are recorded as
skipped, exit 1), and a timing run is cut to what is left. Estimate for the default run on an H100 (no GPU has
run it yet): imports and CUDA's start ~15 s; per model, the gpu-torch LUT at batch 1 ~20 s (CPU preparation
~2-3 s, measured on the CPU, plus 15 s of timing) and at batch 128 ~25 s, each timing run ~25 s plus building
the networks (~5 s); the flops LUTs in parallel (~45 s each at batch 128, measured on one 2-core-machine CPU
thread; ready before the batch-128 plans are made): ~210 s in all, far inside 360 s, so that the call with the
machine's start stays under 10 minutes.

``--cpu-smoke``: the same steps on the CPU: MobileNetV2-0.35 at 32 px, batches 1 and 2, budgets 0.6 and 0.8,
``cpu-torch`` in place of gpu-torch, capped timing (a check that the script runs, for CI; no graph timing).

Exit codes: 0 every cell made; 1 a step failed or the time limit stopped the run (the JSON says which); 2 it cannot
start: no CUDA GPU without ``--cpu-smoke`` (one line), a package missing, an argument wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:    # run as a script: latopt and tools/ from this checkout
    sys.path.insert(0, str(ROOT))

from tools.gpu_check import INSTALL_LINE, SITE_DIR, _env, _missing, _version, _writable_dir  # noqa: E402

SCHEMA = "latopt.gpu_plans/1"
DEVICE_LINE = f"{INSTALL_LINE} && PYTHONPATH={SITE_DIR} python3 tools/gpu_plans.py --out $OUT/gpu-plans"
VARIANTS = ("full", "pw", "drop")       # the DP's move set (tools/bench_devices.py's `dp` plans)
IMPORTANCE = "uniform"
COUNTED = "flops"                       # the device-blind LUT
# the real run and the smoke: models, resolution, batches, budgets, the measured device, the timing caps
GPU = {"models": ("mobilenetv2_100", "efficientnet_lite0"), "resolution": 224, "batches": (1, 128),
       "budgets": (0.5, 0.6, 0.7, 0.8), "measured": "gpu-torch"}
SMOKE = {"models": ("mobilenetv2_035",), "resolution": 32, "batches": (1, 2), "budgets": (0.6, 0.8),
         "measured": "cpu-torch"}
# the gpu-torch LUT's timing: 15 s per LUT (the shipped profile: up to 60 s, 1000 rounds)
PROFILE_TIMING = {"warmup": 10, "min_repeats": 30, "max_repeats": 1000, "budget_s": 15.0}
# the plans' timing run: rounds until the seconds are spent ("many rounds"; the median stops nothing early)
MEASURE_TIMING = {"warmup": 10, "min_repeats": 5000, "max_repeats": 5000, "budget_s": 25.0}
SMOKE_PROFILE_TIMING = {"warmup": 2, "min_repeats": 5, "max_repeats": 20, "budget_s": 0.5}
SMOKE_MEASURE_TIMING = {"warmup": 2, "min_repeats": 200, "max_repeats": 200, "budget_s": 1.0}
GRAPH_BATCHES = (1,)                    # batches timed as CUDA graphs too (launch-bound in eager)
TIME_LIMIT_S = 360.0
MIN_TIMING_S = 2.0                      # a timing run cut by the time limit still gets this much
_T0 = [time.perf_counter()]            # the run's start (main sets it): the time limit and the progress lines count from it


def elapsed() -> float:
    return time.perf_counter() - _T0[0]


def log(msg: str) -> None:
    print(f"[gpu_plans {elapsed():5.0f} s] {msg}", file=sys.stderr, flush=True)


def _key(*parts: Any) -> str:
    return "|".join(f"b{p}" if isinstance(p, int) else (f"{p:g}" if isinstance(p, float) else str(p)) for p in parts)


def _one_line(e: BaseException) -> str:
    from latopt.errors import first_line

    return f"{type(e).__name__}: {first_line(e, 240)}"


# ------------------------------------------------------------------------------------------ CUDA graphs
class CudaGraphRunner:
    """A gpu-torch runner's network captured as one CUDA graph on the runner's stream, its input the runner's:
    ``runner()`` replays it and waits, ``time_ms()`` times one replay with the backend's CUDA events (what
    :func:`latopt.latency.timing.compare` calls). The eager runner is left as it was (it is timed beside it)."""

    def __init__(self, eager: Any, warmup: int = 3) -> None:
        import torch

        self.cuda = eager.cuda
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(self.cuda.stream), torch.inference_mode():
            for _ in range(warmup):   # on a side stream before the capture, as torch asks
                eager.module(eager.x)
        self.cuda.synchronize()
        with torch.inference_mode(), torch.cuda.graph(self.graph, stream=self.cuda.stream):
            self.out = eager.module(eager.x)
        self.cuda.synchronize()
        self._replay()            # one replay: a graph that cannot run fails here, not in the timing
        self.cuda.synchronize()

    def _replay(self) -> None:
        import torch

        with torch.cuda.stream(self.cuda.stream):
            self.graph.replay()

    def __call__(self) -> None:
        self._replay()
        self.cuda.synchronize()

    def time_ms(self) -> float:
        return self.cuda.time_ms(self._replay)

    def close(self) -> None:
        self.graph = None
        self.out = None


def time_networks(nets: dict[str, Any], prof: Any, shape: tuple[int, ...], graphs: bool,
                  progress: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """One interleaved run of ``nets`` on ``prof`` (its backend's runners: ``eager:<name>``; with ``graphs`` also
    ``graph:<name>``, :class:`CudaGraphRunner`). Returns ({runner: TimingStats}, {graph: what happened, environment,
    seconds}). :func:`latopt.latency.profiler.measure_networks` with the graph runners added to the same run."""
    from latopt.latency.backends import close_backend, get_backend
    from latopt.latency.timing import compare
    from latopt.training.torch_settings import torch_threads

    backend = get_backend(prof)
    runners: dict[str, Any] = {}
    info: dict[str, Any] = {}
    try:
        with torch_threads(prof.threads if prof.backend == "torch" else 1):
            for k, net in nets.items():
                runners[f"eager:{k}"] = backend.prepare(net, shape)
            if not graphs:
                info["graph"] = "not timed" + (f" at batch {shape[0]} (eager only)" if prof.is_gpu else " (the CPU)")
            else:
                try:
                    for k in nets:
                        runners[f"graph:{k}"] = CudaGraphRunner(runners[f"eager:{k}"])
                    info["graph"] = "captured"
                except Exception as e:  # noqa: BLE001 - a capture that fails leaves the eager timing, with a note
                    for k in [k for k in runners if k.startswith("graph:")]:
                        runners.pop(k).close()
                    info["graph"] = f"capture failed, eager only: {_one_line(e)}"
                    log(f"  CUDA graph {info['graph']}")
            t0 = time.perf_counter()
            stats = compare(runners, prof, progress=progress)
            info["seconds"] = time.perf_counter() - t0
        info["environment"] = backend.environment()
    finally:
        try:
            for r in runners.values():
                r.close()
        finally:
            close_backend(backend)
    return stats, info


# --------------------------------------------------------------------------------------------------- run
class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.smoke = args.cpu_smoke
        self.cfg = dict(SMOKE if self.smoke else GPU)
        for k in ("models", "batches", "budgets"):
            if getattr(args, k):
                self.cfg[k] = tuple(getattr(args, k))
        self.res = int(self.cfg["resolution"])
        self.out = Path(args.out)
        self.profile_timing = SMOKE_PROFILE_TIMING if self.smoke else PROFILE_TIMING
        self.measure_timing = SMOKE_MEASURE_TIMING if self.smoke else MEASURE_TIMING
        self.limit = float(args.time_limit)
        self.counting: dict[str, tuple[subprocess.Popen, Path]] = {}   # flops LUTs being profiled
        self.luts: dict[str, Any] = {}
        self.bases: dict[str, Any] = {}                      # model -> the as-is network (random weights)
        self.built: dict[tuple[str, str], Any] = {}          # (model, plan) -> its network, for both batches
        self.current = ""                                    # the step running now
        self.rec: dict[str, Any] = {
            "schema": SCHEMA, "mode": "cpu-smoke" if self.smoke else "gpu", "status": "running",
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "elapsed_s": 0.0,
            "settings": {"models": list(self.cfg["models"]), "resolution": self.res,
                         "batches": list(self.cfg["batches"]), "budgets": list(self.cfg["budgets"]),
                         "luts": [self.cfg["measured"], COUNTED], "variants": list(VARIANTS), "importance": IMPORTANCE,
                         "weights": "random (BatchNorm statistics randomised, seed 0)",
                         "profile_timing": self.profile_timing, "measure_timing": self.measure_timing,
                         "graph_batches": [] if self.smoke else list(GRAPH_BATCHES), "time_limit_s": self.limit},
            "environment": _environment(self.smoke), "steps": [], "luts": {}, "cells": {}, "comparisons": {}, "timing": {}, "notes": []}

    # ------------------------------------------------------------------------------------------ helpers
    def elapsed(self) -> float:
        return elapsed()

    def save(self) -> None:
        from latopt.files.artifacts import write_json_atomic

        self.rec["elapsed_s"] = round(self.elapsed(), 1)
        write_json_atomic(self.out / "plans.json", self.rec)
        tmp = self.out / "plans.txt.tmp"
        tmp.write_text(format_summary(self.rec) + "\n")
        os.replace(tmp, self.out / "plans.txt")

    def step(self, name: str, fn: Any) -> Any:
        """Run one step (unless the time limit has passed), record it, write the summaries."""
        if self.elapsed() >= self.limit:
            self.rec["steps"].append({"step": name, "status": f"skipped: past the time limit of {self.limit:.0f} s"})
            log(f"{name}: skipped (time limit)")
            self.save()
            return None
        log(f"{name} ...")
        self.current = name
        t0 = time.perf_counter()
        try:
            out = fn()
            status = "ok"
        except Exception as e:  # noqa: BLE001 - a failed step is recorded; the others still run
            out, status = None, f"FAIL: {_one_line(e)}"
        secs = time.perf_counter() - t0
        self.rec["steps"].append({"step": name, "status": status, "seconds": round(secs, 2)})
        log(f"{name}: {status} ({secs:.1f} s)")
        self.save()
        return out

    def device(self, batch: int) -> Any:
        from latopt.latency.devices import load_device

        update: dict[str, Any] = {"batch": batch, **self.profile_timing}
        if not self.smoke:
            update["threads"] = os.cpu_count() or 1   # CPU threads of the profile's shapes and folds, not its timing
        return load_device(self.cfg["measured"]).model_copy(update=update)

    def lut_path(self, model: str, dev: str, batch: int) -> Path:
        return self.out / "lut" / f"{model}-{dev}-r{self.res}-b{batch}.json"

    # --------------------------------------------------------------------------------------------- LUTs
    def start_counting(self) -> None:
        """Start ``latopt profile --device flops`` for every model and batch at once (module docstring, step 1)."""
        for model in self.cfg["models"]:
            for batch in self.cfg["batches"]:
                path = self.lut_path(model, COUNTED, batch)
                if path.is_file():
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                err = path.with_suffix(".log").open("w")
                cmd = [sys.executable, "-m", "latopt", "profile", "--device", COUNTED, "--model", model,
                       "--resolution", str(self.res), "--batch", str(batch), "--variants", ",".join(VARIANTS),
                       "--out", str(path), "-q"]
                self.counting[_key(model, batch)] = (
                    subprocess.Popen(cmd, env=_env(), cwd=self.out, stdout=subprocess.DEVNULL, stderr=err), path)
                err.close()

    def stop_counting(self) -> None:
        for p, _ in self.counting.values():
            if p.poll() is None:
                p.kill()
                p.wait()

    def counted_lut(self, model: str, batch: int) -> Path:
        path = self.lut_path(model, COUNTED, batch)
        job = self.counting.get(_key(model, batch))
        if job is not None:
            rc = job[0].wait(timeout=max(1.0, self.limit - self.elapsed()))
            if rc != 0:
                raise RuntimeError(f"latopt profile --device {COUNTED} exit {rc}: "
                                   + " | ".join(path.with_suffix(".log").read_text().strip().splitlines()[-2:]))
        return path

    def profile(self, model: str, batch: int, dev: str) -> None:
        from latopt.latency.lut import load_lut
        from latopt.latency.profiler import ensure_lut

        if dev == COUNTED:
            path = self.counted_lut(model, batch)
        else:
            prof = self.device(batch)
            prof = prof.model_copy(update={"budget_s": self._cut(prof.budget_s)})
            path = ensure_lut(self.lut_path(model, dev, batch), model, prof, self.res, variants=VARIANTS, say=log)
        lut = load_lut(path, model=model, resolution=self.res, batch=batch)
        self.luts[_key(model, batch, dev)] = lut
        held = {k: e.error for k, e in lut.end_to_end.items() if not e.calibration}
        self.rec["luts"][_key(model, batch, dev)] = {
            "file": str(path.relative_to(self.out)), "device": lut.device, "backend": lut.backend, "batch": lut.batch,
            "profiling_s": lut.profiling_s, "asis_predicted": _predict(lut, {}),
            "unit": "million multiply-adds" if dev == COUNTED else "ms",
            "held_out_error": held, "gpu": (lut.environment or {}).get("gpu")}

    def _cut(self, budget_s: float) -> float:
        """A timing budget cut to the time left before the limit (at least :data:`MIN_TIMING_S`)."""
        return max(MIN_TIMING_S if not self.smoke else 0.1, min(float(budget_s), self.limit - self.elapsed()))

    # -------------------------------------------------------------------------------------------- plans
    def plan(self, model: str, batch: int) -> None:
        from latopt.dp import candidates, select_plan, variant_losses
        from latopt.errors import LatoptError

        measured_lut = self.luts.get(_key(model, batch, self.cfg["measured"]))
        for dev in (self.cfg["measured"], COUNTED):
            lut = self.luts.get(_key(model, batch, dev))
            if lut is None:
                continue
            losses = variant_losses(None, None, None, candidates(lut, VARIANTS), method=IMPORTANCE)
            for budget in self.cfg["budgets"]:
                cell: dict[str, Any] = {"model": model, "batch": batch, "lut": dev, "budget": budget}
                try:
                    plan, info = select_plan(lut, losses, budget)
                except LatoptError as e:
                    cell |= {"plan": None, "why": str(e)}
                else:
                    cell |= {"plan": {str(k): v for k, v in plan.items()}, "changed": len(plan),
                             "predicted_ratio": info.ratio, "predicted_speedup": 1 / info.ratio,
                             "measured": {}}
                    if measured_lut is not None:  # what the measured LUT predicts for this plan
                        cell["measured_lut_predicted_speedup"] = _predict(measured_lut, {}) / _predict(measured_lut, plan)
                self.rec["cells"][_key(model, batch, dev, budget)] = cell

    # ------------------------------------------------------------------------------------------- timing
    def measure(self, model: str, batch: int) -> None:
        from latopt.files.artifacts import write_json_atomic

        cells = {k: c for k, c in self.rec["cells"].items() if c["model"] == model and c["batch"] == batch}
        if not cells:
            raise RuntimeError("no plans to time (no LUT, or the plans step failed)")
        nets: dict[str, Any] = {"asis": self.network(model, {})}
        by_plan: dict[str, str] = {}
        for c in cells.values():
            if c["plan"] is None:
                continue
            sig = json.dumps(c["plan"], sort_keys=True)
            if sig not in by_plan:   # two LUTs or budgets can give the same plan: timed once
                by_plan[sig] = f"plan{len(by_plan)}"
                nets[by_plan[sig]] = self.network(model, c["plan"])
            c["network"] = by_plan[sig]
        prof = self.device(batch).model_copy(update={**self.measure_timing})
        prof = prof.model_copy(update={"budget_s": self._cut(prof.budget_s)})
        graphs = prof.is_gpu and batch in GRAPH_BATCHES
        log(f"  timing {len(nets)} networks{' eager and as CUDA graphs' if graphs else ''} interleaved at batch "
            f"{batch}, {prof.budget_s:.0f} s")
        stats, info = time_networks(nets, prof, (batch, 3, self.res, self.res), graphs,
                                    progress=lambda r, e: log(f"    round {r} ({e:.0f} s)") if r % 100 == 0 else None)
        self.rec["environment"] |= info["environment"]   # the backend's: GPU, CUDA, TF32 switches, driver
        modes = sorted({k.split(":", 1)[0] for k in stats})
        tk = _key(model, batch)
        self.rec["timing"][tk] = {
            "networks": {n: (json.loads(s) if s else {}) for s, n in by_plan.items()} | {"asis": {}},
            "graph": info["graph"], "seconds": round(info["seconds"], 2), "rounds": stats["eager:asis"].n,
            "modes": modes, "asis_ms": {m: stats[f"{m}:asis"].median_ms for m in modes},
            "ms": {k: s.to_dict() for k, s in stats.items()}}
        write_json_atomic(self.out / "timing" / f"{model}-b{batch}.json",
                          {"model": model, "batch": batch, "budget_s": prof.budget_s,
                           "samples_ms": {k: list(s.samples_ms) for k, s in stats.items()}})
        for c in cells.values():
            if c["plan"] is None:
                continue
            for m in modes:
                c["measured"][m] = _ratio(stats[f"{m}:{c['network']}"], stats[f"{m}:asis"], c["budget"])
        for budget in self.cfg["budgets"]:
            self.rec["comparisons"][_key(model, batch, budget)] = self.compare(model, batch, budget, stats, modes)

    def network(self, model: str, plan: dict[str, str]) -> Any:
        """The network of ``plan`` as export ships it: the model with random weights
        (:func:`tools.bench_devices.network`, built once per model), folded by :func:`latopt.rewrite.as_shipped`;
        kept for the other batch (folding is the slow part: seconds per plan on the CPU)."""
        from latopt.rewrite import as_shipped
        from tools.bench_devices import network

        sig = (model, json.dumps(plan, sort_keys=True))
        if sig not in self.built:
            if model not in self.bases:
                self.bases[model] = network(model, None, self.res)
            self.built[sig] = (self.bases[model] if not plan else
                               as_shipped(self.bases[model], {int(k): v for k, v in plan.items()},
                                          input_size=(self.res, self.res))[0])
        return self.built[sig]

    def compare(self, model: str, batch: int, budget: float, stats: dict[str, Any], modes: list[str]) -> dict[str, Any]:
        """The measured LUT's plan against the counted LUT's at one budget (module docstring, step 4)."""
        a = self.rec["cells"].get(_key(model, batch, self.cfg["measured"], budget))
        b = self.rec["cells"].get(_key(model, batch, COUNTED, budget))
        out: dict[str, Any] = {"model": model, "batch": batch, "budget": budget}
        pa = a["plan"] if a is not None else None
        pb = b["plan"] if b is not None else None
        if pa is None or pb is None:
            out["note"] = "; ".join(f"no {d} LUT" if c is None else f"no plan from {d}"
                                    for d, c in ((self.cfg["measured"], a), (COUNTED, b)) if c is None or c["plan"] is None)
            if pa is None and pb is None:
                return out
        out["same_plan"] = pa == pb
        out["differ"] = {i: {self.cfg["measured"]: (pa or {}).get(i, "none"), COUNTED: (pb or {}).get(i, "none")}
                         for i in sorted({*(pa or {}), *(pb or {})}, key=int) if (pa or {}).get(i) != (pb or {}).get(i)}
        out["changed"] = {self.cfg["measured"]: len(pa) if pa is not None else None,
                          COUNTED: len(pb) if pb is not None else None}
        out["modes"] = {}
        for m in modes:
            ma = a["measured"][m] if pa is not None else None
            mb = b["measured"][m] if pb is not None else None
            both = ma is not None and mb is not None
            r = stats[f"{m}:{a['network']}"].per_round_ratio(stats[f"{m}:{b['network']}"]) if both else None
            meets = {self.cfg["measured"]: ma["meets_budget"] if ma else None, COUNTED: mb["meets_budget"] if mb else None}
            out["modes"][m] = {"speedup": {self.cfg["measured"]: ma["speedup"] if ma else None,
                                           COUNTED: mb["speedup"] if mb else None},
                               "meets_budget": meets,
                               "measured_over_counted": ({"median": r.median_ms, "q1": r.q1_ms, "q3": r.q3_ms}
                                                         if r is not None else None),
                               "verdict": verdict(out["same_plan"], meets[self.cfg["measured"]], meets[COUNTED],
                                                  out["changed"][self.cfg["measured"]], out["changed"][COUNTED])}
        return out

    # ---------------------------------------------------------------------------------------------- all
    def run(self) -> int:
        self.out.mkdir(parents=True, exist_ok=True)
        self.save()
        self.start_counting()
        try:
            for model in self.cfg["models"]:
                for batch in self.cfg["batches"]:
                    for dev in (self.cfg["measured"], COUNTED):
                        self.step(f"{model} b{batch}: LUT {dev}", lambda m=model, b=batch, d=dev: self.profile(m, b, d))
                    self.step(f"{model} b{batch}: plans", lambda m=model, b=batch: self.plan(m, b))
                    self.step(f"{model} b{batch}: timing", lambda m=model, b=batch: self.measure(m, b))
        finally:
            self.stop_counting()
        bad = [s for s in self.rec["steps"] if s["status"] != "ok"]
        self.rec["status"] = ("complete" if not bad else
                              "stopped by the time limit" if all(s["status"].startswith("skipped") for s in bad)
                              else "incomplete: a step failed")
        self.rec["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.save()
        return 0 if not bad else 1


def _environment(smoke: bool) -> dict[str, Any]:
    from latopt.latency.timing import environment_info

    return environment_info(cuda_device=None if smoke else 0)


def _predict(lut: Any, plan: Any) -> float:
    from latopt.latency.lut import predict

    return float(predict(lut, {int(k): v for k, v in dict(plan).items()}))


def _ratio(plan: Any, asis: Any, budget: float) -> dict[str, Any]:
    """Per-round t(plan) / t(as-is) of one interleaved run: median, quartiles; speed-up = 1 / ratio; the budget
    is met when the median ratio is at most the budget."""
    r = plan.per_round_ratio(asis)
    return {"ratio": r.median_ms, "ratio_q1": r.q1_ms, "ratio_q3": r.q3_ms, "speedup": 1 / r.median_ms,
            "speedup_q1": 1 / r.q3_ms, "speedup_q3": 1 / r.q1_ms, "plan_ms": plan.median_ms,
            "asis_ms": asis.median_ms, "n": r.n, "meets_budget": bool(r.median_ms <= budget)}


def verdict(same: bool, meets_measured: bool | None, meets_counted: bool | None, n_measured: int | None,
            n_counted: int | None) -> str:
    """Does measuring pay at this budget? (module docstring, step 4). ``meets_*`` None: that LUT has no plan at
    this budget (it says the budget is below the fastest network), which counts as missing it."""
    if same:
        return "same plan"
    none = (" (the measured LUT has no plan)" if meets_measured is None else
            " (the counted LUT has no plan)" if meets_counted is None else "")
    if meets_measured and not meets_counted:
        return "measuring pays: only the measured LUT's plan meets the budget" + none
    if meets_counted and not meets_measured:
        return "measuring costs: only the counted LUT's plan meets the budget" + none
    if not meets_measured:
        return "both miss" + none
    if n_measured != n_counted:
        return (f"measuring {'pays' if n_measured < n_counted else 'costs'}: both meet the budget, the measured "
                f"LUT's plan changes {n_measured} blocks, the counted one's {n_counted}")
    return "even: both meet the budget, changing as many blocks"


# ------------------------------------------------------------------------------------------------ text
def _sp(m: dict[str, Any] | None) -> str:
    if not m:
        return "-"
    return f"{m['speedup']:.2f}x [{m['speedup_q1']:.2f}, {m['speedup_q3']:.2f}] {'met ' if m['meets_budget'] else 'MISS'}"


def format_summary(rec: dict[str, Any]) -> str:
    """``plans.txt``: the JSON's cells and comparisons as text."""
    s = rec["settings"]
    env = rec.get("environment") or {}
    where = env.get("gpu") or ("the CPU (smoke)" if rec["mode"] == "cpu-smoke" else "?")
    lines = [f"gpu_plans ({rec['mode']}) on {where}: {rec['status']} after {rec['elapsed_s']:.0f} s "
             f"(torch {env.get('torch', '?')}, CUDA {env.get('cuda', '-')}, {env.get('precision_mode', 'fp32')})",
             f"models at {s['resolution']} px, random weights; DP over {','.join(s['variants'])}, importance "
             f"{s['importance']} (a plan's cost = blocks changed); plans from the LUTs {' and '.join(s['luts'])}; "
             "speed-up = 1 / median per-round ratio t(plan)/t(as-is) [quartiles]; met = median ratio <= budget; "
             f"predicted: by the plan's own LUT; meas.LUT: by the {s['luts'][0]} LUT"]
    measured, counted = s["luts"]
    for model in s["models"]:
        for batch in s["batches"]:
            t = rec["timing"].get(_key(model, batch))
            head = f"\n{model} @{s['resolution']} batch {batch}"
            for dev in s["luts"]:
                lu = rec["luts"].get(_key(model, batch, dev))
                if lu:
                    err = ", ".join(f"{k} {v:+.1%}" for k, v in lu["held_out_error"].items() if v is not None)
                    head += f"; LUT {dev}: as-is {lu['asis_predicted']:.3g} {lu['unit']}" + (f", held-out error {err}"
                                                                                               if err else "")
            if t:
                head += (f"; timed {t['rounds']} rounds in {t['seconds']:.0f} s, as-is "
                         + ", ".join(f"{m} {v:.3f} ms" for m, v in t["asis_ms"].items()) + f"; CUDA graph: {t['graph']}")
            lines.append(head)
            modes = t["modes"] if t else []
            lines.append(f"  {'budget':<6} {'LUT':<10} {'blocks':>6} {'predicted':>9} {'meas.LUT':>8}  "
                         + "  ".join(f"{m + ' speed-up [q1, q3]':<29}" for m in modes))
            for budget in s["budgets"]:
                for dev in s["luts"]:
                    c = rec["cells"].get(_key(model, batch, dev, budget))
                    if c is None:
                        lines.append(f"  {budget:<6g} {dev:<10} not made")
                        continue
                    if c["plan"] is None:
                        lines.append(f"  {budget:<6g} {dev:<10} no plan: {c['why'][:110]}")
                        continue
                    g = c.get("measured_lut_predicted_speedup")
                    lines.append(f"  {budget:<6g} {dev:<10} {c['changed']:>6} {c['predicted_speedup']:>8.2f}x "
                                 f"{(f'{g:.2f}x' if g else '-'):>8}  "
                                 + "  ".join(f"{_sp(c['measured'].get(m)):<29}" for m in modes))
                cmp_ = rec["comparisons"].get(_key(model, batch, budget))
                if cmp_ and "note" in cmp_:
                    lines.append(f"  {'':<6} {cmp_['note']}")
                if cmp_ and "same_plan" in cmp_ and "note" not in cmp_:
                    diff = ", ".join(f"{i} {d[measured]}/{d[counted]}" for i, d in cmp_["differ"].items())
                    lines.append(f"  {'':<6} " + ("same plan" if cmp_["same_plan"] else
                                                   f"differ ({measured}/{counted}): {diff}"))
                for m, v in (cmp_ or {}).get("modes", {}).items():
                    q = v["measured_over_counted"]
                    lines.append(f"  {'':<6} {m}: " + (f"t({measured})/t({counted}) {q['median']:.3f} "
                                                       f"[{q['q1']:.3f}, {q['q3']:.3f}]; " if q else "")
                                 + v["verdict"])
    tally: dict[str, dict[str, int]] = {}
    for cmp_ in rec["comparisons"].values():
        for m, v in cmp_.get("modes", {}).items():
            word = v["verdict"].split(":")[0].split(" (")[0]
            tally.setdefault(m, {})
            tally[m][word] = tally[m].get(word, 0) + 1
    if tally:
        lines.append("\nverdicts over model x batch x budget: " + "; ".join(
            f"{m}: " + ", ".join(f"{w} {n}" for w, n in sorted(v.items())) for m, v in tally.items()))
    bad = [f"{x['step']}: {x['status']}" for x in rec["steps"] if x["status"] != "ok"]
    if bad:
        lines.append("steps not done: " + "; ".join(bad))
    return "\n".join(line.rstrip() for line in lines)


# ------------------------------------------------------------------------------------------------ main
def _usage(line: str) -> int:
    print(f"gpu_plans: {' '.join(line.split())}"[:600], file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="output directory (plans.json, plans.txt, timing/, lut/); required")
    ap.add_argument("--cpu-smoke", action="store_true", help="the same pipeline on the CPU, tiny (a check of the script)")
    ap.add_argument("--time-limit", type=float, default=TIME_LIMIT_S,
                    help=f"seconds from the start after which no step starts (default {TIME_LIMIT_S:.0f})")
    ap.add_argument("--models", nargs="+", help="models (default: mobilenetv2_100 efficientnet_lite0; smoke: "
                                                "mobilenetv2_035)")
    ap.add_argument("--batches", nargs="+", type=int, help="batches (default 1 128; smoke 1 2)")
    ap.add_argument("--budgets", nargs="+", type=float, help="budgets (default 0.5 0.6 0.7 0.8; smoke 0.6 0.8)")
    args = ap.parse_args(argv)
    _T0[0] = time.perf_counter()
    if args.out is None:
        return _usage("--out DIR is required (where plans.json, plans.txt, timing/ and lut/ go)")
    out = _writable_dir("--out", args.out)
    if isinstance(out, str):
        return _usage(out)
    args.out = str(out)
    if not args.time_limit > 0:
        return _usage(f"--time-limit {args.time_limit:g}: give a positive number of seconds")
    if any(not 0 < b <= 1 for b in args.budgets or ()):
        return _usage(f"--budgets {args.budgets}: each a fraction of the as-is latency in (0, 1]")
    if any(not 1 <= b for b in args.batches or ()):
        return _usage(f"--batches {args.batches}: each at least 1")
    missing = _missing()
    if missing:
        return _usage(f"cannot start: missing Python packages {', '.join(missing)} (latopt needs them; on a machine "
                      "that cannot download see python tools/gpu_check.py --carry)")
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        return _usage(f"torch {torch.__version__} sees no CUDA GPU; run on a GPU machine or use --cpu-smoke")
    where = torch.cuda.get_device_name(0) if not args.cpu_smoke else "the CPU (smoke)"
    log(f"torch {torch.__version__} (CUDA {torch.version.cuda}), {where}; timm {_version('timm')}; out {args.out}")
    run = Run(args)
    # SIGTERM (a timeout's kill) ends the run through the finally blocks: the background counts stop, the
    # summaries keep what was done (they are written after every step anyway)
    before = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        code = run.run()
    except (KeyboardInterrupt, SystemExit):
        run.rec["status"] = f"interrupted during {run.current or 'the start'}"
        run.save()
        raise
    finally:
        signal.signal(signal.SIGTERM, before)
    log(f"{run.rec['status']}: {run.out / 'plans.json'} and plans.txt in {run.elapsed():.0f} s; exit {code}")
    print(format_summary(run.rec))
    return code


if __name__ == "__main__":
    sys.exit(main())
