"""Optuna storage and study handling: default SQLite file, any SQLAlchemy URL, heartbeats, resume.

A worker is just ``latopt search`` pointed at the same storage URL and study name. The study is
created once (the creator stores what it optimises in the study's user attributes and enqueues the
base trial); every later worker or rerun loads it and checks that it optimises the same objectives.
A search directory records which study of which storage its trial directories belong to
(:func:`check_study_dir`). URLs are parsed and redacted by SQLAlchemy (:func:`sqlalchemy.engine.make_url`).
"""

from __future__ import annotations

import contextlib
import copy
import time
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import optuna
import sqlalchemy.exc
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState
from sqlalchemy.engine import URL, make_url

from latopt.errors import LatoptError, first_line
from latopt.files.artifacts import OutputError, make_dirs, write_json_atomic
from latopt.log import get_logger
from latopt.methods.sampler import FAILED_CHECK
from latopt.search.study_record import StudyDirRecord

STUDY_SCHEMA = "latopt.study/1"
DEFAULT_HEARTBEAT_S = 30
DEFAULT_GRACE_S = 120
_LOG = get_logger("search")

# What each --objective optimises: (metric names, directions). Stored in the study's user attributes.
Direction = Literal["minimize", "maximize"]
STUDY_OBJECTIVES: dict[str, tuple[tuple[str, str], tuple[Direction, Direction]]] = {
    "latency": (("val_acc", "latency_ms"), ("maximize", "minimize")),
    # measured candidate ms / base ms, both timed in one interleaved run (ratios are comparable across
    # trials; absolute times from different runs are not)
    "latency-measured": (("val_acc", "measured_ratio"), ("maximize", "minimize")),
    "depth": (("val_acc", "nonlinear_layers"), ("maximize", "minimize")),
}


def default_storage_url(study_dir: Path) -> str:
    return f"sqlite:///{(Path(study_dir) / 'study.db').resolve()}"


def _parse(url: str) -> URL | None:
    """The URL as SQLAlchemy reads it; None when it is not one (:func:`open_storage` says what is wrong)."""
    try:
        return make_url(url)
    except sqlalchemy.exc.ArgumentError:
        return None


def redact(url: str) -> str:
    """The URL without its password (for messages); one without a password (or that SQLAlchemy cannot read,
    so has no password it would use) as it was given."""
    u = _parse(url)
    return url if u is None or u.password is None else u.render_as_string(hide_password=True)


def in_memory(url: str) -> bool:
    """The URL names an SQLite database in memory (each process that opens it has its own)."""
    u = _parse(url)
    return u is not None and u.get_backend_name() == "sqlite" and u.database in (None, "", ":memory:")


def sqlite_file(url: str) -> Path | None:
    """The database file of an SQLite URL; None for another database, one in memory or a malformed URL."""
    u = _parse(url)
    if u is None or u.get_backend_name() != "sqlite" or in_memory(url):
        return None
    return Path(str(u.database))


# what to do when the driver SQLAlchemy picks for a URL is missing (SQLAlchemy 2.1 picks psycopg 3 for a plain
# postgresql:// URL, and MySQLdb for mysql://)
DRIVER_HINTS = {
    "psycopg": "write postgresql+psycopg2://... to use psycopg2 (pip install 'latopt[postgres]'), or pip install "
               "'psycopg[binary]'",
    "psycopg2": "pip install 'latopt[postgres]' (psycopg2-binary)",
    "MySQLdb": "write mysql+pymysql://... and pip install pymysql, or pip install mysqlclient",
    "pymysql": "pip install pymysql",
}


