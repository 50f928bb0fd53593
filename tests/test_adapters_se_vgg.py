"""Residual squeeze-excitation blocks offer ``drop`` alone (and σ_α never touches them); VGG conv pairs fold two
3x3 into one 5x5 (paper mode); CIFAR VGGs; the whole-model fold gate of ``check_fold`` (float64 algebra)."""

from __future__ import annotations

import pytest
import torch
from timm.models._efficientnet_blocks import InvertedResidual, SqueezeExcite
from torch import nn

import latopt.nets.block_table as inspection
from latopt.adapters.vgg import ConvPair, pair_convs_
from latopt.cli import main
from latopt.errors import LatoptError
from latopt.nets.block_table import check_fold
from latopt.nets.blocks import find_blocks, resolve_blocks
from latopt.nets.cifar_resnets import VGG_CONFIGS
from latopt.nets.models import build_model
from latopt.rewrite import AlphaActivation, install_alpha, linearize, randomize_bn_, verify_fold
from latopt.rewrite.transform import fold_blocks, normalize_plan

TOL = 1e-4  # FOLD_CHECK_TOLERANCE


def _se_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        InvertedResidual(8, 8, 3, 1, exp_ratio=4.0, se_layer=SqueezeExcite, act_layer=nn.Hardswish),   # residual
        InvertedResidual(8, 16, 3, 2, exp_ratio=4.0, se_layer=SqueezeExcite, act_layer=nn.Hardswish),  # strided
        InvertedResidual(16, 16, 3, 1, exp_ratio=2.0, act_layer=nn.Hardswish),                          # no SE
    ).eval()


def test_residual_se_block_is_drop_only_and_lists_no_activations() -> None:
    b0, b1, b2 = find_blocks(_se_net())
    assert (b0.foldable, b0.drop_only, b0.variants, b0.acts) == (False, True, ("drop",), ())
    assert "squeeze-excitation (drop only" in b0.reason and "not exact" in b0.reason
    assert (b1.foldable, b1.drop_only, b1.variants) == (False, False, ()) and "as-is only" in b1.reason
    assert b2.foldable and "drop" in b2.variants


def test_dropping_a_residual_se_block_is_the_identity_and_a_fold_of_it_is_refused() -> None:
    m = _se_net()
    x = torch.randn(2, 3, 12, 12)
    dropped = linearize(m, {0: "drop"})
    with torch.no_grad():
        assert torch.equal(dropped[1](m[0](x)), m[0](x))  # the dropped block passes its input through
        assert torch.equal(dropped(x), m[3](m[2](m[0](x))))
    with pytest.raises(LatoptError, match=r"'full'.*block 0.*squeeze.*allows drop"):
        normalize_plan(m, {0: "full"})
    with pytest.raises(LatoptError, match="variant 'full' does not apply"):
        normalize_plan(m, [0])
    with pytest.raises(LatoptError, match=r"block 1 .*cannot be folded.*as-is only"):
        normalize_plan(m, {1: "drop"})
    assert [b.index for b in resolve_blocks(m, "all")] == [2]  # "all": the blocks that fold


def test_sigma_alpha_never_touches_se_blocks() -> None:
    m = build_model("mobilenetv3_small_050", 10)
    blocks = find_blocks(m)
    se = [b for b in blocks if "squeeze-excitation" in b.reason]
    assert se and all(not b.acts for b in se)
    before = {p: type(x) for b in se for p, x in m.get_submodule(b.path).named_modules()}
    alphas = install_alpha(m, "all")
    assert sorted(alphas) == [b.index for b in blocks if b.foldable]
    assert {p: type(x) for b in se for p, x in m.get_submodule(b.path).named_modules()} == before
    assert not any(isinstance(x, AlphaActivation) for b in se for x in m.get_submodule(b.path).modules())


@pytest.mark.parametrize("name,drop_only", [("mobilenetv3_large_100", [4, 5, 11, 13, 14]),
                                            ("torchvision/mobilenet_v3_small", [4, 5, 7, 9, 10])])
def test_mobilenetv3_se_blocks_drop_exactly_when_residual(name: str, drop_only: list[int]) -> None:
    blocks = find_blocks(build_model(name, 10))
    assert [b.index for b in blocks if b.variants == ("drop",)] == drop_only
    for b in blocks:
        if "squeeze-excitation" in b.reason:
            assert b.drop_only == b.residual and not b.foldable


# ------------------------------------------------------------------------------------------------ VGG
def _vgg_stack(bn: bool) -> nn.Sequential:
    def unit(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, padding=1), *([nn.BatchNorm2d(cout)] if bn else []), nn.ReLU(inplace=True)]

    torch.manual_seed(0)
    return nn.Sequential(*unit(3, 8), nn.MaxPool2d(2), *unit(8, 8), *unit(8, 12), *unit(12, 12), nn.MaxPool2d(2))


def test_pair_convs_groups_stage_pairs_and_keeps_the_function() -> None:
    m = _vgg_stack(bn=True).eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        ref = m(x)
    assert pair_convs_(m) == 1
    # stage 1: one conv (left alone); stage 2: three convs → one pair + one conv left alone
    assert [type(c).__name__ for c in m] == ["Conv2d", "BatchNorm2d", "ReLU", "MaxPool2d", "ConvPair", "Conv2d",
                                             "BatchNorm2d", "ReLU", "MaxPool2d"]
    with torch.no_grad():
        assert torch.equal(m(x), ref)
    assert pair_convs_(m) == 0  # already grouped
    (b,) = find_blocks(m)
    assert (b.layout.name, b.kernel, b.padding, b.residual, b.variants, b.fold_modes) == ("basic", 5, 2, False, ("full",),
                                                                                     ("paper",))
    assert b.post_act == "4.act2"
    plain = _vgg_stack(bn=False).eval()
    pair_convs_(plain)
    (nb,) = find_blocks(plain)
    assert not nb.foldable and "without BatchNorm" in nb.reason


