"""The search's records: a trial's confirmation, the recommendation, and the front summary that ``pareto.json``
holds (:func:`latopt.search.front_summary` builds it; ``latopt search --show``, the run's search stage and the
plot read it by attribute). Each is a frozen, validated :class:`~latopt.files.records.StrictModel`, built from the study
with ``model_validate(..., strict=False)`` (a NumPy number or a tuple is taken) and read back strictly.

The study's own attributes are read through records too: what a trial records in its Optuna user attributes
(:class:`TrialAttrs`), its sampled parameters (:class:`TrialParams`), the study's user attributes
(:class:`StudyAttrs`) and a search directory's ``study.json`` (:class:`StudyDirRecord`). These are frozen
:class:`~latopt.files.records.OpenRecord` s read as the front table reads them (``strict=False``; keys they do not
name, such as a method's own attributes, kept as they are), so a study of an older latopt still loads; a value of the
wrong kind is one :class:`~latopt.errors.LatoptError` line naming the trial or the study and the attribute. The
attributes themselves are written as before (names and values unchanged).

Public API::

    Confirmation      one trial's paired counts on the confirmation part, its drop, bound and verdict
    Rejected          a faster trial the recommendation passed over: its confirmation, or why it has none
    Recommendation    the recommended trial's number and confirmation, the rejected trials, the constraint, a note
    ConfirmSplit      how the study cut its validation split (``latopt.data.split_validation``) and the bound used
    FrontRow          one row of the front table (a trial: objectives, drop, confirmation, parameters, flags)
    FrontSummary      pareto.json: the study, its constraint, the recommendation, the rows, comparable studies
    TrialAttrs        a trial's user attributes (``TrialAttrs.of(trial)``): base, refines, its record, its confirmation
    TrialParams       a trial's parameters the front table shows (``TrialParams.of(trial)``): λ_c, τ, p, granularity, budget
    StudyAttrs        a study's user attributes (``StudyAttrs.of(study)``): schema, objective, constraint, split, inputs
    StudyDirRecord    a search directory's ``study.json`` (``StudyDirRecord.read(path)``): which study of which storage
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import ConfigDict, Field

from latopt.files.readers import read_json
from latopt.files.records import Artefact, OpenRecord, StrictModel, validated

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial


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



class _Attrs(OpenRecord):
    """Attributes a study or a trial holds, read as the front table reads them: lax (``strict=False``), values as
    recorded (no finiteness check), keys not named here kept as they are."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=False, allow_inf_nan=True)


class TrialAttrs(_Attrs):
    """What a trial of a latopt study holds in its Optuna user attributes (:func:`latopt.search._trial.record` sets
    them; None values are left out, so every field is optional). ``base`` and ``refines`` are given when the trial is
    enqueued (the base model's operating point; the trial made again with a longer fine-tune), ``worker`` when it
    starts; the rest is its record (:mod:`latopt.search._trial`), a method's own attributes kept as extra keys."""

    base: bool = False                      # the enqueued base-model trial
    refines: int | None = None              # the trial this one makes again with a longer fine-tune (REFINES)
    worker: str | None = None               # host:pid of the process that ran it
    surplus: bool | None = None             # pruned: earlier trials filled the budget
    failed_check: str | None = None         # its fold failed its numeric check (FAILED_CHECK): the first line
    val_acc: float | None = None            # on the selection part of the validation split
    base_acc: float | None = None
    test_acc: float | None = None
    fold_set: dict[str, str] = {}           # block index -> variant
    checkpoint: str | None = None
    report: str | None = None
    latency_ms: float | None = None         # LUT-predicted
    nonlinear_layers: int | None = None
    flops: float | None = None
    confirm_n: int | None = None            # paired counts on the confirmation part (latopt.search._confirm)
    confirm_lost: int | None = None
    confirm_won: int | None = None
    confirm_acc: float | None = None
    confirm_base_acc: float | None = None
    measured_ms: float | None = None        # --measure: timed on the device, base and candidate interleaved
    measured_base_ms: float | None = None
    measured_ratio: float | None = None
    measured_iqr_ms: float | None = None
    acc_drop: float | None = None
    constraint: float | None = None         # acc_drop - max_acc_drop: feasible when <= 0
    granularity: str | None = None
    seconds: float | None = None

    @classmethod
    def of(cls, trial: FrozenTrial | optuna.Trial) -> TrialAttrs:
        """``trial``'s user attributes, validated once."""
        return validated(cls, trial.user_attrs, prefix=f"trial {trial.number}: ", key="user attribute")

    @property
    def counts(self) -> tuple[int, int, int] | None:
        """The paired counts on the confirmation part, (lost, won, n); None without them (a study made before the
        split)."""
        if self.confirm_lost is None or self.confirm_won is None or self.confirm_n is None:
            return None
        return self.confirm_lost, self.confirm_won, self.confirm_n


class TrialParams(_Attrs):
    """The parameters of a trial that the front table shows (Layer Folding's λ_c, τ, p and granularity; the DP's
    budget); a method's others kept as extra keys."""

    lambda_c: float | None = None
    tau: float | None = None
    p: float | None = None
    granularity: str | None = None
    budget: float | None = None

    @classmethod
    def of(cls, trial: FrozenTrial) -> TrialParams:
        return validated(cls, trial.params, prefix=f"trial {trial.number}: ", key="parameter")

    @classmethod
    def sampled(cls, params: dict[str, Any]) -> TrialParams:
        """The parameters a method's space sampled (:meth:`latopt.methods.Space.suggest`)."""
        return validated(cls, params, key="parameter")


class StudyAttrs(_Attrs):
    """What a latopt study holds in its Optuna user attributes: set once by the process that creates it
    (:func:`latopt.search._storage.open_study`: ``schema``, ``metric_names``, its identity — model, task, resolution,
    space, ``max_acc_drop``, the method's keys, the validation split ``confirm`` —, ``objective`` last;
    :func:`latopt.search.run_search`: ``base_checkpoint``, ``lut``, ``config``, ``method``). ``base_acc``: an older
    study's base accuracy (a study now has its base trial)."""

    schema_: str | None = Field(default=None, alias="schema")   # latopt.study/1; None: not a latopt study
    metric_names: list[str] | None = None
    objective: str | None = None
    max_acc_drop: float | None = None
    confirm: ConfirmSplit | None = None
    base_acc: float | None = None
    base_checkpoint: str | None = None
    lut: str | None = None
    config: str | None = None
    method: str | None = None

    @classmethod
    def of(cls, study: optuna.Study) -> StudyAttrs:
        """``study``'s user attributes, validated once."""
        return validated(cls, study.user_attrs, prefix=f"study {study.study_name!r}: ", key="user attribute")


class StudyDirRecord(_Attrs):
    """``study.json`` in a search directory: which study (``study``, its ``study_id`` once it exists) of which
    storage (``default``: the directory's own SQLite file) its trial directories belong to
    (:func:`latopt.search._storage.check_study_dir`)."""

    storage: str | None = None
    study: str | None = None
    study_id: int | None = None

    @classmethod
    def read(cls, path: Path) -> StudyDirRecord:
        return validated(cls, read_json(path, what="study record"), prefix=f"study record {path}: ", key="key")
