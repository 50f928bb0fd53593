"""Reading latopt's input files: plain YAML (config files, device profiles) and JSON artifacts.

Every failure (a missing file, a directory, a syntax error, an alias, a key given twice, binary content, absurd
nesting, a JSON file of another ``schema``) is one :class:`~latopt.errors.LatoptError` line naming the file and,
where there is one, the line. JSON is read strictly: a key given twice (JSON's last-wins would hide one), ``NaN``,
``Infinity`` and a number that overflows to infinity (``1e400``; none is valid JSON for a strict parser, and one
read back would be written on into other files) and an integer too long to convert are refused, naming the key or
the literal.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml

from latopt.errors import LatoptError


class _StrictYamlLoader(yaml.SafeLoader):
    """YAML's safe loader without aliases (``*name``: a 250-byte file could expand to gigabytes, the "billion
    laughs") and without duplicate keys (YAML's last-wins would hide a typo): both are errors at their line."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, "an alias (*name); latopt files allow none, write the "
                                              "value out", mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) or key is None:
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"the key {str(key)[:40]!r} is given twice",
                                                            key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: str | Path, *, what: str = "file") -> Any:
    """Parse a YAML file (``None`` for an empty one) with plain YAML only: no aliases, no duplicate keys
    (:class:`_StrictYamlLoader`). A syntax error, an alias, a duplicate key, binary content or absurd nesting
    is one :class:`LatoptError` line naming ``what``, the line and the problem."""
    path = Path(path)
    try:
        return yaml.load(path.read_text(), Loader=_StrictYamlLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        problem = getattr(e, "problem", None)
        detail = f" ({problem[:100]})" if isinstance(problem, str) and problem else ""
        raise LatoptError(f"{what} {path} is not valid YAML{at}{detail}; fix it") from None
    except UnicodeDecodeError:
        raise LatoptError(f"{what} {path} is not a text file") from None
    except RecursionError:
        raise LatoptError(f"{what} {path} is nested too deeply; fix its syntax") from None


class _Refused(ValueError):
    """What strict JSON refuses (a key given twice, a non-finite number, an endless integer): the clause of the
    error line."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"the key {key[:40]!r} is given twice in one object (a JSON reader keeps one and hides the other)")
        out[key] = value
    return out


class _NonFinite:
    """Where the parser met NaN, Infinity, -Infinity or a number that overflows (1e400); looked for after
    parsing (only when there is one), so that the error names the field."""

    def __init__(self, literal: str) -> None:
        self.literal = literal[:40]


def _int(literal: str) -> int:
    try:
        return int(literal)
    except ValueError:  # beyond sys.get_int_max_str_digits()
        raise _Refused(f"an integer of {len(literal.lstrip('-'))} digits is too long") from None


def _non_finite(data: Any) -> tuple[str, str] | None:
    """(the field path, as ``validated`` writes it, and the literal) of the first non-finite number in ``data``."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, _NonFinite):
            return where, value.literal
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        children = [(f"{where}[{k}]" if isinstance(k, int) else (f"{where}.{k}" if where else k), v) for k, v in items]
        stack.extend(reversed(children))
    return None


def parse_json(text: str) -> Any:
    """``text`` parsed as strict JSON (module docstring); a :class:`ValueError` whose message is the clause
    (``json.JSONDecodeError`` for a syntax error) or RecursionError otherwise."""
    seen: list[_NonFinite] = []

    def non_finite(literal: str) -> _NonFinite:
        seen.append(_NonFinite(literal))
        return seen[-1]

    def number(literal: str) -> float | _NonFinite:
        value = float(literal)
        return value if math.isfinite(value) else non_finite(literal)

    data = json.loads(text, object_pairs_hook=_pairs, parse_constant=non_finite, parse_float=number, parse_int=_int)
    if seen:
        where, literal = _non_finite(data) or ("", seen[0].literal)
        field = f"field {where[:100]!r} is" if where else "its value is"
        raise _Refused(f"{field} {literal}, not a finite number (JSON has no NaN or Infinity)")
    return data


def read_json(path: str | Path, *, schema: str | None = None, what: str = "file") -> dict[str, Any]:
    """Read a JSON artifact strictly (:func:`parse_json`); check its ``schema`` field when ``schema`` is given.
    Each failure is one :class:`LatoptError` line naming ``what`` and ``path``."""
    path = Path(path)
    if path.is_dir():
        raise LatoptError(f"{what} {path} is a directory; give the file")
    if not path.is_file():  # a FIFO or a device would block or never end
        raise LatoptError(f"{what} {path} {'is not a regular file' if path.exists() else 'does not exist'}")
    try:
        data = parse_json(path.read_text())
    except _Refused as e:
        raise LatoptError(f"{what} {path} is not strict JSON: {e}; re-create it") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LatoptError(f"{what} {path} is not valid JSON ({e}); re-create it") from None
    except RecursionError:
        raise LatoptError(f"{what} {path} is nested too deeply to be a latopt file; re-create it") from None
    if not isinstance(data, dict):
        raise LatoptError(f"{what} {path} is not a JSON object")
    if schema is not None and data.get("schema") != schema:
        shown = repr(data.get("schema"))   # a hostile file's schema may be megabytes: cut
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise LatoptError(f"{what} {path} has schema {shown}, expected {schema!r}; is it the right kind of file?")
    return data
