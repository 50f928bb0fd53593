"""The Pareto front of a search study: selection, recommendation, table and files.

``pareto_front(study)`` is Optuna's own non-dominated set (``study.best_trials``: COMPLETE trials that
satisfy the accuracy-drop constraint). ``recommend(study, max_acc_drop)`` is the fastest trial within
``max_acc_drop`` of the base model's accuracy on the selection part of the validation split whose drop is also
*confirmed* on the held-out confirmation part (:mod:`latopt.search._confirm`: the one-sided bound within
``max_acc_drop``); ``recommendation`` says which faster trials were rejected and why. ``write_front`` writes pareto.json / .csv /
.png (and .html through ``optuna.visualization`` when plotly is installed). ``others``: studies of the same
objectives (the DP's study beside a Layer Folding study) whose fronts are summarised (``others`` in the
summary) and drawn on the same plot.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
from matplotlib.figure import Figure
from optuna.trial import FrozenTrial, TrialState

from latopt.errors import LatoptError
from latopt.files.artifacts import write_figure_atomic, write_json_atomic, write_text_atomic
from latopt.search._confirm import CONFIRM_LEVEL, confirm
from latopt.search.study_record import (
    Confirmation,
    FrontRow,
    FrontSummary,
    Recommendation,
    Rejected,
    StudyAttrs,
    TrialAttrs,
    TrialParams,
)

PARETO_SCHEMA = FrontSummary.SCHEMA
_EPS = 1e-12
REFINES = "refines"   # a trial's user attribute (TrialAttrs.refines): the trial it makes again with a longer fine-tune
COLUMNS = ("trial", "val_acc", "metric", "acc_drop", "feasible", "confirm_drop", "confirm_bound", "confirmed",
           "lambda_c", "tau", "p", "granularity", "budget", "n_folded", "base", "on_front", "on_full_front",
           "recommended", "checkpoint")


AXIS_LABELS = {"latency_ms": "LUT-predicted latency (ms), not measured",
               "measured_ratio": "measured latency / the base's, timed in one interleaved run",
               "nonlinear_layers": "non-linear layers left",
               "val_acc": "validation accuracy (selection part)"}


def complete_trials(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def base_trial(study: optuna.Study) -> FrozenTrial | None:
    """The completed base-model trial (the enqueued operating point), if any."""
    for t in complete_trials(study):
        if TrialAttrs.of(t).base:
            return t
    return None


def base_accuracy(study: optuna.Study) -> float | None:
    t = base_trial(study)
    if t is not None:
        return float(t.values[0])
    v = StudyAttrs.of(study).base_acc
    return None if v is None else float(v)


def pareto_front(study: optuna.Study) -> list[FrozenTrial]:
    """Non-dominated feasible COMPLETE trials (Optuna's ``best_trials``), fastest first."""
    return sorted(study.best_trials, key=lambda t: (t.values[1], -t.values[0], t.number))


def non_dominated(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """Trials no other trial beats on both objectives (accuracy ↑, second objective ↓), constraint ignored."""
    def dominates(a: FrozenTrial, b: FrozenTrial) -> bool:
        return (a.values[0] >= b.values[0] and a.values[1] <= b.values[1]
                and (a.values[0] > b.values[0] or a.values[1] < b.values[1]))

    out = [t for t in trials if not any(dominates(o, t) for o in trials)]
    return sorted(out, key=lambda t: (t.values[1], -t.values[0], t.number))


def recommend(study: optuna.Study, max_acc_drop: float | None = None) -> FrozenTrial | None:
    """The recommended trial (:func:`recommendation`), or None when there is none."""
    n = recommendation(study, max_acc_drop).trial
    return None if n is None else next(t for t in complete_trials(study) if t.number == n)


def trial_confirmation(study: optuna.Study, t: FrozenTrial, max_acc_drop: float) -> Confirmation | None:
    """``t``'s confirmation (:func:`latopt.search._confirm.confirm` at the study's level) from its paired counts on
    the confirmation part; None for a trial without them (a study made before the split)."""
    counts = TrialAttrs.of(t).counts
    if counts is None:
        return None
    split = StudyAttrs.of(study).confirm
    level = float(CONFIRM_LEVEL if split is None else split.level)
    return confirm(*counts, max_acc_drop, level)


def recommendation(study: optuna.Study, max_acc_drop: float | None = None) -> Recommendation:
    """The fastest COMPLETE trial whose drop below the base model is within ``max_acc_drop`` on the selection part
    of the validation split (the study's objective ``val_acc``) *and* confirmed on the confirmation part, in a fixed
    sequence (:mod:`latopt.search._confirm`): the trials within the constraint that no other such trial beats on both
    selection accuracy and latency (a trial fine-tuned again stands for the one it refines) are confirmed from the
    slowest to the fastest (ties: the more accurate, then the earlier), each by the one-sided bound at the study's
    level; the
    sequence stops at the first trial whose bound is over ``max_acc_drop`` (the faster ones are not tested), and the
    last trial confirmed before it is recommended; the base model when none is (drop 0 by definition).

    Returns a :class:`~latopt.search.study_record.Recommendation`: the trial's number (None: none, ``note`` says why),
    its confirmation, the faster trials not recommended (the one that stopped the sequence, and those after it),
    the constraint, and a note when no folded trial was confirmed. ``max_acc_drop`` defaults to the value the study
    was created with. A study made before the split (no ``confirm`` attribute) has no recommendation: the note
    says so."""
    if max_acc_drop is None:
        max_acc_drop = StudyAttrs.of(study).max_acc_drop
    if max_acc_drop is None:
        raise LatoptError("no max_acc_drop given and the study does not record one", param="max_acc_drop")
    m = float(max_acc_drop)
    if "confirm" not in study.user_attrs:
        return Recommendation(max_acc_drop=m, note="no recommendation: the study was made before latopt held out "
                              "part of the validation split to confirm it; rerun the search into a new study")
    base_acc = base_accuracy(study)
    base = base_trial(study)
    if base_acc is None or base is None:
        return Recommendation(max_acc_drop=m, note="no recommendation: the base trial has not completed yet")
    done = complete_trials(study)
    attrs = {t.number: TrialAttrs.of(t) for t in done}
    superseded = {a.refines for a in attrs.values() if a.refines is not None}   # refined: the longer version stands
    within = [t for t in done if base_acc - t.values[0] <= m + _EPS and not attrs[t.number].base
              and t.number not in superseded]
    # only the non-dominated ones: a trial another beats on both selection accuracy and latency is never shipped, and
    # in the sequence it could only stop it before the faster, more accurate trial that beats it
    sequence = sorted(non_dominated(within), key=lambda t: (-t.values[1], -t.values[0], t.number))   # slowest first
    confirmed: list[tuple[FrozenTrial, Confirmation]] = []
    rejected: list[Rejected] = []
    for i, t in enumerate(sequence):
        c = trial_confirmation(study, t, m)
        if c is not None and c.passed:
            confirmed.append((t, c))
            continue
        rejected.append(Rejected(trial=t.number, why="no confirmation counts") if c is None else
                        Rejected(trial=t.number, **c.model_dump()))
        rejected += [Rejected(trial=u.number, why=f"not tested: the sequence stopped at trial {t.number}")
                     for u in sequence[i + 1:]]
        break
    # every trial confirmed before the sequence stopped is confirmed at the family's level: the fastest of them
    # (ties: the more accurate, then the earlier)
    chosen, confirmation = min(confirmed, key=lambda tc: (tc[0].values[1], -tc[0].values[0], tc[0].number),
                               default=(base, Confirmation.of_base()))
    note = None
    if chosen is base and rejected:
        untested = sum(r.confirmation is None and (r.why or "").startswith("not tested") for r in rejected)
        how = f"{len(rejected) - untested} not confirmed" + (f", {untested} faster not tested" if untested else "")
        note = (f"no folded trial within the accuracy constraint was confirmed on the held-out validation images "
                f"({how}): the base model is recommended")
    return Recommendation(trial=chosen.number, confirm=confirmation, rejected=rejected, max_acc_drop=m, note=note)


def _feasible(t: FrozenTrial) -> bool:
    return all(v <= 0 for v in t.constraints.values())


def _row(t: FrozenTrial, base_acc: float | None, *, on_front: bool, on_full_front: bool,
         recommended: bool, confirmed: Confirmation | None) -> FrontRow:
    a, params = TrialAttrs.of(t), TrialParams.of(t)
    return FrontRow.model_validate({
        "trial": t.number,
        "val_acc": float(t.values[0]),
        "metric": float(t.values[1]),
        "acc_drop": None if base_acc is None else base_acc - float(t.values[0]),
        "feasible": _feasible(t),
        "confirm_drop": None if confirmed is None else confirmed.drop,
        "confirm_bound": None if confirmed is None else confirmed.bound,
        "confirmed": None if confirmed is None else confirmed.passed,
        "lambda_c": params.lambda_c,
        "tau": params.tau,
        "p": params.p,
        "granularity": a.granularity if params.granularity is None else params.granularity,
        "budget": params.budget,
        "n_folded": len(a.fold_set),
        "fold_set": a.fold_set,
        "base": a.base,
        "on_front": on_front,
        "on_full_front": on_full_front,
        "recommended": recommended,
        "checkpoint": a.checkpoint,
        "latency_ms": a.latency_ms,
        "measured_ms": a.measured_ms,
        "measured_ratio": a.measured_ratio,
        "nonlinear_layers": a.nonlinear_layers,
    }, strict=False)


def comparable(study: optuna.Study, others: Sequence[optuna.Study]) -> list[optuna.Study]:
    """The studies of ``others`` that optimise what ``study`` does (their fronts can share its axes)."""
    names = StudyAttrs.of(study).metric_names
    return [o for o in others if StudyAttrs.of(o).metric_names == names]


def front_summary(study: optuna.Study, max_acc_drop: float | None = None,
                  others: Sequence[optuna.Study] = ()) -> FrontSummary:
    """Everything ``--show`` prints and writes (pareto.json): front rows (+ the base row, always, and the trials the
    confirmation failed), the recommendation; ``others``: the same for each comparable study (:func:`comparable`)."""
    attrs = StudyAttrs.of(study)
    if max_acc_drop is None:
        max_acc_drop = attrs.max_acc_drop
    names = attrs.metric_names or ["objective0", "objective1"]
    front = pareto_front(study)
    front_ids = {t.number for t in front}
    chosen = recommendation(study, max_acc_drop) if max_acc_drop is not None else None
    rec = None if chosen is None or chosen.trial is None else \
        next(t for t in complete_trials(study) if t.number == chosen.trial)
    base = base_trial(study)
    base_acc = base_accuracy(study)
    full = non_dominated(complete_trials(study))
    full_ids = {t.number for t in full}
    shown = {t.number: t for t in [*front, *full]}
    tested = {r.trial for r in ([] if chosen is None else chosen.rejected) if r.why is None}   # confirmed and failed
    for extra in (base, rec, *(t for t in complete_trials(study) if t.number in tested)):
        if extra is not None:
            shown.setdefault(extra.number, extra)
    ordered = sorted(shown.values(), key=lambda t: (t.values[1], -t.values[0], t.number))
    rows = [_row(t, base_acc, on_front=t.number in front_ids, on_full_front=t.number in full_ids,
                 recommended=rec is not None and t.number == rec.number,
                 confirmed=None if max_acc_drop is None else trial_confirmation(study, t, float(max_acc_drop)))
            for t in ordered]
    counts = {s.name: 0 for s in TrialState}
    for t in study.get_trials(deepcopy=False):
        counts[t.state.name] += 1
    return FrontSummary.model_validate({
        "study": study.study_name,
        "objective": attrs.objective,
        "metric_names": list(names),
        "max_acc_drop": max_acc_drop,
        "base_acc": base_acc,
        "base_trial": None if base is None else base.number,
        "recommended": None if rec is None else rec.number,
        "recommendation": chosen,
        "confirm_split": attrs.confirm,
        "n_front": len(front),
        "n_full_front": len(full),
        "trial_states": {k: v for k, v in counts.items() if v},
        "rows": rows,
        "others": [front_summary(o, max_acc_drop) for o in comparable(study, others)],
    }, strict=False)


def format_table(summary: FrontSummary) -> str:
    metric = summary.metric_names[1]
    head = (f"{'trial':>5} {'val_acc':>8} {metric:>16} {'drop':>7} {'c.drop':>7} {'c.bound':>7} {'λ_c':>8} {'τ':>5} "
            f"{'p':>5} {'gran':>10} {'folded':>6}  note")
    lines = [f"study {summary.study!r}: objective {summary.objective}, {summary.n_front} non-dominated "
             f"feasible trial(s) ({summary.n_full_front} without the constraint); states {summary.trial_states}; "
             f"max acc drop {summary.max_acc_drop}", head]
    for r in summary.rows:
        notes = [n for n, on in (("base", r.base), ("front", r.on_front), ("RECOMMENDED", r.recommended),
                                 ("infeasible", not r.feasible),
                                 ("front without constraint", r.on_full_front and not r.on_front)) if on]
        if r.base and not r.on_front:
            notes.append("dominated")
        if r.budget is not None and not r.base:
            notes.append(f"budget {r.budget:g}")
        if r.confirmed is False and not r.base:
            notes.append("not confirmed")
        drop = "" if r.acc_drop is None else f"{r.acc_drop:+.4f}"
        cdrop, cbound = ("", "") if r.confirm_drop is None or r.confirm_bound is None else \
            (f"{r.confirm_drop:+.4f}", f"{r.confirm_bound:+.4f}")
        lines.append(f"{r.trial:>5} {r.val_acc:>8.4f} {r.metric:>16.4f} {drop:>7} {cdrop:>7} {cbound:>7} "
                     f"{_f(r.lambda_c, '8.3g')} {_f(r.tau, '5.2f')} {_f(r.p, '5.2f')} {r.granularity or '':>10} "
                     f"{r.n_folded:>6}  {', '.join(notes)}")
    lines += recommendation_lines(summary)
    return "\n".join(lines)


def recommendation_lines(summary: FrontSummary) -> list[str]:
    """What the table says under its rows about the recommendation: the split, the rejected trials, the note."""
    rec, split = summary.recommendation, summary.confirm_split
    lines = []
    if split is not None:
        lines.append(f"drop = base − trial on the selection part ({split.n_selection} validation images); c.drop, "
                     f"c.bound: on the confirmation part ({split.n_confirmation}, seed {split.seed}), the "
                     f"bound one-sided at {split.level:.0%}: {split.method}")
    if rec is not None:
        for r in rec.rejected:
            c = r.confirmation
            lines.append(f"trial {r.trial} not confirmed: confirmed drop {c.drop:+.2%} ({c.lost} lost, {c.won} won of "
                         f"{c.n}), bound {c.bound:+.2%} > {rec.max_acc_drop:.2%}" if c is not None else
                         f"trial {r.trial}: {r.why or 'no confirmation'}")
        c = rec.confirm
        if summary.recommended is not None and c is not None and c.level is not None:
            lines.append(f"recommended trial {summary.recommended}: confirmed drop {c.drop:+.2%} ({c.lost} lost, "
                         f"{c.won} won of {c.n}), bound {c.bound:+.2%} <= {rec.max_acc_drop:.2%}")
    if rec is not None and rec.note:
        lines.append(rec.note)
    elif summary.recommended is None:
        lines.append("no recommendation: no completed trial within the accuracy constraint yet")
    return lines


def _f(v: Any, spec: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return format("", spec.split(".")[0] if "." in spec else spec)
    return format(v, spec)


def write_front(study: optuna.Study, out_dir: str | Path, max_acc_drop: float | None = None,
                others: Sequence[optuna.Study] = ()) -> dict[str, Path]:
    """Write pareto.json, pareto.csv, pareto.png (+ pareto.html when plotly is installed) into ``out_dir``;
    the plot and the JSON hold the fronts of ``others`` too (the CSV holds ``study``'s rows)."""
    out = Path(out_dir)
    summary = front_summary(study, max_acc_drop, others)
    json_path = write_json_atomic(out / "pareto.json", summary.to_json())
    buf = io.StringIO()
    w = csv.writer(buf)
    metric = summary.metric_names[1]
    w.writerow([c if c != "metric" else metric for c in COLUMNS] + ["fold_set"])
    for r in summary.rows:
        fold = ";".join(f"{k}:{v}" for k, v in sorted(r.fold_set.items(), key=lambda kv: int(kv[0])))
        w.writerow([getattr(r, c) for c in COLUMNS] + [fold])
    csv_path = write_text_atomic(out / "pareto.csv", buf.getvalue())
    png = _plot_png(study, summary, out / "pareto.png", comparable(study, others))
    html = _plot_html(study, summary, out / "pareto.html")
    return {"json": json_path, "csv": csv_path, "png": png, **({} if html is None else {"html": html})}


def _targets(t: FrozenTrial) -> tuple[float, float]:
    return (t.values[1], t.values[0])


def _plot_png(study: optuna.Study, summary: FrontSummary, path: Path, others: Sequence[optuna.Study] = ()) -> Path:
    """Every COMPLETE trial (front, other feasible, infeasible), the front as a step line, the base model,
    the recommended trial and the accuracy constraint; each of ``others``: its trials, front and
    recommendation in a colour of its own."""
    names = summary.metric_names
    front = [r for r in summary.rows if r.on_front]
    on_front = {r.trial for r in front}
    trials = complete_trials(study)
    fig = Figure(figsize=(7, 5))
    ax = fig.subplots()
    for label, group, color in (
            ("infeasible trial", [t for t in trials if not _feasible(t)], "#c8c8c8"),
            ("trial", [t for t in trials if _feasible(t) and t.number not in on_front], "tab:cyan"),
            ("Pareto front", [t for t in trials if t.number in on_front], "tab:blue")):
        if group:
            label = f"{summary.study}: {label}" if others else label
            ax.scatter([t.values[1] for t in group], [t.values[0] for t in group], s=36, label=label, zorder=3,
                       edgecolors="black", linewidths=0.3, color=color)
    if front:
        ax.step([r.metric for r in front], [r.val_acc for r in front], where="post",
                color="tab:blue", alpha=0.5, lw=1)
    unconfirmed = [r for r in summary.rows if r.confirmed is False and not r.base]
    if unconfirmed:
        ax.scatter([r.metric for r in unconfirmed], [r.val_acc for r in unconfirmed], marker="x", s=90,
                   color="tab:red", linewidths=2.0, zorder=6, label="drop not confirmed (held-out images)")
    for r in summary.rows:
        if r.base:
            ax.scatter([r.metric], [r.val_acc], marker="*", s=260, color="black", zorder=5, label="base model")
        if r.recommended:
            ax.scatter([r.metric], [r.val_acc], marker="o", s=320, facecolors="none", edgecolors="red",
                       linewidths=2.0, zorder=6,
                       label=f"{summary.study + ': ' if others else ''}recommended (trial {r.trial})")
    for other, osum, colour in zip(others, summary.others, ("tab:orange", "tab:green", "tab:purple"), strict=False):
        trials_o = [t for t in complete_trials(other) if not TrialAttrs.of(t).base]
        ofront = [r for r in osum.rows if r.on_front]
        if trials_o:
            ax.scatter([t.values[1] for t in trials_o], [t.values[0] for t in trials_o], s=36, marker="D", zorder=3,
                       color=colour, alpha=0.5, edgecolors="black", linewidths=0.3, label=f"{osum.study}: trial")
        if ofront:
            ax.step([r.metric for r in ofront], [r.val_acc for r in ofront], where="post", color=colour,
                    lw=1.2, label=f"{osum.study}: Pareto front")
        for r in osum.rows:
            if r.recommended and not r.base:
                ax.scatter([r.metric], [r.val_acc], marker="D", s=200, facecolors="none", edgecolors=colour,
                           linewidths=2.0, zorder=6, label=f"{osum.study}: recommended (trial {r.trial})")
    if summary.base_acc is not None and summary.max_acc_drop is not None:
        ax.axhline(summary.base_acc - summary.max_acc_drop, color="grey", ls="--", lw=0.8,
                   label=f"accuracy constraint (−{summary.max_acc_drop})")
    studies = " and ".join([summary.study, *(o.study for o in summary.others)])
    ax.set_title(f"latopt search {studies}: accuracy vs {names[1]}")
    ax.set_xlabel(AXIS_LABELS.get(names[1], names[1]))
    ax.set_ylabel(AXIS_LABELS.get(names[0], names[0]))
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8, framealpha=0.8)
    return write_figure_atomic(path, fig, dpi=120, bbox_inches="tight")


def _plot_html(study: optuna.Study, summary: FrontSummary, path: Path) -> Path | None:
    try:
        import plotly  # noqa: F401
    except ImportError:
        return None
    names = summary.metric_names
    fig = optuna.visualization.plot_pareto_front(study, target_names=[names[1], names[0]], targets=_targets)
    write_text_atomic(path, fig.to_html(include_plotlyjs="cdn"))
    return path
