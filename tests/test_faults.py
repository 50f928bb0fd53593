"""The fault suite's CI subset: interrupt ``latopt train`` / ``fold`` / ``export`` just as they start writing
their output, rerun, and compare with an uninterrupted run (``python -m tests.harness faults`` also covers
``search`` and ``run`` and random points in time).

Nothing half-written may be visible after the signal (every file loads, an output directory is
complete or absent, and after SIGTERM/SIGINT no hidden temp file is left), no process of the command
may outlive it, and the rerun's artefacts must equal the uninterrupted run's: tensors bit for bit,
JSON/YAML minus timing fields. The uninterrupted run is the session's fixture, made by the same
command with the same seed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import faults
from tests.harness.fixtures import Fixtures

pytestmark = pytest.mark.slow   # the shared fixture trains, folds and exports a network, then every case reruns


@pytest.mark.parametrize(("command", "sig"), [("train", "SIGKILL"), ("export", "SIGTERM"), ("fold", "SIGINT")])
def test_interrupted_while_writing_then_rerun_equals_an_uninterrupted_run(harness_fixtures: Fixtures, tmp_path: Path,
                                                                          command: str, sig: str) -> None:
    ref = faults.fixture_reference(harness_fixtures, command)
    out = faults.fault_case(faults.FAULT_COMMANDS[command], harness_fixtures, tmp_path, ref, sig, ("event", 0.0))
    assert out.notes.startswith("interrupted=True"), out.notes   # the signal came before the command finished
    assert out.clean, out.describe()


def test_the_comparison_sees_a_changed_tensor(harness_fixtures: Fixtures, tmp_path: Path) -> None:
    """The rerun comparison is not vacuous: one changed weight, or a missing file, is a difference."""
    import shutil

    import torch

    copy = tmp_path / "base"
    shutil.copytree(harness_fixtures.root / "base", copy)
    ref = faults.fixture_reference(harness_fixtures, "train").digest
    assert not faults.differences(ref, faults.digest_tree(copy, [tmp_path, harness_fixtures.root]), set())
    obj = torch.load(copy / "base.pt", weights_only=True)
    key = next(k for k, v in obj["state_dict"].items() if v.is_floating_point())
    obj["state_dict"][key].view(-1)[0] += 1e-6
    torch.save(obj, copy / "base.pt")
    (copy / "metrics.json").unlink()
    diff = faults.differences(ref, faults.digest_tree(copy, [tmp_path, harness_fixtures.root]), set())
    assert any(key in d for d in diff) and any(d.startswith("metrics.json") for d in diff)
