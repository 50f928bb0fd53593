"""The stages of ``latopt run``, declared: what each is made from, what it writes, how it runs, how it is reused.

A :class:`Stage` is data plus small functions of the run's in-memory state (:class:`Job`): its ``name``; the
earlier stages whose results it reads (``inputs``); its fingerprint (``made_from``, see :mod:`latopt.run`);
the paths it writes, removed before it is re-made (``outputs``); the progress line when it runs (``what``);
``make(job, say) -> (record, result)``, the work (``record`` is what run.json keeps, ``result`` what later
stages read from ``job.results``); ``reuse(job, record) -> (note, result)`` for a stage whose record is
still valid. :data:`STAGES` lists them in order; :func:`latopt.run.pipeline.run_main` walks the list.

=========  ===================================================================================
stage      result (``job.results[name]``)
=========  ===================================================================================
base       its record, :class:`latopt.run.run_record.BaseStage`: checkpoint, test and validation accuracy
profile    the LUT (profiled on the device, or the config's ``lut``)
search     its record, :class:`latopt.run.run_record.SearchPick`: the recommended trial, its checkpoint (None:
           the base), fold set, params, the constraint and its confirmation (held-out validation images), the
           faster trials rejected
export     the export record (:class:`latopt.export.ExportRecord`, export.json; :func:`latopt.export.export`)
report     the one-screen summary (REPORT.md, the charts and config.yaml written)
=========  ===================================================================================
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from latopt import __version__
from latopt.config import dump_config, write_config
from latopt.errors import LatoptError
from latopt.export import CheckOptions, ExportRecord, ShipOptions, export, read_export_record
from latopt.files.artifacts import file_sha256
from latopt.latency.lut import load_lut, save_lut
from latopt.latency.profiler import format_lut, profile_model
from latopt.log import get_logger
from latopt.methods import Method
from latopt.run.run_record import BaseStage, SearchPick, StageRecord
from latopt.run.run_report import write_report
from latopt.run.state import REPORT_FILES, RunState
from latopt.search import (
    CONFIRM_FRACTION,
    CONFIRM_LEVEL,
    CONFIRM_METHOD,
    SearchOptions,
    SearchResult,
    format_table,
    run_search,
)
from latopt.search.study_record import TrialAttrs
from latopt.training.base_training import train_base

_LOG = get_logger("run")
# a device's fingerprint is its profile's fields with these, the backends' keys of one flat record before each
# backend had a record of its own: a profile's fingerprint is what it was, and a run started before resumes
LEGACY_DEVICE_KEYS: dict[str, Any] = {"provider": None, "cuda_device": None, "expected_gpu": None,
                                      "workspace_mib": None, "count": None, "options": {}}
Say = Callable[[str], None]


@dataclass
class Job:
    """What a ``latopt run`` invocation holds in memory: its inputs, run.json, the plan and the stages' results."""

    cfg: Any
    config: Path                      # the config file
    dev: Any                          # the device profile
    root: Path                        # runs/<name>/
    runs_dir: Path
    seed: int
    n_trials: int
    method: Method                    # the search stage's: the config's ``method``, made for cfg
    lut_path: Path                    # the config's lut, else runs/<name>/lut-<device>.json
    given_lut: Any                    # the config's LUT, loaded (None: the run profiles the device)
    num_classes: int
    state: RunState
    plan: dict[str, str | None] = field(default_factory=dict)   # {stage: None (reuse) | why it is run}
    results: dict[str, Any] = field(default_factory=dict)
    times: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.sections = dump_config(self.cfg)
        # the keys every profile had before each backend had its record (so a run started before resumes)
        device = {**LEGACY_DEVICE_KEYS, **self.dev.model_dump(exclude={"path"})}
        self.device_sha = hashlib.sha256(json.dumps(device, sort_keys=True, default=str).encode()).hexdigest()

    def config_sections(self, *names: str) -> dict[str, Any]:
        return {f"config section {n}": self.sections[n] for n in names}

    # the fingerprints read run.json's records: they are computed for the plan, before any stage runs
    def base_checkpoint(self) -> str:
        """The base checkpoint run.json records (AttributeError when its record is not a :class:`BaseStage`)."""
        return BaseStage.read(self.state.record("base")).checkpoint  # type: ignore[union-attr]

    def exported_checkpoint(self) -> str:
        """What the export stage ships, as run.json records it: the recommended trial's fold, else the base."""
        pick = SearchPick.read(self.state.record("search"))
        return pick.checkpoint or self.base_checkpoint()  # type: ignore[union-attr]


@dataclass(frozen=True)
class Stage:
    name: str
    inputs: tuple[str, ...]
    made_from: Callable[[Job], dict[str, Any]]
    outputs: Callable[[Job], list[Path]]
    what: Callable[[Job], str | None]          # None: no progress line
    make: Callable[[Job, Say], tuple[dict[str, Any], Any]]
    reuse: Callable[[Job, dict[str, Any]], tuple[str, Any]] | None = None   # None: always made
    start_info: Callable[[Job], dict[str, Any]] = lambda job: {}            # recorded when it starts
    kind: type[StageRecord] | None = None   # its record's type: a record in run.json that is not one is re-made


