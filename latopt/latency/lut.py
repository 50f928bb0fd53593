"""The per-block latency table (LUT): JSON with schema ``latopt.lut/1``.

Public API::

    LUT_SCHEMA = "latopt.lut/1"
    SPAN_FOLD_MODE = "exact"                 the one fold mode a LUT may time spans in (latopt.constants)
    BlockEntry, SpanEntry, EndToEnd, LutCalibration, LUT
                                             frozen pydantic records (fields below); lut.to_dict() is the JSON
    save_lut(lut, path) -> Path              atomic JSON write
    load_lut(path, *, model=None, resolution=None, batch=None, device=None, fold_mode=None) -> LUT
                                             LatoptError on a mismatch or a malformed LUT (one line naming
                                             the file and the field)
    check_blocks(lut, blocks, path="the LUT")   LatoptError unless the LUT times exactly the model's blocks
                                             (``latopt.nets.blocks.find_blocks``: one entry per block, same paths)
                                             and each span as what its blocks compose to (its kernel)
    predict(lut, folded) -> float            ms of the network with ``folded`` blocks folded
    costs(lut) -> dict[int, float]           c_l = max(0, t_asis − t_full) per foldable block
    variant_times(lut, index) -> dict[str, float]   {"none", "full", and the other profiled variants it allows}
    check_variants(variants) -> tuple[str, ...]   the variants ``latopt profile --variants`` times ("full" first)
    default_lut_path(device, model, resolution, batch) -> Path   profiles/<device>/<model>-r<res>-b<batch>.json
                                             (relative to the working directory, or under $LATOPT_PROFILES_DIR;
                                             <model>: lut_model_name's, one path for every spelling of a model)
    lut_model_name(model) -> str             the model name a LUT records: the canonical spelling
                                             (``latopt.nets.models.canonical_name``), else the name as given
    calibrate(raw, fixed_raw, nets) -> (scales, notes)             per-variant scales (used by the profiler)

Times. ``BlockEntry.raw[v]`` are the measured statistics of block ``index`` in variant ``v`` ("none" =
as-is), each timed alone at its real input shape. Summing isolated times over-predicts the network
(each call pays launch overhead and NCHWc layout reorders of its input and output that the network
does once; see profiler.py), so the profiler also measures end-to-end networks in the same interleaved
run and calibrates (:func:`calibrate`): ``ms[v] = scales[v] × raw[v].median`` and
``fixed_ms = scales["none"] × (stem + head)``. ``scales["none"]`` makes the as-is network exact;
``scales[v]`` for a fold variant makes the network with every block in variant ``v`` exact. ``predict``
sums the calibrated times; ``end_to_end`` stores every measured network with its prediction error,
including held-out fold sets that were not used for the fit (``"calibration": false``): one of ``full``
folds and, when more variants are profiled, one mixing them all.

Variants. ``LUT.variants`` lists the fold variants timed besides as-is (``latopt profile --variants``;
``full`` always). ``drop`` (a residual block removed) is not timed: its time is 0 by definition (the block
is gone; what that leaves out, e.g. a residual ``Add`` the network had fused, the mixed held-out network
measures). A LUT that records ``partial`` instead of ``variants`` (an older format) is refused: re-profile.

Validation. Loading a LUT reads data only (no model is built, timm is not imported): the file is validated
as the pydantic records below (no unknown field, types, finite times >= 0, known variant names, block
indices 0..n-1 once each, block paths distinct, "none" timed for every block and "full" for a foldable one;
spans only in an exact-mode LUT: they are exact-mode rewrites, which export merges in exact mode only);
``schema``, ``costs`` and each block's ``c`` are written for readers and recomputed, never read. That it
times the blocks of a given *model* is the check of the caller that has the model (the search, ``latopt
run``, the fold, the DP and export): :func:`check_blocks` with the model's block list.

Precision. ``LUT.precision`` is the device profile's precision the times were taken at (``int8``: every
timed network an ONNX Runtime static INT8 model; the backend's settings are in ``environment``); ``None``
when the LUT does not say. LUTs live under their device's name
(``profiles/<device>/``), and ``cpu`` and ``cpu-int8`` are two devices, so where a caller names the device
(export's ``--lut``), the ``device`` check of :func:`load_lut` already keeps an INT8 LUT from standing for the
fp32 device and the reverse; export also compares no LUT timed at another precision than it measures.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeGuard

from pydantic import (
    BeforeValidator,
    Field,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    computed_field,
    model_serializer,
    model_validator,
)

from latopt.constants import (
    FOLD_VARIANTS,
    LUT_VARIANTS,
    SPAN_FOLD_MODE,
    FoldMode,
    FoldVariant,
    LutVariant,
    Precision,
)
from latopt.errors import LatoptError
from latopt.files.artifacts import write_json_atomic
from latopt.files.readers import read_json
from latopt.files.records import StrictModel, validated
from latopt.latency.devices import profiles_dir
from latopt.nets.variants import PARTIAL_VARIANTS
from latopt.nets.variants import VARIANTS as SPECS
from latopt.runtime import TimingStats

LUT_SCHEMA = "latopt.lut/1"
VARIANTS = LUT_VARIANTS  # "none" (as-is) and the fold variants
Variant = LutVariant
Ms = Annotated[float, Field(ge=0)]  # a time: finite (StrictModel) and >= 0


class _Stats(StrictModel):
    """The JSON form of a :class:`~latopt.runtime.TimingStats` (its ``to_dict``), validated."""

    median_ms: Ms
    q1_ms: Ms
    q3_ms: Ms
    iqr_ms: Ms
    n: Annotated[int, Field(ge=1)]
    wall_median_ms: Ms | None = None


def _stats(v: Any) -> Any:
    return v if isinstance(v, TimingStats) else TimingStats(**_Stats.model_validate(v).model_dump())


Stats = Annotated[TimingStats, BeforeValidator(_stats), PlainSerializer(lambda s: s.to_dict())]


def _as_tuple(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v  # JSON has lists; the records hold tuples


def _without(d: Any, keys: tuple[str, ...]) -> Any:
    """``d`` less the keys ``to_dict`` derives (they are recomputed, never read)."""
    return {k: v for k, v in d.items() if k not in keys} if isinstance(d, Mapping) else d


class BlockEntry(StrictModel):
    index: Annotated[int, Field(ge=0)]
    path: str
    kind: str
    input_shape: Annotated[tuple[Annotated[int, Field(ge=1)], ...], Field(min_length=1), BeforeValidator(_as_tuple)]
    foldable: bool
    reason: str = ""
    raw: dict[Variant, Stats]  # measured, per variant ("none" = as-is)
    ms: dict[Variant, Ms]  # calibrated ms per variant (what predict sums)

    @model_validator(mode="before")
    @classmethod
    def _derived(cls, d: Any) -> Any:
        return _without(d, ("c",))

    @model_validator(mode="after")
    def _timed(self) -> BlockEntry:
        if "none" not in self.ms:
            raise ValueError("has no ms time for variant 'none' (the block as it is)")
        if self.foldable and "full" not in self.ms:
            raise ValueError("is foldable but has no ms time for variant 'full'")
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def c(self) -> float:
        """c_l = max(0, t_asis − t_full); 0 for a block that cannot be folded."""
        if not self.foldable or "full" not in self.ms:
            return 0.0
        return max(0.0, self.ms["none"] - self.ms["full"])


def _variant_list(v: Any) -> Any:
    """Known variant names in FOLD_VARIANTS order, "full" among them (anything else: refused by the type)."""
    v = _as_tuple(v)
    return check_variants(v) if isinstance(v, tuple) and all(x in FOLD_VARIANTS for x in v) else v


class SpanEntry(StrictModel):
    """One timed span (:mod:`latopt.latency.merged_spans`): blocks ``start..end`` as one ``kernel``×``kernel``
    convolution; ``fulls``: the blocks that may be its ``full`` fold (empty for a 1x1 span); ``raw``: the
    measured statistics; ``ms``: calibrated (the scale of ``pw`` for 1x1, of ``full`` for k×k, × raw median:
    :func:`latopt.latency.merged_spans.span_scale`)."""

    start: Annotated[int, Field(ge=0)]
    end: Annotated[int, Field(ge=1)]
    kernel: Annotated[int, Field(ge=1)]
    fulls: Annotated[tuple[int, ...], BeforeValidator(_as_tuple)] = ()
    raw: Stats
    ms: Ms

    @model_validator(mode="after")
    def _shape(self) -> SpanEntry:
        if self.end <= self.start:
            raise ValueError(f"span {self.start}-{self.end}: end must be after start")
        if (self.kernel > 1) != bool(self.fulls) or any(not self.start <= f <= self.end for f in self.fulls):
            raise ValueError(f"span {self.start}-{self.end}: a k×k span names its full-fold blocks (inside it), "
                             "a 1x1 span none")
        return self

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.start, self.end, self.kernel)


class EndToEnd(StrictModel):
    """One network timed whole in the profiling run: ``folded`` (block index → variant; empty: as-is),
    ``spans`` (start, end, kernel of each merged span; omitted from the JSON when none), whether it was fitted
    (``calibration``) or held out, the measured statistics, the LUT's prediction and its relative ``error``, and
    the uncalibrated sum of isolated times (``raw_sum_ms``, ``raw_error``)."""

    folded: dict[str, str] = {}
    calibration: bool = False
    spans: list[list[int]] = []
    measured: Stats
    raw_sum_ms: float | None = None
    raw_error: float | None = None
    predicted_ms: float
    error: float | None = None

    @model_serializer(mode="wrap")
    def _without_empty_spans(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        d: dict[str, Any] = handler(self)
        if not self.spans:
            d.pop("spans", None)
        return d


class LutCalibration(StrictModel):
    """How the block times were calibrated (:func:`calibrate`): the per-variant ``scales``, the networks they
    were fitted on, the clipping notes; ``method`` and ``description`` for a reader of the JSON."""

    method: str = ""
    scales: dict[str, float] = {}
    fit_on: list[str] = []
    notes: list[str] = []
    description: str = ""


class LUT(StrictModel):
    device: Annotated[str, Field(min_length=1)]
    model: Annotated[str, Field(min_length=1)]
    resolution: Annotated[int, Field(ge=1)]
    batch: Annotated[int, Field(ge=1)]
    blocks: Annotated[list[BlockEntry], Field(min_length=1)]
    fixed_ms: Ms  # calibrated stem + head (+ classifier)
    fixed: dict[str, Stats] = {}  # measured "stem", "head"
    end_to_end: dict[str, EndToEnd] = {}  # every network timed whole, by name
    calibration: LutCalibration = LutCalibration()
    backend: str = ""
    environment: dict[str, Any] = {}
    num_classes: Annotated[int, Field(ge=1)] = 1000
    fold_mode: FoldMode = "exact"
    # fold variants profiled besides "none" (check_variants: FOLD_VARIANTS order, "full" always)
    variants: Annotated[tuple[FoldVariant, ...], BeforeValidator(_variant_list)] = ("full",)
    precision: Precision | None = None  # the device profile's precision the times were taken at (None: unknown)
    spans: list[SpanEntry] = []  # timed spans (latopt profile --variants ...,span); none when not profiled
    profiling_s: Ms = 0.0
    call_overhead_ms: Ms | None = None
    created: str = ""

    @model_validator(mode="before")
    @classmethod
    def _format(cls, d: Any) -> Any:
        if isinstance(d, Mapping) and "partial" in d and "variants" not in d:
            raise ValueError("it records 'partial' instead of 'variants' (an older LUT format): profile the model again")
        return _without(d, ("schema", "costs"))

    @model_validator(mode="after")
    def _one_entry_per_block(self) -> LUT:
        seen: dict[int, int] = {}
        for i, b in enumerate(self.blocks):
            if b.index in seen:
                raise ValueError(f"block index {b.index} appears twice (blocks[{seen[b.index]}] and blocks[{i}])")
            seen[b.index] = i
        missing = [i for i in range(len(self.blocks)) if i not in seen][:5]
        if missing:
            raise ValueError(f"block indices must be 0..{len(self.blocks) - 1}, one per block; missing {missing}")
        paths = [b.path for b in self.blocks]
        twice = next((p for p in paths if paths.count(p) > 1), None)
        if twice is not None:
            raise ValueError(f"block path {twice!r} appears twice")
        keys = [s.key for s in self.spans]
        if len(set(keys)) != len(keys) or any(s.end >= len(self.blocks) for s in self.spans):
            raise ValueError("spans must be distinct (start, end, kernel) within the blocks")
        if self.spans and self.fold_mode != SPAN_FOLD_MODE:
            raise ValueError(f"it times spans in fold mode {self.fold_mode!r}, but spans are {SPAN_FOLD_MODE}-mode "
                             f"rewrites (export merges them in {SPAN_FOLD_MODE} mode only): profile again without span, "
                             f"or in fold mode {SPAN_FOLD_MODE}")
        return self

    def span(self, start: int, end: int, kernel: int) -> SpanEntry:
        for s in self.spans:
            if s.key == (start, end, kernel):
                return s
        raise LatoptError(f"the LUT of {self.model} has no time for the span {start}-{end} as a {kernel}x{kernel} "
                          "convolution; profile it with latopt profile --variants ...,span")

    def block(self, index: int) -> BlockEntry:
        for b in self.blocks:
            if b.index == index:
                return b
        raise LatoptError(f"block {index} is not in the LUT of {self.model} "
                          f"(blocks 0..{len(self.blocks) - 1})")

    def foldable(self) -> list[int]:
        return [b.index for b in self.blocks if b.foldable]

    @property
    def partial(self) -> bool:
        """The partial folds were profiled (``granularity: activation`` needs them)."""
        return set(PARTIAL_VARIANTS) <= set(self.variants)

    def to_dict(self) -> dict[str, Any]:
        """The LUT as JSON data (what :func:`save_lut` writes): the schema, the fields, the derived c_l."""
        return {"schema": LUT_SCHEMA, **self.model_dump(mode="json"),
                "costs": {str(k): v for k, v in costs(self).items()}}


def save_lut(lut: LUT, path: str | Path) -> Path:
    return write_json_atomic(path, lut.to_dict())


def load_lut(path: str | Path, *, model: str | None = None, resolution: int | None = None,
             batch: int | None = None, device: str | None = None, fold_mode: str | None = None) -> LUT:
    """Read a LUT; LatoptError when it is corrupt (one line naming the file and the field) or was profiled for
    another model/resolution/batch/device/fold mode (an exact fold ships bias maps a paper fold has not: their
    times, and so c_l, differ). The data alone: that it times a model's blocks is :func:`check_blocks`."""
    data = read_json(path, schema=LUT_SCHEMA, what="latency LUT")
    try:
        lut = validated(LUT, data, prefix=f"latency LUT {path} is corrupt: ", key="field")
    except LatoptError as e:
        raise LatoptError(f"{e}; re-create it with latopt profile") from None
    want = {"model": model, "resolution": resolution, "batch": batch, "device": device, "fold_mode": fold_mode}
    for key, expected in want.items():
        have = getattr(lut, key)
        if expected is not None and have != expected and not (key == "model" and isinstance(expected, str)
                                                               and _same_model(have, expected)):
            raise LatoptError(
                f"latency LUT {path} was profiled for {key} {have!r}, not {expected!r}; profile (latopt profile) "
                f"device {device or lut.device}, model {model or lut.model}, resolution {resolution or lut.resolution}, "
                f"batch {batch or lut.batch}, fold mode {fold_mode or lut.fold_mode}", param=key)
    return lut


