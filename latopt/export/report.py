"""What export measures and writes about itself: the end-to-end latency section and ``REPORT.md``.

Public API::

    measure_latency(plan, device, lut, say, *, backend=None, folded=None) -> dict   as-is vs folded in one
                                                      interleaved run at the device's precision (+ LUT prediction)
    lut_prediction_line(latency) -> str               the LUT's speed-up against the measured one
    render_report(result) -> str                      REPORT.md from the export.json dict
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from latopt.export.gates import NOISE_K
from latopt.export.plan import Plan, asis_network
from latopt.latency.lut import predict
from latopt.latency.profiler import measure_networks


def measure_latency(p: Plan, device: Any, lut: Any | None, say: Callable[[str], None], *,
                    backend: Any = None, folded: Path | None = None) -> dict[str, Any]:
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
    say(f"measuring as-is vs folded end to end on {device.name} ({device.precision}, interleaved)")
    timed = p.folded if folded is None else str(folded)
    stats = measure_networks({"as-is": asis_network(p.arch), "folded": timed}, device, shape, backend=backend)
    a, f = stats["as-is"], stats["folded"]
    lat: dict[str, Any] = {
        "as_is_ms": a.median_ms, "as_is_iqr_ms": a.iqr_ms,
        "folded_ms": f.median_ms, "folded_iqr_ms": f.iqr_ms,
        "speedup": a.median_ms / f.median_ms,
        # spread of the ratio from the quartiles: slowest-as-is/fastest-folded and the reverse
        "speedup_range": [a.q1_ms / f.q3_ms, a.q3_ms / f.q1_ms],
        "repeats": {"as_is": a.n, "folded": f.n},
        "precision": device.precision,
        "batch": shape[0],
        "clock": device.clock,   # the device profile's clock: the LUT's too
    }
    if folded is not None:
        lat["folded_file"] = Path(folded).name   # the shipped file that was timed
    if lut is not None:
        lat["lut_as_is_ms"] = predict(lut, {})
        lat["lut_folded_ms"] = predict(lut, p.plan, p.spans)
        lat["lut_error_as_is"] = lat["lut_as_is_ms"] / a.median_ms - 1
        lat["lut_error_folded"] = lat["lut_folded_ms"] / f.median_ms - 1
        lat["lut_speedup"] = lat["lut_as_is_ms"] / lat["lut_folded_ms"]
        lat["lut_speedup_error"] = lat["lut_speedup"] / lat["speedup"] - 1
        lat["lut_created"] = lut.created or None
    say(f"as-is {a.median_ms:.3f} ms, folded {f.median_ms:.3f} ms → speed-up {lat['speedup']:.2f}×")
    return lat


def lut_prediction_line(lat: dict[str, Any]) -> str:
    """The LUT's predicted speed-up against the measured one, and which clock each came from."""
    when = f", timed {lat['lut_created']}" if lat.get("lut_created") else ""
    clock = f" Both on the device profile's {lat['clock']} clock." if lat.get("clock") else ""
    return (f"LUT prediction: {lat['lut_speedup']:.2f}× (per-block times summed from the LUT{when}) vs "
            f"{lat['speedup']:.2f}× measured in this run: {lat['lut_speedup_error']:+.1%}.{clock} Absolute times "
            "from the two moments are not compared: on a shared machine they differ with the load.")


def _bias_maps_lines(bm: dict[str, Any] | None) -> list[str]:
    """The REPORT.md line on how an exact-mode fold's bias maps are shipped (none for paper mode)."""
    if not bm:
        return []
    if bm["form"] == "per-block":
        return ["- bias maps: one per folded block (`--bias-maps per-block`)"]
    chains = ", ".join(f"{c[0]}–{c[-1]}" if len(c) > 1 else str(c[0]) for c in bm["chains"]) or "none"
    return [f"- bias maps: deferred, one per chain of consecutive full folds (chains {chains}): "
            f"{bm['adds_per_block']} bias-map Adds → {bm['adds_deferred']} ({bm['adds_saved']} saved)"]


def _int8_lines(q: dict[str, Any] | None, off: str = "--no-accuracy-gate") -> list[str]:
    """REPORT.md's INT8 section: how the shipped INT8 model was made, its accuracy and its gate."""
    if not q:
        return []
    s, cal = q["quantization"], q["calibration"]
    made = (f"`{q['file']}`: ONNX Runtime static INT8 ({s['format']}, {'per-channel' if s['per_channel'] else 'per-tensor'} "
            f"weights, activations {s['activation_type']}, weights {s['weight_type']}, {s['calibrate_method']} "
            f"calibration on {cal['count']} {cal['source']}).")
    if q.get("test_acc") is None:
        acc = "Test accuracy not measured (the checkpoint names no task): not gated."
    else:
        gate = (f"gate: at most {q['tolerance_base']:g} + one test sample (1/{q['samples']}) below ONNX fp32, ok"
                if q["gated"] else f"not gated (`{off}`)")
        acc = (f"Test accuracy ({q['samples']} samples): INT8 {q['test_acc']:.4f}, ONNX fp32 "
               f"{q['onnx_test_acc']:.4f}; {gate}.")
    return ["", "## INT8", "", made, "", acc]