# 1. base ----------------------------------------------------------------------------------------------
def _base_made_from(job: Job) -> dict[str, Any]:
    weights = job.cfg.model.weights   # its content, not its path: a checkpoint replaced in place is new
    return {**job.config_sections("model", "data", "train"), "seed": job.seed, "latopt version": __version__,
            **({"weights sha256": file_sha256(weights)} if weights is not None and Path(weights).is_file() else {}),
            # the base keeps its best epoch on the selection part of the validation split (latopt.training.base_training)
            "best epoch chosen on": f"selection part, {1 - CONFIRM_FRACTION:g} of the validation split"}


def _base_make(job: Job, say: Say) -> tuple[dict[str, Any], BaseStage]:
    m = train_base(job.cfg, job.root / "base", progress=True, seed=job.seed).metrics
    rec = BaseStage(checkpoint=m.checkpoint, test_acc=m.test_acc, val_acc=m.val_acc)
    say(f"base test accuracy {rec.test_acc:.4f}")
    return rec.to_json(), rec


def _base_reuse(job: Job, rec: dict[str, Any]) -> tuple[str, BaseStage]:
    base = BaseStage.read(rec)
    assert base is not None   # plan_stages re-makes a stage whose record is not its kind
    return base.checkpoint, base


BASE = Stage(
    "base", (), _base_made_from, lambda job: [job.root / "base"],
    lambda job: f"train {job.cfg.model.name} on {job.cfg.data.task} @{job.cfg.data.resolution}",
    _base_make, reuse=_base_reuse, kind=BaseStage)


# 2. profile -------------------------------------------------------------------------------------------
def _profile_made_from(job: Job) -> dict[str, Any]:
    fp = {**job.config_sections("model", "data"), "device profile": job.device_sha, "latopt version": __version__}
    if job.given_lut is None:   # the variants the method needs timed (a given LUT is the user's: checked by the search)
        fp["variants"] = list(job.method.lut_variants())
    if job.given_lut is not None:        # else the LUT is runs/<name>/lut-<device>.json, named by the profile
        fp |= {"given LUT": str(job.lut_path), "given LUT SHA-256": file_sha256(job.lut_path)}
    return fp


def _profile_make(job: Job, say: Say) -> tuple[dict[str, Any], Any]:
    if job.given_lut is not None:
        return {"lut": str(job.lut_path), "given": True}, job.given_lut
    cfg = job.cfg
    lut = profile_model(cfg.model.name, job.dev, cfg.data.resolution, job.dev.batch,
                        variants=job.method.lut_variants(), progress=True, num_classes=job.num_classes)
    save_lut(lut, job.lut_path)
    _LOG.info(format_lut(lut))
    return {"lut": str(job.lut_path), "profiling_s": lut.profiling_s}, lut


def _profile_reuse(job: Job, rec: dict[str, Any]) -> tuple[str, Any]:
    lut = job.given_lut or load_lut(job.lut_path, model=job.cfg.model.name, resolution=job.cfg.data.resolution)
    return str(job.lut_path), lut


PROFILE = Stage(
    "profile", (), _profile_made_from, lambda job: [] if job.given_lut is not None else [job.lut_path],
    lambda job: None if job.given_lut is not None else
    f"time every block of {job.cfg.model.name} on {job.dev.name} ({job.dev.backend})",
    _profile_make, reuse=_profile_reuse)


# 3. search --------------------------------------------------------------------------------------------
def _search_made_from(job: Job) -> dict[str, Any]:
    """What the search reads: its method's part of the config (:meth:`latopt.methods.Method.made_from`), the
    constraint and the study's storage, the base, the LUT and the seed (the number of trials is the plan's: more
    trials resume the study)."""
    return {**job.method.made_from(), "search.max_acc_drop": job.cfg.search.max_acc_drop,
            "search.storage": job.cfg.search.storage,
            "base checkpoint": file_sha256(job.base_checkpoint()),
            "LUT": file_sha256(job.lut_path), "seed": job.seed, "latopt version": __version__,
            # a search of a latopt that chose and confirmed on the same validation images is re-run
            "validation": f"selection/confirmation {1 - CONFIRM_FRACTION:g}/{CONFIRM_FRACTION:g}, "
                          f"{CONFIRM_METHOD} at {CONFIRM_LEVEL:g}"}


