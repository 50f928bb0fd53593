"""The state of a ``latopt run`` on disk: ``runs/<name>/run.json`` (what each stage was made from, what it wrote,
its results), and the clean-up of a run directory (``--fresh``: :func:`clear`).

Public API::

    RunState(root, config, fresh, stages)     run.json of the run directory ``root``; ``stages``: the names, in order
        .record(stage) -> dict | None          a stage's record (paths absolute again)
        .stale(stage, made_from) -> [why]      why it cannot be reused (empty: it can): its fingerprint changed, an
                                               output is missing or changed, or its record names a file it did
                                               not hash (:func:`untied`)
        .start(stage, made_from, **info);  .finish(stage, info);  .invocation(plan);  .finished_any()
    plain(obj);  NOT_RUN_YET;  RUN_SCHEMA;  REPORT_FILES
    clear(root, keep, lut_path)                remove what latopt wrote in ``root`` (refuses when it holds anything else)
    remove_path(path)                          a file, link or directory tree, gone
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from latopt.errors import LatoptError
from latopt.files.artifacts import file_sha256, write_json_atomic
from latopt.files.readers import read_json

RUN_SCHEMA = "latopt.run/2"
NOT_RUN_YET = "not run yet"  # a stage's plan entry when the run directory holds no result of it
# record keys holding paths: stored relative to the run directory, so a moved run directory stays valid
_PATH_KEYS = ("checkpoint", "lut", "dir", "pareto_png", "study_dir", "report")
# the record keys naming a stage's outputs (a file, or a directory: every file in it), hashed when it finishes
_OUTPUT_KEYS = ("checkpoint", "lut", "dir")
# what the report stage writes besides run.json (relative to the run directory); removed when it is re-run
REPORT_FILES = ("REPORT.md", "latency_blocks.png", "pareto.png", "config.yaml")


def plain(obj: Any) -> Any:
    """``obj`` as it reads back from JSON (tuples become lists), so recorded and current values compare."""
    return json.loads(json.dumps(obj, sort_keys=True))


@dataclass
class _Entry:
    """What this module reads of a stage's entry in run.json (the entry itself is kept as it was read or written:
    its other keys are the stage's results)."""

    made_from: dict[str, Any]
    done: bool
    outputs: dict[str, str]

    @classmethod
    def of(cls, rec: dict[str, Any]) -> _Entry:
        return cls(made_from=rec.get("made_from") or {}, done=bool(rec.get("done")), outputs=rec.get("outputs") or {})


