"""Block discovery: one uniform view of timm and torchvision MBConv blocks, reasons for the
non-foldable ones, block input shapes and the fixed stem/head parts."""

from __future__ import annotations

import math
import re

import pytest
import timm
import torch
from timm.models._efficientnet_blocks import DepthwiseSeparableConv, InvertedResidual, SqueezeExcite
from torch import nn

from latopt.errors import LatoptError
from latopt.nets.blocks import block_input_shapes, find_blocks, resolve_blocks
from latopt.nets.models import build_model
from latopt.nets.stemhead import fixed_parts
from latopt.rewrite import fold_blocks

pytestmark = pytest.mark.floor   # .ci/run's lower-bounds run selects these tests


def test_timm_mobilenetv2_blocks() -> None:
    m = build_model("mobilenetv2_100")
    blocks = find_blocks(m)
    assert len(blocks) == 17 and [b.index for b in blocks] == list(range(17))
    b0 = blocks[0]
    assert (b0.kind, b0.path, b0.cin, b0.cout, b0.expansion, b0.residual) == (
        "timm.DepthwiseSeparableConv", "blocks.0.0", 32, 16, 1.0, False)
    assert b0.convs == ("blocks.0.0.conv_dw", "blocks.0.0.conv_pw") and b0.acts == ("blocks.0.0.bn1.act",)
    assert b0.variants == ("full", "pw")  # t = 1: no partial folds; not residual: no drop
    b2 = blocks[2]
    assert b2.kind == "timm.InvertedResidual" and b2.residual and b2.expansion == 6 and b2.hidden == 144
    assert b2.convs == ("blocks.1.1.conv_pw", "blocks.1.1.conv_dw", "blocks.1.1.conv_pwl")
    assert b2.bns == ("blocks.1.1.bn1", "blocks.1.1.bn2", "blocks.1.1.bn3")
    assert b2.acts == ("blocks.1.1.bn1.act", "blocks.1.1.bn2.act")
    assert b2.variants == ("full", "expand_dw", "dw_project", "pw", "drop")
    assert blocks[1].variants == ("full", "expand_dw", "dw_project", "pw")  # stride 2: no drop
    assert [b.stride for b in blocks] == [1, 2, 1, 2, 1, 1, 2, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1]
    for b in blocks:
        mod = m.get_submodule(b.path)
        assert b.foldable and b.reason == "" and b.kernel == 3 and b.padding == 1
        assert b.residual == mod.has_skip


def test_torchvision_blocks() -> None:
    m = build_model("torchvision/mobilenet_v2?width=0.75")
    blocks = find_blocks(m)
    assert len(blocks) == 17 and blocks[0].path == "features.1" and blocks[-1].path == "features.17"
    assert blocks[0].convs == ("features.1.conv.0.0", "features.1.conv.1") and len(blocks[0].acts) == 1
    assert blocks[1].convs == ("features.2.conv.0.0", "features.2.conv.1.0", "features.2.conv.2")
    assert blocks[1].acts == ("features.2.conv.0.2", "features.2.conv.1.2")
    assert all(b.residual == m.get_submodule(b.path).use_res_connect for b in blocks)
    assert all(b.foldable and b.kind == "torchvision.InvertedResidual" for b in blocks)


def test_efficientnet_lite_kernels_and_tf_same_padding() -> None:
    lite = find_blocks(build_model("efficientnet_lite0"))
    assert len(lite) == 16 and {b.kernel for b in lite} == {3, 5}
    tf = find_blocks(build_model("tf_efficientnet_lite0"))
    assert [b.padding == "same" for b in tf] == [b.stride == 2 for b in tf]
    assert all(b.foldable for b in tf)


