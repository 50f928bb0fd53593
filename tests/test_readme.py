"""The README's two set-up commands are the ones CI and newcomers run: keep them true."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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


def test_module_map_matches_the_package() -> None:
    # README's "How it works" names every module of latopt/ and every sub-package, and no file that is gone
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- module-map -->\s*```\n(.*?)\n```\s*<!-- /module-map -->", text, re.S)
    assert m, "README.md has no module-map block"
    block = m.group(1)
    pkg = ROOT / "latopt"
    files = [p.relative_to(pkg) for p in pkg.rglob("*.py") if "__pycache__" not in p.parts]
    named = set(re.findall(r"\b(\w+\.py)\b", block))
    modules = {f.name for f in files if f.name not in ("__init__.py", "__main__.py")}
    assert sorted(modules - named) == [], "modules missing from README's module map"
    assert sorted(named - {f.name for f in files}) == [], "README's module map names files that do not exist"
    dirs = {f.parent.as_posix() for f in files if f.parent.as_posix() != "."}
    dirs |= {d.name for d in pkg.iterdir() if d.is_dir() and d.name != "__pycache__"}
    assert sorted(d for d in dirs if f"{d.split('/')[-1]}/" not in block) == [], "packages missing from the map"


def test_generated_blocks_are_up_to_date() -> None:
    # every block between <!-- regenerate NAME --> markers in README.md and docs/ is what tools/regenerate.py
    # makes from the committed results (docs/evaluation.md)
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "regenerate.py"), "--check"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    text = (ROOT / "README.md").read_text()
    assert "<!-- regenerate seed-sweep -->" in text and "<!-- regenerate seed-sweep-before -->" in text


def test_the_seed_sweep_is_of_the_shipped_quickstart() -> None:
    import json

    from latopt.config import dump_config, load_config

    record = json.loads((ROOT / "results" / "seed-sweep.json").read_text())
    assert record["config"] == "quickstart" and not record["overrides"] and record["complete"]
    assert record["resolved"] == dump_config(load_config("quickstart"))
