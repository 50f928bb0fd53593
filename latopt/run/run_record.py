"""The records the stages of ``latopt run`` hand on and run.json keeps (:mod:`latopt.run.stages`): frozen,
validated :class:`~latopt.files.records.StrictModel` s, built from the stage's own values and read back from run.json
with :meth:`StageRecord.read` (a record a stage cannot use says so in one line; the stage is then made again).

Public API::

    BaseStage     the base stage's: its checkpoint, test and validation accuracy
    SearchPick    the search stage's: the recommended trial (None: none), its checkpoint (None: the base itself),
                  fold set, parameters and front row; the constraint, its confirmation and the faster trials
                  rejected; where the study and its plot are
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import ValidationError

from latopt.files.records import StrictModel
from latopt.search.study_record import Confirmation, ConfirmSplit, FrontRow, Rejected

R = TypeVar("R", bound="StageRecord")


class StageRecord(StrictModel):
    """A stage's record: what run.json keeps (:meth:`to_json`) and reads back (:meth:`read`)."""

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def read(cls: type[R], data: Any) -> R | None:
        """The record in a stage's entry of run.json (:meth:`latopt.run.state.RunState.record`: the record's
        fields beside the entry's own, ``made_from``, ``done``, ``outputs``, ...), or None when it holds none (an
        older latopt's entry, or one edited by hand)."""
        if not isinstance(data, dict):
            return None
        try:
            return cls.model_validate({k: v for k, v in data.items() if k in cls.model_fields}, strict=False)
        except ValidationError:
            return None


class BaseStage(StageRecord):
    checkpoint: str
    test_acc: float | None = None
    val_acc: float | None = None


class SearchPick(StageRecord):
    trial: int | None
    checkpoint: str | None           # the recommended trial's folded checkpoint; None: the base itself (or none)
    fold_set: dict[str, str] = {}
    val_acc: float | None = None
    base_acc: float | None = None
    latency_ms: float | None = None
    params: dict[str, float | str] = {}
    row: FrontRow | None = None
    note: str | None = None
    max_acc_drop: float | None = None
    confirm_split: ConfirmSplit | None = None
    confirm: Confirmation | None = None
    rejected: list[Rejected] = []
    pareto_png: str = ""
    study_dir: str = ""
    trials: int | None = None
    refined: list[int] = []          # trials made again with a longer fine-tune (dp.refine), before confirmation

    @property
    def is_base(self) -> bool:
        """The recommendation is the base model itself."""
        return self.row is not None and self.row.base
