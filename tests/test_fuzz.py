"""The fuzz suite's CI subset: hostile checkpoints, LUTs, configs, device profiles, study databases, MLPs,
option values and outputs (``tools/surface.py fuzz`` runs every mutation against every command).

Each case must end with exit 0 and a correct result, or with one ``latopt: error:`` line and exit 2/3;
no traceback, nothing left behind, no device replaced by a file, no pickled code run. A test runs a
fixed sample of the harness' (mutation, command) pairs, their contents drawn by hypothesis
(derandomized), in-process on one tiny trained/folded ``mobilenetv2_035`` shared by the session, and
reports every failing case at once.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import surface  # noqa: E402

# Cheap consumers only (each accepted case costs at most a tiny fold); `run` is left to the harness.
CHEAP = ("export", "export --fold all", "export --fold auto --lut", "train", "train --checkpoint", "search",
         "search --base", "search --lut", "search (resume)", "search --show", "profile", "inspect", "regions",
         "shallow", "compress", "train-mlp", "fold --lut")


@pytest.fixture(scope="module")
def fx(tmp_path_factory: pytest.TempPathFactory) -> surface.Fixtures:
    return surface.Fixtures(tmp_path_factory.getbasetemp() / "surface-fixtures", in_process=True).build(log=print)


def assert_clean(outcomes: list[surface.Outcome]) -> None:
    assert outcomes
    bad = [o for o in outcomes if not o.clean]
    assert not bad, f"{len(bad)} of {len(outcomes)} cases failed:\n" + "\n".join(o.describe() for o in bad)


@pytest.mark.parametrize(("kind", "n"), [("checkpoint", 10), ("lut", 6), ("config", 6), ("device", 5),
                                         ("study", 5), ("mlp", 5), ("options", 10)])
def test_hostile_input_is_one_line_or_a_correct_result(fx: surface.Fixtures, tmp_path: Path, kind: str,
                                                       n: int) -> None:
    assert_clean(surface.fuzz(fx, tmp_path, n, seed=0, in_process=True, kinds=(kind,), commands=CHEAP,
                              derandomize=True, log=print))


def test_outputs_that_are_devices_and_a_full_disk(fx: surface.Fixtures, tmp_path: Path) -> None:
    # subprocesses: a file-size limit (the full disk) must not apply to the test process
    assert_clean(surface.fuzz(fx, tmp_path, 2, seed=0, kinds=("env",), commands=("inspect",), derandomize=True,
                              log=print))


def test_a_pickle_global_would_be_caught(tmp_path: Path) -> None:
    """The harness' pickle payload really runs code when a full unpickler loads it (so 'no marker' means
    no pickled code ran), and weights_only loading refuses it."""
    import pickle

    import torch

    marker = tmp_path / "ran"
    payload = pickle.dumps({"x": surface.RunsOnUnpickle(marker)}, protocol=2)
    pickle.loads(payload)
    assert marker.exists()
    marker.unlink()
    torch.save({"x": surface.RunsOnUnpickle(marker)}, tmp_path / "evil.pt")
    with pytest.raises(pickle.UnpicklingError):
        torch.load(tmp_path / "evil.pt", weights_only=True)
    assert not marker.exists()


def test_the_judge_flags_each_failure_kind(tmp_path: Path) -> None:
    """The classification the whole suite rests on: each rule fires on a made-up run and a clean run passes."""
    jail = tmp_path / "jail"
    cwd = jail / "j1" / "j2"
    (cwd / "out").mkdir(parents=True)

    def kinds(rc: int | None, err: str = "", *, refuse: bool = False, new: dict[str, str] | None = None,
              old: dict[str, str] | None = None) -> set[str]:
        case = surface.Case("t", "m", "c", [], cwd, jail, refuse)
        before = {**surface.listing(jail), **(old or {})}
        after = {**before, **(new or {})}
        return {k for k, _ in surface.judge(case, surface.Run(rc, "", err, 0.0), before, after)}

    assert kinds(2, "latopt: error: bad\n") == set()
    assert kinds(2, "usage: latopt x\nlatopt x: error: argument --n: invalid int value\n") == set()
    assert kinds(3, "[export] gate ...\nlatopt: error: numeric gate failed\n") == set()
    assert kinds(0, new={"j1/j2/out/x.json": "f"}) == set()
    assert kinds(1, "Traceback (most recent call last):\n  File x\nValueError: y\n") == {"traceback"}
    assert kinds(-11) == {"wrong exit code"}                                       # a crash
    assert kinds(0, refuse=True) == {"wrong exit code"}
    assert kinds(2, "UserWarning: x\nlatopt: error: bad\n") == {"multi-line error"}
    assert kinds(2, "latopt: error: bad\n", new={"j1/j2/out/partial": "f"}) == {"leftover files"}
    assert kinds(0, new={"j1/x": "f"}) == {"leftover files"}                      # outside the outputs
    assert kinds(0, new={"j1/j2/out/.x.pt.abc123.tmp": "f"}) == {"leftover files"}  # a hidden temp file
    assert kinds(0, new={"j1/j2/runs/.base.lock": "f"}) == set()                  # a lock file is no temp file
    assert kinds(0, old={"j1/j2/out/dev": "c"}, new={"j1/j2/out/dev": "f"}) == {"device replaced"}
    assert kinds(None) == {"timeout"}
    (jail / "PICKLE_RAN").touch()
    assert "pickle executed" in kinds(2, "latopt: error: bad\n")
