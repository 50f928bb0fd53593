"""``latopt plan``: the DP's budgeted plan (one variant per block under a latency budget), applied or written as a
plan file, or the DP's study over several budgets (its Pareto front)."""

from __future__ import annotations

import argparse

from latopt.cli.common import common_parser
from latopt.cli.search import (
    _budgets,
    _overrides,
    _print_front,
    _variants,
    add_run_options,
    add_study_options,
)
from latopt.constants import IMPORTANCE_METHODS
from latopt.errors import LatoptError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "plan", parents=[common_parser()],
        help="the DP: one variant per block under a latency budget (--budget B), or its front over budgets",
        description="The DP's budgeted plan: one variant per block (full, pw, drop, ...) chosen by a dynamic program "
                    "so that the predicted latency is <= --budget B x the as-is LUT latency, then folded and "
                    "fine-tuned as a one-trial study in runs/<study>/search/dp-budget<B>/ (the fold in trial-1/), its "
                    "accuracy drop confirmed on held-out validation images; --plan-only writes the plan file alone "
                    "(apply it with latopt export --plan). Without --budget: a study <study>-dp of one such trial "
                    "per budget of --budgets, its Pareto front printed at the end (latopt search --show --study "
                    "<study> draws it beside Layer Folding's); a rerun resumes it.")
    p.add_argument("--config", help="run config: a YAML path or a shipped config's name")
    p.add_argument("--budget", type=float,
                   help="predicted latency <= BUDGET x the as-is LUT latency (a fraction in (0, 1]); "
                        "default: a study over --budgets")
    p.add_argument("--budgets", help="without --budget: the budgets of the DP's study, one fine-tuned "
                                     "trial each, comma-separated, each in (0, 1] and given once "
                                     "(default: dp.budgets, 0.5,0.6,0.7,0.8,0.9)")
    p.add_argument("--plan-only", action="store_true",
                   help="write the plan (a variant per block, predicted latency and speed-up) to --out "
                        "and stop: nothing is trained or fine-tuned, seconds; --importance uniform needs no "
                        "checkpoint, proxy needs --base. Apply it with latopt export --plan")
    p.add_argument("--out", help="--plan-only: the plan file (default: runs/<study>/search/plan-budget<B>.json)")
    p.add_argument("--importance", choices=IMPORTANCE_METHODS,
                   help="how each (block, variant) is scored: proxy (validation loss of the variant "
                        "alone, BN re-estimated), finetune (short fine-tune each; slow), uniform "
                        "(default: dp.importance, proxy)")
    p.add_argument("--variants", help="variants the blocks may take, comma-separated (default: dp.variants, "
                                      "else the LUT's)")
    p.add_argument("--budget-rounds", type=int, metavar="N",
                   help="the budget loop: each plan is timed against the as-is network on the LUT's "
                        "device and the DP re-solved with the budget corrected by the measurement, until one "
                        "measures within [B - 3 %%, B + 2 %%] or N plans are measured (default: "
                        "dp.budget_rounds, 3); 0 = off (the LUT's plan). Count devices and devices that cannot "
                        "run here are not measured")
    add_run_options(p, base_help="base checkpoint (default: trained once per study under "
                                 "runs/<study>/search/base/, the Layer Folding study's)",
                    study_help="study name (default: the config's name); the DP's study is <study>-dp")
    add_study_options(p.add_argument_group("the DP's study (without --budget)"),
                      trials_help="COMPLETE trials the study should hold (default: one per budget and the base)",
                      storage_help="SQLAlchemy URL (default: sqlite under runs/<study>-dp/search/study.db)")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    if not args.config:
        raise LatoptError("latopt plan needs --config FILE")
    if args.budgets is not None and (args.budget is not None or args.plan_only):
        raise LatoptError("--budgets is the DP's study (without --budget); --budget B is one plan")
    if args.out is not None and not args.plan_only:
        raise LatoptError("--out applies to --plan-only (a DP run writes runs/<study>/search/dp-budget<B>/)")
    budgets = _budgets(args.budgets)   # before anything is loaded or run
    from latopt.dp.select import check_budget

    budget = None if args.budget is None else check_budget(args.budget)
    # the DP's settings are the config's dp section: the flags given override it (workers are handed the config)
    overrides = {**_overrides(args.overrides), "method": "dp", "dp.importance": args.importance,
                 "dp.variants": _variants(args.variants), "dp.budgets": None if budgets is None else list(budgets)}
    if args.budget_rounds is not None:
        from latopt.dp.budgetloop import check_rounds

        overrides["dp.budget_rounds"] = check_rounds(args.budget_rounds, "budget_rounds")
    # start-up time: Optuna and the training stack load when a plan is made, not for `latopt --help`
    from latopt.search import SearchOptions, plan_confirmation, plan_file, plan_report, run_plan
    from latopt.training.loop import seed_everything

    seed_everything(args.seed)
    if args.plan_only:
        if budget is None:
            raise LatoptError("a plan needs a budget (a fraction of the as-is LUT latency, e.g. 0.6)", param="budget")
        from latopt.dp import format_plan_summary

        print(format_plan_summary(*plan_file(SearchOptions(
            config=args.config, study=args.study, base=args.base, lut=args.lut, seed=args.seed,
            runs_dir=args.runs_dir, threads=args.threads, overrides=overrides), budget, args.out)))
        return 0
    res = run_plan(SearchOptions(
        config=args.config, trials=args.trials, storage=args.storage, study=args.study,
        objective=args.objective, max_acc_drop=args.max_acc_drop, measure=args.measure, timeout=args.timeout,
        base=args.base, lut=args.lut, seed=args.seed, runs_dir=args.runs_dir,
        heartbeat_interval=args.heartbeat_interval, grace_period=args.grace_period, workers=args.workers,
        threads=args.threads, summary=not args.no_summary, overrides=overrides), budget)
    if budget is not None:   # the applied plan and its confirmation
        from latopt.dp import format_dp_summary

        print(format_dp_summary(plan_report(res)))
        print(plan_confirmation(res))
        return 0
    if not args.no_summary:
        _print_front(res.summary, res.files)
    return 0
