"""``latopt run [CONFIG]`` (or ``--config CONFIG``, as the other commands take it): the main job, end to end,
resumable."""

from __future__ import annotations

import argparse

from latopt.cli.common import common_parser


def _cmd_run(args: argparse.Namespace) -> int:
    # start-up time: the stage (torch, ...) is imported when the command runs, not for `latopt --help`
    from latopt.errors import LatoptError
    from latopt.run import run_main

    if args.config is not None and args.config_flag is not None and args.config != args.config_flag:
        raise LatoptError(f"two configs given: {args.config!r} and --config {args.config_flag!r}; give one",
                          param="config")
    r = run_main(args.config if args.config is not None else args.config_flag, device=args.device, trials=args.trials, runs_dir=args.runs_dir, seed=args.seed,
                 fresh=args.fresh)
    print(r.summary)
    print(f"finished in {r.seconds:.0f} s (this invocation); report: {r.report}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", parents=[common_parser()],
                       help="the main job: train → profile → search → export → report (resumable)")
    p.add_argument("config", nargs="?", default=None, help="run config: a YAML path or a shipped config's name (default quickstart)")
    p.add_argument("--config", dest="config_flag", default=None, metavar="CONFIG",
                   help="the same as the positional CONFIG (the spelling latopt train and search take)")
    p.add_argument("--device", default=None, help="device profile (default: the config's, normally cpu)")
    p.add_argument("--trials", type=int, default=None, help="search trials (default: the config's search.trials)")
    p.add_argument("--runs-dir", default="runs", help="root of run directories (default runs)")
    p.add_argument("--fresh", action="store_true",
                   help="delete the run directory's state (its search study included) and start over; by default "
                        "a stage is reused when what it is made from is unchanged, else it and later stages re-run")
    p.set_defaults(func=_cmd_run)
