"""The profiler: per-block latency of a model on a device → LUT (``latopt profile``: :mod:`latopt.cli.profile`).

Public API::

    profile_model(model_name_or_module, device, resolution, batch=1, variants=("full",), progress=True, *,
                  num_classes=1000, fold_mode="exact", name=None) -> LUT
    ensure_lut(path, model, device, resolution, *, variants=("full",), num_classes=1000, say=None) -> Path
                                  the LUT file at path, profiled and saved only when it is missing
    measure_networks(nets, device, input_shape, *, backend=None, progress=False) -> dict[str, TimingStats]
    format_lut(lut) -> str

What is timed, all in ONE interleaved run (:func:`latopt.latency.timing.compare`), after exporting each
module once at its real input shape: the fixed parts (stem; head = conv head + pool; classifier), every
block as-is and in each of ``variants`` it allows (``full`` always; ``expand_dw``, ``dw_project``, ``pw``;
``drop`` is not timed: 0 ms, see :mod:`latopt.latency.lut`), a trivial 1-op model (the per-call overhead,
recorded for reference), and end-to-end networks: as-is, every foldable block folded (and every block in
each other timed variant that applies to it), and held-out fold sets that are not used for the
calibration and check it: the second half of the foldable blocks folded ``full`` and, with more than one
variant, a network mixing them (:func:`calibration_plans`). On an ``int8`` device (``cpu-int8``) the
onnxruntime backend times each of these modules as its ONNX Runtime static INT8 model
(:mod:`latopt.latency.backends.onnxruntime`); the LUT records the precision.

What is timed is what export ships. Export ships exact-mode folds with *deferred* bias maps
(:func:`latopt.rewrite.defer_bias_maps`): one map per chain of consecutive ``full`` folds, added at the chain's
output, so a ``full`` fold inside a chain costs its convolution alone. So the ``full`` part of a block is
timed without its bias map (in paper mode it has none), and the end-to-end networks are the deferred form.
The one ``Add`` per chain (and, on ONNX Runtime's CPU provider, the layout reorder pair around it) has no
LUT entry: the calibration networks (one chain each on the supported models) carry it in ``scales["full"]``.
``pw`` and ``drop`` blocks have no map and join chains (:mod:`latopt.rewrite.defer`).
A fold set made of many short chains pays more Adds than that (``tools/bench_lut.py``'s ``every-other``
set: each chain is one block; docs/exact-folds.md gives the measured error). The partial variants keep
their own maps (``expand_dw``) and are timed with them.

Calibration (why, and how). A block timed in its own session pays costs the network pays once: the call
itself and, on ONNX Runtime's CPU provider, the NCHWc layout reorders of its input and output (and a
separate residual Add that the network fuses into the convolution). Summing the isolated parts therefore
over-predicts the network, more so under load with wall-clock timing, and the excess differs between fold
sets: as-is blocks lose a larger fraction than folded convolutions (most visibly on EfficientNet-lite0,
whose folded 5x5 convolutions are heavy). Subtracting the 1-op call overhead, a constant offset fitted to
the as-is network, and one factor fitted to the as-is and all-folded networks each left errors that differed
between models (``tools/bench_lut.py`` measures such alternatives). Kept: one scale per variant
(:func:`latopt.latency.lut.calibrate`): ``scales["none"]`` makes the summed stem + head + classifier +
as-is blocks equal the measured as-is network; ``scales["full"]`` then makes the all-folded network exact
(likewise each other timed variant). The held-out fold sets, the benchmark's other fold sets
(``tools/bench_lut.py``) and the uncalibrated sums are reported next to it, so the LUT's error is a
measured figure.
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from latopt.config import check_resolution
from latopt.constants import MAX_BATCH, FoldMode, FoldVariant, LutVariant
from latopt.errors import LatoptError
from latopt.latency.backends import close_backend, get_backend
from latopt.latency.devices import DeviceProfile, load_device
from latopt.latency.lut import (
    LUT,
    BlockEntry,
    EndToEnd,
    LutCalibration,
    SpanEntry,
    calibrate,
    check_variants,
    lut_model_name,
    predict,
    save_lut,
)
from latopt.latency.merged_spans import (
    check_span_profile,
    span_candidates,
    span_key,
    span_module,
    span_plans,
    span_scale,
)
from latopt.latency.timing import compare
from latopt.log import get_logger
from latopt.nets.blocks import block_input_shapes, find_blocks, input_channels
from latopt.nets.models import build_model
from latopt.nets.stemhead import fixed_parts
from latopt.nets.variants import VARIANTS
from latopt.rewrite import as_shipped, fold_block_module
from latopt.runtime import TimingStats
from latopt.training.torch_settings import torch_threads

_LOG = get_logger("profile")


def _log(progress: bool, msg: str) -> None:
    if progress:
        _LOG.info(msg)


def _build(model: Any, num_classes: int) -> tuple[Any, str]:
    if isinstance(model, nn.Module):
        return model, type(model).__name__
    return build_model(str(model), num_classes=num_classes), str(model)


def _head_input_shape(model: Any, last_path: str, input_shape: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """(input shape of the head = output shape of the last block, number of logits)."""

    out: dict[str, tuple[int, ...]] = {}

    def hook(_m: Any, _a: Any, y: Any) -> None:
        out["s"] = tuple(y.shape)

    h = model.get_submodule(last_path).register_forward_hook(hook)
    try:
        with torch.no_grad():
            logits = model(torch.zeros(input_shape))
    finally:
        h.remove()
    return out["s"], int(logits.shape[-1])


def _loadavg() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:  # pragma: no cover
        return None


def _close(objs: Any) -> None:
    for o in objs:
        c = getattr(o, "close", None)
        if callable(c):
            c()


HELD_OUT = "held-out"
HELD_OUT_MIXED = "held-out-mixed"
HELD_OUT_NETS = (HELD_OUT, HELD_OUT_MIXED)
HELD_OUT_WARN = 0.15   # a held-out network mispredicted by more than this: one warning line (the LUT is suspect)


def fixed_modules(fp: Any, input_shape: tuple[int, ...],
                  head_shape: tuple[int, ...]) -> dict[str, tuple[Any, tuple[int, ...]]]:
    """The parts outside the blocks as (module, input shape): stem, head (conv head + pool), classifier.

    The head is split when it has ``features``/``pool``/``classifier`` (latopt.nets.stemhead's head module);
    otherwise it is timed as one part.
    """

    parts: dict[str, tuple[Any, tuple[int, ...]]] = {"stem": (fp.stem, input_shape)}
    head = fp.head
    if all(hasattr(head, a) for a in ("features", "pool", "classifier")):
        conv_head = nn.Sequential(head.features, head.pool, nn.Flatten(1))
        with torch.no_grad():
            pooled = conv_head.eval()(torch.zeros(head_shape))
        parts["head"] = (conv_head, head_shape)
        parts["classifier"] = (head.classifier, tuple(pooled.shape))
    else:
        parts["head"] = (head, head_shape)
    return parts


def mixed_plan(blocks: Any, variants: tuple[str, ...]) -> dict[int, str]:
    """A plan mixing as-is and every variant of ``variants``: the j-th foldable block in the j-th of
    ("none", *variants), cyclically; "full" where that variant does not apply to the block."""
    cycle = ("none", *variants)
    plan: dict[int, str] = {}
    for j, b in enumerate(b for b in blocks if b.foldable):
        v = cycle[j % len(cycle)]
        if v != "none":
            plan[b.index] = v if v in b.variants else "full"
    return plan


def calibration_plans(blocks: Any, variants: tuple[str, ...]) -> dict[str, dict[int, str]]:
    """The end-to-end networks timed with the parts: as-is, all folded (``full``) and, for each other timed
    variant v, every block that allows it in v (``all-v``) for the calibration; held out: the second half
    of the foldable blocks folded, and with more than one variant a network mixing them (:func:`mixed_plan`)."""
    foldable = [b.index for b in blocks if b.foldable]
    plans: dict[str, dict[int, str]] = {"asis": {}}
    if not foldable:
        return plans
    plans["full"] = dict.fromkeys(foldable, "full")
    for v in variants:
        if v == "full" or not VARIANTS[v].timed:  # full: above; an untimed variant (drop): nothing to calibrate
            continue
        plan = {b.index: v for b in blocks if v in b.variants}
        if plan:
            plans[f"all-{v}"] = plan
    if len(foldable) >= 2:
        plans[HELD_OUT] = dict.fromkeys(foldable[len(foldable) // 2:], "full")
    if len(variants) > 1:
        plans[HELD_OUT_MIXED] = mixed_plan(blocks, variants)
    return plans


def ensure_lut(path: str | Path, model: str, device: DeviceProfile, resolution: int, *,
               variants: Iterable[str] = ("full",), num_classes: int = 1000,
               say: Callable[[str], None] | None = None) -> Path:
    """The LUT file at ``path``: when it is missing, ``model`` is profiled on ``device`` at ``resolution`` with the
    device's batch (:func:`profile_model`, no progress bar; ``say`` gets one line first) and saved there; when it
    exists it is left as it is (whoever loads it checks that it is the model's, :func:`latopt.latency.load_lut`).
    What the benchmarks in ``tools/`` profile once and share between their cells."""
    path = Path(path)
    if not path.is_file():
        variants = list(variants)
        if say is not None:
            say(f"profiling {model} @{resolution} on {device.name} (batch {device.batch}, variants "
                f"{','.join(variants)}) → {path}")
        save_lut(profile_model(model, device, resolution, device.batch, variants=variants, progress=False,
                               num_classes=num_classes), path)
    return path


def profile_model(model_name_or_module: Any, device: DeviceProfile | str, resolution: int, batch: int = 1,
                  variants: Iterable[str] = ("full",), progress: bool = True, *, num_classes: int = 1000,
                  fold_mode: str = "exact", name: str | None = None) -> LUT:
    """Profile every block of a model on ``device`` (a profile, or its name or YAML path as
    :func:`~latopt.latency.devices.load_device` reads it) in ``variants`` (``full`` always; ``span`` among them: the
    exact spans too, :mod:`latopt.latency.merged_spans`, refused up front in paper mode or without ``pw``/``drop``:
    :func:`~latopt.latency.merged_spans.check_span_profile`) and return the calibrated LUT (see module docstring). The LUT
    records the model's canonical name (``name`` if given, else the model's name or its module's class name;
    :func:`~latopt.latency.lut.lut_model_name`)."""
    if isinstance(device, str):
        device = load_device(device)
    variants = list(variants)
    spans = "span" in variants
    variants = check_variants(v for v in variants if v != "span")
    if spans:  # up front: nothing is exported or timed for spans that could not be used
        check_span_profile(variants, fold_mode)
    with torch_threads(device.threads if device.backend == "torch" else 1):
        return _profile_model(model_name_or_module, device, resolution, batch, variants, progress,
                              num_classes=num_classes, fold_mode=fold_mode, name=name, spans=spans)


def _profile_model(model_name_or_module: Any, device: DeviceProfile, resolution: int, batch: int,
                   variants: tuple[str, ...], progress: bool, *, num_classes: int, fold_mode: str,
                   name: str | None, spans: bool = False) -> LUT:
    check_resolution(resolution, "resolution")
    if not 1 <= int(batch) <= MAX_BATCH:  # the bound of a profile's batch key: every part is built at it
        raise LatoptError(f"batch must be in [1, {MAX_BATCH}], got {batch}", param="batch")
    t_start = time.perf_counter()
    backend = get_backend(device)  # fail fast when the device is unusable here
    runners: dict[str, Any] = {}
    modes: list[tuple[Any, bool]] = []
    try:
        model, model_name = _build(model_name_or_module, num_classes)
        model_name = lut_model_name(name or model_name)   # the canonical spelling: one LUT per model
        modes = [(m, m.training) for m in model.modules()]
        model.eval()
        blocks = find_blocks(model)
        if not blocks:
            raise LatoptError(f"{model_name} has no MBConv blocks to profile")
        R = int(resolution)
        input_shape = (int(batch), input_channels(model), R, R)
        shapes = block_input_shapes(model, input_shape)
        head_shape, num_classes = _head_input_shape(model, blocks[-1].path, input_shape)
        parts = fixed_modules(fixed_parts(model), input_shape, head_shape)
        fixed_keys = list(parts)
        for b in blocks:
            shape = shapes[b.index]
            parts[f"{b.index}:none"] = (model.get_submodule(b.path), shape)
            for v in (v for v in variants if v in b.variants and VARIANTS[v].timed):
                fb = fold_block_module(model, b, v, fold_mode, (int(shape[-2]), int(shape[-1])), net_input_size=(R, R))
                if v == "full":
                    fb.bias_map = None  # shipped: its map is deferred to its chain's end (module docstring)
                parts[f"{b.index}:{v}"] = (fb, shape)
        cands = span_candidates(blocks, shapes, variants) if spans else []
        for start, end, kernel, fulls in cands:
            parts[span_key(start, end, kernel)] = (span_module(blocks, start, end, kernel, fulls, shapes[start], fold_mode),
                                                   shapes[start])
        plans = calibration_plans(blocks, variants)
        nets = {k: (model if not plan else as_shipped(model, plan, mode=fold_mode, input_size=(R, R))[0], plan)
                for k, plan in plans.items()}
        span_nets = span_plans(blocks, cands, variants)
        for k, (plan, sp) in span_nets.items():
            nets[k] = (as_shipped(model, plan, spans=[s[:2] for s in sp], mode=fold_mode, input_size=(R, R))[0], plan)
        foldable = [b.index for b in blocks if b.foldable]
        n_mod = len(parts) + len(nets) + 1
        _log(progress, f"{model_name} @{R} batch {batch} on {device.name} ({backend.name}): {len(blocks)} blocks "
                       f"({len(foldable)} foldable); exporting/preparing {n_mod} modules")
        for i, (key, (mod, shape)) in enumerate(parts.items()):
            runners[key] = backend.prepare(mod, shape)
            if progress and (i + 1) % 10 == 0:
                _log(progress, f"  prepared {i + 1}/{len(parts)} parts ({time.perf_counter() - t_start:.1f} s)")
        for key, (net, _) in nets.items():
            runners[f"net:{key}"] = backend.prepare(net, input_shape)
        runners["overhead"] = backend.prepare(nn.ReLU(), (1, 8))
        t_prep = time.perf_counter() - t_start
        _log(progress, f"timing {len(runners)} runners interleaved (prepared in {t_prep:.1f} s)")
        load_before = _loadavg()
        stats = compare(runners, device, progress=(lambda r, e: _log(progress, f"  round {r} ({e:.1f} s)"))
                        if progress else None)
        environment = backend.environment()
        environment["loadavg_during_timing"] = [load_before, _loadavg()]
    finally:
        try:
            _close(runners.values())
        finally:  # the backend (its CUDA context) is released even when a runner's close fails
            close_backend(backend)
            for m, mode in modes:
                m.training = mode

    raw = {b.index: {k.split(":", 1)[1]: s.median_ms for k, s in stats.items() if k.split(":", 1)[0] == str(b.index)}
           for b in blocks}
    fixed_raw = sum(stats[k].median_ms for k in fixed_keys)
    measured = {k: stats[f"net:{k}"].median_ms for k in nets}
    fit = {k: (plan, measured[k]) for k, (_, plan) in nets.items() if k not in HELD_OUT_NETS and k not in span_nets}
    scales, notes = calibrate(raw, fixed_raw, fit)
    span_raw = {(a, b, k): stats[span_key(a, b, k)].median_ms for a, b, k, _ in cands}
    entries = []
    for b in blocks:
        st = {k.split(":", 1)[1]: s for k, s in stats.items() if k.split(":", 1)[0] == str(b.index)}
        ms = {v: scales[v] * s.median_ms for v, s in st.items()}
        for v in (v for v in variants if v in b.variants and not VARIANTS[v].timed):
            ms[v] = 0.0  # not timed: the block is gone (lut.py)
        # the keys are variant names, the values' types the record's: BlockEntry validates them
        entries.append(BlockEntry(index=b.index, path=b.path, kind=b.kind, input_shape=tuple(shapes[b.index]),
                                  foldable=b.foldable, reason=b.reason, raw=cast("dict[LutVariant, TimingStats]", st),
                                  ms=cast("dict[LutVariant, float]", ms)))
    lut = LUT(
        device=device.name, model=model_name, resolution=R, batch=int(batch), blocks=entries,
        fixed_ms=scales["none"] * fixed_raw,
        fixed={k: stats[k] for k in fixed_keys}, backend=backend.name, environment=environment,
        # validated by the record (LUT): a fold mode, fold variants
        num_classes=int(num_classes), fold_mode=cast(FoldMode, fold_mode),
        variants=cast("tuple[FoldVariant, ...]", variants), precision=device.precision,
        call_overhead_ms=stats["overhead"].median_ms,
        spans=[SpanEntry(start=a, end=b, kernel=k, fulls=fulls, raw=stats[span_key(a, b, k)],
                         ms=span_scale(scales, k) * span_raw[(a, b, k)]) for a, b, k, fulls in cands],
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        calibration=LutCalibration(method="per-variant scale", scales=scales, fit_on=sorted(fit), notes=notes,
                                description="ms[v] = scales[v] * isolated median; scales['none'] fits the as-is "
                                            "network, scales[v] the network with every block in variant v (same "
                                            "interleaved run)"),
    )
    for k, (_, plan) in nets.items():
        sp = span_nets[k][1] if k in span_nets else []
        covered = {i for a, b, _ in sp for i in range(a, b + 1)}
        raw_sum = fixed_raw + sum(span_raw[s] for s in sp) + sum(
            0.0 if plan.get(i) in VARIANTS and not VARIANTS[plan[i]].timed else raw[i][plan.get(i, "none")]
            for i in raw if i not in covered)
        pred = predict(lut, plan, sp)
        lut.end_to_end[k] = EndToEnd(folded={str(i): v for i, v in plan.items()}, calibration=k in fit,
                                     spans=[list(s) for s in sp], measured=stats[f"net:{k}"], raw_sum_ms=raw_sum,
                                     raw_error=raw_sum / measured[k] - 1, predicted_ms=pred,
                                     error=pred / measured[k] - 1)
    lut = lut.model_copy(update={"profiling_s": time.perf_counter() - t_start})
    _log(progress, f"done in {lut.profiling_s:.1f} s")
    bad = {k: e.error for k, e in lut.end_to_end.items()
           if not e.calibration and e.error is not None and abs(e.error) > HELD_OUT_WARN}
    if bad:
        _LOG.warning(f"{model_name} on {device.name}: the LUT mispredicts its held-out network(s) by "
                     + ", ".join(f"{k} {100 * v:+.0f} %" for k, v in bad.items())
                     + ": block times measured apart do not add up to the network's here (a loaded machine, or a "
                     "threaded runtime disturbed by the other runners); check the load and profile again")
    return lut


def measure_networks(nets: Mapping[str, Any], device: DeviceProfile, input_shape: tuple[int, ...], *,
                     backend: Any = None, progress: bool = False) -> dict[str, TimingStats]:
    """Time whole networks (nn.Module or ONNX path) against each other in one interleaved run."""

    own = backend is None
    backend = backend or get_backend(device)
    runners: dict[str, Any] = {}
    try:
        with torch_threads(device.threads if device.backend == "torch" else 1):  # timing included
            for k, net in nets.items():
                runners[k] = backend.prepare(net, tuple(input_shape))
            _log(progress, f"timing {len(runners)} networks interleaved on {device.name}")
            return compare(runners, device)
    finally:
        try:
            _close(runners.values())
        finally:
            if own:
                close_backend(backend)


def format_lut(lut: LUT) -> str:
    """The LUT as a text table plus the end-to-end prediction errors, in its unit (a count device's: counted)."""
    from latopt.latency.backends.count import lut_unit

    u = lut_unit(lut)
    seen = "measured" if u == "ms" else "counted"
    variants = ["none", *lut.variants]
    head = f"{'idx':>3} {'block':<22} {'input':<16} " + " ".join(f"{v:>11}" for v in variants) + f" {'c_l':>7} {'IQR%':>5}"
    sc = ", ".join(f"{k} {v:.3f}" for k, v in lut.calibration.scales.items())
    prec = f", {lut.precision}" if lut.precision else ""
    lines = [f"LUT {lut.model} @{lut.resolution} batch {lut.batch} on {lut.device} ({lut.backend}{prec}); "
             f"calibrated {u} (scales: {sc})", head]
    for b in lut.blocks:
        cells = [f"{b.ms[v]:11.4f}" if v in b.ms else f"{'-':>11}" for v in variants]
        iqr = b.raw["none"].iqr_ms / b.raw["none"].median_ms * 100 if b.raw["none"].median_ms > 0 else 0.0
        tag = "" if b.foldable else "  (not foldable: " + b.reason + ")"
        lines.append(f"{b.index:>3} {b.path[-22:]:<22} {'x'.join(map(str, b.input_shape[1:])):<16} "
                     + " ".join(cells) + f" {b.c:7.4f} {iqr:5.1f}{tag}")
    lines.append(f"    fixed ({' + '.join(lut.fixed) or '-'}) {lut.fixed_ms:.4f} {u}; per-call overhead "
                 f"{lut.call_overhead_ms or 0:.4f} {u}")
    for k, e in lut.end_to_end.items():
        role = "fit" if e.calibration else "held out"
        error, raw = ("", "") if e.error is None or e.raw_sum_ms is None or e.raw_error is None else \
            (f"  error {e.error * 100:+6.1f} %", f"  (isolated sum {e.raw_sum_ms:.3f}, {e.raw_error * 100:+.1f} %)")
        lines.append(f"end-to-end {k:<16} ({len(e.folded):>2} folded, {role:<8}) {seen} "
                     f"{e.measured.median_ms:8.3f} {u} (IQR {e.measured.iqr_ms:.3f})  predicted "
                     f"{e.predicted_ms:8.3f} {u}{error}{raw}")
    for note in lut.calibration.notes:
        lines.append(f"note: {note}")
    load = lut.environment.get("loadavg_during_timing")
    lines.append(f"profiling took {lut.profiling_s:.1f} s" + (f"; load average before/after timing {load}" if load else ""))
    return "\n".join(lines)
