"""Budgeted selection of block variants: an exact dynamic program over the device's LUT.

Each block takes exactly one variant — ``none`` (as it is), ``full``, ``expand_dw``, ``dw_project``
(Layer Folding's folds), ``pw`` (depthwise conv removed) or ``drop`` (a residual block removed;
:mod:`latopt.rewrite.transform` defines each variant network) — so that the LUT-predicted latency is at most
``budget`` × the as-is prediction and the summed importance loss is least (a multiple-choice knapsack,
solved exactly over discretised latency: :mod:`latopt.dp.knapsack`). The chosen plan is then applied:
folded exactly (checked against its variant network), fine-tuned directly (``fold.post_epochs`` at
``fold.post_lr``; no σ_α pre-fold: a ``pw`` or ``drop`` has no α to anneal), and written as ``latopt
fold`` writes a fold (``folded.pt`` with its plan, ``prefold.pt``, ``report.json``), so ``latopt export``
ships it with all its gates. Where the LUT times merged spans (``latopt profile --variants ...,span``) the DP
also chooses runs of blocks merged into one convolution (:mod:`latopt.dp.span_options`); export merges them. ``latopt plan --budget 0.6`` is the command.

API (what a caller such as a method-comparison tool uses)::

    from latopt.dp import candidates, variant_losses, select_plan, run_dp

    lut = load_lut(path)                      # profiled with: latopt profile --variants full,pw,drop
    cands = candidates(lut, variants=None)    # {block: ("none", "full", "pw", ...)}: what each block may take
    losses = variant_losses(cfg, base_model, task, cands, method="proxy")   # {block: {variant: loss}}
                                              # methods: proxy (cheap), finetune (expensive), uniform
    plan, info = select_plan(lut, losses, budget=0.55)   # {block: variant}; info: a Selection (.predicted_ms,
                                              # .ratio, .spans, ...; spans=False: without the LUT's timed spans)
    result = run_dp(cfg, base_checkpoint, out_dir, lut=lut_path, budget=0.55, importance="proxy",
                    losses=None, variants=None, seed=0, progress=True, task=None, budget_rounds=None)
        # the plan measured on the LUT's device and re-solved until it meets the budget when measured (the budget
        # loop, latopt.dp.budgetloop.meet_budget; budget_rounds default cfg.dp.budget_rounds, 0 = off)
        # select + fold + check + fine-tune + write out_dir, in cfg.fold.mode, distilled as cfg.fold.distill says;
        # a latopt.layerfold.FoldResult: result.model (the folded network), result.report (a DPReport,
        # latopt.dp.plan_record: .checkpoint is the folded.pt to export; .val_acc_finetuned, .acc.finetuned,
        # .selection.predicted_ms, .budget_loop) and result.paths
    result = apply_plan(cfg, base_checkpoint, out_dir, {3: "full", 7: "pw"}, lut=lut_path)
        # a plan chosen elsewhere (e.g. Layer Folding's fold set) applied as run_dp applies its own

    solve(options, capacity, *, resolution=20000) -> Solution | None   the knapsack alone
    solve_chain(options, spans, capacity, *, resolution=20000) -> Solution | None
        # with spans {(start, end): {option: (cost, loss)}} replacing consecutive blocks (latopt.dp.span_options)
    check_budget(budget) -> float;  check_importance(method) -> str;  format_dp_report / format_dp_summary -> str
    IMPORTANCE_METHODS, REPORT_SCHEMA

    plan = plan_only(cfg, lut_path, budget=0.55, importance="uniform")   # no training: a PlanRecord
                                              # (measured by the budget loop; budget_rounds=0: the LUT's plan)
    plan, info, record = meet_budget(lut, losses, budget=0.55, rounds=3, device="cpu")   # select_plan + the loop:
                                              # a Selection and a BudgetLoop record (latopt.dp.plan_record)
    write_plan("plan.json", plan);  read_plan(path);  check_plan(plan, path, model=..., resolution=..., num_classes=...)
    plan.changed -> {block: variant}   (latopt.dp.planfile: the file's schema, PLAN_SCHEMA)

Losses are per (block, variant) and assumed to add up over blocks; ``losses`` may be given (e.g. computed
once and reused across budgets: ``variant_losses`` is the expensive part, ``select_plan`` takes
milliseconds).
"""

from latopt.dp.budgetloop import meet_budget
from latopt.dp.dp_stage import REPORT_SCHEMA, apply_plan, format_dp_report, format_dp_summary, run_dp
from latopt.dp.importance import IMPORTANCE_METHODS, candidates, check_importance, val_loss, variant_losses
from latopt.dp.knapsack import Solution, solve, solve_chain
from latopt.dp.plan_record import BudgetLoop, DPReport, Selection
from latopt.dp.planfile import (
    PLAN_SCHEMA,
    PlanRecord,
    check_plan,
    format_plan_summary,
    plan_only,
    read_plan,
    write_plan,
)
from latopt.dp.select import check_budget, select_plan

__all__ = [
    "BudgetLoop",
    "DPReport",
    "Selection",
    "IMPORTANCE_METHODS",
    "check_importance",
    "PLAN_SCHEMA",
    "PlanRecord",
    "REPORT_SCHEMA",
    "Solution",
    "apply_plan",
    "candidates",
    "check_budget",
    "check_plan",
    "format_dp_report",
    "format_dp_summary",
    "format_plan_summary",
    "meet_budget",
    "plan_only",
    "read_plan",
    "run_dp",
    "select_plan",
    "solve",
    "solve_chain",
    "val_loss",
    "variant_losses",
    "write_plan",
]
