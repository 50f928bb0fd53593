"""``latopt search``: run/resume/join a study of Layer Folding, or ``--show`` its Pareto front (the DP's beside it).
The DP's budgeted plan is ``latopt plan`` (:mod:`latopt.cli.plan`); ``latopt search --method dp`` is refused with
one line naming it (:func:`refusal`)."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

import yaml

from latopt.cli.common import common_parser
from latopt.constants import COSTS, OBJECTIVES, SAMPLERS
from latopt.errors import LatoptError

if TYPE_CHECKING:
    from latopt.search.study_record import FrontSummary


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "search", parents=[common_parser()],
        help="Optuna search over (λ_c, τ, p): accuracy vs latency Pareto front (resumable, distributed)",
        description="Multi-objective Optuna search: maximise validation accuracy, minimise LUT-predicted latency "
                    "(--measure: measured end-to-end; --objective depth: non-linear layers left). A worker is this "
                    "command pointed at a shared --storage URL and --study name; a rerun resumes the study. The DP "
                    "(one variant per block under a latency budget) is latopt plan.")
    p.add_argument("--config", help="run config: a YAML path or a shipped config's name; its search section gives ranges and defaults")
    add_study_options(p, trials_help="COMPLETE trials the study should hold (default: search.trials)",
                      storage_help="SQLAlchemy URL (default: sqlite under runs/<study>/search/study.db)")
    p.add_argument("--sampler", choices=SAMPLERS, help="default: search.sampler")
    p.add_argument("--costs", choices=COSTS, default="lut",
                   help="c_l in the compression loss: from the LUT (default) or 1 for every block (paper default)")
    add_run_options(p, base_help="base checkpoint (default: trained once per study under runs/<study>/search/base/)",
                    study_help="study name (default: the config's name)")
    # the DP is its own command now (latopt plan): --method optuna stays accepted, as the only method
    # (--method dp is refused before parsing, by refusal())
    p.add_argument("--method", choices=("optuna",), default="optuna", help=argparse.SUPPRESS)
    p.add_argument("--show", action="store_true", help="print the Pareto front and write pareto.{json,csv,png}")
    p.add_argument("--out", help="--show: output directory (default: the study directory)")
    p.set_defaults(func=_main)


def add_study_options(p: argparse.ArgumentParser | argparse._ArgumentGroup, *, trials_help: str,
                      storage_help: str) -> None:
    """The options of the Optuna study that ``latopt search`` runs and ``latopt plan`` runs over budgets: its
    size and storage, the second objective and the accuracy constraint, time limits, heartbeats and local workers
    (``trials_help`` and ``storage_help``: each command's defaults)."""
    p.add_argument("--trials", type=int, help=trials_help)
    p.add_argument("--storage", help=storage_help)
    p.add_argument("--objective", choices=OBJECTIVES, default="latency",
                   help="second objective: LUT latency (default) or remaining non-linear layers")
    p.add_argument("--max-acc-drop", type=float,
                   help="feasible when base - trial accuracy <= D (default: search.max_acc_drop)")
    p.add_argument("--measure", action="store_true", help="measure each candidate end-to-end on the config's device")
    p.add_argument("--timeout", type=float, help="stop starting new trials after S seconds (a rerun continues)")
    p.add_argument("--heartbeat-interval", type=int, default=30, help="seconds between trial heartbeats (default 30)")
    p.add_argument("--grace-period", type=int, default=120,
                   help="a RUNNING trial without heartbeat for this long is failed and retried (default 120)")
    p.add_argument("--workers", type=int, default=1,
                   help="local worker processes sharing the study (default 1; e.g. 2 on a 2-core machine)")
    p.add_argument("--no-summary", action="store_true", help=argparse.SUPPRESS)


def add_run_options(p: argparse.ArgumentParser, *, base_help: str, study_help: str) -> None:
    """The options ``latopt search`` and ``latopt plan`` share for where a run starts and goes: the base
    checkpoint, the LUT, the study's name, the runs directory, torch threads and config overrides (``base_help``
    and ``study_help``: each command's defaults)."""
    p.add_argument("--base", help=base_help)
    p.add_argument("--lut", help="latency LUT JSON (default: the config's lut, else ./profiles/<device>/...)")
    p.add_argument("--study", help=study_help)
    p.add_argument("--runs-dir", default="runs", help="root of run directories (default: runs)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads per worker (default: all cores with --workers 1, else cores // workers)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="config override, dotted key and a YAML value (e.g. --set fold.post_epochs=2); repeatable")


def _main(args: argparse.Namespace) -> int:
    if args.show:
        return _show(args)
    if not args.config:
        raise LatoptError("latopt search needs --config FILE (or --show to print an existing study's front)")
    overrides = {**_overrides(args.overrides), "method": "layerfold"}   # latopt plan is the DP's command
    # start-up time: Optuna and the training stack load when a search runs, not for `latopt --help`
    from latopt.search import SearchOptions, run_search
    from latopt.training.loop import seed_everything

    seed_everything(args.seed)
    res = run_search(SearchOptions(
        config=args.config, trials=args.trials, storage=args.storage, study=args.study, sampler=args.sampler,
        objective=args.objective, max_acc_drop=args.max_acc_drop, measure=args.measure, timeout=args.timeout,
        base=args.base, lut=args.lut, costs=args.costs, seed=args.seed, runs_dir=args.runs_dir,
        heartbeat_interval=args.heartbeat_interval, grace_period=args.grace_period, workers=args.workers,
        threads=args.threads, summary=not args.no_summary, overrides=overrides))
    if not args.no_summary:
        _print_front(res.summary, res.files)
    return 0


# The options ``latopt search --method dp`` took that are ``latopt plan``'s now (with how many values each takes),
# and those it took that never applied to the DP (left out of the command the refusal gives, with their value).
PLAN_FLAGS: dict[str, int] = {"--budget": 1, "--budgets": 1, "--importance": 1, "--variants": 1,
                              "--budget-rounds": 1, "--plan-only": 0}
NOT_PLAN_FLAGS: dict[str, int] = {"--method": 1, "--sampler": 1, "--costs": 1}


def refusal(argv: Sequence[str]) -> str | None:
    """The one line that refuses ``latopt search`` with the DP's options (``--method dp``, or one of
    :data:`PLAN_FLAGS`), which are ``latopt plan``'s now, giving the command to run instead (``--show`` with
    ``--method dp``: the same ``latopt search --show`` without the DP's options); None for any other command line
    (argparse then parses it as it is)."""
    if not argv or argv[0] != "search":
        return None
    words = list(argv[1:])
    method: str | None = None
    for i, w in enumerate(words):
        if w == "--method" and i + 1 < len(words):
            method = words[i + 1]
        elif w.startswith("--method="):
            method = w.partition("=")[2]
    dp_flags = [f for f in (w.partition("=")[0] for w in words) if f in PLAN_FLAGS]
    show = "--show" in words
    if method not in (None, "optuna", "dp") or (method != "dp" and (not dp_flags or show)):
        return None     # a wrong --method (argparse says so), or no DP option: the search
    drop = {**NOT_PLAN_FLAGS, **(PLAN_FLAGS if show else {})}
    rest: list[str] = []
    skip = 0
    for w in words:
        flag, eq, _ = w.partition("=")
        if skip:
            skip -= 1
        elif flag in drop:
            skip = 0 if eq else drop[flag]     # and its value, when it is the next word
        else:
            rest.append(w)
    if show:
        return ("latopt search: error: --method dp is gone; --show draws both methods' fronts without it: "
                + shlex.join(["latopt", "search", *rest]))
    what = ("--method dp is now its own command" if method == "dp"
            else f"{dp_flags[0]} is an option of the DP, now its own command")
    return f"latopt search: error: {what}: {shlex.join(['latopt', 'plan', *rest])}"


def _variants(text: str | None) -> tuple[str, ...] | None:
    """``--variants a,b``: the variants, or None for the LUT's; an empty list or item (``''``, ``pw,,drop``) is a
    mistake, not the default."""
    if text is None:
        return None
    out = tuple(v.strip() for v in text.split(","))
    if not all(out):
        raise LatoptError(f"--variants {text!r}: the variants list is empty or has an empty item; give the variants "
                          "the blocks may take, separated by commas (e.g. pw,drop), or leave --variants out for the "
                          "LUT's")
    return out


def _budgets(text: str | None) -> tuple[float, ...] | None:
    """``--budgets 0.5,0.7``: the budgets, or None for the default. Each is a fraction in (0, 1] (the range of
    ``--budget``: :func:`latopt.dp.check_budget`), given once; an empty item (``''``, ``0.5,,0.7``) is a mistake, not
    the default."""
    if text is None:
        return None
    from latopt.dp.select import check_budget

    how = "fractions of the as-is latency in (0, 1], each once, separated by commas, e.g. 0.5,0.7,0.9"
    out: list[float] = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            raise LatoptError(f"--budgets {text!r}: an empty budget; give {how}")
        try:
            b = check_budget(float(item), "budgets")
        except (ValueError, LatoptError):
            raise LatoptError(f"--budgets {text!r}: {item!r} is not a fraction in (0, 1]; give {how}") from None
        if b in out:
            raise LatoptError(f"--budgets {text!r}: budget {b:g} is given twice; give {how}")
        out.append(b)
    return tuple(out)


def _overrides(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise LatoptError(f"--set {item!r}: expected KEY=VALUE, e.g. --set fold.post_epochs=2")
        try:
            out[key] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise LatoptError(f"--set {item!r}: the value is not valid YAML") from None
    return out


def _show(args: argparse.Namespace) -> int:
    from latopt.config import load_config
    from latopt.search import show_front

    name = args.study
    if name is None and args.config:
        name = load_config(args.config).name
    if name is None:
        raise LatoptError("latopt search --show needs --study NAME (or --config FILE to take its name)")
    summary, files = show_front(name, storage=args.storage, runs_dir=args.runs_dir, out=args.out,
                                max_acc_drop=args.max_acc_drop)
    _print_front(summary, files)
    return 0


def _print_front(summary: FrontSummary, files: dict) -> None:
    from latopt.search import format_table

    print(format_table(summary))
    for other in summary.others:   # the DP's study beside it
        print()
        print(format_table(other))
    print("files: " + ", ".join(str(p) for p in files.values()))
