#!/usr/bin/env python
"""Figures of how cheap the code is to change, counted with ``ast`` over a package (``latopt/`` by default):
string-key subscripts (``d["key"]``) and ``.get("key")`` calls (dicts read by key, which a type checker cannot
follow), the largest parameter lists, the string constants equal to a fold variant's name (whatever they mean
there: a plan's value, a LUT key, a comparison), and lines.

    python tools/house_counts.py [latopt] [--top 10]

``--by-file`` lists the string-key subscripts per file (where dicts are still read by key).
"""

from __future__ import annotations

import argparse
import ast
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", default="latopt")
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--by-file", action="store_true")
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
    if a.by_file:
        for f, n in c["by_file"].most_common():  # type: ignore[attr-defined]
            print(f"  {n:4d}  {f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
