"""What is exported: the network to ship, the σ_α network its fold came from, the plan and the resolution.

Public API::

    Plan                                          what export ships and what the fold gates check it against
    build_plan(checkpoint, loaded, *, fold, lut, res, mode="exact", spans=()) -> Plan   fold: --fold spec or
                                                  {block: variant}; spans [start, end, kernel] (a plan file's)
    check_span_kernels(net, spans, what, param)   each span's recorded kernel is what its folded blocks compose to
    defer_plan(plan, bias_maps) -> nn.Module | None   ship exact folds with one bias map per chain ("deferred")
    parse_fold_spec(spec, lut) -> list[int] | "all"     ``--fold``: none, all, auto (needs the LUT) or 1,3,5
    auto_plan(lut) -> list[int]                   blocks whose full fold lowers the latency (c_l > 0)
    check_fold_size(checkpoint, fold_spec, res)   an exact-mode fold only at the input size it was made for
    export_resolution(arch, meta, override) -> int
    export_lut(path, arch, device, resolution) -> LUT | None   ``--lut`` or the device's default LUT if present
    asis_network(arch) -> nn.Module               the unfolded network of the checkpoint's architecture
    find_prefold(checkpoint, meta) -> (path, network, note)   the pre-fold a folded checkpoint came from, by digest
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from latopt.config import check_resolution
from latopt.constants import FOLD_MODES
from latopt.errors import LatoptError
from latopt.export.export_record import BiasMapsSection
from latopt.files.checkpoint import (
    Arch,
    CheckpointMeta,
    FoldArch,
    FoldHow,
    content_digest,
    load_checkpoint,
    make_arch,
)
from latopt.latency.lut import LUT, check_blocks, costs, default_lut_path, load_lut
from latopt.nets.blocks import find_blocks
from latopt.nets.models import build_model
from latopt.rewrite import as_shipped, fold_blocks, merge_spans, normalize_plan, plain_activations_
from latopt.rewrite.span import span_kernel


@dataclass
class Plan:
    """What is exported: the folded network, the unfolded σ_α network it came from, and the fold plan."""

    folded: nn.Module
    source: nn.Module | None   # the unfolded σ_α network the fold was computed from (None: no fold gate)
    arch: Arch
    meta: CheckpointMeta
    plan: dict[int, str]
    mode: str
    resolution: int
    notes: list[str] = field(default_factory=list)
    asis: bool = False         # export folded nothing: the checkpoint's own network is what is shipped
    bias_maps: BiasMapsSection | None = None   # exact mode: how the bias maps are shipped (``defer_plan``)
    spans: list[list[int]] = field(default_factory=list)  # [start, end, kernel]: merged into one conv each


def find_prefold(checkpoint: str | Path, meta: CheckpointMeta) -> tuple[str | None, nn.Module | None, str | None]:
    """The σ_α network a folded checkpoint came from: ``prefold.pt`` beside it, else the path it records, and
    only the one whose content digest is the one it records (``meta.prefold_sha256``; ``latopt fold`` writes
    both), so a copied fold directory is checked against its own pre-fold, never another fold's. Returns
    (path, network, note): (None, None, why) when none is found or none matches (fold gates skipped; the
    ONNX and accuracy gates still apply). A checkpoint without a digest (older latopt) takes the first file."""
    recorded, want = meta.prefold_checkpoint, meta.prefold_sha256
    seen: list[str] = []
    for c in (Path(checkpoint).parent / "prefold.pt", None if recorded is None else Path(recorded)):
        if c is None or not c.is_file() or str(c.resolve()) in seen:
            continue
        seen.append(str(c.resolve()))
        model, arch, pmeta = load_checkpoint(c)
        if want is None or content_digest(model, arch, pmeta) == want:
            return str(c), model.eval(), (None if want is not None else
                                          f"the pre-fold checkpoint {c} is not bound by digest (an older latopt)")
    if seen:
        return None, None, (f"the pre-fold checkpoint(s) found ({', '.join(seen)}) are not the one this fold came "
                            "from (their content digest differs): fold gates skipped (ONNX and accuracy gates apply)")
    return None, None, "no pre-fold checkpoint recorded or found: fold gates skipped (ONNX gate still applies)"


def asis_network(arch: Arch) -> nn.Module:
    """The unfolded network of ``arch`` (random weights: what the latency comparison times as-is)."""
    return build_model(arch.model, num_classes=arch.num_classes).eval()


def export_resolution(arch: Arch, meta: CheckpointMeta, override: int | None) -> int:
    """``--resolution`` when given, else the fold's input size, else the resolution the checkpoint records
    (``meta.resolution``, written by ``latopt train`` / ``latopt fold`` through ``latopt.data.data_meta``)."""
    if override is not None:
        return check_resolution(override, "resolution", param="resolution")
    if arch.fold is not None and arch.fold.input_size:
        return check_resolution(arch.fold.input_size[0], "the checkpoint's fold input size")
    if meta.resolution is not None:
        return check_resolution(meta.resolution, "the checkpoint's meta resolution")
    raise LatoptError("the checkpoint does not record its input resolution; give the resolution", param="resolution")


def export_lut(path: str | None, arch: Arch, device: Any, resolution: int) -> Any | None:
    """The LUT ``path`` (``--lut``), else the device's default LUT for this model when it exists, else None.
    A given LUT must be of this model, resolution, device and batch: export compares its prediction with what
    it measures on ``device``, and a LUT timed on another device or batch predicts something else."""
    model_name = arch.model
    lut: LUT | None
    if path:
        lut = load_lut(path, model=model_name, resolution=resolution, device=device.name, batch=device.batch)
    else:
        path = str(default_lut_path(device.name, model_name, resolution, device.batch))
        lut = load_lut(path, model=model_name, resolution=resolution) if Path(path).is_file() else None
    if lut is not None:
        check_blocks(lut, find_blocks(asis_network(arch)), path)
    return lut


def check_fold_size(checkpoint: str | Path, fspec: FoldArch, res: int) -> None:
    """An exact-mode fold holds bias maps for one input size: refuse another ``res`` up front."""
    size = fspec.input_size
    if fspec.mode != "exact" or not fspec.plan or size is None or list(size) == [res, res]:
        return
    h, w = size
    raise LatoptError(f"{checkpoint} was folded in exact mode for {h}x{w} inputs (its bias maps hold for that "
                      f"size only), so it cannot be exported at resolution {res}: export it at {h}, or fold again "
                      f"at {res} (latopt fold with data.resolution: {res}) or in paper mode (fold.mode: paper), "
                      "which works at any input size", param="resolution")


def auto_plan(lut: Any) -> list[int]:
    """Blocks whose full fold lowers the latency on the LUT's device (c_l > 0)."""
    return sorted(i for i, c in costs(lut).items() if c > 0)


