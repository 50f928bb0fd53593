"""Deferred bias maps: an exact-mode folded network with one bias map per chain of folds, not per block.

An exact-mode ``full`` fold is a k×k convolution plus a bias map (the border correction, one ``Add`` of a
(1, C, H, W) constant). On ONNX Runtime's CPU provider that ``Add`` cannot stay in the blocked NCHWc
layout, so every folded block pays a reorder pair and an ``Add`` that paper mode does not
(``tools/bench_export.py`` measures the difference). The shipped form adds the maps once per chain instead:

- a *chain* is a maximal run of consecutive exact-mode affine FoldedBlocks — ``full``, ``pw`` (a 1x1
  convolution, no map of its own) and ``drop`` (the identity) — in ``find_blocks`` order, in which each
  block's output tensor is the next block's input tensor (checked with forward hooks on one zero input:
  :func:`latopt.nets.blocks.block_io`). A partial variant (``expand_dw`` keeps its own map, which must be added
  before its activation; ``dw_project`` has none), a block not folded, a paper-mode fold, a fold that keeps
  an activation after it (``FoldInfo.post_act``: ResNet, MobileNetV1) and a break in the data flow end a chain;
- such a chain is affine (each block: convolution + constant interior bias + its map, or the identity; a
  residual is a centre tap inside the convolution), and with and without its maps it has the same linear
  part, so ``chain(x) = chain_without_maps(x) + D`` for every input x, with
  ``D = chain(0) − chain_without_maps(0)``, computed in float64 from the FoldedBlocks themselves (exact
  for whatever weights they hold, post-fold fine-tuning included);
- in the rewritten copy every block of the chain has ``bias_map`` None (no ``Add``: paper mode's graph)
  and the chain's last block holds D in its ``bias_map`` buffer (the shape its own map has,
  (1, cout, Ho, Wo); a chain ending in a t = 1, ``pw`` or ``drop`` block, which has no map of its own,
  gets the buffer).

Public API::

    find_chains(model, input_size) -> list[list[int]]       the chains, as lists of block indices
    defer_bias_maps(model, input_size) -> (copy, Deferred)  Deferred: chains, adds_per_block, adds_deferred,
                                                            adds_saved

It is an export-time rewrite: a checkpoint's architecture and state dict never hold the deferred form
(``fold_spec`` and ``verify_fold`` work on the per-block form; in a deferred copy the blocks inside a
chain are, alone, wrong on their border by design). The hook check cannot see a second consumer of a
block's output inside a chain (a feature tap, an FPN); the supported classifiers have none, and export's
gate "deferred bias maps vs exact folded network" compares the outputs, so such a model fails it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn

from latopt.nets.blocks import block_io, find_blocks, input_channels
from latopt.nets.layers import FoldedBlock
from latopt.nets.variants import VARIANTS


def _chain_member(m: nn.Module) -> bool:
    # the affine FoldedBlocks (latopt.nets.variants) in exact mode; a fold that keeps an activation after its residual
    # addition (a ResNet block) is not affine: it ends a chain (a dropped one is the identity, its activation too)
    if not isinstance(m, FoldedBlock) or m.info.mode != "exact":
        return False
    spec = VARIANTS[m.info.variant]
    return spec.affine and not (m.info.post_act and spec.convs)


def find_chains(model: nn.Module, input_size: tuple[int, int]) -> list[list[int]]:
    """The chains of ``model`` (see the module docstring) for a network input of ``input_size`` (H, W)."""
    blocks = find_blocks(model)
    members = {b.index for b in blocks if _chain_member(model.get_submodule(b.path))}
    if not members:
        return []
    io = block_io(model, (1, input_channels(model), int(input_size[0]), int(input_size[1])))
    chains: list[list[int]] = []
    prev: int | None = None
    for b in blocks:
        if b.index not in members or b.index not in io:
            prev = None
            continue
        if prev is not None and io[b.index][0] is io[prev][1]:
            chains[-1].append(b.index)
        else:
            chains.append([b.index])
        prev = b.index
    return chains


def _like(mods: list[FoldedBlock]) -> torch.Tensor:
    """A tensor of the chain's dtype and device (a dropped block has no weights; a chain with a map has
    a block that has)."""
    return next(t for m in mods for t in (*m.parameters(), *m.buffers()))


@torch.no_grad()
def _chain_offset(mods: list[FoldedBlock]) -> torch.Tensor:
    """D = chain(0) − chain_without_maps(0) in float64 (the blocks are copied, not changed)."""
    chain = [copy.deepcopy(m).to(torch.float64).eval() for m in mods]
    first = mods[0].info
    assert first.in_size is not None  # an exact-mode fold records its input size
    x = torch.zeros(1, first.cin, *first.in_size, dtype=torch.float64, device=_like(mods).device)
    with_maps = x
    for m in chain:
        with_maps = m(with_maps)
    for m in chain:
        m.bias_map = None
    without = x
    for m in chain:
        without = m(without)
    return with_maps - without


@dataclass(frozen=True)
class Deferred:
    """What :func:`defer_bias_maps` did: the chains (block indices), the bias-map Adds of the chains' blocks before
    (``adds_per_block``), after (``adds_deferred``: one per chain that had a map) and the difference."""

    chains: list[list[int]]
    adds_per_block: int
    adds_deferred: int
    adds_saved: int


@torch.no_grad()
def defer_bias_maps(model: nn.Module, input_size: tuple[int, int]) -> tuple[nn.Module, Deferred]:
    """A copy of ``model`` with one bias map per chain (module docstring) and what was done (:class:`Deferred`).
    ``model`` is unchanged; a model with no exact-mode ``full`` fold comes back as an unchanged copy."""
    out = copy.deepcopy(model)
    paths = {b.index: b.path for b in find_blocks(out)}
    chains = find_chains(out, input_size)
    before = after = 0
    for chain in chains:
        # chain members are FoldedBlocks (_chain_member)
        mods = [m for m in (out.get_submodule(paths[i]) for i in chain) if isinstance(m, FoldedBlock)]
        maps = sum(m.bias_map is not None for m in mods)
        before += maps
        after += bool(maps)
        if len(chain) < 2 or not maps:
            continue  # nothing to move: a lone block keeps its own map
        d = _chain_offset(mods)
        like = _like(mods)
        for m in mods:
            m.bias_map = None
        mods[-1].bias_map = d.to(dtype=like.dtype, device=like.device)
    return out, Deferred(chains=chains, adds_per_block=before, adds_deferred=after, adds_saved=before - after)
