"""Spans: a run of consecutive folded blocks as one convolution, where that is exact.

The algebra of merged spans: the profiler times the exact ones (:mod:`latopt.latency.merged_spans`), the DP chooses
them (:mod:`latopt.dp.span_options`) and export merges them (:mod:`latopt.rewrite.merge`). Every affine FoldedBlock is one convolution plus a constant (its interior bias and, in exact
mode, its bias map): ``full`` a k×k convolution (the residual a centre tap), ``pw`` a 1x1 convolution with
the block's stride (the residual an identity matrix), ``drop`` the identity. A span is exact when the
composition of its linear parts is itself one convolution:

- 1x1 ∘ 1x1 is a 1x1 (the matrices multiply). A stride-s 1x1 convolution samples at (s·y, s·x), so strides
  multiply: x[s1·(s2·y)] = x[s1·s2·y], and the sizes agree, ⌈⌈H/s1⌉/s2⌉ = ⌈H/(s1·s2)⌉.
- 1x1 (stride t) ∘ k×k (stride s, padding p) is a k×k with stride s·t and the same padding: the output at y
  reads x at s·t·y − p + i, and ⌊⌊a/s⌋/t⌋ = ⌊a/(s·t)⌋ (a = H + 2p − k) gives the same output size. With TF
  "SAME" padding the pads depend on the stride, so it is exact only when the pad before is the same at
  stride s and s·t for the span's input size (checked; refused otherwise).
- k×k ∘ 1x1 (stride 1) is a k×k: the 1x1 maps zero padding to zero. A strided 1x1 before a k×k is a dilated
  kernel and two k×k grow the kernel: both refused. So a span has at most one ``full`` fold, and only
  stride-1 blocks before it.
- An as-is block (``none``) keeps its activations and a partial fold (``expand_dw``, ``dw_project``) keeps
  one: not affine, refused.

The span is then affine with that linear part L, so span(x) = L(x) + span(0) for every x: the constant
part is computed in float64 by running the blocks on a zero input (as :mod:`latopt.rewrite.defer` does for a
chain). It is the composed interior bias plus, where a block has a bias map or a 1x1 bias reaches a k×k
border, a bias map (the exact mode's border correction, zero in the interior).

Public API::

    span_exact(variants, strides, *, kernel=1, padding=0, in_size=None) -> (bool, reason)
    span_exact_blocks(blocks, in_size=None) -> (bool, reason)     the same, read from FoldedBlocks
    span_kernel(blocks) -> int                                    the kernel the FoldedBlocks compose to
    compose_span(blocks, input_size) -> SpanConv                  the span as one convolution
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from latopt.errors import LatoptError
from latopt.nets.layers import FoldedBlock, FoldInfo, make_kxk
from latopt.nets.variants import SPAN_INNER, VARIANTS
from latopt.rewrite.compose import Padding, border_mask, same_pads

# what a span's blocks other than its one full fold may be (latopt.nets.variants: pw, drop: a 1x1, the identity)
SPAN_VARIANTS = ("full", *SPAN_INNER)  # the affine variants; at most one full per span


def span_exact(variants: Sequence[str], strides: Sequence[int], *, kernel: int = 1, padding: Padding = 0,
               in_size: tuple[int, int] | None = None) -> tuple[bool, str]:
    """Whether consecutive blocks with these variants and strides compose exactly into one convolution
    (module docstring), and why not. ``kernel``/``padding`` are the ``full`` block's; ``in_size`` (H, W) is
    that block's input size, needed only for TF "SAME" padding with a stride after it."""
    variants, strides = list(variants), [int(s) for s in strides]
    if not variants:
        return False, "an empty span"
    if len(strides) != len(variants):
        return False, f"{len(variants)} variants but {len(strides)} strides"
    for i, v in enumerate(variants):
        if v == "none":
            return False, f"block {i} of the span is as-is (its activations are not linear)"
        if v not in SPAN_VARIANTS:
            return False, f"block {i} of the span is the partial fold {v!r} (it keeps an activation)"
        if not VARIANTS[v].convs and strides[i] != 1:   # dropped: the identity has no stride
            return False, f"block {i} of the span is dropped but has stride {strides[i]}"
    fulls = [i for i, v in enumerate(variants) if v == "full"]
    if len(fulls) > 1:
        return False, (f"blocks {fulls[0]} and {fulls[1]} of the span are both full folds (a k×k after a "
                       "k×k grows the kernel)")
    if not fulls or kernel == 1:
        return True, "1x1 convolutions: the matrices multiply, the strides multiply"
    f = fulls[0]
    before = [i for i in range(f) if strides[i] != 1]
    if before:
        return False, (f"block {before[0]} of the span has stride {strides[before[0]]} before the full fold "
                       "(a strided 1x1 before a k×k is a dilated kernel)")
    tail = 1
    for s in strides[f + 1:]:
        tail *= s
    if padding == "same" and tail > 1:
        if in_size is None:
            return False, "TF SAME padding with a stride after the full fold needs the input size"
        s = strides[f]
        for n in in_size:
            if same_pads(int(n), kernel, s)[0] != same_pads(int(n), kernel, s * tail)[0]:
                return False, (f"TF SAME padding: the pad before differs at stride {s} and {s * tail} for "
                               f"size {int(n)} (the composed sampling grid would shift)")
    return True, f"one {kernel}x{kernel} convolution (1x1 parts around the full fold, stride {strides[f] * tail})"


def _infos(blocks: Sequence[nn.Module]) -> list:
    out = []
    for i, m in enumerate(blocks):
        if not isinstance(m, FoldedBlock):
            return [f"block {i} of the span is not folded ({type(m).__name__}: as-is, not linear)"]
        if m.info.post_act and VARIANTS[m.info.variant].convs:
            return [f"block {i} of the span keeps its {m.info.post_act} after the residual addition (not linear)"]
        out.append(m.info)
    return out


