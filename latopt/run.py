"""``latopt run [CONFIG]``: the main job, end to end, resumable.

train (or load) the base model → profile the device (LUT) → search (small budget) → pick the recommended
trial → export (ONNX + numeric gates + measured latency) → one report (Markdown with a per-block latency
bar chart marking the folded blocks and the Pareto plot) and a one-screen summary.

Everything lives under ``runs/<name>/`` (``name`` from the config). ``run.json`` records each finished
stage and its artefacts, so an interrupted run resumes at the first unfinished stage instead of starting
over (``--fresh`` starts over). Defaults: ``configs/quickstart.yaml`` on the ``cpu`` device.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from latopt.artifacts import read_json, write_json_atomic, write_text_atomic
from latopt.errors import LatoptError

RUN_SCHEMA = "latopt.run/1"
DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"
STAGES = ("base", "profile", "search", "export", "report")


class _State:
    """run.json: finished stages and their outputs; written atomically after each stage."""

    def __init__(self, root: Path, config: Path, fresh: bool) -> None:
        self.path = root / "run.json"
        self.data: dict[str, Any] = {"schema": RUN_SCHEMA, "config": str(config), "stages": {}}
        if self.path.is_file() and not fresh:
            old = read_json(self.path, schema=RUN_SCHEMA, what="run state")
            if old.get("config") == str(config):
                self.data = old

    def done(self, stage: str) -> dict[str, Any] | None:
        return self.data["stages"].get(stage)

    def finish(self, stage: str, info: dict[str, Any]) -> None:
        self.data["stages"][stage] = info
        write_json_atomic(self.path, self.data)


def _stage(i: int, name: str, what: str) -> Callable[[str], None]:
    print(f"\n[run] stage {i}/{len(STAGES)}: {name} — {what}", flush=True)
    return lambda msg: print(f"[run]   {msg}", flush=True)


def run_main(config: str | Path | None = None, *, device: str | None = None, trials: int | None = None,
             runs_dir: str | Path = "runs", seed: int = 0, fresh: bool = False) -> dict[str, Any]:
    from latopt.artifacts import seed_everything
    from latopt.config import load_config, write_config

    config = Path(config) if config else DEFAULT_CONFIG
    overrides = {"device": device} if device else None
    cfg = load_config(config, overrides)
    from latopt.latency.devices import load_device

    dev = load_device(cfg.device)         # a wrong --device fails before any work
    from latopt.latency.backends import close_backend, get_backend

    close_backend(get_backend(dev))       # ... and so does a device this machine cannot drive (no GPU, no TensorRT)
    root = Path(runs_dir) / cfg.name
    if root.exists() and not root.is_dir():
        raise LatoptError(f"{root} exists and is a file; remove it or choose another --runs-dir")
    root.mkdir(parents=True, exist_ok=True)
    write_config(cfg, root / "config.yaml")
    state = _State(root, config.resolve(), fresh)
    seed_everything(seed)
    if cfg.threads:
        import torch

        torch.set_num_threads(cfg.threads)
    t0 = time.perf_counter()
    times: dict[str, float] = {}

    # 1. base model ---------------------------------------------------------------------------------
    t = time.perf_counter()
    base = state.done("base")
    if base and Path(base["checkpoint"]).is_file():
        print(f"[run] stage 1/{len(STAGES)}: base — resumed ({base['checkpoint']})", flush=True)
    else:
        say = _stage(1, "base", f"train {cfg.model.name} on {cfg.data.task} @{cfg.data.resolution}")
        from latopt.train import train_base

        metrics = train_base(cfg, root / "base", progress=True, seed=seed)
        base = {"checkpoint": str(metrics["checkpoint"]), "test_acc": metrics.get("test_acc"),
                "val_acc": metrics.get("val_acc")}
        say(f"base test accuracy {base['test_acc']:.4f}")
        state.finish("base", base)
    times["base"] = time.perf_counter() - t

    # 2. profile ------------------------------------------------------------------------------------
    t = time.perf_counter()
    from latopt.latency.lut import load_lut, save_lut

    lut_path = Path(cfg.lut) if cfg.lut else root / f"lut-{dev.name}.json"
    prof = state.done("profile")
    if prof and lut_path.is_file():
        print(f"[run] stage 2/{len(STAGES)}: profile — resumed ({lut_path})", flush=True)
        lut = load_lut(lut_path, model=cfg.model.name, resolution=cfg.data.resolution)
    elif cfg.lut:
        lut = load_lut(lut_path, model=cfg.model.name, resolution=cfg.data.resolution)
        state.finish("profile", {"lut": str(lut_path), "given": True})
    else:
        say = _stage(2, "profile", f"time every block of {cfg.model.name} on {dev.name} ({dev.backend})")
        from latopt.latency.profiler import format_lut, profile_model

        lut = profile_model(cfg.model.name, dev, cfg.data.resolution, dev.batch, progress=True,
                            num_classes=_num_classes(cfg))
        save_lut(lut, lut_path)
        print(format_lut(lut), flush=True)
        state.finish("profile", {"lut": str(lut_path), "profiling_s": lut.profiling_s})
    times["profile"] = time.perf_counter() - t

    # 3. search -------------------------------------------------------------------------------------
    t = time.perf_counter()
    n_trials = int(trials or cfg.search.trials)
    srch = state.done("search")
    if srch and srch.get("trials") == n_trials and Path(srch["checkpoint"] or base["checkpoint"]).is_file():
        print(f"[run] stage 3/{len(STAGES)}: search — resumed (trial {srch['trial']})", flush=True)
    else:
        _stage(3, "search", f"{n_trials} Optuna trials over (λ_c, τ, p), accuracy vs LUT latency")
        import os

        from latopt.search import SearchOptions, run_search

        # two 1-thread workers on a 2-core machine train far faster than one 2-thread process
        workers = 2 if (os.cpu_count() or 1) >= 2 else 1
        res = run_search(SearchOptions(config=config, trials=n_trials, base=base["checkpoint"], lut=lut_path,
                                       seed=seed, runs_dir=runs_dir, overrides=overrides or {}, workers=workers))
        if not res.finished:
            raise LatoptError(f"the search stopped with {res.n_complete}/{n_trials} complete trials; "
                              "rerun `latopt run` to resume it")
        srch = _recommended(res)
        srch["trials"] = n_trials
        state.finish("search", srch)
    times["search"] = time.perf_counter() - t

    # 4. export -------------------------------------------------------------------------------------
    t = time.perf_counter()
    exp = state.done("export")
    export_dir = root / "export"
    if exp and (export_dir / "export.json").is_file():
        print(f"[run] stage 4/{len(STAGES)}: export — resumed ({export_dir})", flush=True)
        result = read_json(export_dir / "export.json", what="export record")
    else:
        _stage(4, "export", "ONNX, numeric gates, as-is vs folded measured in one interleaved run")
        from latopt.export import export

        ckpt = srch["checkpoint"] or base["checkpoint"]
        result = export(ckpt, cfg.device, export_dir, fmt="onnx", fold=None if srch["checkpoint"] else "none",
                        lut_path=str(lut_path), seed=seed)
        state.finish("export", {"dir": str(export_dir)})
    times["export"] = time.perf_counter() - t

    # 5. report -------------------------------------------------------------------------------------
    _stage(5, "report", f"{root / 'REPORT.md'}")
    summary = write_report(root, cfg, lut, base, srch, result, times)
    state.finish("report", {"report": str(root / "REPORT.md")})
    print("\n" + summary, flush=True)
    print(f"[run] finished in {time.perf_counter() - t0:.0f} s (this invocation); report: {root / 'REPORT.md'}")
    return {"root": str(root), "summary": summary, "export": result, "search": srch, "base": base}


def _num_classes(cfg: Any) -> int:
    from latopt.train import load_task

    return int(load_task(cfg).num_classes)


def _recommended(res: Any) -> dict[str, Any]:
    import optuna

    study = optuna.load_study(study_name=res.study_name, storage=res.storage)
    summary = res.summary
    rec = res.recommended
    rows = {r["trial"]: r for r in summary["rows"]}
    if rec is None:
        return {"trial": None, "checkpoint": None, "fold_set": {}, "note": "no trial met the accuracy constraint",
                "pareto_png": str(res.files.get("png", "")), "study_dir": str(res.study_dir)}
    trial = next(t for t in study.trials if t.number == rec)
    ua = trial.user_attrs
    return {"trial": rec, "checkpoint": None if ua.get("base") else ua.get("checkpoint"),
            "fold_set": ua.get("fold_set", {}), "val_acc": ua.get("val_acc"), "base_acc": ua.get("base_acc"),
            "latency_ms": ua.get("latency_ms"), "params": dict(trial.params), "row": rows.get(rec),
            "pareto_png": str(res.files.get("png", "")), "study_dir": str(res.study_dir)}


def latency_chart(lut: Any, folded: dict[int, str], path: Path) -> Path:
    """Per-block bar chart: LUT time as-is and folded; the blocks of the exported fold set marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    idx = [b.index for b in lut.blocks]
    asis = [b.ms["none"] for b in lut.blocks]
    full = [b.ms.get("full", float("nan")) for b in lut.blocks]
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(idx) + 2), 3.6))
    w = 0.4
    ax.bar([i - w / 2 for i in idx], asis, w, label="as-is", color="#8a9bb0")
    ax.bar([i + w / 2 for i in idx], full, w, label="folded (full)", color="#e3a857")
    for i in idx:
        if i in folded:
            ax.annotate("F", (i, max(asis[i], full[i] if full[i] == full[i] else 0)), ha="center", va="bottom",
                        fontsize=9, fontweight="bold", color="#b03a2e")
    ax.set_xticks(idx)
    ax.set_xlabel("block (F = folded in the exported network)")
    ax.set_ylabel("LUT latency (ms)")
    ax.set_title(f"{lut.model} @{lut.resolution} on {lut.device}")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(root: Path, cfg: Any, lut: Any, base: dict[str, Any], srch: dict[str, Any],
                 result: dict[str, Any], times: dict[str, float]) -> str:
    import shutil

    folded = {int(k): v for k, v in result.get("folded", {}).items()}
    latency_chart(lut, folded, root / "latency_blocks.png")
    pareto = Path(srch.get("pareto_png") or "")
    if pareto.is_file():
        shutil.copyfile(pareto, root / "pareto.png")
    lat = result.get("latency") or {}
    acc_after = (result.get("accuracy") or {}).get("test_acc")
    acc_before = base.get("test_acc")
    lines = [
        f"latopt run — {cfg.name}: {cfg.model.name} on {cfg.data.task} @{cfg.data.resolution}, device {lut.device}",
        f"  folded blocks   {len(folded)}/{len(lut.foldable())}: {sorted(folded) or 'none'}"
        + (f"  (trial {srch['trial']}: λ_c={srch['params'].get('lambda_c', float('nan')):.3g}, "
           f"τ={srch['params'].get('tau', float('nan')):.2f})" if srch.get("trial") is not None and srch.get("params")
           and "lambda_c" in srch["params"] else ""),
        f"  test accuracy   {_pct(acc_before)} → {_pct(acc_after)}",
    ]
    if lat:
        lines += [f"  latency         {lat['as_is_ms']:.3f} ms → {lat['folded_ms']:.3f} ms (measured in this run, "
                  f"median of {lat['repeats']['as_is']}/{lat['repeats']['folded']} interleaved repeats)",
                  f"  speed-up        {lat['speedup']:.2f}× (quartile range {lat['speedup_range'][0]:.2f}–"
                  f"{lat['speedup_range'][1]:.2f}×)"]
        if "lut_folded_ms" in lat:
            lines.append(f"  LUT prediction  {lat['lut_as_is_ms']:.3f} ms → {lat['lut_folded_ms']:.3f} ms "
                         f"(error {lat['lut_error_as_is']:+.1%} / {lat['lut_error_folded']:+.1%})")
    if srch.get("note"):
        lines.append(f"  note            {srch['note']}")
    summary = "\n".join(lines)
    md = [f"# latopt run: {cfg.name}", "", "```", summary, "```", "",
          "## Per-block latency (LUT)", "", "![per-block latency](latency_blocks.png)", ""]
    if (root / "pareto.png").is_file():
        md += ["## Pareto front (search)", "", "![Pareto front](pareto.png)", ""]
    md += ["## Stages", "", "| stage | seconds (this invocation) |", "|---|---|"]
    md += [f"| {k} | {v:.1f} |" for k, v in times.items()]
    md += ["", "## Artefacts", "", f"- base checkpoint: `{base['checkpoint']}`",
           f"- search study: `{srch.get('study_dir', '')}`", f"- export: `{root / 'export'}` (see its REPORT.md)", ""]
    write_text_atomic(root / "REPORT.md", "\n".join(md))
    return summary


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}%"


def _cmd_run(args: argparse.Namespace) -> int:
    run_main(args.config, device=args.device, trials=args.trials, runs_dir=args.runs_dir, seed=args.seed,
             fresh=args.fresh)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from latopt.cli import common_parser

    p = sub.add_parser("run", parents=[common_parser()],
                       help="the main job: train → profile → search → export → report (resumable)")
    p.add_argument("config", nargs="?", default=None, help="run config (default configs/quickstart.yaml)")
    p.add_argument("--device", default=None, help="device profile (default: the config's, normally cpu)")
    p.add_argument("--trials", type=int, default=None, help="search trials (default: the config's search.trials)")
    p.add_argument("--runs-dir", default="runs", help="root of run directories (default runs)")
    p.add_argument("--fresh", action="store_true", help="start over instead of resuming finished stages")
    p.set_defaults(func=_cmd_run)
