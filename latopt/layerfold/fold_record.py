"""A fold's report (``report.json``) as a frozen, validated record, written and read here only.

Layer Folding (:func:`latopt.layerfold.run_fold`) reports a :class:`LayerFoldReport` (schema
``latopt.fold_report/1``); the DP's apply step (:func:`latopt.dp.run_dp`) a
:class:`latopt.dp.plan_record.DPReport` (``latopt.dp_report/1``). Both share :class:`FoldReport`'s fields, which is
what a caller that does not care which method folded reads (the search's trials)::

    model, task, resolution, seed, base_checkpoint
    folded        {"<block index>": variant} of the folded network;  n_folded
    acc, val      test / validation accuracy by phase: base, prefold (Layer Folding), linearized (the variant
                  network), folded (before fine-tuning), finetuned;  val_acc_finetuned, test_samples
    flops, params {base, folded}
    latency_pred_ms  the LUT's prediction {asis, folded} (null without a LUT)
    fold_check    the folded network against the linearised one (:func:`latopt.rewrite.verify_fold`): max_abs,
                  max_rel, ref_max, output, features, per_block, mode, limit (exact mode's bound), passed
    history       the training phases' epochs;  seconds: each phase's wall time
    checkpoint, prefold_checkpoint   folded.pt and prefold.pt;  reload_max_abs: the saved checkpoint reloaded
                  against the network (null on a torchrun process other than the first, which writes nothing)

A report is built from the stage's own values with ``model_validate(..., strict=False)`` (a NumPy integer or a
tuple is taken) and read back strictly (:func:`read_report`: one error line naming the field).

Public API::

    FoldReport, LayerFoldReport, FoldCheck, FoldParams, Accuracies, Counts, LutLatency      the records
    report.to_json() -> dict;  report.spans -> the merged spans export ships ([] but for the DP)
    read_report(path, cls) -> cls                    a report.json of that kind (LayerFoldReport or DPReport),
                                                     or one LatoptError line
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import Field

from latopt.constants import FoldMode, FoldVariant, Granularity, UnfoldedAlpha
from latopt.files.readers import read_json
from latopt.files.records import (
    Accuracies,
    Accuracy,
    Artefact,
    BlockKey,
    DistillName,
    Resolution,
    StrictModel,
    validated,
)

_Count = Annotated[int, Field(ge=0)]


class Counts(StrictModel):
    """A count of the base network and of the folded one (FLOPs, parameters)."""

    base: _Count
    folded: _Count


class LutLatency(StrictModel):
    """The LUT's predicted latency (ms) of the base and the folded network; null without a LUT."""

    asis: float | None
    folded: float | None


class FoldCheck(StrictModel):
    """The folded network against its linearised σ_α reference (:func:`latopt.rewrite.verify_fold`), with the
    fold mode, the bound it was held to (exact mode's ``fold.max_fold_error``; null in paper mode, whose border
    differs by design) and whether it held."""

    max_abs: float
    max_rel: float
    ref_max: float
    output: dict[str, float]
    features: dict[str, float]
    per_block: dict[BlockKey, dict[str, Any]]
    mode: FoldMode
    limit: float | None
    passed: bool


class FoldParams(StrictModel):
    """Layer Folding's settings as run (``cfg.fold``'s and the LUT's path)."""

    lambda_c: float
    tau: float
    p: float
    granularity: Granularity
    distill: DistillName        # the distillation's name; a report written before names held a boolean
    mode: FoldMode
    unfolded_alpha: UnfoldedAlpha
    lut: str | None


class FoldReport(Artefact):
    """What every fold reports (module docstring); :class:`LayerFoldReport` and the DP's report add theirs."""


    model: str
    task: str
    resolution: Resolution
    seed: int
    base_checkpoint: str
    folded: dict[BlockKey, FoldVariant]
    n_folded: _Count
    acc: Accuracies
    val: Accuracies
    val_acc_finetuned: Accuracy
    test_samples: Annotated[int, Field(ge=1)]
    flops: Counts
    params: Counts
    latency_pred_ms: LutLatency
    fold_check: FoldCheck
    history: dict[str, list[dict[str, int | float]]]   # an epoch's number stays an integer
    seconds: dict[str, float]
    checkpoint: str | None = None
    prefold_checkpoint: str | None = None
    reload_max_abs: float | None = None
    agreement: Accuracy | None = None   # top-1 agreement with the source network before fine-tuning (validation)

    @property
    def plan(self) -> dict[int, str]:
        """The folded blocks, {block index: variant}, as ``fold_blocks`` takes them."""
        return {int(k): v for k, v in self.folded.items()}

    @property
    def spans(self) -> list[list[int]]:
        """The merged spans ([start, end, kernel]) the folded network ships; none but for the DP's."""
        return []



class LayerFoldReport(FoldReport):
    """Layer Folding's report: the α's learnt and how they were folded (``latopt.fold_report/1``)."""

    SCHEMA: ClassVar[str] = "latopt.fold_report/1"

    params_fold: FoldParams
    costs: dict[BlockKey, float] | None       # c_l of each block from the LUT; null: uniform (no LUT)
    frozen: list[int]                         # blocks whose α was frozen (not foldable)
    alphas: dict[BlockKey, list[float]]       # each block's α's after pre-fold
    alpha_mid_fraction: Accuracy                  # the trainable α's strictly between 0.1 and 0.9
    n_foldable: _Count
    n_folded_full: _Count
    snapped_alphas: _Count                    # unfolded α's set back to 0 (fold.unfolded_alpha zero)


R = TypeVar("R", bound=FoldReport)


def read_report(path: str | Path, cls: type[R]) -> R:
    """The fold report in ``path`` (a ``report.json``) as a ``cls``; one :class:`~latopt.errors.LatoptError`
    line when it is not strict JSON, of another schema, or not a valid report."""
    data = read_json(path, schema=cls.SCHEMA, what="fold report")
    return validated(cls, data, prefix=f"fold report {path}: ", key="field")
