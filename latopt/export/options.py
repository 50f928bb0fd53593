"""What an export ships and how it is checked: the two option records :func:`latopt.export.export` takes
besides the checkpoint, the device and the output directory (``latopt export``'s flags, grouped)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ShipOptions:
    """Which network is shipped. The checkpoint as it is by default; ``fold`` (``--fold``: ``all``, ``auto``
    = every block whose fold lowers the LUT's latency, or indices ``1,3``) folds an unfolded checkpoint here, or
    ``plan`` (``--plan``: a plan file, :mod:`latopt.dp.planfile`) gives each block its variant; in fold ``mode``
    (default: the plan's, else exact). Exact folds ship their bias maps ``deferred`` (one per chain of folds) or
    ``per-block``. ``lut``: the device LUT (``auto`` and the predicted latency; default: the one the profiler
    wrote for this model and resolution). ``resolution``: the input size (default: the checkpoint's)."""

    fold: str | None = None
    plan: str | Path | None = None
    mode: str | None = None
    bias_maps: str = "deferred"
    lut: str | Path | None = None
    resolution: int | None = None


@dataclass(frozen=True)
class CheckOptions:
    """How the shipped network is checked and timed: the numeric gates on ``samples`` inputs (drawn with
    ``seed``); the accuracy gate on the test split (``gate_accuracy``; off: shipped unchecked); ``timing_only``
    ships a timing-only artefact, named so, instead of a deployable model; ``measure`` times it against the
    as-is network on the device."""

    samples: int = 32
    seed: int = 0
    gate_accuracy: bool = True
    timing_only: bool = False
    measure: bool = True
