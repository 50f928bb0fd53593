"""Regenerate the figures of README.md and docs/*.md from the committed raw results (docs/evaluation.md §5).

A generated block is the text between ``<!-- regenerate NAME -->`` and ``<!-- /regenerate -->``; NAME picks
its generator below, which reads only files under ``results/`` (the one exception, ``cli``, reads the ``latopt``
command line's argparse parsers: docs/cli.md). Nothing between the markers is typed by hand.

    python tools/regenerate.py            # rewrite every generated block
    python tools/regenerate.py --check    # exit 1 naming the blocks that would change (CI: tests/test_readme.py)

Each marker is a line of its own. Only the lines between a block's markers are ever rewritten, and every page is
read and checked before any is written: a marker without its partner, blocks nested or crossed, a malformed
marker, a marker inside a hand-written code fence, a block no generator makes, or results that cannot be read
(missing, truncated, of another shape) is one line, exit 2, and nothing changed on disk.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import stat
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):   # run as a script: the checkout's root, for tools.<module>
    sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "results"

from latopt.errors import LatoptError, first_line, one_line  # noqa: E402 - after the checkout is on sys.path


def _seed_table(name: str) -> Callable[[], str]:
    def make() -> str:
        from tools import seed_sweep

        return seed_sweep.summarize(json.loads((RESULTS / name).read_text())["runs"])
    return make


def _tool(module: str, render: str, results: str) -> Callable[[], str]:
    """A block made by ``tools/<module>.py``'s ``render`` function from ``results/<results>``."""
    def make() -> str:
        return getattr(importlib.import_module(f"tools.{module}"), render)(RESULTS / results)
    return make


def _main_run() -> str:
    """README's summary example: the summary ``latopt run`` printed in ``results/main-run.txt`` (its header comment
    says which commit, machine and wall time), as a code block."""
    lines = (RESULTS / "main-run.txt").read_text().splitlines()
    head = [line[2:] for line in lines if line.startswith("# ")]
    start = next(i for i, line in enumerate(lines) if line.startswith("latopt run — "))
    end = next(i for i, line in enumerate(lines) if line.startswith("finished in ") and i > start)
    return ("From `results/main-run.txt` (" + " ".join(head).rstrip(".") + "):\n\n```\n"
            + "\n".join(lines[start:end + 1]) + "\n```\n")


def _compress_report(results: str) -> Callable[[], str]:
    """One sentence from a ``latopt compress`` report (``results/<results>``): the network before and after, the
    units removed, the MILP solves, the time, the test predictions changed and the float64 check."""
    def make() -> str:
        r = json.loads((RESULTS / results).read_text())
        c, v, a, st = r["compression"], r["verification"], r["accuracy"], r["stability"]["total"]
        return (f"On {a['data']}, {'-'.join(map(str, c['layers_before']))} with test accuracy {100 * a['before']:.2f} %: "
                f"`compress` removed {c['units_removed']} of its {c['hidden_units_before']} hidden units "
                f"({'-'.join(map(str, c['layers_after']))}; {st['milp_solves']} MILP solves, {r['seconds']['total']:.1f} s "
                f"in all), {a['prediction_changes']} of the {a['test_points']:,} test predictions changed "
                f"({100 * a['after']:.2f} % after), largest float64 difference {v['max_abs_float64']:g} on "
                f"{v['points']:,} points (`results/{Path(results).parent}/`, which has the commands).")
    return make


# The CLI reference (docs/cli.md), made from the parsers of ``latopt.cli.build_parser`` by its own layout, not
# argparse's help formatter: that one wraps to the terminal's width (COLUMNS) and its layout changes between Python
# versions, and the page must be the same wherever it is made.
CLI_WIDTH = 100


def _wrap(words: list[str], first: str, indent: int) -> list[str]:
    """``words`` (each kept whole) after ``first``, filled to :data:`CLI_WIDTH`; later lines indented by ``indent``."""
    lines, line = [], first
    for w in words:
        if line.strip() and len(line) + 1 + len(w) > CLI_WIDTH:
            lines.append(line)
            line = " " * indent + w
        else:
            line = f"{line} {w}" if line.strip() else line + w
    return [*lines, line]


def _metavar(a: argparse.Action) -> str:
    if a.metavar is not None:
        return a.metavar if isinstance(a.metavar, str) else " ".join(a.metavar)
    if a.choices is not None:
        return "{" + ",".join(map(str, a.choices)) + "}"
    return a.dest if not a.option_strings else a.dest.upper()


