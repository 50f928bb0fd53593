"""CIFAR-style ResNets (He et al. 2016, section 4.2): ResNet-20/32/44/56/110, the networks the Layer Folding
paper folds on CIFAR-10/100.

A 3x3 stem convolution (16 channels, stride 1, BN, ReLU), three stages of n BasicBlocks (16, 32, 64 channels;
strides 1, 2, 2), global average pooling and a linear classifier; depth = 6n + 2. The blocks are timm's
``BasicBlock`` (so the timm ResNet block adapter describes them) and the attributes follow timm's ResNet
(``conv1``, ``bn1``, ``act1``, ``layer1..3``, ``global_pool``, ``fc``), so its stem/head adapter does too. The
shortcut where the shape changes is a 1x1 convolution + BN (the paper's option B; option A, zero-padded
identity, has no parameters to fold but is not an affine map latopt can put in one convolution's centre tap
with the same channel count either way — B keeps the fold algebra one case).
"""

from __future__ import annotations

import torch
from timm.models.resnet import BasicBlock
from torch import nn

from latopt.errors import LatoptError

DEPTHS = (20, 32, 44, 56, 110)


class CifarResNet(nn.Module):
    """ResNet-``depth`` for 32x32 images (any size works: the pooling is global)."""

    def __init__(self, depth: int = 20, num_classes: int = 10, in_chans: int = 3) -> None:
        super().__init__()
        if depth not in DEPTHS:
            raise LatoptError(f"CIFAR ResNet depth must be one of {', '.join(map(str, DEPTHS))}, not {depth}")
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(in_chans, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.act1 = nn.ReLU(inplace=True)
        cin = 16
        for i, (c, s) in enumerate(((16, 1), (32, 2), (64, 2)), start=1):
            blocks = []
            for j in range(n):
                stride = s if j == 0 else 1
                ds = None
                if stride != 1 or cin != c:
                    ds = nn.Sequential(nn.Conv2d(cin, c, 1, stride, bias=False), nn.BatchNorm2d(c))
                blocks.append(BasicBlock(cin, c, stride=stride, downsample=ds))
                cin = c
            setattr(self, f"layer{i}", nn.Sequential(*blocks))
        self.global_pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(1))
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act1(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(self.global_pool(x))
