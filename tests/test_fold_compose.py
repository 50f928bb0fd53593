"""Property tests of the fold algebra: one MBConv block, random BN statistics, random shapes.

Compares ``fold_blocks`` with ``linearize`` (float32 modules; the fold algebra runs in float64) and
``compose`` with a step-by-step float64 evaluation. Exact mode must match at every output position,
paper mode away from the border ring (``compose.border_mask``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from timm.models._efficientnet_blocks import DepthwiseSeparableConv, InvertedResidual
from torch import nn
from torchvision.models.mobilenetv2 import InvertedResidual as TvInvertedResidual

from latopt.errors import LatoptError
from latopt.nets.blocks import find_blocks
from latopt.rewrite import FoldedBlock, fold_blocks, linearize
from latopt.rewrite import compose as C

TOL = 1e-4  # exact: max |diff| <= 1e-4 * max |reference| (the bar of `latopt inspect --check-fold`)


def random_bn_(model: nn.Module, seed: int) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=g))
                m.running_var.copy_(torch.rand(n, generator=g) * 1.9 + 0.1)
                m.weight.copy_(1 + 0.5 * torch.randn(n, generator=g))
                m.bias.copy_(torch.randn(n, generator=g))
    return model.eval()


def make_block(family: str, cin: int, cout: int, t: int, k: int, stride: int, act: type[nn.Module]) -> nn.Module:
    if family == "torchvision":
        return TvInvertedResidual(cin, cout, stride, t)
    pad = "same" if family == "timm_same" else ""
    if t == 1:
        return DepthwiseSeparableConv(cin, cout, k, stride, pad_type=pad, act_layer=act)
    return InvertedResidual(cin, cout, k, stride, pad_type=pad, exp_ratio=float(t), act_layer=act)


@st.composite
def block_cases(draw: st.DrawFn) -> dict:
    family = draw(st.sampled_from(["timm", "timm_same", "torchvision"]))
    residual = draw(st.booleans())
    cin = draw(st.integers(1, 10))
    cout = cin if residual else draw(st.integers(1, 10))
    stride = 1 if residual else draw(st.sampled_from([1, 2]))
    return {
        "family": family, "cin": cin, "cout": cout, "stride": stride,
        "t": draw(st.sampled_from([1, 2, 6] if family == "torchvision" else [1, 2, 3, 6])),
        "k": 3 if family == "torchvision" else draw(st.sampled_from([3, 5])),
        "act": draw(st.sampled_from([nn.ReLU, nn.ReLU6])),
        "H": draw(st.integers(3, 14)), "W": draw(st.integers(3, 14)), "batch": draw(st.integers(1, 3)),
        "mode": draw(st.sampled_from(["exact", "paper"])), "variant_pick": draw(st.integers(0, 4)),
        "seed": draw(st.integers(0, 2**16)),
    }


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=block_cases())
def test_fold_matches_linearized_block(case: dict) -> None:
    torch.manual_seed(case["seed"])
    block = make_block(case["family"], case["cin"], case["cout"], case["t"], case["k"], case["stride"], case["act"])
    model = random_bn_(nn.Sequential(block), case["seed"])
    (b,) = find_blocks(model)
    assert b.foldable, b.reason
    assert b.residual == (case["cin"] == case["cout"] and case["stride"] == 1)
    variant = b.variants[case["variant_pick"] % len(b.variants)]
    H, W, mode = case["H"], case["W"], case["mode"]
    ref = linearize(model, {0: variant})
    folded = fold_blocks(model, {0: variant}, mode, (H, W))
    assert isinstance(folded[0], FoldedBlock)
    x = torch.randn(case["batch"], case["cin"], H, W, generator=torch.Generator().manual_seed(case["seed"]))
    with torch.no_grad():
        r, f = ref(x), folded(x)
    assert r.shape == f.shape
    diff = (f - r).abs()
    scale = float(r.abs().max()) or 1.0
    if mode == "exact":
        assert float(diff.max()) <= TOL * scale, (variant, float(diff.max()), scale)
    else:
        mask = C.border_mask((H, W), b.kernel, b.stride, b.padding)
        inner = diff[..., ~mask]
        assert inner.numel() == 0 or float(inner.max()) <= TOL * scale
        # paper folds run at any input size (no bias map buffer)
        with torch.no_grad():
            folded(torch.randn(1, case["cin"], H + 3, W + 1))


def _sequential(x, w1, b1, w2, b2, w3, b3, stride, padding, residual, drop):
    """Step-by-step float64 evaluation of a linearised block ('drop' names the removed activations)."""
    h = x
    if w1 is not None:
        h = F.conv2d(h, w1, b1)
        if "act1" not in drop:
            h = torch.relu(h)
    h = _dw(h, w2, stride, padding) + b2[:, None, None]
    if "act2" not in drop:
        h = torch.relu(h)
    y = F.conv2d(h, w3, b3)
    return y + x if residual else y


def _dw(h: torch.Tensor, w2: torch.Tensor, stride: int, padding: int | str) -> torch.Tensor:
    if padding == "same":
        k = w2.shape[-1]
        ph, pw = C.same_pads(h.shape[-2], k, stride), C.same_pads(h.shape[-1], k, stride)
        return F.conv2d(F.pad(h, (pw[0], pw[1], ph[0], ph[1])), w2, stride=stride, groups=w2.shape[0])
    return F.conv2d(h, w2, stride=stride, padding=padding, groups=w2.shape[0])


@settings(max_examples=60, deadline=None)
@given(cin=st.integers(1, 6), hidden=st.integers(1, 8), cout=st.integers(1, 6), k=st.sampled_from([3, 5]),
       stride=st.sampled_from([1, 2]), same=st.booleans(), H=st.integers(2, 11), W=st.integers(2, 11),
       expand=st.booleans(), seed=st.integers(0, 2**16))
def test_compose_float64_exact(cin, hidden, cout, k, stride, same, H, W, expand, seed) -> None:
    g = torch.Generator().manual_seed(seed)
    d = torch.float64

    def r(*s):
        return torch.randn(*s, generator=g, dtype=d)

    if not expand:
        hidden = cin
    w1, b1 = (r(hidden, cin, 1, 1), r(hidden)) if expand else (None, None)
    w2, b2, w3, b3 = r(hidden, 1, k, k), r(hidden), r(cout, hidden, 1, 1), r(cout)
    pad = "same" if same else k // 2
    residual = cin == cout and stride == 1
    x = r(2, cin, H, W)
    ref = _sequential(x, w1, b1, w2, b2, w3, b3, stride, pad, residual, ("act1", "act2"))
    ac = C.compose_full(w1, b1, w2, b2, w3, b3, residual=residual, stride=stride, padding=pad)
    assert torch.allclose(C.apply_affine(ac, x), ref, rtol=0, atol=1e-9 * float(ref.abs().max()))
    if expand:
        h_ref = _dw(F.conv2d(x, w1, b1), w2, stride, pad) + b2[:, None, None]
        ac = C.compose_expand_dw(w1, b1, w2, b2, stride=stride, padding=pad)
        assert torch.allclose(C.apply_affine(ac, x), h_ref, rtol=0, atol=1e-9 * float(h_ref.abs().max()))
        h = torch.relu(F.conv2d(x, w1, b1))
        y_ref = F.conv2d(_dw(h, w2, stride, pad) + b2[:, None, None], w3, b3)
        ac = C.compose_dw_project(w2, b2, w3, b3, stride=stride, padding=pad)
        assert ac.bias_kernel is None
        assert torch.allclose(C.apply_affine(ac, h), y_ref, rtol=0, atol=1e-9 * float(y_ref.abs().max()))
    # pw: the depthwise conv (and b2) removed, the stride kept by sampling the input at (s·y, s·x)
    xs = x[..., ::stride, ::stride]
    y_ref = F.conv2d(F.conv2d(xs, w1, b1) if expand else xs, w3, b3)
    y_ref = y_ref + x if residual else y_ref
    ac = C.compose_pw(w1, b1, w3, b3, residual=residual, stride=stride)
    assert ac.bias_kernel is None and ac.weight.shape == (cout, cin, 1, 1)
    assert torch.allclose(C.apply_affine(ac, x), y_ref, rtol=0, atol=1e-9 * float(y_ref.abs().max()))


@pytest.mark.parametrize("k,stride,size,ring", [(3, 1, 8, 1), (3, 2, 8, 1), (3, 2, 9, 1), (5, 1, 9, 2), (5, 2, 10, 1)])
def test_border_mask_ring(k: int, stride: int, size: int, ring: int) -> None:
    m = C.border_mask((size, size), k, stride, k // 2)
    n = m.shape[0]
    assert bool(m[0].all()) and bool(m[:, 0].all())
    inner = m[ring:n - 1, ring:n - 1] if size % 2 == 0 and stride == 2 else m[ring:n - ring, ring:n - ring]
    assert not bool(inner.any())


def test_paper_mode_differs_on_border_and_exact_map_is_nonzero() -> None:
    """Negative control: the border correction is real (so the exact-mode tests are not vacuous)."""
    torch.manual_seed(0)
    model = random_bn_(nn.Sequential(InvertedResidual(4, 4, 3, 1, exp_ratio=6.0, act_layer=nn.ReLU6)), 0)
    ref = linearize(model, "all")
    exact = fold_blocks(model, "all", "exact", (9, 9))
    paper = fold_blocks(model, "all", "paper", (9, 9))
    x = torch.randn(2, 4, 9, 9)
    with torch.no_grad():
        r, e, p = ref(x), exact(x), paper(x)
    scale = float(r.abs().max())
    mask = C.border_mask((9, 9), 3, 1, 1)
    assert float((p - r).abs()[..., mask].max()) > 1e-2 * scale
    assert float((e - r).abs().max()) <= TOL * scale
    bm = exact[0].bias_map
    assert bm is not None and float(bm[..., ~mask].abs().max()) == 0.0 and float(bm[..., mask].abs().max()) > 0


def test_t1_and_dw_project_need_no_bias_map() -> None:
    model = random_bn_(nn.Sequential(DepthwiseSeparableConv(6, 6, 3, 1, act_layer=nn.ReLU6),
                                     InvertedResidual(6, 8, 5, 2, exp_ratio=3.0, act_layer=nn.ReLU)), 1)
    f = fold_blocks(model, {0: "full", 1: "dw_project"}, "exact", (10, 10))
    assert f[0].bias_map is None and f[1].bias_map is None
    hidden = find_blocks(model)[1].hidden
    assert f[0].conv.weight.shape == (6, 6, 3, 3) and f[1].conv.weight.shape == (8, hidden, 5, 5)
    assert f[1].expand.weight.shape == (hidden, 6, 1, 1)


def test_exact_mode_rejects_other_input_size() -> None:
    from latopt.errors import LatoptError

    model = random_bn_(nn.Sequential(InvertedResidual(3, 5, 3, 2, exp_ratio=2.0)), 2)
    f = fold_blocks(model, "all", "exact", (12, 12))
    with pytest.raises(LatoptError, match="exact mode"):
        f(torch.randn(1, 3, 16, 16))


@pytest.mark.parametrize("family", ["timm", "timm_same", "torchvision"])
def test_pw_and_drop_variant_networks(family: str) -> None:
    """The variant networks as defined (layers.PointwiseBlock, transform.linearize), computed here from the
    block's own modules: pw = project+BN(expand+BN(x sampled with the stride)) (+ x); drop = identity, and
    only for a residual block."""
    torch.manual_seed(0)
    net = random_bn_(nn.Sequential(make_block(family, 4, 6, 6, 3, 2, nn.ReLU6), make_block(family, 6, 6, 6, 3, 1, nn.ReLU6)), 0)
    x = torch.randn(2, 4, 10, 10)
    ref = linearize(net, {0: "pw", 1: "drop"})
    b0 = find_blocks(net)[0]
    g = net.get_submodule

    def bn(path: str, h: torch.Tensor) -> torch.Tensor:  # the BN alone (timm's BN modules also hold the act)
        m = g(path)
        return F.batch_norm(h, m.running_mean, m.running_var, m.weight, m.bias, False, 0.0, m.eps)

    with torch.no_grad():
        expect = bn(b0.bns[-1], g(b0.convs[-1])(bn(b0.bns[0], g(b0.convs[0])(x[..., ::2, ::2]))))
        got = ref(x)
    assert [b.kind for b in find_blocks(ref)] == ["latopt.PointwiseBlock", "latopt.FoldedBlock"]
    assert torch.allclose(got, expect, atol=1e-6)
    assert got.shape == (2, 6, 5, 5)
    folded = fold_blocks(net, {0: "pw", 1: "drop"}, "exact", (10, 10))
    with torch.no_grad():
        assert torch.allclose(folded(x), got, atol=1e-5 * float(got.abs().max()))
    assert folded[0].conv.kernel_size == (1, 1) and folded[0].conv.stride == (2, 2)
    with pytest.raises(LatoptError, match=r"'drop' .*block 0.*no residual"):
        fold_blocks(net, {0: "drop"}, "exact", (10, 10))
