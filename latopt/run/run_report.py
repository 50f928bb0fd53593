"""The report of ``latopt run``: REPORT.md, the per-block latency chart, the Pareto plot, the one-screen summary.

Public API::

    write_report(root, cfg, lut, base, srch, exported, times, plan=None) -> summary str   exported: the export record
    constraint_lines(srch, acc_before, acc_after) -> lines   the constraint, the confirmed drop, the test drop
    latency_chart(lut, folded, path) -> Path      per-block LUT times, as-is and folded, the folded blocks marked
    action(why) -> str                            what an invocation did with a stage, from its plan entry
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from latopt.export.export_record import ExportRecord
from latopt.files.artifacts import write_bytes_atomic, write_figure_atomic, write_text_atomic
from latopt.layerfold import undertrained_warning
from latopt.methods import get_method
from latopt.run.run_record import BaseStage, SearchPick
from latopt.run.state import NOT_RUN_YET


def latency_chart(lut: Any, folded: Mapping[int, str], path: Path) -> Path:
    """Per-block bar chart: LUT time as-is and folded; the blocks of the exported fold set marked."""
    idx = [b.index for b in lut.blocks]
    asis = [b.ms["none"] for b in lut.blocks]
    full = [b.ms.get("full", float("nan")) for b in lut.blocks]
    fig = Figure(figsize=(max(6, 0.45 * len(idx) + 2), 3.6))
    ax = fig.subplots()
    w = 0.4
    ax.bar([i - w / 2 for i in idx], asis, w, label="as-is", color="#8a9bb0")
    ax.bar([i + w / 2 for i in idx], full, w, label="folded (full)", color="#e3a857")
    for i in idx:
        if i in folded:
            ax.annotate("F", (i, max(asis[i], full[i] if full[i] == full[i] else 0)), ha="center", va="bottom",
                        fontsize=9, fontweight="bold", color="#b03a2e")
    ax.set_xticks(idx)
    ax.set_xlabel("block (F = folded in the exported network)")
    ax.set_ylabel("LUT latency (ms)")
    ax.set_title(f"{lut.model} @{lut.resolution} on {lut.device}")
    ax.legend()
    fig.tight_layout()
    return write_figure_atomic(path, fig, dpi=110)


def write_report(root: Path, cfg: Any, lut: Any, base: BaseStage, srch: SearchPick,
                 exported: ExportRecord, times: dict[str, float], plan: dict[str, str | None] | None = None) -> str:
    """REPORT.md (+ the per-block chart and the Pareto plot) in ``root``; returns the one-screen summary.

    ``exported``: the export stage's record; ``plan``: what this invocation did with each stage (None = reused,
    else why it was re-run)."""
    folded = {int(k): v for k, v in exported.folded.items()}
    latency_chart(lut, folded, root / "latency_blocks.png")
    pareto = Path(srch.pareto_png)
    if pareto.is_file():
        write_bytes_atomic(root / "pareto.png", pareto.read_bytes())
    lat = exported.latency
    acc_after = None if exported.accuracy is None else exported.accuracy.test_acc
    acc_before = base.test_acc
    method = get_method(cfg.method)
    lines = [
        f"latopt run — {cfg.name}: {cfg.model.name} on {cfg.data.task} @{cfg.data.resolution}, device {lut.device}",
        f"  method          {method.name}: {method.does}"
        + (f" ({srch.trials} trials)" if srch.trials else "") + f" — {_why_method(cfg)}",
        f"  folded blocks   {len(folded)}/{len(lut.foldable())}: {sorted(folded) or 'none'}"
        + (f"  (trial {srch.trial}: {_params(srch.params)})" if srch.trial is not None and not srch.is_base else ""),
        f"  test accuracy   {_pct(acc_before)} → {_pct(acc_after)}",
    ]
    ran = plan is None or plan.get("search") is not None    # a reused stage's time is its reuse, not its cost
    tuning = _fine_tuning(cfg, srch, times.get("search") if ran else None)
    if tuning:
        lines.append(f"  fine-tuning     {tuning}")
    if lat is not None and not folded:   # the network as it is: nothing was made faster, and why
        lines.append(f"  shipped         the network as it is, unchanged: {_why_unchanged(srch)}")
    elif lat is not None and lat.count_unit:   # a count device: counts, not times
        lines += [f"  cost            {lat.as_is_ms:.3f} → {lat.folded_ms:.3f} {lat.count_unit} (counted, not measured: "
                  f"{lat.speedup:.2f}× fewer)"]
    elif lat is not None:
        lines += [f"  latency         {lat.as_is_ms:.3f} ms → {lat.folded_ms:.3f} ms (measured in this run, "
                  f"median of {lat.repeats.as_is}/{lat.repeats.folded} interleaved repeats)",
                  f"  speed-up        {lat.speedup:.2f}× (quartile range {lat.speedup_range[0]:.2f}–"
                  f"{lat.speedup_range[1]:.2f}×)"]
        if lat.lut_speedup is not None and lat.lut_speedup_error is not None:
            when = f" timed {lat.lut_created}" if lat.lut_created else ""
            clock = f", {lat.clock} clock" if lat.clock else ""
            lines.append(f"  LUT prediction  {lat.lut_speedup:.2f}× (per-block sums from the LUT{when}{clock}; "
                         f"{lat.lut_speedup_error:+.1%} against the speed-up measured in this run)")
    lines += constraint_lines(srch, acc_before, acc_after)
    if srch.note:
        lines.append(f"  note            {srch.note}")
    warning = undertrained_warning(acc_before, acc_after, None if exported.accuracy is None else exported.accuracy.samples)
    if warning:
        lines.append(f"  warning         {warning}")
    plan = plan or {}
    lines.append(f"  stages          {'; '.join(f'{s} {action(plan[s])}' for s in times if s in plan)}"
                 if plan else f"  stages          {', '.join(times)} ran")
    summary = "\n".join(lines)
    md = [f"# latopt run: {cfg.name}", "", "```", summary, "```", "",
          "## Per-block latency (LUT)", "", "![per-block latency](latency_blocks.png)", ""]
    if (root / "pareto.png").is_file():
        md += ["## Pareto front (search)", "", "![Pareto front](pareto.png)", ""]
    md += ["## Stages", "", "| stage | this invocation | seconds |", "|---|---|---|"]
    md += [f"| {k} | {action(plan[k]) if k in plan else 'ran'} | {v:.1f} |" for k, v in times.items()]
    md += ["", "## Artefacts", "", f"- base checkpoint: `{base.checkpoint}`",
           f"- search study: `{srch.study_dir}`", f"- export: `{root / 'export'}` (see its REPORT.md)", ""]
    write_text_atomic(root / "REPORT.md", "\n".join(md))
    return summary


def _fine_tuning(cfg: Any, srch: SearchPick, seconds: float | None) -> str | None:
    """What the DP's candidates were fine-tuned with, and what the search stage cost: every candidate
    ``fold.post_epochs``, the refined few ``dp.refine_epochs`` again (None for another method)."""
    if cfg.method != "dp":
        return None
    f = cfg.fold
    out = f"every candidate {f.post_epochs} epoch(s)"
    if srch.refined:
        out += (f", the {len(srch.refined)} fastest within reach of the constraint again with {cfg.dp.refine_epochs} "
                f"(trials {', '.join(map(str, srch.refined))})")
    out += f"; distillation {f.distill}" + ("" if seconds is None else f"; search stage {seconds / 60:.1f} min")
    return out


def _why_method(cfg: Any) -> str:
    """Why this method ran: the config names it, or it is latopt's default (the one measured best)."""
    if "method" in cfg.model_fields_set:
        return f"the config's method ({cfg.method})"
    return "latopt's default, the method measured best (docs/pruning.md)"


