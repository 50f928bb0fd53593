"""``latopt run``'s driver: check the inputs, plan what to reuse, walk the declared stages, clean up on bad input.

Public API::

    run_main(config=None, *, device=None, trials=None, runs_dir="runs", seed=0, fresh=False) -> RunResult
    plan_stages(job, fresh) -> (plan, first_rerun, new_study)   what to do with each stage, and why
    DEFAULT_CONFIG
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import optuna

from latopt.config import config_path, load_config
from latopt.constants import CONFIRM_FRACTION
from latopt.counts import check_count
from latopt.data import load_task, split_validation
from latopt.errors import LatoptError
from latopt.export import ExportRecord
from latopt.files.artifacts import make_dirs
from latopt.latency.backends import close_backend, get_backend
from latopt.latency.devices import load_device
from latopt.latency.lut import check_blocks, load_lut
from latopt.log import get_logger
from latopt.methods import make_method
from latopt.nets.blocks import find_blocks
from latopt.nets.models import build_model
from latopt.run.run_record import BaseStage, SearchPick
from latopt.run.stages import STAGES, Job, Stage
from latopt.run.state import NOT_RUN_YET, RunState, clear, remove_path
from latopt.search import check_power, open_storage, redact
from latopt.training.loop import seed_everything
from latopt.training.losses import check_loss_config
from latopt.training.torch_settings import set_threads

_LOG = get_logger("run")
DEFAULT_CONFIG = "quickstart"  # a shipped config (latopt/configs/), found from any working directory
NAMES = tuple(s.name for s in STAGES)


def plan_stages(job: Job, fresh: bool) -> tuple[dict[str, str | None], str | None, bool]:
    """What to do with each stage: ``{stage: None (reuse) | why it is run}``, the first stage that is run
    (every later one is run too), and whether the search starts a new study (else it resumes its own)."""
    state = job.state
    plan: dict[str, str | None] = {}
    new_study = True
    first_rerun: str | None = None
    for stage in STAGES:
        name = stage.name
        if stage.reuse is None:
            plan[name] = "always written"
            continue
        if fresh:
            plan[name] = "--fresh"
            continue
        if first_rerun is not None:
            plan[name] = NOT_RUN_YET if state.record(name) is None else f"{first_rerun} is re-run"
            continue
        try:
            why = state.stale(name, stage.made_from(job))
            if not why and stage.kind is not None and stage.kind.read(state.record(name)) is None:
                raise TypeError(f"{name}'s record is not a {stage.kind.__name__}")
        except (KeyError, TypeError, AttributeError, OSError):   # a hand-edited run.json, an older latopt's
            why = ["its record in run.json is unreadable"]
        if name == "search":   # a search made from the same inputs resumes its study, with more trials too
            new_study = bool(why) and why != ["interrupted"]
            pick = SearchPick.read(state.record("search"))
            trials = None if pick is None else pick.trials
            if not why and trials != job.n_trials:
                why = [f"trials {trials} → {job.n_trials}"]
            if why and not new_study:
                why = [f"{why[0]}: its study is resumed"]
        plan[name] = "; ".join(why) or None
        if why:
            first_rerun = name
    return plan, first_rerun, new_study


def _refuse_configured_study(url: str, name: str, why: str) -> None:
    if name in optuna.get_all_study_names(open_storage(url, heartbeat_interval=None)):
        raise LatoptError(
            f"study {name!r} in the configured storage {redact(url)} holds trials made from other inputs ({why}); "
            f"latopt never deletes a study in a storage you configured: delete it (optuna delete-study "
            f"--study-name {name} --storage URL) or give the run another name")


def _announce(i: int, name: str, what: str) -> Callable[[str], None]:
    _LOG.info(f"stage {i}/{len(STAGES)}: {name} — {what}")
    return lambda msg: _LOG.info(f"  {msg}")


def _run_stage(job: Job, i: int, stage: Stage) -> None:
    """Reuse or make one stage (its plan entry says which), record it in run.json, keep its result."""
    why = job.plan[stage.name]
    if why is None and stage.reuse is not None:
        note, job.results[stage.name] = stage.reuse(job, job.state.record(stage.name))  # type: ignore[arg-type]
        _LOG.info(f"stage {i}/{len(STAGES)}: {stage.name} — reused ({note})")
        return
    what = stage.what(job)
    say = (_announce(i, stage.name, what if stage.reuse is None else f"{what} ({why})") if what is not None
           else (lambda msg: None))
    job.state.start(stage.name, stage.made_from(job), **stage.start_info(job))
    record, job.results[stage.name] = stage.make(job, say)
    job.state.finish(stage.name, record)


@dataclass(frozen=True)
class RunResult:
    """What :func:`run_main` did: the run's directory, the one-screen summary, REPORT.md's path, the export record,
    the search's and the base's stage records, what was done with each stage and why, and the seconds taken."""

    root: Path
    summary: str
    report: Path
    export: ExportRecord
    search: SearchPick
    base: BaseStage
    stages: dict[str, str | None]
    seconds: float


def run_main(config: str | Path | None = None, *, device: str | None = None, trials: int | None = None,
             runs_dir: str | Path = "runs", seed: int = 0, fresh: bool = False) -> RunResult:
    """The whole job (see :mod:`latopt.run`). Progress goes to the ``latopt.run`` logger; nothing is
    printed. Returns a :class:`RunResult`."""
    if trials is not None:   # before any work: a bad count is refused before the base trains
        check_count(trials, "trials", param="trials")
    config = config_path(config or DEFAULT_CONFIG)
    overrides = {"device": device} if device else None
    cfg = load_config(config, overrides)
    dev = load_device(cfg.device)         # a wrong device fails before any work
    close_backend(get_backend(dev))       # ... and so does a device this machine cannot drive (no GPU, no TensorRT)
    root = Path(runs_dir) / cfg.name
    if root.exists() and not root.is_dir():
        raise LatoptError(f"{root} exists and is a file; remove it or choose another runs_dir", param="runs_dir")
    lut_path = Path(cfg.lut) if cfg.lut else root / f"lut-{dev.name}.json"
    if cfg.lut and not lut_path.is_file():
        raise LatoptError(f"the config's lut {lut_path} does not exist; create it with latopt profile or remove "
                          "the lut key (the run then profiles the device itself)")
    # a given LUT, and the task's data, are checked before anything is written
    given_lut = load_lut(lut_path, model=cfg.model.name, resolution=cfg.data.resolution) if cfg.lut else None
    if given_lut is not None:
        check_blocks(given_lut, find_blocks(build_model(cfg.model.name, num_classes=10)), lut_path)
    method = make_method(cfg)             # an unknown method or distillation fails here, before any work
    check_loss_config(cfg)
    task = load_task(cfg)
    # a constraint the confirmation part cannot confirm even for an unchanged network: before any training
    check_power(int(split_validation(task, CONFIRM_FRACTION, seed)[2]["n_confirmation"]), cfg.search.max_acc_drop)
    job = Job(cfg=cfg, config=config, dev=dev, root=root, runs_dir=Path(runs_dir), seed=seed,
              n_trials=int(trials if trials is not None else method.default_trials()), method=method,
              lut_path=lut_path, given_lut=given_lut, num_classes=int(task.num_classes),
              state=RunState(root, config.resolve(), fresh, NAMES))
    if job.state.note:
        _LOG.warning(job.state.note)

    job.plan, first_rerun, new_study = plan_stages(job, fresh)
    if cfg.search.storage and new_study and job.plan["search"]:
        _refuse_configured_study(cfg.search.storage, cfg.name, job.plan["search"])   # before anything is deleted
    if fresh and root.is_dir():
        clear(root, [config, *([lut_path] if cfg.lut else []), *([Path(dev.path)] if dev.path else [])], lut_path)
    # the outermost directory this invocation creates (runs/ too, when it is new): removed on bad input below
    new_top = next((d for d in reversed([root, *root.parents]) if not d.exists()), None)
    make_dirs(root)
    try:
        job.state.invocation(job.plan)
        kept = [s.name for s in STAGES if s.reuse is not None]
        reused = [s for s in kept if job.plan[s] is None]
        rerun = [f"{s} ({job.plan[s]})" for s in kept if job.plan[s] is not None]
        _LOG.info("; ".join(x for x in (f"reuse {', '.join(reused)}" if reused else "",
                                        f"run {', '.join(rerun)}" if rerun else "") if x))
        if first_rerun is not None:   # what the re-made stages wrote: a resumed study stays
            for stage in STAGES[NAMES.index(first_rerun):]:
                if stage.name != "search" or new_study:
                    for path in stage.outputs(job):
                        remove_path(path)
        seed_everything(seed)
        set_threads(cfg.threads)
        t0 = time.perf_counter()
        for i, stage in enumerate(STAGES, 1):
            t = time.perf_counter()
            _run_stage(job, i, stage)
            if stage.reuse is not None:   # the report's stage table times the stages before it
                job.times[stage.name] = time.perf_counter() - t
        r = job.results
        return RunResult(root=root, summary=r["report"], report=root / "REPORT.md", export=r["export"],
                         search=r["search"], base=r["base"], stages=dict(job.plan), seconds=time.perf_counter() - t0)
    except LatoptError:
        # bad input found only once a stage read it (e.g. a corrupt image): a run directory this invocation
        # created and in which no stage finished is removed, so that nothing half-written stays behind
        if new_top is not None and not job.state.finished_any():
            shutil.rmtree(new_top, ignore_errors=True)
        raise
