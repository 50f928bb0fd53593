#!/usr/bin/env python
"""latopt's two promises, measured: the budget (the DP's plan, budget loop included, exported and measured,
meets the latency budget asked) and the accuracy constraint (``latopt run``'s recommendation stays within
``search.max_acc_drop`` on the test split). The protocol, written before any run, is docs/promises.md; the
tables there are made from ``results/promises/`` by :func:`render_budget` and :func:`render_accuracy`
(``python tools/regenerate.py``).

A thin layer over the package: the plan is :func:`latopt.dp.plan_only` (what the DP's command runs with
``--budget B --plan-only``: the DP and the budget loop, :mod:`latopt.dp.budgetloop`), the export is
:func:`latopt.export.export` with that plan file (``latopt export --plan FILE --timing-only``: the as-is and
the planned network timed in one interleaved run), the LUT is :func:`latopt.latency.profiler.profile_model`
(``latopt profile --variants full,pw,drop``), and the accuracy runs are :func:`latopt.run.run_main` (``latopt
run --config C --seed S``). The queue (resumable, lock files) is :class:`tools.jobqueue.JobQueue`.

- **budget** (:data:`MODELS` × :data:`TARGETS` × :data:`BUDGETS`): per model and target a LUT (cell
  ``lut-<model>.<target>``); per budget (cell ``budget-<model>.<target>@<B>``) the DP's plan with the budget
  loop (``dp.budget_rounds`` of the model's config) and its export on the target; the record has every
  loop round (the LUT's predicted ratio and the measured one) and export's measured ratio t(plan)/t(as-is).
  Random weights (uniform importance) unless ``--base MODEL=CKPT`` gives a trained base (proxy importance).
- **accuracy** (``--configs quickstart:0-4 fashion_mnist:0-2``): ``latopt run`` per seed in its own directory
  ``DIR/accuracy/<config>-s<seed>/`` (a finished run is reused); the record: the recommended trial, its
  confirmation (run.json), and the base and the trial classified on the test split (paired counts).
- **publish**: the records, without machine paths, into ``results/promises/{budget,accuracy}.json``.

    python tools/bench_promises.py budget --runs-dir DIR [--models ...] [--targets cpu cpu-int8] [--budgets ...]
                                          [--base MODEL=CKPT ...]
    python tools/bench_promises.py accuracy --runs-dir DIR [--configs quickstart:0-4 fashion_mnist:0-2]
    python tools/bench_promises.py publish --runs-dir DIR --results results/promises [--merge]
    python tools/regenerate.py                       # docs/promises.md's tables

A rerun skips every cell that has ``cells/<cell>.json``. ``--smoke`` (tests only) times with tiny budgets
(copies of the target profiles named ``<target>-smoke``) and, for ``accuracy``, trains a tiny config.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):   # run as a script: the checkout's root, for tools.*
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools import bench_methods as bm  # noqa: E402 - after the checkout is on sys.path
from tools.jobqueue import JobQueue  # noqa: E402

if TYPE_CHECKING:
    from latopt.dp import PlanRecord

# ------------------------------------------------------------------ the protocol (docs/promises.md)
BUDGETS = (0.5, 0.6, 0.7, 0.8, 0.9)
TARGETS = ("cpu", "cpu-int8")
# model key -> the config it is read from (model and resolution), the classes of its random-weight head
MODELS: dict[str, dict[str, Any]] = {
    "mobilenetv2_100": {"config": "mobilenetv2_100", "num_classes": 1000, "label": "MobileNetV2-1.0 @224"},
    "efficientnet_lite0": {"config": "efficientnet_lite0", "num_classes": 1000, "label": "EfficientNet-lite0 @224"},
    "quickstart": {"config": "quickstart", "num_classes": 10, "label": "MobileNetV2-0.5 @32 (quickstart)"},
    "fashion_mnist": {"config": "fashion_mnist", "num_classes": 10,
                      "label": "MobileNetV2-0.5 strides 1,2,2,1,1,2,1 @32 (fashion_mnist)"},
}
SMOKE_MODELS: dict[str, dict[str, Any]] = {   # --smoke only
    "tiny": {"config": "quickstart", "model": "mobilenetv2_035", "num_classes": 10, "label": "MobileNetV2-0.35 @32"},
}
VARIANTS = ("full", "pw", "drop")
ACCURACY_CONFIGS = {"quickstart": (0, 1, 2, 3, 4), "fashion_mnist": (0, 1, 2)}
BAND_GOAL = 0.90                                   # share of cases within the band
LUT_GOALS = {224: 0.03, 32: 0.05}                  # |LUT error| of the DP's first plan, by resolution
LUT_GOAL_SHARE = 0.90                              # share of cases within it
SE_RULE = 2.0                                      # a seed misses when drop > max_acc_drop + 2 SE
SMOKE_POLICY = {"warmup": 1, "min_repeats": 5, "max_repeats": 10, "budget_s": 1}
SMOKE_RUN = {"train.epochs": 1, "data.max_samples": 96, "fold.epochs": 1, "fold.post_epochs": 1,
             "search.trials": 2, "dp.budgets": [0.7], "dp.refine": 1, "dp.refine_epochs": 1,
             "search.max_acc_drop": 1.0}   # 48 confirmation images confirm no smaller constraint
# The main job's goals (issue 46; the protocol: docs/results.md#the-main-job-on-quickstart, written before its runs)
MAIN_GOALS = {"quickstart": {"speedup": 1.5, "minutes": 10.0}, "fashion_mnist": {"speedup": 1.65, "minutes": 45.0,
                                                                                   "test_drop": 0.005}}
RESULTS_SCHEMA = "latopt.promises/1"
PROG = "bench_promises"


def log(msg: str) -> None:
    print(f"[{PROG} {time.strftime('%H:%M:%S')} pid {os.getpid()}] {msg}", flush=True)


def band(budget: float, below: float, above: float) -> tuple[float, float]:
    """The accepted measured ratios for budget B: [B·(1 − below), B·(1 + above)] (the budget loop's own)."""
    return budget * (1 - below), budget * (1 + above)


def tolerances() -> dict[str, float]:
    from latopt.dp.budgetloop import TOL_ABOVE, TOL_BELOW

    return {"below": TOL_BELOW, "above": TOL_ABOVE}


# ------------------------------------------------------------------ the queue (tools.jobqueue)
class Queue(JobQueue):
    """One part's queue (:class:`tools.jobqueue.JobQueue`: resumable, lock files) under ``DIR/<part>``, with
    this invocation's options (``opts``) and whether it is a smoke run (``smoke``)."""

    def __init__(self, root: Path, args: argparse.Namespace) -> None:
        super().__init__(root, say=log, kind=lambda cell: cell.split("-", 1)[0])
        self.opts = args
        self.smoke = bool(args.smoke)
        self.root.mkdir(parents=True, exist_ok=True)


def run_cells(q: Queue, cells: list[tuple[str, int, list[str]]], run: Any) -> None:
    """``run(q, cell, seed)`` for each cell not done, one thread a process; each record says whether the run
    was a smoke run."""
    from latopt.training.torch_settings import set_threads

    set_threads(1)
    q.run(cells, lambda cell, seed: run(q, cell, seed) | {"smoke": q.smoke})


# ------------------------------------------------------------------ the budget
def model_spec(key: str, smoke: bool = False) -> dict[str, Any]:
    """The model ``key``: its config, model name, resolution and head (from the config, unless it names one)."""
    from latopt.config import load_config

    spec = dict({**MODELS, **(SMOKE_MODELS if smoke else {})}[key])
    cfg = load_config(spec["config"])
    spec.setdefault("model", cfg.model.name)
    spec.setdefault("resolution", int(cfg.data.resolution))
    return spec


def device_spec(q: Queue, target: str) -> str:
    """The device profile timed on: ``target``, or with ``--smoke`` a copy named ``<target>-smoke`` with tiny
    timing budgets (a YAML file in ``DIR/devices/``; passed to the package as a path, as ``--device`` takes it)."""
    if not q.smoke:
        return target
    import yaml

    from latopt.latency.devices import load_device

    d = load_device(target).model_dump(mode="json", exclude={"path"})
    d.update(SMOKE_POLICY, name=f"{target}-smoke")
    path = q.root / "devices" / f"{target}-smoke.yaml"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump({k: v for k, v in d.items() if v is not None}))
    return str(path)


