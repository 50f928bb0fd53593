#!/usr/bin/env python
"""Probe (not a latopt feature): what would a cross-block merge buy on top of the DP's plan?

A run of consecutive ``pw``/``drop`` blocks is a product of 1x1 convolutions (a stride-s 1x1 convolution is
sampling, which commutes with the next 1x1), so the run is exactly one 1x1 convolution, cin of the first
block → cout of the last, stride the product. This script takes the DP's plan at ``--budget`` on a LUT
(uniform importance, as ``tools/bench_export.py``'s ``dp`` set), folds it as export ships it
(``defer_bias_maps``), merges every such run of ≥ 2 blocks (runs whose ``pw`` holds a deferred bias map
are left alone), checks the merged network against the unmerged one in float64 and times as-is, the
plan and the plan merged in one interleaved run (ONNX Runtime, MobileNetV2 with random weights).
Why it is not in latopt: docs/variants.md ("Cross-block merges").

    python tools/merge_probe.py --lut profiles/cpu/mobilenetv2_100-r224-b1.json [--budget 0.55]
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

from latopt.dp import candidates, select_plan, variant_losses
from latopt.latency.devices import load_device
from latopt.latency.lut import load_lut
from latopt.latency.onnx_io import export_onnx
from latopt.latency.profiler import measure_networks
from latopt.nets.blocks import find_blocks
from latopt.nets.models import build_model
from latopt.rewrite import as_shipped, compose_span, randomize_bn_
from latopt.training.loop import seed_everything
from latopt.training.torch_settings import set_threads


def merge_runs(folded: nn.Module, plan: dict[int, str]) -> tuple[nn.Module, list[list[int]]]:
    """A copy of ``folded`` with each run of ≥ 2 consecutive pw/drop blocks (no bias map) as one 1x1 conv."""
    out = copy.deepcopy(folded)
    blocks = find_blocks(out)
    ok = {b.index for b in blocks if plan.get(b.index) in ("pw", "drop")
          and getattr(out.get_submodule(b.path), "bias_map", None) is None}
    runs: list[list[int]] = []
    for b in blocks:
        if b.index in ok and runs and runs[-1][-1] == b.index - 1:
            runs[-1].append(b.index)
        elif b.index in ok:
            runs.append([b.index])
    runs = [r for r in runs if len(r) >= 2 and any(plan[i] == "pw" for i in r)]
    path = {b.index: b.path for b in blocks}
    for run in runs:
        mods = [out.get_submodule(path[i]) for i in run]
        conv = compose_span(mods, mods[0].info.in_size)
        out.set_submodule(path[run[0]], conv)
        for i in run[1:]:
            out.set_submodule(path[i], nn.Identity())
    return out, runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lut", required=True, help="a LUT with pw and drop (latopt profile --variants full,pw,drop)")
    ap.add_argument("--budget", type=float, default=0.55)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--min-rounds", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    set_threads(1)
    seed_everything(args.seed)
    lut = load_lut(args.lut)
    res = lut.resolution
    plan, sel = select_plan(lut, variant_losses(None, None, None, candidates(lut), method="uniform"), args.budget)
    model = build_model(lut.model, num_classes=lut.num_classes).eval()
    randomize_bn_(model, seed=args.seed)
    folded = as_shipped(model, plan, input_size=(res, res))[0]
    merged, runs = merge_runs(folded, plan)
    print(f"DP plan at {args.budget}: {plan} (LUT ratio {sel.ratio:.3f}); merged runs {runs}")
    x = torch.randn(4, 3, res, res, dtype=torch.float64)
    with torch.no_grad():
        ref, got = copy.deepcopy(folded).double()(x), copy.deepcopy(merged).double()(x)
    rel = float((ref - got).abs().max() / ref.abs().max())
    print(f"merged vs unmerged (float64, merged weights stored in float32): max rel diff {rel:.2e}")
    if rel > 1e-6:
        raise SystemExit("the merge is not exact")
    tmp = Path(tempfile.mkdtemp(prefix="latopt-merge-probe-"))
    shape = (1, 3, res, res)
    files = {k: str(export_onnx(m, shape, tmp / f"{k}.onnx")) for k, m in
             {"as-is": model, "dp": folded, "dp+merge": merged}.items()}
    device = load_device(args.device)
    device = device.model_copy(update={"min_repeats": args.min_rounds,
                                       "max_repeats": max(device.max_repeats, args.min_rounds)})
    stats = measure_networks(files, device, shape)
    a = stats["as-is"]
    for k, s in stats.items():
        r = a.per_round_ratio(s)
        print(f"{k:<9} median {s.median_ms:.3f} ms [q1 {s.q1_ms:.3f}, q3 {s.q3_ms:.3f}]  speed-up "
              f"{a.median_ms / s.median_ms:.2f}x, per round {r.median_ms:.2f}x [{r.q1_ms:.2f}, {r.q3_ms:.2f}]  "
              f"({s.n} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
