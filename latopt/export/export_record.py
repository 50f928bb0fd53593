"""The export stage's result: ``export.json`` as one frozen, validated record, written and read here only.

:func:`latopt.export.export` returns an :class:`ExportRecord`; :func:`write_export_record` writes it as
``export.json`` and :func:`read_export_record` reads one back (``latopt run`` reuses an export stage this
way). Every part is a :class:`~latopt.files.records.StrictModel`: an unknown key, a key missing, a value of the
wrong type is one :class:`~latopt.errors.LatoptError` line naming the field. The file (schema
``latopt.export/1``)::

    schema, checkpoint, device, model, resolution
    mode          exact, paper, or none (nothing folded)
    precision     fp32, fp16 or int8: what was built and measured
    folded        {"<block index>": variant} of the shipped network;  spans [[start, end, kernel], ...]
    bias_maps     exact mode: {form: deferred, chains, adds_per_block, adds_deferred, adds_saved} or
                  {form: per-block} (+ spans when any); null otherwise
    notes         what the reader should know (in REPORT.md too)
    accuracy_gate, accuracy_gate_reason (null when gated), timing_only
    plan          only with --plan: {file, sha256, device, lut_sha256, budget, importance, predicted}
    gates         [{name, max_abs, scale, rel, tol, samples, inputs, floor, roundoff, passed}, ...]
    accuracy      {task, samples, test_acc, engine_test_acc, recorded, recorded_at, gated, tolerance}; null
                  when the checkpoint names no task
    int8          only at --precision int8: {test_acc, onnx_test_acc, samples, tolerance, tolerance_base, gated,
                  file, quantization, calibration {count, source}}
    latency       only when measured: {as_is_ms, as_is_iqr_ms, folded_ms, folded_iqr_ms, speedup, speedup_range,
                  repeats {as_is, folded}, precision, batch, clock} + folded_file (a shipped engine or INT8
                  file timed) + the LUT's prediction when compared (lut_as_is_ms, lut_folded_ms, lut_error_as_is,
                  lut_error_folded, lut_speedup, lut_speedup_error, lut_created)
    files         the shipped files, in DIR

A key that does not apply is absent, not null, where the list says "only" (and ``folded_file``, the LUT's
keys): :class:`Record` ``_absent_when``.

Public API::

    EXPORT_SCHEMA;  ExportMode (exact, paper or none)
    ExportRecord, GateRecord, AccuracySection, Int8Accuracy, Int8Section, Int8Settings, Calibration,
    LatencySection, Repeats, PlanSection, BiasMapsSection          the record and its sections
    write_export_record(path, record) -> Path                       export.json, written atomically
    read_export_record(path) -> ExportRecord                        one LatoptError line if it is not one
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from latopt.constants import BiasMaps, Clock, FoldMode, FoldVariant, Precision
from latopt.dp.planfile import PlanImportance, Predicted
from latopt.files.artifacts import write_json_atomic
from latopt.files.readers import read_json
from latopt.files.records import Artefact, BlockKey, Resolution, StrictModel, validated

EXPORT_SCHEMA = "latopt.export/1"

ExportMode = FoldMode | Literal["none"]   # "none": nothing folded, the network exported as it is
_Count = Annotated[int, Field(ge=0)]
_Ms = Annotated[float, Field(ge=0)]
_Acc = Annotated[float, Field(ge=0, le=1)]
_Span = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=3, max_length=3)]  # [start, end, kernel]


class Record(StrictModel):
    """A section whose keys that do not apply are absent from its JSON, not null: ``_absent_when`` maps each
    such key to the field whose None makes it absent (itself, or the key its group hangs on). Read back, a key
    of a group whose leading field is given must be given too."""

    _absent_when: ClassVar[dict[str, str]] = {}

    @model_validator(mode="after")
    def _groups_complete(self) -> Record:
        for key, on in self._absent_when.items():
            if key == on:
                continue
            if getattr(self, on) is not None and key not in self.model_fields_set:
                raise ValueError(f"gives {on} but not {key}")
            if getattr(self, on) is None and getattr(self, key) is not None:
                raise ValueError(f"gives {key} without {on}")
        return self

    @model_serializer(mode="wrap")
    def _drop_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items()
                if k not in self._absent_when or getattr(self, self._absent_when[k]) is not None}


class GateRecord(StrictModel):
    """One numeric gate as recorded (:class:`latopt.export.gates.Gate`)."""

    name: str
    max_abs: float
    scale: float
    rel: float
    tol: float
    samples: Annotated[int, Field(ge=1)]
    inputs: str
    floor: float | None
    roundoff: float
    passed: bool


class AccuracySection(StrictModel):
    """The shipped files' test accuracy beside the checkpoint's record (:func:`latopt.export.gates.accuracy_gate`)."""

    task: str
    samples: Annotated[int, Field(ge=1)]
    test_acc: _Acc
    engine_test_acc: _Acc | None
    recorded: _Acc | None
    recorded_at: str | None
    gated: bool
    tolerance: float


class Int8Settings(StrictModel):
    """How the INT8 model was made (:data:`latopt.latency.quantize.INT8_SETTINGS`)."""

    method: str
    format: str
    per_channel: bool
    activation_type: str
    weight_type: str
    calibrate_method: str
    pre_process: str


class Calibration(StrictModel):
    count: Annotated[int, Field(ge=1)]
    source: str


class Int8Accuracy(StrictModel):
    """The INT8 model's accuracy against the fp32 ONNX file's (:func:`latopt.export.gates.int8_gate`); the
    measured values are null when the checkpoint names no task."""

    test_acc: _Acc | None
    onnx_test_acc: _Acc | None
    samples: Annotated[int, Field(ge=1)] | None
    tolerance: float | None
    tolerance_base: float
    gated: bool


class Int8Section(Int8Accuracy):
    """The shipped INT8 model: its accuracy (:class:`Int8Accuracy`), its file, how it was made and calibrated."""

    file: str
    quantization: Int8Settings
    calibration: Calibration


class Repeats(StrictModel):
    as_is: Annotated[int, Field(ge=1)]
    folded: Annotated[int, Field(ge=1)]


_LUT_KEYS = ("lut_as_is_ms", "lut_folded_ms", "lut_error_as_is", "lut_error_folded", "lut_speedup",
             "lut_speedup_error", "lut_created")


class LatencySection(Record):
    """As-is vs folded, measured end to end in one interleaved run (:func:`latopt.export.export_report.measure_latency`);
    the LUT's prediction beside it when a LUT was compared (all its keys, or none). On a count device
    (``count_unit`` given) the figures are the two networks' counts in that unit: nothing is measured."""

    _absent_when: ClassVar[dict[str, str]] = {"folded_file": "folded_file", "count_unit": "count_unit",
                                              **{k: "lut_speedup" for k in _LUT_KEYS}}

    as_is_ms: _Ms
    as_is_iqr_ms: _Ms
    folded_ms: _Ms
    folded_iqr_ms: _Ms
    speedup: float
    speedup_range: Annotated[list[float], Field(min_length=2, max_length=2)]
    repeats: Repeats
    precision: Precision
    batch: Annotated[int, Field(ge=1)]
    clock: Clock
    folded_file: str | None = None            # the shipped file timed as the folded network
    lut_as_is_ms: _Ms | None = None
    lut_folded_ms: _Ms | None = None
    lut_error_as_is: float | None = None
    lut_error_folded: float | None = None
    lut_speedup: float | None = None
    lut_speedup_error: float | None = None
    lut_created: str | None = None            # when the LUT was timed (null: it does not say)
    # a count device's (backend count): the *_ms figures are counts in this unit, not measured times
    count_unit: str | None = None