def _same_model(a: str, b: str) -> bool:
    from latopt.nets.models import same_model  # torch: only when the spellings differ

    return same_model(a, b)


def lut_model_name(model: str) -> str:
    """The model name a LUT records (the profiler) and is filed under (:func:`default_lut_path`): its canonical
    spelling (:func:`latopt.nets.models.canonical_name`: ``torchvision/mobilenet_v2?width=1.0`` and
    ``timm/mobilenetv2_100`` are ``torchvision/mobilenet_v2`` and ``mobilenetv2_100``), so that every spelling of a
    model finds one LUT; a name latopt cannot parse (a profiled module's label) as given. LUTs that recorded
    another spelling still load: :func:`load_lut` compares names as models."""
    from latopt.nets.models import canonical_name  # torch

    try:
        return canonical_name(model)
    except LatoptError:
        return model


def check_blocks(lut: LUT, blocks: Sequence[Any], path: str | Path = "the LUT") -> None:
    """LatoptError unless ``lut`` times exactly ``blocks``, the block list of the model it is used with
    (:func:`latopt.nets.blocks.find_blocks`): one entry per block, at the same module path, and every timed span
    what its blocks compose to (:func:`latopt.latency.merged_spans.span_problem`: its kernel, exactness, foldable
    blocks; at the input shapes the LUT records). A LUT missing a block would let the search treat that block
    as free to keep; a forged span kernel would be predicted and reported while export ships the composition."""
    have = [b.path for b in sorted(lut.blocks, key=lambda b: b.index)]
    want = [b.path for b in blocks]
    problem = None
    if len(have) != len(want):
        problem = f"times {len(have)} blocks but the model {lut.model} has {len(want)}"
    elif have != want:
        i = next(i for i, (h, w) in enumerate(zip(have, want, strict=True)) if h != w)
        problem = f"times block {i} at {have[i]!r} but the model {lut.model} has it at {want[i]!r}"
    elif lut.spans:
        from latopt.latency.merged_spans import span_problem  # torch: the caller has the model, so has torch

        shapes = {b.index: b.input_shape for b in lut.blocks}
        for s in lut.spans:
            why = span_problem(blocks, s.start, s.end, s.kernel, s.fulls, shapes)
            if why is not None:
                problem = f"times span {s.start}-{s.end} as a {s.kernel}x{s.kernel} convolution, but the span {why}"
                break
    if problem is not None:
        raise LatoptError(f"latency LUT {path} {problem}; re-create it with latopt profile for model {lut.model}")


