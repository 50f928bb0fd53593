"""A fold's report as text: the one-line summary, report.txt, and the lines a DP report shares.

Public API::

    format_summary(report) -> str;  format_report(report) -> str      a LayerFoldReport (latopt.layerfold.fold_record)
    report_tail(report, rows, *, check_prefix="") -> [str]   accuracy rows, fold check, FLOPs, params
    undertrained_warning(base_acc, folded_acc, test_samples) -> str | None   a fold that beats its base
"""

from __future__ import annotations

from collections.abc import Iterable

from latopt.layerfold.fold_record import FoldReport, LayerFoldReport


def format_summary(r: LayerFoldReport) -> str:
    a, lat = r.acc, r.latency_pred_ms
    lat_s = f", LUT latency {lat.asis:.3f} → {lat.folded:.3f} ms" if lat.asis is not None and lat.folded is not None else ""
    return (f"folded {r.n_folded}/{r.n_foldable} blocks; test acc base {a.base:.4f}, pre-fold "
            f"{a.prefold:.4f}, folded {a.folded:.4f}, fine-tuned {a.finetuned:.4f}; FLOPs "
            f"{r.flops.base / 1e6:.2f} → {r.flops.folded / 1e6:.2f} M{lat_s}; wrote {r.checkpoint}")


def undertrained_warning(before: float | None, after: float | None, samples: int | None) -> str | None:
    """A line when the folded network's test accuracy exceeds its base's by more than the test set's noise
    (two standard errors of a difference of two accuracies near ``before`` on ``samples`` images, and at least
    two samples): folding removes capacity, so a fold that gains that much means the base was under-trained
    (fine-tuning after the fold repaired it), not that folding helps."""
    if before is None or after is None or not samples:
        return None
    p = min(max(before, 1.0 / samples), 1 - 1.0 / samples)
    margin = max(2.0 / samples, 2 * (2 * p * (1 - p) / samples) ** 0.5)
    if after - before <= margin:
        return None
    return (f"the folded network is {100 * (after - before):.2f} points more accurate than its base (more than "
            f"the test set's noise, {100 * margin:.2f}): the base looks under-trained; train it longer or check "
            "its training curve (metrics.json beside the base checkpoint)")


def report_tail(r: FoldReport, rows: Iterable[tuple[str, str]], *, check_prefix: str = "") -> list[str]:
    """The lines a fold report and a DP report share: test/val accuracy for ``rows`` ((phase, label): a field
    of :class:`~latopt.layerfold.fold_record.Accuracies`), a warning when the fine-tuned fold beats its base by
    more than the test set's noise (:func:`undertrained_warning`), the fold check, FLOPs and params."""
    rows = list(rows)
    a, v, fc = r.acc, r.val, r.fold_check
    w = max(22, *(len(name) for _, name in rows))
    lines = [f"{'accuracy':<{w}} {'test':>8} {'val':>8}"]
    for key, name in rows:
        test, val = getattr(a, key), getattr(v, key)
        lines.append(f"{name:<{w}} {test:>8.4f} " + (f"{val:>8.4f}" if val is not None else f"{'-':>8}"))
    if r.agreement is not None:
        lines.append(f"before fine-tuning the fold predicts what the network it was folded from predicts on "
                     f"{100 * r.agreement:.1f} % of the validation images (exact: equal to the variant network)")
    warning = undertrained_warning(a.base, a.finetuned, r.test_samples)
    if warning:
        lines.append(f"warning: {warning}")
    return [*lines,
            f"{check_prefix}fold check ({fc.mode}): max abs {fc.max_abs:.3g}, max rel {fc.max_rel:.3g}"
            + (f" (limit {fc.limit})" if fc.limit else " (border differs by design)"),
            f"FLOPs  {r.flops.base:,} → {r.flops.folded:,}",
            f"params {r.params.base:,} → {r.params.folded:,}"]


def format_report(r: LayerFoldReport) -> str:
    pf = r.params_fold
    lines = [f"latopt fold report: {r.model} on {r.task} @ {r.resolution}px, seed {r.seed}",
             f"lambda_c {pf.lambda_c}  tau {pf.tau}  p {pf.p}  granularity {pf.granularity}  "
             f"mode {pf.mode}  distill {pf.distill}  unfolded alpha {pf.unfolded_alpha}  lut {pf.lut}",
             "", f"{'block':>5}  {'c_l':>8}  {'alpha':<16} folded" + ("   (no LUT: uniform c_l = 1)" if not r.costs else "")]
    costs = r.costs or {}
    for k, vals in r.alphas.items():
        c = costs.get(k)
        c_s = "1" if not costs else f"{c:.4f}" if c is not None else "-"
        frozen = " (frozen)" if int(k) in r.frozen else ""
        lines.append(f"{k:>5}  {c_s:>8}  {' '.join(f'{v:.3f}' for v in vals):<16} "
                     f"{r.folded.get(k, '-')}{frozen}")
    lines += ["", f"folded {r.n_folded}/{r.n_foldable} foldable blocks ({r.n_folded_full} full); "
              f"alpha in (0.1, 0.9): {100 * r.alpha_mid_fraction:.1f} %"]
    lines += report_tail(r, (("base", "base"), ("prefold", "pre-fold (sigma_alpha)"), ("folded", "folded, before FT"),
                             ("finetuned", "folded, fine-tuned")),
                         check_prefix=f"linearised reference test acc {r.acc.linearized:.4f}; ")
    lat = r.latency_pred_ms
    if lat.asis is not None and lat.folded is not None:
        lines.append(f"LUT-predicted latency {lat.asis:.4f} ms → {lat.folded:.4f} ms ({lat.asis / lat.folded:.3f}x)")
    else:
        lines.append("LUT-predicted latency: no LUT given")
    lines.append(f"checkpoint {r.checkpoint}")
    return "\n".join(lines) + "\n"
