"""ReluMLP parsing, the Box, and latopt.mlp/1 checkpoints (latopt.exact.network / latopt.exact.mlp)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from latopt.errors import LatoptError
from latopt.exact.mlp import MlpMeta, build_mlp, load_mlp, save_mlp
from latopt.exact.network import Box, from_module

pytestmark = pytest.mark.floor   # .ci/run's lower-bounds run selects these tests


def test_from_module_matches_torch_forward():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Flatten(), nn.Sequential(nn.Linear(5, 7), nn.ReLU()), nn.Dropout(0.1), nn.Linear(7, 3)).eval()
    net = from_module(m)
    assert net.sizes == (5, 7, 3)
    x = np.random.default_rng(0).normal(size=(50, 5))
    with torch.no_grad():
        ref = m(torch.as_tensor(x, dtype=torch.float32)).double().numpy()
    assert np.allclose(net.forward(x), ref, atol=1e-5)
    back = net.to_module(torch.float64)
    with torch.no_grad():
        assert np.allclose(back(torch.as_tensor(x)).numpy(), net.forward(x), atol=1e-12)


def test_trailing_relu_becomes_identity_output():
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
    net = from_module(m)
    assert net.sizes == (3, 4, 4)
    x = np.random.default_rng(1).normal(size=(20, 3))
    with torch.no_grad():
        ref = m(torch.as_tensor(x, dtype=torch.float32)).double().numpy()
    assert np.allclose(net.forward(x), ref, atol=1e-6)


@pytest.mark.parametrize(
    "module, needle",
    [
        (nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1)), "Tanh"),
        (nn.Sequential(nn.Linear(3, 4), nn.LeakyReLU(), nn.Linear(4, 1)), "LeakyReLU"),
        (nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(2, 1)), "convolution"),
        (nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 1)), "without a ReLU"),
        (nn.Conv2d(1, 1, 1), "not an nn.Sequential"),
    ],
)
def test_from_module_rejects_non_relu_mlps(module, needle):
    with pytest.raises(LatoptError, match=needle):
        from_module(module)


@pytest.mark.parametrize(
    "spec, needle",
    [("1,0", "inverted"), ("0.5,0.5", "empty"), ("", "LO,HI"), ("a,b", "LO,HI"), ("0,1,2", "LO,HI"), ("0,inf", "finite")],
)
def test_box_parse_rejects_bad_specs(spec, needle):
    with pytest.raises(LatoptError, match=needle):
        Box.parse(spec, 3)


def test_box_corners_and_sampling():
    box = Box.parse("-1,2", 3)
    rng = np.random.default_rng(0)
    c = box.corners(100, rng)
    assert c.shape == (8, 3) and len({tuple(r) for r in c}) == 8
    s = box.sample(1000, rng)
    assert box.contains(s).all() and not box.contains(s + 10).any()


def test_checkpoint_roundtrip_and_bad_files(tmp_path):
    torch.manual_seed(0)
    m = build_mlp([4, 6, 2]).eval()
    p = save_mlp(tmp_path / "a.pt", m, MlpMeta(note="x"))   # an extra key is kept as it is
    m2, meta = load_mlp(p)
    assert meta == MlpMeta(note="x") and meta.plain() == {"note": "x"}
    for a, b in zip(m.state_dict().values(), m2.state_dict().values(), strict=True):
        assert torch.equal(a, b)

    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(LatoptError, match="cannot be read"):
        load_mlp(tmp_path / "junk.pt")
    with pytest.raises(LatoptError, match="does not exist"):
        load_mlp(tmp_path / "missing.pt")
    torch.save({"schema": "latopt.checkpoint/1", "arch": {}, "state_dict": {}}, tmp_path / "cnn.pt")
    with pytest.raises(LatoptError, match="not a fully connected ReLU network"):
        load_mlp(tmp_path / "cnn.pt")
    obj = torch.load(p, weights_only=True)
    torch.save({**obj, "activation": "tanh"}, tmp_path / "tanh.pt")
    with pytest.raises(LatoptError, match="only ReLU"):
        load_mlp(tmp_path / "tanh.pt")
    conv = dict(obj)
    conv["state_dict"] = {**obj["state_dict"], "0.weight": torch.zeros(6, 4, 3, 3)}
    torch.save(conv, tmp_path / "conv.pt")
    with pytest.raises(LatoptError, match="convolution"):
        load_mlp(tmp_path / "conv.pt")
    bad = dict(obj)
    bad["layers"] = [4, 7, 2]
    torch.save(bad, tmp_path / "mismatch.pt")
    with pytest.raises(LatoptError, match="does not match"):
        load_mlp(tmp_path / "mismatch.pt")
