"""``latopt train-mlp | compress | regions | shallow``: exact tools for fully connected ReLU networks.

The work is :mod:`latopt.exact.tools`; this module parses arguments and prints. The tools are the ``exact``
extra's (``pip install 'latopt[exact]'``): without it each of these commands prints one line saying what to
install and exits 2 (:func:`latopt.exact.load`).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from latopt.cli.common import common_parser
from latopt.errors import LatoptError

if TYPE_CHECKING:
    from types import ModuleType

    from latopt.exact.exact_record import CompressToolReport, RegionsReport, ShallowReport

# start-up time: each handler imports latopt.exact.tools (numpy, torch, HiGHS) when it runs, not for --help


def _tools(args: argparse.Namespace) -> ModuleType:
    """:mod:`latopt.exact.tools`; a one-line error (exit 2) naming the extra to install when it is missing."""
    from latopt.exact import load

    return load("tools", f"latopt {args.command}")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train-mlp", parents=[common_parser()],
                       help="train a Linear/ReLU classifier (digits, fashion-mnist, mnist) or make a random one",
                       description="Train a fully connected ReLU network with l1 on the first layer on scikit-learn's "
                       "bundled digits (64 inputs in [0, 1]) or on Fashion-MNIST / MNIST (784 inputs: pixels /255 in "
                       "[0, 1]; trained on the 55,000 training images outside the validation split, tested on the "
                       "10,000 test images; the IDX files are read from $LATOPT_DATA/<name>, for fashion-mnist also "
                       "/usr/share/datasets/fashion-mnist, or from PATH; never downloaded), or save a random one "
                       "(--data random).")
    p.add_argument("--data", default="digits", metavar="DATA",
                   help="digits (default), fashion-mnist[:PATH], mnist[:PATH] or random")
    p.add_argument("--hidden", default="100,100", help="hidden widths, comma separated (default 100,100)")
    p.add_argument("--l1", type=float, default=0.003, help="l1 weight on the first layer's weights (default 0.003)")
    p.add_argument("--epochs", type=int, default=None,
                   help="epochs (default: 120 for fashion-mnist and mnist, the seed's MNIST recipe; 600 for digits, "
                   "which has 45x fewer images than MNIST: 600 digits epochs give the l1 penalty ~13k SGD steps to act)")
    p.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (momentum 0.9; x0.1 at 5/12 of the epochs)")
    p.add_argument("--batch", type=int, default=64, help="batch size (default 64)")
    p.add_argument("--inputs", type=int, default=None, help="--data random: input width (default 2; a data set "
                   "fixes it)")
    p.add_argument("--outputs", type=int, default=None, help="--data random: output width (default 1; a data set "
                   "fixes it)")
    p.add_argument("--out", default=None, help="checkpoint path (default runs/mlp/<name>.pt)")
    _threads_arg(p)
    p.set_defaults(func=_train)

    p = sub.add_parser("compress", parents=[common_parser()], help="lossless StabilityCompression of a ReLU MLP",
                       description="Remove stably inactive units, dependent stably active units and affine layers "
                       "(proved by interval / LP / MILP over the box), then verify on >= 100,000 points.")
    p.add_argument("checkpoint")
    _box_args(p)
    p.add_argument("--time-limit", type=float, default=30.0, help="seconds per MILP solve (default 30)")
    p.add_argument("--samples", type=int, default=20000, help="random points for the sampling stage (default 20000)")
    p.add_argument("--verify-points", type=int, default=100_000,
                   help="random points (plus corners) the result is verified on (>= 100000, the default)")
    p.add_argument("--out", default=None, help="output directory (default runs/compress-<checkpoint name>)")
    _threads_arg(p)
    p.set_defaults(func=_compress)

    for name, helptext, fn in (
        ("regions", "enumerate (and for 2-D inputs plot) the linear regions of a small ReLU MLP", _regions),
        ("shallow", "rewrite a small ReLU MLP as 2-hidden-layer networks built from its linear regions", _shallow),
    ):
        p = sub.add_parser(name, parents=[common_parser()], help=helptext, description=helptext)
        p.add_argument("checkpoint")
        _box_args(p)
        p.add_argument("--max-regions", type=int, default=20000)
        p.add_argument("--max-inputs", type=int, default=8)
        p.add_argument("--max-units", type=int, default=64)
        p.add_argument("--out", default=None, help=f"output directory (default runs/{name}-<checkpoint name>)")
        if name == "regions":
            p.add_argument("--grid", type=int, default=None,
                           help="cross-check with a grid of N^d points when d <= 3 (default 1000, 271 for 3 inputs: "
                                "at most 2e7 points; 0 = off)")
        else:
            p.add_argument("--epsilon", type=float, default=1e-3, help="boundary margin of the eps-network (default 1e-3)")
            p.add_argument("--samples", type=int, default=100_000, help="points to verify both rewrites on (default 100000)")
        p.set_defaults(func=fn)


def _threads_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")


def _set_threads(n: int | None) -> None:
    # set_threads bounds the count (latopt.counts): one line, never libgomp's abort
    from latopt.training.torch_settings import set_threads

    set_threads(n)


def _box_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--box", default=None, help="input box LO,HI (default: the checkpoint's, else 0,1)")


def _parse_hidden(s: str) -> list[int]:
    try:
        out = [int(v) for v in s.split(",") if v.strip()]
    except ValueError:
        raise LatoptError(f"--hidden {s!r} must be comma-separated positive integers, e.g. 100,100") from None
    if not out or any(v < 1 for v in out):
        raise LatoptError(f"--hidden {s!r} must be comma-separated positive integers, e.g. 100,100")
    return out


def _train(args: argparse.Namespace) -> int:
    tools = _tools(args)
    _set_threads(args.threads)
    path, meta = tools.make_mlp(_parse_hidden(args.hidden), data=args.data, l1=args.l1, epochs=args.epochs,
                                lr=args.lr, batch=args.batch, inputs=args.inputs, outputs=args.outputs,
                                seed=args.seed, out=args.out)
    acc = "" if meta.test_acc is None else f", test accuracy {meta.test_acc:.4f}"
    if meta.val_acc is not None:
        acc = f", validation accuracy {meta.val_acc:.4f}{acc}"
    print(f"saved {path}{acc}")
    return 0


def _compress(args: argparse.Namespace) -> int:
    tools = _tools(args)
    _set_threads(args.threads)
    report: CompressToolReport = tools.compress_checkpoint(
        args.checkpoint, args.out, box=args.box, time_limit=args.time_limit, samples=args.samples,
        verify_points=args.verify_points, seed=args.seed)
    print(tools.compress_text(report))
    print(f"wrote {report.out}/compressed.pt, report.json, certificates.json, report.txt")
    return 0


def _regions(args: argparse.Namespace) -> int:
    tools = _tools(args)
    limits = tools.region_limits(args.max_regions, args.max_inputs, args.max_units)
    r: RegionsReport = tools.regions_of(args.checkpoint, args.out, box=args.box, limits=limits, grid=args.grid)
    dim = r.box.dim
    print(f"{r.regions} linear regions of {r.sizes} over the box ({r.lps} LPs, {r.seconds:.2f}s)")
    g = r.grid
    if g:
        print(f"grid {g.resolution}^{dim}: {g.distinct_patterns} distinct patterns, "
              f"{'all' if g.all_in_enumeration else 'NOT all'} among the enumerated regions"
              + (f"; {g.missed_regions} region(s) missed by the grid, all thinner than half a cell diagonal"
                 if g.missed_regions and g.missed_are_thin else ""))
    print(f"wrote {r.out}/report.json" + (", regions.png" if dim == 2 else ""))
    return 0


def _shallow(args: argparse.Namespace) -> int:
    tools = _tools(args)
    limits = tools.region_limits(args.max_regions, args.max_inputs, args.max_units)
    r: ShallowReport = tools.shallow_of(args.checkpoint, args.out, box=args.box, limits=limits, epsilon=args.epsilon,
                                        samples=args.samples, seed=args.seed)
    w, ver_a, ver_b = r.widths, r.eps_network.verification, r.exact_network.verification
    print(f"{w.regions} regions, {w.hyperplanes} facet hyperplanes; hidden widths: original {w.original_hidden}, "
          f"eps-network {w.eps_network_hidden}, exact network {w.exact_network_hidden}")
    print(f"eps-network (eps={args.epsilon:g}): max |diff| {ver_a.max_abs_float64:.2e} on {ver_a.points} points "
          f"at least eps from region boundaries ({100 * (ver_a.fraction_of_points_used or 0.0):.1f}% of the samples)")
    print(f"exact network: max |diff| {ver_b.max_abs_float64:.2e} on {ver_b.points} points")
    print(f"wrote {r.out}/eps_network.pt, exact_network.pt, report.json")
    return 0