def parse_fold_spec(spec: str, lut: Any | None) -> list[int] | str:
    """``--fold``: "none" → [], "all", "auto" → :func:`auto_plan` (needs ``lut``), or indices "1,3,5"."""
    spec = spec.strip()
    if spec == "none":
        return []
    if spec == "all":
        return "all"
    if spec == "auto":
        if lut is None:
            raise LatoptError("fold 'auto' needs the device's LUT: run `latopt profile` first or give a LUT file",
                              param="lut_path")
        return auto_plan(lut)
    try:
        blocks = [int(s) for s in spec.split(",")]
    except ValueError:        # also an empty item: "1,,3", "3,", ","
        blocks = []
    if not blocks or len(set(blocks)) != len(blocks):
        raise LatoptError(f"fold {spec!r}: give 'all', 'none', 'auto' or distinct block indices like 1,3,5", param="fold")
    return blocks


def check_span_kernels(net: nn.Module, spans: Sequence[Sequence[int]], what: str, param: str) -> None:
    """Each span ``[start, end, kernel]`` of the folded network ``net``: LatoptError (one line, naming the span
    and both kernels, ``param``) when ``kernel`` is not the one its blocks compose to
    (:func:`latopt.rewrite.span.span_kernel`). ``what`` says where the spans are recorded ("the plan file", "checkpoint X (arch.fold.spans)").
    Export merges the blocks (what the ONNX ships), but export.json, REPORT.md and the prediction carry the
    recorded kernel: a forged one would describe a network that is not the one shipped."""
    blocks = {b.index: b for b in find_blocks(net)}
    for start, end, kernel in ([int(x) for x in s] for s in spans):
        if not (start < end and start in blocks and end in blocks):
            raise LatoptError(f"span {start}-{end} of {what}: a span is a run of at least two blocks of the network "
                              f"(blocks 0..{len(blocks) - 1})", param=param)
        try:
            composed = span_kernel([net.get_submodule(blocks[i].path) for i in range(start, end + 1)])
        except LatoptError as e:
            raise LatoptError(f"span {start}-{end} of {what}: {e}", param=param) from None
        if composed != kernel:
            raise LatoptError(f"span {start}-{end} of {what} records a {kernel}x{kernel} convolution, but its blocks "
                              f"compose to a {composed}x{composed} one; re-create it", param=param)


