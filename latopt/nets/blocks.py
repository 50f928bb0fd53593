"""Block discovery: one uniform view of every block of a model that latopt can change (or says why not).

What a block is comes from the **block adapters** of :mod:`latopt.adapters`: ``find_blocks`` walks the model
in module registration order and asks each registered adapter whether a module is a block it knows (by the
module's type and structure, never by the model's name); the first that answers describes it as a
:class:`Block`, and the walk does not descend into it. The built-in adapters recognise (matched by class,
never re-implemented):

- timm ``InvertedResidual`` (``conv_pw → bn1(+act) → conv_dw → bn2(+act) → conv_pwl → bn3``),
  ``DepthwiseSeparableConv`` (the t = 1 block ``conv_dw → bn1(+act) → conv_pw → bn2``) and ``EdgeResidual``
  (``conv_exp`` k×k dense → ``bn1(+act)`` → ``conv_pwl`` → ``bn2``); the activations live in
  ``BatchNormAct2d.act``; torchvision ``InvertedResidual`` (``Conv2dNormActivation`` children);
- timm and torchvision ResNet ``BasicBlock`` (two k×k) and ``Bottleneck`` (1x1 – k×k – 1x1), and latopt's
  CIFAR ResNets (:mod:`latopt.nets.cifar_resnets`), which use timm's blocks;
- latopt ``FoldedBlock`` (a block already folded, dropped ones included), ``PointwiseBlock`` (a block in
  its ``pw`` variant network) and merged spans: kept in the numbering, not foldable again. So a block keeps
  the index it has in the original network whatever variant it is in: an index always names the same block.

Public API::

    Block                                    frozen dataclass (see fields below)
    find_blocks(model) -> list[Block]        forward order; Block.index is the position in that list
    block_kind(module) -> str | None         "timm" / "torchvision" / "latopt" for a block module
    resolve_blocks(model, spec) -> list[Block]   spec: "all" (every foldable block) or indices
    block_input_shapes(model, input_shape) -> dict[int, tuple[int, ...]]
    block_io(model, input_shape) -> {index: (input tensor, output tensor)}   one zero input, hooks
    conv_output_size(size, kernel, stride, padding) -> int   one axis of a convolution's output

For adapters (defined in :mod:`latopt.adapters.anatomy`, re-exported here): ``make_block`` (a Block from the
named parts of a block, with the checks), ``check_conv``, ``check_bn``, ``conv_padding``, ``is_identity``.

The modules around the blocks (stem, head) are :mod:`latopt.nets.stemhead`.

A block that cannot be folded (squeeze-excitation, an activation σ_α does not support, anti-aliasing,
dilation, an activation after the projection, ...) is listed with ``foldable=False`` and the reason; a residual
squeeze-excitation block may still be dropped (``Block.drop_only``, variants ``("drop",)``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence

import torch
from torch import nn

from latopt.adapters import adapter_for
from latopt.adapters.anatomy import (  # noqa: F401 - re-exported: the public API of blocks
    Block,
    check_bn,
    check_conv,
    conv_padding,
    is_identity,
    make_block,
)
from latopt.errors import LatoptError


def block_kind(m: nn.Module) -> str | None:
    """"timm" / "torchvision" / "latopt" when an adapter of :mod:`latopt.adapters` recognises ``m`` as a
    block of that library, else None."""
    a = adapter_for(m)
    return None if a is None else a.family


def find_blocks(model: nn.Module) -> list[Block]:
    """Every block of ``model`` that an adapter recognises, in forward order (module registration order)."""
    blocks: list[Block] = []
    skip_prefixes: list[str] = []
    for path, m in model.named_modules():
        if any(path.startswith(p) for p in skip_prefixes):
            continue
        a = adapter_for(m)
        if a is None:
            continue
        skip_prefixes.append(path + ".")
        blocks.append(a.describe(len(blocks), path, m))
    return blocks


def resolve_blocks(model: nn.Module, spec: Sequence[int] | str) -> list[Block]:
    """Blocks named by ``spec``: "all" = every foldable block, or a sequence of indices / a string
    like "1,3,5". An index of a block that allows no variant, or out of range, is a LatoptError naming the block
    and reason; a ``drop_only`` block (squeeze-excitation) is named only by its index, and the variant asked of
    it is checked where the plan is (``latopt.rewrite.transform.check_variant``)."""
    blocks = find_blocks(model)
    if not blocks:
        raise LatoptError(f"no MBConv blocks found in {type(model).__name__}; `latopt inspect` lists what it has")
    if isinstance(spec, str):
        if spec.strip().lower() == "all":
            return [b for b in blocks if b.foldable]
        try:
            spec = [int(s) for s in spec.replace(" ", "").split(",") if s]
        except ValueError:
            raise LatoptError(f"bad block list {spec!r}: give 'all' or comma-separated indices like 1,3,5") from None
    out: list[Block] = []
    for item in spec:
        try:
            if isinstance(item, bool):
                raise TypeError
            i = int(item) if isinstance(item, str) else operator.index(item)
        except (TypeError, ValueError):
            raise LatoptError(f"bad block index {item!r}: indices are integers as `latopt inspect` prints them") from None
        if not 0 <= i < len(blocks):
            raise LatoptError(f"block index {i} is out of range: the model has blocks 0..{len(blocks) - 1}")
        b = blocks[i]
        if not b.variants:
            raise LatoptError(f"block {i} ({b.path}, {b.kind}) cannot be folded: {b.reason}")
        if b not in out:
            out.append(b)
    return out


@torch.no_grad()
def block_io(model: nn.Module, input_shape: tuple[int, int, int, int]) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """Every block's input and output tensor (the tensor objects themselves, so ``io[j][0] is io[i][1]``
    says that block j consumes block i's output) for one zero input of ``input_shape`` (N, C, H, W)."""
    if len(input_shape) != 4 or any(int(s) <= 0 for s in input_shape):
        raise LatoptError(f"input shape {tuple(input_shape)} must be (N, C, H, W) with positive sizes")
    blocks = find_blocks(model)
    io: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    handles = []
    for b in blocks:
        mod = model.get_submodule(b.path)

        def hook(_m: nn.Module, args: tuple, out: torch.Tensor, idx: int = b.index) -> None:
            io[idx] = (args[0], out)

        handles.append(mod.register_forward_hook(hook))
    was_training = model.training
    model.eval()
    try:
        p = next(model.parameters(), None)
        dtype = p.dtype if p is not None else torch.float32
        device = p.device if p is not None else torch.device("cpu")
        with torch.no_grad():
            model(torch.zeros(tuple(int(s) for s in input_shape), dtype=dtype, device=device))
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return io


def input_channels(model: nn.Module) -> int:
    """The channels of the network's input: those of its first convolution."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            return int(m.in_channels)
    raise LatoptError("the model has no Conv2d; cannot infer its input channels")


def block_input_shapes(model: nn.Module, input_shape: tuple[int, int, int, int]) -> dict[int, tuple[int, ...]]:
    """The real input shape (N, C, H, W) of every block for a network input of ``input_shape``."""
    return {i: tuple(x.shape) for i, (x, _) in block_io(model, input_shape).items()}


def conv_output_size(size: int, kernel: int, stride: int, padding: int | str) -> int:
    """Output length of a convolution along one axis ("same" = TF SAME: ceil(size / stride))."""
    if padding == "same":
        return math.ceil(size / stride)
    return (size + 2 * int(padding) - kernel) // stride + 1
