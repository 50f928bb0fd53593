"""The public Python API (`import latopt`, docs/api.md): a small list of re-exports, imported lazily, documented
with an example that runs as written."""

from __future__ import annotations

import importlib
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import latopt

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "api.md"


def _example() -> str:
    m = re.search(r"<!-- api-example -->\n```python\n(.*?)```\n<!-- /api-example -->", DOC.read_text(), re.S)
    assert m, "docs/api.md has no api-example block"
    return m.group(1)


def test_all_is_the_api_and_each_name_is_its_home_object() -> None:
    assert latopt.__all__ == ["__version__", *latopt._API]
    assert len(set(latopt.__all__)) == len(latopt.__all__)
    for name, (module, attr) in latopt._API.items():
        home = getattr(importlib.import_module(module), attr)
        public = getattr(latopt, name)   # a re-export, not a copy: a call's arguments checked first (argtypes)
        assert (public if isinstance(home, type) else public.__wrapped__) is home, name
        assert callable(home) and name in dir(latopt)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        latopt.nothing_here  # noqa: B018
    with pytest.raises(ImportError):
        from latopt import nothing_here  # noqa: F401
    # a lazy name never hides a sub-module of the package (``latopt.export`` is the export package)
    assert not {n for n in latopt._API if (ROOT / "latopt" / n).is_dir() or (ROOT / "latopt" / f"{n}.py").is_file()}


def test_import_latopt_imports_nothing_else() -> None:
    code = ("import sys\nbefore = set(sys.modules)\nimport latopt\n"
            "print(sorted(m for m in set(sys.modules) - before if m != 'latopt'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    loaded = eval(r.stdout)
    assert not [m for m in loaded if m.startswith("latopt.")], loaded
    assert not {"torch", "numpy", "pydantic", "timm", "onnx", "yaml"} & set(loaded), loaded


def test_the_doc_table_names_every_call_with_its_real_parameters() -> None:
    text = DOC.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    named: set[str] = set()
    for row in rows:
        for call in re.findall(r"`([A-Za-z_]+)(?:\(([^)`]*)\))?`", row.split("|")[1]):
            name, args = call
            assert name in latopt.__all__, f"docs/api.md names {name}, which latopt.__all__ does not have"
            named.add(name)
            params = inspect.signature(getattr(latopt, name)).parameters
            for arg in filter(None, (a.split("=")[0].strip() for a in args.split(","))):
                assert arg in params, f"docs/api.md: {name}() has no parameter {arg!r} (it has {list(params)})"
    assert named == set(latopt.__all__) - {"__version__"}


@pytest.mark.slow   # trains, profiles, folds and exports a tiny network: about half a minute of CPU time
def test_the_documented_example_runs(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-c", _example()], capture_output=True, text=True, timeout=900,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert re.search(r"^folded blocks .*, measured speed-up \d+\.\d\dx$", r.stdout, re.M), r.stdout
    demo = tmp_path / "api-demo"
    exported = json.loads((demo / "export" / "export.json").read_text())
    fold_report = json.loads((demo / "fold" / "report.json").read_text())
    assert exported["accuracy_gate"] is True and exported["folded"] == fold_report["folded"]
    assert (demo / "export" / "model.onnx").is_file() and (demo / "lut.json").is_file()
