"""Deferred bias maps: one bias map per chain of exact-mode full folds, shipped by export.

The rewrite (``latopt.rewrite.defer_bias_maps``), the export gate that compares it with the per-block network
(and fails when D is wrong), the exported ONNX graph (one Add per chain), and what the profiler times.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import onnx
import pytest
import torch
from torch import nn

from latopt.cli import main
from latopt.errors import VerificationError
from latopt.export.options import CheckOptions
from latopt.files.checkpoint import CheckpointMeta, make_arch, save_checkpoint
from latopt.nets.blocks import find_blocks
from latopt.nets.models import build_model
from latopt.rewrite import FoldedBlock, defer_bias_maps, find_chains, fold_blocks, randomize_bn_
from latopt.rewrite.defer import Deferred

MODEL = "mobilenetv2_035"
RES = 32
# runs of full folds cut by partial variants (3: expand_dw keeps its own map, 7: dw_project has none), by
# unfolded blocks (6, 10) and by the end of the plan (11 is a chain of one)
PLAN = {1: "full", 2: "full", 3: "expand_dw", 4: "full", 5: "full", 7: "dw_project", 8: "full", 9: "full",
        11: "full"}


@pytest.fixture(scope="module")
def model() -> nn.Module:
    torch.manual_seed(0)
    return randomize_bn_(build_model(MODEL, num_classes=10).eval(), seed=0, size=(RES, RES))


def _maps(m: nn.Module) -> dict[int, torch.Tensor | None]:
    return {b.index: m.get_submodule(b.path).bias_map for b in find_blocks(m)
            if isinstance(m.get_submodule(b.path), FoldedBlock)}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def test_chains_end_at_partial_variants_and_unfolded_blocks(model: nn.Module) -> None:
    exact = fold_blocks(model, PLAN, "exact", (RES, RES)).eval()
    assert find_chains(exact, (RES, RES)) == [[1, 2], [4, 5], [8, 9], [11]]
    before = {i: None if t is None else t.clone() for i, t in _maps(exact).items()}
    deferred, info = defer_bias_maps(exact, (RES, RES))
    assert info == Deferred(chains=[[1, 2], [4, 5], [8, 9], [11]], adds_per_block=7, adds_deferred=4,
                            adds_saved=3)
    after = _maps(deferred)
    assert [i for i, t in after.items() if t is None] == [1, 4, 7, 8]  # in-chain blocks; dw_project never had one
    assert torch.equal(after[3], before[3]) and torch.equal(after[11], before[11])  # expand_dw, lone block: as they were
    for end in (2, 5, 9):
        assert after[end].shape == before[end].shape and not torch.equal(after[end], before[end])
    assert all(torch.equal(t, before[i]) for i, t in _maps(exact).items() if t is not None)  # input untouched
    x = torch.randn(2, 3, RES, RES)
    with torch.no_grad():
        assert _rel(deferred(x), exact(x)) < 1e-5
        e64 = copy.deepcopy(exact).double()
        assert _rel(defer_bias_maps(e64, (RES, RES))[0](x.double()), e64(x.double())) < 1e-12


def test_pw_and_drop_blocks_join_chains(model: nn.Module) -> None:
    """pw (a 1x1 conv) and drop (the identity) are affine: one chain, one map, at its last block (a drop)."""
    plan = {1: "full", 2: "drop", 3: "pw", 4: "full", 5: "drop", 6: "pw", 7: "expand_dw"}
    exact = fold_blocks(model, plan, "exact", (RES, RES)).eval()
    deferred, info = defer_bias_maps(exact, (RES, RES))
    assert info == Deferred(chains=[[1, 2, 3, 4, 5, 6]], adds_per_block=2, adds_deferred=1, adds_saved=1)
    assert [i for i, t in _maps(deferred).items() if t is not None] == [6, 7]  # the chain's end; expand_dw's own
    x = torch.randn(2, 3, RES, RES)
    with torch.no_grad():
        assert _rel(deferred(x), exact(x)) < 1e-5


@pytest.mark.parametrize("name,res", [("tf_efficientnet_lite0", 33), ("torchvision/mobilenet_v2?width=0.25", 32)])
def test_one_chain_over_every_block_is_exact(name: str, res: int) -> None:
    """TF 'SAME' padding (odd size) and torchvision's blocks: the whole network is one chain, one map."""
    torch.manual_seed(0)
    m = randomize_bn_(build_model(name, num_classes=10).eval(), seed=0, size=(res, res))
    exact = fold_blocks(m, "all", "exact", (res, res)).double().eval()
    deferred, info = defer_bias_maps(exact, (res, res))
    n = len(find_blocks(m))
    assert info.chains == [list(range(n))] and info.adds_deferred == 1
    assert [i for i, t in _maps(deferred).items() if t is not None] == [n - 1]
    x = torch.randn(2, 3, res, res, dtype=torch.float64)
    with torch.no_grad():
        assert _rel(deferred(x), exact(x)) < 1e-12


