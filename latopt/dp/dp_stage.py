"""The DP method: choose a variant per block under a latency budget, then apply it (fold + fine-tune)."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch

from latopt.config import RunConfig
from latopt.data import Task, load_task, make_loaders
from latopt.dp.importance import candidates, check_importance, variant_losses
from latopt.dp.plan_record import DPReport, Selection
from latopt.dp.select import check_budget
from latopt.errors import LatoptError
from latopt.latency.lut import LUT, check_blocks, load_lut
from latopt.layerfold import FoldResult, check_base, fold_plan_and_finetune, report_tail, write_fold_outputs
from latopt.log import get_logger
from latopt.nets.blocks import find_blocks
from latopt.nets.models import model_cost
from latopt.training.accel import resolve
from latopt.training.loop import evaluate
from latopt.training.losses import check_loss_config, training_loss

REPORT_SCHEMA = DPReport.SCHEMA
_LOG = get_logger("dp")


def run_dp(cfg: RunConfig, base_checkpoint: str | Path, out_dir: str | Path, *, lut: LUT | str | Path,
           budget: float, importance: str = "proxy", losses: Mapping[int, Mapping[str, float]] | None = None,
           variants: Iterable[str] | None = None, seed: int = 0, progress: bool = True,
           task: Task | None = None, budget_rounds: int | None = None) -> FoldResult[DPReport]:
    """Select a plan with the DP (:func:`select_plan`) and apply it: fold exactly (checked against the variant
    network), fine-tune, write ``out_dir`` as ``latopt fold`` does (folded.pt, prefold.pt = the base network
    the fold is recomputed from, report.json, report.txt, config.yaml) so ``latopt export`` ships it with all
    its gates. The fold mode and distillation are ``cfg.fold``'s (``mode``, ``distill``: one training loss, its
    teacher built once, for the fine-tune and a ``finetune`` importance, :func:`latopt.training.losses.training_loss`; an
    unknown name is one line before anything runs). ``losses`` (else
    computed by ``importance``) may hold a subset of the variants; ``variants`` limits the candidates (default:
    every variant of the LUT). The plan is measured on the LUT's device and re-solved until it meets the budget
    when measured (:func:`latopt.dp.budgetloop.meet_budget`: at most ``budget_rounds`` plans, default
    ``cfg.dp.budget_rounds``; 0 = the LUT's plan, not measured); report.json's ``budget_loop`` records each
    round. Returns the folded network, the report and the paths (:class:`FoldResult`)."""
    t_start = time.perf_counter()
    mode, distill = cfg.fold.mode, cfg.fold.distill
    check_loss_config(cfg)
    check_importance(importance)
    check_budget(budget)
    lut_path = str(lut) if isinstance(lut, (str, Path)) else None
    cfg = cfg.with_overrides({"lut": lut_path})
    task = task or load_task(cfg)
    base, arch, _ = check_base(cfg, base_checkpoint, task)
    if lut_path is not None:
        if not Path(lut_path).is_file():
            raise LatoptError(f"LUT {lut_path} does not exist; profile the device first (latopt profile, with the "
                              "variants full, pw and drop)", param="lut")
        lut = load_lut(lut_path, model=arch.model, resolution=cfg.data.resolution, fold_mode=cfg.fold.mode)
    assert isinstance(lut, LUT)  # loaded from lut_path, or given as one
    check_blocks(lut, find_blocks(base), lut_path or "the LUT")
    cands = candidates(lut, variants)
    accel = resolve(cfg)      # evaluation and fine-tuning on train.device; the fold and its check on the CPU
    loss = training_loss(cfg, base, accel=accel)
    t0 = time.perf_counter()
    if losses is None:
        losses = variant_losses(cfg, base, task, cands, method=importance, seed=seed, progress=progress, loss=loss)
        source = importance
    else:
        source = "given"
    losses = {b: {v: float(x) for v, x in ls.items() if v in cands.get(b, ())} for b, ls in losses.items()}
    t_imp = time.perf_counter() - t0
    from latopt.dp.budgetloop import meet_budget

    rounds = cfg.dp.budget_rounds if budget_rounds is None else budget_rounds
    plan, sel, loop = meet_budget(lut, losses, budget, rounds=rounds, device=cfg.device, progress=progress)
    if progress:
        _LOG.info(f"DP at budget {budget}: {len(plan)} blocks changed {plan}; predicted {sel.predicted_ms:.3f} ms "
                  f"= {sel.ratio:.3f} of as-is {sel.asis_ms:.3f} ms; total loss {sel.loss:.4f}")
    _, val_loader, test_loader = make_loaders(task, cfg.data.batch_size, seed, accel=accel)
    base.eval()
    on_device = accel.prepare(copy.deepcopy(base)).eval()
    acc, val = {"base": evaluate(on_device, test_loader, accel)}, {"base": evaluate(on_device, val_loader, accel)}
    folded, info = fold_plan_and_finetune(cfg, base, plan, task, mode=mode, progress=progress, loss=loss,
                                          seed=seed, accel=accel)
    # torch's stubs of Module.to lack memory_format, which it takes (as Tensor.to does)
    folded.to("cpu", memory_format=torch.contiguous_format).eval()  # type: ignore[call-overload]
    acc |= info.acc
    val |= info.val
    res = cfg.data.resolution
    cost_base, cost_folded = model_cost(base, res), model_cost(folded, res)
    report = DPReport.model_validate({
        "method": "dp", "model": arch.model, "task": task.name, "resolution": res,
        "seed": seed, "base_checkpoint": str(base_checkpoint), "lut": lut_path, "mode": mode, "distill": distill,
        "importance": source, "budget": budget, "selection": sel, "budget_loop": loop, "losses": {str(b): ls for b, ls in sorted(losses.items())},
        "folded": {str(k): v for k, v in plan.items()}, "n_blocks": len(find_blocks(base)), "n_folded": len(plan),
        "acc": acc, "val": val, "val_acc_finetuned": val["finetuned"], "test_samples": task.sizes()["test"],
        "flops": {"base": cost_base.flops, "folded": cost_folded.flops},
        "params": {"base": cost_base.params, "folded": cost_folded.params},
        "latency_pred_ms": {"asis": sel.asis_ms, "folded": sel.predicted_ms},
        "fold_check": info.fold_check, "history": {"postfold": info.postfold_history}, "agreement": info.agreement,
        "seconds": {"importance": t_imp, **info.seconds, "total": time.perf_counter() - t_start},
    }, strict=False)
    return write_fold_outputs(out_dir, cfg, report, folded, info, arch, test_loader, seed, format_dp_report, accel)


def apply_plan(cfg: RunConfig, base_checkpoint: str | Path, out_dir: str | Path, plan: Mapping[int | str, str], *,
               lut: LUT | str | Path, seed: int = 0, progress: bool = True, task: Task | None = None
               ) -> FoldResult[DPReport]:
    """A plan chosen elsewhere ({block: variant}, e.g. Layer Folding's fold set) applied as :func:`run_dp`
    applies its own: folded exactly, checked, fine-tuned and written to ``out_dir``. A variant the LUT does not
    offer for its block is refused first, in one line. The DP is asked at budget 1
    with losses under which ``plan`` is its only loss-free choice (each of its blocks: the variant 0, as-is 1;
    every other block stays as it is) and without the budget loop, so the report is a
    :class:`DPReport` like any other (``importance`` "given", ``selection`` the plan's LUT prediction). A plan
    that is not the DP's choice (a variant the LUT lacks, a plan slower than as-is, or one the LUT's timed spans
    would merge) is refused in one line."""
    want = {int(b): v for b, v in plan.items() if v != "none"}
    if not want:
        raise LatoptError("the plan changes no block: there is nothing to apply", param="plan")
    offered = candidates(lut if isinstance(lut, LUT) else load_lut(lut))
    for b, v in sorted(want.items()):
        if v not in offered.get(b, ()):
            raise LatoptError(f"the plan gives block {b} the variant {v!r}, which the LUT does not offer there (it "
                              f"offers {', '.join(offered.get(b, ('none',)))}); give variants the LUT times",
                              param="plan")
    losses = {b: {"none": 1.0, v: 0.0} for b, v in want.items()}
    result = run_dp(cfg, base_checkpoint, out_dir, lut=lut, budget=1.0, losses=losses, seed=seed, progress=progress,
                    task=task, budget_rounds=0)
    got = {int(b): v for b, v in result.report.folded.items()}
    if got != want or result.report.spans:
        raise LatoptError(f"the DP applied {got} (spans {result.report.spans}), not the plan {want} it was given; "
                          "give a plan of variants the LUT times, no slower than the network as it is")
    return result


def format_dp_report(r: DPReport) -> str:
    from latopt.dp.budgetloop import format_loop

    s = r.selection
    solved = "" if r.budget == s.budget else f", solved at {s.budget:.4f} by the budget loop"
    lines = [f"latopt DP report: {r.model} on {r.task} @ {r.resolution}px, seed {r.seed}",
             f"budget {r.budget}{solved} of the as-is LUT latency {s.asis_ms:.4f} ms (target {s.target_ms:.4f} ms); "
             f"importance {r.importance}; mode {r.mode}; lut {r.lut}",
             "", f"{'block':>5}  {'variant':<10} {'loss':>9}   candidates (loss)"]
    for k, ls in r.losses.items():
        v = r.folded.get(k, "none")
        others = "  ".join(f"{name} {x:.4f}" for name, x in ls.items() if name != v)
        chosen = next((x for name, x in ls.items() if name == v), 0.0)
        lines.append(f"{k:>5}  {v:<10} {chosen:>9.4f}   {others}")
    lines += ["", f"changed {r.n_folded}/{r.n_blocks} blocks; total loss {s.loss:.4f}",
              f"LUT-predicted {_cost(s)} {s.asis_ms:.4f} {s.unit} → {s.predicted_ms:.4f} {s.unit} ({s.ratio:.3f} of as-is, "
              f"{s.asis_ms / s.predicted_ms:.3f}x)", *format_loop(r.budget_loop)]
    lines += report_tail(r, (("base", "base"), ("linearized", "variant network"), ("folded", "folded, before FT"),
                             ("finetuned", "folded, fine-tuned")))
    lines.append(f"checkpoint {r.checkpoint}")
    return "\n".join(lines) + "\n"


def _cost(s: Selection) -> str:
    """What a selection's figures are: a latency (ms), or a count device's count (its unit)."""
    return "latency" if s.unit == "ms" else "count"


def format_dp_summary(r: DPReport) -> str:
    from latopt.dp.budgetloop import loop_summary

    s, a = r.selection, r.acc
    return (f"DP at budget {r.budget}: changed {r.n_folded}/{r.n_blocks} blocks {dict(r.folded)}; "
            f"LUT {_cost(s)} {s.asis_ms:.3f} → {s.predicted_ms:.3f} {s.unit} ({s.asis_ms / s.predicted_ms:.2f}x)"
            f"{loop_summary(r.budget_loop)}; test acc base "
            f"{a.base:.4f}, variant network {a.linearized:.4f}, fine-tuned {a.finetuned:.4f}"
            + ("" if r.agreement is None else f" (before fine-tuning {100 * r.agreement:.1f} % of validation "
               "predictions the base's)") + "; "
            f"wrote {r.checkpoint}")