def _is_variant(v: str) -> TypeGuard[Variant]:
    return v in VARIANTS


def _plan(lut: LUT, folded: Iterable[int] | Mapping[int, str] | str) -> dict[int, Variant]:
    if isinstance(folded, str):
        if folded != "all":
            raise LatoptError(f"fold set {folded!r}: give block indices, a {{index: variant}} map or 'all'")
        return dict.fromkeys(lut.foldable(), "full")
    asked = ({int(k): str(v) for k, v in folded.items()} if isinstance(folded, Mapping)
             else dict.fromkeys((int(i) for i in folded), "full"))
    plan: dict[int, Variant] = {}
    for i, v in asked.items():
        b = lut.block(i)
        if v != "none":
            if not b.foldable and not (v in SPECS and SPECS[v].on_unfoldable and v in b.ms):
                raise LatoptError(f"block {i} ({b.path}) cannot be folded: {b.reason}")
            if v not in b.ms:
                hint = f" (profile the variants {','.join(('full', v))})" if v in VARIANTS else ""
                raise LatoptError(f"the LUT has no time for block {i} in variant {v!r}{hint}; "
                                  f"it has {sorted(b.ms)}")
        assert _is_variant(v)  # "none" or a variant the block is timed in
        plan[i] = v
    return plan


