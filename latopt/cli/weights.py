"""``latopt import``: your own weights (a state_dict or safetensors file of a zoo architecture) as a latopt
checkpoint (:func:`latopt.files.weights_import.import_weights`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from latopt.cli.common import common_parser
from latopt.constants import NORMALIZE_NAMES
from latopt.errors import LatoptError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import", parents=[common_parser()], help="turn your weights file into a latopt checkpoint",
                       description="Read a state_dict (.pth/.pt, loaded without pickled code) or .safetensors file of "
                                   "MODEL, match its keys to latopt's MODEL (by name, else by position with every "
                                   "shape checked), and write a latopt checkpoint that --checkpoint and --base "
                                   "accept (latopt train gives it a new classifier when the task's classes differ).")
    p.add_argument("weights", help="the weights file: a state_dict (.pth, .pt) or .safetensors")
    p.add_argument("--model", required=True, help="its architecture, a latopt model name, e.g. efficientnet_lite0 "
                   "or 'torchvision/mobilenet_v2' (latopt inspect MODEL shows its blocks)")
    p.add_argument("--normalize", metavar="NORM", help="the input normalisation the weights were trained with, "
                   f"recorded for the runs that start from them: {' or '.join(NORMALIZE_NAMES)} (see the weights' "
                   "source: TensorFlow ports such as the Lite family use inception, [-1, 1]) or MEAN/STD, 3 "
                   "comma-separated numbers each of [0, 1] pixels (default: none recorded; the task's own is used)")
    p.add_argument("--out", help="the checkpoint to write (default: WEIGHTS' name with .latopt.pt, in the current "
                   "directory); an existing file is refused")
    p.set_defaults(func=_cmd_import)


def _cmd_import(args: argparse.Namespace) -> int:
    from latopt.files.weights_import import import_weights

    out = Path(args.out) if args.out else Path(Path(args.weights).name.split(".")[0] + ".latopt.pt")
    r = import_weights(args.weights, args.model, out, normalize=_normalize(args.normalize))
    norm = f", inputs normalised {args.normalize}" if args.normalize else ""
    print(f"imported {r.tensors} tensors of {args.weights} into {args.model} ({r.matched}, {r.num_classes} classes"
          f"{norm}); wrote {r.path}")
    return 0


def _normalize(text: str | None) -> Any:
    """``--normalize``: a name, or ``MEAN/STD`` as ``{mean, std}`` (checked when the checkpoint's meta is)."""
    if text is None or text in NORMALIZE_NAMES:
        return text
    mean, sep, std = text.partition("/")
    try:
        if not sep:
            raise ValueError
        return {"mean": [float(v) for v in mean.split(",")], "std": [float(v) for v in std.split(",")]}
    except ValueError:
        raise LatoptError(f"--normalize {text!r}: give {' or '.join(NORMALIZE_NAMES)}, or MEAN/STD as "
                          "'0.5,0.5,0.5/0.5,0.5,0.5'", param="normalize") from None
