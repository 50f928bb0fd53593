"""The fault suite's CI subset: interrupt ``latopt train`` / ``fold`` / ``export`` just as they start writing
their output, rerun, and compare with an uninterrupted run (``tools/surface.py faults`` also covers
``search`` and ``run`` and random points in time).

Nothing half-written may be visible after the signal (every file loads, an output directory is
complete or absent, and after SIGTERM/SIGINT no hidden temp file is left), no process of the command
may outlive it, and the rerun's artefacts must equal the uninterrupted run's: tensors bit for bit,
JSON/YAML minus timing fields. The uninterrupted run is the session's fixture, made by the same
command with the same seed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import surface  # noqa: E402

pytestmark = pytest.mark.slow   # the shared fixture trains, folds and exports a network, then every case reruns


@pytest.fixture(scope="module")
def fx(tmp_path_factory: pytest.TempPathFactory) -> surface.Fixtures:
    return surface.Fixtures(tmp_path_factory.getbasetemp() / "surface-fixtures", in_process=True).build(log=print)


@pytest.mark.parametrize(("command", "sig"), [("train", "SIGKILL"), ("export", "SIGTERM"), ("fold", "SIGINT")])
def test_interrupted_while_writing_then_rerun_equals_an_uninterrupted_run(fx: surface.Fixtures, tmp_path: Path,
                                                                          command: str, sig: str) -> None:
    out = surface.fault_case(surface.FAULT_COMMANDS[command], fx, tmp_path, surface.fixture_reference(fx, command),
                             sig, ("event", 0.0))
    assert out.notes.startswith("interrupted=True"), out.notes   # the signal came before the command finished
    assert out.clean, out.describe()


def test_the_comparison_sees_a_changed_tensor(fx: surface.Fixtures, tmp_path: Path) -> None:
    """The rerun comparison is not vacuous: one changed weight, or a missing file, is a difference."""
    import shutil

    import torch

    copy = tmp_path / "base"
    shutil.copytree(fx.root / "base", copy)
    ref = surface.fixture_reference(fx, "train").digest
    assert not surface.differences(ref, surface.digest_tree(copy, [tmp_path, fx.root]), set())
    obj = torch.load(copy / "base.pt", weights_only=True)
    key = next(k for k, v in obj["state_dict"].items() if v.is_floating_point())
    obj["state_dict"][key].view(-1)[0] += 1e-6
    torch.save(obj, copy / "base.pt")
    (copy / "metrics.json").unlink()
    diff = surface.differences(ref, surface.digest_tree(copy, [tmp_path, fx.root]), set())
    assert any(key in d for d in diff) and any(d.startswith("metrics.json") for d in diff)
