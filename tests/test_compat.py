"""The compatibility table (docs/compatibility.md, tools/compat.py): the recorded results hold the goal (≥ 30
model names fold within 1e-4) and a few models checked live agree with them; `slow` and `tools` (the tools tier): every model re-checked."""

from __future__ import annotations

import json

import pytest

from latopt.constants import FOLD_CHECK_TOLERANCE
from tools import compat

RECORD = json.loads(compat.DEFAULT_OUT.read_text())
BY_NAME = {r["model"]: r for r in RECORD["models"]}
# one of each kind: MobileNetV2, no-SE MnasNet, EdgeResidual, SE + hard-swish, CIFAR ResNet (paper mode), a block
# type no adapter takes, torchvision MobileNetV3, CIFAR VGG (conv pairs, paper mode)
QUICK = ("mobilenetv2_050", "mnasnet_050", "efficientnet_es", "mobilenetv3_small_050", "resnet20_cifar",
         "mobilenetv4_conv_small", "torchvision/mobilenet_v3_small", "vgg11_cifar")
STRUCTURE = ("blocks", "fold_exact", "fold_paper_only", "drop_only", "not_foldable", "unrecognised", "folds")


def test_the_record_covers_every_listed_model_and_meets_the_goal() -> None:
    assert RECORD["schema"] == compat.SCHEMA and [r["model"] for r in RECORD["models"]] == list(compat.MODELS)
    assert RECORD["tolerance"] == FOLD_CHECK_TOLERANCE
    ok = [r for r in RECORD["models"] if r["folds"]]
    assert len(ok) >= 30
    for r in ok:
        assert r["check"]["per_block_worst"] <= FOLD_CHECK_TOLERANCE and r["check"]["folded"] > 0
        if r["check"]["mode"] == "exact":  # the whole model folded in float64: the fold algebra and its wiring
            assert r["check"]["whole_model_float64"] <= FOLD_CHECK_TOLERANCE
    for r in RECORD["models"]:
        assert "error" not in r, r
        if not r["folds"]:
            assert compat.why_not(r)  # every model that does not fold has its reason


def _agrees(name: str) -> None:
    live = compat.check_model(name, RECORD["resolution"], RECORD["seed"])
    assert {k: live[k] for k in STRUCTURE} == {k: BY_NAME[name][k] for k in STRUCTURE}
    if live["folds"]:
        assert live["check"]["mode"] == BY_NAME[name]["check"]["mode"]
        assert live["check"]["per_block_worst"] <= FOLD_CHECK_TOLERANCE


@pytest.mark.parametrize("name", QUICK)
def test_live_check_agrees_with_the_record(name: str) -> None:
    _agrees(name)


@pytest.mark.slow
@pytest.mark.tools   # ~3 min on 2 cores: the tools tier (the default run re-checks QUICK)
@pytest.mark.parametrize("name", [n for n in compat.MODELS if n not in QUICK])
def test_every_model_agrees_with_the_record(name: str) -> None:
    _agrees(name)