def budget_cells(args: argparse.Namespace) -> list[tuple[str, int, list[str]]]:
    """(cell, seed, dependencies): per model and target its LUT, then its budgets."""
    out: list[tuple[str, int, list[str]]] = []
    for m in args.models:
        for t in args.targets:
            lut = f"lut-{m}.{t}"
            out.append((lut, 0, []))
            out += [(f"budget-{m}.{t}@{b:g}", 0, [lut]) for b in args.budgets]
    return out


def parse_budget_cell(cell: str) -> tuple[str, str, float | None]:
    """'budget-quickstart.cpu-int8@0.5' -> ('quickstart', 'cpu-int8', 0.5); 'lut-quickstart.cpu' -> (.., None)."""
    kind, _, rest = cell.partition("-")
    mt, _, b = rest.partition("@")
    model, _, target = mt.partition(".")
    return model, target, (float(b) if kind == "budget" else None)


def checkpoint(q: Queue, key: str) -> tuple[Path, str]:
    """The network exported for ``key``: ``--base KEY=CKPT`` (trained; proxy importance), else a random-weight
    checkpoint made once (BN statistics randomised, :func:`latopt.rewrite.randomize_bn_`; uniform importance)."""
    given = q.opts.base.get(key)
    if given:
        return Path(given), "trained"
    spec = model_spec(key, q.smoke)
    path = q.root / "checkpoints" / f"{key}-r{spec['resolution']}.pt"
    if not path.is_file():
        import torch

        from latopt.files.checkpoint import CheckpointMeta, make_arch, save_checkpoint
        from latopt.nets.models import build_model
        from latopt.rewrite import randomize_bn_

        torch.manual_seed(0)
        m = build_model(spec["model"], num_classes=spec["num_classes"]).eval()
        randomize_bn_(m, seed=0)
        save_checkpoint(path, m, make_arch(m, spec["model"], spec["num_classes"]),
                        CheckpointMeta(resolution=spec["resolution"]))
    return path, "random"


def run_config(q: Queue, key: str, target: str) -> Any:
    """The model's config, on the target (its LUT given explicitly), model and resolution as :func:`model_spec`."""
    from latopt.config import load_config

    spec = model_spec(key, q.smoke)
    return load_config(spec["config"], {"model.name": spec["model"], "data.resolution": spec["resolution"],
                                        "device": device_spec(q, target), "lut": None})


def lut_file(q: Queue, key: str, target: str) -> Path:
    return q.root / "lut" / f"{key}.{target}.json"


def cell_lut(q: Queue, key: str, target: str) -> dict[str, Any]:
    """The LUT of the model on the target with the DP's variants (``latopt profile --variants full,pw,drop``)."""
    from latopt.latency.devices import load_device
    from latopt.latency.lut import save_lut
    from latopt.latency.profiler import profile_model

    spec = model_spec(key, q.smoke)
    _, weights = checkpoint(q, key)
    nc = spec["num_classes"]
    if weights == "trained":
        from latopt.files.checkpoint import load_checkpoint

        nc = load_checkpoint(q.opts.base[key])[1].num_classes
    device = load_device(device_spec(q, target))
    lut = profile_model(spec["model"], device, spec["resolution"], device.batch, variants=VARIANTS, progress=False,
                        num_classes=nc)
    save_lut(lut, lut_file(q, key, target))
    held = (lut.to_dict().get("end_to_end") or {}).get("held-out", {})
    return {"model": key, "target": target, "device": device.name, "profiling_s": lut.profiling_s,
            "held_out_error": held.get("error") if isinstance(held, dict) else None}


