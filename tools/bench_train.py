"""Benchmark: training throughput of latopt's loop, settings side by side in one interleaved run. Not a test.

Images/s of training steps through :func:`latopt.training.loop.fit`, one :class:`latopt.training.accel.Accel` per setting:

    cpu-before     the CPU as latopt trained before channels_last and batched data: float32, NCHW, and (with
                   ``--data TASK``) every image read and collated one at a time
    cpu            float32 on the CPU, NCHW, batched data
    cpu-cl         float32 on the CPU, channels_last (NHWC weights and batches), batched data
    cuda-fp32      CUDA, float32 (TF32 as torch's defaults leave it: cuDNN convolutions may use TF32)
    cuda-bf16      CUDA, bf16 autocast
    cuda-bf16-cl   CUDA, bf16 autocast, channels_last
    cuda-fp32-cl   CUDA, float32, channels_last

``--nets`` picks the networks each setting trains: ``base`` (the model as built), ``alpha`` (σ_α installed in
every block, as pre-fold trains it) and ``folded`` (every block but the first folded in exact mode, as
post-fold trains it). ``--data synthetic`` (default) feeds one batch made once, already on the device: no
data pipeline, the step alone. ``--data TASK`` (e.g. ``fashion-mnist``) feeds the task's augmented training
split through :func:`latopt.data.make_loaders` (the data pipeline is timed too).

The run is interleaved: ``--rounds`` rounds, each timing ``--steps`` steps of every (setting, network) in
turn, so that a change in the machine's load falls on all of them alike; the report gives each one's median
images/s with quartiles over the rounds and, against the first setting, the median and quartiles of the
per-round ratio. ``--loss-check N`` also trains every setting for one epoch of N training images from the
same seed and prints the epoch's mean loss (the settings should agree within float rounding where they train
the same function on the same batches). On CUDA it also reports the fraction of wall time the GPU spends in
kernels (``torch.profiler`` over ``--profile-steps`` steps; near 1 = GPU-bound).

    python tools/bench_train.py --model torchvision/mobilenet_v2?width=0.5 --resolution 32 --threads 1 \\
        --data fashion-mnist --settings cpu-before cpu-cl --nets base --rounds 5 --steps 30 --json out.json
    python tools/bench_train.py --steps 3 --batch 16            # a quick CPU figure (MobileNetV2-1.0 @224)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from latopt.config import TrainConfig
from latopt.data import get_task, make_loaders, subsample_train
from latopt.latency.timing import environment_info
from latopt.nets.blocks import find_blocks
from latopt.nets.models import build_model
from latopt.rewrite import fold_blocks, install_alpha
from latopt.training.accel import Accel
from latopt.training.loop import Report, Step, cross_entropy_loss, fit, make_optimizer, seed_everything
from latopt.training.torch_settings import set_threads

SETTINGS: dict[str, dict[str, Any]] = {
    "cpu-before": {"device": "cpu", "per_sample": True},
    "cpu": {"device": "cpu"},
    "cpu-cl": {"device": "cpu", "channels_last": True},
    "cuda-fp32": {"device": "cuda"},
    "cuda-bf16": {"device": "cuda", "amp": "bf16"},
    "cuda-bf16-cl": {"device": "cuda", "amp": "bf16", "channels_last": True},
    "cuda-fp32-cl": {"device": "cuda", "channels_last": True},
}
NETS = ("base", "alpha", "folded")


class Repeat:
    """``n`` steps of one batch (already on the device): a loader without a data pipeline."""

    def __init__(self, batch: tuple[torch.Tensor, torch.Tensor], n: int) -> None:
        self.batch, self.n = batch, n

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        return iter([self.batch] * self.n)


class Steps:
    """An endless pass over ``loader`` (a new epoch when one ends), taken a few batches at a time."""

    def __init__(self, loader: Any) -> None:
        self.loader, self.it = loader, iter(loader)

    def take(self, n: int) -> list:
        out = []
        while len(out) < n:
            try:
                out.append(next(self.it))
            except StopIteration:
                self.it = iter(self.loader)
        return out


class PerSample(Dataset):
    """A dataset read one sample at a time (no ``__getitems__``): how latopt's loaders read every task before."""

    def __init__(self, ds: Dataset) -> None:
        self.ds = ds

    def __len__(self) -> int:
        return len(self.ds)  # type: ignore[arg-type]

    def __getitem__(self, i: int) -> Any:
        return self.ds[i]


def make_net(model_name: str, num_classes: int, net: str, resolution: int) -> torch.nn.Module:
    model = build_model(model_name, num_classes)
    if net == "alpha":
        install_alpha(model)
    elif net == "folded":
        plan = {b.index: "full" for b in find_blocks(model)[1:]}
        model = fold_blocks(model, plan, mode="exact", input_size=(resolution, resolution))
    return model


