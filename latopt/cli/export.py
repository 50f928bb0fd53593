"""``latopt export --checkpoint CKPT --device D``: ONNX / TensorRT engine / INT8 ONNX, numeric gates, measured latency."""

from __future__ import annotations

import argparse
from pathlib import Path

from latopt.cli.common import common_parser
from latopt.constants import (
    BIAS_MAPS,
    EXPORT_FORMATS,
    FOLD_MODES,
    MAX_GATE_SAMPLES,
    PRECISIONS,
    RESOLUTION_RANGE,
)


def _cmd_export(args: argparse.Namespace) -> int:
    # start-up time: the stage (torch, ...) is imported when the command runs, not for `latopt --help`
    from latopt.export import CheckOptions, ShipOptions, export

    out = Path(args.out or Path("runs") / "export" / Path(args.checkpoint).stem)
    ship = ShipOptions(fold=args.fold, plan=args.plan, mode=args.mode, bias_maps=args.bias_maps, lut=args.lut,
                       resolution=args.resolution)
    checks = CheckOptions(samples=args.samples, seed=args.seed, gate_accuracy=not args.no_accuracy_gate,
                          timing_only=args.timing_only, measure=not args.no_measure)
    r = export(args.checkpoint, args.device, out, fmt=args.format, precision=args.precision, ship=ship, checks=checks)
    print(f"wrote {out}/export.json, REPORT.md and {', '.join(r.files)}")
    lat = r.latency
    if lat is not None and lat.count_unit:   # a count device: counts in their unit, nothing measured
        from latopt.export.export_report import latency_line

        print(latency_line(lat))
    elif lat is not None:
        print(f"speed-up {lat.speedup:.2f}× (as-is {lat.as_is_ms:.3f} ms → folded {lat.folded_ms:.3f} ms)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", parents=[common_parser()],
                       help="export a folded checkpoint to ONNX / TensorRT / INT8 ONNX with numeric gates and measured latency")
    p.add_argument("--checkpoint", required=True, help="latopt checkpoint, exported as it is (--fold folds an unfolded one first)")
    p.add_argument("--device", default="cpu", help="device profile: a name (profiles/*.yaml or shipped) or a YAML path; default cpu")
    p.add_argument("--format", default="onnx", choices=EXPORT_FORMATS)
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="builds and measures at this precision (default: the device profile's): fp32; fp16 (TensorRT, "
                        "torch on CUDA); int8 (an ONNX Runtime CPU device, --format onnx: also writes model.int8.onnx, "
                        "ONNX Runtime static INT8 calibrated on 256 training images, its accuracy gated against the "
                        "fp32 ONNX file's, and its latency measured)")
    p.add_argument("--fold", default=None,
                   help="fold an unfolded checkpoint here, without fine-tuning (so with --timing-only or "
                        "--no-accuracy-gate): 'all', 'auto' (blocks whose fold pays on this device, from the LUT) or "
                        "1,3,5; default (or 'none'): export the checkpoint as it is")
    p.add_argument("--plan", default=None,
                   help="apply a plan file (latopt plan --plan-only) to an unfolded checkpoint: each "
                        "block's variant folded exactly, not fine-tuned, with every numeric gate; its accuracy is not "
                        "the recorded one, so it needs --timing-only (or --no-accuracy-gate); the plan may come from "
                        "another device (it is then measured on this one)")
    p.add_argument("--mode", choices=FOLD_MODES, default=None,
                   help="with --fold: exact (bias map, equal everywhere; default) or paper (constant bias, any input "
                        "size); with --plan: the plan's")
    p.add_argument("--bias-maps", choices=BIAS_MAPS, default="deferred",
                   help="exact-mode folds: one bias map per chain of consecutive full folds (deferred; default, "
                        "the same function with fewer Adds) or one per folded block (per-block)")
    p.add_argument("--lut", default=None, help="LUT JSON (default ./profiles/<device>/<model>-r<res>-b<batch>.json if present)")
    p.add_argument("--resolution", type=int, default=None,
                   help="input resolution, {} .. {} (default: the checkpoint's; an exact-mode fold only at its own; "
                        "another than the recorded one needs --timing-only or --no-accuracy-gate)"
                   .format(*RESOLUTION_RANGE))
    p.add_argument("--samples", type=int, default=32,
                   help=f"inputs used by the numeric gates, 1 .. {MAX_GATE_SAMPLES} (default 32)")
    p.add_argument("--no-measure", action="store_true", help="skip the end-to-end latency measurement")
    p.add_argument("--no-accuracy-gate", action="store_true",
                   help="turn the accuracy gate off: ship model.onnx unchecked, also when the checkpoint's recorded "
                        "accuracy does not describe it (no task, too small a test split, no recorded accuracy, "
                        "another resolution, --fold / --plan); recorded in export.json and REPORT.md")
    p.add_argument("--timing-only", action="store_true",
                   help="ship a timing-only artefact (model.timing-only.onnx / .engine / .int8.onnx), not "
                        "accuracy-gated: how to time a --plan, a --fold or another --resolution; export.json says "
                        "timing_only: true, accuracy_gate: false (with --no-accuracy-gate too)")
    p.add_argument("--out", default=None, help="output directory (default runs/export/<checkpoint name>)")
    p.set_defaults(func=_cmd_export)
