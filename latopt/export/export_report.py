"""What export measures and writes about itself: the end-to-end latency section and ``REPORT.md``.

Public API::

    measure_latency(plan, device, lut, say, *, backend=None, folded=None) -> LatencySection   as-is vs folded in
                                                      one interleaved run at the device's precision (+ LUT prediction)
    lut_prediction_line(latency) -> str               the LUT's speed-up against the measured one
    latency_line(latency) -> str                      as-is and folded in their unit ("counted" on a count device)
    render_report(record) -> str                      REPORT.md from the export record (ExportRecord)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from latopt.export.export_record import (
    BiasMapsSection,
    ExportRecord,
    Int8Section,
    LatencySection,
    PlanSection,
    Repeats,
)
from latopt.export.gates import NOISE_K
from latopt.export.shipped import Plan, asis_network
from latopt.latency.backends.count import unit as count_unit
from latopt.latency.lut import predict
from latopt.latency.profiler import measure_networks


def measure_latency(p: Plan, device: Any, lut: Any | None, say: Callable[[str], None], *,
                    backend: Any = None, folded: Path | None = None) -> LatencySection:
    """The as-is and the folded network measured end to end on ``device`` (at its precision; with ``backend``
    when given, else one opened and closed here) in one interleaved run; the speed-up with its quartile range;
    the LUT's prediction beside it when ``lut`` is given. The folded network timed is ``p.folded``, or the
    shipped file ``folded`` when given, as it is: ``model.engine`` (the TensorRT backend runs an engine file
    without building another) or at int8 ``model.int8.onnx`` (the backend times a quantised file as it is and
    quantises the as-is network the same way, :mod:`latopt.latency.quantize`).

    The LUT was timed at another moment (``lut.created``) than this run: on a shared machine absolute times
    from two moments differ with the load, so the prediction is judged by its *speed-up* (a ratio of times
    from one LUT run) against the speed-up measured here (a ratio from one interleaved run):
    ``lut_speedup_error``. The absolute LUT sums and their ratio to the times measured here are kept as
    ``lut_*_ms`` / ``lut_error_*`` (meaningful only where the load was the same)."""
    shape = (device.batch, 3, p.resolution, p.resolution)
    counted = device.backend == "count"   # a count device: the figures are counts in their unit, not times
    say(f"counting as-is vs folded on {device.name} ({count_unit(device.backend, device.count)})" if counted else
        f"measuring as-is vs folded end to end on {device.name} ({device.precision}, interleaved)")
    timed = p.folded if folded is None else str(folded)
    stats = measure_networks({"as-is": asis_network(p.arch), "folded": timed}, device, shape, backend=backend)
    a, f = stats["as-is"], stats["folded"]
    speedup = a.median_ms / f.median_ms
    compared: dict[str, Any] = {}   # the LUT's prediction, when a LUT is compared
    if lut is not None:
        lut_as_is, lut_folded = predict(lut, {}), predict(lut, p.plan, p.spans)
        compared = {"lut_as_is_ms": lut_as_is, "lut_folded_ms": lut_folded,
                    "lut_error_as_is": lut_as_is / a.median_ms - 1, "lut_error_folded": lut_folded / f.median_ms - 1,
                    "lut_speedup": lut_as_is / lut_folded, "lut_speedup_error": lut_as_is / lut_folded / speedup - 1,
                    "lut_created": lut.created or None}
    lat = LatencySection(
        as_is_ms=a.median_ms, as_is_iqr_ms=a.iqr_ms, folded_ms=f.median_ms, folded_iqr_ms=f.iqr_ms, speedup=speedup,
        # spread of the ratio from the quartiles: slowest-as-is/fastest-folded and the reverse
        speedup_range=[a.q1_ms / f.q3_ms, a.q3_ms / f.q1_ms], repeats=Repeats(as_is=a.n, folded=f.n),
        precision=device.precision, batch=shape[0],
        clock=device.clock,   # the device profile's clock: the LUT's too
        folded_file=None if folded is None else Path(folded).name,   # the shipped file that was timed
        count_unit=count_unit(device.backend, device.count) if counted else None, **compared)
    say(latency_line(lat))
    return lat


def latency_line(lat: LatencySection) -> str:
    """As-is and folded in their unit, and the ratio: "measured" for times, "counted" for a count device's."""
    u = lat.count_unit or "ms"
    return (f"as-is {lat.as_is_ms:.3f} {u}, folded {lat.folded_ms:.3f} {u} → "
            + (f"{lat.speedup:.2f}× fewer {u} (counted, not measured)" if lat.count_unit
               else f"speed-up {lat.speedup:.2f}×"))


