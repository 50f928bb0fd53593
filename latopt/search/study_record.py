"""The search's records: a trial's confirmation, the recommendation, and the front summary that ``pareto.json``
holds (:func:`latopt.search.front_summary` builds it; ``latopt search --show``, the run's search stage and the
plot read it by attribute). Each is a frozen, validated :class:`~latopt.files.records.StrictModel`, built from the study
with ``model_validate(..., strict=False)`` (a NumPy number or a tuple is taken) and read back strictly.

Public API::

    Confirmation      one trial's paired counts on the confirmation part, its drop, bound and verdict
    Rejected          a faster trial the recommendation passed over: its confirmation, or why it has none
    Recommendation    the recommended trial's number and confirmation, the rejected trials, the constraint, a note
    ConfirmSplit      how the study cut its validation split (``latopt.data.split_validation``) and the bound used
    FrontRow          one row of the front table (a trial: objectives, drop, confirmation, parameters, flags)
    FrontSummary      pareto.json: the study, its constraint, the recommendation, the rows, comparable studies
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from latopt.files.records import Artefact, StrictModel


class Confirmation(StrictModel):
    """:func:`latopt.search._confirm.confirm`'s verdict on one trial; the base trial's is ``n = 0``, level None."""

    n: int
    lost: int
    won: int
    drop: float
    bound: float
    level: float | None
    passed: bool

    @classmethod
    def of_base(cls) -> Confirmation:
        """The base trial's: drop 0 by definition, nothing counted."""
        return cls(n=0, lost=0, won=0, drop=0.0, bound=0.0, level=None, passed=True)


class Rejected(StrictModel):
    """A trial within the constraint on the selection part that was not recommended: its confirmation failed,
    or (``why``) it has no confirmation counts."""

    trial: int
    passed: bool = False
    why: str | None = None
    n: int | None = None
    lost: int | None = None
    won: int | None = None
    drop: float | None = None
    bound: float | None = None
    level: float | None = None

    @property
    def confirmation(self) -> Confirmation | None:
        if self.n is None or self.lost is None or self.won is None or self.drop is None or self.bound is None:
            return None
        return Confirmation(n=self.n, lost=self.lost, won=self.won, drop=self.drop, bound=self.bound,
                            level=self.level, passed=self.passed)


class Recommendation(StrictModel):
    """:func:`latopt.search.recommendation`: the trial (None: there is none, ``note`` says why), its
    confirmation, the faster trials rejected (fastest first) and the constraint it was judged against."""

    trial: int | None = None
    confirm: Confirmation | None = None
    rejected: list[Rejected] = []
    max_acc_drop: float
    note: str | None = None


class ConfirmSplit(StrictModel):
    """The study's ``confirm`` attribute: the validation split's two parts and the bound."""

    seed: int
    n_selection: int
    n_confirmation: int
    level: float
    method: str
    fraction: float | None = None
    n_validation: int | None = None
    confirmation_sha256: str | None = None


class FrontRow(StrictModel):
    """One trial in the front table and pareto.csv (``metric``: the study's second objective)."""

    trial: int
    val_acc: float
    metric: float
    acc_drop: float | None
    feasible: bool
    confirm_drop: float | None
    confirm_bound: float | None
    confirmed: bool | None
    lambda_c: float | None
    tau: float | None
    p: float | None
    granularity: str | None
    budget: float | None
    n_folded: int
    fold_set: dict[str, str]
    base: bool
    on_front: bool
    on_full_front: bool
    recommended: bool
    checkpoint: str | None
    latency_ms: float | None
    measured_ms: float | None
    measured_ratio: float | None
    nonlinear_layers: int | None


class FrontSummary(Artefact):
    """pareto.json: everything ``--show`` prints (:func:`latopt.search.format_table`) and draws. ``others``: the
    same for each comparable study (the DP's study beside a Layer Folding study)."""

    SCHEMA: ClassVar[str] = "latopt.pareto/1"

    study: str
    objective: str | None
    metric_names: Annotated[list[str], Field(min_length=2, max_length=2)]
    max_acc_drop: float | None
    base_acc: float | None
    base_trial: int | None
    recommended: int | None
    recommendation: Recommendation | None
    confirm_split: ConfirmSplit | None
    n_front: int
    n_full_front: int
    trial_states: dict[str, int]
    rows: list[FrontRow]
    others: list[FrontSummary] = []

    @property
    def front(self) -> list[int]:
        """The trial numbers on the (feasible) front, fastest first."""
        return [r.trial for r in self.rows if r.on_front]

    def row(self, trial: int) -> FrontRow | None:
        return next((r for r in self.rows if r.trial == trial), None)

