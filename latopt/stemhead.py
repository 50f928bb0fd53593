"""The fixed parts of a network: the stem before the first MBConv block and the head after the last one.

``fixed_parts(model)`` returns the model's own modules (shared, not copied) as a :class:`FixedParts`, so the
profiler can time them and ``head(blocks(stem(x)))`` equals ``model(x)`` in eval mode. Known layouts: timm
EfficientNet / MobileNetV2 and torchvision MobileNetV2 (its blocks recognised by :mod:`latopt.blocks`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from latopt.blocks import block_kind
from latopt.errors import LatoptError


class _Head(nn.Module):
    """conv head (+BN/act) → global average pool → flatten → classifier (dropout is identity in eval)."""

    def __init__(self, features: nn.Module, pool: nn.Module, classifier: nn.Module) -> None:
        super().__init__()
        self.features = features
        self.pool = pool
        self.classifier = classifier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


@dataclass
class FixedParts:
    """Everything outside the blocks: ``stem`` maps the network input to the first block's input and
    ``head`` maps the last block's output to the logits. The modules are the model's own (shared, not
    copied). ``stem_paths``/``head_paths`` name them in the model. ``head`` always has the children
    ``features`` (conv head + BN/act), ``pool`` (global average pool) and ``classifier``, so it can be
    timed in parts: ``classifier(flatten(pool(features(x)), 1))``."""

    stem: nn.Module
    head: nn.Module
    stem_paths: tuple[str, ...]
    head_paths: tuple[str, ...]


def fixed_parts(model: nn.Module) -> FixedParts:
    """Stem and head of a timm EfficientNet/MobileNetV2 or a torchvision MobileNetV2.

    ``head(blocks(stem(x)))`` equals ``model(x)`` in eval mode (checked in tests/test_blocks.py)."""
    cls = type(model)
    if cls.__module__.startswith("timm.") and all(hasattr(model, a) for a in ("conv_stem", "bn1", "blocks")):
        stem = nn.Sequential(model.conv_stem, model.bn1)
        head = _Head(nn.Sequential(model.conv_head, model.bn2), model.global_pool, model.classifier)
        return FixedParts(stem, head, ("conv_stem", "bn1"), ("conv_head", "bn2", "global_pool", "classifier"))
    if cls.__module__.startswith("torchvision.") and hasattr(model, "features") and hasattr(model, "classifier"):
        feats = model.features
        kinds = [block_kind(m) for m in feats]
        idx = [i for i, k in enumerate(kinds) if k is not None]
        if not idx or idx != list(range(idx[0], idx[-1] + 1)):
            raise LatoptError("torchvision model: blocks are not one contiguous run inside .features")
        stem = nn.Sequential(*[feats[i] for i in range(idx[0])])
        tail = nn.Sequential(*[feats[i] for i in range(idx[-1] + 1, len(feats))])
        head = _Head(tail, nn.AdaptiveAvgPool2d(1), model.classifier)
        return FixedParts(stem, head, tuple(f"features.{i}" for i in range(idx[0])),
                          (*(f"features.{i}" for i in range(idx[-1] + 1, len(feats))), "classifier"))
    raise LatoptError(f"do not know the stem/head layout of {cls.__module__}.{cls.__name__}")
