"""The validated records of latopt: strict pydantic models and their one-line errors.

The run config (:mod:`latopt.config`), device profiles
(:class:`latopt.latency.devices.DeviceProfile`) and checkpoint architectures (``latopt.files.checkpoint``) are
pydantic models on :class:`StrictModel`: unknown keys refused, frozen, no coercion (an integer is not a
boolean, a string is not a number; a float key takes an integer), finite numbers only, bounds as ``Field``
constraints, choices as the ``Literal`` types of :mod:`latopt.constants`. :func:`validated` is the one
place that turns a ``pydantic.ValidationError`` into a one-line :class:`LatoptError` naming the key path,
the bad value and what is allowed (``config key 'fold.tau' must be in (0, 1], got 1.5``).

Public API: :class:`StrictModel`, :class:`OpenRecord` (unknown keys kept), :class:`Artefact` (a record that is
a file: its ``schema`` field), :func:`validated`, and the field types ``Name`` (an identifier that can be one path
component, :func:`latopt.files.artifacts.check_name`), ``Resolution`` (``RESOLUTION_RANGE``),
``SplitSeed`` (``data.split_seed``: 0 .. ``MAX_SPLIT_SEED``, the config's and the checkpoints'), ``Positive``,
``Accuracy`` (a fraction in [0, 1]), ``DistillName`` (``fold.distill``: a distillation's name, a
boolean read as ``logits`` / ``none``) and ``BlockKey`` (a block index as a JSON mapping key: ASCII decimal digits without a sign or a
leading zero, so ``"3"`` and not ``"03"``, ``"+3"``, ``"²"`` or the Arabic-Indic ``"٣"``; whether the index is
in range is the record's to check); :class:`Accuracies` (accuracy by phase, shared by fold reports and
checkpoints).
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from latopt.constants import MAX_SPLIT_SEED, NORMALIZE_NAMES, RESOLUTION_RANGE
from latopt.errors import LatoptError
from latopt.files.artifacts import check_name


class StrictModel(BaseModel):
    """Base of latopt's validated records (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class OpenRecord(BaseModel):
    """A validated record that keeps keys it does not know as they are (a checkpoint's ``meta``): its fields are
    typed and bounded like a :class:`StrictModel`'s, other JSON-able keys pass through."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True, allow_inf_nan=False)

    def plain(self) -> dict[str, Any]:
        """The JSON-able dict the file stores (the fields given, the extra keys as they are)."""
        return self.model_dump(mode="json", exclude_unset=True)


class Artefact(StrictModel):
    """A record that is a JSON file of its own, whose ``schema`` field names its kind (``SCHEMA``): the reader
    checks it (:func:`latopt.files.readers.read_json`) and the record leaves it out; :meth:`to_json` writes it first."""

    SCHEMA: ClassVar[str] = ""

    @model_validator(mode="before")
    @classmethod
    def _schema(cls, d: Any) -> Any:
        return {k: v for k, v in d.items() if k != "schema"} if isinstance(d, Mapping) else d

    def to_json(self) -> dict[str, Any]:
        """What the file holds: the schema, then the record's fields."""
        return {"schema": self.SCHEMA, **self.model_dump(mode="json")}


M = TypeVar("M", bound=BaseModel)


def validated(cls: type[M], data: Any, *, prefix: str = "", key: str = "config key") -> M:
    """``cls`` validated from plain data (as YAML or JSON gives it); a one-line LatoptError otherwise:
    ``{prefix}{key} 'a.b[1]' must be ..., got ...`` / ``{prefix}unknown {key} 'a.x'; known: ...``."""
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise LatoptError(_error_line(e, cls, prefix, key)) from None


_WANT = {  # pydantic error type -> what the value must be
    "int_type": "an integer", "int_from_float": "an integer", "bool_type": "true or false",
    "float_type": "a number", "finite_number": "a finite number", "string_type": "a string",
    "string_too_short": "a non-empty string", "model_type": "a mapping", "dict_type": "a mapping",
    "list_type": "a list", "tuple_type": "a list",
}


