"""The exact tools' records: what ``latopt compress | regions | shallow`` write as ``report.json`` and return, and
the sections they are made of, as frozen, validated :class:`~latopt.files.records.StrictModel` records. They are built
from the tools' own values and read by attribute (:mod:`latopt.cli.exact`, :func:`latopt.exact.tools.compress_text`);
each report is written by its tool (:mod:`latopt.exact.tools`, ``report.to_json()``) and read back here only
(:func:`read_report`). A section or key that does not apply is absent from the JSON, not null (the grid check of a
network with more than 3 inputs, a data type not compared, the accuracy note); the compress report's
``accuracy`` is null when no test split was measured. A report's ``out`` (the directory it was written to) is
returned, never written.

Public API::

    BoxRecord                           the box: lo, hi (one number each when all coordinates agree), dim
    Verification                        verify_equal's comparison: points, max |diff| and its share of the output
                                        scale per data type, output_scale, rtol, ok, fraction_of_points_used (mask)
    StabilityCounts, LayerStability,    analyze_stability's summary: units per verdict and per method, by layer
      StabilityTimings, StabilitySummary  and in all, the seconds per stage
    CompressionSummary                  the compression: sizes, units and parameters before / after, what went
    CompressSeconds                     compress's seconds: analysis, compression, verification, total
    CompressAccuracy                    test accuracy before / after and the predictions changed
    CompressRecord                      compress's report (latopt.compress/1): box, stability, compression,
                                        verification, seconds
    CompressToolReport                  latopt compress's: the above plus checkpoint, accuracy (null: none),
                                        accuracy_note, wall_seconds, out
    RegionsSummary, GridCheck           the enumeration (regions, LPs, seconds, min radius, tol), the grid check
    RegionsReport                       latopt regions's (latopt.regions/1)
    Widths                              the hidden widths of the original network and of the shallow rewrites
    EpsNetwork, ExactNetwork            the shallow rewrites' verifications
    ShallowReport                       latopt shallow's (latopt.shallow/1)
    read_report(path, cls) -> cls       a report.json of that kind, or one LatoptError line
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)

from latopt.files.readers import read_json
from latopt.files.records import Accuracy, Artefact, StrictModel, validated

_Count = Annotated[int, Field(ge=0)]
_Seconds = Annotated[float, Field(ge=0)]
_Fraction = Annotated[float, Field(ge=0, le=1)]
Dtype = Literal["float64", "float32"]   # the data types verify_equal compares in


class _Sparse(StrictModel):
    """A record whose ``_ABSENT`` keys are left out of its JSON when None (not written as null)."""

    _ABSENT: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _drop_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if not (v is None and k in self._ABSENT)}


class BoxRecord(StrictModel):
    """The input box ``[lo, hi]``: one number each when every coordinate has the same bounds, else a list."""

    lo: float | list[float]
    hi: float | list[float]
    dim: Annotated[int, Field(ge=1)]


class Verification(_Sparse):
    """:func:`latopt.exact.verify.verify_equal`'s comparison: the points, the max ``|reference - candidate|``
    and its share of the output scale in each data type compared (absent: not compared), the output scale,
    the tolerance and whether it held; with a mask, the fraction of the points it kept."""

    _ABSENT: ClassVar[frozenset[str]] = frozenset(
        {"max_abs_float64", "max_rel_float64", "max_abs_float32", "max_rel_float32", "fraction_of_points_used"})

    points: Annotated[int, Field(ge=1)]
    max_abs_float64: float | None = None
    max_rel_float64: float | None = None
    max_abs_float32: float | None = None
    max_rel_float32: float | None = None
    output_scale: float
    rtol: float
    ok: bool
    fraction_of_points_used: _Fraction | None = None

    @model_validator(mode="after")
    def _pairs(self) -> Verification:
        compared = [d for d in ("float64", "float32") if self.max_abs(d) is not None]
        if not compared:
            raise ValueError("gives no data type's max_abs")
        for d in ("float64", "float32"):
            if (self.max_abs(d) is None) != (self.max_rel(d) is None):
                raise ValueError(f"gives max_abs_{d} and max_rel_{d} together or neither")
        return self

    def max_abs(self, dtype: Dtype) -> float | None:
        """The max |diff| in ``dtype`` (None: not compared)."""
        return self.max_abs_float64 if dtype == "float64" else self.max_abs_float32

    def max_rel(self, dtype: Dtype) -> float | None:
        """The max |diff| in ``dtype`` over the output scale (None: not compared)."""
        return self.max_rel_float64 if dtype == "float64" else self.max_rel_float32


# ---------------------------------------------------------------------------- compress
class StabilityCounts(StrictModel):
    """Hidden units by verdict (stable ones also by the method that proved them), the sampled upper bound on the
    stable units and the MILP solves: of one layer, or of all of them."""

    units: _Count
    inactive: _Count
    active: _Count
    unstable: _Count          # decided unstable
    undecided: _Count         # a MILP hit its time limit: kept, never removed on a guess
    sampled_upper_bound: _Count
    stable_by_interval: _Count
    stable_by_lp: _Count
    stable_by_milp: _Count
    milp_solves: _Count


class LayerStability(StabilityCounts):
    """One hidden layer's :class:`StabilityCounts` (``layer``: its index, written first)."""

    layer: _Count

    @model_serializer(mode="wrap")
    def _layer_first(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {"layer": data.pop("layer"), **data}


class StabilityTimings(StrictModel):
    """Seconds spent in each stage of the analysis."""

    sampling: _Seconds
    interval: _Seconds
    lp: _Seconds
    milp: _Seconds


class StabilitySummary(StrictModel):
    """:meth:`latopt.exact.analysis.StabilityAnalysis.summary`: the counts by layer and in all (``{}`` in the JSON,
    None here, for a network without hidden layers), the seconds, the sampled points, the stages' seconds."""

    layers: list[LayerStability]
    total: StabilityCounts | None
    seconds: _Seconds
    samples: _Count
    timings: StabilityTimings

    @field_validator("total", mode="before")
    @classmethod
    def _empty_total(cls, v: Any) -> Any:
        return None if v == {} else v

    @field_serializer("total")
    def _total_json(self, v: StabilityCounts | None) -> StabilityCounts | dict[str, Any]:
        return {} if v is None else v


class CompressionSummary(StrictModel):
    """:meth:`latopt.exact.stability.CompressionResult.summary`: the layer sizes, hidden units and parameters
    before and after, the units removed per hidden layer (stably inactive; stably active and dependent), the
    layers collapsed (their count, constant networks' included; and which), whether the result is constant."""

    layers_before: list[_Count]
    layers_after: list[_Count]
    hidden_units_before: _Count
    hidden_units_after: _Count
    units_removed: _Count
    units_removed_fraction: _Fraction
    removed_inactive: list[_Count]
    removed_dependent_active: list[_Count]
    layers_collapsed: _Count
    collapsed_layers: list[_Count]
    constant: bool
    params_before: _Count
    params_after: _Count


class CompressSeconds(StrictModel):
    """Seconds of :func:`latopt.exact.stability.compress`'s stages and in all."""

    analysis: _Seconds
    compression: _Seconds
    verification: _Seconds
    total: _Seconds

    def rounded(self, digits: int = 3) -> CompressSeconds:
        """The same seconds rounded to ``digits`` decimals (as the report has them)."""
        return CompressSeconds(analysis=round(self.analysis, digits), compression=round(self.compression, digits),
                               verification=round(self.verification, digits), total=round(self.total, digits))


class CompressAccuracy(StrictModel):
    """Test accuracy of the network before and after compression, on the checkpoint's test split."""

    data: str
    before: Accuracy
    after: Accuracy
    prediction_changes: _Count
    test_points: _Count


class CompressRecord(Artefact):
    """What :func:`latopt.exact.stability.compress` reports (``latopt.compress/1``, schema first):
    :meth:`latopt.exact.stability.CompressReport.record`."""

    SCHEMA: ClassVar[str] = "latopt.compress/1"

    box: BoxRecord
    stability: StabilitySummary
    compression: CompressionSummary
    verification: Verification
    seconds: CompressSeconds


class CompressToolReport(CompressRecord, _Sparse):
    """``latopt compress``'s report.json (:func:`latopt.exact.tools.compress_checkpoint`): the
    :class:`CompressRecord` and the checkpoint, the test accuracy (null: not measured), why it was not measured
    (absent when it was, or when the network has no test split: a random one), the wall time; ``out``, the
    directory written, is returned but not written."""

    _ABSENT: ClassVar[frozenset[str]] = frozenset({"accuracy_note"})

    checkpoint: str
    accuracy: CompressAccuracy | None
    accuracy_note: str | None = None
    wall_seconds: _Seconds
    out: str | None = Field(default=None, exclude=True)


# ---------------------------------------------------------------------------- regions
class RegionsSummary(StrictModel):
    """:meth:`latopt.exact.regions.RegionEnumeration.summary`: the regions, the LPs solved, the seconds, the
    radius of the thinnest region's inner ball, the tolerance (of the box's diameter) below which none is kept."""

    regions: _Count
    lps: _Count
    seconds: _Seconds
    min_radius: float
    tol: float


class GridCheck(StrictModel):
    """The regions tool's cross-check on a grid of ``resolution``^d cell centres: the activation patterns seen,
    whether all are enumerated, the regions the grid missed (count, largest inner ball) and whether each is
    thinner than half a cell diagonal (so it could not hold a centre)."""

    resolution: Annotated[int, Field(ge=1)]
    points: _Count
    distinct_patterns: _Count
    all_in_enumeration: bool
    missed_regions: _Count
    missed_max_radius: float
    half_cell_diagonal: float
    missed_are_thin: bool
    seconds: _Seconds

    @property
    def agrees(self) -> bool:
        """Whether the grid confirms the enumeration."""
        return self.all_in_enumeration and self.missed_are_thin


class RegionsReport(Artefact, _Sparse):
    """``latopt regions``'s report.json (:func:`latopt.exact.tools.regions_of`): the checkpoint, the layer sizes,
    the box, the :class:`RegionsSummary`'s keys, the grid check (absent: off, or more than 3 inputs), each
    region's activation pattern ("0"/"1" per hidden unit); ``out`` is returned, not written."""

    SCHEMA: ClassVar[str] = "latopt.regions/1"
    _ABSENT: ClassVar[frozenset[str]] = frozenset({"grid"})

    checkpoint: str
    sizes: list[_Count]
    box: BoxRecord
    regions: _Count
    lps: _Count
    seconds: _Seconds
    min_radius: float
    tol: float
    grid: GridCheck | None = None
    patterns: list[str]
    out: str | None = Field(default=None, exclude=True)


# ---------------------------------------------------------------------------- shallow
class Widths(StrictModel):
    """:func:`latopt.exact.shallow.widths`: the original network's hidden widths, the regions and merged facet
    hyperplanes, and the two hidden widths of the eps-network and of the exact indicator network."""

    original_hidden: list[_Count]
    regions: _Count
    hyperplanes: _Count
    eps_network_hidden: list[_Count]
    exact_network_hidden: list[_Count]


class EpsNetwork(StrictModel):
    """The eps-network checked on the sampled points at least eps from their region's facets, its largest weight."""

    verification: Verification
    max_abs_weight: float


class ExactNetwork(StrictModel):
    """The exact indicator network checked on all the sampled points."""

    verification: Verification


class ShallowReport(Artefact):
    """``latopt shallow``'s report.json (:func:`latopt.exact.tools.shallow_of`): the checkpoint, the layer sizes,
    the box, eps, the :class:`Widths`, both rewrites' checks, the enumeration, the seconds; ``out`` is returned,
    not written."""

    SCHEMA: ClassVar[str] = "latopt.shallow/1"

    checkpoint: str
    sizes: list[_Count]
    box: BoxRecord
    epsilon: float
    widths: Widths
    eps_network: EpsNetwork
    exact_network: ExactNetwork
    regions: RegionsSummary
    seconds: _Seconds
    out: str | None = Field(default=None, exclude=True)


R = TypeVar("R", CompressToolReport, RegionsReport, ShallowReport)


def read_report(path: str | Path, cls: type[R]) -> R:
    """The exact tool's report in ``path`` (a ``report.json``) as a ``cls``; one
    :class:`~latopt.errors.LatoptError` line when it is not strict JSON, of another schema, or not a valid report."""
    data = read_json(path, schema=cls.SCHEMA, what=f"{cls.SCHEMA} report")
    return validated(cls, data, prefix=f"report {path}: ", key="field")