def lut_prediction_line(lat: LatencySection) -> str:
    """The LUT's predicted speed-up against the measured one, and which clock each came from (a LUT was compared)."""
    assert lat.lut_speedup is not None and lat.lut_speedup_error is not None
    when = f", timed {lat.lut_created}" if lat.lut_created else ""
    clock = f" Both on the device profile's {lat.clock} clock." if lat.clock else ""
    return (f"LUT prediction: {lat.lut_speedup:.2f}× (per-block times summed from the LUT{when}) vs "
            f"{lat.speedup:.2f}× measured in this run: {lat.lut_speedup_error:+.1%}.{clock} Absolute times "
            "from the two moments are not compared: on a shared machine they differ with the load.")


def _bias_maps_lines(bm: BiasMapsSection | None) -> list[str]:
    """The REPORT.md line on how an exact-mode fold's bias maps are shipped (none for paper mode)."""
    if bm is None:
        return []
    if bm.form == "per-block":
        return ["- bias maps: one per folded block (`--bias-maps per-block`)"]
    chains = ", ".join(f"{c[0]}–{c[-1]}" if len(c) > 1 else str(c[0]) for c in bm.chains or []) or "none"
    return [f"- bias maps: deferred, one per chain of consecutive full folds (chains {chains}): "
            f"{bm.adds_per_block} bias-map Adds → {bm.adds_deferred} ({bm.adds_saved} saved)"]


def _int8_lines(q: Int8Section | None, off: str = "--no-accuracy-gate") -> list[str]:
    """REPORT.md's INT8 section: how the shipped INT8 model was made, its accuracy and its gate."""
    if q is None:
        return []
    s, cal = q.quantization, q.calibration
    made = (f"`{q.file}`: ONNX Runtime static INT8 ({s.format}, {'per-channel' if s.per_channel else 'per-tensor'} "
            f"weights, activations {s.activation_type}, weights {s.weight_type}, {s.calibrate_method} "
            f"calibration on {cal.count} {cal.source}).")
    if q.test_acc is None or q.onnx_test_acc is None:
        acc = "Test accuracy not measured (the checkpoint names no task): not gated."
    else:
        gate = (f"gate: at most {q.tolerance_base:g} + one test sample (1/{q.samples}) below ONNX fp32, ok"
                if q.gated else f"not gated (`{off}`)")
        acc = (f"Test accuracy ({q.samples} samples): INT8 {q.test_acc:.4f}, ONNX fp32 "
               f"{q.onnx_test_acc:.4f}; {gate}.")
    return ["", "## INT8", "", made, "", acc]


def _plan_lines(plan: PlanSection | None, device: str) -> list[str]:
    if plan is None:
        return []
    pred = plan.predicted.speedup
    said = (f", predicted speed-up {pred:.2f}×" if plan.device == device else
            f", predicted {pred:.2f}× there, not compared here")
    return [f"- plan: `{plan.file}` (made for device {plan.device}, budget {plan.budget}, "
            f"{plan.importance} importance{said}; applied without fine-tuning)"]


def _gate_lines(r: ExportRecord) -> list[str]:
    """REPORT.md's line on the accuracy gate: on, or off and why; a timing-only export says what it is for."""
    if r.accuracy_gate:
        return ["- accuracy gate: on (the shipped network reproduces the checkpoint's recorded test accuracy)"]
    lines = [f"- accuracy gate: off, the accuracy below is reported, not gated ({r.accuracy_gate_reason})"]
    if r.timing_only:
        lines.insert(0, "- **timing-only artefact**: for measuring latency, not a deployable model (its files are "
                        "named `model.timing-only.*`)")
    return lines


