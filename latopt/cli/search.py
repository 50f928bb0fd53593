"""``latopt search``: run/resume/join a study, or ``--show`` its Pareto front."""

from __future__ import annotations

import argparse

import yaml

from latopt.cli.common import common_parser
from latopt.constants import COSTS, IMPORTANCE_METHODS, OBJECTIVES, SAMPLERS, SEARCH_METHODS
from latopt.errors import LatoptError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "search", parents=[common_parser()],
        help="Optuna search over (λ_c, τ, p): accuracy vs latency Pareto front (resumable, distributed)",
        description="Multi-objective Optuna search: maximise validation accuracy, minimise LUT-predicted latency "
                    "(--measure: measured end-to-end; --objective depth: non-linear layers left). A worker is this "
                    "command pointed at a shared --storage URL and --study name; a rerun resumes the study.")
    p.add_argument("--config", help="run config: a YAML path or a shipped config's name; its search section gives ranges and defaults")
    p.add_argument("--trials", type=int, help="COMPLETE trials the study should hold (default: search.trials)")
    p.add_argument("--storage", help="SQLAlchemy URL (default: sqlite under runs/<study>/search/study.db)")
    p.add_argument("--study", help="study name (default: the config's name)")
    p.add_argument("--sampler", choices=SAMPLERS, help="default: search.sampler")
    p.add_argument("--objective", choices=OBJECTIVES, default="latency",
                   help="second objective: LUT latency (default) or remaining non-linear layers")
    p.add_argument("--max-acc-drop", type=float, help="feasible when base - trial accuracy <= D (default: search.max_acc_drop)")
    p.add_argument("--measure", action="store_true", help="measure each candidate end-to-end on the config's device")
    p.add_argument("--timeout", type=float, help="stop starting new trials after S seconds (a rerun continues)")
    p.add_argument("--base", help="base checkpoint (default: trained once per study under runs/<study>/search/base/)")
    p.add_argument("--lut", help="latency LUT JSON (default: the config's lut, else ./profiles/<device>/...)")
    p.add_argument("--costs", choices=COSTS, default="lut",
                   help="c_l in the compression loss: from the LUT (default) or 1 for every block (paper default)")
    p.add_argument("--runs-dir", default="runs", help="root of run directories (default: runs)")
    p.add_argument("--heartbeat-interval", type=int, default=30, help="seconds between trial heartbeats (default 30)")
    p.add_argument("--grace-period", type=int, default=120,
                   help="a RUNNING trial without heartbeat for this long is failed and retried (default 120)")
    p.add_argument("--workers", type=int, default=1,
                   help="local worker processes sharing the study (default 1; e.g. 2 on a 2-core machine)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads per worker (default: all cores with --workers 1, else cores // workers)")
    p.add_argument("--method", choices=SEARCH_METHODS, default="optuna",
                   help="optuna (default): Layer Folding's study over (λ_c, τ, p); dp: one variant per block "
                        "(full, pw, drop, ...) chosen by a dynamic program under --budget, then folded and fine-tuned; "
                        "without --budget, a study <study>-dp of one such trial per budget of --budgets "
                        "(its Pareto front; --show <study> draws both methods' fronts)")
    p.add_argument("--budget", type=float,
                   help="--method dp: predicted latency <= BUDGET x the as-is LUT latency (a fraction in (0, 1]); "
                        "default: a study over --budgets")
    p.add_argument("--budgets", help="--method dp without --budget: the budgets of the DP's study, one fine-tuned "
                                     "trial each, comma-separated, each in (0, 1] and given once "
                                     "(default 0.5,0.6,0.7,0.8,0.9)")
    p.add_argument("--importance", choices=IMPORTANCE_METHODS, default="proxy",
                   help="--method dp: how each (block, variant) is scored: proxy (validation loss of the variant "
                        "alone, BN re-estimated; default), finetune (short fine-tune each; slow), uniform")
    p.add_argument("--variants", help="--method dp: variants the blocks may take, comma-separated (default: the LUT's)")
    p.add_argument("--budget-rounds", type=int, metavar="N",
                   help="--method dp: the budget loop: each plan is timed against the as-is network on the LUT's "
                        "device and the DP re-solved with the budget corrected by the measurement, until one "
                        "measures within [B - 3 %%, B + 2 %%] or N plans are measured (default: "
                        "search.budget_rounds, 3); 0 = off (the LUT's plan). Count devices and devices that cannot "
                        "run here are not measured")
    p.add_argument("--plan-only", action="store_true",
                   help="--method dp: write the plan (a variant per block, predicted latency and speed-up) to --out "
                        "and stop: nothing is trained or fine-tuned, seconds; --importance uniform needs no "
                        "checkpoint, proxy needs --base. Apply it with latopt export --plan")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="config override, dotted key and a YAML value (e.g. --set fold.post_epochs=2); repeatable")
    p.add_argument("--no-summary", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--show", action="store_true", help="print the Pareto front and write pareto.{json,csv,png}")
    p.add_argument("--out", help="--show: output directory (default: the study directory); --plan-only: the plan "
                                 "file (default: runs/<study>/search/plan-budget<B>.json)")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    if args.show:
        return _show(args)
    if not args.config:
        raise LatoptError("latopt search needs --config FILE (or --show to print an existing study's front)")
    dp_only = {"--budget": args.budget is not None, "--budgets": args.budgets is not None,
               "--variants": args.variants is not None,
               "--importance": args.importance != "proxy", "--plan-only": args.plan_only,
               "--budget-rounds": args.budget_rounds is not None}
    if args.method != "dp" and any(dp_only.values()):
        raise LatoptError(f"{next(k for k, v in dp_only.items() if v)} applies to --method dp")
    if args.budgets is not None and (args.budget is not None or args.plan_only):
        raise LatoptError("--budgets is the DP's study (without --budget); --budget B is one plan")
    budgets = _budgets(args.budgets)   # before anything is loaded or run
    overrides = _overrides(args.overrides)
    if args.budget_rounds is not None:   # the config key it sets (the DP's study hands its trials the config)
        from latopt.dp.budgetloop import check_rounds

        overrides["search.budget_rounds"] = check_rounds(args.budget_rounds, "budget_rounds")
    # start-up time: Optuna and the training stack load when a search runs, not for `latopt --help`
    from latopt.engine import seed_everything
    from latopt.search import SearchOptions, run_dp_search, run_search

    seed_everything(args.seed)
    if args.method == "dp" and (args.budget is not None or args.plan_only):
        from latopt.dp import format_dp_summary, format_plan_summary

        if args.out is not None and not args.plan_only:
            raise LatoptError("--out applies to --show or --plan-only (a DP run writes runs/<study>/search/dp-budget<B>/)")

        done = run_dp_search(SearchOptions(
            config=args.config, study=args.study, base=args.base, lut=args.lut, seed=args.seed,
            runs_dir=args.runs_dir, threads=args.threads, overrides=overrides,
            method="dp", budget=args.budget, importance=args.importance,
            variants=_variants(args.variants), plan_only=args.plan_only, plan_out=args.out))
        # --plan-only: the plan file's content; else the applied plan (a FoldResult)
        print(format_plan_summary(done, done["path"]) if args.plan_only else format_dp_summary(done.report))
        return 0
    res = run_search(SearchOptions(
        config=args.config, trials=args.trials, storage=args.storage, study=args.study, sampler=args.sampler,
        objective=args.objective, max_acc_drop=args.max_acc_drop, measure=args.measure, timeout=args.timeout,
        base=args.base, lut=args.lut, costs=args.costs, seed=args.seed, runs_dir=args.runs_dir,
        heartbeat_interval=args.heartbeat_interval, grace_period=args.grace_period, workers=args.workers,
        threads=args.threads, summary=not args.no_summary, overrides=overrides,
        method=args.method, importance=args.importance, variants=_variants(args.variants),
        budgets=budgets))
    if not args.no_summary:
        _print_front(res.summary, res.files)
    return 0


def _variants(text: str | None) -> tuple[str, ...] | None:
    """``--variants a,b``: the variants, or None for the LUT's."""
    return None if text is None else tuple(v.strip() for v in text.split(",") if v.strip())


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


def _print_front(summary: dict, files: dict) -> None:
    from latopt.search import format_table

    print(format_table(summary))
    for other in summary.get("others", []):   # the DP's study beside it
        print()
        print(format_table(other))
    print("files: " + ", ".join(str(p) for p in files.values()))
