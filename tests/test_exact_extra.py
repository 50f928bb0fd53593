"""The exact tools are an extra (`pip install 'latopt[exact]'`, which brings highspy): latopt and its other
commands work without it, and the exact commands say in one line what to install (exit 2)."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import latopt.exact
from latopt.errors import LatoptError

ROOT = Path(__file__).resolve().parents[1]
EXACT_COMMANDS = (["train-mlp"], ["compress", "nope.pt"], ["regions", "nope.pt"], ["shallow", "nope.pt"])

# run first in a fresh interpreter: imports of BLOCKED fail as if the packages were not installed; ASKED records them
BLOCKER = """
import sys
ASKED = []
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            ASKED.append(name)
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Blocker())
from latopt.cli import main
"""


def _run(blocked: tuple[str, ...], body: str) -> subprocess.CompletedProcess[str]:
    code = f"BLOCKED = {blocked!r}\n{BLOCKER}\n{body}"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_without_highspy_and_scipy_latopt_imports_and_exact_commands_say_what_to_install() -> None:
    r = _run(("highspy", "scipy"), "import latopt, latopt.exact\n"
             f"print([main(argv) for argv in {EXACT_COMMANDS!r}])\n"
             "try:\n    latopt.exact.compress\nexcept ImportError as e:\n"
             "    print(isinstance(e, latopt.LatoptError), e)\n")
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout.splitlines()
    assert out[0] == "[2, 2, 2, 2]", r.stdout + r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == len(EXACT_COMMANDS), r.stderr     # one line per command
    for argv, line in zip(EXACT_COMMANDS, lines, strict=True):
        assert f"latopt {argv[0]} " in line and "pip install 'latopt[exact]'" in line, line
    assert out[1].startswith("True latopt.exact.compress ") and "pip install 'latopt[exact]'" in out[1]


@pytest.mark.slow   # imports the whole API (torch, timm, ONNX) and builds a model in a fresh interpreter
def test_without_highspy_everything_else_works_and_never_asks_for_it() -> None:
    # scipy is a core dependency (the search imports it; scikit-learn needs it): the extra adds highspy only
    r = _run(("highspy",), "import latopt\n"
             "[getattr(latopt, n) for n in latopt.__all__]\n"
             "rc = main(['inspect', 'mobilenetv2_035'])\n"
             "print('inspect', rc, ASKED)\n"
             "print('compress', main(['compress', 'nope.pt']), ASKED)\n")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "inspect 0 []" in r.stdout.splitlines(), r.stdout[-2000:] + r.stderr[-2000:]
    assert "compress 2 ['highspy']" in r.stdout.splitlines(), r.stdout[-2000:]
    assert "pip install 'latopt[exact]'" in r.stderr.splitlines()[-1]


def test_only_latopt_exact_imports_the_extra() -> None:
    found = []
    for path in sorted((ROOT / "latopt").rglob("*.py")):
        if "exact" in path.relative_to(ROOT / "latopt").parts[:1]:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.partition(".")[0] in latopt.exact.EXTRA_MODULES]
    assert found == []


def test_the_extra_is_declared_where_pip_reads_it() -> None:
    tomllib = pytest.importorskip("tomllib")   # Python >= 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    name = lambda req: re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0]   # noqa: E731
    assert [name(d) for d in project["optional-dependencies"]["exact"]] == list(latopt.exact.EXTRA_MODULES)
    assert not set(latopt.exact.EXTRA_MODULES) & {name(d) for d in project["dependencies"]}
    assert "latopt[exact]" in project["optional-dependencies"]["dev"]   # the test suite needs it


def test_the_lazy_package_gives_each_module_s_own_objects() -> None:
    assert sorted(latopt.exact.__all__) == sorted(latopt.exact._API)
    for name, module in latopt.exact._API.items():
        assert getattr(latopt.exact, name) is getattr(importlib.import_module(f"latopt.exact.{module}"), name)
    with pytest.raises(AttributeError):
        latopt.exact.nothing_here  # noqa: B018
    assert issubclass(latopt.exact.MissingExtra, LatoptError) and issubclass(latopt.exact.MissingExtra, ImportError)