def _args(a: argparse.Action) -> str:
    """What follows an option (or stands for a positional) in the usage: ``FILE``, ``[N]``, ``X [X ...]``."""
    m = _metavar(a)
    return {0: "", None: m, "?": f"[{m}]", "*": f"[{m} ...]", "+": f"{m} [{m} ...]"}.get(
        a.nargs, " ".join([m] * a.nargs) if isinstance(a.nargs, int) else m)


def _usage(prog: str, p: argparse.ArgumentParser) -> list[str]:
    shown = [a for a in p._actions if a.help != argparse.SUPPRESS]
    groups = {id(a): g for g in p._mutually_exclusive_groups for a in g._group_actions}
    words, done = [], set()
    for a in [a for a in shown if a.option_strings] + [a for a in shown if not a.option_strings]:
        if id(a) in done:
            continue
        if isinstance(a, argparse._SubParsersAction):
            words.append("COMMAND ...")
            continue
        group = [x for x in groups[id(a)]._group_actions if x in shown] if id(a) in groups else [a]
        parts = []
        for x in group:
            done.add(id(x))
            parts.append(" ".join(filter(None, [x.option_strings[0], _args(x)])) if x.option_strings else _args(x))
        text = " | ".join(parts)
        required = all(x.required for x in group) if len(group) == 1 else groups[id(a)].required
        words.append(text if required or not a.option_strings else f"[{text}]")
    return _wrap(words, f"usage: {prog}", len(f"usage: {prog} "))


def _help(a: argparse.Action, prog: str) -> str:
    text = a.help or ""
    if "%" in text:   # argparse's own expansion: %(default)s, %(prog)s, %%
        params = {k: v for k, v in vars(a).items() if v is not argparse.SUPPRESS}
        params["prog"] = prog
        if a.choices is not None:
            params["choices"] = ", ".join(map(str, a.choices))
        text = text % params
    notes = []
    if a.required and a.option_strings:
        notes.append("required")
    if (a.nargs != 0 and a.default not in (None, False, [], argparse.SUPPRESS)
            and "default" not in text.lower()):
        notes.append(f"default: {a.default}")
    return " ".join(filter(None, [text, f"({'; '.join(notes)})" if notes else ""]))


def _command_text(prog: str, p: argparse.ArgumentParser) -> list[str]:
    out = _usage(prog, p)
    if p.description:
        out += ["", *_wrap(p.description.split(), "", 0)]
    for title, positional in (("positional arguments:", True), ("options:", False)):
        actions = [a for a in p._actions if a.help != argparse.SUPPRESS and bool(a.option_strings) != positional
                   and not isinstance(a, argparse._SubParsersAction)]
        if not actions:
            continue
        out += ["", title]
        for a in actions:
            out.append("  " + (", ".join(a.option_strings) + (f" {_args(a)}" if a.nargs != 0 else "")
                               if a.option_strings else _args(a)))
            if _help(a, prog):
                out += _wrap(_help(a, prog).split(), "      ", 6)
    return out


def cli_reference() -> str:
    """docs/cli.md's generated block: ``latopt``'s usage and commands, then each command's usage and options."""
    from latopt.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    out = ["```", *_command_text(parser.prog, parser), "", "commands:"]
    for name in sub.choices:
        out += _wrap(helps[name].split(), f"  {name:<10}", 13)
    out.append("```")
    for name, p in sub.choices.items():
        out += ["", f"## `latopt {name}`", "", helps[name], "", "```", *_command_text(f"latopt {name}", p), "```"]
    return "\n".join(line.rstrip() for line in out) + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "seed-sweep": _seed_table("seed-sweep.json"),
    "seed-sweep-before": _seed_table("seed-sweep-before.json"),
    "fashion-mnist-bases": _tool("seed_sweep", "render_bases", "fashion-mnist"),
    "bench-train": _tool("bench_train", "render", "bench-train/fashion-mnist.json"),
    "exact-fashion-mnist": _compress_report("exact-fashion-mnist/report.json"),
    "method-table": _tool("bench_methods", "render_doc", "method-table"),
    "method-table-summary": _tool("bench_methods", "render_summary", "method-table"),
    "pruning": _tool("bench_methods", "render_doc", "pruning"),
    "hardware-awareness": _tool("bench_devices", "render", "hardware-awareness"),
    "hardware-awareness-summary": _tool("bench_devices", "render_summary", "hardware-awareness"),
    "hardware-awareness-e1": _tool("bench_costs", "render_e1", "hardware-awareness"),
    "hardware-awareness-e2": _tool("bench_costs", "render_e2", "hardware-awareness"),
    "promises-budget": _tool("bench_promises", "render_budget", "promises"),
    "promises-accuracy": _tool("bench_promises", "render_accuracy", "promises"),
    "main-job": _tool("bench_promises", "render_main_job", "main-job"),
    "main-job-run-1": _tool("bench_promises", "render_main_job", "main-job/run-1"),
    "main-run": _main_run,
    "transfer": _tool("bench_transfer", "render", "transfer"),
    "rivals": _tool("bench_rivals", "render", "rivals"),
    "rivals-summary": _tool("bench_rivals", "render_summary", "rivals"),
    "compatibility": _tool("compat", "render", "compatibility/compat.json"),
    "resnet20-fold": _tool("depth_table", "render_depth", "resnet-fold/resnet20"),
    "resnet32-fold": _tool("depth_table", "render_depth", "resnet-fold/resnet32"),
    "cli": cli_reference,
}


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