def open_storage(url: str, *, heartbeat_interval: int | None = DEFAULT_HEARTBEAT_S,
                 grace_period: int | None = DEFAULT_GRACE_S, max_retry: int | None = 3) -> RDBStorage:
    """An :class:`optuna.storages.RDBStorage` with heartbeats; dead workers' trials are failed and retried.

    Raises :class:`LatoptError` (one line) when the URL is malformed, its driver is missing or the
    server cannot be reached.
    """

    engine_kwargs: dict[str, Any] = {"pool_pre_ping": True}
    u = _parse(url)
    backend = None if u is None else u.get_backend_name()
    if backend == "sqlite":
        engine_kwargs["connect_args"] = {"timeout": 60}
        db = sqlite_file(url)
        if db is not None:
            try:
                make_dirs(db.parent)
            except OutputError as e:
                raise LatoptError(f"storage URL {redact(url)!r}: cannot create its directory ({e.reason} at "
                                  f"{e.path}); give another path", param="storage") from None
    elif backend == "postgresql":
        engine_kwargs["connect_args"] = {"connect_timeout": 10}
    hb: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if heartbeat_interval:
            hb = {"heartbeat_interval": int(heartbeat_interval),
                  "grace_period": int(grace_period or 2 * heartbeat_interval),
                  "heartbeat_stale_trial_callback": RetryHeartbeatStaleTrialCallback(max_retry=max_retry)}
    for attempt in range(6):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return RDBStorage(url, engine_kwargs=engine_kwargs, **hb)
        except sqlalchemy.exc.ArgumentError as e:
            raise LatoptError(f"storage URL {redact(url)!r} is not a valid SQLAlchemy URL ({first_line(e)})",
                              param="storage") from None
        except ImportError as e:
            module = getattr(e, "name", None) or getattr(e.__cause__, "name", None) or first_line(e)
            raise LatoptError(f"storage URL {redact(url)!r} needs the database driver module {module!r}, which is "
                              f"not installed; {DRIVER_HINTS.get(str(module), 'install it, or name an installed driver in the URL (dialect+driver://)')}",
                              param="storage") from None
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError, sqlalchemy.exc.OperationalError) as e:
            # Workers started together on other machines (or as separate commands) against an empty database
            # race to create Optuna's tables; the loser retries and finds them there (SQLite says so with an
            # OperationalError "table ... already exists" or "database is locked"; any other OperationalError
            # means the server is unreachable). Local workers (``workers``) start after the tables exist.
            if isinstance(e, sqlalchemy.exc.OperationalError) and not _creation_race(e):
                raise LatoptError(f"cannot reach storage {redact(url)}: {first_line(getattr(e, 'orig', None) or e)}",
                                  param="storage") from None
            if attempt == 5:
                raise LatoptError(f"storage {redact(url)} could not be initialised: "
                                  f"{first_line(getattr(e, 'orig', None) or e)}", param="storage") from None
            time.sleep(0.5 + attempt)
        except sqlalchemy.exc.InterfaceError as e:
            raise LatoptError(f"cannot reach storage {redact(url)}: {first_line(getattr(e, 'orig', None) or e)}",
                              param="storage") from None
        except sqlalchemy.exc.DatabaseError as e:
            raise LatoptError(f"storage {redact(url)} failed: {first_line(getattr(e, 'orig', None) or e)}",
                              param="storage") from None
    raise AssertionError("unreachable")  # pragma: no cover


@contextlib.contextmanager
def storage_errors(url: str | None) -> Iterator[None]:
    """A study database that fails while it is read or written (damaged bytes, rows edited by hand, values
    Optuna's schema does not know) is one :class:`LatoptError` line naming it, not a traceback."""
    try:
        yield
    except (optuna.exceptions.StorageInternalError, sqlalchemy.exc.SQLAlchemyError) as e:
        cause = getattr(e, "orig", None) or e.__cause__ or e
        where = "the study database" if url is None else f"study storage {redact(url)}"
        raise LatoptError(f"{where} failed: {first_line(cause)}; is the database damaged? "
                          "(delete the study or use another study name or storage)", param="storage") from None
    except LookupError as e:   # SQLAlchemy reading a value its Enum column does not define
        if not any("sqlalchemy" in f.filename for f in traceback.extract_tb(e.__traceback__)):
            raise
        where = "the study database" if url is None else f"study storage {redact(url)}"
        raise LatoptError(f"{where} holds a value Optuna does not know ({first_line(e)}); is the database damaged? "
                          "(delete the study or use another study name or storage)", param="storage") from None


def abandon_trial(study: optuna.Study, trial_id: int) -> bool:
    """Fail the trial ``trial_id`` that this process was running when it was told to stop (SIGTERM, Ctrl-C),
    and enqueue its retry: what :func:`optuna.storages.fail_stale_trials` and the storage's
    ``RetryHeartbeatStaleTrialCallback`` do for a dead worker's trial once its heartbeat is stale, done at once,
    so the next run neither waits out the grace period for it nor (in the DP's grid) skips its budget. A trial
    that completed, or failed its numeric check, is left as it is; Optuna has already failed one that Ctrl-C
    interrupted. True when the trial was failed here or retried. Never raises: it runs while the process stops."""
    storage = study._storage
    try:
        trial = storage.get_trial(trial_id)
        if trial.state == TrialState.RUNNING:
            try:
                if not storage.set_trial_state_values(trial_id, state=TrialState.FAIL):
                    return False
            except optuna.exceptions.UpdateFinishedTrialError:   # another process failed it meanwhile
                return False
        elif trial.state != TrialState.FAIL or FAILED_CHECK in trial.user_attrs:
            return False
        callback = getattr(storage, "get_heartbeat_stale_trial_callback", None)   # a storage with heartbeats
        retry = callback() if callback is not None else None
        if retry is not None:
            retry(study, copy.deepcopy(storage.get_trial(trial_id)))
        return True
    except Exception as e:  # noqa: BLE001 - the stop goes on; the trial goes stale as before
        _LOG.warning(f"could not fail the interrupted trial (it is retried once its heartbeat is stale): "
                     f"{first_line(e)}")
        return False


def _creation_race(e: BaseException) -> bool:
    msg = str(getattr(e, "orig", None) or e).lower()
    return "already exists" in msg or "database is locked" in msg


@dataclass
class OpenedStudy:
    study: optuna.Study
    created: bool            # this process created it (and so enqueued the base trial)
    attrs: dict[str, Any]    # the study's latopt user attributes