def constraint_lines(srch: SearchPick, acc_before: float | None, acc_after: float | None) -> list[str]:
    """The accuracy constraint and how the shipped network keeps it: the constraint; the drop confirmed on the
    held-out validation images with its one-sided bound (:mod:`latopt.search._confirm`) and the faster trials it
    rejected; the test drop (base → exported network, both on the test split, read for these figures only)."""
    m = srch.max_acc_drop
    if m is None:
        return []
    lines = [f"  constraint      accuracy drop ≤ {_pt(m)} (search.max_acc_drop), chosen on validation only"]
    split, c = srch.confirm_split, srch.confirm
    if split is not None and c is not None:
        if c.level is None:   # the base trial: the same network, drop 0 by definition
            lines.append("  confirmed drop  0 (the base model itself: no folded trial was confirmed)")
        else:
            lines.append(f"  confirmed drop  {_pt(c.drop, sign=True)} on {c.n} held-out validation images "
                         f"({c.lost} lost, {c.won} won), ≤ {_pt(c.bound, sign=True)} at {c.level:.0%} "
                         f"one-sided (exact unconditional bound, candidates in a fixed sequence; seed {split.seed})")
    rejected = [(r.trial, c) for r in srch.rejected if (c := r.confirmation) is not None]
    untested = [r.trial for r in srch.rejected if r.confirmation is None and (r.why or "").startswith("not tested")]
    counted = [f"trial {r.trial} ({r.why})" for r in srch.rejected if r.confirmation is None and r.trial not in untested]
    if rejected or counted:
        lines.append("  not confirmed   " + "; ".join([*(f"trial {t} (drop {_pt(c.drop, sign=True)}, bound "
                                                        f"{_pt(c.bound, sign=True)})" for t, c in rejected), *counted])
                     + (f"; faster, not tested: {', '.join(f'trial {t}' for t in untested)}" if untested else ""))
    if acc_before is not None and acc_after is not None:
        drop = acc_before - acc_after
        verdict = "within the constraint" if drop <= m + 1e-12 else f"over the constraint by {_pt(drop - m)}"
        lines.append(f"  test drop       {_pt(drop, sign=True)} ({_pct(acc_before)} → {_pct(acc_after)}): {verdict}")
    return lines