def _plan_lines(plan: dict[str, Any] | None, device: str) -> list[str]:
    if not plan:
        return []
    pred = (plan.get("predicted") or {}).get("speedup")
    said = "" if pred is None else (f", predicted speed-up {pred:.2f}×" if plan.get("device") == device else
                                    f", predicted {pred:.2f}× there, not compared here")
    return [f"- plan: `{plan['file']}` (made for device {plan.get('device')}, budget {plan.get('budget')}, "
            f"{plan.get('importance')} importance{said}; applied without fine-tuning)"]


def _gate_lines(r: dict[str, Any]) -> list[str]:
    """REPORT.md's line on the accuracy gate: on, or off and why; a timing-only export says what it is for."""
    if r.get("accuracy_gate"):
        return ["- accuracy gate: on (the shipped network reproduces the checkpoint's recorded test accuracy)"]
    lines = [f"- accuracy gate: off, the accuracy below is reported, not gated ({r.get('accuracy_gate_reason')})"]
    if r.get("timing_only"):
        lines.insert(0, "- **timing-only artefact**: for measuring latency, not a deployable model (its files are "
                        "named `model.timing-only.*`)")
    return lines


def render_report(r: dict[str, Any]) -> str:
    """REPORT.md: what was exported, the numeric gates, the accuracy, the latency, the notes."""
    kind = " (timing-only, not accuracy-gated)" if r.get("timing_only") else ""
    lines = [f"# latopt export{kind}: {r['model']} on {r['device']}", "",
             f"- checkpoint: `{r['checkpoint']}`", f"- resolution: {r['resolution']}, fold mode: {r['mode']}, "
             f"precision: {r['precision']}",
             f"- folded blocks ({len(r['folded'])}): " + (", ".join(f"{k} ({v})" for k, v in r["folded"].items()) or "none"),
             *_bias_maps_lines(r.get("bias_maps")), *_plan_lines(r.get("plan"), r["device"]),
             f"- files: {', '.join(r.get('files', []))}", *_gate_lines(r), "", "## Numeric gates", "",
             "| check | max abs diff | scale | relative | tolerance | float32 noise floor | inputs | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for g in r.get("gates", []):
        floor = "–" if g.get("floor") is None else f"{g['floor']:.3g}"
        lines.append(f"| {g['name']} | {g['max_abs']:.3g} | {g['scale']:.3g} | {g['rel']:.3g} | {g['tol']:.3g} | "
                     f"{floor} | {g['samples']} {g['inputs']} | {'ok' if g['passed'] else 'FAILED'} |")
    if any(g.get("floor") is not None for g in r.get("gates", [])):
        fp16 = any(g.get("roundoff", 1.0) != 1.0 for g in r.get("gates", []))
        lines += ["", f"Tolerances marked with a noise floor are max(base tolerance, {NOISE_K:g} × the network's "
                  "float32 noise floor: PyTorch float32 vs float64 on the same inputs)"
                  + ("; the fp16 engine's floor is scaled by 2^13, fp16's unit roundoff over float32's, and its "
                     "accuracy gate is the final word." if fp16 else ".")]
    acc = r.get("accuracy")
    if acc:
        engine = "" if acc.get("engine_test_acc") is None else f", engine {acc['engine_test_acc']:.4f}"
        if acc.get("recorded") is None:
            rec = " (the checkpoint records none)"
        else:
            rec = (f"; recorded in the checkpoint: {acc['recorded']:.4f} (`{acc['recorded_at']}`)"
                   + (f", gate: within one test sample (1/{acc['samples']}) ok" if acc["gated"] else ", not gated"))
        lines += ["", "## Accuracy", "", f"Test accuracy on `{acc['task']}` ({acc['samples']} samples): "
                  f"ONNX {acc['test_acc']:.4f}{engine}{rec}"]
    lines += _int8_lines(r.get("int8"), "--timing-only" if r.get("timing_only") else "--no-accuracy-gate")
    lat = r.get("latency")
    if lat:
        timed = f"; folded: the shipped `{lat['folded_file']}`" if lat.get("folded_file") else ""
        lines += ["", f"## Latency ({lat.get('precision', r['precision'])}, measured end to end in one interleaved run"
                  f"{timed})", "",
                  "| network | median ms | IQR ms | LUT sum ms (timed when the LUT was made) |", "|---|---|---|---|",
                  f"| as-is | {lat['as_is_ms']:.3f} | {lat['as_is_iqr_ms']:.3f} | "
                  + (f"{lat['lut_as_is_ms']:.3f} |" if "lut_as_is_ms" in lat else "– |"),
                  f"| folded | {lat['folded_ms']:.3f} | {lat['folded_iqr_ms']:.3f} | "
                  + (f"{lat['lut_folded_ms']:.3f} |" if "lut_folded_ms" in lat else "– |"),
                  "", f"Speed-up: **{lat['speedup']:.2f}×** (quartile range {lat['speedup_range'][0]:.2f}–"
                  f"{lat['speedup_range'][1]:.2f}×)"]
        if "lut_speedup" in lat:
            lines += ["", lut_prediction_line(lat)]
    if r.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in r["notes"]]
    return "\n".join(lines) + "\n"
