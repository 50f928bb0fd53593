"""Block and stem/head adapters (latopt.adapters): EdgeResidual, ResNet BasicBlock / Bottleneck, hard-swish and
SiLU blocks, SE blocks listed but never folded (residual ones may be dropped), torchvision ResNets and MobileNetV3, the CIFAR ResNets; σ_α for
every supported activation; `latopt inspect` on models with blocks no adapter knows."""

from __future__ import annotations

import pytest
import torch
from timm.models._efficientnet_blocks import EdgeResidual, InvertedResidual, SqueezeExcite
from timm.models.resnet import BasicBlock, Bottleneck
from torch import nn

from latopt.cli import main
from latopt.constants import ACT_KINDS
from latopt.errors import LatoptError
from latopt.nets.block_table import check_fold
from latopt.nets.blocks import find_blocks
from latopt.nets.layers import make_activation
from latopt.nets.models import build_model
from latopt.rewrite import (
    AlphaActivation,
    find_chains,
    fold_blocks,
    get_alphas,
    install_alpha,
    linearize,
    randomize_bn_,
    span_exact_blocks,
    verify_fold,
)

TOL = 1e-4  # FOLD_CHECK_TOLERANCE


def _net(*blocks: nn.Module, cin: int = 8) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, cin, 3, padding=1), *blocks).eval()


@pytest.mark.parametrize("kind", ACT_KINDS)
def test_sigma_alpha_is_sigma_at_0_and_identity_at_1(kind: str) -> None:
    x = torch.linspace(-8, 8, 401)
    a = AlphaActivation(kind)
    assert torch.equal(a(x), make_activation(kind)(x))
    with torch.no_grad():
        a.alpha.fill_(1.0)
    assert torch.equal(a(x), x)
    with torch.no_grad():
        a.alpha.fill_(0.25)
    assert torch.allclose(a(x), 0.75 * make_activation(kind)(x) + 0.25 * x)


@pytest.mark.parametrize("act", [nn.Hardswish, nn.SiLU, nn.ReLU6])
def test_any_supported_activation_folds_and_sigma_alpha_at_1_is_the_fold(act: type[nn.Module]) -> None:
    """σ_α for the block's own σ; at α = 1 the σ_α network is the linearised one, and the fold equals it."""
    m = _net(InvertedResidual(8, 8, 3, 1, exp_ratio=3.0, act_layer=act), InvertedResidual(8, 16, 5, 2, act_layer=act))
    (b0, b1) = find_blocks(m)
    assert b0.foldable and b1.foldable and b0.variants == ("full", "expand_dw", "dw_project", "pw", "drop")
    randomize_bn_(m, 0)
    res = check_fold(m, 12, "exact")
    assert res.folded == 2 and res.max_rel < TOL
    ref, folded = linearize(m, "all"), fold_blocks(m, "all", "exact", (12, 12))
    x = torch.randn(2, 3, 12, 12)
    with torch.no_grad():
        plain = m(x)
    sig = install_alpha(m, "all")
    assert get_alphas(m) == {0: [0.0], 1: [0.0]}
    with torch.no_grad():
        assert torch.equal(m(x), plain)  # α = 0: the original network
        for ps in sig.values():
            for p in ps:
                p.fill_(1.0)
        r = ref(x)
        assert (m(x) - r).abs().max() <= 1e-6 * r.abs().max() and (folded(x) - r).abs().max() <= TOL * r.abs().max()


def test_se_blocks_are_listed_never_folded() -> None:
    m = _net(InvertedResidual(8, 8, 3, 1, exp_ratio=4.0, se_layer=SqueezeExcite, act_layer=nn.Hardswish))
    (b,) = find_blocks(m)
    assert not b.foldable and "squeeze-excitation" in b.reason and "not exact" in b.reason
    assert b.variants == ("drop",) and b.acts == ()  # residual: it may be dropped (tests/test_adapters_se_vgg.py)
    assert check_fold(m, 8).folded == 0


@pytest.mark.parametrize("stride", [1, 2])
def test_edge_residual_folds_exactly(stride: int) -> None:
    m = _net(EdgeResidual(8, 8 if stride == 1 else 12, 3, stride, exp_ratio=4.0))
    (b,) = find_blocks(m)
    assert (b.layout.name, b.kind, b.hidden, b.has_expand) == ("dense", "timm.EdgeResidual", 32, False)
    assert b.variants == (("full", "drop") if stride == 1 else ("full",))
    for mode in ("exact", "paper"):  # no bias kernel: a 1x1 after the k×k, so paper mode is exact too
        res = check_fold(m, 11, mode)
        assert res.folded == 1 and res.max_rel < TOL


