"""``run_search``: open (or resume) a study and run trials until it holds the requested number of COMPLETE ones.

The loop counts COMPLETE trials across all workers. Before each trial it fails trials whose worker
stopped sending heartbeats (Optuna's ``fail_stale_trials``; ``RetryHeartbeatStaleTrialCallback``
enqueues a retry); when the remaining budget is taken by trials other workers are running, it waits
for them to complete or go stale. So a rerun after ``kill -9`` finishes the study, and any number of
workers pointed at one storage URL stop together without losing or duplicating a trial (Optuna's
``MaxTrialsCallback`` only stops a worker once the count is reached: it neither waits for the other workers'
running trials nor prunes a trial started past the budget, so the count here is latopt's own). A worker stopped
by SIGTERM or Ctrl-C fails its running trial at once and enqueues its retry, as a stale one gets
(:func:`latopt.search._storage.abandon_trial`): the next run does not wait out the grace period for it. A given
``base`` (and ``lut``) is checked before the storage is opened; the validation split is cut into the trials'
selection part and the recommendation's confirmation part (:mod:`latopt.search._confirm`; recorded in the
study's ``confirm`` attribute, part of its identity); a study whose base trial ended
without completing (and has no retry of it waiting) gets it enqueued again, so it can still recommend.
Local workers (``workers``, :mod:`latopt.search._workers`) are started once this process has created the
study and enqueued its base trial.

The loop is the same for every method: the study's method is the config's (``method``, :mod:`latopt.methods`),
which gives the space and its sampler, the trials run by default, its checks and its part of the study's
identity, and makes each trial's candidate (:mod:`latopt.search._trial` evaluates it).
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from filelock import FileLock
from optuna.trial import TrialState

from latopt.config import RunConfig, load_config
from latopt.constants import CONFIRM_FRACTION, COSTS, OBJECTIVES, REFINE_REACH, SAMPLERS
from latopt.counts import check_count
from latopt.data import load_task, split_validation
from latopt.errors import LatoptError, VerificationError, first_line
from latopt.files.artifacts import check_name
from latopt.latency.devices import load_device
from latopt.log import get_logger, time_left
from latopt.methods import TrialContext, make_method
from latopt.methods.method import resolve_lut
from latopt.methods.sampler import FAILED_CHECK
from latopt.search._confirm import CONFIRM_LEVEL, CONFIRM_METHOD, check_power
from latopt.search._options import SearchOptions
from latopt.search._pareto import REFINES, base_accuracy, complete_trials, front_summary, write_front
from latopt.search._storage import (
    abandon_trial,
    check_existing,
    check_study_dir,
    default_storage_url,
    in_memory,
    load_existing,
    open_storage,
    open_study,
    redact,
    sqlite_file,
    storage_errors,
)
from latopt.search._trial import StudyContext, ensure_base, objective
from latopt.search._workers import default_threads, join, start, worker_options
from latopt.search.study_record import ConfirmSplit, FrontSummary, StudyAttrs, TrialAttrs
from latopt.signals import Terminated, sigterm_raises, terminating
from latopt.training.losses import check_loss_config
from latopt.training.torch_settings import set_threads, torch_threads

_LOG = get_logger("search")


@dataclass
class SearchResult:
    study_name: str
    storage: str
    study_dir: Path
    n_complete: int
    finished: bool                 # the requested number of COMPLETE trials is reached
    recommended: int | None
    front: list[int]
    summary: FrontSummary
    files: dict[str, Path]


def _check_options(o: SearchOptions, trials: int, sampler: str) -> None:
    check_count(trials, "trials")
    if sampler not in SAMPLERS:
        raise LatoptError(f"sampler {sampler!r} is unknown; choose one of {', '.join(SAMPLERS)}", param="sampler")
    if o.objective not in OBJECTIVES:
        raise LatoptError(f"objective {o.objective!r} is unknown; choose one of {', '.join(OBJECTIVES)}",
                          param="objective")
    if o.costs not in COSTS:
        raise LatoptError(f"costs {o.costs!r} is unknown; choose one of {', '.join(COSTS)}", param="costs")
    if o.max_acc_drop is not None and not (0 <= o.max_acc_drop <= 1):
        raise LatoptError(f"max_acc_drop must be in [0, 1] (a fraction of accuracy), got {o.max_acc_drop}",
                          param="max_acc_drop")
    if o.timeout is not None and not o.timeout > 0:
        raise LatoptError(f"timeout must be > 0 seconds, got {o.timeout}", param="timeout")
    check_count(o.workers, "workers")
    if o.threads is not None:
        check_count(o.threads, "threads")
    if o.workers > 1 and o.storage and in_memory(o.storage):
        raise LatoptError(f"storage {o.storage} is an in-memory database, which each of the workers would have "
                          "for itself: give a file (sqlite:///PATH) or a server URL, or use workers=1", param="storage")
    if o.measure and o.workers > 1:
        raise LatoptError("measure times candidates on this machine; with workers > 1 the other workers' "
                          "training would distort it: use workers=1 (or workers on other machines)", param="workers")
    if o.heartbeat_interval < 1 or o.grace_period <= o.heartbeat_interval:
        raise LatoptError(f"heartbeat_interval ({o.heartbeat_interval} s) must be >= 1 and below grace_period "
                          f"({o.grace_period} s)", param="heartbeat_interval")


def dp_study_name(name: str) -> str:
    """The DP's study beside the Layer Folding study ``name`` (``latopt plan``; ``runs/<name>-dp/search/``; ``--show``
    of ``name`` draws both fronts)."""
    return f"{name}-dp"


def _counts(study: optuna.Study) -> dict[TrialState, int]:
    c = dict.fromkeys(TrialState, 0)
    for t in study.get_trials(deepcopy=False):
        c[t.state] += 1
    return c


def _base_trial_lost(study: optuna.Study) -> bool:
    """The study's enqueued base trial ended without completing, and no copy of it is complete, running
    or waiting (a study whose creator has not enqueued it yet has no base trial at all: not lost)."""
    base = [t for t in study.get_trials(deepcopy=False) if TrialAttrs.of(t).base]
    live = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING)
    return bool(base) and not any(t.state in live for t in base)


def _fail_stale(study: optuna.Study) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def run_search(o: SearchOptions) -> SearchResult:
    """Run (or resume, or join) a search study until it holds the requested number of COMPLETE trials."""
    with storage_errors(o.storage):
        return _run_search(o)


def config_of(o: SearchOptions) -> RunConfig:
    """The worker's config: read once (a path or a shipped name), or handed over already read."""
    if isinstance(o.config, RunConfig):
        return o.config.with_overrides(o.overrides) if o.overrides else o.config
    return load_config(o.config, o.overrides or None)


