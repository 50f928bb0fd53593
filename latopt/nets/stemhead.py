"""The fixed parts of a network: the stem before the first block and the head after the last one.

``fixed_parts(model)`` returns the model's own modules (shared, not copied) as a :class:`FixedParts`, so the
profiler can time them and ``head(blocks(stem(x)))`` equals ``model(x)`` in eval mode. The layouts are the
stem/head adapters of :mod:`latopt.adapters` (:mod:`latopt.adapters.layouts`): timm EfficientNet / MobileNet
(V1–V3, MNASNet, FBNet, ...), timm and torchvision ResNets and latopt's CIFAR ResNets, torchvision's
``features`` + ``classifier`` networks (MobileNetV2/V3) and its MNASNet. The blocks (as
:func:`latopt.nets.blocks.find_blocks` sees them) must be one contiguous run: modules before them belong to the
stem, after them to the head.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

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


def split_blocks(model: nn.Module, containers: Sequence[str]) -> tuple[list[str], list[str]]:
    """The modules of ``containers`` (paths of nn.Sequential stages, in forward order) before and after their
    blocks, as paths: the containers are flattened (a child that is a block is one item; a Sequential child
    holding blocks is opened). LatoptError when the blocks are not one contiguous run or there are none."""
    from latopt.adapters import adapter_for

    def holds_block(m: nn.Module) -> bool:
        return any(adapter_for(x) is not None for x in m.modules())

    items: list[tuple[str, bool]] = []

    def walk(path: str, m: nn.Module) -> None:
        for name, child in m.named_children():
            p = f"{path}.{name}"
            if adapter_for(child) is not None:
                items.append((p, True))
            elif isinstance(child, nn.Sequential) and holds_block(child):
                walk(p, child)
            else:
                items.append((p, False))

    for c in containers:
        walk(c, model.get_submodule(c))
    idx = [i for i, (_, b) in enumerate(items) if b]
    if not idx:
        raise LatoptError(f"no blocks latopt knows in {', '.join(containers)}")
    if idx != list(range(idx[0], idx[-1] + 1)):
        gap = next(p for p, b in items[idx[0]:idx[-1]] if not b)
        raise LatoptError(f"the blocks are not one contiguous run: {gap} ({type(model.get_submodule(gap)).__name__}) "
                          "sits between them, so latopt cannot time the network block by block (no LUT, no DP; a "
                          "VGG's max-pools sit between its conv pairs): fold it with Layer Folding's uniform costs "
                          "instead (latopt fold with lut: null, fold.mode: paper)")
    return [p for p, _ in items[:idx[0]]], [p for p, _ in items[idx[-1] + 1:]]


def seq(model: nn.Module, paths: Sequence[str]) -> nn.Sequential:
    """The modules at ``paths`` of ``model`` (shared, not copied) as one nn.Sequential."""
    return nn.Sequential(*(model.get_submodule(p) for p in paths))


def fixed_parts(model: nn.Module) -> FixedParts:
    """Stem and head of ``model`` from the first stem/head adapter that knows its layout.

    ``head(blocks(stem(x)))`` equals ``model(x)`` in eval mode (checked in tests/test_blocks.py and
    tests/test_adapters.py)."""
    from latopt.adapters import stem_head_adapters

    for a in stem_head_adapters():
        if a.match(model):
            return a.parts(model)
    cls = type(model)
    raise LatoptError(f"do not know the stem/head layout of {cls.__module__}.{cls.__name__}")