def cell_budget(q: Queue, key: str, target: str, budget: float) -> dict[str, Any]:
    """The DP's plan at ``budget`` with the budget loop (:func:`latopt.dp.plan_only`), exported on the target with
    that plan file (:func:`latopt.export.export`, timing-only: the plan is not fine-tuned) and measured there."""
    from latopt.dp import plan_only, write_plan
    from latopt.export import CheckOptions, ShipOptions, export

    spec = model_spec(key, q.smoke)
    ckpt, weights = checkpoint(q, key)
    importance = "proxy" if weights == "trained" else "uniform"
    cfg = run_config(q, key, target)
    lut = lut_file(q, key, target)
    out = q.root / "budget" / f"{key}.{target}" / f"b{budget:g}"
    t0 = time.perf_counter()
    plan = plan_only(cfg, lut, budget=budget, importance=importance, base_checkpoint=ckpt if weights == "trained"
                     else None, seed=0, progress=True)
    plan_path = write_plan(out / "plan.json", plan)
    t1 = time.perf_counter()
    exp = export(ckpt, device_spec(q, target), out / "export", ship=ShipOptions(plan=plan_path, lut=lut),
                 checks=CheckOptions(timing_only=True), progress=False).to_json()   # export.json's content
    t2 = time.perf_counter()
    return budget_record(spec, key, target, budget, weights, importance, plan, exp, {"plan": t1 - t0, "export": t2 - t1})


def budget_record(spec: dict[str, Any], key: str, target: str, budget: float, weights: str, importance: str,
                  plan: PlanRecord, exp: dict[str, Any], seconds: dict[str, float]) -> dict[str, Any]:
    """A budget cell's record (no machine paths) from the plan and export.json's content."""
    loop = plan.budget_loop
    assert loop is not None  # plan_only writes the loop's record (status off when it measured nothing)
    rounds = [{"budget": r.budget, "changed": len(r.plan), "predicted_ratio": r.predicted_ratio,
               "measured_ratio": r.measured.ratio, "ratio_q1": r.measured.ratio_q1, "ratio_q3": r.measured.ratio_q3,
               "asis_ms": r.measured.asis_ms, "n": r.measured.n, "timings": r.timings, "trusted": r.trusted}
              for r in loop.rounds]
    first = None
    if rounds:
        r0 = rounds[0]
        first = {"predicted_ratio": r0["predicted_ratio"], "measured_ratio": r0["measured_ratio"],
                 "lut_error": r0["predicted_ratio"] / r0["measured_ratio"] - 1, "trusted": r0["trusted"]}
    lat = exp["latency"]
    keep = ("as_is_ms", "as_is_iqr_ms", "folded_ms", "folded_iqr_ms", "speedup", "speedup_range", "repeats",
            "precision", "clock", "lut_speedup", "lut_speedup_error", "folded_file")
    measured = lat["folded_ms"] / lat["as_is_ms"]
    tol = tolerances()
    low, high = band(budget, tol["below"], tol["above"])
    return {"model": key, "model_name": spec["model"], "resolution": spec["resolution"], "target": target,
            "device": exp["device"], "budget": budget, "weights": weights, "importance": importance,
            "plan": {"changed": {str(k): v for k, v in plan.changed.items()}, "spans": plan.spans,
                     "predicted_ratio": plan.predicted.ratio},
            "loop": {"status": loop.status, "note": loop.note, "rounds_max": loop.rounds_max, "chosen": loop.chosen,
                     "rounds": rounds},
            "first_round": first,
            "export": {k: lat[k] for k in keep if k in lat},
            "measured_ratio": measured, "band": [low, high],
            "side": "within" if low <= measured <= high else ("over" if measured > high else "under"),
            "seconds": seconds}


def run_budget_cell(q: Queue, cell: str, seed: int) -> dict[str, Any]:
    key, target, budget = parse_budget_cell(cell)
    return cell_lut(q, key, target) if budget is None else cell_budget(q, key, target, budget)


def budget(args: argparse.Namespace) -> None:
    q = Queue(Path(args.runs_dir) / "budget", args)
    cells = budget_cells(args)
    log(f"budget: {len(cells)} cells ({sum(q.done(c) is not None for c, _, _ in cells)} done) in {q.root}")
    run_cells(q, cells, run_budget_cell)


# ------------------------------------------------------------------ the accuracy constraint
def accuracy_cells(configs: dict[str, tuple[int, ...]]) -> list[tuple[str, int, list[str]]]:
    return [(f"acc-{c}.s{s}", s, []) for c, seeds in configs.items() for s in seeds]


def smoke_config(q: Queue, config: str) -> Path:
    """--smoke: the config with :data:`SMOKE_RUN`'s overrides (and the tiny cpu profile), as a YAML file."""
    from latopt.config import load_config, write_config

    path = q.root / "configs" / f"{config}-smoke.yaml"
    if not path.is_file():
        write_config(load_config(config, {**SMOKE_RUN, "device": device_spec(q, "cpu")}), path)
    return path


def run_dir(q: Queue, config: str, seed: int) -> Path:
    return q.root / f"{config}-s{seed}"


def run_dir_of(root: Path, rec: dict[str, Any]) -> Path:
    """The ``latopt run`` directory of an accuracy cell's record under the queue's root ``root``."""
    return root / f"{rec['run_config']}-s{rec['seed']}" / str(rec["name"])


def cell_accuracy(q: Queue, cell: str, seed: int) -> dict[str, Any]:
    """``latopt run --config C --seed S`` in its own runs directory (:func:`latopt.run.run_main`: a finished run
    is reused stage by stage), then its record (:func:`accuracy_record`)."""
    from latopt.run import run_main

    config = cell.split("-", 1)[1].rsplit(".s", 1)[0]
    r = run_main(smoke_config(q, config) if q.smoke else config, runs_dir=run_dir(q, config, seed), seed=seed)
    return {**accuracy_record(r.root, config, seed), "run_seconds": round(r.seconds, 1),
            "run_stages": dict(r.stages)}


def front_record(root: Path) -> list[dict[str, Any]] | None:
    """The candidates a finished ``latopt run`` (``root``) judged, fastest first, from its search stage's
    pareto.json (selection and confirmation parts of the validation split only; no test figure, no machine
    path): per trial its budget, blocks folded, LUT speed-up over the base, selection drop, confirmation drop and
    bound, and what became of it (``shipped``, ``rejected``: its bound above the constraint, ``not tested``: the
    fixed sequence stopped before it, ``over the constraint``: its selection drop above the constraint, so no
    candidate, ``base``, ``not needed``: slower than the trial shipped). None when the run has no pareto.json."""
    from latopt.files.readers import read_json
    from latopt.search import FrontSummary

    path = root / "search" / "pareto.json"
    if not path.is_file():
        return None
    s = FrontSummary.model_validate(read_json(path, schema=FrontSummary.SCHEMA, what="pareto.json"))
    base = s.row(s.base_trial) if s.base_trial is not None else None
    rec = s.recommendation
    rejected = {r.trial: r for r in (rec.rejected if rec else [])}
    out = []
    for r in sorted((r for r in s.rows if r.on_full_front), key=lambda r: r.metric):
        outcome = ("base" if r.base else "shipped" if r.trial == s.recommended
                   else ("not tested" if (rejected[r.trial].why or "").startswith("not tested") else "rejected")
                   if r.trial in rejected
                   else "over the constraint" if not r.feasible
                   else "not needed")
        out.append({"trial": r.trial, "budget": r.budget, "n_folded": r.n_folded,
                    "lut_speedup": None if base is None else base.metric / r.metric,
                    "selection_drop": r.acc_drop, "confirm_drop": r.confirm_drop, "confirm_bound": r.confirm_bound,
                    "outcome": outcome})
    return out


