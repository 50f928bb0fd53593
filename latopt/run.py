"""``latopt run [CONFIG]``: the main job, end to end, resumable.

train (or load) the base model → profile the device (LUT) → search (small budget) → pick the recommended
trial → export (ONNX + numeric gates + measured latency) → one report (Markdown with a per-block latency
bar chart marking the folded blocks and the Pareto plot) and a one-screen summary.

Everything lives under ``runs/<name>/`` (``name`` from the config). ``run.json`` records, for each
finished stage, what it was made from (its *fingerprint*: the config sections it depends on, the SHA-256
of its input artefacts, the device profile, the seed, the latopt version) and the SHA-256 of what it
wrote. A rerun reuses a stage only when its fingerprint is unchanged and its outputs are intact;
otherwise that stage and every stage after it are re-run, and the summary says which stages were reused
and why the others were re-run (``config section fold changed``, ``base checkpoint changed``, ...):

=========  ===========================================================================================
stage      fingerprint
=========  ===========================================================================================
base       config sections model, data, train; seed; latopt version
profile    config sections model, data; device profile; the config's ``lut`` path and SHA-256 when given
search     config sections fold, search (except ``trials``); base checkpoint and LUT SHA-256; seed
export     exported checkpoint and LUT SHA-256; device profile; seed; latopt version
=========  ===========================================================================================

A search made from the same inputs resumes its study (after an interruption, or with more ``--trials``);
one made from other inputs starts a new study: the run's own SQLite study under ``runs/<name>/search/``
is deleted first, while a study in a storage URL the config names (``search.storage``) is never deleted:
the run refuses and says how to delete it. ``--fresh`` deletes the whole run directory's state (the same
rule for a configured storage) and starts over. ``runs/<name>/config.yaml`` is written when every stage
is done, so it always describes the artefacts beside it. Defaults: the shipped ``quickstart`` config
(``latopt/configs/quickstart.yaml``) on the ``cpu`` device.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from matplotlib.figure import Figure

from latopt import __version__
from latopt.artifacts import (
    file_sha256,
    make_dirs,
    write_bytes_atomic,
    write_figure_atomic,
    write_json_atomic,
    write_text_atomic,
)
from latopt.blocks import find_blocks
from latopt.config import config_path, dump_config, load_config, write_config
from latopt.data import load_task
from latopt.engine import seed_everything
from latopt.errors import LatoptError
from latopt.export import export
from latopt.latency.backends import close_backend, get_backend
from latopt.latency.devices import load_device
from latopt.latency.lut import check_blocks, load_lut, save_lut
from latopt.latency.profiler import format_lut, profile_model
from latopt.layerfold import undertrained_warning
from latopt.log import get_logger
from latopt.models import build_model
from latopt.readers import read_json
from latopt.search import SearchOptions, format_table, open_storage, redact, run_search
from latopt.torch_settings import set_threads
from latopt.train import train_base

RUN_SCHEMA = "latopt.run/2"
_LOG = get_logger("run")
DEFAULT_CONFIG = "quickstart"  # a shipped config (latopt/configs/), found from any working directory
STAGES = ("base", "profile", "search", "export", "report")
NOT_RUN_YET = "not run yet"  # a stage's plan entry when the run directory holds no result of it
# record keys holding paths: stored relative to the run directory, so a moved run directory stays valid
_PATH_KEYS = ("checkpoint", "lut", "dir", "pareto_png", "study_dir", "report")
# the record keys naming a stage's outputs (a file, or a directory: every file in it), hashed when it finishes
_OUTPUT_KEYS = ("checkpoint", "lut", "dir")
# what each stage writes besides run.json (relative to the run directory); removed when it is re-run
_REPORT_FILES = ("REPORT.md", "latency_blocks.png", "pareto.png", "config.yaml")


def _plain(obj: Any) -> Any:
    """``obj`` as it reads back from JSON (tuples become lists), so recorded and current values compare."""
    return json.loads(json.dumps(obj, sort_keys=True))


class _State:
    """run.json: per stage, what it was made from, what it wrote and its results; written atomically."""

    def __init__(self, root: Path, config: Path, fresh: bool) -> None:
        self.root = root
        self.path = root / "run.json"
        self.data: dict[str, Any] = {"schema": RUN_SCHEMA, "config": str(config), "stages": {}}
        self.note = ""
        if fresh or not self.path.exists():
            return
        try:
            old = read_json(self.path, what="run state")
        except LatoptError as e:
            self.note = f"{e}: every stage is re-run"
            return
        if old.get("schema") != RUN_SCHEMA or not isinstance(old.get("stages"), dict):
            self.note = (f"{self.path} was written by another latopt version (schema {old.get('schema')!r}, "
                         f"no fingerprints): every stage is re-run")
            return
        self.data["stages"] = old["stages"]

    def record(self, stage: str) -> dict[str, Any] | None:
        rec = self.data["stages"].get(stage)
        if not isinstance(rec, dict):
            return None
        rec = dict(rec)
        for k in _PATH_KEYS:
            if isinstance(rec.get(k), str) and rec[k] and not Path(rec[k]).is_absolute():
                rec[k] = str(self.root / rec[k])
        return rec

    def _rel(self, p: str | Path) -> str:
        path = Path(p)
        try:
            return str(path.resolve().relative_to(self.root.resolve()))
        except ValueError:
            return str(path)

    def outputs(self, info: dict[str, Any]) -> dict[str, str]:
        """{path relative to the run directory: SHA-256} of the output files a stage's record names."""
        files: list[Path] = []
        for k in _OUTPUT_KEYS:
            if isinstance(info.get(k), (str, Path)) and info[k]:
                p = Path(info[k])
                files += sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        return {self._rel(f): file_sha256(f) for f in files}

    def stale(self, stage: str, made_from: dict[str, Any]) -> list[str]:
        """Why ``stage`` cannot be reused (empty: its record matches ``made_from`` and its outputs are intact)."""
        rec = self.data["stages"].get(stage)
        if not isinstance(rec, dict):
            return [NOT_RUN_YET]
        old = rec.get("made_from") or {}
        now = _plain(made_from)
        why = [_changed(k, old.get(k), now.get(k)) for k in [*now, *(k for k in old if k not in now)]
               if old.get(k) != now.get(k)]
        if why:
            return why
        if not rec.get("done"):
            return ["interrupted"]
        for rel, digest in (rec.get("outputs") or {}).items():
            path = self.root / rel
            if not path.is_file():
                return [f"its output {rel} is missing"]
            if file_sha256(path) != digest:
                return [f"its output {rel} changed since it was made"]
        return []

    def start(self, stage: str, made_from: dict[str, Any], **info: Any) -> None:
        """Record that ``stage`` is being (re-)made: it and every later stage are no longer done."""
        for s in STAGES[STAGES.index(stage):]:
            self.data["stages"].pop(s, None)
        self.data["stages"][stage] = {"made_from": _plain(made_from), "done": False, **info}
        self._write()

    def finish(self, stage: str, info: dict[str, Any]) -> None:
        """Record that ``stage`` (begun with :meth:`start`) is done: its results ``info`` and its outputs' SHA-256."""
        made_from = self.data["stages"].get(stage, {}).get("made_from", {})
        rec = {k: (self._rel(v) if k in _PATH_KEYS and isinstance(v, (str, Path)) and v else v)
               for k, v in info.items()}
        self.data["stages"][stage] = {**rec, "made_from": made_from, "outputs": self.outputs(info), "done": True,
                                      "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        self._write()

    def finished_any(self) -> bool:
        """Some stage is recorded as done."""
        return any(isinstance(r, dict) and r.get("done") for r in self.data["stages"].values())

    def invocation(self, actions: dict[str, str | None]) -> None:
        """What this invocation did with each stage: reused (None) or re-run, and why."""
        self.data["last_invocation"] = {s: {"reused": why is None, "why": why} for s, why in actions.items()}
        self._write()

    def _write(self) -> None:
        write_json_atomic(self.path, self.data)


def _changed(key: str, old: Any, new: Any) -> str:
    if old is None:
        return f"{key} not recorded"
    if isinstance(old, (int, float, str)) and isinstance(new, (int, float, str)) and len(f"{old}{new}") <= 40:
        return f"{key} changed ({old} → {new})"
    return f"{key} changed"


def _stage(i: int, name: str, what: str) -> Callable[[str], None]:
    _LOG.info(f"stage {i}/{len(STAGES)}: {name} — {what}")
    return lambda msg: _LOG.info(f"  {msg}")


def _reused(i: int, name: str, what: str) -> None:
    _LOG.info(f"stage {i}/{len(STAGES)}: {name} — reused ({what})")


class _Fingerprints:
    """What each stage is made from (see the module docstring); values JSON-able, compared key by key."""

    def __init__(self, cfg: Any, dev: Any, seed: int, lut_path: Path) -> None:

        self.sections = dump_config(cfg)
        self.sections["search"] = {k: v for k, v in self.sections["search"].items() if k != "trials"}
        device = dev.model_dump(exclude={"path"})
        self.device = hashlib.sha256(json.dumps(device, sort_keys=True, default=str).encode()).hexdigest()
        self.seed, self.lut_path, self.given_lut = seed, lut_path, bool(cfg.lut)

    def _config(self, *names: str) -> dict[str, Any]:
        return {f"config section {n}": self.sections[n] for n in names}

    def base(self) -> dict[str, Any]:
        return {**self._config("model", "data", "train"), "seed": self.seed, "latopt version": __version__}

    def profile(self) -> dict[str, Any]:
        fp = {**self._config("model", "data"), "device profile": self.device, "latopt version": __version__}
        if self.given_lut:                # else the LUT is runs/<name>/lut-<device>.json, named by the profile
            fp |= {"given LUT": str(self.lut_path), "given LUT SHA-256": file_sha256(self.lut_path)}
        return fp

    def search(self, base_ckpt: str) -> dict[str, Any]:
        return {**self._config("fold", "search"), "base checkpoint": file_sha256(base_ckpt),
                "LUT": file_sha256(self.lut_path), "seed": self.seed, "latopt version": __version__}

    def export(self, ckpt: str) -> dict[str, Any]:
        return {"exported checkpoint": file_sha256(ckpt), "LUT": file_sha256(self.lut_path),
                "device profile": self.device, "seed": self.seed, "latopt version": __version__}


def _study_in_storage(url: str, name: str) -> bool:


    return name in optuna.get_all_study_names(open_storage(url, heartbeat_interval=None))


def _refuse_configured_study(url: str, name: str, why: str) -> None:

    if _study_in_storage(url, name):
        raise LatoptError(
            f"study {name!r} in the configured storage {redact(url)} holds trials made from other inputs ({why}); "
            f"latopt never deletes a study in a storage you configured: delete it (optuna delete-study "
            f"--study-name {name} --storage URL) or give the run another name")


def _clear(root: Path, keep: list[Path], lut_path: Path) -> None:
    """``--fresh``: remove what latopt wrote in the run directory (the stages' outputs, run.json, the report,
    the profiled LUT, the base's resume state, and the hidden temp entries of interrupted writes of those),
    keeping the given input files (a config, LUT or device profile kept there). Anything else found there is
    not latopt's: nothing is removed and the run refuses in one line (a symbolic link in it is never followed)."""
    own = {"base", "base.resume.pt", "search", "export", "run.json", lut_path.name, *_REPORT_FILES}
    temp = re.compile(r"^\.(" + "|".join(re.escape(n) for n in own) + r")\.[0-9a-f]{8}(\.tmp|\.old)?$")
    keep_resolved = [k.resolve() for k in keep]
    remove, foreign = [], []
    for child in sorted(root.iterdir()):
        c = child.resolve()
        if any(k == c or c in k.parents for k in keep_resolved):
            continue
        (remove if child.name in own or temp.match(child.name) else foreign).append(child)
    if foreign:
        names = ", ".join(f.name for f in foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise LatoptError(f"--fresh: {root} holds entries latopt did not write ({names}); it deletes only its own "
                          "outputs: move them away or choose another --runs-dir")
    for child in remove:
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _discard(root: Path, stages: tuple[str, ...], lut_path: Path, given_lut: bool) -> None:
    """Remove what ``stages`` wrote (their artefacts are about to be re-made from other inputs)."""
    paths = {"base": [root / "base"], "profile": [] if given_lut else [lut_path], "search": [root / "search"],
             "export": [root / "export"], "report": [root / f for f in _REPORT_FILES]}
    for s in stages:
        for p in paths[s]:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            elif p.exists() or p.is_symlink():
                p.unlink()


def _plan(state: _State, fps: _Fingerprints, n_trials: int, fresh: bool
          ) -> tuple[dict[str, str | None], str | None, bool]:
    """What to do with each stage: ``{stage: None (reuse) | why it is run}``, the first stage that is run
    (every later one is run too), and whether the search starts a new study (else it resumes its own)."""
    plan: dict[str, str | None] = {}
    new_study = True
    first_rerun: str | None = None
    base_rec, srch_rec = state.record("base"), state.record("search")
    for stage in STAGES[:-1]:
        if fresh:
            plan[stage] = "--fresh"
            continue
        if first_rerun is not None:
            plan[stage] = NOT_RUN_YET if state.record(stage) is None else f"{first_rerun} is re-run"
            continue
        try:
            made_from = {"base": fps.base, "profile": fps.profile,
                         "search": lambda: fps.search(base_rec["checkpoint"]),
                         "export": lambda: fps.export(srch_rec["checkpoint"] or base_rec["checkpoint"])}[stage]()
            why = state.stale(stage, made_from)
        except (KeyError, TypeError, AttributeError, OSError):   # a hand-edited run.json
            why = ["its record in run.json is unreadable"]
        if stage == "search":
            new_study = bool(why) and why != ["interrupted"]
            if not why and srch_rec.get("trials") != n_trials:
                why = [f"trials {srch_rec.get('trials')} → {n_trials}"]
            if why and not new_study:
                why = [f"{why[0]}: its study is resumed"]
        plan[stage] = "; ".join(why) or None
        if why:
            first_rerun = stage
    plan["report"] = "always written"
    return plan, first_rerun, new_study


def run_main(config: str | Path | None = None, *, device: str | None = None, trials: int | None = None,
             runs_dir: str | Path = "runs", seed: int = 0, fresh: bool = False) -> dict[str, Any]:
    """The whole job (see the module docstring). Progress goes to the ``latopt.run`` logger; nothing is
    printed. Returns ``{"root", "summary" (the one-screen summary), "report" (REPORT.md), "export",
    "search", "base", "stages" (what was done with each stage, and why), "seconds"}``."""

    if trials is not None and trials < 1:
        raise LatoptError(f"--trials must be >= 1, got {trials}")
    config = config_path(config or DEFAULT_CONFIG)
    overrides = {"device": device} if device else None
    cfg = load_config(config, overrides)

    dev = load_device(cfg.device)         # a wrong --device fails before any work

    close_backend(get_backend(dev))       # ... and so does a device this machine cannot drive (no GPU, no TensorRT)
    root = Path(runs_dir) / cfg.name
    if root.exists() and not root.is_dir():
        raise LatoptError(f"{root} exists and is a file; remove it or choose another --runs-dir")
    n_trials = int(trials if trials is not None else cfg.search.trials)
    lut_path = Path(cfg.lut) if cfg.lut else root / f"lut-{dev.name}.json"
    if cfg.lut and not lut_path.is_file():
        raise LatoptError(f"the config's lut {lut_path} does not exist; create it with latopt profile or remove "
                          "the lut key (the run then profiles the device itself)")
    # a given LUT, and the task's data, are checked before anything is written
    given_lut = load_lut(lut_path, model=cfg.model.name, resolution=cfg.data.resolution) if cfg.lut else None
    if given_lut is not None:
        check_blocks(given_lut, find_blocks(build_model(cfg.model.name, num_classes=10)), lut_path)
    num_classes = int(load_task(cfg).num_classes)
    fps = _Fingerprints(cfg, dev, seed, lut_path)
    state = _State(root, config.resolve(), fresh)
    if state.note:
        _LOG.warning(state.note)

    plan, first_rerun, new_study = _plan(state, fps, n_trials, fresh)
    if cfg.search.storage and new_study and plan["search"]:
        _refuse_configured_study(cfg.search.storage, cfg.name, plan["search"])   # before anything is deleted
    if fresh and root.is_dir():
        _clear(root, [config, *([lut_path] if cfg.lut else []), *([Path(dev.path)] if dev.path else [])], lut_path)
    # the outermost directory this invocation creates (runs/ too, when it is new): removed on bad input below
    new_top = next((d for d in reversed([root, *root.parents]) if not d.exists()), None)
    make_dirs(root)
    try:
        state.invocation(plan)
        reused = [s for s in STAGES[:-1] if plan[s] is None]
        rerun = [f"{s} ({plan[s]})" for s in STAGES[:-1] if plan[s] is not None]
        _LOG.info("; ".join(x for x in (f"reuse {', '.join(reused)}" if reused else "",
                                        f"run {', '.join(rerun)}" if rerun else "") if x))
        if first_rerun is not None:
            later = STAGES[STAGES.index(first_rerun):]
            _discard(root, tuple(s for s in later if s != "search" or new_study), lut_path, bool(cfg.lut))
        seed_everything(seed)
        set_threads(cfg.threads)
        t0 = time.perf_counter()
        times: dict[str, float] = {}

        # 1. base model ---------------------------------------------------------------------------------
        t = time.perf_counter()
        if plan["base"] is None:
            base = state.record("base")
            _reused(1, "base", base["checkpoint"])
        else:
            say = _stage(1, "base", f"train {cfg.model.name} on {cfg.data.task} @{cfg.data.resolution} ({plan['base']})")
            made_from = fps.base()
            state.start("base", made_from)
            metrics = train_base(cfg, root / "base", progress=True, seed=seed)
            base = {"checkpoint": str(metrics["checkpoint"]), "test_acc": metrics.get("test_acc"),
                    "val_acc": metrics.get("val_acc")}
            say(f"base test accuracy {base['test_acc']:.4f}")
            state.finish("base", base)
        times["base"] = time.perf_counter() - t

        # 2. profile ------------------------------------------------------------------------------------
        t = time.perf_counter()

        if plan["profile"] is None:
            _reused(2, "profile", str(lut_path))
            lut = given_lut or load_lut(lut_path, model=cfg.model.name, resolution=cfg.data.resolution)
        elif given_lut is not None:
            made_from = fps.profile()
            state.start("profile", made_from)
            lut = given_lut
            state.finish("profile", {"lut": str(lut_path), "given": True})
        else:
            _stage(2, "profile", f"time every block of {cfg.model.name} on {dev.name} ({dev.backend}) ({plan['profile']})")
            made_from = fps.profile()
            state.start("profile", made_from)
            lut = profile_model(cfg.model.name, dev, cfg.data.resolution, dev.batch, progress=True,
                                num_classes=num_classes)
            save_lut(lut, lut_path)
            _LOG.info(format_lut(lut))
            state.finish("profile", {"lut": str(lut_path), "profiling_s": lut.profiling_s})
        times["profile"] = time.perf_counter() - t

        # 3. search -------------------------------------------------------------------------------------
        t = time.perf_counter()
        if plan["search"] is None:
            srch = state.record("search")
            _reused(3, "search", f"trial {srch['trial']}")
        else:
            _stage(3, "search", f"{n_trials} Optuna trials over (λ_c, τ, p), accuracy vs LUT latency ({plan['search']})")
            made_from = fps.search(base["checkpoint"])
            state.start("search", made_from, trials=n_trials)
            # two 1-thread workers on a 2-core machine train far faster than one 2-thread process (one trial: one)
            workers = 2 if (os.cpu_count() or 1) >= 2 and n_trials >= 2 else 1
            res = run_search(SearchOptions(config=config, trials=n_trials, base=base["checkpoint"], lut=lut_path,
                                           seed=seed, runs_dir=runs_dir, overrides=overrides or {}, workers=workers))
            if not res.finished:
                raise LatoptError(f"the search stopped with {res.n_complete}/{n_trials} complete trials; "
                                  "rerun `latopt run` to resume it")
            _LOG.info(format_table(res.summary))
            srch = _recommended(res)
            srch["trials"] = n_trials
            state.finish("search", srch)
        times["search"] = time.perf_counter() - t

        # 4. export -------------------------------------------------------------------------------------
        t = time.perf_counter()
        export_dir = root / "export"
        if plan["export"] is None:
            _reused(4, "export", str(export_dir))
            result = read_json(export_dir / "export.json", what="export record")
        else:
            _stage(4, "export", f"ONNX, numeric gates, as-is vs folded measured in one interleaved run ({plan['export']})")
            state.start("export", fps.export(srch["checkpoint"] or base["checkpoint"]))
            ckpt = srch["checkpoint"] or base["checkpoint"]
            result = export(ckpt, cfg.device, export_dir, fmt="onnx", fold=None if srch["checkpoint"] else "none",
                            lut_path=str(lut_path), seed=seed)
            state.finish("export", {"dir": str(export_dir)})
        times["export"] = time.perf_counter() - t

        # 5. report -------------------------------------------------------------------------------------
        _stage(5, "report", f"{root / 'REPORT.md'}")
        summary = write_report(root, cfg, lut, base, srch, result, times, plan)
        write_config(cfg, root / "config.yaml")   # only now: it describes every artefact beside it
        state.start("report", {})
        state.finish("report", {"report": str(root / "REPORT.md")})
        return {"root": str(root), "summary": summary, "report": str(root / "REPORT.md"), "export": result,
                "search": srch, "base": base, "stages": plan, "seconds": time.perf_counter() - t0}
    except LatoptError:
        # bad input found only once a stage read it (e.g. a corrupt image): a run directory this invocation
        # created and in which no stage finished is removed, so that nothing half-written stays behind
        if new_top is not None and not state.finished_any():
            shutil.rmtree(new_top, ignore_errors=True)
        raise


def _recommended(res: Any) -> dict[str, Any]:

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
    idx = [b.index for b in lut.blocks]
    asis = [b.ms["none"] for b in lut.blocks]
    full = [b.ms.get("full", float("nan")) for b in lut.blocks]
    fig = Figure(figsize=(max(6, 0.45 * len(idx) + 2), 3.6))
    ax = fig.subplots()
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
    return write_figure_atomic(path, fig, dpi=110)


def write_report(root: Path, cfg: Any, lut: Any, base: dict[str, Any], srch: dict[str, Any],
                 result: dict[str, Any], times: dict[str, float], plan: dict[str, str | None] | None = None) -> str:
    """REPORT.md (+ the per-block chart and the Pareto plot) in ``root``; returns the one-screen summary.

    ``plan``: what this invocation did with each stage (None = reused, else why it was re-run)."""
    folded = {int(k): v for k, v in result.get("folded", {}).items()}
    latency_chart(lut, folded, root / "latency_blocks.png")
    pareto = Path(srch.get("pareto_png") or "")
    if pareto.is_file():
        write_bytes_atomic(root / "pareto.png", pareto.read_bytes())
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
        if "lut_speedup" in lat:
            when = f" timed {lat['lut_created']}" if lat.get("lut_created") else ""
            clock = f", {lat['clock']} clock" if lat.get("clock") else ""
            lines.append(f"  LUT prediction  {lat['lut_speedup']:.2f}× (per-block sums from the LUT{when}{clock}; "
                         f"{lat['lut_speedup_error']:+.1%} against the speed-up measured in this run)")
    if srch.get("note"):
        lines.append(f"  note            {srch['note']}")
    warning = undertrained_warning(acc_before, acc_after, (result.get("accuracy") or {}).get("samples"))
    if warning:
        lines.append(f"  warning         {warning}")
    plan = plan or {}
    lines.append(f"  stages          {'; '.join(f'{s} {_action(plan[s])}' for s in times if s in plan)}"
                 if plan else f"  stages          {', '.join(times)} ran")
    summary = "\n".join(lines)
    md = [f"# latopt run: {cfg.name}", "", "```", summary, "```", "",
          "## Per-block latency (LUT)", "", "![per-block latency](latency_blocks.png)", ""]
    if (root / "pareto.png").is_file():
        md += ["## Pareto front (search)", "", "![Pareto front](pareto.png)", ""]
    md += ["## Stages", "", "| stage | this invocation | seconds |", "|---|---|---|"]
    md += [f"| {k} | {_action(plan[k]) if k in plan else 'ran'} | {v:.1f} |" for k, v in times.items()]
    md += ["", "## Artefacts", "", f"- base checkpoint: `{base['checkpoint']}`",
           f"- search study: `{srch.get('study_dir', '')}`", f"- export: `{root / 'export'}` (see its REPORT.md)", ""]
    write_text_atomic(root / "REPORT.md", "\n".join(md))
    return summary


def _action(why: str | None) -> str:
    """What an invocation did with a stage, from its plan entry (:func:`_plan`): ``reused``, ``ran (new)``
    (no earlier result, or ``--fresh``), ``re-run: <what changed>``."""
    if why is None:
        return "reused"
    if why in (NOT_RUN_YET, "--fresh"):
        return "ran (new)" if why == NOT_RUN_YET else "ran (new: --fresh)"
    return f"re-run: {why}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}%"