class RunState:
    """run.json: per stage, what it was made from, what it wrote and its results; written atomically."""

    def __init__(self, root: Path, config: Path, fresh: bool, stages: tuple[str, ...]) -> None:
        self.root = root
        self.stages = stages
        self.path = root / "run.json"
        self.config = str(config)
        self.entries: dict[str, Any] = {}   # per stage, its entry (a dict, unless the file was edited)
        self.last_invocation: dict[str, dict[str, Any]] | None = None
        self.note = ""
        if fresh or not self.path.exists():
            return
        try:
            old = read_json(self.path, what="run state")
        except LatoptError as e:
            self.note = f"{e}: every stage is re-run"
            return
        schema, entries = old.get("schema"), old.get("stages")
        if schema != RUN_SCHEMA or not isinstance(entries, dict):
            self.note = (f"{self.path} was written by another latopt version (schema {schema!r}, "
                         f"no fingerprints): every stage is re-run")
            return
        self.entries = entries

    def record(self, stage: str) -> dict[str, Any] | None:
        rec = self.entries.get(stage)
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
        rec = self.entries.get(stage)
        if not isinstance(rec, dict):
            return [NOT_RUN_YET]
        entry = _Entry.of(rec)
        old = entry.made_from
        now = plain(made_from)
        why = [changed(k, old.get(k), now.get(k)) for k in [*now, *(k for k in old if k not in now)]
               if old.get(k) != now.get(k)]
        if why:
            return why
        if not entry.done:
            return ["interrupted"]
        outputs = entry.outputs
        for rel, digest in outputs.items():
            path = self.root / rel
            if not path.is_file():
                return [f"its output {rel} is missing"]
            if file_sha256(path) != digest:
                return [f"its output {rel} changed since it was made"]
        return untied(rec, outputs)

    def start(self, stage: str, made_from: dict[str, Any], **info: Any) -> None:
        """Record that ``stage`` is being (re-)made: it and every later stage are no longer done."""
        for s in self.stages[self.stages.index(stage):]:
            self.entries.pop(s, None)
        self.entries[stage] = {"made_from": plain(made_from), "done": False, **info}
        self._write()

    def finish(self, stage: str, info: dict[str, Any]) -> None:
        """Record that ``stage`` (begun with :meth:`start`) is done: its results ``info`` and its outputs' SHA-256."""
        made_from = _Entry.of(self.entries.get(stage, {})).made_from
        rec = {k: (self._rel(v) if k in _PATH_KEYS and isinstance(v, (str, Path)) and v else v)
               for k, v in info.items()}
        self.entries[stage] = {**rec, "made_from": made_from, "outputs": self.outputs(info), "done": True,
                                      "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        self._write()

    def finished_any(self) -> bool:
        """Some stage is recorded as done."""
        return any(isinstance(r, dict) and _Entry.of(r).done for r in self.entries.values())

    def invocation(self, actions: dict[str, str | None]) -> None:
        """What this invocation did with each stage: reused (None) or re-run, and why."""
        self.last_invocation = {s: {"reused": why is None, "why": why} for s, why in actions.items()}
        self._write()

    def _write(self) -> None:
        last = {} if self.last_invocation is None else {"last_invocation": self.last_invocation}
        write_json_atomic(self.path, {"schema": RUN_SCHEMA, "config": self.config, "stages": self.entries, **last})


def untied(rec: dict[str, Any], outputs: dict[str, str]) -> list[str]:
    """Why a stage's record names an output it did not hash (empty: every file or directory its record names is
    among its hashed ``outputs``). A record's path is its hashed output's, not a pointer of its own: a path edited
    to another file (another base, whose accuracy the record does not describe) makes the stage be made again."""
    for k in _OUTPUT_KEYS:
        rel = rec.get(k)
        if isinstance(rel, str) and rel and rel not in outputs and not any(o.startswith(f"{rel}/") for o in outputs):
            return [f"its record's {k} {rel} is not an output it hashed"]
    return []


def changed(key: str, old: Any, new: Any) -> str:
    if old is None:
        return f"{key} not recorded"
    if isinstance(old, (int, float, str)) and isinstance(new, (int, float, str)) and len(f"{old}{new}") <= 40:
        return f"{key} changed ({old} → {new})"
    return f"{key} changed"


def clear(root: Path, keep: list[Path], lut_path: Path) -> None:
    """``--fresh``: remove what latopt wrote in the run directory (the stages' outputs, run.json, the report,
    the profiled LUT, the base's resume state, and the hidden temp entries of interrupted writes of those),
    keeping the given input files (a config, LUT or device profile kept there). Anything else found there is
    not latopt's: nothing is removed and the run refuses in one line (a symbolic link in it is never followed)."""
    own = {"base", "base.resume.pt", "search", "export", "run.json", lut_path.name, *REPORT_FILES}
    temp = re.compile(r"^\.(" + "|".join(re.escape(n) for n in own) + r")\.[0-9a-f]{8}(\.tmp|\.old)?$")
    keep_resolved = [k.resolve() for k in keep]
    remove: list[Path] = []
    foreign: list[Path] = []
    for child in sorted(root.iterdir()):
        c = child.resolve()
        if any(k == c or c in k.parents for k in keep_resolved):
            continue
        (remove if child.name in own or temp.match(child.name) else foreign).append(child)
    if foreign:
        names = ", ".join(f.name for f in foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise LatoptError(f"{root} holds entries latopt did not write ({names}); a fresh run deletes only latopt's "
                          "own outputs: move them away or choose another runs_dir", param="runs_dir")
    for child in remove:
        remove_path(child)


def remove_path(path: Path) -> None:
    """Remove a file, a link (never followed) or a directory tree; nothing when it does not exist."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