def _run_search(o: SearchOptions) -> SearchResult:
    optuna.logging.set_verbosity(optuna.logging.ERROR)   # latopt logs trial failures itself, on one line
    cfg = config_of(o)
    s = cfg.search
    check_loss_config(cfg)   # an unknown distillation fails before any training
    method = make_method(cfg, costs=o.costs)
    space = method.space()
    trials = int(o.trials if o.trials is not None else method.default_trials())
    sampler_name = o.sampler or s.sampler
    max_drop = float(o.max_acc_drop if o.max_acc_drop is not None else s.max_acc_drop)
    _check_options(o, trials, sampler_name)
    threads = o.threads if o.threads is not None else (default_threads(o.workers) if o.workers > 1 else None)
    set_threads(threads)
    objective_key = "latency-measured" if o.measure else o.objective
    name = check_name(o.study, "study", param="study") if o.study is not None else cfg.name  # runs/<study>/
    study_dir = Path(o.study_dir) if o.study_dir is not None else Path(o.runs_dir) / name / "search"
    lut, lut_path = resolve_lut(cfg, o.lut, required=method.needs_lut() or (o.objective == "latency" and not o.measure))
    method.check(lut, trials - o.refining)
    if o.costs == "lut" and lut is None and o.progress:
        _LOG.info("no LUT found: c_l = 1 for every block (uniform costs, the paper's default)")
    device = None
    if o.measure:
        device = load_device(cfg.device)
    # the trials see the selection part of the validation split as theirs; the confirmation part is for the
    # recommendation only (latopt.search._confirm), the same for every worker of the study (seeded by --seed)
    task, confirm_part, split = split_validation(load_task(cfg), CONFIRM_FRACTION, o.seed)
    confirm_split = {**split, "level": CONFIRM_LEVEL, "method": CONFIRM_METHOD}   # the study's `confirm` attribute
    # a constraint its images cannot confirm: before any training
    check_power(ConfirmSplit.model_validate(confirm_split, strict=False).n_confirmation, max_drop)
    # a base that is not the config's unfolded base fails before any storage is touched (it would leave
    # a FAILED base trial behind)
    url = o.storage or s.storage or default_storage_url(study_dir)
    check_study_dir(study_dir, url, name)        # before anything is written there
    base = None if o.base is None else ensure_base(cfg, study_dir, o.base, task=task)
    storage = open_storage(url, heartbeat_interval=o.heartbeat_interval, grace_period=o.grace_period,
                           max_retry=o.max_retry)
    identity = {"model": cfg.model.name, "task": cfg.data.task, "resolution": int(cfg.data.resolution),
                "space": space.as_dict(), "max_acc_drop": max_drop, **method.identity(lut),
                "confirm": confirm_split}
    check_existing(storage, name, objective_key, identity)     # before training a base for a wrong study
    if base is None:   # trained once into base_dir (the DP's study beside a Layer Folding study shares its base)
        base = ensure_base(cfg, Path(o.base_dir) if o.base_dir is not None else study_dir, None, seed=o.seed,
                           progress=o.progress)
    opened = open_study(storage, name, objective_key, identity)
    check_study_dir(study_dir, url, name, study_id=storage.get_study_id_from_name(name))
    study = optuna.load_study(study_name=name, storage=storage, sampler=space.sampler(o.seed, trials, sampler_name))
    if opened.created:
        study.set_user_attr("base_checkpoint", str(base.checkpoint))
        study.set_user_attr("lut", None if lut_path is None else str(lut_path))
        study.set_user_attr("config", cfg.name if isinstance(o.config, RunConfig) else
                            str(o.config) if o.config else None)
        study.set_user_attr("method", method.name)
        study.enqueue_trial(space.base_params(), user_attrs={"base": True})
    elif _base_trial_lost(study):
        if o.progress:
            _LOG.info("the study's base trial did not complete (it failed or was pruned): enqueued it again")
        study.enqueue_trial(space.base_params(), user_attrs={"base": True})
    ctx = StudyContext(method=method, space=space, study_dir=study_dir, objective=objective_key,
                       max_acc_drop=max_drop, device=device, confirm=confirm_part,
                       trial=TrialContext(cfg=cfg, base_checkpoint=base.checkpoint, task=task, study_dir=study_dir,
                                          lut=lut, lut_path=lut_path, seed=o.seed, progress=o.progress))
    if o.progress:
        c = _counts(study)
        _LOG.info(f"study {name!r} ({method.name}) at {redact(url)}: {c[TrialState.COMPLETE]}/{trials} complete, "
                  f"{c[TrialState.RUNNING]} running, {c[TrialState.FAIL]} failed; sampler "
                  f"{getattr(study.sampler, 'name', type(study.sampler).__name__)}, objective {objective_key}")
    # what every trial shares, made once, before the workers start (on every core: they each take a share)
    with torch_threads(os.cpu_count() or 1) if o.workers > 1 else contextlib.nullcontext():
        method.prepare(ctx.trial)

    def run_trials(n: int, refining: int = 0) -> bool:
        procs = []
        if o.workers > 1:   # the tables, the study and its base trial exist: the workers load them
            procs = start(run_search, worker_options(
                o, config=cfg, study=name, study_dir=study_dir, storage=url, trials=n, sampler=sampler_name,
                max_acc_drop=max_drop, base=base.checkpoint, lut=lut_path, threads=threads, timeout=o.timeout,
                refining=refining),
                o.workers - 1)
            _LOG.debug(f"started {len(procs)} local worker(s), pids {[p.pid for p in procs]}, {threads} torch thread(s) each")
        ok = False
        try:
            with sigterm_raises(bool(procs)):   # as the CLI does: a library caller's SIGTERM also ends the workers
                done = _loop(study, functools.partial(objective, ctx), n, o)
            ok = True
        finally:
            join(procs, ok=ok)
        return done

    finished = run_trials(trials)
    if finished and o.summary and method.refinements():   # the leading process (not a worker) refines
        refining = refine_trials(study, method.refinements(), max_drop, study_dir)
        if refining:
            if o.progress:
                _LOG.info(f"fine-tuning {len(refining)} candidate(s) longer (trials {', '.join(map(str, refining))} "
                          "again): the fastest within reach of the constraint")
            finished = run_trials(trials + len(refining), len(refining))
    summary = front_summary(study, max_drop)
    files = write_front(study, study_dir) if o.summary else {}
    c = _counts(study)
    return SearchResult(study_name=name, storage=url, study_dir=study_dir, n_complete=c[TrialState.COMPLETE],
                        finished=finished, recommended=summary.recommended, front=summary.front, summary=summary,
                        files=files)


