"""``latopt train`` (the base model) and ``latopt fold`` (Layer Folding of a base checkpoint)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from latopt.cli.common import common_parser
from latopt.constants import AMP_MODES, FOLD_MODES, GRANULARITIES
from latopt.errors import LatoptError

if TYPE_CHECKING:  # start-up time: pydantic models are built when a command runs
    from latopt.config import RunConfig


def default_out(cfg: RunConfig, stage: str) -> Path:
    return Path("runs") / cfg.name / stage


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", parents=[common_parser()], help="train the base model (from scratch by default)",
                       description="Train cfg.model on cfg.data; writes base.pt, metrics.json and config.yaml.")
    p.add_argument("--config", required=True, help="run config: a YAML path or a shipped config's name (e.g. quickstart)")
    p.add_argument("--out", help="output directory (default runs/<name>/base)")
    p.add_argument("--checkpoint", help="fine-tune this latopt checkpoint instead of training from scratch")
    p.add_argument("--pretrained", action="store_true", help="start from pretrained weights (must be cached; no download)")
    p.add_argument("--epochs", type=int, help="override train.epochs")
    p.add_argument("--data", help="override data.task: digits | digits-clutter | fashion-mnist[:PATH] | mnist[:PATH] | "
                   "imagefolder:PATH | cifar10:PATH")
    p.add_argument("--threads", type=int, help="torch intra-op threads (default: config 'threads', else torch's "
                   "choice; 1 is far faster on a machine shared with other jobs)")
    _placement_args(p)
    p.set_defaults(func=_cmd_train)

    f = sub.add_parser("fold", parents=[common_parser()], help="Layer Folding: pre-fold, fold at tau, fine-tune",
                       description="Pre-fold a base checkpoint with sigma_alpha activations and the (latency-weighted) "
                                   "compression loss, fold every block with alpha >= tau, check the fold, fine-tune; "
                                   "writes folded.pt, report.json, report.txt and config.yaml.")
    f.add_argument("--config", required=True, help="run config YAML")
    f.add_argument("--checkpoint", required=True, help="base checkpoint (from latopt train)")
    f.add_argument("--lut", help="latency LUT JSON giving c_l (default: config lut; none = uniform c_l = 1)")
    f.add_argument("--lambda-c", type=float, help="override fold.lambda_c (>= 0)")
    f.add_argument("--tau", type=float, help="override fold.tau, in (0, 1]")
    f.add_argument("--p", type=float, help="override fold.p (> 1)")
    f.add_argument("--granularity", choices=GRANULARITIES, help="override fold.granularity")
    f.add_argument("--distill", action="store_true", default=None, help="distil from the base model")
    f.add_argument("--mode", choices=FOLD_MODES, help="override fold.mode")
    f.add_argument("--data", help="override data.task (must match the base checkpoint's)")
    f.add_argument("--out", help="output directory (default runs/<name>/fold)")
    f.add_argument("--threads", type=int, help="torch intra-op threads (default: config 'threads', else torch's choice)")
    _placement_args(f)
    f.set_defaults(func=_cmd_fold)


def _placement_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--train-device", help="override train.device: auto (default: CUDA when torch sees a GPU) | cpu | "
                   "cuda | cuda:N; under torchrun each process takes GPU LOCAL_RANK")
    p.add_argument("--amp", choices=AMP_MODES, help="override train.amp (mixed precision; fp16 needs CUDA)")


def _cmd_train(args: argparse.Namespace) -> int:
    # start-up time: the stage (torch, ...) is imported when the command runs, not for `latopt --help`
    from latopt.config import load_config
    from latopt.training.accel import is_main_process, process_group
    from latopt.training.base_training import train_base
    from latopt.training.torch_settings import set_threads

    if args.epochs is not None and args.epochs < 0:
        raise LatoptError(f"--epochs must be >= 0, got {args.epochs}")
    cfg = load_config(args.config, {"train.epochs": args.epochs, "data.task": args.data, "threads": args.threads,
                                    **_placement(args)})
    set_threads(cfg.threads)
    out = Path(args.out) if args.out else default_out(cfg, "base")
    with process_group(cfg.train):  # torchrun: one process of a DistributedDataParallel job
        m = train_base(cfg, out, checkpoint=args.checkpoint, pretrained=args.pretrained, seed=args.seed).metrics
        if is_main_process():
            resumed = f", resumed after epoch {m.resumed_after_epoch}" if m.resumed_after_epoch else ""
            print(f"base {cfg.model.name} on {m.task}: val {m.val_acc:.4f}, test {m.test_acc:.4f} "
                  f"({m.train_seconds:.0f} s on {m.device}{resumed}); wrote {m.checkpoint}")
    return 0


def _placement(args: argparse.Namespace) -> dict[str, str | None]:
    return {"train.device": args.train_device, "train.amp": args.amp}


def _cmd_fold(args: argparse.Namespace) -> int:
    # start-up time: the stage (torch, ...) is imported when the command runs, not for `latopt --help`
    from latopt.config import load_config
    from latopt.layerfold import format_summary, run_fold
    from latopt.training.accel import is_main_process, process_group
    from latopt.training.torch_settings import set_threads

    cfg = load_config(args.config, {"fold.lambda_c": args.lambda_c, "fold.tau": args.tau, "fold.p": args.p,
                                    "fold.granularity": args.granularity, "fold.distill": args.distill,
                                    "fold.mode": args.mode, "data.task": args.data, "lut": args.lut,
                                    "threads": args.threads, **_placement(args)})
    set_threads(cfg.threads)
    out = Path(args.out) if args.out else default_out(cfg, "fold")
    with process_group(cfg.train):  # torchrun: one process of a DistributedDataParallel job
        result = run_fold(cfg, args.checkpoint, out, seed=args.seed)
        if is_main_process():
            print(format_summary(result.report))
    return 0
