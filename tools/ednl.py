#!/usr/bin/env python
"""EDNL benchmark: the Layer Folding paper's Figure 2 on scikit-learn's digits.

FC-L = L hidden fully connected layers of width 256, each followed by ReLU (so L non-linear layers),
then a linear classifier. For every L (default 2..8) a base net is trained; then, for every λ_c of a
sweep, a copy gets σ_α on each activation (α = 0) and is pre-folded with L_task + λ_c·L_c (c_l = 1,
p = 2, the α's with their own Adam). Activations with α ≥ τ (0.9) are removed and the adjacent linear
layers folded into one (W = W2·W1, b = W2·b1 + b2); the folded net is checked against the σ_α net with
those α at 1 (max abs difference printed) and evaluated on the test split, with no post-fold training
(the paper's "pre-folding only", so the net does not grow). L̂ = the number of activations left.

Prints a table and the knee: the effective degree of non-linearity (EDNL) = the smallest L̂ whose best
folded accuracy is within --tolerance of the best base accuracy; plots accuracy against L̂ (PNG).

    python tools/ednl.py                         # ~2 min on 2 cores; writes runs/ednl/ednl.png + .json
    python tools/ednl.py --depths 2 4 --lambdas 0.1 1 10 --epochs 10   # quicker
    python tools/ednl.py --data digits-clutter --resolution 16          # a task that needs more depth
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import matplotlib
import torch
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from torch import nn

from latopt.config import TrainConfig
from latopt.data import get_task
from latopt.files.artifacts import write_figure_atomic, write_json_atomic
from latopt.layerfold import CompressionLoss
from latopt.rewrite import AlphaActivation, alpha_parameters, clamp_alphas_
from latopt.training.loop import Report, Step, evaluate, fit, make_optimizer, seed_everything, tensor_loader
from latopt.training.losses import TrainingLoss
from latopt.training.torch_settings import set_threads


def flat_data(spec: str, resolution: int, seed: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    task = get_task(spec, resolution, seed)
    out = {}
    for split in ("train", "val", "test"):
        ds = getattr(task, split)
        xs, ys = zip(*(ds[i] for i in range(len(ds))), strict=True)
        out[split] = (torch.stack(xs)[:, 0].flatten(1), torch.tensor(ys))
    return out


def make_fc(depth: int, width: int, d_in: int, n_out: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    d = d_in
    for _ in range(depth):
        layers += [nn.Linear(d, width), AlphaActivation("relu")]
        d = width
    layers.append(nn.Linear(d, n_out))
    return nn.Sequential(*layers)


def train(net: nn.Sequential, data: dict, epochs: int, lr: float, *, lambda_c: float = 0.0, alpha_lr: float = 0.05,
          p: float = 2.0, batch: int = 64, seed: int = 0) -> None:
    """Adam on the weights (AdamW without weight decay, constant lr) through latopt's engine and its training
    loss (cross-entropy, :class:`latopt.training.losses.TrainingLoss`); with ``lambda_c`` > 0 also λ_c·L_c and the α's with
    their own Adam, clipped to [0, 1] after each step."""
    alphas = alpha_parameters(net)
    prefold = lambda_c > 0
    for a in alphas:
        a.requires_grad_(prefold)
    recipe = TrainConfig(optimizer="adamw", lr=lr, weight_decay=0.0, schedule="constant")
    opt = make_optimizer(net, recipe, lr, exclude=alphas)
    extra = (torch.optim.Adam(alphas, lr=alpha_lr),) if prefold else ()
    comp = CompressionLoss({i: [a] for i, a in enumerate(alphas)}, p=p,
                           variant_times={i: {"none": 1.0, "full": 0.0} for i in range(len(alphas))})

    loss = TrainingLoss().with_penalty("L_c", lambda_c, comp) if prefold else TrainingLoss()
    step = Step(loss, opt, extra_optimizers=extra, after_step=(lambda: clamp_alphas_(net)) if prefold else None)
    fit(net, tensor_loader(*data["train"], batch, seed), epochs, step, report=Report(show=False))


def fold_fc(net: nn.Sequential, tau: float) -> tuple[nn.Sequential, nn.Sequential]:
    """(linearised σ_α net with α ≥ τ at 1, folded net with those activations removed and linears merged)."""
    lin = copy.deepcopy(net)
    for i, m in enumerate(lin):
        if isinstance(m, AlphaActivation) and float(m.alpha.detach()) >= tau:
            lin[i] = nn.Identity()
    folded: list[nn.Module] = []
    pending: tuple[torch.Tensor, torch.Tensor] | None = None
    with torch.no_grad():
        for m in lin:
            if isinstance(m, nn.Linear):
                w, b = m.weight.double(), m.bias.double()
                pending = (w, b) if pending is None else (w @ pending[0], w @ pending[1] + b)
            elif isinstance(m, nn.Identity):
                continue
            else:  # a kept σ_α: flush the merged linear layer before it
                folded += [_linear(*pending), copy.deepcopy(m)]
                pending = None
        folded.append(_linear(*pending))
    return lin, nn.Sequential(*folded)


def _linear(w: torch.Tensor, b: torch.Tensor) -> nn.Linear:
    layer = nn.Linear(w.shape[1], w.shape[0])
    with torch.no_grad():
        layer.weight.copy_(w.float())
        layer.bias.copy_(b.float())
    return layer


def knee(points: list[dict], base_best: float, tolerance: float) -> int | None:
    best: dict[int, float] = {}
    for pt in points:
        best[pt["remaining"]] = max(best.get(pt["remaining"], 0.0), pt["acc"])
    ok = [k for k, acc in best.items() if acc >= base_best - tolerance]
    return min(ok) if ok else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--depths", type=int, nargs="+", default=list(range(2, 9)))
    ap.add_argument("--lambdas", type=float, nargs="+", default=[0.03, 0.3, 1.0, 3.0, 10.0])
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=20, help="base training epochs")
    ap.add_argument("--prefold-epochs", type=int, default=15)
    ap.add_argument("--tau", type=float, default=0.9)
    ap.add_argument("--p", type=float, default=2.0)
    ap.add_argument("--alpha-lr", type=float, default=0.05)
    ap.add_argument("--tolerance", type=float, default=0.01, help="accuracy drop allowed at the knee")
    ap.add_argument("--data", default="digits", help="digits | digits-clutter")
    ap.add_argument("--resolution", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/ednl")
    args = ap.parse_args(argv)
    set_threads(1)
    t0 = time.perf_counter()
    data = flat_data(args.data, args.resolution, args.seed)
    d_in = data["train"][0].shape[1]
    points, bases = [], {}
    print(f"{'net':>6} {'lambda_c':>9} {'L_hat':>5} {'acc':>7} {'alphas':<40} fold-check")
    for depth in args.depths:
        seed_everything(args.seed + depth)
        base = make_fc(depth, args.width, d_in, 10)
        train(base, data, args.epochs, 1e-3, seed=args.seed)
        bases[depth] = evaluate(base, [data["test"]])
        print(f"FC-{depth:<3} {'base':>9} {depth:>5} {bases[depth]:>7.4f}")
        for lam in args.lambdas:
            net = copy.deepcopy(base)
            train(net, data, args.prefold_epochs, 1e-3, lambda_c=lam, alpha_lr=args.alpha_lr, p=args.p, seed=args.seed)
            lin, folded = fold_fc(net, args.tau)
            x = data["test"][0]
            with torch.no_grad():
                ref = lin.eval()(x)
                err = float((ref - folded.eval()(x)).abs().max())
            if err > 1e-3 * max(1.0, float(ref.abs().max())):
                print(f"fold check failed for FC-{depth}, lambda_c {lam}: max abs {err:.3g}", file=sys.stderr)
                return 1
            vals = [float(a.detach()) for a in alpha_parameters(net)]
            remaining = sum(v < args.tau for v in vals)
            acc = evaluate(folded, [data["test"]])
            points.append({"depth": depth, "lambda_c": lam, "remaining": remaining, "acc": acc, "alphas": vals,
                           "fold_max_abs": err, "linear_layers": sum(isinstance(m, nn.Linear) for m in folded)})
            print(f"FC-{depth:<3} {lam:>9.3g} {remaining:>5} {acc:>7.4f} "
                  f"{' '.join(f'{v:.2f}' for v in vals):<40} max abs {err:.1e}")
    base_best = max(bases.values())
    ednl = knee(points, base_best, args.tolerance)
    mid = [v for pt in points for v in pt["alphas"]]
    frac_mid = sum(0.1 < v < 0.9 for v in mid) / max(1, len(mid))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _plot(points, bases, ednl, out / "ednl.png", args)
    write_json_atomic(out / "ednl.json", {"schema": "latopt.ednl/1", "args": vars(args), "base_acc": bases,
                                         "points": points, "ednl": ednl, "alpha_mid_fraction": frac_mid,
                                         "seconds": time.perf_counter() - t0})
    print(f"best base accuracy {base_best:.4f}; alpha in (0.1, 0.9): {100 * frac_mid:.1f} %")
    print(f"EDNL (knee): {ednl} non-linear layer(s) keep the accuracy within {args.tolerance:.3f} of the best base"
          if ednl is not None else "EDNL: no folded net reached the base accuracy within the tolerance")
    print(f"wrote {out / 'ednl.png'} and {out / 'ednl.json'} ({time.perf_counter() - t0:.0f} s)")
    return 0


def _plot(points: list[dict], bases: dict[int, float], ednl: int | None, path: Path, args: argparse.Namespace) -> None:
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    cmap = matplotlib.colormaps["viridis"]
    depths = sorted(bases)
    for k, depth in enumerate(depths):
        pts = sorted((pt["remaining"], pt["acc"]) for pt in points if pt["depth"] == depth)
        pts.append((depth, bases[depth]))
        best: dict[int, float] = {}
        for r, a in pts:
            best[r] = max(best.get(r, 0.0), a)
        xs = sorted(best)
        color = cmap(k / max(1, len(depths) - 1))
        ax.plot(xs, [100 * best[x] for x in xs], "o-", color=color, label=f"FC-{depth}", alpha=0.85)
    if ednl is not None:
        ax.axvline(ednl, color="grey", ls="--", lw=1)
        ax.text(ednl, ax.get_ylim()[0], f" EDNL = {ednl}", color="grey", va="bottom")
    ax.set_xlabel("remaining non-linear layers  $\\hat{L}$")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"Layer Folding on {args.data}: accuracy vs depth (pre-fold only, tau = {args.tau})")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(ncol=2, fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    write_figure_atomic(path, fig, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
