"""``latopt inspect MODEL``: the per-block table (shape, FLOPs and params as-is and folded) and
``--check-fold``, the numeric check of the fold engine on a whole model.

FLOPs are counted by :func:`latopt.nets.models.count_flops` (``torch.utils.flop_counter.FlopCounterMode``: 2 ×
multiply-accumulates of the convolutions and the classifier; element-wise additions such as the residual or
the exact-mode bias map are not counted). Params count trainable parameters (BN affine included as-is; the exact
mode's bias map is a buffer, not a parameter).

Any model builds and is inspected: blocks no adapter of :mod:`latopt.adapters` recognises are listed as
``others`` (one line per kind: how many, where, why not), and a model whose stem/head layout latopt does not
know gets one line saying so instead of the stem/head figures.

Public API::

    inspect_model(model, resolution, mode="exact", name="") -> InspectReport
    check_fold(model, resolution, mode="exact", seed=0, batch=2) -> dict   (randomises BN in place)
    unrecognised_parts(model, covered) -> list[Other]
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from latopt.constants import FOLD_CHECK_TOLERANCE
from latopt.errors import LatoptError, first_line
from latopt.nets.blocks import block_input_shapes, find_blocks, input_channels
from latopt.nets.models import check_input_size, count_flops
from latopt.nets.stemhead import FixedParts, fixed_parts
from latopt.rewrite import fold_block_module, fold_blocks, foldable_in, linearize, randomize_bn_, verify_fold
from latopt.rewrite.transform import BlockError, ErrorStat, FoldErrors


@dataclass
class BlockRow:
    index: int
    path: str
    kind: str
    cin: int
    cout: int
    expansion: float
    kernel: int
    stride: int
    residual: bool
    in_shape: tuple[int, ...]
    flops: int
    params: int
    flops_folded: int | None
    params_folded: int | None
    foldable: bool
    reason: str
    variants: tuple[str, ...] = ()  # Block.variants: ("drop",) alone for a residual squeeze-excitation block

    @property
    def fold_lowers_flops(self) -> bool | None:
        return None if self.flops_folded is None else self.flops_folded < self.flops


@dataclass
class Other:
    """Modules of one class that hold convolutions but are neither a block an adapter knows nor the stem/head."""

    kind: str
    paths: list[str]
    reason: str


@dataclass
class InspectReport:
    model: str
    resolution: int
    mode: str
    blocks: list[BlockRow]
    stem_flops: int
    stem_params: int
    head_flops: int
    head_params: int
    total_flops: int
    total_params: int
    fixed_paths: dict[str, tuple[str, ...]] = field(default_factory=dict)
    others: list[Other] = field(default_factory=list)
    fixed_reason: str = ""  # why the stem/head figures are missing ('' when they are there)

    @property
    def folded_total_flops(self) -> int:
        return self.total_flops - sum(b.flops - b.flops_folded for b in self.blocks if b.flops_folded is not None)

    @property
    def folded_total_params(self) -> int:
        return self.total_params - sum(b.params - b.params_folded for b in self.blocks if b.params_folded is not None)


def _params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


_NO_ADAPTER = {  # block classes timm / torchvision have that no adapter takes, and why
    "MobileAttention": "attention, not convolutions",
    "MBConv": "no block adapter yet (torchvision's MBConv always has squeeze-excitation)",
    "FusedMBConv": "no block adapter yet (torchvision's FusedMBConv)",
    "CondConvResidual": "conditional convolution (weights depend on the input)",
    "ConvBnAct": "a single convolution: nothing to fold",
    "Conv2dNormActivation": "a single convolution: nothing to fold",
}


def unrecognised_parts(model: nn.Module, covered: tuple[str, ...]) -> list[Other]:
    """The modules holding a convolution outside ``covered`` (paths of the blocks and the stem/head), as the
    outermost module that is not a container (nn.Sequential / nn.ModuleList / the model), grouped by class."""
    groups: dict[str, Other] = {}
    skip: list[str] = []

    def is_covered(path: str) -> bool:
        return any(path == c or path.startswith(c + ".") for c in covered)

    for path, m in model.named_modules():
        if not path or any(path.startswith(p) for p in skip) or is_covered(path):
            continue
        if isinstance(m, (nn.Sequential, nn.ModuleList, nn.ModuleDict)):
            continue
        if any(c == path or c.startswith(path + ".") for c in covered):  # holds a block: look inside
            continue
        if not any(isinstance(x, nn.Conv2d) for x in m.modules()):
            continue
        skip.append(path + ".")
        kind = type(m).__name__
        reason = _NO_ADAPTER.get(kind, "a plain layer outside any block" if isinstance(m, nn.Conv2d)
                                 else "no block adapter for this module type")
        groups.setdefault(kind, Other(kind, [], reason)).paths.append(path)
    return list(groups.values())


def _fixed(model: nn.Module) -> tuple[FixedParts | None, str]:
    try:
        return fixed_parts(model), ""
    except LatoptError as e:
        return None, str(e)


def inspect_model(model: nn.Module, resolution: int, mode: str = "exact", name: str = "") -> InspectReport:
    """Per-block FLOPs/params as-is and fully folded (``mode`` decides the folded module's layout; a block that
    does not fold in ``mode`` has no folded figures and says why), the modules no adapter knows, and the
    stem/head when its layout is known."""

    check_input_size(model, resolution, name)
    shape = (1, 3, resolution, resolution)
    try:
        shapes = block_input_shapes(model, shape)
    except RuntimeError as e:
        raise LatoptError(f"{name or type(model).__name__} does not run on a {resolution}x{resolution} input "
                          f"({first_line(e, 160)}); try a larger --resolution") from None
    blocks = find_blocks(model)
    rows: list[BlockRow] = []
    for b in blocks:
        mod = model.get_submodule(b.path)
        s = shapes[b.index]
        fl, fp = None, None
        foldable, reason = b.foldable, b.reason
        if b.foldable and mode not in b.fold_modes:
            foldable, reason = False, (f"folds only in {' or '.join(b.fold_modes)} mode (two k×k convolutions "
                                       "compose into one only away from the border)")
        if foldable:
            fb = fold_block_module(model, b, "full", mode, tuple(s[-2:]))
            fl, fp = count_flops(fb, s), _params(fb)
        rows.append(BlockRow(b.index, b.path, b.kind, b.cin, b.cout, b.expansion, b.kernel, b.stride, b.residual,
                             s, count_flops(mod, s), _params(mod), fl, fp, foldable, reason, b.variants))
    fixed, fixed_reason = _fixed(model)
    if fixed is None or not blocks:
        fixed_reason = fixed_reason or "no blocks"
        covered = tuple(b.path for b in blocks)
        stem_f = stem_p = head_f = head_p = 0
        paths: dict[str, tuple[str, ...]] = {}
    else:
        covered = (*(b.path for b in blocks), *fixed.stem_paths, *fixed.head_paths)
        last = blocks[-1]
        with torch.no_grad():
            model.eval()
            head_in = model.get_submodule(last.path)(torch.zeros(shapes[last.index])).shape
        stem_f, stem_p = count_flops(fixed.stem, shape), _params(fixed.stem)
        head_f, head_p = count_flops(fixed.head, tuple(head_in)), _params(fixed.head)
        paths = {"stem": fixed.stem_paths, "head": fixed.head_paths}
    return InspectReport(
        model=name or type(model).__name__, resolution=resolution, mode=mode, blocks=rows,
        stem_flops=stem_f, stem_params=stem_p, head_flops=head_f, head_params=head_p,
        total_flops=count_flops(model, shape), total_params=_params(model),
        fixed_paths=paths, others=unrecognised_parts(model, covered), fixed_reason=fixed_reason,
    )


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    scale = float(ref.abs().max()) or 1.0
    return float((out.double() - ref.double()).abs().max()) / scale


@dataclass(frozen=True)
class FoldCheckResult:
    """What :func:`check_fold` found (its docstring says what each part measures); ``output``, ``features`` and
    ``float64`` are None when no block folds."""

    folded: int
    per_block: dict[int, BlockError]
    max_rel: float
    output: ErrorStat | None = None
    features: ErrorStat | None = None
    noise_floor: float | None = None
    float64: FoldErrors | None = None
    saturated: bool = False
    random_bn: bool = True
    inputs: str = "random"

    def worst(self, interior: bool = False) -> float:
        """The largest per-block relative error (``interior``: away from the border); 0 when nothing folds."""
        return max((e.max_rel_interior if interior else e.max_rel for e in self.per_block.values()), default=0.0)

    def gated(self, mode: str) -> float:
        """The error ``--check-fold`` holds to its tolerance: :attr:`max_rel` in exact mode, the worst per-block error
        away from the border in paper mode; the worst per-block error when the whole-model reference saturates
        (its comparison says nothing then)."""
        if self.saturated:
            return self.worst(interior=mode != "exact")
        return self.max_rel if mode == "exact" else self.worst(interior=True)

    def to_json(self) -> dict[str, Any]:
        """``inspect --json``'s ``check_fold``."""
        out: dict[str, Any] = {"per_block": {str(i): asdict(e) for i, e in self.per_block.items()},
                               "max_rel": self.max_rel, "folded": self.folded, "saturated": self.saturated,
                               "random_bn": self.random_bn, "inputs": self.inputs}
        if self.float64 is not None and self.output is not None and self.features is not None:
            f64 = self.float64.to_json()
            out |= {"output": asdict(self.output), "features": asdict(self.features), "noise_floor": self.noise_floor,
                    "float64": {"output": f64["output"], "features": f64["features"], "max_rel": self.float64.max_rel}}
        return out


