"""Layer Folding: σ_α activations, exact fold algebra, model surgery.

Public API (see the submodules for details)::

    AlphaActivation, install_alpha, get_alphas, clamp_alphas_, alpha_parameters, alpha_spec,
    plain_activations_(model)           σ_α with α = 0 back to plain σ (before export)
    FOLD_VARIANTS = ("full", "expand_dw", "dw_project", "pw", "drop"), FOLD_MODES = ("exact", "paper")
    linearize(model, blocks) -> nn.Module     the variant network of a plan (transform.py defines it)
    fold_blocks(model, blocks, mode="exact", input_size=(H, W)) -> nn.Module
    fold_block_module(model, block, variant="full", mode="exact", input_size=None) -> FoldedBlock
    verify_fold(reference, folded, input_size, batch=2, seed=0) -> FoldErrors   (.per_block: BlockError by index)
    defer_bias_maps(model, input_size) -> (copy, Deferred)   one bias map per chain of exact full folds (export)
    as_shipped(model, plan=None, *, mode, input_size) -> (net, Deferred)   the folded network as export ships it
    find_chains(model, input_size) -> list[list[int]]    those chains, as block indices
    span_exact(variants, strides, *, kernel, padding, in_size) -> (bool, reason)   is a span one conv
    span_exact_blocks(blocks, in_size) -> (bool, reason)   the same, read from FoldedBlocks
    compose_span(blocks, input_size) -> SpanConv         consecutive affine folds as one convolution
    merge_spans(folded, spans, input_size) -> nn.Module  each span (start, end) of a folded network merged
    randomize_bn_(model, seed=0, *, plan="all") -> model   random BN statistics for fold checks
    fold_spec(model, *, mode=None, input_size=None) -> dict | None   the checkpoint's arch.fold entry (as plain data)
    normalize_plan(model, blocks) -> {block index: variant}   "all", indices, "1,3" or a dict, checked
    check_variant(block, variant)            LatoptError saying why a variant does not apply to a block
    check_mode(block, mode)                  LatoptError when a block does not fold in that mode (BasicBlock: paper)
    foldable_in(model, mode) -> list[int]    the blocks that fold in that mode
    FoldedBlock, FoldInfo, PointwiseBlock
"""

from latopt.constants import FOLD_MODES, FOLD_VARIANTS
from latopt.nets.layers import FoldedBlock, FoldInfo, PointwiseBlock
from latopt.rewrite.activation import (
    AlphaActivation,
    alpha_parameters,
    alpha_spec,
    clamp_alphas_,
    get_alphas,
    install_alpha,
    plain_activations_,
)
from latopt.rewrite.defer import defer_bias_maps, find_chains
from latopt.rewrite.merge import MergedBlock, merge_spans
from latopt.rewrite.ship import as_shipped
from latopt.rewrite.span import SPAN_INNER, SpanConv, compose_span, span_exact, span_exact_blocks
from latopt.rewrite.transform import (
    check_mode,
    check_variant,
    fold_block_module,
    fold_blocks,
    fold_spec,
    foldable_in,
    linearize,
    normalize_plan,
    randomize_bn_,
    verify_fold,
)

__all__ = [
    "FOLD_MODES",
    "FOLD_VARIANTS",
    "SPAN_INNER",
    "AlphaActivation",
    "FoldInfo",
    "FoldedBlock",
    "MergedBlock",
    "PointwiseBlock",
    "SpanConv",
    "alpha_parameters",
    "alpha_spec",
    "as_shipped",
    "check_mode",
    "check_variant",
    "clamp_alphas_",
    "compose_span",
    "defer_bias_maps",
    "find_chains",
    "fold_block_module",
    "fold_blocks",
    "fold_spec",
    "foldable_in",
    "get_alphas",
    "install_alpha",
    "linearize",
    "merge_spans",
    "normalize_plan",
    "plain_activations_",
    "randomize_bn_",
    "span_exact",
    "span_exact_blocks",
    "verify_fold",
]