# A marker is a line of its own: ``<!-- regenerate NAME -->`` starts a block, ``<!-- /regenerate -->`` (or
# ``<!-- /regenerate NAME -->``, naming the block it ends) ends it. ``<!-- regenerate -->`` without a name starts a
# block that no generator makes: it is paired like the others and left as it is. Any other line that begins like a
# marker is a mistake, and so is a marker inside a hand-written code fence (an example there, or an unclosed fence
# hiding a real block): both are refused rather than guessed at.
START = re.compile(r"<!-- regenerate(?: (?P<name>[a-z0-9-]+))? -->")
END = re.compile(r"<!-- /regenerate(?: (?P<name>[a-z0-9-]+))? -->")
MARKER_LIKE = re.compile(r"<!--\s*/?\s*regenerate\b", re.I)
FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")            # opens a code fence (CommonMark)
FENCE_END = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*")  # closes one opened with the same character, as long or longer
LINE = re.compile(r"[^\n]*\n|[^\n]+")
MARKERS = "<!-- regenerate NAME --> ... <!-- /regenerate -->"
# what a generator raises on results it cannot read (missing, truncated, not UTF-8, of another shape)
RESULT_ERRORS = (OSError, ValueError, LookupError, TypeError, AttributeError)


class PageError(Exception):
    """A page or the results behind it that the rewrite cannot trust: one line, exit 2, nothing written."""


@dataclass(frozen=True)
class Block:
    name: str | None   # None: a block without a name, kept as it is
    start: int         # the index of its start marker line
    end: int           # the index of its end marker line


def parse(text: str, where: str) -> tuple[list[str], list[Block]]:
    """The lines of ``text`` (each with its line ending) and its blocks; :class:`PageError` for a marker that is
    unpaired, nested, crossed, malformed or inside a hand-written code fence."""
    lines = LINE.findall(text)
    blocks: list[Block] = []
    open_: tuple[str | None, int] | None = None   # the block being read: its name and start line
    fence: tuple[str, int] | None = None          # the hand-written code fence being read: its opener and line

    def what(name: str | None) -> str:
        return f"block {name!r}" if name else "a block without a name"

    for i, line in enumerate(lines):
        s = line.strip().lstrip("\ufeff") if i == 0 else line.strip()   # a byte-order mark before the first line
        marker = MARKER_LIKE.match(s) is not None
        if open_ is None and fence is not None:   # inside a hand-written fence: text, but no marker
            f = FENCE_END.fullmatch(line.rstrip("\r\n"))
            if f and f.group(1)[0] == fence[0][0] and len(f.group(1)) >= len(fence[0]):
                fence = None
            elif marker:
                raise PageError(f"{where}:{i + 1}: a regenerate marker inside the code fence opened at line "
                                f"{fence[1] + 1} (an example there, or an unclosed fence): close the fence before "
                                "the block, or write the example in inline code")
            continue
        if not marker:
            f = FENCE.match(line) if open_ is None else None
            if f:
                fence = (f.group(1), i)
            continue
        start, end = START.fullmatch(s), END.fullmatch(s)
        if start:
            if open_ is not None:
                raise PageError(f"{where}:{i + 1}: {what(start.group('name'))} starts inside {what(open_[0])} "
                                f"(line {open_[1] + 1}), which has no end marker before it; each block is "
                                f"{MARKERS}, not nested")
            open_ = (start.group("name"), i)
        elif end:
            if open_ is None:
                raise PageError(f"{where}:{i + 1}: an end marker without a block start before it; each block is "
                                f"{MARKERS}")
            if end.group("name") is not None and end.group("name") != open_[0]:
                raise PageError(f"{where}:{i + 1}: the end marker of block {end.group('name')!r} closes "
                                f"{what(open_[0])} (line {open_[1] + 1}): the markers are crossed")
            blocks.append(Block(open_[0], open_[1], i))
            open_ = None
        else:
            raise PageError(f"{where}:{i + 1}: {s[:80]!r} is not a regenerate marker; write {MARKERS} on lines of "
                            "their own (NAME: a-z, 0-9 and -)")
    if open_ is not None:
        raise PageError(f"{where}:{open_[1] + 1}: {what(open_[0])} has no end marker <!-- /regenerate --> after it")
    return lines, blocks