def test_correct(ckpt: Path, task: Any) -> Any:
    """Per test image of ``task`` (in order): does the checkpoint's network (PyTorch, float32, CPU) classify it
    right. A thin helper: the package records accuracies, not per-image results on the test split."""
    import numpy as np
    import torch
    from torch.utils.data import DataLoader

    from latopt.data import collate
    from latopt.files.checkpoint import load_checkpoint

    model = load_checkpoint(ckpt)[0].eval()
    hits = []
    with torch.no_grad():
        for x, y in DataLoader(task.test, batch_size=256, shuffle=False, collate_fn=collate):
            hits.append((model(x.float()).argmax(1) == y).numpy())
    return np.concatenate(hits)


def accuracy_record(root: Path, config: str, seed: int) -> dict[str, Any]:
    """One seed's record from a finished ``latopt run`` directory ``root`` (``runs/<name>/``): the constraint and
    the confirmation of the recommended trial (run.json's search stage), the base's and the trial's test accuracy
    and their paired counts on the test split (the base and the recommended checkpoint classified here), the
    shipped file's test accuracy (export/export.json)."""
    from latopt.config import load_config
    from latopt.data import load_task
    from latopt.export import read_export_record
    from latopt.run.run_record import BaseStage, SearchPick

    stages = bm.load_json(root / "run.json")["stages"]
    base, search = BaseStage.read(stages.get("base")), SearchPick.read(stages.get("search"))
    if base is None or search is None:
        raise SystemExit(f"{root / 'run.json'}: its base or search stage holds no record; run it again")

    def at(p: str) -> Path:
        return Path(p) if Path(p).is_absolute() else root / p

    cfg = load_config(root / "config.yaml")
    task = load_task(cfg)
    base_ok = test_correct(at(base.checkpoint), task)
    trial_ok = base_ok if not search.checkpoint else test_correct(at(search.checkpoint), task)
    n, lost, won = int(base_ok.size), int((base_ok & ~trial_ok).sum()), int((~base_ok & trial_ok).sum())
    exp = read_export_record(root / "export" / "export.json")
    conf, split = search.confirm, search.confirm_split
    return {"run_config": config, "seed": seed, "name": cfg.name, "task": cfg.data.task,
            "max_acc_drop": search.max_acc_drop, "trial": search.trial,
            "recommended": "fold" if search.checkpoint else "base",
            "fold_set": search.fold_set, "note": search.note,
            "base_test_acc_recorded": base.test_acc, "base_test_acc": float(base_ok.mean()),
            "trial_test_acc": float(trial_ok.mean()), "test": {"n": n, "lost": lost, "won": won},
            "shipped_test_acc": None if exp.accuracy is None else exp.accuracy.test_acc,
            "confirm": dict.fromkeys(("n", "lost", "won", "drop", "bound", "level", "passed")) if conf is None
            else conf.model_dump(mode="json"),
            "confirm_split": {} if split is None
            else split.model_dump(mode="json", exclude_unset=True, exclude={"confirmation_sha256"}),
            "rejected": len(search.rejected),
            "latency": None if exp.latency is None else exp.latency.model_dump(
                mode="json", include={"speedup", "speedup_range", "lut_speedup", "as_is_ms", "folded_ms", "repeats"})}


def accuracy(args: argparse.Namespace) -> None:
    q = Queue(Path(args.runs_dir) / "accuracy", args)
    cells = accuracy_cells(args.configs)
    log(f"accuracy: {len(cells)} runs ({sum(q.done(c) is not None for c, _, _ in cells)} done) in {q.root}")
    run_cells(q, cells, cell_accuracy)


# ------------------------------------------------------------------ publish
def publish(args: argparse.Namespace) -> list[Path]:
    """``results/promises/budget.json`` and ``accuracy.json``: the protocol as run and every finished cell's
    record (the LUT cells' profiling time; no machine paths), each file only when its stage has cells. With
    ``--merge`` the cells already published stay beside this run's (a cell published again is replaced): a
    stage may be run over several sessions, each on its own machine; ``sessions`` says which cells each
    session published, with its commit and machine."""
    from latopt.latency.timing import environment_info

    dest = Path(args.results)
    outs: list[tuple[str, dict[str, Any], int, int]] = []   # every file made (and checked) before any is written
    for stage in ("budget", "accuracy"):
        cells = sorted((Path(args.runs_dir) / stage / "cells").glob("*.json"))
        if not cells:
            continue
        recs = [{k: v for k, v in bm.load_json(p).items() if k not in ("config",)} for p in cells]
        if stage == "accuracy":   # the candidates each run judged (its runs directory), where it is still there
            for r in recs:
                front = front_record(run_dir_of(Path(args.runs_dir) / stage, r))
                if front is not None:
                    r["front"] = front
        env = {k: v for k, v in environment_info().items() if k != "host"}
        session = {"commit": bm.git_commit(Path(__file__).parent), "published": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                   "environment": env, "cells": [r["cell"] for r in recs]}
        old: dict[str, Any] = {"cells": [], "sessions": []}
        if args.merge and (dest / f"{stage}.json").is_file():
            old = bm.load_json(dest / f"{stage}.json")
            if old.get("schema") != RESULTS_SCHEMA:
                bm.refuse(f"--merge: {dest / f'{stage}.json'} has schema {old.get('schema')!r}, "
                          f"not {RESULTS_SCHEMA!r}; publish without --merge, or into another --results", PROG)
        new = set(session["cells"])
        kept = [r for r in old["cells"] if r["cell"] not in new]
        sessions = [g | {"cells": [c for c in g["cells"] if c not in new]} for g in old.get("sessions", [])]
        recs = sorted(kept + recs, key=lambda r: str(r["cell"]))
        out = {"schema": RESULTS_SCHEMA, "stage": stage, **{k: session[k] for k in ("commit", "published", "environment")},
               "smoke": any(r.get("smoke") for r in recs), "protocol": protocol(),
               "sessions": [g for g in sessions if g["cells"]] + [session], "cells": recs}
        outs.append((stage, out, len(session["cells"]), len(kept)))
    wrote = []
    for stage, out, n_new, n_kept in outs:
        dest.mkdir(parents=True, exist_ok=True)
        bm.write_json(dest / f"{stage}.json", out)
        wrote.append(dest / f"{stage}.json")
        log(f"wrote {dest / f'{stage}.json'} ({n_new} cells of this run, {n_kept} kept)")
    if not wrote:
        print(f"{PROG}: error: nothing to publish: no cells under {args.runs_dir}/budget or /accuracy", file=sys.stderr)
        raise SystemExit(2)
    return wrote