SATURATION = 1e-3   # the reference's logits vary less than this (relative) over the inputs: they are a constant


def check_fold(model: nn.Module, resolution: int, mode: str = "exact", seed: int = 0,
               batch: int = 2, *, random_bn: bool = True, inputs: torch.Tensor | None = None,
               inputs_name: str = "random") -> FoldCheckResult:
    """With ``random_bn`` randomise BN statistics (in place: a network with random weights has BN statistics that
    hide errors; a trained network's own are kept without it), fold every block that folds in ``mode``, compare
    with the linearised model (``linearize(model, plan)``) on ``inputs`` (default: ``batch`` random normal images;
    ``inputs_name`` says what they are). With no such block: nothing folded (``folded`` 0) and nothing run.

    - ``per_block``: each folded block alone, in float32, fed the reference block's input (``verify_fold``).
    - ``output`` / ``features``: the whole float32 model (logits / last block's output). Its error is the
      blocks' float32 rounding carried through everything after them, amplified by the blocks that stay as
      they are; ``noise_floor`` is the same amplification without any fold: the float32 linearised network
      against its float64 twin (relative, the worst of logits and last block's output).
    - ``float64``: the whole model folded and run in float64 (``output``, ``features``, ``max_rel``): the fold
      algebra and its wiring, without float32 rounding.
    - ``max_rel``: what ``--check-fold`` gates in exact mode: the worse of the per-block float32 error and the
      float64 whole-model error, each relative to the max |reference| of what it compares (paper mode gates
      the per-block error away from the border instead).
    - ``saturated``: the float32 reference's logits are (nearly) the same for every input (they vary by less than
      :data:`SATURATION` of their magnitude, e.g. a trained network with every block linearised, whose activations
      grow without bound): the whole-model comparisons then compare two constants and would pass whatever the
      fold did, so the gate is the per-block error alone."""

    plan = foldable_in(model, mode)
    if not plan:
        return FoldCheckResult(folded=0, per_block={}, max_rel=0.0, random_bn=random_bn, inputs=inputs_name)
    if random_bn:
        randomize_bn_(model, seed, plan=plan)
    size = (resolution, resolution)
    # verify_fold's inputs: given, or its own random draw with this seed
    x = (torch.randn(batch, input_channels(model), *size, generator=torch.Generator().manual_seed(int(seed)),
                     dtype=torch.float32) if inputs is None else inputs.float())
    reference = linearize(model, plan)
    res = verify_fold(reference, fold_blocks(model, plan, mode, size), size, seed=seed, inputs=x)
    model64 = copy.deepcopy(model).double()
    reference64 = linearize(model64, plan)
    res64 = verify_fold(reference64, fold_blocks(model64, plan, mode, size), size, seed=seed, inputs=x.double())
    # the float32 linearised network against its float64 twin, on the same inputs
    feats: dict[str, torch.Tensor] = {}
    last = find_blocks(reference)[-1].path
    outs: dict[str, torch.Tensor] = {}
    for key, net, xx in (("32", reference, x), ("64", reference64, x.double())):
        h = net.get_submodule(last).register_forward_hook(
            lambda _m, _a, out, k=key: feats.__setitem__(k, out.detach()))
        try:
            with torch.no_grad():
                outs[key] = net.eval()(xx)
        finally:
            h.remove()
    floor = max(_rel(outs["32"], outs["64"]), _rel(feats["32"], feats["64"]))
    worst_block = max(e.max_rel for e in res.per_block.values())
    logits = outs["32"].double()
    spread = float((logits - logits.mean(0, keepdim=True)).abs().max())
    scale = float(logits.abs().max())
    saturated = (not torch.isfinite(logits).all()) or (len(logits) > 1 and spread <= SATURATION * scale)
    return FoldCheckResult(folded=len(plan), per_block=res.per_block, max_rel=max(worst_block, res64.max_rel),
                           output=res.output, features=res.features, noise_floor=floor, float64=res64,
                           saturated=bool(saturated), random_bn=random_bn, inputs=inputs_name)


