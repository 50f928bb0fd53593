"""Block adapter for VGG stacks: two consecutive k×k convolutions of one stage (each with its BN and ReLU) are one
block of layout ``basic``, as a ResNet BasicBlock without the shortcut.

A VGG network (torchvision ``vgg*``, timm ``vgg*``, latopt's ``vgg*_cifar``) has no block modules: its
``features`` is one flat ``nn.Sequential`` of Conv2d, [BatchNorm2d,] ReLU and MaxPool2d. :func:`pair_convs_`
(called by :func:`latopt.nets.models.build_model` for every model) finds such stacks by their structure, never by the
model's name, and groups each pair of consecutive conv units of a stage (the layers between two max-pools) into a
:class:`ConvPair` (``conv1 → bn1 → act1 → conv2 → bn2 → act2``): the function is unchanged, the modules are the
model's own, only the state-dict keys gain the pair's level (``features.3.conv1.weight``). A stage of three
convolutions gives one pair and a convolution left as it is; a stage of one, none.

The fold (``basic``): with act1 linear, two 3x3 convolutions compose into one 5x5 (padding 2), exact away from
the border (``paper`` mode only, ``Block.fold_modes``); ``act2`` is kept after the folded convolution
(``Block.post_act``). There is no skip, so no ``drop``. A stack without BatchNorm (torchvision ``vgg11``) is
grouped but not foldable: the fold algebra folds a convolution with its BN.

The max-pools between the stages sit between the blocks, so a VGG has no stem/head split latopt can time
(``latopt.nets.stemhead.split_blocks`` says where): ``latopt inspect`` and the folds work on it; ``latopt profile``
(and so the DP) refuses it with that reason.
"""

from __future__ import annotations

import torch
from torch import nn

from latopt.adapters import BlockAdapter, StemHeadAdapter, register_block, register_stem_head
from latopt.adapters.anatomy import Block, make_block
from latopt.adapters.block_layouts import BASIC
from latopt.nets.stemhead import FixedParts, _Head, seq, split_blocks

_UNIT = (nn.Conv2d, nn.BatchNorm2d, nn.ReLU)
_PLAIN = (*_UNIT, nn.MaxPool2d)


class ConvPair(nn.Module):
    """Two conv units of a VGG stage: ``act2(bn2(conv2(act1(bn1(conv1(x))))))``; ``bn1``/``bn2`` are
    ``nn.Identity`` in a stack without BatchNorm."""

    def __init__(self, conv1: nn.Conv2d, bn1: nn.Module, act1: nn.Module, conv2: nn.Conv2d, bn2: nn.Module,
                 act2: nn.Module) -> None:
        super().__init__()
        self.conv1, self.bn1, self.act1 = conv1, bn1, act1
        self.conv2, self.bn2, self.act2 = conv2, bn2, act2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act2(self.bn2(self.conv2(self.act1(self.bn1(self.conv1(x))))))


_Unit = tuple[nn.Conv2d, nn.Module, nn.Module]  # conv, its BN (nn.Identity when none), ReLU


def _units(mods: list[nn.Module]) -> list[_Unit] | None:
    """A stage's layers as conv units (Conv2d, [BatchNorm2d,] ReLU); None when they are anything else."""
    units: list[_Unit] = []
    i = 0
    while i < len(mods):
        conv = mods[i]
        if not isinstance(conv, nn.Conv2d):
            return None
        bn = i + 1 < len(mods) and isinstance(mods[i + 1], nn.BatchNorm2d)
        j = i + (2 if bn else 1)
        if j >= len(mods) or not isinstance(mods[j], nn.ReLU):
            return None
        units.append((conv, mods[i + 1] if bn else nn.Identity(), mods[j]))
        i = j + 1
    return units


def _grouped(seq: nn.Sequential) -> list[nn.Module] | None:
    """The children of ``seq`` with each pair of consecutive conv units of a stage as one ConvPair; None when
    ``seq`` is not a VGG stack (only Conv2d / BatchNorm2d / ReLU / MaxPool2d, at least two max-pools) or has no
    pair."""
    children = list(seq)
    if not all(type(m) in _PLAIN for m in children) or sum(type(m) is nn.MaxPool2d for m in children) < 2:
        return None
    out: list[nn.Module] = []
    stage: list[nn.Module] = []
    pairs = 0
    for m in [*children, None]:
        if m is not None and type(m) is not nn.MaxPool2d:
            stage.append(m)
            continue
        units = _units(stage)
        if units is None:
            out.extend(stage)
        else:
            for k in range(0, len(units) - 1, 2):
                out.append(ConvPair(*units[k], *units[k + 1]))
                pairs += 1
            if len(units) % 2:
                out.extend(x for x in units[-1] if not isinstance(x, nn.Identity))
        stage = []
        if m is not None:
            out.append(m)
    return out if pairs else None


def pair_convs_(model: nn.Module) -> int:
    """Group the conv pairs of every VGG stack of ``model`` into :class:`ConvPair` modules, in place (module
    docstring). Returns the number of pairs made; 0 (and ``model`` untouched) for any other network."""
    n = 0
    for m in list(model.modules()):
        if type(m) is not nn.Sequential:
            continue
        new = _grouped(m)
        if new is None:
            continue
        for name in list(m._modules):
            del m._modules[name]
        for i, child in enumerate(new):
            m.add_module(str(i), child)
        n += sum(isinstance(c, ConvPair) for c in new)
    return n


def _describe(index: int, path: str, m: nn.Module) -> Block:
    assert isinstance(m, ConvPair)  # the adapter's match
    mods: dict[str, nn.Module | None] = {"conv1": m.conv1, "bn1": m.bn1, "act1": m.act1, "conv2": m.conv2,
                                         "bn2": m.bn2, "post": m.act2}
    names = {"conv1": "conv1", "bn1": "bn1", "act1": "act1", "conv2": "conv2", "bn2": "bn2", "post": "act2"}
    no_bn = isinstance(m.bn1, nn.Identity) or isinstance(m.bn2, nn.Identity)
    reason = "convolutions without BatchNorm (a fold needs each convolution's BN)" if no_bn else ""
    return make_block(index, path, "latopt.ConvPair", mods, names, False, reason, layout=BASIC)


register_block(BlockAdapter("vgg", "latopt", lambda m: isinstance(m, ConvPair), _describe))


def _vgg_parts(model: nn.Module) -> FixedParts:
    """torchvision's and latopt's VGG: ``features`` + ``avgpool`` + ``classifier``. The max-pools between the
    stages split the blocks, so :func:`latopt.nets.stemhead.split_blocks` refuses it, naming the first one."""
    before, after = split_blocks(model, ["features"])
    head = _Head(seq(model, after), model.get_submodule("avgpool"), model.get_submodule("classifier"))
    return FixedParts(seq(model, before), head, tuple(before), (*after, "avgpool", "classifier"))


def _is_vgg(model: nn.Module) -> bool:
    feats, avgpool, classifier = (getattr(model, n, None) for n in ("features", "avgpool", "classifier"))
    return (isinstance(feats, nn.Sequential) and any(isinstance(c, ConvPair) for c in feats)
            and isinstance(avgpool, nn.Module) and isinstance(classifier, nn.Module))


register_stem_head(StemHeadAdapter("vgg", _is_vgg, _vgg_parts))
