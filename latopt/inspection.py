"""``latopt inspect MODEL``: the per-block table (shape, FLOPs and params as-is and folded) and
``--check-fold``, the numeric check of the fold engine on a whole model.

FLOPs are counted by :func:`latopt.models.count_flops` (``torch.utils.flop_counter.FlopCounterMode``: 2 ×
multiply-accumulates of the convolutions and the classifier; element-wise additions such as the residual or
the exact-mode bias map are not counted). Params count trainable parameters (BN affine included as-is; the exact
mode's bias map is a buffer, not a parameter).

Public API::

    inspect_model(model, resolution, mode="exact", name="") -> InspectReport
    check_fold(model, resolution, mode="exact", seed=0, batch=2) -> dict   (randomises BN in place)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from latopt.blocks import block_input_shapes, find_blocks
from latopt.constants import FOLD_CHECK_TOLERANCE
from latopt.fold import fold_block_module, fold_blocks, linearize, randomize_bn_, verify_fold
from latopt.models import count_flops
from latopt.stemhead import fixed_parts


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

    @property
    def fold_lowers_flops(self) -> bool | None:
        return None if self.flops_folded is None else self.flops_folded < self.flops


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

    @property
    def folded_total_flops(self) -> int:
        return self.total_flops - sum(b.flops - b.flops_folded for b in self.blocks if b.flops_folded is not None)

    @property
    def folded_total_params(self) -> int:
        return self.total_params - sum(b.params - b.params_folded for b in self.blocks if b.params_folded is not None)


def _params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def inspect_model(model: nn.Module, resolution: int, mode: str = "exact", name: str = "") -> InspectReport:
    """Per-block FLOPs/params as-is and fully folded (``mode`` decides the folded module's layout)."""

    shape = (1, 3, resolution, resolution)
    shapes = block_input_shapes(model, shape)
    rows: list[BlockRow] = []
    for b in find_blocks(model):
        mod = model.get_submodule(b.path)
        s = shapes[b.index]
        fl, fp = None, None
        if b.foldable:
            fb = fold_block_module(model, b, "full", mode, tuple(s[-2:]))
            fl, fp = count_flops(fb, s), _params(fb)
        rows.append(BlockRow(b.index, b.path, b.kind, b.cin, b.cout, b.expansion, b.kernel, b.stride, b.residual,
                             s, count_flops(mod, s), _params(mod), fl, fp, b.foldable, b.reason))
    fixed = fixed_parts(model)
    last = find_blocks(model)[-1]
    with torch.no_grad():
        model.eval()
        head_in = model.get_submodule(last.path)(torch.zeros(shapes[last.index])).shape
    return InspectReport(
        model=name or type(model).__name__, resolution=resolution, mode=mode, blocks=rows,
        stem_flops=count_flops(fixed.stem, shape), stem_params=_params(fixed.stem),
        head_flops=count_flops(fixed.head, tuple(head_in)), head_params=_params(fixed.head),
        total_flops=count_flops(model, shape), total_params=_params(model),
        fixed_paths={"stem": fixed.stem_paths, "head": fixed.head_paths},
    )


def check_fold(model: nn.Module, resolution: int, mode: str = "exact", seed: int = 0, batch: int = 2) -> dict:
    """Randomise BN statistics (in place), fold every foldable block, compare with the linearised model."""

    randomize_bn_(model, seed, plan="all")
    reference = linearize(model, "all")
    folded = fold_blocks(model, "all", mode, (resolution, resolution))
    return verify_fold(reference, folded, (resolution, resolution), batch=batch, seed=seed)


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
    widths = [max(len(h), *(len(row[i]) for row in lines)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:{'<' if i in (1, 2, 13) else '>'}{w}}}" for i, w in enumerate(widths))
    out = [f"{rep.model} @ {rep.resolution}x{rep.resolution}, batch 1 — folded columns: full fold, {rep.mode} mode",
           fmt.format(*head), *(fmt.format(*row).rstrip() for row in lines)]
    n_fold = sum(r.foldable for r in rep.blocks)
    out.append(f"fixed parts: stem ({', '.join(rep.fixed_paths['stem'])}) {_mflops(rep.stem_flops)} MFLOPs "
               f"{_kparams(rep.stem_params)} kParams; head ({', '.join(rep.fixed_paths['head'])}) "
               f"{_mflops(rep.head_flops)} MFLOPs {_kparams(rep.head_params)} kParams")
    out.append(f"total: {_mflops(rep.total_flops)} MFLOPs, {rep.total_params / 1e6:.3f} M params as-is; "
               f"all {n_fold} foldable blocks folded: {_mflops(rep.folded_total_flops)} MFLOPs, "
               f"{rep.folded_total_params / 1e6:.3f} M params; {len(rep.blocks)} blocks")
    return "\n".join(out)


def format_check(res: dict, mode: str) -> str:
    out = ["fold check (random BN statistics; folded vs linearize(model, 'all'); rel = abs / max|reference|):",
           f"{'idx':>4}  {'variant':<8}  {'max abs':>10}  {'max rel':>10}  {'rel interior':>12}"]
    for i, e in sorted(res["per_block"].items()):
        out.append(f"{i:>4}  {e['variant']:<8}  {e['max_abs']:>10.3e}  {e['max_rel']:>10.3e}  {e['max_rel_interior']:>12.3e}")
    worst = max((e["max_rel"] for e in res["per_block"].values()), default=0.0)
    worst_in = max((e["max_rel_interior"] for e in res["per_block"].values()), default=0.0)
    out.append(f"per block worst: rel {worst:.3e} (interior {worst_in:.3e})")
    out.append(f"whole model: logits max abs {res['output']['max_abs']:.3e} rel {res['output']['max_rel']:.3e}; "
               f"last block output max abs {res['features']['max_abs']:.3e} rel {res['features']['max_rel']:.3e}")
    if mode == "exact":
        out.append(f"overall relative error {res['max_rel']:.3e} (tolerance {FOLD_CHECK_TOLERANCE:g})")
    else:
        out.append(f"paper mode: interior per-block error {worst_in:.3e} (tolerance {FOLD_CHECK_TOLERANCE:g}); "
                   "border and whole-model errors are expected")
    return "\n".join(out)