class PlanSection(StrictModel):
    """The plan file export applied (``--plan``): the file, its digest, what it was made for and predicted."""

    file: str
    sha256: str
    device: str
    lut_sha256: str
    budget: float
    importance: PlanImportance
    predicted: Predicted


class BiasMapsSection(Record):
    """How an exact-mode fold's bias maps are shipped (:func:`latopt.export.shipped.defer_plan`)."""

    _absent_when: ClassVar[dict[str, str]] = {"chains": "chains", "adds_per_block": "chains",
                                              "adds_deferred": "chains", "adds_saved": "chains", "spans": "spans"}

    form: BiasMaps
    chains: list[list[Annotated[int, Field(ge=0)]]] | None = None   # deferred: the chains of full folds
    adds_per_block: _Count | None = None
    adds_deferred: _Count | None = None
    adds_saved: _Count | None = None
    spans: list[_Span] | None = None

    @model_validator(mode="after")
    def _form(self) -> BiasMapsSection:
        if (self.form == "deferred") != (self.chains is not None):
            raise ValueError("gives chains and their Adds exactly when its form is deferred")
        return self


class ExportRecord(Record, Artefact):
    """``export.json`` (module docstring); ``to_json()`` leaves out the keys that do not apply."""

    SCHEMA: ClassVar[str] = EXPORT_SCHEMA

    _absent_when: ClassVar[dict[str, str]] = {"plan": "plan", "int8": "int8", "latency": "latency"}

    checkpoint: str
    device: str
    model: str
    resolution: Resolution
    mode: ExportMode
    precision: Precision
    folded: dict[BlockKey, FoldVariant]
    spans: list[_Span]
    bias_maps: BiasMapsSection | None
    notes: list[str]
    accuracy_gate: bool
    accuracy_gate_reason: str | None
    timing_only: bool
    plan: PlanSection | None = None
    gates: list[GateRecord]
    accuracy: AccuracySection | None
    int8: Int8Section | None = None
    latency: LatencySection | None = None
    files: list[str]

    @model_validator(mode="after")
    def _gate_said(self) -> ExportRecord:
        if self.accuracy_gate == (self.accuracy_gate_reason is not None):
            raise ValueError("gives accuracy_gate_reason exactly when accuracy_gate is false")
        return self


def write_export_record(path: str | Path, record: ExportRecord) -> Path:
    """``record`` as ``export.json`` at ``path``, written atomically."""
    return write_json_atomic(path, record.to_json())


def read_export_record(path: str | Path) -> ExportRecord:
    """The export record in ``path`` (an ``export.json``); one :class:`~latopt.errors.LatoptError` line when it is
    not strict JSON, of another schema, or not a valid record (an unknown key, a key missing, a wrong value)."""
    data = read_json(path, schema=EXPORT_SCHEMA, what="export record")
    return validated(ExportRecord, data, prefix=f"export record {path}: ", key="field")
