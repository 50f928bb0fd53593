"""Export: a checkpoint → a deployable ONNX model (+ TensorRT engine, + INT8 ONNX), numerically gated, its latency
measured on the device, export.json and REPORT.md.

``latopt export --checkpoint CKPT --device DEVICE [--format onnx|engine|all] [--precision fp32|fp16|int8]
[--fold PLAN | --plan plan.json] [--bias-maps deferred|per-block] [--lut FILE] [--resolution R] [--samples N]
[--no-accuracy-gate] [--timing-only] [--out DIR]``; from Python ``export(checkpoint, device, out, ...)``, which
returns the :class:`.export_record.ExportRecord` that export.json holds.

Contract:

- Nothing is written to ``out`` unless every gate passes; what is written is written atomically, and an
  earlier export's files (:data:`EXPORT_FILES`) never outlive a new one.
- The gates, in order: the fold (the folded network against the unfolded one it came from, when export folds
  or ships a folded checkpoint's own plan), ONNX Runtime against PyTorch, the engine against ONNX Runtime,
  the task's test accuracy against the accuracy the checkpoint records (within one test sample), INT8 against
  the fp32 file. A failed numeric gate raises :class:`~latopt.errors.VerificationError`; an export the record
  does not describe (a fold or plan applied here, another resolution, no task) is refused with a
  :class:`~latopt.errors.LatoptError` unless the accuracy gate is turned off (``CheckOptions``): then
  export.json says ``accuracy_gate: false`` and why, and ``timing_only`` names the files so.
- The latency reported is measured: the as-is and the shipped network in one interleaved run on the device,
  the shipped file itself where it is not ``model.onnx``; the LUT's prediction stands beside it when one of
  that precision exists.
- One backend serves the whole export (:func:`.engine.open_backend`, opened first, so a device or precision
  this machine cannot drive fails before any work), closed on every path.

The modules, one per role: :mod:`.options` (what the caller asks), :mod:`.shipped` (what is exported: the
checkpoint as it is or folded here), :mod:`.gates`, :mod:`.graph` (the ONNX file), :mod:`.engine` (the backend
and the TensorRT engine), :mod:`.export_report` (the measurement and REPORT.md), :mod:`.export_record`
(export.json). docs/design.md "Export" says what each step does and why.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple, cast

from latopt.config import check_resolution
from latopt.constants import BIAS_MAPS, EXPORT_FORMATS, MAX_GATE_SAMPLES, PRECISIONS, FoldVariant, Precision
from latopt.dp.planfile import PlanRecord, check_plan, read_plan
from latopt.errors import LatoptError
from latopt.export.engine import (
    ENGINE_BATCH,
    at_precision,
    engine_timing,
    open_backend,
    open_engine,
    write_engine,
)
from latopt.export.export_record import (
    EXPORT_SCHEMA,
    Calibration,
    ExportMode,
    ExportRecord,
    Int8Section,
    Int8Settings,
    PlanSection,
    read_export_record,
    write_export_record,
)
from latopt.export.export_report import measure_latency, render_report
from latopt.export.gates import (
    ACC_TOL_INT8,
    NOISE_K,
    TOL_ONNX,
    Gate,
    accuracy_gate,
    check_gates,
    checkpoint_task,
    compare_outputs,
    deferred_gates,
    engine_gate,
    fold_gates,
    gate_inputs,
    int8_gate,
    noise_floor,
    onnx_gate,
    ort_out,
    require_accuracy_gate,
    run_samples,
    runner_accuracy,
    runner_correct,
    torch_out,
)
from latopt.export.graph import tag_block_nodes, write_onnx
from latopt.export.options import CheckOptions, ShipOptions
from latopt.export.shipped import (
    Plan,
    auto_plan,
    build_plan,
    check_fold_size,
    defer_plan,
    export_lut,
    export_resolution,
    parse_fold_spec,
)
from latopt.files.artifacts import atomic_dir, check_output_dir, file_sha256, write_text_atomic
from latopt.files.checkpoint import Arch, load_checkpoint
from latopt.latency.backends import close_backend
from latopt.latency.devices import load_device
from latopt.latency.quantize import CALIB_IMAGES, INT8_SETTINGS, calibration_images, quantize_int8
from latopt.log import get_logger
from latopt.runtime import OrtRunner

TIMING_ONLY_STEM = "model.timing-only"   # a timing-only export's files: model.timing-only.onnx, .engine, .int8.onnx


class ArtefactNames(NamedTuple):
    """The files an export ships, by role."""

    onnx: str
    engine: str
    int8: str


def artefact_names(timing_only: bool = False) -> ArtefactNames:
    """``model.*``, or for a timing-only export (not accuracy-gated, not for deployment) ``model.timing-only.*``,
    so the name says what it is."""
    stem = TIMING_ONLY_STEM if timing_only else "model"
    return ArtefactNames(onnx=f"{stem}.onnx", engine=f"{stem}.engine", int8=f"{stem}.int8.onnx")


INT8_FILE = artefact_names().int8
# what an export writes in --out: an earlier export's files never outlive a new one (gated or timing-only)
EXPORT_FILES = (*artefact_names(False), *artefact_names(True), "export.json", "REPORT.md")
_LOG = get_logger("export")


def export(checkpoint: str | Path, device_name: str, out: str | Path, *, fmt: str = "onnx",
           precision: str | None = None, ship: ShipOptions = ShipOptions(), checks: CheckOptions = CheckOptions(),
           progress: bool = True) -> ExportRecord:
    """The whole export of ``checkpoint`` for the device ``device_name`` into ``out``, as ``fmt`` at ``precision``
    (default: the device's); returns the export record (export.json). Raises LatoptError / VerificationError.

    ``ship`` says which network (:class:`ShipOptions`: by default the checkpoint as it is, never folded here),
    ``checks`` how it is gated and timed (:class:`CheckOptions`); see the module docstring.
    The shipped network's test accuracy is gated against the checkpoint's record; an export the record does not
    describe (:func:`latopt.export.gates.ungated_reason`: a fold or plan applied here, another resolution, ...)
    is refused (LatoptError, param ``gate_accuracy``) unless ``checks.gate_accuracy`` is False
    (``--no-accuracy-gate``: shipped unchecked as ``model.onnx``) or ``checks.timing_only`` is True
    (``--timing-only``: ``model.timing-only.onnx``, for timing only); both are recorded in export.json (``accuracy_gate`` false, ``accuracy_gate_reason``,
    ``timing_only``) and REPORT.md."""

    def say(msg: str) -> None:
        if progress:
            _LOG.info(msg)

    samples, resolution, mode = checks.samples, ship.resolution, ship.mode
    if fmt not in EXPORT_FORMATS:
        raise LatoptError(f"fmt {fmt!r}: choose {', '.join(EXPORT_FORMATS)}", param="fmt")
    if ship.bias_maps not in BIAS_MAPS:
        raise LatoptError(f"bias_maps {ship.bias_maps!r}: choose {' or '.join(BIAS_MAPS)}", param="bias_maps")
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= MAX_GATE_SAMPLES:
        raise LatoptError(f"samples {samples}: the numeric gates need 1 .. {MAX_GATE_SAMPLES} inputs (default 32)",
                          param="samples")
    if resolution is not None:
        check_resolution(resolution, "resolution", param="resolution")
    out = Path(out)
    check_output_dir(out)
    device = load_device(device_name)
    precision = precision or device.precision
    if precision not in PRECISIONS:
        raise LatoptError(f"precision {precision!r}: choose {', '.join(PRECISIONS)}", param="precision")
    if precision == "int8" and fmt != "onnx":
        raise LatoptError(f"fmt {fmt!r} with precision int8: TensorRT INT8 is not supported by latopt; use "
                          f"fmt 'onnx' (ONNX Runtime static INT8, {INT8_FILE})", param="fmt")
    if precision == "int8" and (device.backend != "onnxruntime" or device.is_gpu):
        raise LatoptError(f"precision int8 is ONNX Runtime static INT8 on the CPU: it needs an ONNX Runtime CPU "
                          f"device (cpu or cpu-int8), not {device.name!r} ({device.backend}"
                          f"{' on a GPU' if device.is_gpu else ''})", param="device_name")
    if not Path(checkpoint).is_file():
        raise LatoptError(f"checkpoint {checkpoint} does not exist")
    plan_file = None
    if ship.plan is not None:
        if ship.fold is not None:
            raise LatoptError("give a plan or a fold, not both: the plan file says what to fold", param="plan")
        plan_file = read_plan(ship.plan)
        if mode is not None and mode != plan_file.fold_mode:
            raise LatoptError(f"mode {mode!r}: the plan file {ship.plan} was made for {plan_file.fold_mode}-mode "
                              "folds (its LUT's times are of those); give no mode", param="mode")
        mode = plan_file.fold_mode
    # One backend for the whole export, at the requested precision: it builds the engine (--format
    # engine|all) and times the networks; opened before any work (a device this machine cannot drive, or a
    # precision its backend cannot time, fails here) and closed on every path.
    backend = open_backend(device, precision, engine=fmt in ("engine", "all"), measure=checks.measure)
    try:
        return _export(checkpoint, device, out, backend, fmt=fmt, precision=precision,
                       ship=replace(ship, mode=mode or "exact"), checks=checks, say=say,
                       plan=None if ship.plan is None or plan_file is None else (ship.plan, plan_file))  # both or neither
    finally:
        close_backend(backend)


def _export(checkpoint: str | Path, device: Any, out: Path, backend: Any, *, fmt: str, precision: str,
            ship: ShipOptions, checks: CheckOptions, say: Any,
            plan: tuple[str | Path, PlanRecord] | None) -> ExportRecord:
    """:func:`export` once its options are checked (``ship.mode`` resolved) and its backend open."""
    mode, timing_only = str(ship.mode), bool(checks.timing_only)
    trt_backend = backend if fmt in ("engine", "all") else None
    say(f"loading {checkpoint}")
    loaded = load_checkpoint(checkpoint)   # a malformed record (arch, meta) is refused here, before any work
    res = export_resolution(loaded[1], loaded[2], ship.resolution)
    lut = export_lut(None if ship.lut is None else str(ship.lut), loaded[1], device, res)
    plan_record: PlanSection | None = None
    plan_notes: list[str] = []
    spans: list[list[int]] = []
    what: str | dict[int, str] | None = ship.fold  # the --fold spec, or a plan file's {block: variant}
    if plan is not None:
        what, plan_record, plan_notes = _plan_fold(checkpoint, loaded[1], res, device, *plan)
        spans = plan[1].spans
    p = build_plan(checkpoint, loaded, fold=what, lut=lut, res=res, mode=mode, spans=spans)
    if plan_record is not None:
        p.notes.extend(plan_notes)
    task = checkpoint_task(p.meta, p.resolution)
    # before anything is written: the gate cannot be edited away, and export.json says whether it held
    ungated = require_accuracy_gate(p, task, checks.gate_accuracy, timing_only=timing_only)
    names = artefact_names(timing_only)
    if ungated is not None:
        what = "a timing-only artefact, not a deployable model" if timing_only else "shipped unchecked"
        say(f"accuracy not gated ({what}): {ungated}")
    x, inputs = gate_inputs(task, p.resolution, checks.samples, checks.seed)
    floor = noise_floor(p.folded, x)
    exact = defer_plan(p, ship.bias_maps)  # p.folded becomes what is shipped
    gates = fold_gates(p, x, inputs)
    if exact is not None:
        gates += deferred_gates(exact, p.folded, p.resolution, x, inputs, floor, spans=p.spans,
                                deferred=ship.bias_maps == "deferred")
    for g in gates:
        say(g.line())
    check_gates(gates)

    with atomic_dir(out) as tmp:
        for stale in EXPORT_FILES:    # an earlier export's files in --out never outlive this one (model.engine)
            (tmp / stale).unlink(missing_ok=True)
        say(f"exporting ONNX → {out / names.onnx}")
        onnx_path = write_onnx(p, tmp / names.onnx)
        gate, ort = onnx_gate(p.folded, onnx_path, x, inputs, floor)
        gates.append(gate)
        say(gates[-1].line())
        check_gates(gates)
        files = [names.onnx]
        shipped: Path | None = None   # the shipped file timed as the folded network (engine or INT8 model)
        accs: dict[str, float] = {}
        if task is not None:
            with OrtRunner(onnx_path) as runner:
                accs["onnx"] = runner_accuracy(runner, task, batch=256)
        if trt_backend is not None:
            engine_path = write_engine(trt_backend, p, tmp, say, name=names.engine)
            with open_engine(trt_backend, engine_path, p.resolution) as engine:
                gates.append(engine_gate(precision, run_samples(engine, x), ort, inputs, floor))
                say(gates[-1].line())
                check_gates(gates)
                if task is not None:
                    accs["engine"] = runner_accuracy(engine, task, batch=ENGINE_BATCH)
            files.append(names.engine)
            shipped = engine_path
        accuracy = accuracy_gate(p, task, accs, precision, say, gated=ungated is None)
        int8 = None
        if precision == "int8":
            int8 = _write_int8(p, onnx_path, tmp / names.int8, task, x, accs.get("onnx"), ungated is None,
                               say, off="--timing-only" if timing_only else "--no-accuracy-gate")
            shipped = tmp / int8.file
            files.append(int8.file)
        latency = None
        if checks.measure:
            lut_precision = None if lut is None else (lut.precision or device.precision)  # older LUTs: the profile's
            if lut is not None and precision != lut_precision:
                p.notes.append(f"latency measured at --precision {precision}; the LUT (timed at {lut_precision}) is "
                               f"not compared with it")
                lut = None
            timed_on = at_precision(device, precision)
            if trt_backend is not None:   # the shipped engine runs at its own batch
                timed_on, lut = engine_timing(timed_on, lut, p.notes)
            latency = measure_latency(p, timed_on, lut, say, backend=backend, folded=shipped)
        record = ExportRecord(
            checkpoint=str(checkpoint), device=device.name, model=p.arch.model, resolution=p.resolution,
            # the plan's mode and variants, and --precision, were checked against their choices before any work
            mode=cast(ExportMode, p.mode), precision=cast(Precision, precision),
            folded=cast(dict[str, FoldVariant], {str(k): v for k, v in p.plan.items()}), spans=p.spans,
            bias_maps=p.bias_maps,
            notes=list(p.notes), accuracy_gate=ungated is None, accuracy_gate_reason=ungated,
            timing_only=timing_only, plan=plan_record, gates=[g.record() for g in gates], accuracy=accuracy,
            int8=int8, latency=latency, files=files)
        write_export_record(tmp / "export.json", record)
        write_text_atomic(tmp / "REPORT.md", render_report(record))
    return record


def _plan_fold(checkpoint: str | Path, arch: Arch, res: int, device: Any, path: str | Path,
               plan: PlanRecord) -> tuple[dict[int, str], PlanSection, list[str]]:
    """A plan file's {block: variant} for this unfolded checkpoint (refused when the plan is for another
    model, resolution or number of classes), what export.json records of it (the file, its device and
    prediction) and the notes it adds (a plan made for another device is measured here; its LUT is not
    compared)."""
    if arch.fold is not None:
        raise LatoptError(f"{checkpoint} is already folded; a plan applies to an unfolded (base) checkpoint",
                          param="checkpoint")
    check_plan(plan, path, model=arch.model, resolution=res, num_classes=arch.num_classes)
    made_for = plan.lut.device
    record = PlanSection(file=str(path), sha256=file_sha256(path), device=made_for, lut_sha256=plan.lut.sha256,
                         budget=plan.budget, importance=plan.importance, predicted=plan.predicted)
    notes = [f"the plan file {path} (budget {record.budget}, {record.importance} importance) is applied through the "
             "fold algebra, not fine-tuned"]
    if made_for != device.name:
        notes.append(f"the plan was made for device {made_for!r}, measured here on {device.name!r}: its "
                     "predicted speed-up (from the other device's LUT) is not compared")
    return plan.changed, record, notes


def _write_int8(p: Plan, onnx_path: Path, int8_path: Path, task: Any | None, x: Any, onnx_acc: float | None,
                gate_accuracy: bool, say: Any, off: str = "--no-accuracy-gate") -> Int8Section:
    """``int8_path``: the gated fp32 ``onnx_path`` as ONNX Runtime static INT8, calibrated on the first
    :data:`~latopt.latency.quantize.CALIB_IMAGES` training images of the task (without a task: the numeric
    gates' random-normal inputs, and said so), its test accuracy gated against ``onnx_acc``
    (:func:`.gates.int8_gate`); returns what export.json records of it."""
    if task is not None:
        calib = calibration_images(task, CALIB_IMAGES)
        source = f"training images of {task.name}, the first of the split, no augmentation"
    else:
        calib, source = x.numpy(), "random-normal inputs, the checkpoint names no task"
    say(f"quantising to INT8 on {len(calib)} {source} → {int8_path.name}")
    quantize_int8(onnx_path, int8_path, calib)
    acc = None
    if task is not None:
        with OrtRunner(int8_path) as runner:
            acc = runner_accuracy(runner, task, batch=256)
    gate = int8_gate(p, task, acc, onnx_acc, gate_accuracy, say, off=off)
    return Int8Section(**gate.model_dump(), file=int8_path.name, quantization=Int8Settings.model_validate(INT8_SETTINGS),
                       calibration=Calibration(count=len(calib), source=source))


__all__ = ["ACC_TOL_INT8", "EXPORT_FILES", "EXPORT_SCHEMA", "INT8_FILE", "NOISE_K", "TIMING_ONLY_STEM", "TOL_ONNX",
           "ArtefactNames", "CheckOptions", "ExportRecord", "ShipOptions", "Gate", "Plan", "accuracy_gate", "artefact_names", "auto_plan", "build_plan", "check_fold_size",
           "checkpoint_task", "compare_outputs", "defer_plan", "deferred_gates", "engine_gate", "export", "fold_gates",
           "gate_inputs", "int8_gate", "noise_floor", "onnx_gate", "ort_out", "parse_fold_spec", "render_report",
           "read_export_record", "runner_accuracy", "runner_correct", "tag_block_nodes", "torch_out",
           "write_export_record"]