def check_variants(variants: Iterable[str]) -> tuple[str, ...]:
    """The fold variants a LUT times, in FOLD_VARIANTS order, "full" always among them (it gives c_l and the
    calibration's fallback scale); LatoptError on an unknown name."""
    names = [str(v).strip() for v in variants]
    unknown = [v for v in names if v not in FOLD_VARIANTS]
    if unknown:
        raise LatoptError(f"unknown variant {unknown[0]!r}; variants are {', '.join(FOLD_VARIANTS)}")
    return tuple(v for v in FOLD_VARIANTS if v in names or v == "full")


def predict(lut: LUT, folded: Iterable[int] | Mapping[int, str] | str,
            spans: Iterable[Sequence[int]] = ()) -> float:
    """Predicted latency (ms) of the network with ``folded`` blocks folded and ``spans`` merged.

    ``folded``: block indices (full fold), ``{index: variant}`` (any variant the LUT has for that block,
    "none" = as-is), or "all" (every foldable block folded ``full``). ``spans``: ``(start, end, kernel)``
    each, timed in the LUT (:meth:`LUT.span`): the span's one convolution replaces its blocks' times.
    """
    plan = _plan(lut, folded)
    covered: set[int] = set()
    span_ms = 0.0
    for s in spans:
        a, b, k = (int(x) for x in s)
        span_ms += lut.span(a, b, k).ms
        covered.update(range(a, b + 1))
    return lut.fixed_ms + span_ms + sum(b.ms[plan.get(b.index, "none")] for b in lut.blocks
                                        if b.index not in covered)


