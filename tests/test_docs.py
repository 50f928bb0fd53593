"""The documentation's links resolve, and docs/cli.md is the reference the parsers make today.

docs/cli.md's reference is the ``cli`` block of ``tools/regenerate.py`` (``python tools/regenerate.py`` rewrites it,
``--check`` fails when it is stale); it is laid out at a fixed width, so it does not depend on the terminal."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from tools import regenerate

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,}).*?^ {0,3}\1[ \t]*$", re.M | re.S)
_CODE = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)


def _prose(text: str) -> str:
    """``text`` without its code fences, indented code blocks and inline code (where ``[x](y)`` is no link)."""
    text = _FENCE.sub("", text)
    text = re.sub(r"(?:^(?: {4}|\t).*\n?)+", lambda m: "" if m.start() == 0 or text[m.start() - 2:m.start()]
                  in ("\n\n",) else m.group(0), text, flags=re.M)
    return _CODE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text in lower case, without punctuation, spaces as ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", _FENCE.sub("", page.read_text()), re.M):
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def links(page: Path) -> list[str]:
    return [a or b for a, b in _LINK.findall(_prose(page.read_text()))]


def test_the_link_finder_reads_inline_and_reference_links_but_not_code() -> None:
    text = ("see [a](docs/a.md) and [b](b.md#sec \"title\"), `[no](code.md)`\n\n[ref]: c.md\n\n"
            "```\n[no](fenced.md)\n```\n")
    assert _LINK.findall(_prose(text)) == [("docs/a.md", ""), ("b.md#sec", ""), ("", "c.md")]
    assert slug("`latopt search` — the accuracy/latency Pareto front") == "latopt-search--the-accuracylatency-pareto-front"
    assert slug("Real data: Fashion-MNIST") == "real-data-fashion-mnist"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_points_to_an_existing_file(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):   # http:, https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {dest.relative_to(ROOT)})")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_readme_links_its_pages() -> None:
    assert links(ROOT / "README.md"), "README.md has no links"


def _cli_block() -> str:
    text = (ROOT / "docs" / "cli.md").read_text()
    m = re.search(r"^<!-- regenerate cli -->\n(.*?)^<!-- /regenerate -->$", text, re.S | re.M)
    assert m, "docs/cli.md has no <!-- regenerate cli --> block"
    return m.group(1)


def test_cli_reference_is_current() -> None:
    # what `python tools/regenerate.py` writes into docs/cli.md from the parsers as they are now
    assert _cli_block() == regenerate.cli_reference(), "docs/cli.md is stale: run python tools/regenerate.py"


def test_cli_reference_names_every_command_and_option() -> None:
    from latopt.cli import build_parser

    block = _cli_block()
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert sub.choices
    for name, parser in sub.choices.items():
        m = re.search(rf"^## `latopt {re.escape(name)}`\n(.*?)(?=^## |\Z)", block, re.S | re.M)
        assert m, f"docs/cli.md has no section for latopt {name}"
        assert f"usage: latopt {name}" in m.group(1)
        for action in parser._actions:
            if action.help != argparse.SUPPRESS:
                for opt in action.option_strings:
                    assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", m.group(1)), (name, opt)


def test_cli_reference_does_not_depend_on_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    made = regenerate.cli_reference()
    for columns in ("20", "300"):
        monkeypatch.setenv("COLUMNS", columns)
        assert regenerate.cli_reference() == made
    assert max(len(line) for line in made.splitlines() if not line.startswith("#")) <= regenerate.CLI_WIDTH


def test_regenerate_check_names_a_stale_cli_reference() -> None:
    page = ROOT / "docs" / "cli.md"
    text = page.read_text()
    stale = text.replace(_cli_block(), "usage: latopt (an older reference)\n")
    assert regenerate.regenerate(text, "docs/cli.md")[1] == []
    new, changed = regenerate.regenerate(stale, "docs/cli.md")
    assert changed == ["docs/cli.md: cli"] and new == text