# ------------------------------------------------------------------------------------------------ CLI
def _mflops(v: int | None) -> str:
    return "-" if v is None else f"{v / 1e6:.2f}"


def _kparams(v: int | None) -> str:
    return "-" if v is None else f"{v / 1e3:.1f}"


def format_report(rep: InspectReport) -> str:
    head = ("idx", "path", "kind", "cin->cout", "t", "k", "s", "res", "MFLOPs", "MFLOPs fold", "kParams",
            "kParams fold", "lower?", "foldable")
    lines = []
    for r in rep.blocks:
        lower = "-" if r.fold_lowers_flops is None else ("yes" if r.fold_lowers_flops else "no")
        lines.append((str(r.index), r.path, r.kind.split(".")[-1], f"{r.cin}->{r.cout}", f"{r.expansion:g}",
                      str(r.kernel), str(r.stride), "yes" if r.residual else "no", _mflops(r.flops),
                      _mflops(r.flops_folded), _kparams(r.params), _kparams(r.params_folded), lower,
                      "yes" if r.foldable else f"no: {r.reason}"))
    widths = [max([len(h), *(len(row[i]) for row in lines)]) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:{'<' if i in (1, 2, 13) else '>'}{w}}}" for i, w in enumerate(widths))
    out = [f"{rep.model} @ {rep.resolution}x{rep.resolution}, batch 1 — folded columns: full fold, {rep.mode} mode",
           fmt.format(*head), *(fmt.format(*row).rstrip() for row in lines)]
    n_fold = sum(r.foldable for r in rep.blocks)
    n_drop = sum(not r.foldable and r.variants == ("drop",) for r in rep.blocks)
    if not rep.blocks:
        out.append("no block of this model is one latopt knows (block adapters: latopt.adapters)")
    for o in rep.others:
        where = ", ".join(o.paths[:3]) + (f", ... ({len(o.paths)} in all)" if len(o.paths) > 3 else "")
        out.append(f"not changeable: {o.kind} ×{len(o.paths)} ({where}): {o.reason}")
    if rep.fixed_reason:
        out.append(f"fixed parts: stem/head not known ({rep.fixed_reason}); totals below are the whole model")
    else:
        out.append(f"fixed parts: stem ({', '.join(rep.fixed_paths['stem'])}) {_mflops(rep.stem_flops)} MFLOPs "
                   f"{_kparams(rep.stem_params)} kParams; head ({', '.join(rep.fixed_paths['head'])}) "
                   f"{_mflops(rep.head_flops)} MFLOPs {_kparams(rep.head_params)} kParams")
    out.append(f"total: {_mflops(rep.total_flops)} MFLOPs, {rep.total_params / 1e6:.3f} M params as-is; "
               f"all {n_fold} foldable blocks folded: {_mflops(rep.folded_total_flops)} MFLOPs, "
               f"{rep.folded_total_params / 1e6:.3f} M params; {len(rep.blocks)} blocks"
               + (f"; {n_drop} more may be dropped (squeeze-excitation, drop only)" if n_drop else ""))
    return "\n".join(out)