def _generate(name: str, where: str, line: int) -> str:
    if name not in GENERATORS:
        raise PageError(f"{where}:{line}: block {name!r} is made by no generator; known: {', '.join(GENERATORS)}")
    try:
        return GENERATORS[name]()
    except RESULT_ERRORS as e:
        raise PageError(f"{where}:{line}: block {name!r} cannot be made from results/: {type(e).__name__}: "
                        f"{first_line(e)}") from None
    except LatoptError as e:
        raise PageError(f"{where}:{line}: block {name!r} cannot be made from results/: {first_line(e)}") from None


def _outside(lines: list[str], blocks: list[Block]) -> list[str]:
    """The lines of a page outside its generated blocks (markers included)."""
    inside = {i for b in blocks if b.name is not None for i in range(b.start + 1, b.end)}
    return [ln for i, ln in enumerate(lines) if i not in inside]


def regenerate(text: str, where: str) -> tuple[str, list[str]]:
    """``text`` with every generated block rewritten, and the names of the blocks that changed; only the lines
    between a block's markers are replaced. :class:`PageError` when the markers or the results cannot be trusted."""
    lines, blocks = parse(text, where)
    changed: list[str] = []
    out: list[str] = []
    pos = 0
    for b in blocks:
        out += lines[pos:b.start + 1]
        old = "".join(lines[b.start + 1:b.end])
        if b.name is None:
            body = old
        else:
            made = _generate(b.name, where, b.start + 1).rstrip("\n")
            nl = "\r\n" if lines[b.start].endswith("\r\n") else "\n"
            made_lines = made.split("\n")
            if any(MARKER_LIKE.match(ln.strip()) for ln in made_lines):
                raise PageError(f"{where}:{b.start + 1}: the generator of block {b.name!r} wrote a regenerate "
                                "marker, which would break the page's blocks")
            body = "".join(ln.rstrip("\r") + nl for ln in made_lines)
            if body != old:
                changed.append(f"{where}: {b.name}")
        out.append(body)
        pos = b.end
    out += lines[pos:]
    new = "".join(out)
    new_lines, new_blocks = parse(new, where)
    if _outside(new_lines, new_blocks) != _outside(lines, blocks):   # never: the text outside the blocks is kept
        raise PageError(f"{where}: the rewrite would change text outside its blocks; nothing was written")
    return new, changed


def _write(page: Path, text: str) -> None:
    """``text`` into ``page`` at once (a temporary file beside it, then renamed), the page's mode kept."""
    fd, tmp = tempfile.mkstemp(prefix=f".{page.name}.", suffix=".tmp", dir=page.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
        os.chmod(tmp, stat.S_IMODE(page.stat().st_mode))
        os.replace(tmp, page)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 when a block is out of date")
    args = ap.parse_args(argv)
    stale: list[str] = []
    todo: list[tuple[Path, str]] = []
    try:
        for page in pages():   # every page is read and checked before any is written
            where = str(page.relative_to(ROOT))
            try:
                text = page.read_bytes().decode("utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise PageError(f"{where}: cannot read it: {type(e).__name__}: {first_line(e)}") from None
            new, changed = regenerate(text, where)
            stale += changed
            if changed:
                todo.append((page, new))
        if not args.check:
            for page, new in todo:
                try:
                    _write(page, new)
                except OSError as e:
                    raise PageError(f"{page.relative_to(ROOT)}: cannot write it: {first_line(e)}") from None
    except PageError as e:
        print(f"regenerate: error: {one_line(str(e))}", file=sys.stderr)
        return 2
    for s in stale:
        print(f"{'out of date' if args.check else 'rewrote'}: {s}")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
