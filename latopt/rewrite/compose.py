"""Pure tensor algebra of the fold (no models here): BN folding, composition of
expand (1x1) → depthwise (k×k) → project (1x1) into one k×k convolution, bias maps and border masks.

All functions take and return float64 tensors (callers cast in and out) so the composed weights carry
no float32 rounding of their own.

Notation (BN already folded, W' and b'): W1 (hidden, cin) expand, W2 (hidden, k, k) depthwise,
W3 (cout, hidden) project.

- full:        K[o,i] = Σ_c W3[o,c] W2[c] W1[c,i];  bias kernel Kb[o] = Σ_c W3[o,c] W2[c] b1[c];
               const[o] = Σ_c W3[o,c] b2[c] + b3[o];  a residual adds 1 at the centre tap of K[o,o].
- expand_dw:   K[c,i] = W2[c] W1[c,i];  Kb[c] = W2[c] b1[c];  const = b2.
- dw_project:  K[o,c] = W3[o,c] W2[c];  no bias kernel (the zero padding sees the activation output);
               const = W3 b2 + b3.
- t = 1 full:  as dw_project with cin = hidden (no expand), plus the residual centre tap.
- pw:          K[o,i] = Σ_c W3[o,c] W1[c,i] (1x1, the block's stride; t = 1: K = W3); const = W3 b1 + b3
               (t = 1: b3); a residual adds the identity matrix. No bias kernel: a 1x1 convolution has no
               padding, so the constant bias is exact everywhere. (The depthwise conv and its BN, b2, are
               not part of the pw variant network.)

- dense:       a dense k×k middle convolution (ResNet Bottleneck, EdgeResidual): ``compose_dense``, the same
               sums with W2[d,c] for W2[c]; a projection shortcut is added at the centre tap.
- basic:       two k×k convolutions (ResNet BasicBlock): ``compose_basic``, one larger convolution, exact
               away from the border only (the interior bias, no bias kernel).

The bias is B[o,y,x] = conv(ones image, Kb)[o,y,x] + const[o] (exact, borders included); the interior
value Σ Kb[o] + const[o] is the ``paper`` mode's constant bias.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.utils.fusion import fuse_conv_bn_weights

Padding = int | str  # symmetric zero padding, or "same" (TensorFlow SAME)


@dataclass
class AffineConv:
    """y = conv(x, weight; stride, padding) + conv(ones, bias_kernel; stride, padding) + const."""

    weight: torch.Tensor             # (cout, cin, k, k)
    bias_kernel: torch.Tensor | None  # (cout, k, k) or None (bias is constant everywhere)
    const: torch.Tensor               # (cout,)
    stride: int
    padding: Padding

    @property
    def interior_bias(self) -> torch.Tensor:
        """The bias away from the border (the ``paper`` mode's constant bias)."""
        if self.bias_kernel is None:
            return self.const
        return self.bias_kernel.sum(dim=(1, 2)) + self.const


def fuse_bn(weight: torch.Tensor, bias: torch.Tensor | None, bn_mean: torch.Tensor, bn_var: torch.Tensor,
            bn_eps: float, bn_weight: torch.Tensor | None, bn_bias: torch.Tensor | None
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """W' = diag(γ/√(σ²+ε))·W, b' = β + (b − μ)·γ/√(σ²+ε), in float64 (torch.nn.utils.fusion)."""
    d = torch.float64

    def c(t: torch.Tensor) -> torch.Tensor:
        return t.detach().to(d)

    def c_opt(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else c(t)

    w, b = fuse_conv_bn_weights(c(weight), c_opt(bias), c(bn_mean), c(bn_var), bn_eps, c_opt(bn_weight),
                                c_opt(bn_bias))
    return w.detach(), b.detach()


def _mat(w: torch.Tensor) -> torch.Tensor:
    """(o, i, 1, 1) → (o, i)."""
    return w.reshape(w.shape[0], w.shape[1])


def _dw(w: torch.Tensor) -> torch.Tensor:
    """(c, 1, k, k) → (c, k, k)."""
    return w.reshape(w.shape[0], w.shape[-2], w.shape[-1])


def compose_full(w1: torch.Tensor | None, b1: torch.Tensor | None, w2: torch.Tensor, b2: torch.Tensor,
                 w3: torch.Tensor, b3: torch.Tensor, *, residual: bool, stride: int,
                 padding: Padding) -> AffineConv:
    """Whole block (both activations linear) → one k×k conv cin → cout. ``w1 is None`` for t = 1."""
    W2, W3 = _dw(w2), _mat(w3)
    hidden, k = W2.shape[0], W2.shape[-1]
    if w1 is None:
        K = W3[:, :, None, None] * W2[None]                            # (cout, hidden=cin, k, k)
        Kb = None
    else:
        assert b1 is not None  # an expansion convolution has a (BN-folded) bias
        W1 = _mat(w1)
        A = W2[:, None] * W1[:, :, None, None]                         # (hidden, cin, k, k)
        K = (W3 @ A.reshape(hidden, -1)).reshape(W3.shape[0], W1.shape[1], k, k)
        Kb = (W3 @ (W2 * b1[:, None, None]).reshape(hidden, -1)).reshape(W3.shape[0], k, k)
    const = W3 @ b2 + b3
    if residual:
        if K.shape[0] != K.shape[1] or stride != 1:
            raise ValueError("a residual needs cin == cout and stride 1")
        K = K.clone()
        idx = torch.arange(K.shape[0])
        K[idx, idx, k // 2, k // 2] += 1.0
    return AffineConv(K, Kb, const, stride, padding)


def compose_expand_dw(w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor, *,
                      stride: int, padding: Padding) -> AffineConv:
    """expand (1x1) + depthwise (k×k) → one k×k conv cin → hidden (act1 removed)."""
    W1, W2 = _mat(w1), _dw(w2)
    K = W2[:, None] * W1[:, :, None, None]
    Kb = W2 * b1[:, None, None]
    return AffineConv(K, Kb, b2.clone(), stride, padding)


def compose_dw_project(w2: torch.Tensor, b2: torch.Tensor, w3: torch.Tensor, b3: torch.Tensor, *,
                       stride: int, padding: Padding) -> AffineConv:
    """depthwise (k×k) + project (1x1) → one k×k conv hidden → cout (act2 removed); constant bias."""
    W2, W3 = _dw(w2), _mat(w3)
    K = W3[:, :, None, None] * W2[None]
    return AffineConv(K, None, W3 @ b2 + b3, stride, padding)


def compose_pw(w1: torch.Tensor | None, b1: torch.Tensor | None, w3: torch.Tensor, b3: torch.Tensor, *,
               residual: bool, stride: int) -> AffineConv:
    """expand (1x1) + project (1x1), depthwise removed → one 1x1 conv cin → cout with the block's stride."""
    W3 = _mat(w3)
    K = W3 if w1 is None else W3 @ _mat(w1)
    if w1 is None:
        const = b3.clone()
    else:
        assert b1 is not None  # an expansion convolution has a (BN-folded) bias
        const = W3 @ b1 + b3
    if residual:
        if K.shape[0] != K.shape[1] or stride != 1:
            raise ValueError("a residual needs cin == cout and stride 1")
        K = K + torch.eye(K.shape[0], dtype=K.dtype, device=K.device)
    return AffineConv(K[:, :, None, None].contiguous(), None, const, stride, 0)


def same_pads(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow SAME padding (before, after) along one axis, as timm's ``pad_same``."""
    total = max((math.ceil(size / stride) - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def conv_geometry(x: torch.Tensor, weight: torch.Tensor, stride: int, padding: Padding) -> torch.Tensor:
    """conv2d(x, weight) with symmetric int padding or TF SAME padding."""
    if padding == "same":
        k = weight.shape[-1]
        ph, pw = same_pads(x.shape[-2], k, stride), same_pads(x.shape[-1], k, stride)
        return F.conv2d(F.pad(x, (pw[0], pw[1], ph[0], ph[1])), weight, stride=stride)
    return F.conv2d(x, weight, stride=stride, padding=int(padding))


def bias_map(ac: AffineConv, input_size: tuple[int, int]) -> torch.Tensor:
    """The exact bias B (cout, Ho, Wo) for an input of ``input_size`` = conv(ones, Kb) + const."""
    H, W = int(input_size[0]), int(input_size[1])
    k = ac.weight.shape[-1]
    if ac.bias_kernel is None:
        dummy = torch.zeros(1, 1, k, k, dtype=ac.const.dtype)
        Ho, Wo = conv_geometry(torch.zeros(1, 1, H, W, dtype=ac.const.dtype), dummy, ac.stride, ac.padding).shape[-2:]
        return ac.const[:, None, None].expand(-1, Ho, Wo).clone()
    ones = torch.ones(1, 1, H, W, dtype=ac.bias_kernel.dtype, device=ac.bias_kernel.device)
    m = conv_geometry(ones, ac.bias_kernel[:, None], ac.stride, ac.padding)[0]
    return m + ac.const[:, None, None]


def border_mask(input_size: tuple[int, int], kernel: int, stride: int, padding: Padding) -> torch.Tensor:
    """Bool (Ho, Wo): True where the k×k window reaches into the padding (where ``paper`` mode's
    constant bias differs from the exact bias). One pixel wide for k = 3, up to two for k = 5."""
    H, W = int(input_size[0]), int(input_size[1])
    ones = torch.ones(1, 1, H, W, dtype=torch.float64)
    cover = conv_geometry(ones, torch.ones(1, 1, kernel, kernel, dtype=torch.float64), stride, padding)[0, 0]
    return cover < kernel * kernel - 0.5


def apply_affine(ac: AffineConv, x: torch.Tensor) -> torch.Tensor:
    """Reference evaluation of an AffineConv (exact bias map) — for tests."""
    y = conv_geometry(x, ac.weight.to(x.dtype), ac.stride, ac.padding)
    return y + bias_map(ac, (int(x.shape[-2]), int(x.shape[-1]))).to(x.dtype)[None]


def compose_dense(w1: torch.Tensor | None, b1: torch.Tensor | None, w2: torch.Tensor, b2: torch.Tensor,
                  w3: torch.Tensor, b3: torch.Tensor, *, residual: bool, stride: int, padding: Padding,
                  shortcut: tuple[torch.Tensor, torch.Tensor] | None = None) -> AffineConv:
    """Whole block with a *dense* k×k middle convolution (both activations linear) → one k×k conv cin → cout:
    a ResNet Bottleneck (1x1 → k×k → 1x1) or, ``w1 is None``, an EdgeResidual (k×k → 1x1). W2 is
    (hidden_out, hidden_in, k, k): K[o,i] = Σ_d Σ_c W3[o,d] W2[d,c] W1[c,i], bias kernel
    Kb[o] = Σ_d Σ_c W3[o,d] W2[d,c] b1[c] (the expansion bias through the zero-padded k×k), const = W3 b2 + b3.
    A residual adds 1 at the centre tap of K[o,o]; a projection ``shortcut`` (its 1x1 weight and bias, BN
    folded, the block's stride) adds its matrix at the centre tap and its bias to const — a stride-s 1x1 reads
    x at (s·y, s·x), as the centre tap of a stride-s k×k with padding k//2 does."""
    W3 = _mat(w3)
    if w1 is None:
        K = torch.einsum("od,dikl->oikl", W3, w2)
        Kb = None
    else:
        W1 = _mat(w1)
        K = torch.einsum("od,dckl,ci->oikl", W3, w2, W1)
        Kb = torch.einsum("od,dckl,c->okl", W3, w2, b1)
    const = W3 @ b2 + b3
    return _add_skip(AffineConv(K.contiguous(), Kb, const, stride, padding), residual, shortcut)


def compose_basic(wa: torch.Tensor, ba: torch.Tensor, wb: torch.Tensor, bb: torch.Tensor, *, residual: bool,
                  stride: int, padding_a: int, padding_b: int,
                  shortcut: tuple[torch.Tensor, torch.Tensor] | None = None) -> AffineConv:
    """Two dense convolutions A (k_a × k_a, ``stride``, ``padding_a``) then B (k_b × k_b, stride 1,
    ``padding_b``), the activation between them linear → one convolution of size k_a + s·(k_b − 1), stride s,
    padding p_a + s·p_b: K[o,i,s·a + u] = Σ_c B[o,c,a] A[c,i,u]. Exact only away from the border (B zero-pads
    A's output; the composed convolution computes A there), so the bias is the interior constant
    (``bias_kernel`` None): B's taps summed times A's bias, plus B's bias. Residual / shortcut as
    :func:`compose_dense`."""
    s = int(stride)
    ka, kb = wa.shape[-1], wb.shape[-1]
    kk = ka + s * (kb - 1)
    K = torch.zeros(wb.shape[0], wa.shape[1], kk, kk, dtype=wa.dtype, device=wa.device)
    for a in range(kb):
        for c in range(kb):
            K[:, :, s * a:s * a + ka, s * c:s * c + ka] += torch.einsum("oc,cikl->oikl", wb[:, :, a, c], wa)
    const = wb.sum(dim=(2, 3)) @ ba + bb
    return _add_skip(AffineConv(K, None, const, s, int(padding_a) + s * int(padding_b)), residual, shortcut)


def _add_skip(ac: AffineConv, residual: bool, shortcut: tuple[torch.Tensor, torch.Tensor] | None) -> AffineConv:
    """The identity (``residual``) or a 1x1 projection shortcut added at the centre tap of ``ac``."""
    if not residual and shortcut is None:
        return ac
    K, const = ac.weight.clone(), ac.const.clone()
    c = K.shape[-1] // 2
    if residual:
        if K.shape[0] != K.shape[1] or ac.stride != 1:
            raise ValueError("a residual needs cin == cout and stride 1")
        idx = torch.arange(K.shape[0])
        K[idx, idx, c, c] += 1.0
    elif shortcut is not None:  # not residual: a shortcut (the early return above)
        ws, bs = shortcut
        K[:, :, c, c] += _mat(ws)
        const = const + bs
    return AffineConv(K, ac.bias_kernel, const, ac.stride, ac.padding)
