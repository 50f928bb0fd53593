"""The exact tools as whole jobs on checkpoints: what ``latopt train-mlp | compress | regions | shallow`` run.

Each function reads its inputs, does the work, writes its output directory atomically and returns its report,
a validated record of :mod:`latopt.exact.exact_record` (report.json is its ``to_json()``; the record's ``out``, the
directory written, is not in the file); :mod:`latopt.cli.exact` only parses the command line and prints::

    make_mlp(hidden, *, data="digits", l1, epochs=None, lr, batch, inputs, outputs, seed, out=None) -> (path, meta)
    compress_checkpoint(checkpoint, out, *, box=None, time_limit, samples, verify_points, seed, log=None)
        -> CompressToolReport
    regions_of(checkpoint, out, *, box=None, limits, grid) -> RegionsReport   (VerificationError if the grid disagrees)
    shallow_of(checkpoint, out, *, box=None, limits, epsilon, samples, seed) -> ShallowReport
    compress_text(report) -> str                                        report.txt (and what latopt compress prints)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from latopt.errors import LatoptError, VerificationError
from latopt.exact.exact_record import (
    CompressAccuracy,
    CompressToolReport,
    EpsNetwork,
    ExactNetwork,
    GridCheck,
    RegionsReport,
    ShallowReport,
)
from latopt.exact.mlp import MlpMeta, build_mlp, load_mlp, parse_data, predict, save_mlp, split_of, train_mlp
from latopt.exact.network import Box, ReluMLP, from_module
from latopt.exact.regions import RegionLimits, enumerate_regions, plot_regions, sampled_patterns
from latopt.exact.shallow import IndicatorNet, collect_hyperplanes, eps_network, region_margin, widths
from latopt.exact.stability import compress
from latopt.exact.verify import verification_points, verify_equal
from latopt.files.artifacts import atomic_dir, write_json_atomic, write_text_atomic
from latopt.log import get_logger
from latopt.training.loop import seed_everything

_LOG = get_logger("exact")


def load_network(checkpoint: str | Path, box: str | None) -> tuple[torch.nn.Module, MlpMeta, ReluMLP, Box]:
    """(module, meta, network, box) of an MLP checkpoint; ``box`` "LO,HI" (default: the checkpoint's, else 0,1)."""
    model, meta = load_mlp(checkpoint)
    net = from_module(model)
    if box is None:
        box = "0,1" if meta.box is None else f"{meta.box[0]},{meta.box[1]}"
    return model, meta, net, Box.parse(box, net.sizes[0])


def default_out(checkpoint: str | Path, prefix: str) -> Path:
    return Path("runs") / f"{prefix}-{Path(checkpoint).stem}"


def make_mlp(hidden: list[int], *, data: str = "digits", l1: float, epochs: int | None = None, lr: float,
             batch: int, inputs: int | None = None, outputs: int | None = None, seed: int = 0,
             out: str | Path | None = None) -> tuple[Path, MlpMeta]:
    """Train a Linear/ReLU classifier on ``data`` (digits, fashion-mnist[:PATH], mnist[:PATH]; ``epochs``
    None: the data set's default) or make a random one with ``data="random"`` (``inputs`` and ``outputs`` wide:
    default 2 and 1; given with a data set, whose images and classes fix both, they are refused), and save it."""
    if not hidden or any(v < 1 for v in hidden):
        raise LatoptError(f"hidden widths must be positive integers, got {hidden}", param="hidden")
    if data != "random":
        parse_data(data, ", random")   # an unknown data set is refused before anything is made
        for name, given in (("inputs", inputs), ("outputs", outputs)):
            if given is not None:
                raise LatoptError(f"{name} applies to data 'random' only: {data!r} fixes the network's input and "
                                  f"output widths (its pixels and classes); leave {name} out", param=name)
    if data == "random":
        inputs, outputs = (2 if inputs is None else inputs), (1 if outputs is None else outputs)
        for name, value in (("inputs", inputs), ("outputs", outputs)):
            if value < 1:
                raise LatoptError(f"{name} must be >= 1, got {value}", param=name)
        seed_everything(seed)
        model = build_mlp([inputs, *hidden, outputs]).eval()
        meta = MlpMeta(data="random", seed=seed, box=[-1.0, 1.0])
        name = f"random-{inputs}-{'x'.join(map(str, hidden))}-{outputs}-s{seed}"
    else:
        model, meta = train_mlp(hidden, data=data, l1=l1, epochs=epochs, lr=lr, batch=batch, seed=seed,
                                progress=True)
        name = f"{meta.data}-{'x'.join(map(str, hidden))}-l1{l1:g}-s{seed}"
    return save_mlp(out or Path("runs") / "mlp" / f"{name}.pt", model, meta), meta


MAX_DATA_POINTS = 20_000   # training inputs added to the sampling stage's points (a seeded subset beyond)


def _accuracy(split, model, compressed) -> CompressAccuracy | None:
    if split is None:
        return None
    pa, pb = predict(model, split.x_test), predict(compressed, split.x_test)
    return CompressAccuracy(data=split.name, before=float((pa == split.y_test).mean()),
                            after=float((pb == split.y_test).mean()), prediction_changes=int((pa != pb).sum()),
                            test_points=len(split.y_test))


def _training_split(checkpoint, meta: MlpMeta, log: Callable[[str], None]) -> tuple[Any, str | None]:
    """(the checkpoint's split or None, why there is none: a line for the report, or None)."""
    data = meta.data
    try:
        split = split_of(meta)
    except LatoptError as e:   # the IDX files are missing or changed: compress anyway, without accuracy
        note = str(e)
    else:
        if split is not None or data in (None, "random"):
            return split, None
        if data == "digits":
            log(f"{checkpoint} was trained on an older digits split: no test accuracy (retrain with `latopt train-mlp`)")
            return None, "trained on an older digits split (retrain with `latopt train-mlp`)"
        note = f"latopt does not re-create data {data!r} with split {meta.split!r}"
    log(f"{checkpoint}: no test accuracy: {note}")
    return None, note


def _sample_data(split, seed: int) -> np.ndarray | None:
    """Training inputs for the sampling stage (at most :data:`MAX_DATA_POINTS`, a subset seeded by ``seed``)."""
    if split is None:
        return None
    x = split.x_train
    if len(x) > MAX_DATA_POINTS:
        x = x[np.sort(np.random.default_rng([seed, 7]).choice(len(x), MAX_DATA_POINTS, replace=False))]
    return x


def compress_checkpoint(checkpoint: str | Path, out: str | Path | None = None, *, box: str | None = None,
                        time_limit: float = 30.0, samples: int = 20000, verify_points: int = 100_000, seed: int = 0,
                        log: Callable[[str], None] | None = None) -> CompressToolReport:
    """Lossless StabilityCompression of an MLP checkpoint; writes compressed.pt, report.json,
    certificates.json and report.txt into ``out`` (default runs/compress-<name>). ``log`` receives the
    per-layer progress lines (default: the ``latopt.exact`` logger)."""
    if not time_limit > 0:   # not > 0: NaN too
        raise LatoptError(f"time_limit must be > 0 seconds, got {time_limit}", param="time_limit")
    if samples < 0:
        raise LatoptError(f"samples must be >= 0, got {samples}", param="samples")
    if verify_points < 100_000:
        raise LatoptError(f"verify_points must be >= 100000, got {verify_points}", param="verify_points")
    model, meta, net, b = load_network(checkpoint, box)
    log = log or _LOG.info
    split, note = _training_split(checkpoint, meta, log)
    if split is not None and split.x_test.shape[1] != net.sizes[0]:
        note = f"the {split.name} images have {split.x_test.shape[1]} pixels but the network has {net.sizes[0]} inputs"
        log(f"{checkpoint}: no test accuracy: {note}")
        split = None
    t0 = time.perf_counter()
    comp, rep = compress(model, b, samples=samples, data=_sample_data(split, seed), time_limit=time_limit,
                         verify_points=verify_points, seed=seed, log=log)
    accuracy = _accuracy(split, model, comp.to(torch.float32))
    out = Path(out) if out else default_out(checkpoint, "compress")
    report = CompressToolReport(**dict(rep.record()), checkpoint=str(checkpoint), accuracy=accuracy,
                                accuracy_note=note or None, wall_seconds=round(time.perf_counter() - t0, 3),
                                out=str(out))
    with atomic_dir(out) as d:
        save_mlp(d / "compressed.pt", comp,
                 meta.model_copy(update={"compressed_from": str(checkpoint), "box": _box_list(b)}))
        write_json_atomic(d / "report.json", report.to_json())
        write_json_atomic(d / "certificates.json", rep.analysis.to_json())
        write_text_atomic(d / "report.txt", compress_text(report))
    return report


def _box_list(box) -> list | None:
    return [float(box.lo[0]), float(box.hi[0])] if np.all(box.lo == box.lo[0]) and np.all(box.hi == box.hi[0]) else None


def compress_text(report: CompressToolReport) -> str:
    """report.txt: the compression, each layer's verdicts, the verification, the times, the test accuracy."""
    c, s, v = report.compression, report.stability, report.verification
    lines = [
        f"layers   {c.layers_before} -> {c.layers_after}",
        f"hidden units {c.hidden_units_before} -> {c.hidden_units_after} "
        f"({c.units_removed} removed, {100 * c.units_removed_fraction:.1f}%); layers collapsed {c.layers_collapsed}"
        + ("; the network is constant on the box" if c.constant else ""),
        f"params   {c.params_before} -> {c.params_after}",
        "layer  units  inactive  active  unstable  undecided | stable by interval  LP  MILP | sampled bound | removed (inactive, dependent)",
    ]
    for row in s.layers:
        k = row.layer
        lines.append(
            f"{k:>5}  {row.units:>5}  {row.inactive:>8}  {row.active:>6}  {row.unstable:>8}  {row.undecided:>9} |"
            f" {row.stable_by_interval:>18}  {row.stable_by_lp:>2}  {row.stable_by_milp:>4} |"
            f" {row.sampled_upper_bound:>13} | {c.removed_inactive[k]}, {c.removed_dependent_active[k]}"
        )
    lines.append(
        f"verified on {v.points} points: max |diff| {v.max_abs_float64:.2e} (float64), {v.max_abs_float32:.2e} "
        f"(float32); output scale {v.output_scale:.3g}"
    )
    sec = report.seconds
    lines.append(f"time     analysis {sec.analysis:.1f}s (MILP {s.timings.milp:.1f}s, LP {s.timings.lp:.1f}s), "
                 f"verification {sec.verification:.1f}s, total {sec.total:.1f}s")
    a = report.accuracy
    if a:
        what = "digits" if a.data == "digits" else f"{a.data} images"
        lines.append(f"accuracy {a.before:.4f} -> {a.after:.4f} on {a.test_points} test {what} "
                     f"({a.prediction_changes} predictions changed)")
    elif report.accuracy_note:
        lines.append(f"accuracy not measured: {report.accuracy_note}")
    return "\n".join(lines) + "\n"


def region_limits(max_regions: int, max_inputs: int, max_units: int) -> RegionLimits:
    for name, value in (("max_regions", max_regions), ("max_inputs", max_inputs), ("max_units", max_units)):
        if value < 1:
            raise LatoptError(f"{name} must be >= 1, got {value}", param=name)
    return RegionLimits(max_inputs=max_inputs, max_units=max_units, max_regions=max_regions)


MAX_GRID_POINTS = 20_000_000   # the grid cross-check's points (about a minute on one core)


def regions_of(checkpoint: str | Path, out: str | Path | None = None, *, box: str | None = None,
               limits: RegionLimits, grid: int | None = None) -> RegionsReport:
    """Enumerate the linear regions of a small MLP over the box (plot them for 2-D inputs), cross-checked on a
    grid of ``grid``^d points when d <= 3 (None: 1000 per dimension, fewer for 3 inputs, so that at most
    :data:`MAX_GRID_POINTS`); writes report.json (+ regions.png) into ``out``."""
    if grid is not None and (isinstance(grid, bool) or not isinstance(grid, int) or grid < 0):
        raise LatoptError(f"grid {grid!r}: give a whole number of points per input dimension, >= 0 (0 = off)",
                          param="grid")
    _, _meta, net, b = load_network(checkpoint, box)
    if grid is None:
        grid = min(1000, int(MAX_GRID_POINTS ** (1 / b.dim) + 1e-9))
    if b.dim <= 3 and grid**b.dim > MAX_GRID_POINTS:
        most = int(MAX_GRID_POINTS ** (1 / b.dim) + 1e-9)
        raise LatoptError(f"grid {grid} means {grid}^{b.dim} = {grid**b.dim:.3g} points for this {b.dim}-input "
                          f"network; at most {MAX_GRID_POINTS:.0e} are checked: give {most} or less (0 = off)",
                          param="grid")
    enum = enumerate_regions(net, b, limits=limits)
    check = None
    if grid > 0 and b.dim <= 3:
        t0 = time.perf_counter()
        keys = sampled_patterns(net, b, resolution=grid)
        index = enum.index()
        # a ball of radius >= half a cell diagonal always holds a cell centre: such regions cannot be missed
        reach = float(np.linalg.norm((b.hi - b.lo) / grid)) / 2
        missed = [enum.regions[i] for k, i in index.items() if k not in keys]
        check = GridCheck(resolution=grid, points=grid**b.dim, distinct_patterns=len(keys),
                          all_in_enumeration=keys <= set(index), missed_regions=len(missed),
                          missed_max_radius=max((r.radius for r in missed), default=0.0),
                          half_cell_diagonal=reach, missed_are_thin=all(r.radius < reach for r in missed),
                          seconds=round(time.perf_counter() - t0, 3))
    out = Path(out) if out else default_out(checkpoint, "regions")
    report = RegionsReport(checkpoint=str(checkpoint), sizes=list(net.sizes), box=b.record(),
                           **dict(enum.summary()), grid=check,
                           patterns=["".join("1" if v else "0" for v in r.pattern) for r in enum.regions],
                           out=str(out))
    with atomic_dir(out) as d:
        if b.dim == 2:
            plot_regions(enum, d / "regions.png", title=f"{enum.count} linear regions of {list(net.sizes)}")
        write_json_atomic(d / "report.json", report.to_json())
    if report.grid is not None and not report.grid.agrees:
        raise VerificationError(f"the grid cross-check contradicts the enumeration (see {out}/report.json)")
    return report


def shallow_of(checkpoint: str | Path, out: str | Path | None = None, *, box: str | None = None,
               limits: RegionLimits, epsilon: float = 1e-3, samples: int = 100_000, seed: int = 0) -> ShallowReport:
    """Rewrite a small MLP as two 2-hidden-layer networks from its linear regions (an ε-network and the
    exact indicator network), both verified; writes eps_network.pt, exact_network.pt, report.json."""
    if not (epsilon > 0 and np.isfinite(epsilon)):
        raise LatoptError(f"epsilon {epsilon} must be a positive number", param="epsilon")
    if samples < 1000:
        raise LatoptError(f"samples must be >= 1000, got {samples}", param="samples")
    _model, _meta, net, b = load_network(checkpoint, box)
    t0 = time.perf_counter()
    enum = enumerate_regions(net, b, limits=limits)
    hp = collect_hyperplanes(enum, seed=seed)
    eps_net = eps_network(enum, hp, epsilon)
    exact = IndicatorNet.build(enum, hp)
    pts = verification_points(b, samples, seed)
    # the eps-network is exact on the points at least eps from their region's facets: compared there only
    ver_a = verify_equal(net, eps_net, b, points=pts, mask=lambda x: region_margin(net, enum, hp, x) >= epsilon,
                         what="eps-network (points >= eps from boundaries)", dtypes=("float64",))
    ver_b = verify_equal(net, exact, b, points=pts, what="exact indicator network", dtypes=("float64",))
    out = Path(out) if out else default_out(checkpoint, "shallow")
    report = ShallowReport(
        checkpoint=str(checkpoint), sizes=list(net.sizes), box=b.record(), epsilon=epsilon, widths=widths(enum, hp),
        eps_network=EpsNetwork(verification=ver_a,
                               max_abs_weight=float(max(np.abs(w).max() for w in eps_net.weights))),
        exact_network=ExactNetwork(verification=ver_b), regions=enum.summary(),
        seconds=round(time.perf_counter() - t0, 3), out=str(out))
    with atomic_dir(out) as d:
        save_mlp(d / "eps_network.pt", eps_net.to_module(torch.float64),
                 MlpMeta(shallow_from=str(checkpoint), epsilon=float(epsilon), box=_box_list(b)))
        torch.save({"schema": "latopt.indicator-net/1", "state_dict": exact.state_dict(), "n_in": b.dim},
                   d / "exact_network.pt")
        write_json_atomic(d / "report.json", report.to_json())
    return report