class _Scale(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2.0 * x


def test_an_op_between_two_blocks_breaks_the_chain(model: nn.Module) -> None:
    """Block 3's input is not block 2's output (a scale in between): two chains, and the rewrite stays exact
    (one chain across the scale would add D of blocks 1-2 unscaled at block 5's output)."""
    m = copy.deepcopy(model)
    m.blocks[2] = nn.Sequential(_Scale(), *m.blocks[2].children())  # blocks.1.1 (block 2) → scale → block 3
    exact = fold_blocks(m, [1, 2, 3, 4, 5], "exact", (RES, RES)).double().eval()
    assert find_chains(exact, (RES, RES)) == [[1, 2], [3, 4, 5]]
    deferred = defer_bias_maps(exact, (RES, RES))[0]
    x = torch.randn(2, 3, RES, RES, dtype=torch.float64)
    with torch.no_grad():
        assert _rel(deferred(x), exact(x)) < 1e-12


def test_paper_mode_and_unfolded_models_come_back_unchanged(model: nn.Module) -> None:
    for m in (model, fold_blocks(model, "all", "paper", (RES, RES))):
        out, info = defer_bias_maps(m, (RES, RES))
        assert out is not m and info == Deferred(chains=[], adds_per_block=0, adds_deferred=0, adds_saved=0)
        assert all(torch.equal(a, b) for a, b in zip(out.state_dict().values(), m.state_dict().values(), strict=True))


# ------------------------------------------------------------------------------------------------- export
UNGATED4 = CheckOptions(samples=4, measure=False, gate_accuracy=False)   # the gates on 4 inputs, no accuracy gate
EXPORT_FOLD = "1,2,3,5,6,8"   # chains [1, 2, 3], [5, 6], [8]; blocks 4, 7, 9, ... are residual blocks left as-is


@pytest.fixture(scope="module")
def ckpt(model: nn.Module, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("defer") / "base.pt"
    save_checkpoint(path, model, make_arch(model, MODEL, 10), CheckpointMeta(resolution=RES))
    return path


def _add_blocks(onnx_path: Path) -> list[str]:
    """The block tag (``bII``, or "" outside the blocks) of every Add node of an exported ONNX file."""
    return sorted(n.name.split("/")[0] if n.name.startswith("b") else "" for n in onnx.load(str(onnx_path)).graph.node
                  if n.op_type == "Add")


def test_export_ships_one_add_per_chain(ckpt: Path, tmp_path: Path) -> None:
    from latopt.export import ShipOptions, export

    rec = export(ckpt, "cpu", tmp_path / "deferred", ship=ShipOptions(fold=EXPORT_FOLD), checks=UNGATED4, progress=False)
    bm = rec.bias_maps
    assert bm is not None and bm.model_dump() == {"form": "deferred", "chains": [[1, 2, 3], [5, 6], [8]], "adds_per_block": 6, "adds_deferred": 3,
                  "adds_saved": 3}
    names = [g.name for g in rec.gates]
    assert {"deferred bias maps vs exact folded network (float64)",
            "deferred bias maps vs exact folded network (float32, shipped)"} <= set(names)
    assert all(g.passed for g in rec.gates)
    assert "chains 1–3, 5–6, 8): 6 bias-map Adds → 3 (3 saved)" in (tmp_path / "deferred" / "REPORT.md").read_text()
    assert main(["export", "--no-accuracy-gate", "--checkpoint", str(ckpt), "--device", "cpu", "--fold", EXPORT_FOLD, "--samples", "4",
                 "--no-measure", "--bias-maps", "per-block", "--out", str(tmp_path / "per-block")]) == 0
    per_block = json.loads((tmp_path / "per-block" / "export.json").read_text())
    assert per_block["bias_maps"] == {"form": "per-block"}
    assert not any(n.startswith("deferred") for n in (g["name"] for g in per_block["gates"]))
    paper = export(ckpt, "cpu", tmp_path / "paper", ship=ShipOptions(fold=EXPORT_FOLD, mode="paper"), checks=UNGATED4,
                   progress=False)
    assert paper.bias_maps is None
    adds = {k: _add_blocks(tmp_path / k / "model.onnx") for k in ("deferred", "per-block", "paper")}
    # paper mode: only the residual Adds of the blocks left as they are; exact mode adds one bias-map Add
    # per folded block with a map (per-block) or one per chain, at the chain's last block (deferred)
    assert sorted(adds["per-block"]) == sorted(adds["paper"] + ["b01", "b02", "b03", "b05", "b06", "b08"])
    assert sorted(adds["deferred"]) == sorted(adds["paper"] + ["b03", "b06", "b08"])
    assert len(adds["paper"]) > 0  # the as-is residual blocks are in the count: the comparison is not vacuous


def _scaled_d(real):  # type: ignore[no-untyped-def]
    def wrong(mods):  # type: ignore[no-untyped-def]
        return real(mods) * 1.05  # D 5 % too large

    return wrong


def test_export_refuses_a_wrong_chain_map(ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from latopt.export import ShipOptions, export
    from latopt.rewrite import defer

    monkeypatch.setattr(defer, "_chain_offset", _scaled_d(defer._chain_offset))
    out = tmp_path / "bad"
    with pytest.raises(VerificationError) as e:
        export(ckpt, "cpu", out, ship=ShipOptions(fold=EXPORT_FOLD), checks=UNGATED4, progress=False)
    msg = str(e.value)
    assert "deferred bias maps vs exact folded network (float64)" in msg
    assert "deferred bias maps vs exact folded network (float32, shipped)" in msg
    assert "fold algebra" not in msg  # the fold itself is right: only the rewrite's gates fail
    assert not out.exists()


def test_float32_gate_checks_the_shipped_copy(model: nn.Module) -> None:
    """Only the shipped copy's D is wrong (the gate's own float64 rewrite is right): the float32 gate fails."""
    from latopt.export.gates import deferred_gates, noise_floor

    exact = fold_blocks(model, "all", "exact", (RES, RES)).eval()
    shipped, info = defer_bias_maps(exact, (RES, RES))
    x = torch.randn(4, 3, RES, RES, generator=torch.Generator().manual_seed(1))
    floor = noise_floor(exact, x)
    g64, g32 = deferred_gates(exact, shipped, RES, x, "random", floor)
    assert g64.passed and g32.passed and g64.rel < 1e-12
    end = shipped.get_submodule(find_blocks(shipped)[info.chains[0][-1]].path)
    with torch.no_grad():
        end.bias_map.mul_(1.05)
    g64, g32 = deferred_gates(exact, shipped, RES, x, "random", floor)
    assert g64.passed and not g32.passed


# ----------------------------------------------------------------------------------------------- profiler
class _Recording:
    """A backend stand-in that keeps every module it is asked to prepare."""

    name = "stand-in"

    def __init__(self, profile) -> None:  # type: ignore[no-untyped-def]
        self.prepared: list[nn.Module] = []

    def prepare(self, module, input_shape):  # type: ignore[no-untyped-def]
        self.prepared.append(module)

        class Runner:
            def __call__(self) -> None:
                pass

            def time_ms(self) -> float:
                return 1.0

        return Runner()

    def environment(self) -> dict:
        return {}


def test_profiler_times_what_export_ships(monkeypatch: pytest.MonkeyPatch) -> None:
    """Full folds are timed without a map of their own; the end-to-end networks carry one map per chain;
    expand_dw parts keep theirs."""
    import latopt.latency.profiler as profiler
    from latopt.latency.devices import load_device

    backends: list[_Recording] = []
    monkeypatch.setattr(profiler, "get_backend", lambda dev: backends.append(_Recording(dev)) or backends[-1])
    device = load_device("cpu").model_copy(update={"warmup": 0, "min_repeats": 3, "max_repeats": 3, "clock": "wall"})
    profiler.profile_model(MODEL, device, resolution=RES, num_classes=10, variants=("expand_dw", "dw_project"),
                           progress=False)
    parts = [m for m in backends[0].prepared if isinstance(m, FoldedBlock)]
    full = [m for m in parts if m.info.variant == "full"]
    assert len(full) == 17 and all(m.bias_map is None for m in full)
    assert all(m.bias_map is not None for m in parts if m.info.variant == "expand_dw" and m.info.has_expand)
    nets = [m for m in backends[0].prepared if not isinstance(m, FoldedBlock) and find_blocks(m)]
    maps = {}
    for net in nets:
        folded = _maps(net)
        if folded and all(net.get_submodule(b.path).info.variant == "full" for b in find_blocks(net)
                          if b.index in folded):
            maps[len(folded)] = [i for i, t in folded.items() if t is not None]
    assert maps == {17: [16], 9: [16]}  # all folded, and the held-out half: one chain each, its map at block 16


def test_as_shipped_is_the_deferred_fold_with_plain_activations(model: nn.Module) -> None:
    """``as_shipped`` folds (when given a plan), defers the bias maps and gives σ back where α = 0: the same
    function as the per-block fold, one map per chain, no σ_α left, eval mode, the input unchanged."""
    from latopt.rewrite import AlphaActivation, as_shipped, install_alpha

    with_alpha = copy.deepcopy(model)
    install_alpha(with_alpha)  # σ_α at α = 0 everywhere: the plain activation it equals must be shipped
    assert any(isinstance(m, AlphaActivation) for m in with_alpha.modules())
    shipped, info = as_shipped(with_alpha, PLAN, input_size=(RES, RES))
    assert not shipped.training
    assert not any(isinstance(m, AlphaActivation) for m in shipped.modules())
    assert any(isinstance(m, AlphaActivation) for m in with_alpha.modules())  # the input is unchanged
    assert info.chains == [[1, 2], [4, 5], [8, 9], [11]] and info.adds_saved > 0
    per_block = fold_blocks(model, PLAN, "exact", (RES, RES)).eval()
    x = torch.randn(2, 3, RES, RES, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert _rel(shipped(x), per_block(x)) < 1e-5
    again, _ = as_shipped(per_block, input_size=(RES, RES))  # already folded: no plan
    assert _maps(again).keys() == _maps(shipped).keys()