@pytest.mark.parametrize("block,reason", [
    (InvertedResidual(8, 16, 3, 2, exp_ratio=4.0, se_layer=SqueezeExcite), "squeeze-excitation"),  # no skip
    (InvertedResidual(8, 16, 3, 2, exp_ratio=4.0, act_layer=nn.GELU), "unsupported activation (GELU"),
    (DepthwiseSeparableConv(8, 8, 3, 1, pw_act=True), "activation after the projection"),
    (InvertedResidual(8, 8, 3, 1, dilation=2, exp_ratio=2.0), "dilated"),
])
def test_unfoldable_blocks_are_named_with_reason(block: nn.Module, reason: str) -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), block)
    (b,) = find_blocks(model)
    assert not b.foldable and reason in b.reason
    assert resolve_blocks(model, "all") == []
    why = re.escape(reason.split(" (")[0])
    with pytest.raises(LatoptError, match=rf"block 0 .*cannot be folded.*{why}"):
        resolve_blocks(model, [0])
    with pytest.raises(LatoptError, match="cannot be folded"):
        fold_blocks(model, [0], "paper")


def test_efficientnet_b0_is_listed_but_not_foldable() -> None:
    blocks = find_blocks(timm.create_model("efficientnet_b0"))
    assert len(blocks) == 16 and not any(b.foldable for b in blocks)
    assert all("squeeze-excitation" in b.reason for b in blocks)


def test_resolve_blocks_specs_and_errors() -> None:
    m = build_model("mobilenetv2_035")
    assert [b.index for b in resolve_blocks(m, "all")] == list(range(17))
    assert [b.index for b in resolve_blocks(m, "3, 1,3")] == [3, 1]
    with pytest.raises(LatoptError, match="out of range: the model has blocks 0..16"):
        resolve_blocks(m, [17])
    with pytest.raises(LatoptError, match="bad block list"):
        resolve_blocks(m, "1,x")
    with pytest.raises(LatoptError, match="no MBConv blocks"):
        resolve_blocks(nn.Sequential(nn.Conv2d(3, 3, 1)), "all")


def test_folded_blocks_keep_their_index() -> None:
    m = build_model("mobilenetv2_035")
    f = fold_blocks(m, {3: "full", 5: "expand_dw"}, "paper")
    blocks = find_blocks(f)
    assert len(blocks) == 17 and blocks[3].kind == "latopt.FoldedBlock" and not blocks[3].foldable
    assert "already folded" in blocks[5].reason and blocks[5].acts == (f"{blocks[5].path}.act",)
    assert blocks[4].foldable
    with pytest.raises(LatoptError, match="already folded"):
        resolve_blocks(f, [3])


@pytest.mark.parametrize("name,res", [("mobilenetv2_050", 64), ("tf_efficientnet_lite0", 67),
                                      ("torchvision/mobilenet_v2", 65)])
def test_block_input_shapes_chain(name: str, res: int) -> None:
    m = build_model(name)
    blocks = find_blocks(m)
    shapes = block_input_shapes(m, (2, 3, res, res))
    assert sorted(shapes) == [b.index for b in blocks]
    assert shapes[0][:2] == (2, blocks[0].cin)
    for b, nxt in zip(blocks, blocks[1:], strict=False):
        h, w = shapes[b.index][-2:]
        assert shapes[nxt.index] == (2, b.cout, math.ceil(h / b.stride), math.ceil(w / b.stride))
    with pytest.raises(LatoptError):
        block_input_shapes(m, (3, res, res))


@pytest.mark.parametrize("name", ["mobilenetv2_035", "efficientnet_lite0", "torchvision/mobilenet_v2?width=0.5",
                                  "resnet20_cifar", "mobilenetv3_small_050", "torchvision/mobilenet_v3_small",
                                  "torchvision/resnet18", "torchvision/mnasnet0_5", "mnasnet_050"])
def test_fixed_parts_compose_to_the_model(name: str) -> None:
    m = build_model(name, 7)
    parts = fixed_parts(m)
    x = torch.randn(2, 3, 48, 48)
    with torch.no_grad():
        h = parts.stem(x)
        for b in find_blocks(m):
            h = m.get_submodule(b.path)(h)
        assert torch.allclose(parts.head(h), m(x), atol=1e-5)
    assert parts.stem_paths and parts.head_paths
    with pytest.raises(LatoptError, match="stem/head"):
        fixed_parts(nn.Sequential(nn.Conv2d(3, 3, 1)))