def test_pair_convs_leaves_other_networks_alone() -> None:
    m = build_model("resnet18d", 10)  # a deep stem of conv-bn-relu units, no max-pool inside it
    assert pair_convs_(m) == 0 and not any(isinstance(x, ConvPair) for x in m.modules())


@pytest.mark.parametrize("depth,pairs", [(11, 3), (16, 5)])
def test_cifar_vgg(depth: int, pairs: int) -> None:
    m = build_model(f"vgg{depth}_cifar", 10)
    assert sum(isinstance(x, ConvPair) for x in m.modules()) == pairs
    # torchvision's configuration: 3x3 convolutions without bias, each with BN (γ, β); one 512 → 10 linear
    convs = [c for c in VGG_CONFIGS[depth] if c != "M"]
    expected = sum(9 * cin * cout + 2 * cout for cin, cout in zip([3, *convs[:-1]], convs, strict=True)) + 512 * 10 + 10
    assert sum(p.numel() for p in m.parameters()) == expected
    with torch.no_grad():
        assert m(torch.randn(1, 3, 32, 32)).shape == (1, 10)


def test_vgg_pairs_fold_to_5x5_in_paper_mode() -> None:
    """Two 3x3 (BN, ReLU) → one 5x5 + the kept ReLU: exact away from the border, refused in exact mode."""
    m = build_model("vgg11_cifar", 10)
    randomize_bn_(m, 0)
    with pytest.raises(LatoptError, match="folds only in paper mode"):
        fold_blocks(m, "all", "exact", (32, 32))
    ref, folded = linearize(m, "all"), fold_blocks(m, "all", "paper")
    f0 = folded.get_submodule(find_blocks(m)[0].path)
    assert type(f0).__name__ == "FoldedBlock" and f0.conv.kernel_size == (5, 5) and isinstance(f0.post, nn.ReLU)
    res = verify_fold(ref, folded, (64, 64))
    assert len(res.per_block) == 3
    assert all(e.max_rel_interior < TOL for e in res.per_block.values())
    assert res.per_block[0].max_rel > 10 * TOL  # the border is not exact: the reason for paper only


def test_torchvision_vgg_pairs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "torchvision/vgg11_bn", "--resolution", "32", "--num-classes", "10", "--mode", "paper",
                 "--check-fold"]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if "ConvPair" in ln]
    assert [r.split()[1] for r in rows] == ["features.8", "features.10", "features.12"]
    assert all(r.rstrip().endswith("yes") for r in rows)
    assert "not one contiguous run: features.9 (MaxPool2d)" in out  # the pools split the blocks: no stem/head
    assert "paper mode: interior per-block error" in out


@pytest.mark.parametrize("mode", ["paper", "exact"])
def test_profiling_a_vgg_is_one_line_naming_what_folds_it(mode: str, tmp_path, capsys: pytest.CaptureFixture[str]
                                                         ) -> None:  # type: ignore[no-untyped-def]
    """A VGG's max-pools sit between its conv pairs: no LUT (so no DP); the refusal says what folds it instead."""
    assert main(["profile", "--device", "cpu", "--model", "vgg11_cifar", "--resolution", "32", "--fold-mode", mode,
                 "--out", str(tmp_path / "v.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "features.9 (MaxPool2d)" in err[0] and "lut: null, fold.mode: paper" in err[0]
    assert not (tmp_path / "v.json").exists()


# ------------------------------------------------------------------------------------------ whole-model gate
def test_whole_model_gate_is_the_float64_fold(capsys: pytest.CaptureFixture[str]) -> None:
    """mobilenetv3_large_100: the float32 whole-model error is the as-is SE tail's float32 rounding (of the
    order of the unfolded network's own), the float64 fold is exact, and the gate passes."""
    assert main(["inspect", "mobilenetv3_large_100", "--resolution", "32", "--check-fold"]) == 0
    assert "whole model, float64 (the fold algebra)" in capsys.readouterr().out
    torch.manual_seed(0)
    res = check_fold(build_model("mobilenetv3_large_100"), 32)
    worst = res.worst()
    assert worst < 1e-6 and res.float64.max_rel < 1e-9 and res.max_rel == worst
    assert res.noise_floor > 1e-6 and res.features.max_rel < 8 * res.noise_floor


def test_whole_model_gate_catches_what_no_block_check_sees(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fold that also changes a block it does not fold (here an SE block's BN) passes every per-block check;
    the float64 whole-model comparison catches it."""
    real = inspection.fold_blocks

    def tampered(model: nn.Module, *a: object, **k: object) -> nn.Module:
        out = real(model, *a, **k)
        with torch.no_grad():
            out.get_submodule("blocks.5.2.bn3").bias.add_(0.5)  # block 14: squeeze-excitation, not folded
        return out

    monkeypatch.setattr(inspection, "fold_blocks", tampered)
    torch.manual_seed(0)
    res = check_fold(build_model("mobilenetv3_large_100"), 32)
    assert res.worst() < 1e-6
    assert res.float64.max_rel > TOL and res.max_rel > TOL
