"""The folded network as export ships it, in one function: every place that times or exports a folded
network builds it here, so what is timed is what is shipped.

    as_shipped(model, plan=None, *, spans=(), mode="exact", input_size) -> (nn.Module, Deferred)

``plan`` given: ``model`` is an unfolded network and is folded first (:func:`latopt.rewrite.fold_blocks`);
``plan`` None: ``model`` is already folded. Each span ``(start, end)`` of ``spans`` is then merged into one
convolution (:func:`latopt.rewrite.merge.merge_spans`, on the per-block exact network), exact-mode bias maps are
deferred to the end of each chain
of ``full`` folds (:func:`latopt.rewrite.defer_bias_maps`, whose :class:`~latopt.rewrite.defer.Deferred` is returned), σ_α with α = 0 becomes
the plain activation it equals (:func:`latopt.rewrite.plain_activations_`: no extra element-wise ops in the
graph), and the result is in eval mode. ``model`` is unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from torch import nn

from latopt.rewrite.activation import plain_activations_
from latopt.rewrite.defer import Deferred, defer_bias_maps
from latopt.rewrite.merge import merge_spans
from latopt.rewrite.transform import fold_blocks


def as_shipped(model: nn.Module, plan: Mapping[int, str] | None = None, *, spans: Iterable[Sequence[int]] = (),
               mode: str = "exact", input_size: tuple[int, int]) -> tuple[nn.Module, Deferred]:
    """``model`` (folded by ``plan`` first when given, its ``spans`` merged) as export ships it; see the module
    docstring. The second value: :func:`~latopt.rewrite.defer_bias_maps`'s record of the chains."""
    size = (int(input_size[0]), int(input_size[1]))
    folded = fold_blocks(model, dict(plan), mode=mode, input_size=size) if plan is not None else model
    spans = sorted((int(s[0]), int(s[1])) for s in spans)
    if spans:
        folded = merge_spans(folded, spans, size)
    out, info = defer_bias_maps(folded, size)
    plain_activations_(out)
    return out.eval(), info