def refine_trials(study: optuna.Study, k: int, max_drop: float, study_dir: Path) -> list[int]:
    """The trials refined (made again with a longer fine-tune, :meth:`latopt.methods.Method.refine`): those
    already enqueued, plus, up to ``k`` in all, the fastest COMPLETE candidates whose drop on the selection part
    is within ``REFINE_REACH`` times the constraint, each enqueued once with its parameters (chosen on the
    selection part only; the recommendation confirms a refined candidate in place of its first version)."""
    with FileLock(str(study_dir / ".refine.lock")):   # local workers and a second `latopt search` enqueue once
        trials = study.get_trials(deepcopy=False)
        refined = [a.refines for t in trials if (a := TrialAttrs.of(t)).refines is not None and t.state != TrialState.FAIL]
        base_acc = base_accuracy(study)
        if base_acc is None:
            return refined
        reach = [t for t in complete_trials(study) if not (a := TrialAttrs.of(t)).base and a.refines is None
                 and base_acc - t.values[0] <= REFINE_REACH * max_drop + 1e-12 and t.number not in refined]
        for t in sorted(reach, key=lambda t: (t.values[1], -t.values[0], t.number))[:max(0, k - len(refined))]:
            study.enqueue_trial(t.params, user_attrs={REFINES: t.number}, skip_if_exists=False)
            refined.append(t.number)
        return refined


