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
                    "fine-tuned into runs/<study>/search/dp-budget<B>/; --plan-only writes the plan file alone "
                    "(apply it with latopt export --plan). Without --budget: a study <study>-dp of one such trial "
                    "per budget of --budgets, its Pareto front printed at the end (latopt search --show --study "
                    "<study> draws it beside Layer Folding's); a rerun resumes it.")
    p.add_argument("--config", help="run config: a YAML path or a shipped config's name")
    p.add_argument("--budget", type=float,
                   help="predicted latency <= BUDGET x the as-is LUT latency (a fraction in (0, 1]); "
                        "default: a study over --budgets")
    p.add_argument("--budgets", help="without --budget: the budgets of the DP's study, one fine-tuned "
                                     "trial each, comma-separated, each in (0, 1] and given once "
                                     "(default 0.5,0.6,0.7,0.8,0.9)")
    p.add_argument("--plan-only", action="store_true",
                   help="write the plan (a variant per block, predicted latency and speed-up) to --out "
                        "and stop: nothing is trained or fine-tuned, seconds; --importance uniform needs no "
                        "checkpoint, proxy needs --base. Apply it with latopt export --plan")
    p.add_argument("--out", help="--plan-only: the plan file (default: runs/<study>/search/plan-budget<B>.json)")
    p.add_argument("--importance", choices=IMPORTANCE_METHODS, default="proxy",
                   help="how each (block, variant) is scored: proxy (validation loss of the variant "
                        "alone, BN re-estimated; default), finetune (short fine-tune each; slow), uniform")
    p.add_argument("--variants", help="variants the blocks may take, comma-separated (default: the LUT's)")
    p.add_argument("--budget-rounds", type=int, metavar="N",
                   help="the budget loop: each plan is timed against the as-is network on the LUT's "
                        "device and the DP re-solved with the budget corrected by the measurement, until one "
                        "measures within [B - 3 %%, B + 2 %%] or N plans are measured (default: "
                        "search.budget_rounds, 3); 0 = off (the LUT's plan). Count devices and devices that cannot "
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
    budgets = _budgets(args.budgets)   # before anything is loaded or run
    overrides = _overrides(args.overrides)
    if args.budget_rounds is not None:   # the config key it sets (the DP's study hands its trials the config)
        from latopt.dp.budgetloop import check_rounds

        overrides["search.budget_rounds"] = check_rounds(args.budget_rounds, "budget_rounds")
    # start-up time: Optuna and the training stack load when a plan is made, not for `latopt --help`
    from latopt.engine import seed_everything
    from latopt.search import PlanOptions, SearchOptions, run_dp_search, run_search

    seed_everything(args.seed)
    if args.budget is not None or args.plan_only:
        from latopt.dp import format_dp_summary, format_plan_summary

        if args.out is not None and not args.plan_only:
            raise LatoptError("--out applies to --plan-only (a DP run writes runs/<study>/search/dp-budget<B>/)")
        done = run_dp_search(SearchOptions(
            config=args.config, study=args.study, base=args.base, lut=args.lut, seed=args.seed,
            runs_dir=args.runs_dir, threads=args.threads, overrides=overrides,
            plan=PlanOptions(budget=args.budget, importance=args.importance, variants=_variants(args.variants),
                             plan_only=args.plan_only, plan_out=args.out)))
        if isinstance(done, tuple):  # --plan-only: the plan and its file
            print(format_plan_summary(*done))
        else:                        # the applied plan (a FoldResult)
            print(format_dp_summary(done.report))
        return 0
    res = run_search(SearchOptions(
        config=args.config, trials=args.trials, storage=args.storage, study=args.study,
        objective=args.objective, max_acc_drop=args.max_acc_drop, measure=args.measure, timeout=args.timeout,
        base=args.base, lut=args.lut, seed=args.seed, runs_dir=args.runs_dir,
        heartbeat_interval=args.heartbeat_interval, grace_period=args.grace_period, workers=args.workers,
        threads=args.threads, summary=not args.no_summary, overrides=overrides,
        plan=PlanOptions(importance=args.importance, variants=_variants(args.variants), budgets=budgets)))
    if not args.no_summary:
        _print_front(res.summary, res.files)
    return 0