def protocol() -> dict[str, Any]:
    return {"budgets": list(BUDGETS), "targets": list(TARGETS), "models": {k: v["label"] for k, v in MODELS.items()},
            "tolerance": tolerances(), "band_goal": BAND_GOAL, "lut_goals": {str(k): v for k, v in LUT_GOALS.items()},
            "lut_goal_share": LUT_GOAL_SHARE, "se_rule": SE_RULE,
            "accuracy_configs": {k: list(v) for k, v in ACCURACY_CONFIGS.items()}}


# ------------------------------------------------------------------ verdicts and tables (from results/ only)
NOT_RUN = ("The {what} benchmark has not been run yet: there is no `results/{dir}/{file}`. The protocol above "
           "was written before any run, with the commands that run it.\n")


def _pt(x: float | None, signed: bool = False) -> str:
    return "–" if x is None else (f"{100 * x:+.2f} pt" if signed else f"{100 * x:.2f} pt")


def _pct(x: float | None, signed: bool = False) -> str:
    return "–" if x is None else (f"{100 * x:+.1f} %" if signed else f"{100 * x:.1f} %")


def lut_goal(resolution: int, goals: dict[str, float]) -> float:
    """The goal on |LUT error| for a resolution: the one of the nearest resolution that has a goal."""
    res = min((int(k) for k in goals), key=lambda k: abs(k - resolution))
    return float(goals[str(res)])


