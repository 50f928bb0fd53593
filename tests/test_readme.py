"""The README's two set-up commands are the ones CI and newcomers run: keep them true.

The README is the five-minute page (what latopt does, the two set-up commands, the real-data command, a tour of
one run, where to read on); the rest lives in docs/. These tests check the facts the README and the module map
(docs/modules.md) state, not their sentences. Links and the generated CLI reference: tests/test_docs.py."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the page that holds the module map (every module and sub-package of latopt/, by its path)
MODULE_MAP_PAGE = ROOT / "docs" / "modules.md"


def _block(tag: str) -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(rf"<!-- {tag} -->\s*```\n(.*?)\n```\s*<!-- /{tag} -->", text, re.S)
    assert m, f"README.md has no {tag} block"
    return m.group(1).strip()


def test_readme_has_exactly_two_setup_commands() -> None:
    main, tests = _block("main-command"), _block("test-command")
    assert len(main.splitlines()) == 1 and len(tests.splitlines()) == 1
    assert "latopt run" in main or "latopt inspect" in main
    assert "pytest" in tests


def test_readme_is_a_short_page_with_the_real_data_command_and_links_into_docs() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 200
    assert "apt-get install" in text and "dataset-fashion-mnist" in text
    assert "latopt run --config fashion_mnist" in text
    assert re.search(r"^## .*Fashion-MNIST", text, re.M), "the Fashion-MNIST paragraph has a heading of its own"
    linked = set(re.findall(r"\]\((docs/[\w.-]+\.md)(?:#[\w-]*)?\)", text))
    for page in ("guide", "cli", "modules", "results", "gpu", "development", "design", "evaluation"):
        assert f"docs/{page}.md" in linked, f"README.md does not link docs/{page}.md"


def test_ci_runs_the_readme_test_command() -> None:
    # .ci/run extracts the test-command block itself; check that the extraction yields the same line.
    script = (ROOT / ".ci" / "run").read_text()
    extract = re.search(r'test_cmd="\$\((.*)\)"', script)
    assert extract, ".ci/run no longer extracts the README's test command"
    out = subprocess.run(["bash", "-c", extract.group(1)], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == _block("test-command")


def test_readme_names_the_shipped_files_that_exist() -> None:
    # the paths README.md gives inside the package exist, and it lists every shipped config by name
    from latopt.config import SHIPPED_CONFIGS

    text = (ROOT / "README.md").read_text()
    paths = set(re.findall(r"`(latopt/[\w./-]+)`", text))
    assert {"latopt/profiles/README.md", "latopt/configs/"} <= paths
    assert [p for p in sorted(paths) if not (ROOT / p).exists()] == []
    names = sorted(p.stem for p in SHIPPED_CONFIGS.glob("*.yaml"))
    assert all(f"`{n}`" in text for n in names), names
    profiles = sorted(p.stem for p in (ROOT / "latopt" / "profiles").glob("*.yaml"))
    assert profiles and [n for n in profiles if f"`{n}`" not in text] == [], "README.md names every shipped profile"


# a name in the module map: a folder (``name/``, with ``(`` right after it when its files follow in
# parentheses), a file (``name.py``, possibly with folders before it), or a parenthesis
_MAP_TOKEN = re.compile(r"(?<![\w./-])(?:(?P<open>(?:\w+/)+)\s*\(|(?P<dir>(?:\w+/)+)(?=[\s),;:]|$)"
                        r"|(?P<file>(?:\w+/)*\w+\.py)\b)|(?P<paren>[()])")


def module_map_paths(block: str) -> tuple[set[str], set[str]]:
    """(files, folders) the module map names, as paths relative to the repository.

    The map is a list of entries: an entry starts with a path at the start of a line (``latopt/x.py`` or
    ``latopt/sub/``) and goes on over the indented lines below it. Other names in an entry are relative to
    the entry's folder (for a file entry, the folder it is in); ``sub/ (a.py, b.py)`` names a sub-folder
    and, in the parentheses right after it, its files. Other parentheses are descriptions."""
    files: set[str] = set()
    dirs: set[str] = set()
    for entry in re.split(r"\n(?=\S)", block.strip("\n")):
        head = re.match(r"latopt/(?:\w+/)*", entry)
        assert head, f"a module map entry does not start with a latopt/ path: {entry.splitlines()[0]!r}"
        folders = [head.group(0).rstrip("/")]
        for m in _MAP_TOKEN.finditer(entry):
            if m["paren"] == "(":
                folders.append(folders[-1])
            elif m["paren"] == ")":
                if len(folders) > 1:
                    folders.pop()
            else:
                name = m["open"] or m["dir"] or m["file"]
                path = (name if name.startswith("latopt/") else f"{folders[-1]}/{name}").rstrip("/")
                (files if m["file"] else dirs).add(path)
                if m["open"]:
                    folders.append(path)
    return files, dirs


def test_module_map_parser_reads_full_paths() -> None:
    block = ("latopt/cli/        the commands: run.py (all stages), __init__.py\n"
             "latopt/engine.py   the loop; data.py (tasks, -v/-q), fold/ (compose.py: algebra,\n"
             "                   span.py), layers.py; profiles/ ships the device profiles\n"
             "latopt/export/     graph.py (ONNX), engine.py (TensorRT engine)")
    files, dirs = module_map_paths(block)
    assert files == {"latopt/cli/run.py", "latopt/cli/__init__.py", "latopt/engine.py", "latopt/data.py",
                     "latopt/fold/compose.py", "latopt/fold/span.py", "latopt/layers.py", "latopt/export/graph.py",
                     "latopt/export/engine.py"}
    assert dirs == {"latopt/cli", "latopt/fold", "latopt/profiles", "latopt/export"}

def test_module_map_matches_the_package() -> None:
    # the module map (docs/modules.md) names every module of latopt/ and every sub-package (by its path in the
    # repository), and no file or folder that is gone
    text = MODULE_MAP_PAGE.read_text()
    m = re.search(r"<!-- module-map -->\s*```\n(.*?)\n```\s*<!-- /module-map -->", text, re.S)
    assert m, f"{MODULE_MAP_PAGE.relative_to(ROOT)} has no module-map block"
    named_files, named_dirs = module_map_paths(m.group(1))
    pkg = ROOT / "latopt"
    files = {p.relative_to(ROOT).as_posix() for p in pkg.rglob("*.py") if "__pycache__" not in p.parts}
    modules = {f for f in files if Path(f).name not in ("__init__.py", "__main__.py")}
    # the sub-packages, and every folder of latopt/ itself (the shipped data: configs/, profiles/)
    dirs = {Path(f).parent.as_posix() for f in files} - {"latopt"}
    dirs |= {d.relative_to(ROOT).as_posix() for d in pkg.iterdir() if d.is_dir() and d.name != "__pycache__"}
    missing = sorted(modules - named_files) + sorted(f"{d}/" for d in dirs - named_dirs)
    extra = sorted(named_files - files) + sorted(f"{d}/" for d in named_dirs - dirs - {"latopt"})
    assert not missing and not extra, (f"the module map ({MODULE_MAP_PAGE.relative_to(ROOT)}) does not match latopt/:\n  missing from the map: "
                                       f"{missing}\n  named in the map but not in latopt/: {extra}")


def test_generated_blocks_are_up_to_date() -> None:
    # every block between <!-- regenerate NAME --> markers in README.md and docs/ is what tools/regenerate.py
    # makes from the committed results (docs/evaluation.md) and, for docs/cli.md, from the parsers
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "regenerate.py"), "--check"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    pages = "".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    for name in ("seed-sweep", "seed-sweep-before", "fashion-mnist-bases", "method-table-summary",
                 "hardware-awareness-summary", "cli"):
        assert f"<!-- regenerate {name} -->" in pages, name


def test_the_seed_sweep_is_of_the_former_quickstart_and_the_page_says_so() -> None:
    """results/seed-sweep.json trained the quickstart's base when it was on digits (until 2026-12-05); the page
    that shows it must say it is of the former quickstart, not of the shipped one."""
    import json

    from latopt.config import load_config

    record = json.loads((ROOT / "results" / "seed-sweep.json").read_text())
    assert record["config"] == "quickstart" and not record["overrides"] and record["complete"]
    assert record["resolved"]["data"]["task"] == "digits" != load_config("quickstart").data.task
    page = (ROOT / "docs" / "results.md").read_text()
    section = page[page.index("## The former quickstart base"):]
    assert section.index("Until 2026-12-05 the quickstart trained on scikit-learn's digits") < \
        section.index("<!-- regenerate seed-sweep -->")


def test_the_fashion_mnist_table_is_of_the_shipped_config() -> None:
    import json

    from latopt.config import dump_config, load_config

    # the sweep of the config as shipped (round 4); the earlier rounds' sweeps (seed-sweep.json: 18 epochs,
    # seed-sweep-e30.json: 30 epochs, ImageNet strides) keep their own rows
    record = json.loads((ROOT / "results" / "fashion-mnist" / "seed-sweep-r4.json").read_text())
    assert record["config"] == "fashion_mnist" and not record["overrides"] and not record["screen"]
    now = dump_config(load_config("fashion_mnist"))
    assert now["model"].pop("weights") is None   # model.weights came after the record: unset is how it trained
    assert now["data"].pop("normalize") is None   # data.normalize too: null serves the task's own, as it trained
    # what a base is made from: the model, data and train sections (the others have changed since; no base reads them)
    assert all(record["resolved"][k] == now[k] for k in ("model", "data", "train"))
    assert sorted(r["seed"] for r in record["runs"]) == list(range(len(record["runs"])))
