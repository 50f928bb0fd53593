"""σ_α: the activation, installing it per block or per activation, reading and clamping α, and
that linearize() equals the model with α = 1."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from latopt.errors import LatoptError
from latopt.nets.blocks import find_blocks
from latopt.nets.models import build_model
from latopt.rewrite import (
    AlphaActivation,
    alpha_parameters,
    alpha_spec,
    clamp_alphas_,
    fold_blocks,
    get_alphas,
    install_alpha,
    linearize,
    randomize_bn_,
)


@pytest.fixture(scope="module")
def small_model() -> nn.Module:
    torch.manual_seed(0)
    return randomize_bn_(build_model("mobilenetv2_035", 10), 0)


@pytest.mark.parametrize("kind", ["relu", "relu6"])
def test_alpha_activation_interpolates(kind: str) -> None:
    x = torch.linspace(-8, 8, 101)
    sigma = torch.relu(x) if kind == "relu" else torch.clamp(x, 0, 6)
    a = AlphaActivation(kind)
    assert float(a.alpha.detach()) == 0.0 and a.alpha.requires_grad
    assert torch.equal(a(x), sigma)
    with torch.no_grad():
        a.alpha.fill_(1.0)
    assert torch.allclose(a(x), x)
    with torch.no_grad():
        a.alpha.fill_(0.25)
    assert torch.allclose(a(x), 0.75 * sigma + 0.25 * x)
    a(x).sum().backward()
    assert torch.allclose(a.alpha.grad, (x - sigma).sum())


def test_install_block_granularity_shares_one_alpha(small_model: nn.Module) -> None:
    m = build_model("mobilenetv2_035", 10)
    params = install_alpha(m, "all", "block")
    blocks = find_blocks(m)
    assert sorted(params) == [b.index for b in blocks]
    for b in blocks:
        acts = [m.get_submodule(p) for p in b.acts]
        assert all(isinstance(a, AlphaActivation) for a in acts)
        assert len(params[b.index]) == 1 and all(a.alpha is params[b.index][0] for a in acts)
    assert len(alpha_parameters(m)) == len(blocks)
    assert get_alphas(m) == {b.index: [0.0] for b in blocks}
    assert alpha_spec(m) == {"granularity": "block", "blocks": [b.index for b in blocks]}
    with pytest.raises(LatoptError, match="already installed"):
        install_alpha(m, [1])


def test_install_activation_granularity_and_clamp() -> None:
    m = build_model("mobilenetv2_035", 10)
    params = install_alpha(m, [0, 3], "activation")
    assert len(params[0]) == 1 and len(params[3]) == 2 and params[3][0] is not params[3][1]
    with torch.no_grad():
        params[3][0].fill_(1.7)
        params[3][1].fill_(-0.2)
    clamp_alphas_(m)
    assert get_alphas(m) == {0: [0.0], 3: [1.0, 0.0]}
    with pytest.raises(LatoptError, match="granularity"):
        install_alpha(build_model("mobilenetv2_035"), "all", "layer")


def test_alpha_one_equals_linearize(small_model: nn.Module) -> None:
    m = linearize(small_model, [])  # a copy
    install_alpha(m, [2, 5, 6], "activation")
    ps = install_alpha(m, [1], "block")
    for p in alpha_parameters(m):
        with torch.no_grad():
            p.fill_(1.0)
    with torch.no_grad():
        ps[1][0].fill_(0.0)  # block 1 stays nonlinear
    x = torch.randn(2, 3, 48, 48)
    lin = linearize(small_model, [2, 5, 6])
    with torch.no_grad():
        assert torch.allclose(m(x), lin(x), rtol=1e-5, atol=1e-5 * float(lin(x).abs().max()))
        # and the fold of those blocks (σ_α elsewhere kept as it is) matches too
        f = fold_blocks(m, [2, 5, 6], "exact", (48, 48))
        assert isinstance(f.get_submodule(find_blocks(m)[1].acts[0]), AlphaActivation)
        assert torch.allclose(f(x), m(x), rtol=0, atol=1e-4 * float(m(x).abs().max()))


def test_partial_fold_keeps_the_other_alpha(small_model: nn.Module) -> None:
    m = linearize(small_model, [])
    install_alpha(m, "all", "activation")
    f = fold_blocks(m, {4: "expand_dw", 5: "dw_project"}, "paper")
    alphas = get_alphas(f)
    assert len(alphas[4]) == 1 and len(alphas[5]) == 1 and len(alphas[6]) == 2
    assert alpha_spec(f)["blocks"] == sorted(alphas)