def _downsample(cin: int, cout: int, stride: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


@pytest.mark.parametrize("stride", [1, 2])
def test_bottleneck_folds_exactly_with_its_shortcut(stride: int) -> None:
    """1x1 – 3x3 (dense, strided) – 1x1 with a projection shortcut → one 3x3: exact, borders included."""
    m = _net(Bottleneck(8, 4, stride, downsample=_downsample(8, 16, stride)), Bottleneck(16, 4))
    b0, b1 = find_blocks(m)
    assert (b0.layout.name, b0.kernel, b0.stride, b0.residual, b1.residual) == ("dense", 3, stride, False, True)
    assert b0.shortcut and b0.post_act.endswith("act3") and b1.variants == ("full", "drop")
    res = check_fold(m, 13, "exact")
    assert res.folded == 2 and res.max_rel < TOL
    folded = fold_blocks(m, "all", "exact", (13, 13))
    assert [type(folded[i]).__name__ for i in (1, 2)] == ["FoldedBlock", "FoldedBlock"]
    assert isinstance(folded[1].post, nn.ReLU) and folded[1].conv.kernel_size == (3, 3)
    # the kept ReLU makes a folded block non-affine: no chain of deferred bias maps, no merged span through it
    assert find_chains(folded, (13, 13)) == []
    ok, why = span_exact_blocks([folded[1], folded[2]])
    assert not ok and "after the residual addition" in why


@pytest.mark.parametrize("stride,kernel", [(1, 5), (2, 7)])
def test_basic_block_folds_in_paper_mode_only(stride: int, kernel: int) -> None:
    """Two 3x3 → one 5x5 (7x7 at stride 2): exact away from the border (paper mode), refused in exact mode."""
    ds = _downsample(8, 16, stride) if stride == 2 else None
    m = _net(BasicBlock(8, 16 if ds is not None else 8, stride, downsample=ds))
    (b,) = find_blocks(m)
    assert (b.layout.name, b.kernel, b.stride, b.padding, b.fold_modes) == ("basic", kernel, stride, kernel // 2, ("paper",))
    with pytest.raises(LatoptError, match="folds only in paper mode"):
        fold_blocks(m, "all", "exact", (16, 16))
    assert check_fold(m, 16, "exact").folded == 0
    randomize_bn_(m, 1)
    ref, folded = linearize(m, "all"), fold_blocks(m, "all", "paper")
    res = verify_fold(ref, folded, (16, 16))
    assert res.per_block[0].max_rel_interior < TOL
    assert res.per_block[0].max_rel > 10 * TOL  # the border is not exact: the reason for paper only


def test_torchvision_resnet_blocks_get_their_own_activations() -> None:
    import torchvision

    torch.manual_seed(0)
    raw = torchvision.models.resnet18(num_classes=5).eval()
    assert all(not b.foldable and "one ReLU module" in b.reason for b in find_blocks(raw))
    torch.manual_seed(0)
    built = build_model("torchvision/resnet18", 5)
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(raw(x), built(x))
    assert raw.state_dict().keys() == built.state_dict().keys()
    blocks = find_blocks(built)
    assert len(blocks) == 8 and all(b.foldable and b.kind == "torchvision.BasicBlock" for b in blocks)


def test_cifar_resnet20() -> None:
    m = build_model("resnet20_cifar", 10)
    blocks = find_blocks(m)
    assert len(blocks) == 9 and [b.stride for b in blocks] == [1, 1, 1, 2, 1, 1, 2, 1, 1]
    assert sum(p.numel() for p in m.parameters()) < 300_000  # ~0.27 M, as in He et al.
    res = check_fold(m, 16, "paper")
    assert res.folded == 9
    assert res.worst(interior=True) < TOL


def test_inspect_lists_what_no_adapter_knows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "ghostnet_100", "--resolution", "32"]) == 0
    out = capsys.readouterr().out
    assert "not changeable: GhostBottleneck" in out and "no block adapter" in out and "Traceback" not in out
    assert main(["inspect", "resnet18", "--resolution", "32", "--check-fold"]) == 0
    out = capsys.readouterr().out
    assert "folds only in paper mode" in out and "no block of this model folds in exact mode" in out


def test_activation_after_the_projection_without_skip_is_kept() -> None:
    """MobileNetV1 / LCNet blocks (dw → BN → act → pw → BN → act, no skip): one k×k convolution + that act."""
    from timm.models._efficientnet_blocks import DepthwiseSeparableConv

    m = _net(DepthwiseSeparableConv(8, 16, 3, 2, pw_act=True), DepthwiseSeparableConv(16, 16, 3, 1, pw_act=True))
    b0, b1 = find_blocks(m)
    assert b0.foldable and b0.post_act == "1.bn2.act" and b0.variants == ("full",)
    assert not b1.foldable and "before the residual addition" in b1.reason  # the act sits before the skip's add
    res = check_fold(m, 12, "exact")
    assert res.folded == 1 and res.max_rel < TOL


@pytest.mark.parametrize("name", ["mobilenetv3_large_100", "efficientnet_b0", "mixnet_s", "resnet18",
                                  "torchvision/mobilenet_v3_small", "torchvision/efficientnet_b0", "resnet20_cifar"])
def test_inspect_any_family_member(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Every model of these families is inspected: a row per block it knows (foldable, or the reason), one line per
    module type it does not, exit 0."""
    assert main(["inspect", name, "--resolution", "32", "--num-classes", "10"]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines()[2:] if ln.split() and ln.split()[0].isdigit()]
    assert all(ln.rstrip().endswith("yes") or " no: " in ln for ln in rows)
    assert rows or "not changeable:" in out
    assert out.splitlines()[-1].startswith("total:")
