"""A case, its outcome, and the rules that judge how a command ended (the exit-0 checks included)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .files import hidden, listing, load_any, load_pt, under
from .fixtures import SAMPLES
from .process import RUNTIME, TRACEBACK, Run, error_lines, exception_line, latopt, one_line_error

CHECKPOINT_SCHEMA = "latopt.checkpoint/2"


# ============================================================================== cases
@dataclasses.dataclass
class Case:
    kind: str                       # artefact kind (table name)
    mutation: str
    command: str
    argv: list[str]
    cwd: Path                       # where the command runs: jail/j1/j2
    jail: Path                      # the directory whose listing is compared
    must_refuse: bool               # exit 0 is wrong for this input
    check: Callable[[Case], str | None] | None = None
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    fsize: int | None = None

    @property
    def out(self) -> Path:
        return self.cwd / "out"

    @property
    def outputs(self) -> list[Path]:
        """Where new files may appear on exit 0 (explicit --out, and the default runs/ and profiles/)."""
        return [self.cwd / "out", self.cwd / "runs", self.cwd / "profiles"]

    @property
    def marker(self) -> Path:
        return self.jail / "PICKLE_RAN"

    def describe(self) -> str:
        return f"{self.kind}: {self.mutation} → {self.command}"


@dataclasses.dataclass
class Outcome:
    case: str
    kind: str
    mutation: str
    command: str
    argv: list[str]
    rc: int | None
    seconds: float
    failures: list[tuple[str, str]]         # (failure kind, detail)
    stderr: str = ""
    notes: str = ""

    @property
    def clean(self) -> bool:
        return not self.failures

    def describe(self) -> str:
        head = f"{self.case} (exit {self.rc}): latopt {' '.join(self.argv)}".replace(f"latopt {RUNTIME}",
                                                                                    "python -m latopt.runtime")
        return head + "".join(f"\n  {k}: {d}" for k, d in self.failures) + (
            f"\n  stderr: {self.stderr[-1500:]}" if self.failures else "")


def judge(case: Case, run: Run, before: dict[str, str], after: dict[str, str]) -> list[tuple[str, str]]:
    """The failure kinds a finished command shows (empty: clean)."""
    fails: list[tuple[str, str]] = []
    if case.marker.exists():
        fails.append(("pickle executed", f"{case.marker.name} was created: an input's pickled code ran"))
    if run.rc is None:
        return fails + [("timeout", f"still running after {run.seconds:.0f} s")]
    traced = TRACEBACK in run.err or TRACEBACK in run.out
    if traced:
        fails.append(("traceback", exception_line(run.err + run.out)))
    if run.rc == 0 and case.must_refuse:
        fails.append(("wrong exit code", "exit 0 on input that must be refused"))
    elif run.rc not in (0, 2, 3) and not (traced and run.rc == 1):   # exit 1 is the traceback's own
        fails.append(("wrong exit code", f"exit {run.rc}"))
    elif run.rc in (2, 3) and not one_line_error(run.err):
        lines = error_lines(run.err)
        fails.append(("multi-line error", f"{len(lines)} stderr lines: " + " | ".join(ln[:120] for ln in lines[:4])))
    devices = [p for p, k in before.items() if k == "c" and after.get(p) != "c"]
    if devices:
        fails.append(("device replaced", f"{devices[0]} is no longer a device ({after.get(devices[0], 'gone')})"))
    new = sorted(set(after) - set(before) - {str(case.marker.relative_to(case.jail))})   # the marker: counted above
    if run.rc == 0:
        stray = [p for p in new if not under(case.jail / p, case.outputs)]
        temps = hidden(new)
        if stray or temps:
            what = stray[:1] or temps[:1]
            fails.append(("leftover files", f"exit 0 left {what[0]!r} (outside the outputs or a hidden temp file)"))
        if not fails and case.check is not None:
            problem = case.check(case)
            if problem:
                fails.append(("wrong result", problem))
    elif run.rc in (2, 3) and new:
        fails.append(("leftover files", f"exit {run.rc} left {len(new)} new path(s), e.g. {new[0]!r}"))
    return fails


def run_case(case: Case, in_process: bool = False) -> Outcome:
    before = listing(case.jail)
    run = latopt(case.argv, case.cwd, env=case.env, in_process=in_process, fsize=case.fsize)
    after = listing(case.jail)
    try:
        fails = judge(case, run, before, after)
    except Exception as e:   # a harness bug must not hide the rest of the run
        fails = [("harness error", f"{type(e).__name__}: {e}")]
    return Outcome(case.describe(), case.kind, case.mutation, case.command, case.argv, run.rc, round(run.seconds, 2),
                   fails, run.err[-4000:])


# ============================================================================== exit-0 checks
def _found(case: Case, pattern: str) -> list[Path]:
    return sorted(p for root in case.outputs if root.is_dir() for p in root.rglob(pattern)
                  if not hidden([str(p.relative_to(root))]))


def needs(*patterns: str, then: Callable[[Case, dict[str, Path]], str | None] | None = None
          ) -> Callable[[Case], str | None]:
    """Check: each pattern matches a file under the outputs and every match loads; then ``then``."""
    def check(case: Case) -> str | None:
        got: dict[str, Path] = {}
        for pattern in patterns:
            found = _found(case, pattern)
            if not found:
                return f"exit 0 but no {pattern} was written"
            for p in found:
                try:
                    load_any(p)
                except Exception as e:
                    return f"{p.relative_to(case.cwd)} does not load ({type(e).__name__}: {str(e)[:100]})"
            got[pattern] = found[0]
        return then(case, got) if then else None
    return check


def _export_ok(case: Case, got: dict[str, Path]) -> str | None:
    rec = json.loads(got["export.json"].read_text())
    if rec.get("schema") != "latopt.export/1":
        return f"export.json has schema {rec.get('schema')!r}"
    failed = [g.get("name") for g in rec.get("gates", []) if not g.get("passed")]
    if failed:
        return f"export.json records failed gates with exit 0: {failed}"
    gated = (rec.get("accuracy") or {}).get("gated", False)
    if rec.get("accuracy_gate") is not gated:   # it never says gated for an export it did not gate, nor the reverse
        return f"export.json says accuracy_gate {rec.get('accuracy_gate')!r} but its accuracy was gated: {gated!r}"
    if case.info.get("as_is"):
        want, got_plan = case.info.get("plan") or {}, rec.get("folded") or {}
        if got_plan != want:
            return (f"exported with {len(got_plan)} block(s) folded ({sorted(got_plan, key=int)[:6]}...) but the "
                    f"checkpoint records {len(want)} folded")
        recorded, acc = case.info.get("acc"), (rec.get("accuracy") or {}).get("test_acc")
        if recorded is not None and isinstance(acc, (int, float)) and abs(acc - recorded) > 1 / SAMPLES + 1e-9:
            return f"the exported model's test accuracy {acc:.4f} is not the checkpoint's recorded {recorded:.4f}"
    return None


def _export_timing_ok(case: Case, got: dict[str, Path]) -> str | None:
    """``--timing-only``: the artefact is named so and export.json says it is not accuracy-gated."""
    rec = json.loads(got["export.json"].read_text())
    if rec.get("timing_only") is not True or rec.get("accuracy_gate") is not False:
        return (f"a --timing-only export.json says timing_only {rec.get('timing_only')!r}, accuracy_gate "
                f"{rec.get('accuracy_gate')!r}")
    if _found(case, "model.onnx"):
        return "a --timing-only export wrote model.onnx (a deployable name)"
    return _export_ok(case, got)


def _pt_schema(schema: str) -> Callable[[Case, dict[str, Path]], str | None]:
    def then(case: Case, got: dict[str, Path]) -> str | None:
        for p in got.values():
            if p.suffix == ".pt":
                obj = load_pt(p)
                if not isinstance(obj, dict) or obj.get("schema") != schema:
                    return f"{p.name} is not a {schema} file"
        return None
    return then


def _search_ok(case: Case, got: dict[str, Path]) -> str | None:
    rec = json.loads(got["pareto.json"].read_text())
    if rec.get("base_trial") is None:
        return "the study has no completed base trial (the base operating point is missing from the front)"
    return None


def _run_ok(case: Case, got: dict[str, Path]) -> str | None:
    state = json.loads(got["run.json"].read_text())
    missing = {"base", "profile", "search", "export", "report"} - set(state.get("stages", {}))
    if missing:
        return f"run.json lacks stages {sorted(missing)} after exit 0"
    return _export_ok(dataclasses.replace(case, info={}), {"export.json": got["export.json"]})


def _lut_ok(case: Case, got: dict[str, Path]) -> str | None:
    lut = json.loads(got["*.json"].read_text())
    times = [lut.get("fixed_ms")] + [t for b in lut.get("blocks", []) for t in (b.get("ms") or {}).values()]
    bad = [t for t in times if not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0]
    return f"the LUT has times {bad[:3]}" if bad else None


def _inspect_ok(case: Case, got: dict[str, Path]) -> str | None:
    rec = json.loads(got["*.json"].read_text())
    return None if rec.get("schema") == "latopt.inspect/1" else f"inspect JSON has schema {rec.get('schema')!r}"


CHECKS: dict[str, Callable[[Case], str | None]] = {
    "export": needs("export.json", "model.onnx", "REPORT.md", then=_export_ok),
    "export-timing": needs("export.json", "model.timing-only.onnx", "REPORT.md", then=_export_timing_ok),
    "train": needs("base.pt", "metrics.json", then=_pt_schema(CHECKPOINT_SCHEMA)),
    "fold": needs("folded.pt", "prefold.pt", "report.json", then=_pt_schema(CHECKPOINT_SCHEMA)),
    "search": needs("pareto.json", then=_search_ok),
    "show": needs("pareto.json"),
    "run": needs("run.json", "export.json", "REPORT.md", then=_run_ok),
    "profile": needs("*.json", then=_lut_ok),
    "inspect": needs("*.json", then=_inspect_ok),
    "regions": needs("report.json"),
    "compress": needs("report.json", "compressed.pt", then=_pt_schema("latopt.mlp/1")),
    "shallow": needs("report.json", "eps_network.pt"),
    "train-mlp": needs("*.pt", then=_pt_schema("latopt.mlp/1")),
    "runtime": needs("*.npy"),
}
