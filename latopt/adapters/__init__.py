"""Block adapters and stem/head adapters: what latopt knows about the parts of a network, in one registry.

A **block adapter** (:class:`BlockAdapter`) recognises one kind of block by the module's type and structure
(``match``) and describes it (``describe`` → :class:`latopt.nets.blocks.Block`): its convolutions, norms and
activations (paths), residual or projection shortcut, stride, whether it has squeeze-excitation (then not
foldable, with the reason; a residual one may still be dropped), its ``layout``, which says how its variants
are built and folded (:mod:`latopt.rewrite.transform` and the algebra of :mod:`latopt.rewrite.compose`), and so which
variants are exact for it (``Block.variants``, ``Block.fold_modes``). :func:`latopt.nets.blocks.find_blocks` walks a model and asks
the adapters in registration order; the first whose ``match`` is true describes the module.

A **stem/head adapter** (:class:`StemHeadAdapter`) recognises a model's layout and returns its
:class:`latopt.nets.stemhead.FixedParts` (:func:`latopt.nets.stemhead.fixed_parts` asks them in order).

Adding a block type is one module that calls :func:`register_block` (and, for a new network layout,
:func:`register_stem_head`) at import, imported at the end of this file. The built-in ones:

- :mod:`latopt.adapters.mbconv`: timm ``InvertedResidual`` / ``DepthwiseSeparableConv`` / ``EdgeResidual``
  and torchvision ``InvertedResidual``;
- :mod:`latopt.adapters.resnet`: timm and torchvision ResNet ``BasicBlock`` / ``Bottleneck``;
- :mod:`latopt.adapters.folded`: latopt's own FoldedBlock / PointwiseBlock / merged spans (not foldable again);
- :mod:`latopt.adapters.vgg`: a pair of consecutive convolutions of a VGG stage (``ConvPair``, grouped by
  ``pair_convs_``) and the VGG stem/head layout;
- :mod:`latopt.adapters.layouts`: the stems and heads of timm EfficientNet / MobileNet, timm and torchvision
  ResNets, torchvision's ``features`` + ``classifier`` networks and latopt's CIFAR ResNets.

Public API::

    BlockAdapter(name, family, match, describe)     register_block(adapter)     block_adapters()
    adapter_for(module) -> BlockAdapter | None
    StemHeadAdapter(name, match, parts)             register_stem_head(adapter) stem_head_adapters()
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from latopt.adapters.anatomy import Block


@dataclass(frozen=True)
class BlockAdapter:
    """``match(module)``: is this a block this adapter knows; ``describe(index, path, module)``: its Block.
    ``family`` ("timm" / "torchvision" / "latopt") is what :func:`latopt.nets.blocks.block_kind` returns."""

    name: str
    family: str
    match: Callable[[nn.Module], bool]
    describe: Callable[[int, str, nn.Module], Block]


@dataclass(frozen=True)
class StemHeadAdapter:
    """``match(model)``: is this a layout this adapter knows; ``parts(model)``: its FixedParts (LatoptError
    with the reason when the layout is known but its blocks are not where the stem and head need them)."""

    name: str
    match: Callable[[nn.Module], bool]
    parts: Callable[[nn.Module], Any]  # -> latopt.nets.stemhead.FixedParts (stemhead imports this module)


_BLOCKS: list[BlockAdapter] = []
_STEM_HEADS: list[StemHeadAdapter] = []


def register_block(adapter: BlockAdapter) -> BlockAdapter:
    if any(a.name == adapter.name for a in _BLOCKS):
        raise ValueError(f"block adapter {adapter.name!r} is registered twice")
    _BLOCKS.append(adapter)
    return adapter


def register_stem_head(adapter: StemHeadAdapter) -> StemHeadAdapter:
    if any(a.name == adapter.name for a in _STEM_HEADS):
        raise ValueError(f"stem/head adapter {adapter.name!r} is registered twice")
    _STEM_HEADS.append(adapter)
    return adapter


def block_adapters() -> tuple[BlockAdapter, ...]:
    return tuple(_BLOCKS)


def stem_head_adapters() -> tuple[StemHeadAdapter, ...]:
    return tuple(_STEM_HEADS)


def adapter_for(m: nn.Module) -> BlockAdapter | None:
    """The first registered block adapter that recognises ``m``, None when none does."""
    for a in _BLOCKS:
        if a.match(m):
            return a
    return None


def from_library(m: nn.Module, library: str, *names: str) -> bool:
    """Whether ``m``'s class is one of ``names`` defined in ``library`` (a package, e.g. "timm"): the
    adapters' type test, which needs no import of the library's private modules."""
    cls = type(m)
    return cls.__module__.split(".")[0] == library and cls.__name__ in names


# the built-in adapters register themselves, in this order (latopt's own modules first: a FoldedBlock is
# never anything else)
from latopt.adapters import folded, mbconv, resnet, vgg, layouts  # noqa: E402,F401,I001
