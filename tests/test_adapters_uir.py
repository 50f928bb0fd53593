"""MobileNetV4's Universal Inverted Bottleneck (timm ``UniversalInvertedResidual``): its IB form is an MBConv,
its forms with a start depthwise are layout ``uir`` (latopt.adapters.mbconv), and every form folds as it says."""

from __future__ import annotations

import pytest
import torch
from timm.models._efficientnet_blocks import UniversalInvertedResidual
from torch import nn

from latopt.adapters.block_layouts import LAYOUTS
from latopt.errors import LatoptError
from latopt.nets.blocks import find_blocks
from latopt.nets.models import build_model
from latopt.rewrite import fold_blocks, linearize, randomize_bn_, verify_fold

TOL = 1e-4  # FOLD_CHECK_TOLERANCE


def _net(*blocks: nn.Module, cin: int = 8) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, cin, 3, padding=1), *blocks).eval()


def _uir(cin: int, cout: int, start: int, mid: int, stride: int = 1, **kw: object) -> UniversalInvertedResidual:
    return UniversalInvertedResidual(cin, cout, dw_kernel_size_start=start, dw_kernel_size_mid=mid, stride=stride,
                                     exp_ratio=3.0, layer_scale_init_value=kw.pop("layer_scale", None), **kw)


def test_mobilenetv4_blocks_are_found_with_their_layouts() -> None:
    blocks = find_blocks(build_model("mobilenetv4_conv_small", 10))
    assert len(blocks) == 12 and all(b.foldable for b in blocks)
    by = {b.path: b for b in blocks}
    ib, extra, convnext = by["blocks.2.1"], by["blocks.2.0"], by["blocks.2.5"]
    assert (ib.layout.name, ib.variants) == ("mbconv", ("full", "expand_dw", "dw_project", "pw", "drop"))
    # ExtraDW: 5x5 start, 5x5 middle with stride 2 -> one 9x9 of stride 2; no residual (64 -> 96)
    assert (extra.layout.name, extra.kernel, extra.stride, extra.variants, extra.fold_modes) == (
        "uir", 9, 2, ("full",), ("paper",))
    assert (convnext.layout.name, convnext.kernel, convnext.variants) == ("uir", 3, ("full", "drop"))


@pytest.mark.parametrize(("start", "mid", "stride"), [(3, 3, 1), (5, 3, 2), (3, 0, 1), (3, 0, 2)])
def test_a_uir_block_folds_exactly_away_from_the_border(start: int, mid: int, stride: int) -> None:
    """start ∘ expand is one dense k×k convolution (exact everywhere); with a middle depthwise the two spatial
    convolutions compose into one of k1 + k2 − 1, exact away from the border: paper mode."""
    cout = 8 if stride == 1 else 16
    m = _net(_uir(8, cout, start, mid, stride))
    (b,) = find_blocks(m)
    kernel = start + mid - 1 if mid else start
    assert (b.layout.name, b.kernel, b.stride, b.residual) == ("uir", kernel, stride, stride == 1)
    with pytest.raises(LatoptError, match="folds only in paper mode"):
        fold_blocks(m, "all", "exact", (16, 16))
    randomize_bn_(m, 1)
    ref, folded = linearize(m, "all"), fold_blocks(m, "all", "paper")
    res = verify_fold(ref, folded, (16, 16))
    assert res.per_block[0].max_rel_interior < TOL
    if mid:
        assert res.per_block[0].max_rel > 10 * TOL   # the border is not exact: the reason for paper only
    else:
        assert res.per_block[0].max_rel < TOL        # one spatial convolution: exact everywhere
    # the folded network is read back as a folded block of the same layout
    (fb,) = find_blocks(folded)
    assert fb.layout is LAYOUTS["uir"] and not fb.foldable and "already folded" in fb.reason


def test_uir_forms_latopt_does_not_fold_say_why() -> None:
    scaled, ffn = find_blocks(_net(_uir(8, 8, 3, 3, layer_scale=1e-5), _uir(8, 8, 0, 0)))
    assert not scaled.foldable and "layer scale" in scaled.reason
    assert not ffn.foldable and "FFN block" in ffn.reason