def open_study(storage: RDBStorage, name: str, objective: str, identity: dict[str, Any],
               sampler: optuna.samplers.BaseSampler | None = None) -> OpenedStudy:
    """Create the study, or load it when it exists (``load_if_exists`` semantics, race-free).

    ``identity`` (model, task, resolution, ...) is stored on creation; a loaded study must match it and
    ``objective``, otherwise :class:`LatoptError` says what differs. The objectives are named
    (``study.set_metric_names``), so optuna-dashboard and ``study.trials_dataframe()`` label them.
    """
    names, directions = STUDY_OBJECTIVES[objective]
    created = True
    try:
        study = optuna.create_study(storage=storage, study_name=name, directions=list(directions),
                                    sampler=sampler, load_if_exists=False)
    except optuna.exceptions.DuplicatedStudyError:
        created = False
        study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
    if created:
        # "objective" last: a worker loading the study meanwhile waits for it (_wait_attrs), so it sees the rest
        attrs = {"schema": STUDY_SCHEMA, "metric_names": list(names), **identity, "objective": objective}
        for k, v in attrs.items():
            study.set_user_attr(k, v)
    else:
        attrs = _wait_attrs(study)
        check_compatible(study, name, objective, identity, attrs)
    if study.metric_names is None:   # a study of an older latopt gets them when it is resumed
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(list(names))
    return OpenedStudy(study, created, attrs)


def check_existing(storage: RDBStorage, name: str, objective: str, identity: dict[str, Any]) -> None:
    """When ``name`` already exists in ``storage``, check it optimises the same thing (creates nothing)."""
    if name not in optuna.get_all_study_names(storage):
        return
    study = optuna.load_study(study_name=name, storage=storage)
    check_compatible(study, name, objective, identity, _wait_attrs(study))


def _wait_attrs(study: optuna.Study, wait_s: float = 10.0) -> dict[str, Any]:
    """A study being created by another worker may not have its attributes yet: wait briefly."""
    t0 = time.monotonic()
    while True:
        attrs = study.user_attrs
        if "objective" in attrs or time.monotonic() - t0 > wait_s:
            return attrs
        time.sleep(0.2)


def check_compatible(study: optuna.Study, name: str, objective: str, identity: dict[str, Any],
                     attrs: dict[str, Any]) -> None:
    names, directions = STUDY_OBJECTIVES[objective]
    if attrs.get("schema") != STUDY_SCHEMA:
        raise LatoptError(f"study {name!r} was not created by latopt search (no {STUDY_SCHEMA} attributes); "
                          "use another study name", param="study")
    want = [optuna.study.StudyDirection[d.upper()] for d in directions]
    made = attrs.get("objective")
    if made != objective or list(study.directions) != want:
        raise LatoptError(f"study {name!r} was created with objective {made!r}, not {objective!r}; "
                          "rerun with the same objective (and measure) or choose another study name",
                          param="objective")
    if "confirm" in identity and "confirm" not in attrs:
        raise LatoptError(f"study {name!r} was made before latopt held out part of the validation split to confirm "
                          "its recommendation (its trials chose on all of it); delete it (optuna delete-study "
                          f"--study-name {name} --storage URL) or use another study name", param="study")
    for key, value in identity.items():
        if key in attrs and attrs[key] != value:
            raise LatoptError(f"study {name!r} was created with {key}={attrs[key]!r}, this run has {value!r}; "
                              "use the same config or another study name", param="study")


def load_existing(storage: RDBStorage, name: str) -> optuna.Study:
    """Load a study to show its front; one clear line when it does not exist."""
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        known = optuna.get_all_study_names(storage)
        hint = f"; studies there: {', '.join(known)}" if known else "; the storage holds no study"
        raise LatoptError(f"study {name!r} does not exist in this storage{hint}", param="study") from None


STUDY_DIR_RECORD = "study.json"   # which study's trials a search directory holds


def check_study_dir(study_dir: Path, url: str, name: str, *, study_id: int | None = None) -> None:
    """The trial directories under ``runs/<study>/search/`` belong to one study of one storage: the first
    search there records which (``study.json``: the storage, ``default`` for the directory's own SQLite file
    wherever it is moved, and the study's id once it exists); a search of a same-named study in another
    storage, or of a study deleted and created again, is refused in one line instead of overwriting the
    other's ``trial-N`` directories."""
    where = "default" if url == default_storage_url(study_dir) else redact(url)
    path = study_dir / STUDY_DIR_RECORD
    rec = StudyDirRecord.read(path) if path.is_file() else None
    if rec is not None and (rec.storage, rec.study) != (where, name):
        raise LatoptError(f"{study_dir} holds the trials of study {rec.study!r} in storage "
                          f"{rec.storage}, not of this study in {where}: give another study name or runs_dir",
                          param="study")
    if rec is not None and study_id is not None and rec.study_id not in (None, study_id):
        raise LatoptError(f"{study_dir} holds the trials of an earlier study {name!r} (deleted and created again "
                          "since): give another study name or runs_dir, or remove that directory", param="study")
    if study_id is not None and (rec is None or rec.study_id is None):   # recorded once the study exists
        make_dirs(study_dir)
        write_json_atomic(path, {"storage": where, "study": name, "study_id": study_id})