def format_check(res: FoldCheckResult, mode: str) -> str:
    if not res.folded or res.output is None or res.features is None or res.float64 is None:
        return f"fold check: no block of this model folds in {mode} mode; nothing to check"
    bn = "random BN statistics" if res.random_bn else "the network's own BN statistics"
    out = [f"fold check ({bn}, {res.inputs} inputs; folded vs linearize(model, 'all'); rel = abs / max|reference|):",
           f"{'idx':>4}  {'variant':<8}  {'max abs':>10}  {'max rel':>10}  {'rel interior':>12}"]
    for i, e in sorted(res.per_block.items()):
        out.append(f"{i:>4}  {e.variant:<8}  {e.max_abs:>10.3e}  {e.max_rel:>10.3e}  {e.max_rel_interior:>12.3e}")
    worst, worst_in = res.worst(), res.worst(interior=True)
    out.append(f"per block worst: rel {worst:.3e} (interior {worst_in:.3e})")
    out.append(f"whole model, float32: logits max abs {res.output.max_abs:.3e} rel {res.output.max_rel:.3e}; "
               f"last block output max abs {res.features.max_abs:.3e} rel {res.features.max_rel:.3e} "
               f"(the linearised network's own float32 rounding, unfolded vs float64: rel {res.noise_floor:.3e})")
    f64 = res.float64
    out.append(f"whole model, float64 (the fold algebra): logits rel {f64.output.max_rel:.3e}; "
               f"last block output rel {f64.features.max_rel:.3e}")
    if res.saturated:
        out.append("the linearised network's logits are the same for every input (its activations grow without "
                   "bound), so the whole-model comparisons compare two constants and show nothing: the check is "
                   f"the per-block error alone, {res.gated(mode):.3e} (tolerance {FOLD_CHECK_TOLERANCE:g})")
    elif mode == "exact":
        out.append(f"overall relative error {res.max_rel:.3e}: the worse of per block (float32) and whole model "
                   f"(float64) (tolerance {FOLD_CHECK_TOLERANCE:g})")
    else:
        out.append(f"paper mode: interior per-block error {worst_in:.3e} (tolerance {FOLD_CHECK_TOLERANCE:g}); "
                   "border and whole-model errors are expected")
    out.append("exact means: each folded network computes what the network with those blocks' activations removed "
               "(the variant network) computes, not what the original network computes; how much accuracy that "
               "costs is what fine-tuning recovers and the accuracy gates measure")
    return "\n".join(out)