def _error_line(e: ValidationError, cls: type[BaseModel], prefix: str, key: str) -> str:
    # an unknown key first: a misspelt key is the likeliest cause of the other errors (a missing key)
    err = sorted(e.errors(), key=lambda x: x["type"] != "extra_forbidden")[0]
    loc, kind, ctx = err["loc"], err["type"], err.get("ctx") or {}
    shown = loc[:-2] if loc[-1:] == ("[key]",) else loc  # a bad mapping key: name the mapping (the message has the key)
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in shown).lstrip(".")
    got = repr(err["input"])
    got = got if len(got) <= 80 else got[:77] + "..."
    if kind == "extra_forbidden":
        parent, _ = _field_at(cls, loc[:-1])
        known = list(parent.model_fields) if isinstance(parent, type) and issubclass(parent, BaseModel) else []
        return f"{prefix}unknown {key} {path!r}; known: {', '.join(known)}"
    if kind == "value_error":  # our validators word the whole clause
        detail = str(ctx["error"])
    elif kind == "missing":
        detail = "is missing"
    elif kind == "literal_error":
        tp, _ = _field_at(cls, loc)
        choices = typing.get_args(tp) if typing.get_origin(tp) is Literal else re.findall(r"'([^']*)'", ctx["expected"])
        detail = f"is {got}; choose one of {', '.join(map(str, choices))}"
    elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        detail = f"must be {_bounds(_field_at(cls, loc)[1], ctx)}, got {got}"
    elif kind == "too_short" and ctx.get("min_length") == 1:
        detail = "must not be empty"
    elif kind in ("too_short", "too_long"):
        least = kind == "too_short"
        detail = f"must have {'at least' if least else 'at most'} {ctx['min_length' if least else 'max_length']} " \
                 f"items, got {got}"
    elif kind == "string_too_long":
        detail = f"must have at most {ctx['max_length']} characters, got {got}"
    elif kind in _WANT:
        detail = f"must be {_WANT[kind]}, got {got}"
    else:
        detail = f"is invalid ({err['msg']}), got {got}"
    if shown is not loc and kind != "value_error":
        detail = f"has a key that {detail}"
    if path:
        return f"{prefix}{key} {path!r} {detail}"
    return f"{prefix}{detail}" if kind == "value_error" else f"{prefix}expected a mapping of {key}s, got {got}"


def _field_at(cls: Any, loc: tuple[Any, ...]) -> tuple[Any, list[Any]]:
    """(type, constraint metadata) of the value at ``loc`` inside model ``cls``; (None, []) if not found."""
    tp, meta = _unwrap(cls, [])
    for part in loc:
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel) and part in tp.model_fields:
            f = tp.model_fields[part]
            tp, meta = f.annotation, list(f.metadata)
        elif origin is tuple and isinstance(part, int):
            tp, meta = (args[0] if args[-1] is Ellipsis else args[part]), []
        elif origin is list and isinstance(part, int):
            tp, meta = args[0], []
        elif origin is dict and part != "[key]":
            tp, meta = args[1], []
        else:
            return None, []
        tp, meta = _unwrap(tp, meta)
    return tp, meta


def _unwrap(tp: Any, meta: list[Any]) -> tuple[Any, list[Any]]:
    """Strip ``Annotated`` (collecting its constraints) and ``X | None`` from a type."""
    while True:
        if typing.get_origin(tp) is Annotated:
            meta = [*meta, *tp.__metadata__]
            tp = typing.get_args(tp)[0]
        elif typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp):
            (tp,) = [a for a in typing.get_args(tp) if a is not type(None)]
        else:
            flat = [*meta, *(m for x in meta for m in getattr(x, "metadata", ()))]  # Field() inside Annotated
            return tp, flat


