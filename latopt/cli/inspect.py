"""``latopt inspect MODEL``: the blocks of a model, FLOPs and params as-is and folded; ``--check-fold``."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from latopt.cli.common import common_parser
from latopt.constants import FOLD_CHECK_TOLERANCE, FOLD_MODES, RESOLUTION_RANGE, SUPPORTED_MODELS
from latopt.errors import LatoptError, VerificationError, first_line
from latopt.files.artifacts import write_json_atomic
from latopt.log import get_logger

if TYPE_CHECKING:  # start-up time: torch is imported when a command runs
    from torch import nn


def _cmd_inspect(args: argparse.Namespace) -> int:
    # start-up time: the stage (torch, ...) is imported when the command runs, not for `latopt --help`
    from latopt.config import check_resolution
    from latopt.nets.block_table import check_fold, format_check, format_report, inspect_model
    from latopt.nets.models import build_model, canonical_name
    from latopt.training.loop import seed_everything

    if (args.data or args.random_bn) and not args.check_fold:
        raise LatoptError(f"{'--data' if args.data else '--random-bn'} applies to --check-fold; add it")
    seed_everything(args.seed)
    t0 = time.perf_counter()
    if args.checkpoint is not None:
        model, name, args.num_classes, args.resolution = _from_checkpoint(args)
    elif args.model is None:
        raise LatoptError("give a model name or --checkpoint CKPT")
    else:
        args.resolution = 224 if args.resolution is None else args.resolution
        name = canonical_name(args.model)
        try:
            model = build_model(name, 1000 if args.num_classes is None else args.num_classes)
        except LatoptError:
            raise
        except Exception as e:  # a library's model that does not build as asked: one line, not a traceback
            raise LatoptError(f"could not build {name} ({type(e).__name__}: {first_line(e, 160)})") from None
    check_resolution(args.resolution, "--resolution")
    rep = inspect_model(model, args.resolution, args.mode, name)
    print(format_report(rep))
    payload: dict = {"schema": "latopt.inspect/1", "model": name, "resolution": args.resolution, "mode": args.mode,
                     "blocks": [dict(vars(r), fold_lowers_flops=r.fold_lowers_flops) for r in rep.blocks],
                     "stem_flops": rep.stem_flops, "head_flops": rep.head_flops, "total_flops": rep.total_flops,
                     "total_params": rep.total_params, "folded_total_flops": rep.folded_total_flops}
    rc = 0
    if args.check_fold:
        inputs = None
        if args.data:
            import torch

            from latopt.data import get_task, renormalize

            task = renormalize(get_task(args.data, args.resolution, args.seed), getattr(args, "normalize", None))
            val: Any = task.val   # a map-style dataset
            if len(val) < 2:
                raise LatoptError(f"--data {args.data}: its validation split has {len(val)} image(s); the check "
                                  "needs two")
            inputs = torch.stack([val[i][0] for i in range(2)]).float()
        res = check_fold(model, args.resolution, args.mode, args.seed,
                         random_bn=args.random_bn or args.checkpoint is None, inputs=inputs,
                         inputs_name=f"{args.data} validation" if args.data else "random")
        print(format_check(res, args.mode))
        payload["check_fold"] = res.to_json()
        err = res.gated(args.mode)
        if args.json:
            write_json_atomic(args.json, payload)
        if err > FOLD_CHECK_TOLERANCE:
            raise VerificationError(f"fold check failed: relative error {err:.3e} > {FOLD_CHECK_TOLERANCE:g} ({args.mode} mode)")
    elif args.json:
        write_json_atomic(args.json, payload)
    get_logger("inspect").info(f"done in {time.perf_counter() - t0:.1f} s")
    return rc


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", parents=[common_parser()],
                       help="per-block table of a model (FLOPs/params as-is and folded); --check-fold verifies the fold",
                       description="Models: " + ", ".join(SUPPORTED_MODELS) + ", resnet20_cifar .. resnet110_cifar, "
                                   "any timm model name, torchvision/NAME (docs/compatibility.md)")
    p.add_argument("model", nargs="?", help="model name, e.g. mobilenetv2_100 or "
                   "'torchvision/mobilenet_v2?width=0.75' (or give --checkpoint)")
    p.add_argument("--checkpoint", help="inspect this latopt checkpoint (its architecture and weights; latopt import "
                   "makes one of your weights file) instead of a model name with random weights")
    p.add_argument("--resolution", type=int, default=None,
                   help="input resolution R (R x R), {} .. {}, default: the checkpoint's, else 224".format(
                       *RESOLUTION_RANGE))
    p.add_argument("--num-classes", type=int, default=None, help="classifier outputs (default: the checkpoint's, "
                   "else 1000)")
    p.add_argument("--mode", choices=FOLD_MODES, default="exact",
                   help="fold bias mode: exact (bias map, fixed input size) or paper (constant bias)")
    p.add_argument("--check-fold", action="store_true",
                   help="fold every foldable block and report the errors against the variant network (exit 3 if "
                        f"the error exceeds {FOLD_CHECK_TOLERANCE:g}); a model name's random weights get random BN "
                        "statistics, a checkpoint keeps its own")
    p.add_argument("--random-bn", action="store_true", help="--check-fold: randomise a checkpoint's BN statistics too")
    p.add_argument("--data", help="--check-fold: check on the first two validation images of this task (e.g. "
                   "fashion-mnist-mini), normalised as the checkpoint records, instead of random normal inputs")
    p.add_argument("--json", metavar="PATH", help="also write the table (and check) as JSON")
    p.set_defaults(func=_cmd_inspect)


def _from_checkpoint(args: argparse.Namespace) -> tuple[nn.Module, str, int, int]:
    """``--checkpoint``: its (unfolded) network, model name, class count and resolution (the flags', where given
    and consistent)."""
    from latopt.files.checkpoint import load_checkpoint
    from latopt.nets.models import canonical_name

    model, arch, meta = load_checkpoint(args.checkpoint)
    if args.model is not None and canonical_name(args.model) != arch.model:
        raise LatoptError(f"checkpoint {args.checkpoint} is {arch.model}, not {args.model}; give one of them")
    if args.num_classes is not None and args.num_classes != arch.num_classes:
        raise LatoptError(f"checkpoint {args.checkpoint} has {arch.num_classes} classes, not --num-classes "
                          f"{args.num_classes}; leave --num-classes out")
    if arch.alpha is not None or arch.fold is not None:
        raise LatoptError(f"checkpoint {args.checkpoint} is a pre-folded or folded network; inspect its base "
                          "checkpoint")
    res = args.resolution if args.resolution is not None else (meta.resolution or 224)
    args.normalize = meta.normalize   # --data's images as its weights expect them
    return model, arch.model, arch.num_classes, int(res)
