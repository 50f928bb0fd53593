"""CIFAR-style networks for 32x32 images: the ResNets of He et al. 2016 (section 4.2), ResNet-20/32/44/56/110, the
networks the Layer Folding paper folds on CIFAR-10/100, and VGG-11/13/16/19 with BatchNorm.

ResNets:

A 3x3 stem convolution (16 channels, stride 1, BN, ReLU), three stages of n BasicBlocks (16, 32, 64 channels;
strides 1, 2, 2), global average pooling and a linear classifier; depth = 6n + 2. The blocks are timm's
``BasicBlock`` (so the timm ResNet block adapter describes them) and the attributes follow timm's ResNet
(``conv1``, ``bn1``, ``act1``, ``layer1..3``, ``global_pool``, ``fc``), so its stem/head adapter does too. The
shortcut where the shape changes is a 1x1 convolution + BN (the paper's option B; option A, zero-padded
identity, has no parameters to fold but is not an affine map latopt can put in one convolution's centre tap
with the same channel count either way — B keeps the fold algebra one case).

VGGs (``CifarVGG``, the CIFAR VGG of the network-slimming and pruning literature): torchvision's VGG
configurations (3x3 convolutions, BN, ReLU; five max-pooled stages, so a 32x32 input ends at 1x1), global
average pooling and one linear classifier on the 512 features. Its attributes follow torchvision's VGG
(``features``, ``avgpool``, ``classifier``), and each pair of consecutive convolutions of a stage is grouped
by :func:`latopt.adapters.vgg.pair_convs_` (two 3x3 → one 5x5 in paper mode, as a BasicBlock).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from timm.models.resnet import BasicBlock
from torch import nn

from latopt.adapters.vgg import pair_convs_
from latopt.errors import LatoptError

DEPTHS = (20, 32, 44, 56, 110)
# torchvision's VGG configurations: output channels of each 3x3 convolution, "M" a 2x2 max-pool
VGG_CONFIGS: dict[int, tuple[int | str, ...]] = {
    11: (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    13: (64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    16: (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"),
    19: (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"),
}


class CifarResNet(nn.Module):
    """ResNet-``depth`` for 32x32 images (any size works: the pooling is global)."""

    if TYPE_CHECKING:  # set by __init__ (setattr); for the type checker only (TorchScript reads class annotations)
        layer1: nn.Sequential
        layer2: nn.Sequential
        layer3: nn.Sequential

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


class CifarVGG(nn.Module):
    """VGG-``depth`` with BatchNorm for 32x32 images (any size of at least 32 works: the pooling is global)."""

    def __init__(self, depth: int = 16, num_classes: int = 10, in_chans: int = 3) -> None:
        super().__init__()
        if depth not in VGG_CONFIGS:
            raise LatoptError(f"CIFAR VGG depth must be one of {', '.join(map(str, VGG_CONFIGS))}, not {depth}")
        layers: list[nn.Module] = []
        cin = in_chans
        for c in VGG_CONFIGS[depth]:
            if c == "M":
                layers.append(nn.MaxPool2d(2, 2))
                continue
            layers += [nn.Conv2d(cin, int(c), 3, padding=1, bias=False), nn.BatchNorm2d(int(c)), nn.ReLU(inplace=True)]
            cin = int(c)
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        pair_convs_(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))
