"""The per-block latency table (LUT): JSON with schema ``latopt.lut/1``.

Public API::

    LUT_SCHEMA = "latopt.lut/1"
    BlockEntry, LUT                          dataclasses (fields below)
    save_lut(lut, path) -> Path              atomic JSON write
    load_lut(path, *, model=None, resolution=None, batch=None, device=None) -> LUT   LatoptError on mismatch
                                             or on a malformed LUT (one line naming the field)
    predict(lut, folded) -> float            ms of the network with ``folded`` blocks folded
    costs(lut) -> dict[int, float]           c_l = max(0, t_asis − t_full) per foldable block
    variant_times(lut, index) -> dict[str, float]   {"none", "full", and the other profiled variants it allows}
    check_variants(variants) -> tuple[str, ...]   the variants ``latopt profile --variants`` times ("full" first)
    default_lut_path(device, model, resolution, batch) -> Path   profiles/<device>/<model>-r<res>-b<batch>.json
                                             (relative to the working directory, or under $LATOPT_PROFILES_DIR)
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
measures). A LUT written before ``variants`` existed has ``partial: true|false`` instead and
loads as ``full`` (+ ``expand_dw``, ``dw_project``).

Precision. ``LUT.precision`` is the device profile's precision the times were taken at (``int8``: every
timed network an ONNX Runtime static INT8 model; the backend's settings are in ``environment``). A LUT
written before it was recorded loads with ``None``. LUTs live under their device's name
(``profiles/<device>/``), and ``cpu`` and ``cpu-int8`` are two devices, so where a caller names the device
(export's ``--lut``), the ``device`` check of :func:`load_lut` already keeps an INT8 LUT from standing for the
fp32 device and the reverse; export also compares no LUT timed at another precision than it measures.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from latopt.artifacts import write_json_atomic
from latopt.constants import FOLD_VARIANTS, LUT_VARIANTS, PARTIAL_VARIANTS, PRECISIONS
from latopt.errors import LatoptError
from latopt.latency.devices import profiles_dir
from latopt.latency.timing import TimingStats
from latopt.readers import read_json

LUT_SCHEMA = "latopt.lut/1"
VARIANTS = LUT_VARIANTS  # "none" (as-is) and the fold variants


@dataclass
class BlockEntry:
    index: int
    path: str
    kind: str
    input_shape: tuple[int, ...]
    foldable: bool
    reason: str
    raw: dict[str, TimingStats]  # measured, per variant ("none" = as-is)
    ms: dict[str, float]  # calibrated ms per variant (what predict sums)

    @property
    def c(self) -> float:
        """c_l = max(0, t_asis − t_full); 0 for a block that cannot be folded."""
        if not self.foldable or "full" not in self.ms:
            return 0.0
        return max(0.0, self.ms["none"] - self.ms["full"])

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "path": self.path, "kind": self.kind, "input_shape": list(self.input_shape),
                "foldable": self.foldable, "reason": self.reason,
                "raw": {v: s.to_dict() for v, s in self.raw.items()}, "ms": dict(self.ms), "c": self.c}

    @classmethod
    def from_dict(cls, d: Any, where: str = "block") -> BlockEntry:
        """Parse and check one block of a LUT; LatoptError naming the field when it is malformed."""
        f = _Fields(d, where)
        index = f.integer("index", lo=0)
        f.where = where = f"block {index}"
        shape = f.get("input_shape")
        if not isinstance(shape, list) or not shape or not all(_is_int(s) and s >= 1 for s in shape):
            raise LatoptError(f"{where}: input_shape must be a non-empty list of positive integers, not {_short(shape)}")
        raw = {v: _timing(s, f"{where} variant {v!r} raw") for v, s in f.variants("raw", as_is=False).items()}
        ms = {v: _time(t, f"{where} variant {v!r} ms") for v, t in f.variants("ms", as_is=True).items()}
        foldable = f.flag("foldable")
        if foldable and "full" not in ms:
            raise LatoptError(f"{where}: foldable but ms has no time for variant 'full'")
        return cls(index, f.text("path"), f.text("kind"), tuple(shape), foldable, f.text("reason", ""), raw, ms)


@dataclass
class LUT:
    device: str
    model: str
    resolution: int
    batch: int
    blocks: list[BlockEntry]
    fixed_ms: float  # calibrated stem + head (+ classifier)
    fixed: dict[str, TimingStats] = field(default_factory=dict)  # measured "stem", "head"
    end_to_end: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {plan, measured, predicted_ms, error}
    calibration: dict[str, Any] = field(default_factory=dict)
    backend: str = ""
    environment: dict[str, Any] = field(default_factory=dict)
    num_classes: int = 1000
    fold_mode: str = "exact"
    variants: tuple[str, ...] = ("full",)  # fold variants profiled besides "none" (check_variants)
    precision: str | None = None  # the device profile's precision the times were taken at (None: an older LUT)
    profiling_s: float = 0.0
    call_overhead_ms: float | None = None
    created: str = ""

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
        return {
            "schema": LUT_SCHEMA, "device": self.device, "backend": self.backend, "model": self.model,
            "resolution": self.resolution, "batch": self.batch, "num_classes": self.num_classes,
            "fold_mode": self.fold_mode, "variants": list(self.variants), "precision": self.precision,
            "created": self.created,
            "profiling_s": self.profiling_s, "call_overhead_ms": self.call_overhead_ms,
            "calibration": self.calibration, "fixed_ms": self.fixed_ms,
            "fixed": {k: s.to_dict() for k, s in self.fixed.items()},
            "blocks": [b.to_dict() for b in self.blocks],
            "costs": {str(k): v for k, v in costs(self).items()},
            "end_to_end": self.end_to_end, "environment": self.environment,
        }

    @classmethod
    def from_dict(cls, d: Any) -> LUT:
        """Parse and check a LUT (as JSON gives it); LatoptError naming the field when it is malformed:
        a missing field or one of the wrong type, a negative, NaN or infinite time, no blocks, a block
        index given twice."""
        f = _Fields(d, "LUT")
        blocks_raw = f.get("blocks")
        if not isinstance(blocks_raw, list) or not blocks_raw:
            raise LatoptError(f"LUT: blocks must be a non-empty list, not {_short(blocks_raw)}")
        blocks: list[BlockEntry] = []
        for i, b in enumerate(blocks_raw):
            entry = BlockEntry.from_dict(b, f"blocks[{i}]")
            if any(e.index == entry.index for e in blocks):
                raise LatoptError(f"LUT: block index {entry.index} appears twice (blocks[{i}])")
            blocks.append(entry)
        if sorted(e.index for e in blocks) != list(range(len(blocks))):
            have = {e.index for e in blocks}
            missing = [i for i in range(len(blocks)) if i not in have][:5]
            raise LatoptError(f"LUT: block indices must be 0..{len(blocks) - 1}, one per block; missing {missing}")
        overhead = f.get("call_overhead_ms", None)
        return cls(
            device=f.text("device", nonempty=True), model=f.text("model", nonempty=True),
            resolution=f.integer("resolution", lo=1), batch=f.integer("batch", lo=1), blocks=blocks,
            fixed_ms=_time(f.get("fixed_ms"), "LUT fixed_ms"),
            fixed={k: _timing(s, f"LUT fixed[{k!r}]") for k, s in f.mapping("fixed").items()},
            end_to_end={k: dict(_mapping(e, f"LUT end_to_end[{k!r}]")) for k, e in f.mapping("end_to_end").items()},
            calibration=dict(f.mapping("calibration")), backend=f.text("backend", ""),
            environment=dict(f.mapping("environment")), num_classes=f.integer("num_classes", 1000, lo=1),
            fold_mode=f.choice("fold_mode", ("exact", "paper"), "exact"), variants=f.variant_list(),
            precision=None if f.get("precision", None) is None else f.choice("precision", PRECISIONS),
            profiling_s=_time(f.get("profiling_s", 0.0), "LUT profiling_s"),
            call_overhead_ms=None if overhead is None else _time(overhead, "LUT call_overhead_ms"),
            created=f.text("created", ""),
        )


# ------------------------------------------------------------------------------------ LUT parsing
_REQUIRED = object()


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def _mapping(v: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise LatoptError(f"{where} must be a mapping, not {_short(v)}")
    return v


def _time(v: Any, where: str) -> float:
    """A time in ms: a finite number >= 0."""
    try:
        t = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan
    except OverflowError:  # an integer too large for a float
        t = math.inf
    if not math.isfinite(t) or t < 0:
        raise LatoptError(f"{where} is {_short(v)}; times must be finite numbers >= 0")
    return t


def _timing(d: Any, where: str) -> TimingStats:
    f = _Fields(d, where)
    w = f.get("wall_median_ms", None)
    return TimingStats(*(_time(f.get(k), f"{where} {k}") for k in ("median_ms", "q1_ms", "q3_ms", "iqr_ms")),
                       f.integer("n", lo=1), None if w is None else _time(w, f"{where} wall_median_ms"))


class _Fields:
    """Typed fields of one JSON object of a LUT; each problem is a LatoptError naming ``where`` and the key."""

    def __init__(self, d: Any, where: str) -> None:
        self.d, self.where = _mapping(d, where), where

    def get(self, key: str, default: Any = _REQUIRED) -> Any:
        if key in self.d:
            return self.d[key]
        if default is _REQUIRED:
            raise LatoptError(f"{self.where}: missing field {key!r}")
        return default

    def _bad(self, key: str, want: str) -> LatoptError:
        return LatoptError(f"{self.where}: {key} must be {want}, not {_short(self.d[key])}")

    def text(self, key: str, default: Any = _REQUIRED, *, nonempty: bool = False) -> str:
        v = self.get(key, default)
        if not isinstance(v, str) or (nonempty and not v):
            raise self._bad(key, "a non-empty string" if nonempty else "a string")
        return v

    def integer(self, key: str, default: Any = _REQUIRED, *, lo: int) -> int:
        v = self.get(key, default)
        if not _is_int(v) or v < lo:
            raise self._bad(key, f"an integer >= {lo}")
        return int(v)

    def flag(self, key: str, default: Any = _REQUIRED) -> bool:
        v = self.get(key, default)
        if not isinstance(v, bool):
            raise self._bad(key, "true or false")
        return v

    def choice(self, key: str, choices: tuple[str, ...], default: Any = _REQUIRED) -> str:
        v = self.get(key, default)
        if v not in choices:
            raise self._bad(key, f"one of {', '.join(choices)}")
        return v

    def variant_list(self) -> tuple[str, ...]:
        """``variants`` (a list of fold variants, "full" among them), or for a LUT older than it the
        ``partial`` flag: true = full + the partial folds."""
        if "variants" not in self.d:
            return ("full", *PARTIAL_VARIANTS) if self.flag("partial", False) else ("full",)
        v = self.d["variants"]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self._bad("variants", "a list of variant names")
        try:
            return check_variants(v)
        except LatoptError as e:
            raise LatoptError(f"{self.where}: variants: {e}") from None

    def mapping(self, key: str) -> Mapping[str, Any]:
        return _mapping(self.get(key, {}), f"{self.where} {key}")

    def variants(self, key: str, *, as_is: bool) -> Mapping[str, Any]:
        """A {variant: value} field of known variant names; with ``as_is``, "none" must be among them."""
        m = _mapping(self.get(key), f"{self.where} {key}")     # required: every block has its times
        unknown = [v for v in m if v not in VARIANTS]
        if unknown:
            raise LatoptError(f"{self.where}: {key} has unknown variant {unknown[0]!r}; variants are {', '.join(VARIANTS)}")
        if as_is and "none" not in m:
            raise LatoptError(f"{self.where}: {key} has no time for variant 'none' (the block as it is)")
        return m


@functools.lru_cache(maxsize=16)
def count_blocks(model: str) -> int:
    """How many blocks (MBConv / inverted residual) the model ``model`` has: one LUT entry each."""
    from latopt.blocks import find_blocks  # noqa: PLC0415 - the model stack only when a LUT is checked
    from latopt.models import build_model  # noqa: PLC0415

    return len(find_blocks(build_model(model, num_classes=10)))


def save_lut(lut: LUT, path: str | Path) -> Path:
    return write_json_atomic(path, lut.to_dict())


def load_lut(path: str | Path, *, model: str | None = None, resolution: int | None = None,
             batch: int | None = None, device: str | None = None, fold_mode: str | None = None) -> LUT:
    """Read a LUT; LatoptError when it is corrupt or was profiled for another model/resolution/batch/device/fold
    mode (an exact fold ships bias maps a paper fold has not: their times, and so c_l, differ)."""
    data = read_json(path, schema=LUT_SCHEMA, what="latency LUT")
    try:
        lut = LUT.from_dict(data)
    except LatoptError as e:
        raise LatoptError(f"latency LUT {path} is corrupt: {e}; re-create it with latopt profile") from None
    want = {"model": model, "resolution": resolution, "batch": batch, "device": device, "fold_mode": fold_mode}
    for key, expected in want.items():
        have = getattr(lut, key)
        if expected is not None and have != expected:
            raise LatoptError(
                f"latency LUT {path} was profiled for {key} {have!r}, not {expected!r}; run "
                f"latopt profile --device {device or lut.device} --model {model or lut.model} "
                f"--resolution {resolution or lut.resolution} --batch {batch or lut.batch} "
                f"--fold-mode {fold_mode or lut.fold_mode}")
    if model is not None and len(lut.blocks) != count_blocks(model):
        raise LatoptError(f"latency LUT {path} has {len(lut.blocks)} blocks but {model} has {count_blocks(model)}; "
                          f"re-create it with latopt profile --model {model}")
    return lut


def _plan(lut: LUT, folded: Iterable[int] | Mapping[int, str]) -> dict[int, str]:
    if isinstance(folded, str):
        if folded != "all":
            raise LatoptError(f"fold set {folded!r}: give block indices, a {{index: variant}} map or 'all'")
        return dict.fromkeys(lut.foldable(), "full")
    plan = ({int(k): str(v) for k, v in folded.items()} if isinstance(folded, Mapping)
            else dict.fromkeys((int(i) for i in folded), "full"))
    for i, v in plan.items():
        b = lut.block(i)
        if v == "none":
            continue
        if not b.foldable:
            raise LatoptError(f"block {i} ({b.path}) cannot be folded: {b.reason}")
        if v not in b.ms:
            hint = f" (profile with --variants {','.join(('full', v))})" if v in VARIANTS else ""
            raise LatoptError(f"the LUT has no time for block {i} in variant {v!r}{hint}; "
                              f"it has {sorted(b.ms)}")
    return plan


def check_variants(variants: Iterable[str]) -> tuple[str, ...]:
    """The fold variants a LUT times, in FOLD_VARIANTS order, "full" always among them (it gives c_l and the
    calibration's fallback scale); LatoptError on an unknown name."""
    names = [str(v).strip() for v in variants]
    unknown = [v for v in names if v not in FOLD_VARIANTS]
    if unknown:
        raise LatoptError(f"unknown variant {unknown[0]!r}; variants are {', '.join(FOLD_VARIANTS)}")
    return tuple(v for v in FOLD_VARIANTS if v in names or v == "full")


def predict(lut: LUT, folded: Iterable[int] | Mapping[int, str] | str) -> float:
    """Predicted latency (ms) of the network with ``folded`` blocks folded.

    ``folded``: block indices (full fold), ``{index: variant}`` (any variant the LUT has for that block,
    "none" = as-is), or "all" (every foldable block folded ``full``).
    """
    plan = _plan(lut, folded)
    return lut.fixed_ms + sum(b.ms[plan.get(b.index, "none")] for b in lut.blocks)


def costs(lut: LUT) -> dict[int, float]:
    """c_l = max(0, t_asis − t_full) (calibrated ms) for every foldable block."""
    return {b.index: b.c for b in lut.blocks if b.foldable}


def variant_times(lut: LUT, index: int) -> dict[str, float]:
    """Calibrated ms of block ``index`` in every profiled variant ("none" = as-is)."""
    return dict(lut.block(index).ms)


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
    working directory (:func:`~latopt.latency.devices.profiles_dir`), never inside the installed package."""
    return profiles_dir() / device / f"{_slug(model)}-r{int(resolution)}-b{int(batch)}.json"
