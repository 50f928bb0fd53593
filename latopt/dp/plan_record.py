"""The DP's records: what :func:`latopt.dp.select_plan` chose, what the budget loop measured, and the types a
plan file (:mod:`latopt.dp.planfile`) and the DP's report share. Each is a frozen, validated
:class:`~latopt.files.records.StrictModel`: read from a file strictly (one error line naming the field), built from the
DP's own values with ``model_validate(..., strict=False)`` (a NumPy integer or a tuple is taken).

Public API::

    Selection                       select_plan's choice: budget solved at, as-is / target / predicted ms, ratio,
                                    fastest_ms, loss, resolution, slack_ms, spans
    BudgetLoop, LoopRound, LoopMeasured   the budget loop's record (:mod:`latopt.dp.budgetloop`)
    DPReport                        the DP's report.json (:func:`latopt.dp.run_dp`; a
                                    :class:`latopt.layerfold.fold_record.FoldReport` with the plan's choice)
    LoopStatus, LOOP_STATUS, TIMINGS      its statuses; how often one plan is timed at most
    Span, MAX_SPAN_KERNEL, MAX_PLAN_BLOCKS, Ms, Text, NonEmpty   field types: [start, end, kernel]; a time >= 0; text
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, get_args

from pydantic import AfterValidator, Field, model_validator

from latopt.constants import MAX_BUDGET_ROUNDS, FoldMode, LutVariant
from latopt.files.records import BlockKey, DistillName, Positive, StrictModel
from latopt.layerfold.fold_record import FoldReport

MAX_PLAN_BLOCKS = 4096   # blocks of a plan (MobileNetV2 and EfficientNet-lite have 17 to 30)
MAX_SPAN_KERNEL = 31     # a span's kernel: odd, 1 .. 31 (the blocks' own are 3, 5 or 7)
TIMINGS = 3              # timings of one plan at most, until one is trusted
LoopStatus = Literal["met", "under", "over", "noisy", "off", "exact", "skipped"]  # the loop's status (budgetloop)
LOOP_STATUS: tuple[str, ...] = get_args(LoopStatus)

Text = Annotated[str, Field(max_length=4096)]
NonEmpty = Annotated[str, Field(min_length=1, max_length=4096)]
Ms = Annotated[float, Field(ge=0)]


def _span(v: list[int]) -> list[int]:  # the form; the range (the plan's blocks) is the record's to check
    start, end, kernel = v
    if start >= end:
        raise ValueError(f"is {v}: a span is [start, end, kernel] with start < end")
    if kernel % 2 == 0 or not 1 <= kernel <= MAX_SPAN_KERNEL:
        raise ValueError(f"is {v}: a span's kernel is odd, 1 .. {MAX_SPAN_KERNEL}")
    return v


Span = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=3, max_length=3), AfterValidator(_span)]


class Selection(StrictModel):
    """What :func:`latopt.dp.select_plan` reports of its choice."""

    budget: Annotated[float, Field(gt=0, le=1)]
    asis_ms: Positive
    target_ms: Positive
    predicted_ms: Positive
    ratio: Positive
    fastest_ms: Ms
    loss: float
    resolution: Annotated[int, Field(ge=1, le=10**9)]
    slack_ms: Ms
    spans: list[Span] = []   # plans written before spans were chosen have none
    unit: str = "ms"         # the LUT's unit: "ms", or a count device's (latopt.latency.backends.count.unit)


class LoopMeasured(StrictModel):
    """One plan timed against the as-is network (:class:`latopt.dp.budgetloop.Measured`)."""

    ratio: Positive
    ratio_q1: Positive
    ratio_q3: Positive
    asis_ms: Positive
    plan_ms: Positive
    asis_iqr_ms: Ms
    plan_iqr_ms: Ms
    n: Annotated[int, Field(ge=1)]


class LoopRound(StrictModel):
    """One round of the budget loop: the DP's plan at ``budget`` and its measurement."""

    budget: Annotated[float, Field(gt=0, le=1)]
    plan: Annotated[dict[BlockKey, LutVariant], Field(max_length=MAX_PLAN_BLOCKS)]
    spans: list[Span]
    loss: float
    predicted_ms: Positive
    predicted_ratio: Positive
    timings: Annotated[int, Field(ge=1, le=TIMINGS)]
    trusted: bool
    measured: LoopMeasured


class BudgetLoop(StrictModel):
    """The budget loop's record (:mod:`latopt.dp.budgetloop`)."""

    asked: Annotated[float, Field(gt=0, le=1)]
    rounds_max: Annotated[int, Field(ge=0, le=MAX_BUDGET_ROUNDS)]
    tolerance: Annotated[list[Positive], Field(min_length=2, max_length=2)]
    status: LoopStatus
    note: Text | None
    device: NonEmpty | None
    chosen: Annotated[int, Field(ge=0)] | None
    rounds: Annotated[list[LoopRound], Field(max_length=MAX_BUDGET_ROUNDS)]

    @model_validator(mode="after")
    def _consistent(self) -> BudgetLoop:
        if len(self.rounds) > self.rounds_max:
            raise ValueError(f"has {len(self.rounds)} rounds, more than its rounds_max {self.rounds_max}")
        if (self.status in ("met", "under", "over", "noisy")) != bool(self.rounds):
            raise ValueError(f"has status {self.status!r} and {len(self.rounds)} rounds: met, under, over and noisy "
                             "are the statuses of measured rounds, off, exact and skipped of none")
        if (self.chosen is None) != (not self.rounds):
            raise ValueError("field 'chosen' is the kept round's index when rounds were measured, else null")
        if self.chosen is not None and self.chosen >= len(self.rounds):
            raise ValueError(f"field 'chosen' {self.chosen} is not one of its {len(self.rounds)} rounds")
        return self


class DPReport(FoldReport):
    """The DP's apply step's report (``latopt.dp_report/1``): the plan chosen and how (:func:`latopt.dp.run_dp`)."""

    SCHEMA: ClassVar[str] = "latopt.dp_report/1"

    method: Literal["dp"]
    lut: str | None                            # the LUT file; null when run_dp was given a LUT object
    mode: FoldMode
    distill: DistillName                       # fold.distill; a report written before names held a boolean
    importance: Literal["proxy", "finetune", "uniform", "given"]   # given: the losses were passed in
    budget: Annotated[float, Field(gt=0, le=1)]
    selection: Selection
    budget_loop: BudgetLoop
    losses: dict[BlockKey, dict[LutVariant, float]]
    n_blocks: Annotated[int, Field(ge=0)]

    @property
    def spans(self) -> list[list[int]]:
        """The DP's merged spans, which export ships as one convolution each."""
        return [list(s) for s in self.selection.spans]