def build_plan(checkpoint: str | Path, loaded: tuple[nn.Module, Arch, CheckpointMeta], *,
               fold: str | Mapping[int, str] | None, lut: Any | None, res: int, mode: str = "exact",
               spans: Sequence[Sequence[int]] = ()) -> Plan:
    """What to export from the ``loaded`` checkpoint (``load_checkpoint``'s result) at resolution ``res``.

    ``fold`` None: the checkpoint as it is (folded or not); else a ``--fold`` spec for an unfolded one, or
    {block: variant} (a plan file's, ``--plan``: any variant, folded as ``latopt.dp.run_dp`` folds it), with the
    plan file's ``spans``. The spans' recorded kernels, a plan file's or a folded checkpoint's, are checked against
    the blocks (:func:`check_span_kernels`)."""
    model, arch, meta = loaded
    model.eval()
    fspec = arch.fold
    if fspec is not None:
        if fold is not None:
            raise LatoptError(f"{checkpoint} is already folded; give no fold (it applies to unfolded checkpoints)",
                              param="fold")
        check_fold_size(checkpoint, fspec, res)
    source_model = copy.deepcopy(model) if fspec is None else None
    n_plain = plain_activations_(model)  # σ_α with α = 0 is σ: export the plain activation
    notes: list[str] = []
    if n_plain:
        notes.append(f"{n_plain} σ_α activations with α = 0 exported as the plain activation they equal")
    if fspec is not None:
        plan = {int(k): str(v) for k, v in fspec.plan.items()}
        if not plan:
            notes.append("the checkpoint's fold folded no block (its plan is empty): exported as it is")
            return Plan(model, None, arch, meta, {}, fspec.mode, res, notes, asis=True)
        prefold, source, note = find_prefold(checkpoint, meta)
        if prefold and meta.finetuned is not False:
            notes.append("the fold gates check the fold recomputed from the pre-fold checkpoint "
                         f"({prefold}); the exported weights were fine-tuned after folding")
        if note:
            notes.append(note)
        fold_spans = [list(s) for s in fspec.spans]
        check_span_kernels(model, fold_spans, f"checkpoint {checkpoint} (arch.fold.spans)", "checkpoint")
        return Plan(model, source, arch, meta, plan, fspec.mode, res, notes, asis=True, spans=fold_spans)
    spec = dict(fold) if isinstance(fold, Mapping) else parse_fold_spec("none" if fold is None else fold, lut)
    if not spec:  # export the network as it is (no fold gate)
        if isinstance(fold, Mapping):
            notes.append("the plan changes no block: the network is exported as it is")
        elif fold is None:
            notes.append("an unfolded checkpoint and no --fold: the network is exported as it is")
        elif fold.strip() == "auto":
            notes.append("--fold auto: no block's fold pays on this device per the LUT; exported as it is")
        else:
            notes.append("nothing folded (--fold none): the network is exported as it is")
        return Plan(model, None, arch, meta, {}, "none", res, notes, asis=True)
    plan = normalize_plan(model, spec)
    if not plan:
        raise LatoptError("the fold plan is empty: nothing to fold (check the fold and the LUT's c_l)", param="fold")
    if mode not in FOLD_MODES:
        raise LatoptError(f"mode {mode!r}: choose {' or '.join(FOLD_MODES)}", param="mode")
    folded = fold_blocks(model, plan, mode=mode, input_size=(res, res)).eval()
    if mode == "paper":
        notes.append("paper mode: a constant bias per folded block, wrong on the border ring by design "
                     "(fine-tune after folding to repair it); the fold gate checks each block away from its border")
    new_arch = make_arch(folded, arch.model, arch.num_classes, fold=FoldHow(mode, [res, res]))
    plan_spans = [[int(x) for x in s] for s in spans]
    if plan_spans and mode != "exact":
        raise LatoptError(f"mode {mode!r}: the plan merges spans, which are exact-mode rewrites; give mode 'exact'",
                          param="mode")
    check_span_kernels(folded, plan_spans, "the plan file", "plan")
    return Plan(folded, source_model, new_arch, meta, plan, mode, res, notes, spans=plan_spans)


def defer_plan(p: Plan, bias_maps: str) -> nn.Module | None:
    """Exact-mode folds are shipped with one bias map per chain of ``full`` folds
    (:func:`latopt.rewrite.as_shipped`; ``bias_maps`` "deferred") or with one per block ("per-block"), and the
    plan's spans merged into one convolution each (:func:`latopt.rewrite.merge_spans`). When the network is
    rewritten, ``p.folded`` becomes the rewritten copy and the per-block network it came from is returned
    (the gates compare the two); ``p.bias_maps`` records the form, the chains and the spans. None otherwise."""
    if p.mode != "exact" or not p.plan:
        return None
    exact, size = p.folded, (p.resolution, p.resolution)
    spans = p.spans or None
    if bias_maps == "per-block":
        p.bias_maps = BiasMapsSection(form="per-block", spans=spans)
        if not p.spans:
            return None
        p.folded = merge_spans(exact, [(s[0], s[1]) for s in p.spans], size).eval()
        return exact
    p.folded, info = as_shipped(exact, spans=[s[:2] for s in p.spans], input_size=size)
    p.bias_maps = BiasMapsSection(form="deferred", chains=info.chains, adds_per_block=info.adds_per_block,
                                  adds_deferred=info.adds_deferred, adds_saved=info.adds_saved, spans=spans)
    return exact
