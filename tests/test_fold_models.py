"""Acceptance checks of the fold on whole models: random BN statistics, batch 2.

For every foldable block of each model: exact mode matches the linearised model with
max |diff| <= 1e-4 · max |reference| at every output position (each folded block fed the reference
block's input), paper mode away from the border ring; and the whole model with ALL blocks folded at
once matches linearize(model, "all") (logits and last block output). Small resolutions still reach
every block shape (the last stride-2 stage at 64 px has a 4x4 input)."""

from __future__ import annotations

import pytest
import torch

from latopt.nets.blocks import find_blocks
from latopt.nets.models import build_model
from latopt.rewrite import fold_blocks, linearize, randomize_bn_, verify_fold

TOL = 1e-4

CASES = [  # (model, resolution): odd and even sizes
    ("mobilenetv2_050", 67),
    ("mobilenetv2_100", 64),
    ("mobilenetv2_140", 64),
    ("torchvision/mobilenet_v2?width=0.75", 65),
    ("torchvision/mobilenet_v2", 64),
    ("efficientnet_lite0", 66),
    ("efficientnet_lite2", 64),
    ("tf_efficientnet_lite0", 65),  # TF SAME padding (timm Conv2dSame) in the stride-2 blocks
]


def _check(name: str, res: int, plan, seed: int) -> None:
    torch.manual_seed(seed)
    model = randomize_bn_(build_model(name, 10), seed, plan=plan)
    blocks = find_blocks(model)
    ref = linearize(model, plan)
    exact = verify_fold(ref, fold_blocks(model, plan, "exact", (res, res)), (res, res), batch=2, seed=seed)
    expected = {b.index for b in blocks if b.foldable} if plan == "all" else set(plan)
    assert set(exact.per_block) == expected
    for i, e in exact.per_block.items():
        assert e.max_rel <= TOL, (name, i, e)
    assert exact.output.max_rel <= TOL and exact.features.max_rel <= TOL, (name, exact)
    paper = verify_fold(ref, fold_blocks(model, plan, "paper", (res, res)), (res, res), batch=2, seed=seed)
    for i, e in paper.per_block.items():
        assert e.max_rel_interior <= TOL, (name, i, e)
    # the paper mode really differs on the border of blocks with an expansion (not a vacuous check)
    assert max(e.max_rel for e in paper.per_block.values()) > 1e-3


@pytest.mark.parametrize("name,res", CASES)
def test_fold_all_blocks_of_model(name: str, res: int) -> None:
    m = build_model(name)
    assert all(b.foldable for b in find_blocks(m)), [b.reason for b in find_blocks(m)]
    _check(name, res, "all", seed=1)


@pytest.mark.parametrize("name", ["mobilenetv2_100", "torchvision/mobilenet_v2?width=0.75", "efficientnet_lite0"])
def test_fold_mixed_partial_plan(name: str) -> None:
    blocks = find_blocks(build_model(name))
    variants = ("full", "expand_dw", "dw_project")
    plan = {b.index: (variants[b.index % 3] if b.has_expand else "full") for b in blocks if b.index % 4 != 3}
    _check(name, 64, plan, seed=2)


@pytest.mark.parametrize("name,res", [("mobilenetv2_100", 64), ("torchvision/mobilenet_v2?width=0.75", 65),
                                      ("tf_efficientnet_lite0", 66)])
def test_fold_plan_with_pw_and_drop(name: str, res: int) -> None:
    """Every variant in one network, stride-2 pw blocks (TF SAME padding included) and dropped blocks: exact
    against the variant network, and the block numbering of the original network survives both."""
    blocks = find_blocks(build_model(name))
    cycle = ("pw", "drop", "full", "expand_dw", "dw_project")
    plan = {}
    for b in blocks:
        v = cycle[b.index % len(cycle)]
        plan[b.index] = v if v in b.variants else "pw"
    assert {b.stride for b in blocks if plan[b.index] == "pw"} == {1, 2}
    _check(name, res, plan, seed=3)
    m = build_model(name)
    for net in (linearize(m, plan), fold_blocks(m, plan, "paper")):
        assert [(b.index, b.path) for b in find_blocks(net)] == [(b.index, b.path) for b in blocks]