def _params(params: Mapping[str, Any]) -> str:
    """A trial's sampled parameters, short (Layer Folding's λ_c and τ; the DP's budget)."""
    names = {"lambda_c": "λ_c", "tau": "τ"}
    return ", ".join(f"{names.get(k, k)}={v:.3g}" for k, v in params.items() if k in ("lambda_c", "tau", "budget")
                     and isinstance(v, float))


def _why_unchanged(srch: SearchPick) -> str:
    """Why the base was shipped, and what would change it."""
    if srch.rejected:
        return ("no candidate's accuracy drop was confirmed within the constraint on the held-out validation images; "
                "a looser search.max_acc_drop, a longer fine-tune (fold.post_epochs) or a larger validation split "
                "could confirm one")
    if srch.trials is not None and srch.trials <= 1:
        return "the search ran the base trial only; give more trials (--trials)"
    return ("no candidate was within the constraint on the selection part of the validation split; a looser "
            "search.max_acc_drop or a longer fine-tune (fold.post_epochs) could give one")


def _pt(x: float, *, sign: bool = False) -> str:
    """An accuracy difference (a fraction) in points."""
    return f"{100 * x:+.2f} pt" if sign else f"{100 * x:.2f} pt"


def action(why: str | None) -> str:
    """What an invocation did with a stage, from its plan entry (:func:`latopt.run.pipeline.plan_stages`):
    ``reused``, ``ran (new)`` (no earlier result, or ``--fresh``), ``re-run: <what changed>``."""
    if why is None:
        return "reused"
    if why in (NOT_RUN_YET, "--fresh"):
        return "ran (new)" if why == NOT_RUN_YET else "ran (new: --fresh)"
    return f"re-run: {why}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}%"
