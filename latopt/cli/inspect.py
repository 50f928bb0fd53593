"""``latopt inspect MODEL``: the blocks of a model, FLOPs and params as-is and folded; ``--check-fold``."""

from __future__ import annotations

import argparse
import time

from latopt.artifacts import write_json_atomic
from latopt.cli.common import common_parser
from latopt.constants import FOLD_CHECK_TOLERANCE, FOLD_MODES, RESOLUTION_RANGE, SUPPORTED_MODELS
from latopt.errors import LatoptError, VerificationError, first_line
from latopt.log import get_logger


def _cmd_inspect(args: argparse.Namespace) -> int:
    # start-up time: the stage (torch, ...) is imported when the command runs, not for `latopt --help`
    from latopt.config import check_resolution
    from latopt.engine import seed_everything
    from latopt.inspection import check_fold, format_check, format_report, inspect_model
    from latopt.models import build_model, canonical_name

    check_resolution(args.resolution, "--resolution")
    seed_everything(args.seed)
    t0 = time.perf_counter()
    name = canonical_name(args.model)
    try:
        model = build_model(name, args.num_classes)
    except LatoptError:
        raise
    except Exception as e:  # a library's model that does not build as asked: one line, not a traceback
        raise LatoptError(f"could not build {name} ({type(e).__name__}: {first_line(e, 160)})") from None
    rep = inspect_model(model, args.resolution, args.mode, name)
    print(format_report(rep))
    payload: dict = {"schema": "latopt.inspect/1", "model": name, "resolution": args.resolution, "mode": args.mode,
                     "blocks": [dict(vars(r), fold_lowers_flops=r.fold_lowers_flops) for r in rep.blocks],
                     "stem_flops": rep.stem_flops, "head_flops": rep.head_flops, "total_flops": rep.total_flops,
                     "total_params": rep.total_params, "folded_total_flops": rep.folded_total_flops}
    rc = 0
    if args.check_fold:
        res = check_fold(model, args.resolution, args.mode, args.seed)
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
    p.add_argument("model", help="model name, e.g. mobilenetv2_100 or 'torchvision/mobilenet_v2?width=0.75'")
    p.add_argument("--resolution", type=int, default=224,
                   help="input resolution R (R x R), {} .. {}, default 224".format(*RESOLUTION_RANGE))
    p.add_argument("--num-classes", type=int, default=1000, help="classifier outputs (default 1000)")
    p.add_argument("--mode", choices=FOLD_MODES, default="exact",
                   help="fold bias mode: exact (bias map, fixed input size) or paper (constant bias)")
    p.add_argument("--check-fold", action="store_true",
                   help="randomise BN statistics, fold every foldable block and report the errors "
                        f"(exit 3 if the error exceeds {FOLD_CHECK_TOLERANCE:g})")
    p.add_argument("--json", metavar="PATH", help="also write the table (and check) as JSON")
    p.set_defaults(func=_cmd_inspect)
