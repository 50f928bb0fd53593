"""Benchmark: training throughput of latopt's loop. Not a test.

Images/s of one training epoch of MobileNetV2-1.0 (timm ``mobilenetv2_100``, 1000 classes) at 224 px on
synthetic data, through :func:`latopt.engine.fit` with an :class:`latopt.accel.Accel` per setting:

    cpu            float32 on the CPU (``--threads``, default all cores)
    cuda-fp32      CUDA, float32 (TF32 as torch's defaults leave it: cuDNN convolutions may use TF32)
    cuda-bf16      CUDA, bf16 autocast
    cuda-bf16-cl   CUDA, bf16 autocast, channels_last
    cuda-fp32-cl   CUDA, float32, channels_last

The CUDA settings run where torch sees a GPU (``--settings`` picks). The batches are made once, already on
the device: no data pipeline, so the figure is the step's (forward, backward, optimizer, latopt's per-step
bookkeeping). On CUDA it also reports the fraction of the epoch's wall time the GPU spends in kernels
(``torch.profiler`` over a separate window of ``--profile-steps`` steps: CUDA kernel time / wall time; near
1 = GPU-bound, the host keeps the GPU fed).

    python tools/bench_train.py [--steps 50] [--batch 128] [--settings cpu cuda-fp32 ...] [--json out.json]
    python tools/bench_train.py --steps 3 --batch 16            # a quick CPU figure
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import torch

from latopt.accel import Accel
from latopt.config import TrainConfig
from latopt.engine import cross_entropy_loss, fit, make_optimizer
from latopt.models import build_model
from latopt.torch_settings import set_threads

SETTINGS: dict[str, dict[str, Any]] = {
    "cpu": {"device": "cpu"},
    "cuda-fp32": {"device": "cuda"},
    "cuda-bf16": {"device": "cuda", "amp": "bf16"},
    "cuda-bf16-cl": {"device": "cuda", "amp": "bf16", "channels_last": True},
    "cuda-fp32-cl": {"device": "cuda", "channels_last": True},
}


class Repeat:
    """``n`` steps of one batch (already on the device): a loader without a data pipeline."""

    def __init__(self, batch: tuple[torch.Tensor, torch.Tensor], n: int) -> None:
        self.batch, self.n = batch, n

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        return iter([self.batch] * self.n)


def _gpu_busy_fraction(model: torch.nn.Module, loader: Repeat, opt: torch.optim.Optimizer, accel: Accel) -> float:
    """CUDA kernel time / wall time of one short epoch under torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        fit(model, loader, 1, opt, None, cross_entropy_loss(), progress=False, accel=accel)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    kernels_us = sum(e.self_device_time_total for e in prof.key_averages() if e.device_type.name == "CUDA")
    return kernels_us / 1e6 / wall


def bench(name: str, args: argparse.Namespace) -> dict[str, Any]:
    s = SETTINGS[name]
    device = torch.device(s["device"])
    accel = Accel(device=device, amp=s.get("amp", "none"), channels_last=s.get("channels_last", False))
    torch.manual_seed(0)
    model = accel.prepare(build_model("mobilenetv2_100", 1000))
    opt = make_optimizer(model, TrainConfig(optimizer="sgd", lr=0.01), 0.01)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.batch, 3, args.resolution, args.resolution, generator=g)
    y = torch.randint(0, 1000, (args.batch,), generator=g)
    batch = accel.batch(x, y)
    loss = cross_entropy_loss()
    fit(model, Repeat(batch, args.warmup), 1, opt, None, loss, progress=False, accel=accel)  # kernels, caches
    hist = fit(model, Repeat(batch, args.steps), 1, opt, None, loss, progress=False, accel=accel)
    seconds = hist[0]["seconds"]  # fit reads its sums once at the epoch's end: the device's work is done
    row: dict[str, Any] = {"setting": name, "device": str(device), "batch": args.batch, "steps": args.steps,
                           "seconds": seconds, "images_per_s": args.steps * args.batch / seconds,
                           "threads": torch.get_num_threads() if device.type == "cpu" else None}
    if device.type == "cuda" and args.profile_steps > 0:
        try:
            row["gpu_busy_fraction"] = _gpu_busy_fraction(model, Repeat(batch, args.profile_steps), opt, accel)
        except Exception as e:  # noqa: BLE001 - the profiler is optional; the throughput stands
            row["gpu_busy_fraction"] = None
            row["profiler_error"] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="training images/s of MobileNetV2-1.0 on synthetic data")
    ap.add_argument("--settings", nargs="+", choices=list(SETTINGS), help="default: cpu, and every cuda setting "
                    "when torch sees a GPU")
    ap.add_argument("--steps", type=int, default=50, help="timed steps (one epoch)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--resolution", type=int, default=224)
    ap.add_argument("--threads", type=int, help="CPU intra-op threads (default: torch's choice)")
    ap.add_argument("--profile-steps", type=int, default=20, help="CUDA: steps of the GPU-busy window (0: skip)")
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args(argv)
    if min(args.steps, args.batch, args.resolution) < 1 or args.warmup < 0:
        print("bench_train: --steps, --batch and --resolution must be >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    settings = args.settings or ["cpu", *([k for k in SETTINGS if k != "cpu"] if torch.cuda.is_available() else [])]
    if any(SETTINGS[s]["device"] == "cuda" for s in settings) and not torch.cuda.is_available():
        print("bench_train: torch sees no CUDA GPU; run the cpu setting here", file=sys.stderr)
        return 2
    set_threads(args.threads)
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    print(f"MobileNetV2-1.0 @{args.resolution}, batch {args.batch}, {args.steps} steps (+{args.warmup} warm-up), "
          f"synthetic data on the device; torch {torch.__version__}, GPU {gpu}")
    rows = []
    for name in settings:
        row = bench(name, args)
        rows.append(row)
        busy = row.get("gpu_busy_fraction")
        extra = (f", GPU busy {busy:.0%} of wall" if busy is not None else
                 f", GPU busy n/a ({row['profiler_error']})" if "profiler_error" in row else "")
        threads = f", {row['threads']} thread{'s' * (row['threads'] > 1)}" if row["threads"] else ""
        print(f"  {name:<14} {row['images_per_s']:9.1f} images/s ({row['seconds']:.2f} s{threads}{extra})", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
