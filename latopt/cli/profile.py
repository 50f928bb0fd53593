"""``latopt profile --device D --model M``: the device's per-block latency table (LUT)."""

from __future__ import annotations

import argparse

from latopt.cli.common import common_parser
from latopt.constants import FOLD_MODES, FOLD_VARIANTS


def _cmd_profile(args: argparse.Namespace) -> int:
    # start-up time: the stage (torch, ...) is imported when the command runs, not for `latopt --help`
    from latopt.latency.devices import load_device
    from latopt.latency.lut import default_lut_path, save_lut
    from latopt.latency.profiler import format_lut, profile_model
    from latopt.nets.models import check_num_classes
    from latopt.training.loop import seed_everything

    device = load_device(args.device)
    batch = args.batch if args.batch is not None else device.batch
    check_num_classes(args.num_classes)  # a checkpoint's bound, before the device is profiled
    seed_everything(args.seed)
    lut = profile_model(args.model, device, args.resolution, batch, variants=args.variants.split(","),
                        num_classes=args.num_classes, fold_mode=args.fold_mode)
    out = args.out or default_lut_path(device.name, lut.model, lut.resolution, lut.batch)
    save_lut(lut, out)
    print(format_lut(lut))
    print(f"wrote {out}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", parents=[common_parser()],
                       help="time every block of a model on a device and write the latency LUT",
                       description="Time every MBConv block of MODEL as-is and folded at its real input shape "
                                   "on DEVICE (profiles/<DEVICE>.yaml, else the shipped profile), plus the fixed parts and the end-to-end "
                                   "networks, in one interleaved run; write the calibrated LUT as JSON.")
    p.add_argument("--device", required=True, help="device profile: a name (profiles/*.yaml in the working directory, else shipped) or a YAML path")
    p.add_argument("--model", required=True, help="model name, e.g. mobilenetv2_100, efficientnet_lite0")
    p.add_argument("--resolution", type=int, default=224, help="input resolution (default 224)")
    p.add_argument("--batch", type=int, default=None, help="batch size (default: the device profile's)")
    p.add_argument("--out", default=None, help="LUT file (default ./profiles/<device>/<model>-r<res>-b<batch>.json)")
    p.add_argument("--variants", default="full", metavar="V,V",
                   help=f"fold variants to time besides as-is, comma-separated: {', '.join(FOLD_VARIANTS)} (full is always "
                        "timed; drop is 0 ms by definition; default full), and span: every run of 2-6 blocks that "
                        "is exactly one convolution in those variants (the DP merges them; e.g. full,pw,drop,span; "
                        "needs pw or drop, and --fold-mode exact)")
    p.add_argument("--num-classes", type=int, default=1000, help="classifier outputs, 1 .. 100000 (default 1000)")
    p.add_argument("--fold-mode", choices=FOLD_MODES, default="exact",
                   help="fold mode of the folded blocks (exact adds a bias map; default exact)")
    p.set_defaults(func=_cmd_profile)
