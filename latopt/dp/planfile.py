"""Plans as files: what the DP would do on a device, chosen without training, written as JSON.

``latopt plan --plan-only`` writes one (:func:`plan_only` + :func:`write_plan`): the LUT's
times, the importance losses (``uniform``: no checkpoint; ``proxy``: the trained base, no fine-tuning) and
:func:`latopt.dp.select_plan`. ``latopt export --checkpoint CKPT --plan plan.json`` applies one to an
unfolded checkpoint (:func:`read_plan`, :func:`check_plan`) through the fold algebra and ships it with all
the export gates, on any device (a plan made for one device is how it is measured on another).

The file (schema ``latopt.plan/1``), read back as one validated record (:class:`PlanRecord`, a
:class:`~latopt.files.records.StrictModel`: an unknown field, a field missing, of the wrong type (a boolean is not a
number, a string not a mapping) or out of its bounds is one error line naming it; a key given twice, NaN or
Infinity is refused by :func:`latopt.files.readers.read_json` before)::

    schema        "latopt.plan/1"; a reader refuses any other
    model, resolution            what the plan applies to (export refuses a checkpoint of another); resolution
                  in RESOLUTION_RANGE
    num_classes   the base checkpoint's classes (proxy importance; 1 .. MAX_CLASSES), null when the plan depends
                  on no checkpoint (uniform importance: then any head fits)
    task          the task the losses were measured on (proxy), or null
    lut           the device the times are from: {file, sha256 (of the LUT file's bytes, 64 hex digits), device,
                  backend, precision (fp32, fp16, int8 or null), batch (1 .. MAX_BATCH), fold_mode}
    fold_mode     the fold mode the plan is applied in (the LUT's: its times are of that mode's folds)
    budget        the fraction of the as-is latency, in (0, 1]
    importance    uniform or proxy;  variants: the fold variants the blocks were allowed (distinct)
    base_checkpoint              the proxy's base checkpoint, or null (a proxy plan names it and num_classes)
    blocks        {"<block index>": variant} for every block of the LUT, indices 0 .. n-1 each once, written as
                  ASCII decimal integers ("3", not "03" or "٣"), at most MAX_PLAN_BLOCKS; variant "none" (left
                  as it is) or one of ``variants``; the blocks of a span in the variants the span composes
    spans         [[start, end, kernel], ...]: runs of consecutive blocks export merges into one
                  ``kernel``×``kernel`` convolution each (exact; :mod:`latopt.rewrite.merge`), [] when the LUT
                  times no span; 0 <= start < end < n (checked before any span is expanded), kernel odd in
                  1 .. MAX_SPAN_KERNEL, spans disjoint, their blocks full, pw or drop. That the kernel is what
                  the blocks compose to needs the network: export checks it (:func:`latopt.export.shipped.build_plan`)
    predicted     {asis_ms, ms, ratio, speedup} > 0: the LUT's prediction of the as-is and planned networks
                  (ratio = ms / asis_ms <= the budget the DP solved at, speedup = asis_ms / ms)
    selection     select_plan's info (budget = the budget the DP solved at: ``budget``, or the kept round's of the
                  budget loop; asis_ms, target_ms, predicted_ms, ratio, fastest_ms, loss, resolution, slack_ms, spans)
    budget_loop   the budget loop's record (:mod:`latopt.dp.budgetloop`: asked, rounds_max, tolerance, status,
                  note, device, chosen, rounds [{budget, plan, spans, loss, predicted_ms, predicted_ratio, timings,
                  trusted, measured {ratio, ratio_q1, ratio_q3, asis_ms, plan_ms, asis_iqr_ms, plan_iqr_ms, n}}]); the
                  kept round's plan is ``blocks``. Absent (null) in plans written before the loop
    losses        {"<block>": {variant: loss}} the DP chose over (finite)
    latopt_version, created, seconds (the time plan_only took)

Public API::

    PLAN_SCHEMA
    plan_only(cfg, lut_path, *, budget, importance="uniform", base_checkpoint=None, variants=None,
              seed=0, progress=True, budget_rounds=None) -> PlanRecord   the plan (no training, no
                                                      fine-tuning; the plan measured by the budget loop)
    PlanRecord                                        the plan file as a frozen, validated record; .to_json()
    write_plan(path, plan) -> Path;  read_plan(path) -> PlanRecord   the one writer and the one reader
    plan.changed -> {block: variant}                  the changed blocks, as fold_blocks takes them
    check_plan(plan, path, *, model, resolution, num_classes)   LatoptError when it is not for that network
    format_plan_summary(plan, path) -> str
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, ClassVar, Literal, get_args

from pydantic import AfterValidator, Field, model_validator

from latopt import __version__
from latopt.config import RunConfig
from latopt.constants import (
    FOLD_VARIANTS,
    LUT_VARIANTS,
    MAX_BATCH,
    MAX_CLASSES,
    FoldMode,
    FoldVariant,
    LutVariant,
    Precision,
)
from latopt.dp.budgetloop import loop_summary, meet_budget
from latopt.dp.importance import candidates, variant_losses
from latopt.dp.plan_record import MAX_PLAN_BLOCKS, BudgetLoop, Ms, NonEmpty, Selection, Span, Text
from latopt.dp.select import check_budget
from latopt.errors import LatoptError
from latopt.files.artifacts import file_sha256, write_json_atomic
from latopt.files.readers import read_json
from latopt.files.records import Artefact, BlockKey, Positive, Resolution, StrictModel, validated
from latopt.latency.lut import load_lut
from latopt.log import get_logger
from latopt.nets.models import same_model
from latopt.rewrite.span import SPAN_VARIANTS

PLAN_SCHEMA = "latopt.plan/1"
PlanImportance = Literal["uniform", "proxy"]   # what a plan without training may be scored by
PLAN_IMPORTANCE: tuple[str, ...] = get_args(PlanImportance)
_RATIO_RTOL = 1e-9       # predicted ratio/speed-up against ms and asis_ms: float rounding only
_LOG = get_logger("dp")
_REDO = "re-create it (latopt plan --plan-only)"


def plan_only(cfg: RunConfig, lut_path: str | Path, *, budget: float, importance: str = "uniform",
              base_checkpoint: str | Path | None = None, variants: Iterable[str] | None = None, seed: int = 0,
              progress: bool = True, budget_rounds: int | None = None) -> PlanRecord:
    """The DP's plan for ``cfg``'s model and resolution on the LUT's device at ``budget``, chosen by
    :func:`latopt.dp.select_plan` over ``importance`` losses, without training anything: ``uniform`` needs
    no checkpoint; ``proxy`` scores each variant on the trained ``base_checkpoint`` (forward passes only).
    The plan is measured on the LUT's device and re-solved until it meets the budget when measured
    (:func:`latopt.dp.budgetloop.meet_budget`, at most ``budget_rounds`` plans, default
    ``cfg.dp.budget_rounds``; 0: the LUT's plan). Returns the plan (:class:`PlanRecord`; module docstring)."""
    t0 = time.perf_counter()
    budget = check_budget(budget)
    if importance not in PLAN_IMPORTANCE:
        raise LatoptError(f"importance {importance!r}: a plan made without training is scored by "
                          f"{' or '.join(PLAN_IMPORTANCE)} (finetune fine-tunes every candidate)", param="importance")
    if importance == "proxy" and base_checkpoint is None:
        raise LatoptError("importance 'proxy' scores the variants on a trained base: give base_checkpoint (latopt "
                          "train makes one), or use importance 'uniform', which needs no checkpoint", param="importance")
    lut = load_lut(lut_path, model=cfg.model.name, resolution=int(cfg.data.resolution), fold_mode=cfg.fold.mode)
    cands = candidates(lut, variants)
    num_classes = task_name = None
    if importance == "uniform":
        losses = variant_losses(cfg, None, None, cands, method="uniform")
    else:
        from latopt.data import load_task
        from latopt.layerfold import check_base

        assert base_checkpoint is not None  # importance 'proxy' needs one: checked above
        task = load_task(cfg)
        base, arch, _ = check_base(cfg, base_checkpoint, task)
        num_classes, task_name = arch.num_classes, task.name
        losses = variant_losses(cfg, base, task, cands, method="proxy", seed=seed, progress=progress)
    rounds = cfg.dp.budget_rounds if budget_rounds is None else budget_rounds
    plan, sel, loop = meet_budget(lut, losses, budget, rounds=rounds, device=cfg.device, progress=progress)
    blocks = {str(b.index): plan.get(b.index, "none") for b in lut.blocks}
    allowed = sorted({v for vs in cands.values() for v in vs if v != "none"}, key=LUT_VARIANTS.index)
    out = {
        "model": lut.model, "resolution": lut.resolution, "num_classes": num_classes,
        "task": task_name,
        "lut": {"file": str(lut_path), "sha256": file_sha256(lut_path), "device": lut.device, "backend": lut.backend,
                "precision": lut.precision, "batch": lut.batch, "fold_mode": lut.fold_mode},
        "fold_mode": lut.fold_mode, "budget": budget, "importance": importance, "variants": allowed,
        "base_checkpoint": None if base_checkpoint is None else str(base_checkpoint),
        "blocks": blocks, "spans": sel.spans,
        "predicted": {"asis_ms": sel.asis_ms, "ms": sel.predicted_ms, "ratio": sel.ratio,
                      "speedup": sel.asis_ms / sel.predicted_ms},
        "selection": sel, "budget_loop": loop, "losses": {str(b): ls for b, ls in sorted(losses.items())},
        "latopt_version": __version__, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": time.perf_counter() - t0,
    }
    if progress:
        _LOG.info(f"DP plan at budget {budget} on {lut.device}: {len(plan)} blocks changed {plan}; predicted "
                  f"{sel.predicted_ms:.3f} {sel.unit} = {sel.ratio:.3f} of as-is {sel.asis_ms:.3f} {sel.unit}")
    # the DP's own output: a plan it cannot validate is latopt's failure (pydantic's error), not the user's
    return PlanRecord.model_validate(out, strict=False)


def write_plan(path: str | Path, plan: PlanRecord) -> Path:
    """``plan`` as a plan file at ``path`` (``PLAN_SCHEMA``), written atomically."""
    return write_json_atomic(path, plan.to_json())


# ------------------------------------------------------------------------------------ the record


def _sha256(v: str) -> str:
    if len(v) != 64 or any(c not in "0123456789abcdef" for c in v):
        raise ValueError(f"must be a SHA-256 (64 lowercase hexadecimal digits), got {v[:80]!r}")
    return v


def _distinct(v: list[str]) -> list[str]:
    if len(set(v)) != len(v):
        raise ValueError(f"lists a variant twice: {v}")
    return v


class PlanLut(StrictModel):
    """The LUT a plan's times are from."""

    file: NonEmpty
    sha256: Annotated[str, AfterValidator(_sha256)]
    device: NonEmpty
    backend: Text
    precision: Precision | None
    batch: Annotated[int, Field(ge=1, le=MAX_BATCH)]
    fold_mode: FoldMode


class Predicted(StrictModel):
    """The LUT's prediction of the as-is and the planned networks."""

    asis_ms: Positive
    ms: Positive
    ratio: Positive
    speedup: Positive

    @model_validator(mode="after")
    def _consistent(self) -> Predicted:
        for name, value, want in (("ratio", self.ratio, self.ms / self.asis_ms),
                                  ("speedup", self.speedup, self.asis_ms / self.ms)):
            if not math.isclose(value, want, rel_tol=_RATIO_RTOL):
                raise ValueError(f"has {name} {value:.6g}, but its ms and asis_ms give {want:.6g}")
        return self


class PlanRecord(Artefact):
    """A plan file (module docstring): every field typed and bounded, then checked against the others."""

    SCHEMA: ClassVar[str] = PLAN_SCHEMA

    model: Annotated[str, Field(min_length=1, max_length=200)]
    resolution: Resolution
    num_classes: Annotated[int, Field(ge=1, le=MAX_CLASSES)] | None
    task: NonEmpty | None
    lut: PlanLut
    fold_mode: FoldMode
    budget: Annotated[float, Field(gt=0, le=1)]
    importance: PlanImportance
    variants: Annotated[list[FoldVariant], Field(max_length=len(FOLD_VARIANTS)), AfterValidator(_distinct)]
    base_checkpoint: NonEmpty | None
    blocks: Annotated[dict[BlockKey, LutVariant], Field(min_length=1, max_length=MAX_PLAN_BLOCKS)]
    spans: list[Span]
    predicted: Predicted
    selection: Selection
    losses: dict[BlockKey, dict[LutVariant, float]]
    budget_loop: BudgetLoop | None = None   # plans written before the budget loop have none
    latopt_version: Text
    created: Text
    seconds: Ms

    @model_validator(mode="after")
    def _consistent(self) -> PlanRecord:
        n = len(self.blocks)
        indices = {str(i) for i in range(n)}
        extra = next((k for k in self.blocks if k not in indices), None)
        if extra is not None:   # keys are distinct (a JSON object's), so one is out of range iff one is missing
            missing = next(i for i in range(n) if str(i) not in self.blocks)
            raise ValueError(f"field 'blocks' has the key {extra[:40]!r} but not {str(missing)!r}: it names each of "
                             f"the plan's {n} blocks once, 0 .. {n - 1}")
        allowed = {"none", *self.variants}
        bad = next((k for k, v in self.blocks.items() if v not in allowed), None)
        if bad is not None:
            raise ValueError(f"field 'blocks.{bad}' is {self.blocks[bad]!r}, not 'none' or one of the plan's variants "
                             f"({', '.join(self.variants) or 'none'})")
        bad = next((k for k in self.losses if k not in indices), None)
        if bad is not None:
            raise ValueError(f"field 'losses' has the key {bad[:40]!r}, not a block of the plan (0 .. {n - 1})")
        for i, (start, end, kernel) in enumerate(self.spans):   # bounded before anything is expanded
            if end >= n:
                raise ValueError(f"field 'spans[{i}]' is {[start, end, kernel]}: beyond the plan's blocks 0 .. {n - 1}")
        spans = sorted(self.spans)
        for (a0, b0, _), (a1, b1, _) in zip(spans, spans[1:], strict=False):
            if a1 <= b0:
                raise ValueError(f"field 'spans': its spans overlap ({a0}-{b0} and {a1}-{b1}); a block belongs to at "
                                 "most one span")
        for start, end, _ in spans:   # disjoint and within 0 .. n-1: at most n blocks in all
            bad_block = next((i for i in range(start, end + 1) if self.blocks[str(i)] not in SPAN_VARIANTS), None)
            if bad_block is not None:
                raise ValueError(f"field 'spans': span {start}-{end}: block {bad_block} is {self.blocks[str(bad_block)]!r}; a "
                                 f"block of a span must be {', '.join(SPAN_VARIANTS[:-1])} or {SPAN_VARIANTS[-1]} "
                                 "(a span merges affine blocks only)")
        if self.fold_mode != self.lut.fold_mode:
            raise ValueError(f"field 'fold_mode' is {self.fold_mode!r} but its LUT's is {self.lut.fold_mode!r} (the "
                             "LUT's times are of that mode's folds)")
        if self.importance == "proxy" and (self.num_classes is None or self.base_checkpoint is None):
            raise ValueError("field 'num_classes' or 'base_checkpoint' is null in a proxy plan (its losses are of a "
                             "base checkpoint and its classes)")
        loop = self.budget_loop
        if loop is not None and loop.asked != self.budget:
            raise ValueError(f"field 'budget_loop.asked' {loop.asked:.6g} is not the plan's budget {self.budget:.6g}")
        kept = None if loop is None or loop.chosen is None else loop.rounds[loop.chosen]
        solved = self.budget if kept is None else kept.budget
        if self.selection.budget != solved:
            raise ValueError(f"field 'selection.budget' {self.selection.budget:.6g} is not the budget the plan was "
                             f"solved at ({solved:.6g}: " + ("the budget" if kept is None else "the budget loop's kept "
                                                              "round") + ")")
        if kept is not None and (kept.plan != {k: v for k, v in self.blocks.items() if v != "none"}
                                 or kept.spans != self.spans):
            raise ValueError("field 'blocks' or 'spans' is not the plan of the budget loop's kept round")
        if self.predicted.ratio > solved * (1 + _RATIO_RTOL):
            raise ValueError(f"field 'predicted.ratio' {self.predicted.ratio:.6g} is over the budget the plan was "
                             f"solved at {solved:.6g}")
        return self

    @property
    def changed(self) -> dict[int, str]:
        """The blocks the plan changes, {block index: variant} (``none`` left out), as ``fold_blocks`` takes them."""
        return {int(k): v for k, v in sorted(self.blocks.items(), key=lambda kv: int(kv[0])) if v != "none"}


def read_plan(path: str | Path) -> PlanRecord:
    """The plan file at ``path`` as a :class:`PlanRecord`; one :class:`LatoptError` line when it is not one,
    naming the field (``param`` "plan")."""
    try:
        data = read_json(path, schema=PLAN_SCHEMA, what="plan file")
    except LatoptError as e:
        raise LatoptError(str(e), param="plan") from None
    try:
        return validated(PlanRecord, data, prefix=f"plan file {path}: ", key="field")
    except LatoptError as e:
        raise LatoptError(f"{e}; {_REDO}", param="plan") from None


def check_plan(plan: PlanRecord, path: str | Path, *, model: str, resolution: int, num_classes: int) -> None:
    """LatoptError (one line) when the plan was made for another model, resolution or number of classes."""
    have = {"model": (plan.model, model), "resolution": (plan.resolution, resolution),
            "num_classes": (plan.num_classes, num_classes)}
    for key, (want, value) in have.items():
        if want is not None and want != value and not (key == "model" and same_model(str(want), model)):
            raise LatoptError(f"plan file {path} was made for {key} {want!r}, the checkpoint has {value!r}: make a "
                              "plan for this network (latopt plan --plan-only)", param="plan")


def format_plan_summary(plan: PlanRecord, path: str | Path) -> str:
    p, changed = plan.predicted, {str(k): v for k, v in plan.changed.items()}
    u = plan.selection.unit   # ms, or a count device's unit
    spans = "".join(f"; span {a}-{b} as one {k}x{k} conv" for a, b, k in plan.spans)
    return (f"DP plan at budget {plan.budget} ({plan.importance} importance) for {plan.model} @ "
            f"{plan.resolution}px on {plan.lut.device}: changed {len(changed)}/{len(plan.blocks)} blocks "
            f"{changed}{spans}; LUT {'latency' if u == 'ms' else 'count'} {p.asis_ms:.3f} → {p.ms:.3f} {u} "
            f"({p.speedup:.2f}x){loop_summary(plan.budget_loop)}; wrote {path}")