def _search_make(job: Job, say: Say) -> tuple[dict[str, Any], SearchPick]:
    n = job.n_trials
    # two 1-thread workers on a 2-core machine train far faster than one 2-thread process (one trial: one)
    workers = 2 if (os.cpu_count() or 1) >= 2 and n >= 2 else 1
    res = run_search(SearchOptions(config=job.cfg, trials=n, base=job.base_checkpoint(), lut=job.lut_path,
                                   seed=job.seed, runs_dir=job.runs_dir, workers=workers))
    if not res.finished:
        raise LatoptError(f"the search stopped with {res.n_complete}/{n} complete trials; "
                          "rerun `latopt run` to resume it")
    _LOG.info(format_table(res.summary))
    rec = recommended(res, trials=n)
    return rec.to_json(), rec


def recommended(res: SearchResult, trials: int | None = None) -> SearchPick:
    """The search stage's record: the study's recommended trial (:class:`latopt.search.SearchResult`)."""
    summary = res.summary
    chosen = summary.recommendation
    note = None if chosen is None else chosen.note
    study = optuna.load_study(study_name=res.study_name, storage=res.storage)
    refined = sorted(a.refines for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                     if (a := TrialAttrs.of(t)).refines is not None)
    # what the summary prints about the accuracy constraint: the split, the confirmation, the rejected trials
    judged: dict[str, Any] = {
        "max_acc_drop": summary.max_acc_drop, "confirm_split": summary.confirm_split,
        "confirm": None if chosen is None else chosen.confirm, "rejected": [] if chosen is None else chosen.rejected,
        "pareto_png": str(res.files.get("png", "")), "study_dir": str(res.study_dir), "trials": trials,
        "refined": refined}
    if res.recommended is None:
        return SearchPick(trial=None, checkpoint=None, note=note or "no trial met the accuracy constraint", **judged)
    trial = next(t for t in study.trials if t.number == res.recommended)
    a = TrialAttrs.of(trial)
    return SearchPick.model_validate(
        {"trial": res.recommended, "checkpoint": None if a.base else a.checkpoint, "fold_set": a.fold_set,
         "val_acc": a.val_acc, "base_acc": a.base_acc, "latency_ms": a.latency_ms, "params": dict(trial.params),
         "row": summary.row(res.recommended), "note": note, **judged}, strict=False)


def _search_reuse(job: Job, rec: dict[str, Any]) -> tuple[str, SearchPick]:
    pick = SearchPick.read(rec)
    assert pick is not None   # plan_stages re-makes a stage whose record is not its kind
    return f"trial {pick.trial}", pick


SEARCH = Stage(
    "search", ("base", "profile"), _search_made_from, lambda job: [job.root / "search"],
    lambda job: f"{job.n_trials} trials of {job.method.does}",
    _search_make, reuse=_search_reuse, start_info=lambda job: {"trials": job.n_trials}, kind=SearchPick)


# 4. export --------------------------------------------------------------------------------------------
def _export_made_from(job: Job) -> dict[str, Any]:
    return {"exported checkpoint": file_sha256(job.exported_checkpoint()), "LUT": file_sha256(job.lut_path),
            "device profile": job.device_sha, "seed": job.seed, "latopt version": __version__}


def _export_make(job: Job, say: Say) -> tuple[dict[str, Any], ExportRecord]:
    folded = job.results["search"].checkpoint   # None: the recommendation is the base itself
    result = export(folded or job.results["base"].checkpoint, job.cfg.device, job.root / "export", fmt="onnx",
                    ship=ShipOptions(fold=None if folded else "none", lut=job.lut_path),
                    checks=CheckOptions(seed=job.seed))
    return {"dir": str(job.root / "export")}, result


EXPORT = Stage(
    "export", ("base", "search"), _export_made_from, lambda job: [job.root / "export"],
    lambda job: "ONNX, numeric gates, as-is vs folded measured in one interleaved run", _export_make,
    reuse=lambda job, rec: (str(job.root / "export"), read_export_record(job.root / "export" / "export.json")))


# 5. report --------------------------------------------------------------------------------------------
def _report_make(job: Job, say: Say) -> tuple[dict[str, Any], Any]:
    r = job.results
    summary = write_report(job.root, job.cfg, r["profile"], r["base"], r["search"], r["export"], job.times, job.plan)
    write_config(job.cfg, job.root / "config.yaml")   # only now: it describes every artefact beside it
    return {"report": str(job.root / "REPORT.md")}, summary


REPORT = Stage(
    "report", ("base", "profile", "search", "export"), lambda job: {},
    lambda job: [job.root / f for f in REPORT_FILES], lambda job: str(job.root / "REPORT.md"), _report_make)

def check_order(stages: tuple[Stage, ...]) -> tuple[Stage, ...]:
    """``stages`` when each one's ``inputs`` are stages before it (the pipeline runs them in this order and
    reruns everything after the first stage it remakes); else the first stage that reads a later one."""
    seen: set[str] = set()
    for s in stages:
        late = [i for i in s.inputs if i not in seen]
        if late:
            raise ValueError(f"stage {s.name!r} reads {late} before they are made; order the stages")
        seen.add(s.name)
    return stages


STAGES: tuple[Stage, ...] = check_order((BASE, PROFILE, SEARCH, EXPORT, REPORT))