@dataclass
class _LastTrial:
    """What this worker's last trial left for the loop: the numeric check it failed, whether it was the base trial
    (not timed), and its storage id while it runs (failed at once when the process is told to stop)."""

    error: VerificationError | None = None
    base: bool = False
    trial: int | None = None


def _loop(study: optuna.Study, func: Any, trials: int, o: SearchOptions) -> bool:
    deadline = None if o.timeout is None else time.monotonic() + o.timeout
    failures = 0
    waiting_note = False
    last = _LastTrial()
    took: list[float] = []   # seconds of each trial this worker ran: the estimate of the time left

    def run_one(trial: optuna.Trial) -> Any:
        last.trial = trial._trial_id
        # Two workers can pass the budget check at the same moment; the one whose trial came second
        # sees the budget taken by lower-numbered live trials and prunes its own before any work.
        ahead = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
                 if t.number < trial.number]
        if len(ahead) >= trials:
            trial.set_user_attr("surplus", True)
            raise optuna.TrialPruned(f"surplus: {len(ahead)} earlier trials already fill the budget of {trials}")
        try:
            out = func(trial)
            last.base = TrialAttrs.of(trial).base   # the base trial only evaluates: not timed
            return out
        except VerificationError as e:
            last.error = e
            trial.set_user_attr(FAILED_CHECK, first_line(e))
            raise

    while True:
        _fail_stale(study)
        c = _counts(study)
        if c[TrialState.COMPLETE] >= trials:
            return True
        if deadline is not None and time.monotonic() >= deadline:
            if o.progress:
                _LOG.info(f"timeout reached with {c[TrialState.COMPLETE]}/{trials} complete; "
                          "rerun the same search to continue")
            return False
        if c[TrialState.COMPLETE] + c[TrialState.RUNNING] >= trials:
            # The rest of the budget is being run by other workers (or by a dead one, until it goes stale).
            if o.progress and not waiting_note:
                _LOG.info(f"waiting for {c[TrialState.RUNNING]} running trial(s) of other workers")
                waiting_note = True
            time.sleep(o.poll_s)
            continue
        waiting_note = False
        last = _LastTrial()
        t0 = time.monotonic()
        try:
            study.optimize(run_one, n_trials=1, catch=(VerificationError,), gc_after_trial=True)
        except BaseException as e:
            # SIGTERM or Ctrl-C (or what a SIGTERM made of an import it interrupted): this process's trial is failed
            # now and its retry enqueued, as a dead worker's is once its heartbeat goes stale; left RUNNING, it
            # would hold up the next run for the grace period
            if not isinstance(e, (Terminated, KeyboardInterrupt)) and not terminating():
                raise
            if last.trial is not None:
                abandon_trial(study, last.trial)
            if not isinstance(e, (Terminated, KeyboardInterrupt)):
                raise Terminated() from e
            raise
        if not last.base:
            took.append(time.monotonic() - t0)
        if o.progress and took:
            done = _counts(study)[TrialState.COMPLETE]
            if done < trials:
                _LOG.info(f"{done}/{trials} trials complete; about {time_left(took, -(-(trials - done) // max(1, o.workers)))} left "
                          f"(this worker's mean trial: {sum(took) / len(took):.0f} s)")
        if last.error is None:
            failures = 0
            continue
        failures += 1
        _LOG.warning(f"trial failed its numeric check: {last.error}")
        if failures >= 3:
            raise LatoptError(f"3 trials in a row failed their numeric checks, the last: {last.error}")


