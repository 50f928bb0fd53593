"""Spans (latopt.rewrite.span): consecutive affine folds composed into one convolution, exactly, and the
spans that are not one convolution refused with their reason."""

from __future__ import annotations

import random

import pytest
import torch
from torch import nn

from latopt.errors import LatoptError
from latopt.nets.blocks import block_input_shapes, find_blocks
from latopt.nets.models import build_model
from latopt.rewrite import compose_span, fold_blocks, randomize_bn_, span_exact, span_exact_blocks

RES = 64
MODELS = ("torchvision/mobilenet_v2?width=0.5", "mobilenetv2_100")
# 0 full (t = 1), 1 pw (stride 2), 2 drop, 3 pw (stride 2): a DP-like head (cf. tools/merge_probe.py);
# 4 full (a bias map) → 5 pw → 6 pw (stride 2); 7 drop; 8 pw; 10 pw → 11 full → 12 pw; 13 expand_dw; 15 none
PLAN = {0: "full", 1: "pw", 2: "drop", 3: "pw", 4: "full", 5: "pw", 6: "pw", 7: "drop", 8: "pw", 9: "full",
        10: "pw", 11: "full", 12: "pw", 13: "expand_dw", 14: "full", 16: "pw"}


def _net(name: str, plan: dict[int, str], seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = randomize_bn_(build_model(name, num_classes=10).eval(), seed=seed, size=(RES, RES))
    return fold_blocks(model, plan, "exact", (RES, RES)).double().eval()


@pytest.fixture(scope="module", params=MODELS)
def net(request: pytest.FixtureRequest) -> tuple[nn.Module, dict[int, nn.Module], dict[int, tuple[int, int]]]:
    folded = _net(request.param, PLAN)
    mods = {b.index: folded.get_submodule(b.path) for b in find_blocks(folded)}
    sizes = {i: tuple(s[-3:]) for i, s in block_input_shapes(folded, (1, 3, RES, RES)).items()}
    return folded, mods, sizes


def _check(mods: dict[int, nn.Module], sizes: dict, first: int, last: int, seed: int = 0) -> nn.Module:
    blocks = [mods[i] for i in range(first, last + 1)]
    c, h, w = sizes[first]
    x = torch.randn(2, c, h, w, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        ref = x
        for m in blocks:
            ref = m(ref)
        span = compose_span(blocks, (h, w)).to(x.dtype)  # a span of drops only has no dtype of its own
        got = span(x)
    assert got.shape == ref.shape
    rel = float((got - ref).abs().max() / ref.abs().max())
    assert rel < 1e-9, (first, last, rel)
    return span


def test_dp_plan_head_is_one_strided_3x3(net: tuple) -> None:
    _, mods, sizes = net
    span = _check(mods, sizes, 0, 3)
    assert span.conv.kernel_size == (3, 3) and span.conv.stride == (4, 4)
    assert span.bias_map is None  # a t = 1 full fold has no bias kernel, 1x1 parts have no border


def test_pw_drop_run_with_strides_is_one_1x1(net: tuple) -> None:
    _, mods, sizes = net
    for first, last in ((1, 3), (5, 8), (6, 7), (7, 8)):
        span = _check(mods, sizes, first, last)
        assert span.conv.kernel_size == (1, 1) and span.bias_map is None
    assert _check(mods, sizes, 5, 8).conv.stride == (2, 2)


def test_full_then_pw_keeps_an_exact_bias_map(net: tuple) -> None:
    _, mods, sizes = net
    span = _check(mods, sizes, 4, 6)
    assert span.conv.kernel_size == (3, 3) and span.conv.stride == (2, 2)
    assert span.bias_map is not None and span.bias_map.abs().max() > 0
    _check(mods, sizes, 9, 10)   # full → pw
    # a stride-1 pw before a full fold: its bias meets the k×k's zero padding, so there is a map
    span = _check(mods, sizes, 10, 12)
    assert span.bias_map is not None and span.bias_map.abs().max() > 0


def test_refused_spans_say_why(net: tuple) -> None:
    _, mods, sizes = net

    def refused(first: int, last: int, words: str) -> None:
        blocks = [mods[i] for i in range(first, last + 1)]
        ok, why = span_exact_blocks(blocks, sizes[first][1:])
        assert not ok and words in why, why
        with pytest.raises(LatoptError, match="span not exact"):
            compose_span(blocks, sizes[first][1:])

    refused(12, 13, "partial fold 'expand_dw'")
    refused(14, 15, "not folded")
    refused(3, 4, "stride 2 before the full fold")
    refused(9, 11, "both full folds")


def test_span_exact_rules() -> None:
    assert span_exact(["pw", "drop", "pw"], [2, 1, 2])[0]
    assert span_exact(["drop"], [1])[0]
    assert span_exact(["full", "pw", "pw"], [2, 2, 1], kernel=5, padding=2)[0]
    assert span_exact(["pw", "full", "drop"], [1, 2, 1], kernel=3, padding=1)[0]
    assert span_exact([], []) == (False, "an empty span")
    assert "as-is" in span_exact(["pw", "none"], [1, 1])[1]
    assert "partial fold 'dw_project'" in span_exact(["dw_project"], [1], kernel=3, padding=1)[1]
    assert "both full folds" in span_exact(["full", "pw", "full"], [1, 1, 1], kernel=3, padding=1)[1]
    assert "dilated" in span_exact(["pw", "full"], [2, 1], kernel=3, padding=1)[1]
    assert "dropped but has stride" in span_exact(["drop"], [2])[1]
    # TF SAME: the pad before is 1 at stride 1 and 0 at stride 2 for 8 pixels (the grid would shift) ...
    ok, why = span_exact(["full", "pw"], [1, 2], kernel=3, padding="same", in_size=(8, 8))
    assert not ok and "pad before differs" in why
    assert "needs the input size" in span_exact(["full", "pw"], [1, 2], kernel=3, padding="same")[1]
    # ... and 0 at both stride 2 and stride 4: exact
    assert span_exact(["full", "pw"], [2, 2], kernel=3, padding="same", in_size=(8, 8))[0]
    assert span_exact(["full", "pw"], [1, 1], kernel=3, padding="same")[0]  # no stride after: any size


@pytest.mark.parametrize("name", MODELS[:1])
def test_random_admissible_spans(name: str) -> None:
    """Random plans of full/pw/drop/none, every admissible span of ≥ 2 blocks in a random sample checked
    against running its blocks; every refused span raises."""
    rng = random.Random(0)
    checked = 0
    for seed in range(4):
        plan = {}
        model = build_model(name, num_classes=10)
        for b in find_blocks(model):
            choices = ["full", "pw", "none"] + (["drop"] if b.residual else [])
            plan[b.index] = rng.choice(choices)
        plan = {i: v for i, v in plan.items() if v != "none"}
        folded = _net(name, plan, seed)
        mods = {b.index: folded.get_submodule(b.path) for b in find_blocks(folded)}
        sizes = {i: tuple(s[-3:]) for i, s in block_input_shapes(folded, (1, 3, RES, RES)).items()}
        n = len(mods)
        spans = [(i, j) for i in range(n) for j in range(i + 1, n)]
        admissible = [(i, j) for i, j in spans
                      if span_exact_blocks([mods[k] for k in range(i, j + 1)], sizes[i][1:])[0]]
        refused = [s for s in spans if s not in admissible]
        for i, j in rng.sample(admissible, min(8, len(admissible))):
            _check(mods, sizes, i, j, seed=i * 100 + j)
            checked += 1
        for i, j in rng.sample(refused, min(4, len(refused))):
            with pytest.raises(LatoptError):
                compose_span([mods[k] for k in range(i, j + 1)], sizes[i][1:])
    assert checked >= 8


def test_merge_spans_in_a_network_is_exact_and_keeps_the_numbering(net: tuple) -> None:
    """Spans merged in a folded network (latopt.rewrite.merge_spans): the same function (float64, 1e-9), the
    block numbering kept (the span's convolution at its first block, MergedBlock identities after it), a
    chain of full folds for the deferred bias maps stops at a span, and the input network is unchanged."""
    from latopt.rewrite import MergedBlock, SpanConv, as_shipped, defer_bias_maps, merge_spans

    folded, _, _ = net
    spans = [(0, 3), (4, 6), (10, 12)]
    merged = merge_spans(folded, spans, (RES, RES))
    x = torch.randn(2, 3, RES, RES, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref, got = folded(x), merged(x)
    assert float((got - ref).abs().max() / ref.abs().max()) < 1e-9
    kinds = {b.index: type(merged.get_submodule(b.path)) for b in find_blocks(merged)}
    assert len(kinds) == len(find_blocks(folded))
    assert [i for i, k in kinds.items() if k is SpanConv] == [0, 4, 10]
    assert [i for i, k in kinds.items() if k is MergedBlock] == [1, 2, 3, 5, 6, 11, 12]
    assert not any(isinstance(m, SpanConv) for m in folded.modules())
    # one chain ran through blocks 0..12 (pw and drop join chains); merged, only 7..9 remain between spans
    assert [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12] in defer_bias_maps(folded, (RES, RES))[1].chains
    assert defer_bias_maps(merged, (RES, RES))[1].chains[0] == [7, 8, 9]
    shipped, info = as_shipped(folded, spans=spans, input_size=(RES, RES))
    assert info.chains == defer_bias_maps(merged, (RES, RES))[1].chains   # the chains left between the spans
    with torch.no_grad():
        assert float((shipped(x) - ref).abs().max() / ref.abs().max()) < 1e-9


@pytest.mark.parametrize("spans,match", [
    ([(0, 3), (3, 5)], "overlap"),
    ([(12, 13)], r"span 12-13: span not exact: block 1 of the span is the partial fold 'expand_dw'"),
    ([(14, 15)], "block 15 is not folded"),
    ([(5, 5)], "a run of at least two blocks"),
])
def test_merge_spans_refuses_what_is_not_one_convolution(net: tuple, spans: list, match: str) -> None:
    from latopt.rewrite import merge_spans

    with pytest.raises(LatoptError, match=match):
        merge_spans(net[0], spans, (RES, RES))