def render_report(r: ExportRecord) -> str:
    """REPORT.md: what was exported, the numeric gates, the accuracy, the latency, the notes."""
    kind = " (timing-only, not accuracy-gated)" if r.timing_only else ""
    lines = [f"# latopt export{kind}: {r.model} on {r.device}", "",
             f"- checkpoint: `{r.checkpoint}`", f"- resolution: {r.resolution}, fold mode: {r.mode}, "
             f"precision: {r.precision}",
             f"- folded blocks ({len(r.folded)}): " + (", ".join(f"{k} ({v})" for k, v in r.folded.items()) or "none"),
             *_bias_maps_lines(r.bias_maps), *_plan_lines(r.plan, r.device),
             f"- files: {', '.join(r.files)}", *_gate_lines(r), "", "## Numeric gates", "",
             "| check | max abs diff | scale | relative | tolerance | float32 noise floor | inputs | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for g in r.gates:
        floor = "–" if g.floor is None else f"{g.floor:.3g}"
        lines.append(f"| {g.name} | {g.max_abs:.3g} | {g.scale:.3g} | {g.rel:.3g} | {g.tol:.3g} | "
                     f"{floor} | {g.samples} {g.inputs} | {'ok' if g.passed else 'FAILED'} |")
    if any(g.floor is not None for g in r.gates):
        fp16 = any(g.roundoff != 1.0 for g in r.gates)
        lines += ["", f"Tolerances marked with a noise floor are max(base tolerance, {NOISE_K:g} × the network's "
                  "float32 noise floor: PyTorch float32 vs float64 on the same inputs)"
                  + ("; the fp16 engine's floor is scaled by 2^13, fp16's unit roundoff over float32's, and its "
                     "accuracy gate is the final word." if fp16 else ".")]
    acc = r.accuracy
    if acc is not None:
        engine = "" if acc.engine_test_acc is None else f", engine {acc.engine_test_acc:.4f}"
        if acc.recorded is None:
            rec = " (the checkpoint records none)"
        else:
            rec = (f"; recorded in the checkpoint: {acc.recorded:.4f} (`{acc.recorded_at}`)"
                   + (f", gate: within one test sample (1/{acc.samples}) ok" if acc.gated else ", not gated"))
        lines += ["", "## Accuracy", "", f"Test accuracy on `{acc.task}` ({acc.samples} samples): "
                  f"ONNX {acc.test_acc:.4f}{engine}{rec}"]
    lines += _int8_lines(r.int8, "--timing-only" if r.timing_only else "--no-accuracy-gate")
    lat = r.latency
    if lat is not None and lat.count_unit:   # a count device: counts, not times
        lines += ["", f"## Cost ({lat.count_unit}, counted by the count device {r.device}: not a measured latency)",
                  "", f"| network | {lat.count_unit} |", "|---|---|", f"| as-is | {lat.as_is_ms:.3f} |",
                  f"| folded | {lat.folded_ms:.3f} |", "", f"Ratio: {lat.speedup:.2f}× fewer {lat.count_unit} "
                  "(a count, not a speed-up: time the network on a timed device, e.g. `--device cpu`)"]
    elif lat is not None:
        timed = f"; folded: the shipped `{lat.folded_file}`" if lat.folded_file else ""
        lines += ["", f"## Latency ({lat.precision}, measured end to end in one interleaved run{timed})", "",
                  "| network | median ms | IQR ms | LUT sum ms (timed when the LUT was made) |", "|---|---|---|---|",
                  f"| as-is | {lat.as_is_ms:.3f} | {lat.as_is_iqr_ms:.3f} | "
                  + ("– |" if lat.lut_as_is_ms is None else f"{lat.lut_as_is_ms:.3f} |"),
                  f"| folded | {lat.folded_ms:.3f} | {lat.folded_iqr_ms:.3f} | "
                  + ("– |" if lat.lut_folded_ms is None else f"{lat.lut_folded_ms:.3f} |"),
                  "", f"Speed-up: **{lat.speedup:.2f}×** (quartile range {lat.speedup_range[0]:.2f}–"
                  f"{lat.speedup_range[1]:.2f}×)"]
        if lat.lut_speedup is not None:
            lines += ["", lut_prediction_line(lat)]
    if r.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in r.notes]
    return "\n".join(lines) + "\n"
