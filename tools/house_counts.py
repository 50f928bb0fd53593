#!/usr/bin/env python
"""Figures of how cheap the code is to change, counted with ``ast`` over a package (``latopt/`` by default):
string-key subscripts (``d["key"]``) and ``.get("key")`` calls (dicts read by key, which a type checker cannot
follow), the largest parameter lists, the string constants equal to a fold variant's name (whatever they mean
there: a plan's value, a LUT key, a comparison), and lines.

    python tools/house_counts.py [latopt] [--top 10]

``--by-file`` lists the string-key subscripts per file (where dicts are still read by key). ``--handoffs`` lists
the functions that hand a record-like dict (their return annotation names ``dict[str, Any]``, ``dict[str, object]``,
a bare ``dict`` or ``Mapping[str, Any]``) to another module of the package that imports them: the places where one
stage would read another's dict by key.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import Counter
from pathlib import Path

VARIANT_NAMES = {"full", "expand_dw", "dw_project", "pw", "drop"}


def counts(root: Path) -> dict[str, object]:
    subs: Counter[str] = Counter()
    gets: Counter[str] = Counter()
    variants = 0
    params: list[tuple[int, str]] = []
    lines = 0
    files = sorted(root.rglob("*.py"))
    for f in files:
        text = f.read_text()
        lines += text.count("\n")
        tree = ast.parse(text)
        rel = str(f.relative_to(root.parent))
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                    and isinstance(node.slice.value, str):
                subs[rel] += 1
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                gets[rel] += 1
            elif isinstance(node, ast.Constant) and node.value in VARIANT_NAMES:
                variants += 1
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                a = node.args
                n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) - (1 if a.args and a.args[0].arg in
                                                                             ("self", "cls") else 0)
                params.append((n, f"{rel}:{node.lineno} {node.name}"))
            elif isinstance(node, ast.ClassDef):
                fields = [s for s in node.body if isinstance(s, ast.AnnAssign)]
                def named(d: ast.expr) -> str:   # @dataclass, @dataclass(...), @dataclasses.dataclass
                    d = d.func if isinstance(d, ast.Call) else d
                    return d.id if isinstance(d, ast.Name) else d.attr if isinstance(d, ast.Attribute) else ""

                if any(named(d) == "dataclass" for d in node.decorator_list):
                    params.append((len(fields), f"{rel}:{node.lineno} {node.name} (dataclass fields)"))
    return {"files": len(files), "lines": lines, "str_subscripts": sum(subs.values()), "get_calls": sum(gets.values()),
            "variant_literals": variants, "params": sorted(params, reverse=True), "by_file": subs}


RECORD_DICT = re.compile(r"dict\[str, (Any|object)\]|Mapping\[str, (Any|object)\]|(?<![\w.\[])dict(?![\w\[])")


def handoffs(root: Path) -> list[str]:
    """``module.function -> importing modules`` for every function that returns a record-like dict and is imported
    by another module of the package (see the module docstring)."""
    pkg = root.name
    defs: dict[tuple[str, str], str] = {}       # (module, function) -> its return annotation
    imports: dict[tuple[str, str], set[str]] = {}
    for f in sorted(root.rglob("*.py")):
        parts = list(f.with_suffix("").relative_to(root.parent).parts)
        mod = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(f.read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.returns is not None:
                ret = ast.unparse(node.returns)
                if RECORD_DICT.search(ret):
                    defs[(mod, node.name)] = ret
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(pkg):
                for a in node.names:
                    imports.setdefault((node.module, a.name), set()).add(mod)
    out = []
    for (mod, name), ret in sorted(defs.items()):
        users = sorted(u for (m, n), us in imports.items() if n == name and (m == mod or mod.startswith(m + "."))
                       for u in us if u != mod and not u.startswith(mod + "."))
        if users:
            out.append(f"{mod}.{name} -> {ret}: imported by {', '.join(sorted(set(users)))}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", default="latopt")
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--by-file", action="store_true")
    ap.add_argument("--handoffs", action="store_true")
    a = ap.parse_args(argv)
    root = Path(a.root)
    if not root.is_dir():
        print(f"house_counts: {root} is not a directory; give a package folder (latopt, tools)", file=sys.stderr)
        return 2
    c = counts(root)
    print(f"{root}: {c['files']} files, {c['lines']} lines; {c['str_subscripts']} string-key subscripts, "
          f"{c['get_calls']} .get(\"key\") calls, {c['variant_literals']} fold-variant literals")
    print("largest parameter lists:")
    for n, where in c["params"][: a.top]:  # type: ignore[index]
        print(f"  {n:3d}  {where}")
    if a.handoffs:
        found = handoffs(root)
        print(f"functions handing a record-like dict to another module: {len(found)}")
        for line in found:
            print(f"  {line}")
    if a.by_file:
        for f, n in c["by_file"].most_common():  # type: ignore[attr-defined]
            print(f"  {n:4d}  {f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
