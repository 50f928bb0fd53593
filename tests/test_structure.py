"""The package's structure: no import circles, stage modules free of the CLI, every module importable alone, no two
modules or top-level classes of one name, a short top level."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "latopt"


def _modules() -> dict[str, Path]:
    out = {}
    for f in sorted(PKG.rglob("*.py")):
        parts = list(f.with_suffix("").relative_to(PKG.parent).parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """latopt modules ``name`` imports anywhere in its text (function-level imports included)."""
    pkg_parts = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg_parts[: len(pkg_parts) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    # a package's __init__ importing its own submodules is not a circle
    return {m: {t for t in _imports(m, p, known) if not t.startswith(m + ".")} for m, p in mods.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_circles() -> None:
    assert _circles(_graph()) == []


def test_circle_check_can_fail() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _names_defined_twice(files: dict[str, str]) -> dict[str, list[str]]:
    """Module stems (``__init__``/``__main__`` aside) and top-level class names that more than one file defines:
    ``files`` maps a path to its source text."""
    seen: dict[str, list[str]] = {}
    for path, text in files.items():
        stem = Path(path).stem
        names = [] if stem in ("__init__", "__main__") else [f"module {stem}"]
        names += [f"class {n.name}" for n in ast.parse(text).body if isinstance(n, ast.ClassDef)]
        for n in names:
            seen.setdefault(n, []).append(path)
    return {n: paths for n, paths in seen.items() if len(paths) > 1}


def test_no_name_defined_twice() -> None:
    """One module and one class per name (docs/development.md): a reader who meets a name knows what it is."""
    files = {str(f.relative_to(PKG.parent)): f.read_text(encoding="utf-8") for f in PKG.rglob("*.py")}
    assert _names_defined_twice(files) == {}


def test_name_check_can_fail() -> None:
    files = {"p/a/engine.py": "class Block: pass", "p/b/engine.py": "x = 1", "p/c.py": "class Block:\n    pass",
             "p/a/__init__.py": "", "p/b/__init__.py": ""}
    assert _names_defined_twice(files) == {"module engine": ["p/a/engine.py", "p/b/engine.py"],
                                           "class Block": ["p/a/engine.py", "p/c.py"]}


def test_top_level_is_short() -> None:
    """At most 8 modules beside ``__init__``/``__main__`` at the top of the package: the rest lives in packages."""
    top = sorted(f.name for f in PKG.glob("*.py") if f.name not in ("__init__.py", "__main__.py"))
    assert len(top) <= 8, top


def test_stages_do_not_import_the_cli() -> None:
    """Argument parsing lives in latopt.cli; the stages are plain APIs (latopt/__main__.py only calls main)."""
    bad = {m: sorted(t for t in deps if t == "latopt.cli" or t.startswith("latopt.cli."))
           for m, deps in _graph().items() if not m.startswith("latopt.cli") and m != "latopt.__main__"}
    assert {m: d for m, d in bad.items() if d} == {}
    for m, path in _modules().items():
        if not m.startswith("latopt.cli") and m != "latopt.runtime.cli":  # the deploy runner's own command line
            assert "argparse" not in path.read_text(), f"{m} uses argparse; parsing belongs in latopt/cli/"


@pytest.mark.slow
def test_every_module_imports_on_its_own() -> None:
    """Each module imported first (latopt's own modules unloaded in between): no hidden import-order needs.
    The modules are shared out over two interpreters that run at once (the test's time halves on 2 cores)."""
    names = [m for m in _modules() if m != "latopt.__main__"]
    code = ("import importlib, sys\n"
            "bad = []\nfor name in sys.argv[1:]:\n"
            "    for k in [k for k in sys.modules if k == 'latopt' or k.startswith('latopt.')]:\n"
            "        del sys.modules[k]\n"
            "    try:\n        importlib.import_module(name)\n"
            "    except Exception as e:\n        bad.append(f'{name}: {type(e).__name__}: {e}')\n"
            "print('\\n'.join(bad))\nsys.exit(1 if bad else 0)\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, *names[i::2]], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert sum(len(names[i::2]) for i in range(2)) == len(names)
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, out + err[-2000:]


def test_help_does_not_import_the_training_stack() -> None:
    """`latopt --help` stays fast: the command modules import their stage when the command runs."""
    code = ("import sys\nfrom latopt.cli import build_parser\nbuild_parser()\n"
            "print(sorted(m for m in ('torch', 'optuna', 'onnx', 'onnxruntime', 'pydantic', 'timm') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
