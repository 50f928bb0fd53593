"""latopt.nets.variants: one record per fold variant, read by the adapters, the modules, the fold and the profiler."""

from __future__ import annotations

from typing import get_args

import pytest
import torch

from latopt.constants import FOLD_VARIANTS, FoldVariant
from latopt.errors import LatoptError
from latopt.nets.blocks import find_blocks
from latopt.nets.layers import FoldedBlock
from latopt.nets.models import build_model
from latopt.nets.variants import PARTIAL_VARIANTS, SPAN_INNER, UNIFORM_TIMES, VARIANTS, allowed
from latopt.rewrite import fold_block_module, linearize
from latopt.rewrite.transform import check_variant


def test_the_records_are_the_vocabulary_and_their_derived_lists() -> None:
    assert tuple(VARIANTS) == get_args(FoldVariant) == FOLD_VARIANTS
    assert PARTIAL_VARIANTS == ("expand_dw", "dw_project") and SPAN_INNER == ("pw", "drop")
    assert UNIFORM_TIMES == {"none": 1.0, "full": 0.0, "expand_dw": 0.5, "dw_project": 0.5}
    assert all((v.compose is not None) == bool(v.convs) for v in VARIANTS.values())   # a module variant: its algebra
    assert {n: v.reference for n, v in VARIANTS.items() if v.reference != "linear"} == {"pw": "pointwise",
                                                                                          "drop": "identity"}
    for v in VARIANTS.values():   # a forward uses only the convolutions the record builds
        convs = {c[0] for c in v.convs}
        assert {s for s in v.steps if s not in ("map", "act", "post", "residual")} <= convs
        assert ("act" in v.steps) == (v.kept_act is not None)


def _blocks(name: str) -> dict[int, object]:
    return {b.index: b for b in find_blocks(build_model(name, num_classes=10))}


@pytest.mark.parametrize(("name", "index", "expected"), [
    ("mobilenetv2_035", 0, ("full", "pw")),                                       # t = 1, no residual
    ("mobilenetv2_035", 1, ("full", "expand_dw", "dw_project", "pw")),           # strided: no drop
    ("mobilenetv2_035", 2, ("full", "expand_dw", "dw_project", "pw", "drop")),   # residual
    ("resnet20_cifar", 1, ("full", "drop")),                                      # a BasicBlock with a skip
    ("resnet20_cifar", 3, ("full",)),                                             # its downsampling block
])
def test_which_variants_a_block_allows(name: str, index: int, expected: tuple[str, ...]) -> None:
    b = _blocks(name)[index]
    assert allowed(b) == b.variants == expected   # type: ignore[attr-defined]
    for v in set(VARIANTS) - set(expected):       # each refusal says why, in one line
        with pytest.raises(LatoptError) as e:
            check_variant(b, v)   # type: ignore[arg-type]
        assert f"variant {v!r} does not apply to block {index}" in str(e.value) and "\n" not in str(e.value)


def test_a_refused_partial_fold_names_the_missing_expansion() -> None:
    with pytest.raises(LatoptError, match="t = 1 block"):
        check_variant(_blocks("mobilenetv2_035")[0], "expand_dw")   # type: ignore[arg-type]
    with pytest.raises(LatoptError, match="no residual connection"):
        check_variant(_blocks("mobilenetv2_035")[1], "drop")   # type: ignore[arg-type]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_each_variant_module_is_its_record_and_equals_the_variant_network(variant: str) -> None:
    torch.manual_seed(0)
    model = build_model("mobilenetv2_035", num_classes=10).eval()
    with torch.no_grad():   # non-trivial BN statistics, so that a wrong bias would show
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
    b = find_blocks(model)[2]   # a residual t = 6 block: every variant applies
    x = torch.randn(2, b.cin, 8, 8)
    fb = fold_block_module(model, b, variant, "exact", (8, 8))
    spec = VARIANTS[variant]
    assert isinstance(fb, FoldedBlock) and [n for n, _ in fb.named_children() if n != "act"] == [c[0] for c in spec.convs]
    assert (fb.bias_map is not None) == spec.bias_map
    lin = linearize(model, {b.index: variant}).eval()
    with torch.no_grad():
        want = lin.get_submodule(b.path)(x)
        got = fb.eval()(x)
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), float((got - want).abs().max())
