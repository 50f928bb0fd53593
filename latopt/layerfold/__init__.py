"""Layer Folding: pre-fold (σ_α + compression loss), fold at τ, check, post-fold, report.

What ``latopt fold`` runs and every ``latopt search`` trial runs. One job per module:

    penalty.py   the compression loss L_c and the block times it weighs (its derivation is there)
    phases.py    pre-fold, the plan from the α's, fold + check + post-fold (optimisation, unfolded α, fold check)
    stage.py     run_fold: the whole stage on a config, its FoldResult and the fold directory it writes
    record.py    the report as a record (report.json, written and read there): LayerFoldReport, FoldReport
    report.py    the report as text (summary, report.txt, the lines a DP report shares)

Public API::

    run_fold(cfg, base_checkpoint, out_dir, *, progress=True, seed=0, task=None) -> FoldResult
        the whole stage with cfg.fold (λ_c, τ, p, granularity, distill, mode) and cfg.lut (c_l; none: uniform);
        writes folded.pt, prefold.pt, report.json, report.txt and config.yaml
    FoldResult(model, report, paths)          the folded network, its report (a LayerFoldReport; the DP's: a
                                              latopt.dp.plan_record.DPReport), the files written
    FoldOutcome                               what folding a plan made besides the network (phases.py)
    LayerFoldReport, FoldReport, read_report(path, cls)      report.json as a record (record.py)
    check_base(cfg, base_checkpoint, task) -> (model, arch, meta)   a base checkpoint fit to fold with ``cfg``
    prefold, Prefolded, plan_from_alphas, fold_and_finetune, fold_plan_and_finetune
                                              the training phases (their signatures: phases.py)
    write_fold_outputs(out_dir, cfg, report, folded, info, arch, test_loader, seed, text, accel=None)
        -> FoldResult                         folded.pt / prefold.pt / report.* / config.yaml, as export reads them
    CompressionLoss(alphas, *, p, variant_times)             L_c over the α parameters (a callable)
    block_variant_times(blocks, *, costs=None, lut=None, granularity="block") -> {block: {variant: t}}
    format_summary(report) -> str;  format_report(report) -> str
    report_tail(report, rows, *, check_prefix="") -> [str]   accuracy rows, fold check, FLOPs, params
    undertrained_warning(base_acc, folded_acc, test_samples) -> str | None   a fold that beats its base
"""

from latopt.layerfold.fold_record import FoldReport, LayerFoldReport, read_report
from latopt.layerfold.fold_report import format_report, format_summary, report_tail, undertrained_warning
from latopt.layerfold.fold_stage import (
    FOLDED_CHECKPOINT,
    PREFOLD_CHECKPOINT,
    REPORT_SCHEMA,
    FoldResult,
    check_base,
    run_fold,
    write_fold_outputs,
)
from latopt.layerfold.penalty import CompressionLoss, block_variant_times
from latopt.layerfold.phases import (
    FoldOutcome,
    Prefolded,
    fold_and_finetune,
    fold_plan_and_finetune,
    plan_from_alphas,
    prefold,
)

__all__ = [
    "FOLDED_CHECKPOINT",
    "PREFOLD_CHECKPOINT",
    "REPORT_SCHEMA",
    "CompressionLoss",
    "FoldOutcome",
    "FoldReport",
    "FoldResult",
    "LayerFoldReport",
    "Prefolded",
    "block_variant_times",
    "check_base",
    "fold_and_finetune",
    "fold_plan_and_finetune",
    "format_report",
    "format_summary",
    "plan_from_alphas",
    "read_report",
    "prefold",
    "report_tail",
    "run_fold",
    "undertrained_warning",
    "write_fold_outputs",
]