def _kernel(infos: Sequence) -> int:
    full = next((i for i in infos if i.variant == "full"), None)
    return full.kernel if full else 1


def span_kernel(blocks: Sequence[nn.Module]) -> int:
    """The kernel of the one convolution the FoldedBlocks ``blocks`` compose to (module docstring): the
    ``full`` fold's, 1 when every block is 1x1 or dropped. LatoptError when a block is not folded. (Whether
    the span is exact at all is :func:`span_exact_blocks`.)"""
    infos = _infos(blocks)
    if infos and isinstance(infos[0], str):
        raise LatoptError(f"span not exact: {infos[0]}")
    return _kernel(infos)


def span_exact_blocks(blocks: Sequence[nn.Module], in_size: tuple[int, int] | None = None) -> tuple[bool, str]:
    """:func:`span_exact` for FoldedBlocks (their FoldInfo); ``in_size`` = the span's input (H, W), by
    default the first block's recorded input size."""
    infos = _infos(blocks)
    if infos and isinstance(infos[0], str):
        return False, infos[0]
    if not infos:
        return False, "an empty span"
    full = next((i for i in infos if i.variant == "full"), None)
    size = in_size if in_size is not None else infos[0].in_size
    # before a full fold every block has stride 1 (else refused), so its input size is the span's
    return span_exact([i.variant for i in infos], [i.stride for i in infos],
                      kernel=_kernel(infos), padding=full.padding if full else 0, in_size=size)


class SpanConv(nn.Module):
    """A span as one convolution: ``conv`` (k×k or 1x1, the composed stride) [+ ``bias_map`` buffer
    (1, cout, Ho, Wo), the exact border correction, zero in the interior; None when there is none]."""

    if TYPE_CHECKING:  # for the type checker only (TorchScript reads class annotations)
        conv: nn.Conv2d
        bias_map: torch.Tensor | None  # a buffer
        info: FoldInfo  # set by latopt.rewrite.merge.merge_spans (variant "span")

    def __init__(self, conv: nn.Conv2d, bias_map: torch.Tensor | None) -> None:
        super().__init__()
        self.conv = conv
        self.register_buffer("bias_map", bias_map)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return y if self.bias_map is None else y + self.bias_map


def _compose(k: torch.Tensor, b: torch.Tensor, w: torch.Tensor, c: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel and interior bias of (w, c) applied after (k, b); one of the two kernels is 1x1."""
    if w.shape[-1] == 1:
        return torch.einsum("oc,cikl->oikl", w[:, :, 0, 0], k), w[:, :, 0, 0] @ b + c
    return torch.einsum("ockl,ci->oikl", w, k[:, :, 0, 0]), w.sum(dim=(2, 3)) @ b + c


@torch.no_grad()
def compose_span(blocks: Sequence[nn.Module], input_size: tuple[int, int]) -> SpanConv:
    """The consecutive FoldedBlocks ``blocks`` (each one's output the next one's input) as one convolution
    equal to running them one after another, for a span input of ``input_size`` (H, W). Composed in float64,
    stored in the blocks' dtype (the default dtype for a span of dropped blocks only). LatoptError with the reason when the span is not exact."""
    ok, why = span_exact_blocks(blocks, input_size)
    if not ok:
        raise LatoptError(f"span not exact: {why}")
    folded = [m for m in blocks if isinstance(m, FoldedBlock)]  # all of them (span_exact_blocks)
    infos = [m.info for m in folded]
    like = next((t for m in folded for t in (*m.parameters(), *m.buffers())), None)  # none: all dropped
    dtype = like.dtype if like is not None else torch.get_default_dtype()
    device = like.device if like is not None else torch.device("cpu")
    d = torch.float64
    k = torch.eye(infos[0].cin, dtype=d, device=device)[:, :, None, None]
    b = torch.zeros(infos[0].cin, dtype=d, device=device)
    padding: int | str = 0
    stride, needs_map, seen_bias = 1, False, False
    for m, i in zip(folded, infos, strict=True):
        needs_map = needs_map or m.bias_map is not None
        if not VARIANTS[i.variant].convs:   # dropped: the identity
            continue
        if i.variant == "full":
            padding = i.padding
            needs_map = needs_map or (seen_bias and i.kernel > 1)  # a 1x1 bias meets the k×k's padding
        seen_bias = seen_bias or bool(m.conv.bias is not None and m.conv.bias.abs().max() > 0)
        cb = m.conv.bias.to(d) if m.conv.bias is not None else torch.zeros(m.conv.out_channels, dtype=d, device=device)
        k, b = _compose(k, b, m.conv.weight.to(d), cb)
        stride *= i.stride
    kernel = k.shape[-1]
    conv = (make_kxk(k.shape[1], k.shape[0], kernel, stride, padding) if kernel > 1
            else nn.Conv2d(k.shape[1], k.shape[0], 1, stride, bias=True))
    conv = conv.to(dtype=dtype, device=device)
    assert conv.bias is not None  # made with bias=True
    conv.weight.copy_(k.to(dtype))
    conv.bias.copy_(b.to(dtype))
    bias_map = None
    if needs_map:
        x = torch.zeros(1, infos[0].cin, int(input_size[0]), int(input_size[1]), dtype=d, device=device)
        for m in folded:
            x = copy.deepcopy(m).to(d).eval()(x)
        delta = x[0] - b[:, None, None]
        if kernel > 1:  # zero away from the border, exactly (as a block's own map)
            delta[:, ~border_mask(input_size, kernel, stride, padding)] = 0.0
        bias_map = delta[None].to(dtype)
    return SpanConv(conv, bias_map).train(blocks[0].training)
