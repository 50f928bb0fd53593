"""The type check's configuration (pyproject.toml's [tool.mypy], for ``mypy latopt``): the modules
that define validated records (subclasses of latopt.files.records.StrictModel) are checked with every flag of
``mypy --strict``, and no latopt module has its errors switched off. mypy itself is not run here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")   # Python >= 3.11

ROOT = Path(__file__).resolve().parent.parent

# the flags `mypy --strict` turns on that can be set per module (warn_unused_ignores and warn_redundant_casts:
# globally); `strict = true` in an override would turn them on for every module
STRICT_FLAGS = {
    "disallow_any_generics": True, "disallow_subclassing_any": True, "disallow_untyped_calls": True,
    "disallow_untyped_defs": True, "disallow_incomplete_defs": True, "check_untyped_defs": True,
    "disallow_untyped_decorators": True, "warn_return_any": True, "implicit_reexport": False,
    "strict_equality": True, "extra_checks": True,
}


def _mypy() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]


def _record_modules() -> set[str]:
    """The latopt modules defining a class on StrictModel, directly or through another such class."""
    classes: dict[str, tuple[str, list[str]]] = {}  # class name -> (module, base names)
    for path in (ROOT / "latopt").rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else ""
                         for b in node.bases]
                classes.setdefault(node.name, (module, bases))
    strict = {"StrictModel"}
    grew = True
    while grew:
        more = {n for n, (_, bases) in classes.items() if strict & set(bases)} - strict
        strict |= more
        grew = bool(more)
    return {classes[n][0] for n in strict}


def test_record_modules_are_checked_strictly():
    modules = _record_modules()
    assert {"latopt.files.records", "latopt.config", "latopt.files.checkpoint", "latopt.latency.devices"} <= modules
    strict = [o for o in _mypy().get("overrides", []) if any(o.get(k) is not None for k in STRICT_FLAGS)]
    covered = {m for o in strict for m in o["module"]}
    assert modules <= covered, f"record modules not checked strictly: {sorted(modules - covered)}"
    for o in strict:
        assert {k: o.get(k) for k in STRICT_FLAGS} == STRICT_FLAGS, o["module"]
        assert "strict" not in o  # it would apply to every module


def test_no_latopt_module_is_exempt():
    config = _mypy()
    assert "pydantic.mypy" in config["plugins"]
    for o in config.get("overrides", []):
        mods = o["module"] if isinstance(o["module"], list) else [o["module"]]
        if any(m == "latopt" or m.startswith("latopt.") for m in mods):
            assert not o.get("ignore_errors") and not o.get("ignore_missing_imports"), mods


def test_dev_extra_installs_mypy():
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    assert any(d.startswith("mypy") for d in dev)
