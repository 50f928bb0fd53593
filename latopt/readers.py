"""Reading latopt's input files: plain YAML (config files, device profiles) and JSON artifacts.

Every failure (a missing file, a syntax error, an alias, a key given twice, binary content, absurd nesting, a
JSON file of another ``schema``) is one :class:`~latopt.errors.LatoptError` line naming the file and, where
there is one, the line.
"""

from __future__ import annotations

import json
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


def read_json(path: str | Path, *, schema: str | None = None, what: str = "file") -> dict[str, Any]:
    """Read a JSON artifact; check its ``schema`` field when ``schema`` is given."""
    path = Path(path)
    if not path.is_file():
        raise LatoptError(f"{what} {path} does not exist")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LatoptError(f"{what} {path} is not valid JSON ({e}); re-create it") from None
    except RecursionError:
        raise LatoptError(f"{what} {path} is nested too deeply to be a latopt file; re-create it") from None
    if not isinstance(data, dict):
        raise LatoptError(f"{what} {path} is not a JSON object")
    if schema is not None and data.get("schema") != schema:
        raise LatoptError(
            f"{what} {path} has schema {data.get('schema')!r}, expected {schema!r}; is it the right kind of file?"
        )
    return data
