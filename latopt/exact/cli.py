"""``latopt train-mlp | compress | regions | shallow``: exact tools for fully connected ReLU networks."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from latopt.errors import LatoptError, VerificationError


def register(sub: argparse._SubParsersAction) -> None:
    from latopt.cli import common_parser

    p = sub.add_parser("train-mlp", parents=[common_parser()], help="train a Linear/ReLU classifier (digits) or make a random one",
                       description="Train a fully connected ReLU network on scikit-learn's bundled digits "
                       "(64 inputs in [0, 1]) with l1 on the first layer, or save a random one (--data random).")
    p.add_argument("--data", default="digits", choices=["digits", "random"])
    p.add_argument("--hidden", default="100,100", help="hidden widths, comma separated (default 100,100)")
    p.add_argument("--l1", type=float, default=0.003, help="l1 weight on the first layer's weights (default 0.003)")
    p.add_argument("--epochs", type=int, default=600,
                   help="epochs (default 600; the seed trains 120 epochs on MNIST, 45x more images than digits: "
                   "600 digits epochs give the l1 penalty ~13k SGD steps to act)")
    p.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (momentum 0.9; x0.1 at 5/12 of the epochs)")
    p.add_argument("--batch", type=int, default=64, help="batch size (default 64)")
    p.add_argument("--inputs", type=int, default=2, help="--data random: input width (default 2)")
    p.add_argument("--outputs", type=int, default=1, help="--data random: output width (default 1)")
    p.add_argument("--out", default=None, help="checkpoint path (default runs/mlp/<name>.pt)")
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
            p.add_argument("--grid", type=int, default=1000,
                           help="cross-check with a grid of N^d points when d <= 3 (default 1000; 0 = off)")
        else:
            p.add_argument("--epsilon", type=float, default=1e-3, help="boundary margin of the eps-network (default 1e-3)")
            p.add_argument("--samples", type=int, default=100_000, help="points to verify both rewrites on (default 100000)")
        p.set_defaults(func=fn)


def _box_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--box", default=None, help="input box LO,HI (default: the checkpoint's, else 0,1)")


def _load(args):
    from latopt.exact.mlp import load_mlp
    from latopt.exact.network import Box, from_module

    model, meta = load_mlp(args.checkpoint)
    net = from_module(model)
    spec = args.box
    if spec is None:
        b = meta.get("box")
        spec = f"{b[0]},{b[1]}" if isinstance(b, list) and len(b) == 2 else "0,1"
    return model, meta, net, Box.parse(spec, net.sizes[0])


def _out_dir(args, prefix: str) -> Path:
    return Path(args.out) if args.out else Path("runs") / f"{prefix}-{Path(args.checkpoint).stem}"


def _parse_hidden(s: str) -> list[int]:
    try:
        out = [int(v) for v in s.split(",") if v.strip()]
    except ValueError:
        raise LatoptError(f"--hidden {s!r} must be comma-separated positive integers, e.g. 100,100") from None
    if not out or any(v < 1 for v in out):
        raise LatoptError(f"--hidden {s!r} must be comma-separated positive integers, e.g. 100,100")
    return out


def _train(args) -> int:
    from latopt.artifacts import seed_everything
    from latopt.exact.mlp import build_mlp, save_mlp, train_mlp

    hidden = _parse_hidden(args.hidden)
    if args.data == "random":
        if args.inputs < 1 or args.outputs < 1:
            raise LatoptError("--inputs and --outputs must be >= 1")
        seed_everything(args.seed)
        model = build_mlp([args.inputs, *hidden, args.outputs]).eval()
        meta = {"data": "random", "seed": args.seed, "box": [-1.0, 1.0]}
        name = f"random-{args.inputs}-{'x'.join(map(str, hidden))}-{args.outputs}-s{args.seed}"
    else:
        model, meta = train_mlp(hidden, data=args.data, l1=args.l1, epochs=args.epochs, lr=args.lr, batch=args.batch,
                                seed=args.seed, progress=True)
        name = f"{args.data}-{'x'.join(map(str, hidden))}-l1{args.l1:g}-s{args.seed}"
    path = save_mlp(args.out or Path("runs") / "mlp" / f"{name}.pt", model, meta)
    acc = f", test accuracy {meta['test_acc']:.4f}" if "test_acc" in meta else ""
    print(f"saved {path}{acc}")
    return 0


def _accuracy(meta: dict, model, compressed) -> dict | None:
    from latopt.exact.mlp import load_split, predict

    if meta.get("data") != "digits":
        return None
    sp = load_split("digits", int(meta.get("split_seed", 0)))
    pa, pb = predict(model, sp.x_test), predict(compressed, sp.x_test)
    return {"before": float((pa == sp.y_test).mean()), "after": float((pb == sp.y_test).mean()),
            "prediction_changes": int((pa != pb).sum()), "test_points": len(sp.y_test)}


def _compress(args) -> int:
    import torch

    from latopt.artifacts import atomic_dir, write_json_atomic, write_text_atomic
    from latopt.exact.mlp import load_split, save_mlp
    from latopt.exact.stability import compress

    if not args.time_limit > 0 or args.samples < 0 or args.verify_points < 100_000:   # not > 0: NaN too
        raise LatoptError("--time-limit must be > 0, --samples >= 0 and --verify-points >= 100000")
    model, meta, net, box = _load(args)
    data = load_split("digits", int(meta.get("split_seed", 0))).x_train if meta.get("data") == "digits" else None
    t0 = time.perf_counter()
    comp, rep = compress(model, box, samples=args.samples, data=data, time_limit=args.time_limit,
                         verify_points=args.verify_points, seed=args.seed, log=lambda s: print("  " + s, flush=True))
    acc = _accuracy(meta, model, comp.to(torch.float32))
    report = rep.to_json()
    report["checkpoint"] = str(args.checkpoint)
    report["accuracy"] = acc
    report["wall_seconds"] = round(time.perf_counter() - t0, 3)
    text = compress_text(report)
    out = _out_dir(args, "compress")
    with atomic_dir(out) as d:
        save_mlp(d / "compressed.pt", comp, {**meta, "compressed_from": str(args.checkpoint), "box": _box_list(box)})
        write_json_atomic(d / "report.json", report)
        write_json_atomic(d / "certificates.json", rep.analysis.to_json())
        write_text_atomic(d / "report.txt", text)
    print(text)
    print(f"wrote {out}/compressed.pt, report.json, certificates.json, report.txt")
    return 0


def _box_list(box) -> list | None:
    return [float(box.lo[0]), float(box.hi[0])] if np.all(box.lo == box.lo[0]) and np.all(box.hi == box.hi[0]) else None


def compress_text(report: dict) -> str:
    c, s, v = report["compression"], report["stability"], report["verification"]
    lines = [
        f"layers   {c['layers_before']} -> {c['layers_after']}",
        f"hidden units {c['hidden_units_before']} -> {c['hidden_units_after']} "
        f"({c['units_removed']} removed, {100 * c['units_removed_fraction']:.1f}%); layers collapsed {c['layers_collapsed']}"
        + ("; the network is constant on the box" if c["constant"] else ""),
        f"params   {c['params_before']} -> {c['params_after']}",
        "layer  units  inactive  active  unstable  undecided | stable by interval  LP  MILP | sampled bound | removed (inactive, dependent)",
    ]
    for row in s["layers"]:
        k = row["layer"]
        lines.append(
            f"{k:>5}  {row['units']:>5}  {row['inactive']:>8}  {row['active']:>6}  {row['unstable']:>8}  {row['undecided']:>9} |"
            f" {row['stable_by_interval']:>18}  {row['stable_by_lp']:>2}  {row['stable_by_milp']:>4} |"
            f" {row['sampled_upper_bound']:>13} | {c['removed_inactive'][k]}, {c['removed_dependent_active'][k]}"
        )
    lines.append(
        f"verified on {v['points']} points: max |diff| {v['max_abs_float64']:.2e} (float64), {v['max_abs_float32']:.2e} "
        f"(float32); output scale {v['output_scale']:.3g}"
    )
    sec = report["seconds"]
    lines.append(f"time     analysis {sec['analysis']:.1f}s (MILP {s['timings']['milp']:.1f}s, LP {s['timings']['lp']:.1f}s), "
                 f"verification {sec['verification']:.1f}s, total {sec['total']:.1f}s")
    a = report.get("accuracy")
    if a:
        lines.append(f"accuracy {a['before']:.4f} -> {a['after']:.4f} on {a['test_points']} test digits "
                     f"({a['prediction_changes']} predictions changed)")
    return "\n".join(lines) + "\n"


def _limits(args):
    from latopt.exact.regions import RegionLimits

    if min(args.max_regions, args.max_inputs, args.max_units) < 1:
        raise LatoptError("--max-regions, --max-inputs and --max-units must be >= 1")
    return RegionLimits(max_inputs=args.max_inputs, max_units=args.max_units, max_regions=args.max_regions)


def _regions(args) -> int:
    from latopt.artifacts import atomic_dir, write_json_atomic
    from latopt.exact.regions import enumerate_regions, plot_regions, sampled_patterns

    _, meta, net, box = _load(args)
    limits = _limits(args)
    enum = enumerate_regions(net, box, limits=limits)
    report = {"schema": "latopt.regions/1", "checkpoint": str(args.checkpoint), "sizes": list(net.sizes),
              "box": box.to_json(), **enum.summary()}
    if args.grid > 0 and box.dim <= 3:
        t0 = time.perf_counter()
        keys = sampled_patterns(net, box, resolution=args.grid)
        index = enum.index()
        # a ball of radius >= half a cell diagonal always holds a cell centre: such regions cannot be missed
        reach = float(np.linalg.norm((box.hi - box.lo) / args.grid)) / 2
        missed = [enum.regions[i] for k, i in index.items() if k not in keys]
        report["grid"] = {"resolution": args.grid, "points": args.grid**box.dim, "distinct_patterns": len(keys),
                          "all_in_enumeration": keys <= set(index), "missed_regions": len(missed),
                          "missed_max_radius": max((r.radius for r in missed), default=0.0),
                          "half_cell_diagonal": reach, "missed_are_thin": all(r.radius < reach for r in missed),
                          "seconds": round(time.perf_counter() - t0, 3)}
    report["patterns"] = ["".join("1" if b else "0" for b in r.pattern) for r in enum.regions]
    out = _out_dir(args, "regions")
    with atomic_dir(out) as d:
        if box.dim == 2:
            plot_regions(enum, d / "regions.png", title=f"{enum.count} linear regions of {list(net.sizes)}")
        write_json_atomic(d / "report.json", report)
    print(f"{enum.count} linear regions of {list(net.sizes)} over the box ({enum.lps} LPs, {enum.seconds:.2f}s)")
    if "grid" in report:
        g = report["grid"]
        print(f"grid {g['resolution']}^{box.dim}: {g['distinct_patterns']} distinct patterns, "
              f"{'all' if g['all_in_enumeration'] else 'NOT all'} among the enumerated regions"
              + (f"; {g['missed_regions']} region(s) missed by the grid, all thinner than half a cell diagonal"
                 if g["missed_regions"] and g["missed_are_thin"] else ""))
        if not (g["all_in_enumeration"] and g["missed_are_thin"]):
            raise VerificationError("the grid cross-check contradicts the enumeration (see report.json)")
    print(f"wrote {out}/report.json" + (", regions.png" if box.dim == 2 else ""))
    return 0


def _shallow(args) -> int:
    import torch

    from latopt.artifacts import atomic_dir, write_json_atomic
    from latopt.exact.mlp import save_mlp
    from latopt.exact.regions import enumerate_regions
    from latopt.exact.shallow import IndicatorNet, collect_hyperplanes, eps_network, region_margin, widths
    from latopt.exact.verify import verification_points, verify_equal

    if not (args.epsilon > 0 and np.isfinite(args.epsilon)):
        raise LatoptError(f"--epsilon {args.epsilon} must be a positive number")
    if args.samples < 1000:
        raise LatoptError("--samples must be >= 1000")
    model, meta, net, box = _load(args)
    t0 = time.perf_counter()
    enum = enumerate_regions(net, box, limits=_limits(args))
    hp = collect_hyperplanes(enum, seed=args.seed)
    eps_net = eps_network(enum, hp, args.epsilon)
    exact = IndicatorNet.build(enum, hp)
    pts = verification_points(box, args.samples, args.seed)
    margin = region_margin(net, enum, hp, pts)
    far = margin >= args.epsilon
    ver_a = verify_equal(net, eps_net, box, points=pts[far], what="eps-network (points >= eps from boundaries)",
                         dtypes=("float64",))
    ver_a["fraction_of_points_used"] = float(far.mean())
    ver_b = verify_equal(net, exact, box, points=pts, what="exact indicator network", dtypes=("float64",))
    report = {"schema": "latopt.shallow/1", "checkpoint": str(args.checkpoint), "sizes": list(net.sizes),
              "box": box.to_json(), "epsilon": args.epsilon, "widths": widths(enum, hp),
              "eps_network": {"verification": ver_a, "max_abs_weight": float(max(np.abs(w).max() for w in eps_net.weights))},
              "exact_network": {"verification": ver_b}, "regions": enum.summary(),
              "seconds": round(time.perf_counter() - t0, 3)}
    out = _out_dir(args, "shallow")
    with atomic_dir(out) as d:
        save_mlp(d / "eps_network.pt", eps_net.to_module(torch.float64),
                 {"shallow_from": str(args.checkpoint), "epsilon": args.epsilon, "box": _box_list(box)})
        torch.save({"schema": "latopt.indicator-net/1", "state_dict": exact.state_dict(), "n_in": box.dim},
                   d / "exact_network.pt")
        write_json_atomic(d / "report.json", report)
    w = report["widths"]
    print(f"{w['regions']} regions, {w['hyperplanes']} facet hyperplanes; hidden widths: original {w['original_hidden']}, "
          f"eps-network {w['eps_network_hidden']}, exact network {w['exact_network_hidden']}")
    print(f"eps-network (eps={args.epsilon:g}): max |diff| {ver_a['max_abs_float64']:.2e} on {ver_a['points']} points "
          f"at least eps from region boundaries ({100 * ver_a['fraction_of_points_used']:.1f}% of the samples)")
    print(f"exact network: max |diff| {ver_b['max_abs_float64']:.2e} on {ver_b['points']} points")
    print(f"wrote {out}/eps_network.pt, exact_network.pt, report.json")
    return 0

