"""The fuzz suite's CI subset: hostile checkpoints, LUTs, configs, device profiles, study databases, MLPs,
option values and outputs (``python -m tests.harness fuzz`` runs every mutation against every command).

Each case must end with exit 0 and a correct result, or with one ``latopt: error:`` line and exit 2/3;
no traceback, nothing left behind, no device replaced by a file, no pickled code run. A test runs a
fixed sample of the harness' (mutation, command) pairs, their contents drawn by hypothesis
(derandomized), in-process on one tiny trained/folded ``mobilenetv2_035`` shared by the session, and
reports every failing case at once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import fuzz, judge
from tests.harness.files import listing
from tests.harness.fixtures import Fixtures, RunsOnUnpickle
from tests.harness.process import Run, exception_line

# A fixed sample of the harness' slots: (mutation, command[, checkpoint]) per kind, each a known way in
# or a control that must stay clean; cheap commands only (`run` is left to the harness).
CI: dict[str, list[tuple[str, ...]]] = {
    "checkpoint": [
        ("unchanged", "export", "folded"),
        ("unchanged", "export", "folded_nothing"),          # a fold that folded nothing is exported as it is
        ("tensor: values randomised", "export", "folded"),  # corrupted weights: the digest refuses them
        ("tensor: one element moved by one ulp", "search --base", "base"),
        ("meta.acc: recorded accuracy changed", "export", "folded"),
        ("arch.num_classes: wrong", "export --fold all", "base"),
        ("zip: data.pkl junk", "search --base", "base"),
        ("pickle: global in meta (marker)", "export", "folded"),
        ("file: not a checkpoint", "train --checkpoint", "base"),
        # well-formed but wrong, SHA-256 recomputed
        ("tensor: NaN/inf, SHA recomputed", "export", "folded"),
        ("tensor: NaN/inf, SHA recomputed", "train --checkpoint", "base"),
        ("meta: accuracy-gate fields removed or cut, SHA recomputed", "export", "base"),
    ],
    "lut": [
        ("unchanged", "export --fold auto --lut"),
        ("block time: negative/NaN/inf", "export --fold auto --lut"),
        ("blocks: duplicate index", "search --lut"),
        ("blocks: empty", "search --lut"),
        ("not JSON", "export --fold auto --lut"),
    ],
    "config": [
        ("unchanged", "train"),
        ("name: a path", "train"),
        ("value out of range", "train"),
        ("data.task: CIFAR batches with a pickle global (marker)", "train"),
        ("data.task: image folder with a corrupt image", "search"),
        ("not a config", "train"),
        ("yaml: a key given twice", "train"),                 # YAML's last-wins hid it
    ],
    "device": [("unchanged", "profile"), ("name: a path", "profile"), ("integer field: invalid", "export"),
               ("yaml: a key given twice", "profile")],
    "study": [("unchanged", "search (resume)"), ("rows deleted / values corrupted", "search (resume)"),
              ("random bytes", "search --show"), ("table dropped", "search (resume)")],
    "mlp": [("unchanged", "compress"), ("pickle: global as the payload (marker)", "compress"),
            ("weights: NaN/inf", "regions")],
    "options": [("export", "--samples"), ("export", "--resolution"), ("search", "--trials"), ("search", "--base"),
                ("train-mlp", "--lr"), ("inspect", "--resolution"), ("train", "--data"), ("runtime", "--output")],
}


def assert_clean(outcomes: list[judge.Outcome]) -> None:
    assert outcomes
    bad = [o for o in outcomes if not o.clean]
    assert not bad, f"{len(bad)} of {len(outcomes)} cases failed:\n" + "\n".join(o.describe() for o in bad)


@pytest.mark.slow   # the shared fixture trains, folds and exports a network
@pytest.mark.parametrize("kind", list(CI))
def test_hostile_input_is_one_line_or_a_correct_result(harness_fixtures: Fixtures, tmp_path: Path, kind: str) -> None:
    order = [(kind, *slot) for slot in CI[kind]]
    assert_clean(fuzz.run(harness_fixtures, tmp_path, None, 0, in_process=True, order=order, derandomize=True,
                          log=print))


@pytest.mark.slow
@pytest.mark.parametrize("slot", [("env", "full disk", "inspect", "256"), ("env", "device output", "inspect", "--json")],
                         ids=["full disk", "device output"])
def test_outputs_that_are_devices_and_a_full_disk(harness_fixtures: Fixtures, tmp_path: Path,
                                                  slot: tuple[str, ...]) -> None:
    # subprocesses: a file-size limit (the full disk) must not apply to the test process
    if slot[1] == "device output" and not fuzz.can_mknod():
        pytest.skip("an output that is a device node (like /dev/full, made in the test's own directory) needs root")
    assert_clean(fuzz.run(harness_fixtures, tmp_path, None, 0, order=[slot], derandomize=True, log=print))


def test_every_ci_slot_is_in_the_harness_tables() -> None:
    known = set(fuzz.slots())
    for kind, entries in CI.items():
        for slot in entries:
            assert (kind, *slot[:2]) in known, (kind, slot)


def test_a_pickle_global_would_be_caught(tmp_path: Path) -> None:
    """The harness' pickle payload really runs code when a full unpickler loads it (so 'no marker' means
    no pickled code ran), and weights_only loading refuses it."""
    import pickle

    import torch

    marker = tmp_path / "ran"
    payload = pickle.dumps({"x": RunsOnUnpickle(marker)}, protocol=2)
    pickle.loads(payload)
    assert marker.exists()
    marker.unlink()
    torch.save({"x": RunsOnUnpickle(marker)}, tmp_path / "evil.pt")
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
        case = judge.Case("t", "m", "c", [], cwd, jail, refuse)
        before = {**listing(jail), **(old or {})}
        after = {**before, **(new or {})}
        return {k for k, _ in judge.judge(case, Run(rc, "", err, 0.0), before, after)}

    assert kinds(2, "latopt: error: bad\n") == set()
    assert kinds(2, "usage: latopt x\nlatopt x: error: argument --n: invalid int value\n") == set()
    assert kinds(3, "[export] gate ...\nlatopt: error: numeric gate failed\n") == set()
    assert kinds(0, new={"j1/j2/out/x.json": "f"}) == set()
    assert kinds(1, "Traceback (most recent call last):\n  File x\nValueError: y\n") == {"traceback"}
    tb = "x\nTraceback (most recent call last):\n  File x\n    f()\nValueError: y\nz"
    assert exception_line(tb) == "ValueError: y"
    assert kinds(-11) == {"wrong exit code"}                                       # a crash
    assert kinds(0, refuse=True) == {"wrong exit code"}
    assert kinds(2, "UserWarning: x\nlatopt: error: bad\n") == {"multi-line error"}
    assert kinds(2, "latopt: error: bad\n", new={"j1/j2/out/partial": "f"}) == {"leftover files"}
    assert kinds(0, new={"j1/x": "f"}) == {"leftover files"}                      # outside the outputs
    assert kinds(0, new={"j1/j2/out/.x.pt.abc123.tmp": "f"}) == {"leftover files"}  # a hidden temp file
    assert kinds(0, new={"j1/j2/runs/.base.lock": "f"}) == set()                  # a lock file is no temp file
    assert kinds(0, old={"j1/j2/out/dev": "c"}, new={"j1/j2/out/dev": "f"}) == {"device replaced"}
    assert kinds(None) == {"timeout"}
    (jail / "PICKLE_RAN").touch()   # as a pickle payload run by the command would
    case = judge.Case("t", "m", "c", [], cwd, jail, False)
    for rc in (0, 2):
        fails = judge.judge(case, Run(rc, "", "latopt: error: x\n", 0.0), {}, {"PICKLE_RAN": "f"})
        assert {k for k, _ in fails} == {"pickle executed"}
