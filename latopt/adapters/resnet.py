"""Block adapters for ResNet blocks: timm ``BasicBlock`` / ``Bottleneck`` (also the blocks of latopt's CIFAR
ResNets, :mod:`latopt.nets.cifar_resnets`) and torchvision's.

- ``BasicBlock`` (k×k → BN → act1 → k×k → BN, + shortcut, → act2): layout ``basic``. With act1 linear the
  two k×k convolutions compose into one of size k + s·(k − 1) (two 3x3 → one 5x5; 7x7 at stride 2) and
  padding p1 + s·p2. That is exact only away from the border: the second convolution zero-pads the first
  one's output, while the composed convolution computes the first one there from the real pixels next to the
  border. So a BasicBlock folds in ``paper`` mode only, exact in the interior (``Block.fold_modes``).
- ``Bottleneck`` (1x1 → k×k → 1x1, the k×k dense and strided): layout ``dense``, MBConv's algebra with a dense
  middle convolution; exact in both modes, borders included in ``exact`` mode (the bias map).
- A 1x1 projection shortcut (conv + BN, the block's stride) is a centre tap of the composed convolution, as the
  identity is; an average-pool shortcut (ResNet-D) is not folded.
- The activation after the residual addition (``act2`` / ``act3``) is kept: the folded block is one
  convolution followed by it (``FoldInfo.post_act``).

torchvision's blocks apply one ``relu`` module three times (inside and after the addition), so its inner
activations cannot be replaced alone: :func:`separate_activations_` (called by :func:`latopt.nets.models.build_model`
for torchvision ResNets) gives each use its own module (``act1``, ``act2`` [, ``act3``]; the state dict is
unchanged). A torchvision block not converted is listed with that reason.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torchvision.models.resnet import BasicBlock as _TvBasic
from torchvision.models.resnet import Bottleneck as _TvBottleneck

from latopt.adapters import BlockAdapter, from_library, register_block
from latopt.adapters.anatomy import Block, is_identity, make_block
from latopt.adapters.block_layouts import BASIC, DENSE


class TvBasicBlock(_TvBasic):
    """torchvision's BasicBlock with its own module for each activation (``act1`` inside, ``act2`` after the
    residual addition); same parameters and state dict."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.act2(out + (x if self.downsample is None else self.downsample(x)))


class TvBottleneck(_TvBottleneck):
    """torchvision's Bottleneck with ``act1``, ``act2`` inside and ``act3`` after the residual addition."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act1(self.bn1(self.conv1(x)))
        out = self.act2(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.act3(out + (x if self.downsample is None else self.downsample(x)))


def separate_activations_(model: nn.Module) -> int:
    """Give every torchvision BasicBlock / Bottleneck of ``model`` its own activation module per use, in place
    (the function is unchanged: ReLU is stateless). Returns the number of blocks converted."""
    n = 0
    for m in list(model.modules()):
        if type(m) in (_TvBasic, _TvBottleneck):
            relu: Any = m.relu
            del m.relu
            m.act1 = nn.ReLU(inplace=relu.inplace)
            m.act2 = nn.ReLU(inplace=relu.inplace)
            if type(m) is _TvBottleneck:
                m.act3 = nn.ReLU(inplace=relu.inplace)
                m.__class__ = TvBottleneck
            else:
                m.__class__ = TvBasicBlock
            n += 1
    return n


def _describe(family: str, index: int, path: str, m: Any) -> Block:
    bottleneck = isinstance(m, _TvBottleneck) or type(m).__name__ == "Bottleneck"
    kind = f"{family}.{'Bottleneck' if bottleneck else 'BasicBlock'}"
    reasons = []
    if not is_identity(getattr(m, "aa", None)):
        reasons.append("anti-aliasing layer")
    names: dict[str, str] = {}
    mods: dict[str, Any] = {}
    ds = m.downsample
    if ds is not None:
        if isinstance(ds, nn.Sequential) and len(ds) == 2 and isinstance(ds[0], nn.Conv2d):
            mods.update(sc_conv=ds[0], sc_bn=ds[1])
            names.update(sc_conv="downsample.0", sc_bn="downsample.1")
        else:
            reasons.append("the shortcut is not a 1x1 convolution + BN (e.g. an average-pool shortcut)")
    if bottleneck:
        mods.update(expand=m.conv1, bn1=m.bn1, act1=m.act1, dw=m.conv2, bn2=m.bn2, act2=m.act2, project=m.conv3,
                    bn3=m.bn3, post=m.act3)
        names.update(expand="conv1", bn1="bn1", act1="act1", dw="conv2", bn2="bn2", act2="act2", project="conv3",
                     bn3="bn3", post="act3")
        layout = DENSE
    else:
        mods.update(conv1=m.conv1, bn1=m.bn1, act1=m.act1, conv2=m.conv2, bn2=m.bn2, post=m.act2)
        names.update(conv1="conv1", bn1="bn1", act1="act1", conv2="conv2", bn2="bn2", post="act2")
        layout = BASIC
    return make_block(index, path, kind, mods, names, ds is None, "; ".join(reasons), layout=layout,
                      se=not is_identity(getattr(m, "se", None)))


def _unconverted(index: int, path: str, m: Any) -> Block:
    """A torchvision block whose one ``relu`` serves inside and after the addition: listed, not foldable."""
    bottleneck = isinstance(m, _TvBottleneck)
    c_last = m.conv3 if bottleneck else m.conv2
    return Block(index=index, path=path, kind=f"torchvision.{type(m).__name__}", cin=m.conv1.in_channels,
                 cout=c_last.out_channels, hidden=m.conv1.out_channels,
                 expansion=m.conv1.out_channels / m.conv1.in_channels, kernel=int(m.conv2.kernel_size[0]),
                 stride=int(m.stride), residual=m.downsample is None, convs=(), bns=(), acts=(), foldable=False,
                 reason="one ReLU module serves inside the block and after its residual addition; build the model "
                        "by its latopt name (torchvision/...), which gives each use its own module",
                 layout=DENSE if bottleneck else BASIC)


def _match_timm(m: nn.Module) -> bool:
    return (from_library(m, "timm", "BasicBlock", "Bottleneck") and hasattr(m, "act1") and hasattr(m, "conv2")
            and hasattr(m, "downsample"))


register_block(BlockAdapter("timm-resnet", "timm", _match_timm, lambda i, p, m: _describe("timm", i, p, m)))
register_block(BlockAdapter("torchvision-resnet", "torchvision", lambda m: isinstance(m, (TvBasicBlock, TvBottleneck)),
                            lambda i, p, m: _describe("torchvision", i, p, m)))
register_block(BlockAdapter("torchvision-resnet-shared-relu", "torchvision",
                            lambda m: type(m) in (_TvBasic, _TvBottleneck), _unconverted))