def _bounds(meta: list[Any], ctx: dict[str, Any]) -> str:
    """The allowed range as text: ``in (0, 1]``, ``>= 1``; from the field's constraints (``ctx``: the bound
    that failed, when the field is not found)."""
    b = {n: getattr(m, n) for m in meta for n in ("gt", "ge", "lt", "le") if getattr(m, n, None) is not None} or ctx
    lo = ("(", b["gt"]) if "gt" in b else ("[", b["ge"]) if "ge" in b else None
    hi = (")", b["lt"]) if "lt" in b else ("]", b["le"]) if "le" in b else None
    if lo and hi:
        return f"in {lo[0]}{lo[1]}, {hi[1]}{hi[0]}"
    if lo:
        return f"{'>' if lo[0] == '(' else '>='} {lo[1]}"
    assert hi is not None
    return f"{'<' if hi[0] == ')' else '<='} {hi[1]}"


# ---------------------------------------------------------------------------- shared field types
def _valid_name(v: Any) -> Any:  # names are identifiers (runs/<name>/, profiles/<name>/), see check_name
    try:
        return check_name(v, "=")
    except LatoptError as e:
        raise ValueError(str(e)) from None


Name = Annotated[str, BeforeValidator(_valid_name)]
Resolution = Annotated[int, Field(ge=RESOLUTION_RANGE[0], le=RESOLUTION_RANGE[1])]
Positive = Annotated[float, Field(gt=0)]
SplitSeed = Annotated[int, Field(ge=0, le=MAX_SPLIT_SEED)]   # data.split_seed: the config's and every checkpoint's


def _triple(v: Any) -> Any:
    if isinstance(v, (list, tuple)) and len(v) == 3:
        return tuple(v)
    raise ValueError(f"must have 3 values, one per channel, got {v!r}")


class NormalizeStats(StrictModel):
    """An input normalisation: the per-channel mean and standard deviation of [0, 1] pixels."""

    mean: Annotated[tuple[float, float, float], BeforeValidator(_triple)]
    std: Annotated[tuple[Positive, Positive, Positive], BeforeValidator(_triple)]


def _normalize(v: Any) -> str | NormalizeStats:
    if isinstance(v, NormalizeStats) or (isinstance(v, str) and (v == "task" or v in NORMALIZE_NAMES)):
        return v
    if isinstance(v, Mapping):
        try:
            return NormalizeStats.model_validate(v)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            raise ValueError(f"field {where}: {msg[0].lower()}{msg[1:]}") from None
    raise ValueError(f"must be task, {', '.join(NORMALIZE_NAMES)} or {{mean: [m, m, m], std: [s, s, s]}}, got {v!r}")


def _plain_normalize(v: Any) -> Any:
    return v.model_dump(mode="json") if isinstance(v, NormalizeStats) else v


# data.normalize, a checkpoint's meta.normalize: a name ("task": the task's own) or the statistics
Normalize = Annotated[str | NormalizeStats, PlainValidator(_normalize), PlainSerializer(_plain_normalize)]


def _block_key(v: str) -> str:  # str.isdigit() alone passes "²" (int() raises) and "٣" (int() reads 3)
    if not (v.isascii() and v.isdigit()) or (len(v) > 1 and v[0] == "0"):
        raise ValueError(f"has the key {v[:40]!r}; its keys are block indices written as ASCII decimal integers "
                         "without sign or leading zero ('3')")
    return v


BlockKey = Annotated[str, AfterValidator(_block_key)]


Accuracy = Annotated[float, Field(ge=0, le=1)]


def _distill_name(v: Any) -> Any:  # configs and reports written before variants had names held a boolean
    return ("logits" if v else "none") if isinstance(v, bool) else v


# a distillation variant's name, ``fold.distill`` (``none`` or one latopt.training.losses registers: checked there, this module
# being torch-free); the boolean that configs and reports held before is read as logits (true) or none (false)
DistillName = Annotated[str, BeforeValidator(_distill_name)]


class Accuracies(StrictModel):
    """Accuracy by phase: the base, the σ_α network after pre-fold (Layer Folding's), the variant network
    (``linearized``: the folded activations at α = 1), the fold before fine-tuning and after it. A phase a
    method does not have (or a split it did not evaluate) is absent from the JSON, not null."""

    base: Accuracy | None = None
    prefold: Accuracy | None = None
    linearized: Accuracy | None = None
    folded: Accuracy | None = None
    finetuned: Accuracy | None = None

    @model_serializer(mode="wrap")
    def _drop_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}
