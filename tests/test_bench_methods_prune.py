"""tools/bench_methods.py's pruning baseline : a per-layer cap of 0.5 that rounding cannot
break, the stem and first block left whole, channel counts in multiples of 8, a local (uniform-ratio) arm
beside the global one, re-matching on the iterated network, and the arms' cell names (an 18-epoch arm beside
the equal budget). On MobileNetV2-0.5 at 32 px with random weights: the structure is what is checked."""

from __future__ import annotations

import argparse
import copy

import pytest
import torch

from tools import bench_methods as bm


@pytest.fixture(scope="module")
def net() -> torch.nn.Module:
    from latopt.nets.models import build_model

    torch.manual_seed(0)
    return build_model("torchvision/mobilenet_v2?width=0.5", num_classes=10).eval()


def _outs(model: torch.nn.Module) -> list[int]:
    return [k[0] for k in bm.structure_key(model)]


def _first_block_convs(model: torch.nn.Module) -> int:
    """How many convolutions the stem and the first block hold (in registration order)."""
    from latopt.nets.blocks import find_blocks

    first = find_blocks(model)[0].path
    n = 0
    for path, mod in model.named_modules():
        if isinstance(mod, torch.nn.Conv2d):
            n += 1
            if path.startswith(first + "."):
                last = n
    return last


@pytest.mark.parametrize(("arm", "ratio"), [("global", 0.3), ("global", 0.9), ("local", 0.25), ("local", 0.5)])
def test_cap_rounding_and_ignored_layers(net: torch.nn.Module, arm: str, ratio: float) -> None:
    before = _outs(net)
    pruned = bm.prune_model(net, ratio, 32, 8, arm)
    after = _outs(pruned)
    assert sum(after) < sum(before)                                          # it pruned
    assert all(a >= (1 - bm.PRUNE_MAX_LAYER) * b for a, b in zip(after, before, strict=True))   # the cap holds
    assert all(a % 8 == 0 for a, b in zip(after, before, strict=True) if a != b)   # round_to 8
    k = _first_block_convs(net)
    assert after[:k] == before[:k]                                           # stem and first block whole
    assert pruned(torch.randn(2, 3, 32, 32)).shape == (2, 10)                # the classifier keeps its outputs


def test_local_arm_is_one_ratio_and_global_is_not(net: torch.nn.Module) -> None:
    counts = bm.layer_prune_counts(net, 0.25, 32, 8, "local")
    for n, k in counts.values():      # every group: the ratio, up to rounding the rest to a multiple of 8
        assert abs((n - k) - 0.75 * n) <= 4 or (n - k) == 8 * -(-n // 16)
    g = bm.layer_prune_counts(net, 0.25, 32, 8, "global")
    assert len({round(k / n, 2) for n, k in g.values()}) > 2                 # global: ratios differ by layer
    total = sum(n for n, _ in g.values())
    assert sum(k for _, k in g.values()) == pytest.approx(0.25 * total, abs=8 * len(g))


def test_iterated_steps_end_on_the_one_shot_structure(net: torch.nn.Module) -> None:
    m = copy.deepcopy(net)
    pruner = bm.make_pruner(m, 0.4, 32, 8, 3, "global")
    sizes = []
    for _ in range(3):
        pruner.step()
        sizes.append(sum(_outs(m)))
    assert sizes[0] > sizes[1] > sizes[2]
    assert bm.structure_key(m) == bm.structure_key(bm.prune_model(net, 0.4, 32, 8, "global"))


def test_rematch_on_the_iterated_network() -> None:
    """The iterated network is slower than the one-shot one at the same ratio (here by 0.08 of the target's
    time); re-matching finds a ratio whose iterated network lands within the match, in few attempts."""
    one_shot = {r: 1.25 - 0.8 * r for r in (0.1, 0.2, 0.3, 0.4, 0.5)}

    def iterated(r: float) -> float:
        return 1.25 - 0.8 * r + 0.08

    ratio = 0.3125                           # one-shot: exactly on target
    calls: list[float] = []
    best, tried = bm.rematch(ratio, one_shot, 0.03, lambda r: calls.append(r) or r, iterated, attempts=3,
                             say=lambda _: None)
    assert not tried[0]["matched"] and tried[-1]["matched"] and len(tried) <= 3
    assert abs(iterated(best) - 1) <= 0.03 and best == tried[-1]["ratio"] == calls[-1]
    # never matched: the closest attempt is kept
    best, tried = bm.rematch(0.3, one_shot, 0.001, lambda r: r, lambda r: 1.1, attempts=3, say=lambda _: None)
    assert not any(t["matched"] for t in tried) and best == tried[0]["ratio"]


def test_next_ratio_brackets() -> None:
    assert bm.next_ratio([(0.2, 1.05), (0.4, 0.95)], {}) == pytest.approx(0.3)
    assert bm.next_ratio([(0.2, 1.05)], {}) == pytest.approx(0.25)             # no curve: a step toward it
    assert bm.next_ratio([(0.2, 0.9)], {}) == pytest.approx(0.15)


def test_arm_names_and_cells() -> None:
    assert bm.prune_kind("global", 6, 6) == "prune" and bm.prune_kind("local", 18, 6) == "prune-local-e18"
    for kind in ("prune", "prune-local", "prune-e18", "prune-local-e18"):
        assert bm.prune_kind(*bm.parse_prune_kind(kind, 6), 6) == kind
    with pytest.raises(ValueError):
        bm.parse_prune_kind("prune-loose", 6)
    args = argparse.Namespace(seeds=[0], methods=["prune"], lambdas=[1.0], budgets=[], prune_targets=["lf-lut@1"],
                              prune_arms=["global", "local"], prune_epochs=[6, 18], ft_budget=6,
                              methods_expanded={"asis"}, ablation_budget=0.6)
    cells = [c for c, _, _ in bm.cell_names(args) if ">" in c]
    assert cells == ["s0-prune>lf-lut@1", "s0-prune-local>lf-lut@1", "s0-prune-e18>lf-lut@1",
                     "s0-prune-local-e18>lf-lut@1"]
    assert all(bm.in_family(bm.method_of(c), bm.RIVALS) for c in cells)