def _gpu_busy_fraction(model: torch.nn.Module, loader: Any, opt: torch.optim.Optimizer, accel: Accel) -> float:
    """CUDA kernel time / wall time of one short epoch under torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        fit(model, loader, 1, Step(cross_entropy_loss(), opt), accel=accel, report=Report(show=False))
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    kernels_us = sum(e.self_device_time_total for e in prof.key_averages() if e.device_type.name == "CUDA")
    return kernels_us / 1e6 / wall


class Case:
    """One (setting, network): its model, optimizer and source of batches, timed a round at a time."""

    def __init__(self, setting: str, net: str, args: argparse.Namespace, task: Any) -> None:
        s = SETTINGS[setting]
        self.setting, self.net = setting, net
        self.accel = Accel(device=torch.device(s["device"]), amp=s.get("amp", "none"),
                           channels_last=s.get("channels_last", False))
        num_classes = task.num_classes if task is not None else 1000
        torch.manual_seed(0)
        self.model = self.accel.prepare(make_net(args.model, num_classes, net, args.resolution))
        self.opt = make_optimizer(self.model, TrainConfig(optimizer="sgd", lr=0.01), 0.01)
        self.loss = cross_entropy_loss()
        if task is None:
            g = torch.Generator().manual_seed(0)
            x = torch.randn(args.batch, 3, args.resolution, args.resolution, generator=g)
            y = torch.randint(0, num_classes, (args.batch,), generator=g)
            self.source: Repeat | Steps = Repeat(self.accel.batch(x, y), 0)
        else:
            train = PerSample(task.train) if s.get("per_sample") else task.train
            loader, _, _ = make_loaders(replace(task, train=train), args.batch, 0,
                                        accel=self.accel)
            self.source = Steps(loader)
        self.rows: list[float] = []
        self.run(args.warmup)  # kernels, caches, first allocations

    def batches(self, n: int) -> Any:
        return Repeat(self.source.batch, n) if isinstance(self.source, Repeat) else _Lazy(self.source, n)

    def run(self, steps: int) -> float:
        if steps <= 0:
            return 0.0
        t0 = time.perf_counter()   # the batches are drawn inside the timed window: the pipeline counts
        if isinstance(self.source, Repeat):
            loader: Any = Repeat(self.source.batch, steps)
            images = steps * int(self.source.batch[1].shape[0])
        else:
            loader = _Lazy(self.source, steps)
        fit(self.model, loader, 1, Step(self.loss, self.opt), accel=self.accel, report=Report(show=False))
        seconds = time.perf_counter() - t0  # fit reads its sums once at the epoch's end: the device's work is done
        if isinstance(loader, _Lazy):
            images = loader.images
        return images / seconds


class _Lazy:
    """``n`` batches pulled from a :class:`Steps` while ``fit`` iterates (so the data pipeline is timed)."""

    def __init__(self, steps: Steps, n: int) -> None:
        self.steps, self.n, self.images = steps, n, 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        for _ in range(self.n):
            b = self.steps.take(1)[0]
            self.images += len(b[1])
            yield b


def loss_check(setting: str, net: str, args: argparse.Namespace, task: Any) -> float:
    """The mean training loss of one epoch of ``args.loss_check`` images from seed 0 under ``setting``."""
    s = SETTINGS[setting]
    accel = Accel(device=torch.device(s["device"]), amp=s.get("amp", "none"), channels_last=s.get("channels_last", False))
    sub = subsample_train(task, args.loss_check, 0)
    train = PerSample(sub.train) if s.get("per_sample") else sub.train
    seed_everything(0)
    model = accel.prepare(make_net(args.model, task.num_classes, net, args.resolution))
    opt = make_optimizer(model, TrainConfig(optimizer="sgd", lr=0.01), 0.01)
    loader, _, _ = make_loaders(replace(sub, train=train), args.batch, 0, accel=accel)
    seed_everything(0)  # the augmentation draws the same random numbers in every setting of one loader kind
    return fit(model, loader, 1, Step(cross_entropy_loss(), opt), accel=accel, report=Report(show=False))[0]["loss"]


def _quartiles(v: list[float]) -> tuple[float, float, float]:
    if len(v) == 1:
        return v[0], v[0], v[0]
    q = statistics.quantiles(v, n=4, method="inclusive")
    return q[0], statistics.median(v), q[2]


def render(path: Path) -> str:
    """README's table of a recorded run (``--json``): each (network, setting) with its median images/s and
    quartiles over the rounds, the per-round ratio to the reference setting, and the loss check when run."""
    rec = json.loads(Path(path).read_text())
    a = rec["args"]
    lines = [f"`{a['model']}` @{a['resolution']}, batch {a['batch']}, {rec['threads']} thread(s), data `{a['data']}`, "
             f"{a['rounds']} interleaved rounds of {a['steps']} steps; torch {rec['torch']}, CPU "
             f"{rec['environment'].get('cpu', '?')} with {', '.join(rec['environment'].get('cpu_flags', [])) or 'no flags recorded'}, "
             f"load average {rec['environment'].get('loadavg', ['?'])[0]} at the start "
             f"(`{Path(path).relative_to(Path(path).parents[1])}`):", "",
             "| network | setting | images/s (median) | quartiles | × reference (median) | quartiles | "
             "first-epoch loss |", "|---|---|---|---|---|---|---|"]
    for r in rec["rows"]:
        loss = f"{r['loss_check']:.6f}" if "loss_check" in r else ""
        lines.append(f"| {r['net']} | {r['setting']} | {r['median']:.0f} | {r['q1']:.0f}–{r['q3']:.0f} | "
                     f"{r['ratio_median']:.2f} | {r['ratio_q1']:.2f}–{r['ratio_q3']:.2f} | {loss} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="training images/s, settings side by side in one interleaved run")
    ap.add_argument("--settings", nargs="+", choices=list(SETTINGS), help="default: cpu-before, cpu-cl, and every "
                    "cuda setting when torch sees a GPU; the first is the reference of the ratios")
    ap.add_argument("--nets", nargs="+", choices=NETS, default=["base"])
    ap.add_argument("--model", default="mobilenetv2_100")
    ap.add_argument("--data", default="synthetic", help="synthetic (one batch on the device) or a task spec "
                    "(its augmented training split through latopt's loaders)")
    ap.add_argument("--steps", type=int, default=50, help="timed steps per round")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--resolution", type=int, default=224)
    ap.add_argument("--threads", type=int, help="CPU intra-op threads (default: torch's choice)")
    ap.add_argument("--loss-check", type=int, default=0, metavar="N",
                    help="also train one epoch of N images from seed 0 per setting and print its mean loss")
    ap.add_argument("--profile-steps", type=int, default=20, help="CUDA: steps of the GPU-busy window (0: skip)")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    if min(args.steps, args.batch, args.resolution, args.rounds) < 1 or args.warmup < 0 or args.loss_check < 0:
        print("bench_train: --steps, --rounds, --batch and --resolution must be >= 1, --warmup and --loss-check "
              ">= 0", file=sys.stderr)
        return 2
    cuda = torch.cuda.is_available()
    settings = args.settings or ["cpu-before", "cpu-cl", *([k for k in SETTINGS if k.startswith("cuda")] if cuda else [])]
    if any(SETTINGS[s]["device"] == "cuda" for s in settings) and not cuda:
        print("bench_train: torch sees no CUDA GPU; run the cpu settings here", file=sys.stderr)
        return 2
    set_threads(args.threads)
    task = None if args.data == "synthetic" else get_task(args.data, args.resolution, 0, augment=True)
    gpu = torch.cuda.get_device_name(0) if cuda else "none"
    env = environment_info()
    print(f"{args.model} @{args.resolution}, batch {args.batch}, data {args.data}, {args.rounds} round(s) of "
          f"{args.steps} steps (+{args.warmup} warm-up); torch {torch.__version__}, {torch.get_num_threads()} "
          f"thread(s), GPU {gpu}; CPU {env.get('cpu', '?')}")
    cases = [Case(s, n, args, task) for s in settings for n in args.nets]
    for r in range(args.rounds):
        for c in cases:
            c.rows.append(c.run(args.steps))
        print(f"  round {r + 1}/{args.rounds}: " + ", ".join(f"{c.setting}/{c.net} {c.rows[-1]:.0f}" for c in cases),
              flush=True)
    out: list[dict[str, Any]] = []
    for net in args.nets:
        ref = next(c for c in cases if c.net == net)
        for c in (c for c in cases if c.net == net):
            q1, med, q3 = _quartiles(c.rows)
            ratios = [a / b for a, b in zip(c.rows, ref.rows, strict=True)]
            r1, rmed, r3 = _quartiles(ratios)
            row: dict[str, Any] = {"setting": c.setting, "net": net, "images_per_s": c.rows, "median": med,
                                   "q1": q1, "q3": q3, "ratio_to": ref.setting, "ratio_median": rmed,
                                   "ratio_q1": r1, "ratio_q3": r3}
            if c.accel.device.type == "cuda" and args.profile_steps > 0:
                try:
                    row["gpu_busy_fraction"] = _gpu_busy_fraction(c.model, c.batches(args.profile_steps), c.opt, c.accel)
                except Exception as e:  # noqa: BLE001 - the profiler is optional; the throughput stands
                    row["profiler_error"] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            if args.loss_check and task is not None:
                row["loss_check"] = loss_check(c.setting, net, args, task)
            out.append(row)
            busy = row.get("gpu_busy_fraction")
            extra = f", GPU busy {busy:.0%} of wall" if busy is not None else ""
            loss = f", first-epoch loss {row['loss_check']:.6f}" if "loss_check" in row else ""
            print(f"  {c.setting:<13} {net:<7} {med:8.1f} images/s [{q1:.1f}, {q3:.1f}]  x{rmed:.2f} "
                  f"[{r1:.2f}, {r3:.2f}] vs {ref.setting}{extra}{loss}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"schema": "latopt.bench_train/2", "args": vars(args), "environment": env,
                       "torch": torch.__version__, "threads": torch.get_num_threads(), "rows": out}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