def costs(lut: LUT) -> dict[int, float]:
    """c_l = max(0, t_asis − t_full) (calibrated ms) for every foldable block."""
    return {b.index: b.c for b in lut.blocks if b.foldable}


def variant_times(lut: LUT, index: int) -> dict[str, float]:
    """Calibrated ms of block ``index`` in every profiled variant ("none" = as-is)."""
    return {v: t for v, t in lut.block(index).ms.items()}


def calibrate(raw: Mapping[int, Mapping[str, float]], fixed_raw: float,
              nets: Mapping[str, tuple[Mapping[int, str], float]]) -> tuple[dict[str, float], list[str]]:
    """Per-variant scales mapping isolated medians to in-network time, fitted to end-to-end networks.

    ``raw[i][v]``: isolated median (ms) of block ``i`` in variant ``v``; ``fixed_raw``: stem + head;
    ``nets[name] = (plan, measured_ms)``. The network with the empty plan fixes ``scales["none"]``
    (fixed parts and unfolded blocks); each network whose plan uses one variant ``v`` fixes ``scales[v]``
    given ``scales["none"]``. A variant without such a network takes ``scales["full"]`` (else "none").
    A fitted ratio outside [0.5, 2] × scales["none"] is clipped (noted): it would mean the measurement is
    broken, not that the device is. Returns (scales, notes).
    """
    notes: list[str] = []
    asis = [m for plan, m in nets.values() if not plan]
    if not asis:
        raise LatoptError("cannot calibrate the LUT: the as-is network was not measured")
    s_none = asis[0] / (fixed_raw + sum(r["none"] for r in raw.values()))
    scales = {"none": s_none}
    for name, (plan, measured) in nets.items():
        variants = set(plan.values())
        if len(variants) != 1:
            continue
        (v,) = variants
        folded = sum(raw[i][v] for i in plan)
        rest = fixed_raw + sum(r["none"] for i, r in raw.items() if i not in plan)
        s = (measured - s_none * rest) / folded if folded > 0 else float("nan")
        if not math.isfinite(s) or not 0.5 * s_none <= s <= 2.0 * s_none:
            clipped = s_none if not math.isfinite(s) else min(max(s, 0.5 * s_none), 2.0 * s_none)
            notes.append(f"scale for {v!r} from network {name!r} was {s:.3f}, clipped to {clipped:.3f}")
            s = clipped
        scales[v] = s
    for v in VARIANTS[1:]:
        if v not in scales and any(v in r for r in raw.values()):
            scales[v] = scales.get("full", s_none)
            notes.append(f"no end-to-end network for {v!r}: uses the {'full' if 'full' in scales else 'none'} scale")
    return scales, notes


def _slug(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", model).strip("_") or "model"


def default_lut_path(device: str, model: str, resolution: int, batch: int) -> Path:
    """Where ``latopt profile`` writes a LUT and the other stages look for it: ``profiles/<device>/...`` in the
    working directory (:func:`~latopt.latency.devices.profiles_dir`), never inside the installed package; one
    path for every spelling of ``model`` (:func:`lut_model_name`)."""
    return profiles_dir() / device / f"{_slug(lut_model_name(model))}-r{int(resolution)}-b{int(batch)}.json"
