"""Stem/head adapters: where the stem and the head of a known network layout are (:mod:`latopt.nets.stemhead`)."""

from __future__ import annotations

from typing import Any

from torch import nn

from latopt.adapters import StemHeadAdapter, from_library, register_stem_head
from latopt.nets.stemhead import FixedParts, _Head, seq, split_blocks


def _has(model: nn.Module, *names: str) -> bool:
    return all(isinstance(getattr(model, n, None), nn.Module) for n in names)


def _timm_efficientnet(model: Any) -> FixedParts:
    """timm EfficientNet / MobileNetV1–V3 / MNASNet / FBNet...: conv_stem, bn1, blocks, then either conv_head,
    bn2, global_pool (EfficientNet) or global_pool, conv_head, norm_head, act2, flatten (MobileNetV3: the head
    convolution runs on the pooled map), classifier."""
    before, after = split_blocks(model, ["blocks"])
    stem = ["conv_stem", "bn1", *before]
    if _has(model, "norm_head"):  # MobileNetV3 layout
        pool = ["global_pool", *(n for n in ("conv_head", "norm_head", "act2") if _has(model, n))]
        feats = after
    else:
        pool = ["global_pool"]
        feats = [*after, *(n for n in ("conv_head", "bn2") if _has(model, n))]
    head = _Head(seq(model, feats), seq(model, pool), model.classifier)
    return FixedParts(seq(model, stem), head, tuple(stem), (*feats, *pool, "classifier"))


def _resnet(model: Any) -> FixedParts:
    """timm / torchvision ResNets and latopt's CIFAR ResNets: conv1, bn1, act1 (relu), maxpool, layer1..,
    global_pool (avgpool), fc."""
    layers = [f"layer{i}" for i in range(1, 10) if _has(model, f"layer{i}")]
    before, after = split_blocks(model, layers)
    stem = [*(n for n in ("conv1", "bn1", "act1", "relu", "maxpool") if _has(model, n)), *before]
    pool = "global_pool" if _has(model, "global_pool") else "avgpool"
    head = _Head(seq(model, after), model.get_submodule(pool), model.fc)
    return FixedParts(seq(model, stem), head, tuple(stem), (*after, pool, "fc"))


def _torchvision_features(model: Any) -> FixedParts:
    """torchvision's ``features`` (or MNASNet's ``layers``) + [``avgpool``] + ``classifier`` (MobileNetV2/V3,
    MNASNet); MobileNetV2 and MNASNet pool in their forward: a global average pool here."""
    body = "features" if _has(model, "features") else "layers"
    before, after = split_blocks(model, [body])
    pool = model.avgpool if _has(model, "avgpool") else nn.AdaptiveAvgPool2d(1)
    head = _Head(seq(model, after), pool, model.classifier)
    return FixedParts(seq(model, before), head, tuple(before),
                      (*after, *(["avgpool"] if _has(model, "avgpool") else []), "classifier"))


register_stem_head(StemHeadAdapter(
    "timm-efficientnet", lambda m: from_library(m, "timm", "EfficientNet", "MobileNetV3")
    and _has(m, "conv_stem", "bn1", "blocks", "global_pool", "classifier"), _timm_efficientnet))
register_stem_head(StemHeadAdapter(
    "resnet", lambda m: _has(m, "conv1", "bn1", "layer1", "fc")
    and (_has(m, "global_pool") or _has(m, "avgpool")), _resnet))
register_stem_head(StemHeadAdapter(
    "torchvision-features", lambda m: from_library(m, "torchvision", "MobileNetV2", "MobileNetV3", "MNASNet")
    and _has(m, "classifier") and (_has(m, "features") or _has(m, "layers")), _torchvision_features))