def show_front(name: str, *, storage: str | None = None, runs_dir: str | Path = "runs", out: str | Path | None = None,
               max_acc_drop: float | None = None) -> tuple[FrontSummary, dict[str, Path]]:
    """The front of an existing study (``runs/<name>/search/study.db`` unless ``storage`` is given): its
    summary, and ``pareto.{json,csv,png}`` written to ``out`` (default: the study directory). The DP's study
    beside it (``<name>-dp``, in ``storage`` or its own default file), when there is one, is summarised and
    drawn with it."""
    with storage_errors(storage):
        return _show_front(name, storage=storage, runs_dir=runs_dir, out=out, max_acc_drop=max_acc_drop)


def _show_front(name: str, *, storage: str | None, runs_dir: str | Path, out: str | Path | None,
                max_acc_drop: float | None) -> tuple[FrontSummary, dict[str, Path]]:
    study_dir = Path(runs_dir) / check_name(name, "study", param="study") / "search"
    url = storage or default_storage_url(study_dir)
    db = sqlite_file(url)
    if db is not None and not db.is_file():
        raise LatoptError(f"no study database at {db}; run the search first or give its storage URL", param="storage")
    study = load_existing(open_storage(url, heartbeat_interval=None), name)
    if StudyAttrs.of(study).schema_ is None:
        raise LatoptError(f"study {name!r} was not created by latopt search")
    others = [o for o in [_companion(name, storage=storage, runs_dir=runs_dir)] if o is not None]
    files = write_front(study, Path(out) if out else study_dir, max_acc_drop, others)
    return front_summary(study, max_acc_drop, others), files


def _companion(name: str, *, storage: str | None, runs_dir: str | Path) -> optuna.Study | None:
    """The DP's study of ``name`` (``latopt plan``'s), when it exists."""
    dp_name = dp_study_name(name)
    url = storage or default_storage_url(Path(runs_dir) / dp_name / "search")
    db = sqlite_file(url)
    if db is not None and not db.is_file():
        return None
    st = open_storage(url, heartbeat_interval=None)
    if dp_name not in optuna.get_all_study_names(st):
        return None
    study = optuna.load_study(study_name=dp_name, storage=st)
    return study if StudyAttrs.of(study).schema_ is not None else None