def budget_verdict(results: dict[str, Any]) -> dict[str, Any]:
    """The budget's verdict from ``results/promises/budget.json``: per budget cell, within the band or not; the
    share within against the goal; per resolution, the LUT's first-round error against its goal. Missing cells
    (a LUT cell does not count) are misses: a case is one (model, target, budget) of the protocol."""
    p = results["protocol"]
    cells = [c for c in results["cells"] if str(c.get("cell", "")).startswith("budget-")]
    below, above = p["tolerance"]["below"], p["tolerance"]["above"]
    cases = []
    for c in cells:
        low, high = band(c["budget"], below, above)
        r = c["measured_ratio"]
        side = "within" if low <= r <= high else ("over" if r > high else "under")
        fr = c.get("first_round")
        goal = lut_goal(c["resolution"], p["lut_goals"])
        err = None if fr is None else fr["lut_error"]
        cases.append({**c, "side": side, "lut_goal": goal,
                      "lut_within": None if err is None else abs(err) <= goal})
    n = len(cases)
    within = sum(c["side"] == "within" for c in cases)
    expected = len(p["models"]) * len(p["targets"]) * len(p["budgets"])
    total = max(n, expected) if not results.get("smoke") else n
    by_res: dict[int, dict[str, Any]] = {}
    for c in cases:
        g = by_res.setdefault(c["resolution"], {"errors": [], "within": 0, "cases": 0, "goal": c["lut_goal"]})
        g["cases"] += 1
        if c["lut_within"] is not None:
            g["errors"].append(abs(c["first_round"]["lut_error"]))
            g["within"] += bool(c["lut_within"])
    for g in by_res.values():
        e = sorted(g["errors"])
        g["median"] = e[len(e) // 2] if e else None
        g["max"] = e[-1] if e else None
        g["met"] = bool(g["cases"]) and g["within"] >= p["lut_goal_share"] * g["cases"]
    return {"cases": cases, "n": n, "total": total, "within": within,
            "over": sum(c["side"] == "over" for c in cases), "under": sum(c["side"] == "under" for c in cases),
            "missing": total - n, "met": total > 0 and within >= p["band_goal"] * total, "lut": by_res}


def _render_block(results: Path, file: str, what: str, body: Callable[[dict[str, Any]], list[str]]) -> str:
    """One of docs/promises.md's blocks, from ``results/promises/<file>`` only: :data:`NOT_RUN` naming ``what``
    when the file is not there; else its commit, date and machine, then the paragraphs ``body`` makes of the
    file's records (ValueError when the file's schema is not :data:`RESULTS_SCHEMA`)."""
    path = Path(results) / file
    if not path.is_file():
        return NOT_RUN.format(what=what, dir=Path(results).name, file=file)
    R = bm.load_json(path)
    if R.get("schema") != RESULTS_SCHEMA:
        raise ValueError(f"{path}: schema {R.get('schema')!r}, expected {RESULTS_SCHEMA!r}")
    sessions = R.get("sessions") or [R]
    head = "; ".join((f"{len(g['cells'])} cell{'s' if len(g['cells']) != 1 else ''}: " if len(sessions) > 1 else "")
                     + f"commit `{str(g.get('commit'))[:12]}`, {g.get('published', '?')}; machine "
                     + bm.machine(g.get("environment", {})) for g in sessions)
    head = head[0].upper() + head[1:] + (" — **smoke**: not a result" if R.get("smoke") else "") + "."
    return "\n\n".join([head, *body(R)]) + "\n"


def render_budget(results: Path) -> str:
    """docs/promises.md's budget block, from ``results/promises/budget.json`` only."""
    return _render_block(results, "budget.json", "budget", _budget_paragraphs)


def _budget_paragraphs(R: dict[str, Any]) -> list[str]:
    """The budget block's paragraphs after its first line (:func:`render_budget`)."""
    V = budget_verdict(R)
    p = R["protocol"]
    budgets = sorted({c["budget"] for c in V["cases"]} | set(p["budgets"] if not R.get("smoke") else []))
    out: list[str] = []
    head = "| model | target | weights | " + " | ".join(f"B = {b:g}" for b in budgets) + " |"
    lines = [head, "|" + "---|" * (3 + len(budgets))]
    rows: dict[tuple[str, str], dict[float, dict[str, Any]]] = {}
    for c in V["cases"]:
        rows.setdefault((c["model"], c["target"]), {})[c["budget"]] = c
    mark = {"within": "", "over": " **over**", "under": " *under*"}
    for (m, t), cs in sorted(rows.items()):
        w = next(iter(cs.values()))["weights"]
        cellv = []
        for b in budgets:
            c = cs.get(b)
            if c is None:
                cellv.append("not run")
                continue
            fr = c["first_round"]
            lut = "" if fr is None else f"; LUT {_pct(fr['lut_error'], True)}"
            cellv.append(f"{c['measured_ratio']:.3f}{mark[c['side']]} (loop {c['loop']['status']}, "
                         f"{len(c['loop']['rounds'])} round(s){lut})")
        lines.append(f"| {p['models'].get(m, m)} | {t} | {w} | " + " | ".join(cellv) + " |")
    out.append("\n".join(lines))
    # a stage run over several sessions: the goal is decided once every case has run (a case that fails is a miss)
    best = V["within"] + V["missing"]   # if every case not run yet landed in the band
    verdict = ("**met**" if V["met"] else "**not met**") if not V["missing"] or R.get("smoke") else (
        f"**not met** (at most {best} of {V['total']} even if every case not run yet lands in the band)"
        if best < p["band_goal"] * V["total"] else "**pending**: decided when every case has run")
    out.append(f"Within the band: {V['within']} of {V['total']} cases ({V['over']} over, {V['under']} under"
               + (f", {V['missing']} not run" if V["missing"] else "") + f"); goal ≥ {100 * p['band_goal']:.0f} %: "
               f"{verdict}.")
    lut_lines = ["| resolution | goal | cases within | median \\|error\\| | max \\|error\\| | verdict |",
                 "|---|---|---|---|---|---|"]
    for res, g in sorted(V["lut"].items()):
        lut_lines.append(f"| {res} px | ≤ {_pct(g['goal'])} | {g['within']} of {g['cases']} | {_pct(g['median'])} | "
                         f"{_pct(g['max'])} | {'met' if g['met'] else 'not met'} |")
    out.append("The LUT's prediction on the DP's first plan (before the loop corrects it), "
               "predicted / measured ratio − 1:\n\n" + "\n".join(lut_lines))
    out.append(f"Each cell: export's measured ratio t(plan) / t(as-is) (ratio of medians, one interleaved run on the "
               f"target), **over** above B·(1 + {100 * p['tolerance']['above']:g} %), *under* below "
               f"B·(1 − {100 * p['tolerance']['below']:g} %); the budget loop's status and rounds; the LUT's error on "
               "the loop's first plan. Raw records: `results/promises/budget.json`.")
    return out


def paired_se(n: int, lost: int, won: int) -> float:
    """The standard error of the mean of the paired differences d_i = base_i − trial_i ∈ {−1, 0, 1} over ``n``
    test images (``lost`` of them +1, ``won`` −1): the sample standard deviation of d over √n."""
    if n < 2:
        return math.nan
    m = (lost - won) / n
    var = (lost + won - n * m * m) / (n - 1)
    return math.sqrt(max(var, 0.0) / n)


def accuracy_verdict(results: dict[str, Any]) -> dict[str, Any]:
    """The accuracy constraint's verdict from ``results/promises/accuracy.json``: per seed, the test drop
    (base − trial), its paired standard error, whether it is over ``max_acc_drop`` by more than SE_RULE × SE
    (a miss), and whether the confirmed bound covers the test drop."""
    k = results["protocol"]["se_rule"]
    cases = []
    for c in results["cells"]:
        t = c["test"]
        drop = (t["lost"] - t["won"]) / t["n"]
        se = paired_se(t["n"], t["lost"], t["won"])
        bound = c["confirm"].get("bound")
        cases.append({**c, "test_drop": drop, "test_se": se,
                      "miss": drop > c["max_acc_drop"] + k * se + 1e-12,
                      "covered": None if bound is None else bound >= drop - 1e-12})
    expected = sum(len(v) for v in results["protocol"]["accuracy_configs"].values())
    total = len(cases) if results.get("smoke") else max(len(cases), expected)
    misses = sum(c["miss"] for c in cases)
    uncovered = sum(c["covered"] is False for c in cases)
    return {"cases": cases, "n": len(cases), "total": total, "missing": total - len(cases), "misses": misses,
            "uncovered": uncovered, "met": bool(cases) and total == len(cases) and misses == 0,
            "covered_all": bool(cases) and total == len(cases) and uncovered == 0
            and all(c["covered"] is not None for c in cases)}


def render_accuracy(results: Path) -> str:
    """docs/promises.md's accuracy block, from ``results/promises/accuracy.json`` only."""
    return _render_block(results, "accuracy.json", "accuracy-constraint", _accuracy_paragraphs)


def _accuracy_paragraphs(R: dict[str, Any]) -> list[str]:
    """The accuracy block's paragraphs after its first line (:func:`render_accuracy`)."""
    V = accuracy_verdict(R)
    k = R["protocol"]["se_rule"]
    out: list[str] = []
    lines = ["| config | seed | recommended | base test acc | trial test acc | test drop ± SE | max drop | "
             f"over by > {k:g} SE? | confirmed drop | bound | bound covers test drop? |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in sorted(V["cases"], key=lambda c: (c["run_config"], c["seed"])):
        cf = c["confirm"]
        rec = "base" if c["recommended"] == "base" else f"trial {c['trial']} ({len(c['fold_set'])} blocks)"
        lines.append(f"| {c['run_config']} | {c['seed']} | {rec} | {100 * c['base_test_acc']:.2f} | "
                     f"{100 * c['trial_test_acc']:.2f} | {100 * c['test_drop']:+.2f} ± {100 * c['test_se']:.2f} pt | "
                     f"{100 * c['max_acc_drop']:.2f} pt | {'**yes: miss**' if c['miss'] else 'no'} | "
                     f"{_pt(cf.get('drop'), True)} | {_pt(cf.get('bound'))} | "
                     f"{'–' if c['covered'] is None else ('yes' if c['covered'] else '**no**')} |")
    out.append("\n".join(lines))
    missing = f"; {V['missing']} of {V['total']} runs not done" if V["missing"] else ""
    # a stage run over several sessions: a goal not yet missed is decided once every run is done
    pending = "**pending**: decided when every run is done"
    goal = ("**met**" if V["met"] else "**not met**") if not V["missing"] or V["misses"] else pending
    cover = ("**met**" if V["covered_all"] else "**not met**") if not V["missing"] or V["uncovered"] else pending
    out.append(f"Seeds over the constraint by more than {k:g} standard errors: {V['misses']} of {V['n']}{missing}: "
               f"{goal}. The confirmed bound covers the test drop in {V['n'] - V['uncovered']} of {V['n']}: {cover}.")
    out.append("Test drop: base − recommended trial on the whole test split, both checkpoints classified by "
               "PyTorch; SE: the standard deviation of the per-image paired difference over √n. Confirmed drop and "
               "bound: the run's confirmation on held-out validation images (run.json). Raw records: "
               "`results/promises/accuracy.json`.")
    return out


def main_job_verdict(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per seed of ``results/main-job/accuracy.json``, the main job's goals (:data:`MAIN_GOALS`): the measured
    speed-up (export's interleaved median) at least the goal's, the confirmed bound within the constraint, the
    test drop within the constraint (and within the goal's test drop where it has one), the run's wall time within
    the goal's minutes."""
    out = []
    for c in accuracy_verdict(results)["cases"]:
        goal = MAIN_GOALS.get(c["run_config"], {})
        lat = c.get("latency") or {}
        speed = float(lat.get("speedup", 1.0)) if c["recommended"] == "fold" else 1.0
        bound = c["confirm"].get("bound")
        kept = (bound is None or bound <= c["max_acc_drop"] + 1e-12) and c["test_drop"] <= c["max_acc_drop"] + 1e-12
        checks = {"speedup": speed >= goal.get("speedup", 0.0) - 1e-12, "promise": kept,
                  "minutes": c.get("run_seconds") is not None and c["run_seconds"] <= 60 * goal.get("minutes", math.inf),
                  "test_drop": c["test_drop"] <= goal.get("test_drop", math.inf) + 1e-12}
        out.append({**c, "speed": speed, "checks": checks, "met": all(checks.values())})
    return out


def render_main_job(results: Path) -> str:
    """docs/results.md's main-job block, from ``<results>/accuracy.json`` only (``results/main-job``, or a run of it
    kept beside it, ``results/main-job/run-1``)."""
    return _render_block(results, "accuracy.json", "main job",
                         lambda R: _main_job_paragraphs(R | {"_file": _repo_path(Path(results) / "accuracy.json")}))


def _repo_path(p: Path) -> str:
    """``p`` from its ``results/`` folder on (the path a reader of the docs finds it at)."""
    parts = p.resolve().parts
    return "/".join(parts[len(parts) - 1 - parts[::-1].index("results"):]) if "results" in parts else str(p)


def _results_name(R: dict[str, Any]) -> str:
    return str(R.get("_file", "results/main-job/accuracy.json"))


def _main_job_paragraphs(R: dict[str, Any]) -> list[str]:
    cases = sorted(main_job_verdict(R), key=lambda c: (c["run_config"], c["seed"]))
    lines = ["| config | seed | shipped | speed-up, measured (quartiles) | LUT predicted | confirmed drop (bound) | "
             "test drop ± SE | constraint | wall time | goals met |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in cases:
        lat = c.get("latency") or {}
        rng = lat.get("speedup_range") or [None, None]
        speed = (f"{c['speed']:.2f}× ({rng[0]:.2f}–{rng[1]:.2f})" if c["recommended"] == "fold" and rng[0] is not None
                 else "1.00× (unchanged)")
        missed = [k for k, ok in c["checks"].items() if not ok]
        cf = c["confirm"]
        lines.append(f"| {c['run_config']} | {c['seed']} | "
                     + ("base" if c["recommended"] == "base" else f"trial {c['trial']} ({len(c['fold_set'])} blocks)")
                     + f" | {speed} | {'–' if lat.get('lut_speedup') is None else format(lat['lut_speedup'], '.2f') + '×'} | "
                     f"{_pt(cf.get('drop'), True)} ({_pt(cf.get('bound'))}) | "
                     f"{100 * c['test_drop']:+.2f} ± {100 * c['test_se']:.2f} pt | {100 * c['max_acc_drop']:.2f} pt | "
                     f"{'–' if c.get('run_seconds') is None else format(c['run_seconds'] / 60, '.1f') + ' min'} | "
                     + ("yes" if c["met"] else "**no**: " + ", ".join(missed)) + " |")
    out = ["\n".join(lines)]
    for config in sorted({c["run_config"] for c in cases}):
        mine = [c for c in cases if c["run_config"] == config]
        g = MAIN_GOALS.get(config, {})
        sp = [c["speed"] for c in mine]
        mean = sum(sp) / len(sp)
        ci = ""
        if len(sp) > 1:
            from scipy import stats

            sd = math.sqrt(sum((x - mean) ** 2 for x in sp) / (len(sp) - 1))
            h = float(stats.t.ppf(0.975, len(sp) - 1)) * sd / math.sqrt(len(sp))
            ci = f" (95 % t-interval over seeds {mean - h:.2f}–{mean + h:.2f}×)"
        goal = (f"≥ {g['speedup']:.2f}× measured" + (f" at ≤ {100 * g['test_drop']:.1f} pt test drop" if "test_drop" in g
                else "") + f", the promise kept, ≤ {g['minutes']:.0f} min") if g else "none set"
        out.append(f"`{config}`: {sum(c['met'] for c in mine)} of {len(mine)} seeds meet the goals ({goal}); mean "
                   f"measured speed-up {mean:.2f}×{ci}.")
    fronts = [c for c in cases if c.get("front")]
    if fronts:
        rows = ["| config | seed | trial | budget | blocks | LUT speed-up | selection drop | confirmed drop (bound) | "
                "outcome |", "|---|---|---|---|---|---|---|---|---|"]
        for c in fronts:
            for f in c["front"]:
                rows.append(f"| {c['run_config']} | {c['seed']} | {f['trial']} | "
                            f"{'–' if f['budget'] is None else format(f['budget'], 'g')} | {f['n_folded']} | "
                            f"{'–' if f['lut_speedup'] is None else format(f['lut_speedup'], '.2f') + '×'} | "
                            f"{_pt(f['selection_drop'], True)} | {_pt(f['confirm_drop'], True)} "
                            f"({_pt(f['confirm_bound'])}) | {f['outcome']} |")
        out.append("The candidates each run judged (its Pareto front on the selection part of the validation split, "
                   "fastest first; `latopt run`'s search stage, pareto.json), for the runs whose record holds them:\n\n"
                   + "\n".join(rows) + "\n\nOutcome: the trial shipped; rejected (its confirmation bound above the "
                   "constraint); not tested (the fixed sequence, slowest first, stopped before it); over the constraint "
                   "(its selection drop above the constraint: no candidate); not needed (slower than the trial "
                   "shipped). A not-tested trial's confirmation figures are printed, not used.")
    out.append("Speed-up: `latopt run`'s export stage, as-is and shipped network timed in one interleaved run on the "
               "run's machine (median of the per-repeat ratios; quartiles). Promise kept: the confirmed bound and the "
               "test drop (base − shipped, whole test split, paired SE) within the constraint. Wall time: the whole "
               f"`latopt run`, base training included. Raw records: `{_results_name(R)}`.")
    return out


# ------------------------------------------------------------------ main
Parser = bm.Parser   # bad arguments: one line on stderr naming the tool (its ``prog``), exit 2 (bm.refuse)


def parse_configs(items: list[str]) -> dict[str, tuple[int, ...]]:
    """``quickstart:0-4 fashion_mnist:0,2`` -> {config: seeds}; ValueError naming the bad item."""
    out: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, sep, seeds = item.partition(":")
        if not sep or not name or not seeds:
            raise ValueError(f"--configs {item!r}: give CONFIG:SEEDS, e.g. quickstart:0-4 or fashion_mnist:0,2")
        got: list[int] = []
        for part in seeds.split(","):
            m = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
            if not m or (m.group(2) and int(m.group(2)) < int(m.group(1))):
                raise ValueError(f"--configs {item!r}: {part!r} is not a seed or a range a-b of seeds (a ≤ b)")
            got += range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1)
        if name in out or len(set(got)) != len(got):
            raise ValueError(f"--configs {item!r}: a config or a seed is given twice")
        out[name] = tuple(got)
    return out


def check_args(ap: Parser, args: argparse.Namespace) -> None:
    from latopt.config import config_path
    from latopt.errors import LatoptError, first_line
    from latopt.latency.devices import load_device

    if Path(args.runs_dir).exists() and not Path(args.runs_dir).is_dir():
        ap.error(f"--runs-dir {args.runs_dir} exists and is not a directory")
    if args.stage == "budget":
        known = {**MODELS, **(SMOKE_MODELS if args.smoke else {})}
        bad = [m for m in args.models if m not in known]
        if bad:
            ap.error(f"--models: unknown {' '.join(bad)}; known: {' '.join(known)}")
        for flag, vals in (("--models", args.models), ("--targets", args.targets), ("--budgets", args.budgets)):
            if len(set(vals)) != len(vals):
                ap.error(f"{flag} lists a value twice: {' '.join(map(str, vals))}")
        if any(not 0 < b <= 1 for b in args.budgets):
            ap.error(f"--budgets are fractions of the as-is latency in (0, 1], got {' '.join(map(str, args.budgets))}")
        for t in args.targets:
            try:
                dev = load_device(t)
            except LatoptError as e:
                ap.error(f"--targets {t!r}: {first_line(e)}")
            if dev.backend == "count":
                ap.error(f"--targets {t!r} counts ({dev.count}), nothing to measure: the promise is about timed devices")
        base: dict[str, str] = {}
        for item in args.base:
            k, sep, v = item.partition("=")
            if not sep or k not in known:
                ap.error(f"--base {item!r}: give MODEL=CHECKPOINT with MODEL one of {' '.join(known)}")
            if not Path(v).is_file():
                ap.error(f"--base {item!r}: no such file {v}")
            base[k] = v
        args.base = base
    if args.stage == "accuracy":
        try:
            args.configs = parse_configs(args.configs)
        except ValueError as e:
            ap.error(str(e))
        for c in args.configs:
            try:
                config_path(c)
            except LatoptError as e:
                ap.error(f"--configs {c!r}: {first_line(e)}")


def build_parser() -> Parser:
    ap = Parser(prog=PROG, description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="stage", required=True)
    b = sub.add_parser("budget", help="the DP's plans exported and measured against their budgets")
    b.add_argument("--models", nargs="+", default=list(MODELS), help=f"default: {' '.join(MODELS)}")
    b.add_argument("--targets", nargs="+", default=list(TARGETS), help=f"default: {' '.join(TARGETS)}")
    b.add_argument("--budgets", nargs="+", type=float, default=list(BUDGETS))
    b.add_argument("--base", action="append", default=[], metavar="MODEL=CKPT",
                   help="a trained base for MODEL (proxy importance; default: random weights, uniform importance)")
    a = sub.add_parser("accuracy", help="latopt run per seed; the recommendation's test drop against the constraint")
    a.add_argument("--configs", nargs="+", default=[f"{c}:{min(s)}-{max(s)}" for c, s in ACCURACY_CONFIGS.items()],
                   metavar="CONFIG:SEEDS")
    p = sub.add_parser("publish", help="the records into results/promises/")
    p.add_argument("--results", required=True, help="results/promises for the docs")
    p.add_argument("--merge", action="store_true",
                   help="keep the cells already published there (a stage run over several sessions, each on its "
                        "own machine); a cell published again is replaced")
    for s in (b, a, p):
        s.add_argument("--runs-dir", required=True)
        s.add_argument("--smoke", action="store_true", help="tests only: tiny timing budgets, a tiny run")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    check_args(ap, args)
    {"budget": budget, "accuracy": accuracy, "publish": publish}[args.stage](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
