"""Where and how a training process runs: device, mixed precision, memory format, data loading, torchrun.

Base training, pre-fold / post-fold and every search trial resolve one :class:`Accel` from the run
config (:func:`resolve`) and hand it to :mod:`latopt.training.loop` and :func:`latopt.data.make_loaders`.

**Device** (``train.device``, ``--train-device``): ``auto`` (the default: CUDA when torch sees a GPU,
else the CPU), ``cpu``, ``cuda``, ``cuda:N``. Under torchrun ``auto`` and ``cuda`` mean
``cuda:LOCAL_RANK`` (one GPU per process); ``cuda:N`` is refused there when a machine runs several
processes (they would share GPU N). ``cuda`` without a GPU is refused with one line. The model, the σ_α
parameters, the distillation teacher, the batches and the compression loss live on this device;
checkpoints are always written from CPU tensors (:func:`latopt.files.checkpoint.save_checkpoint`) and load on
any device; the fold algebra and its checks run on CPU copies in float64/float32 (:mod:`latopt.layerfold`).

**Mixed precision** (``train.amp``): ``none``, ``bf16`` (``torch.autocast``; CPU and Ampere-or-newer
GPUs) or ``fp16`` (autocast + ``torch.amp.GradScaler``; CUDA only: refused on the CPU with one line).
Master weights, optimizer state and every *recorded* accuracy stay float32:
:func:`latopt.training.torch_settings.strict_fp32` (no autocast, TF32 off) is what :func:`latopt.training.loop.evaluate` runs
under, so the accuracy a checkpoint records is the one ``latopt export`` re-measures in float32 on the CPU.

**Throughput**: ``train.channels_last`` (NHWC weights and batches; ``null``, the default, means on for the CPU,
where it trained faster than NCHW for the base, σ_α and folded networks in README's interleaved measurement
(``tools/bench_train.py``, ``results/bench-train/``), and off on CUDA, where it helps convolutions on
tensor-core GPUs but has not been measured by latopt), DataLoader workers / pinned memory / persistent workers from ``data.workers`` /
``data.pin_memory`` / ``data.persistent_workers`` (``null`` = automatic: 0 workers on the CPU, where
training needs the cores; on CUDA min(8, cores per process − 1) workers, pinned memory, persistent
workers), batches copied with ``non_blocking=True``.

**torchrun** (``torchrun --nproc-per-node N -m latopt train|fold ...``): :func:`process_group` reads
RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT, initialises the process group (NCCL on CUDA,
gloo on the CPU, with ``train.dist_timeout_s`` on every collective, so a rank whose peer died or hangs
fails instead of waiting forever) and destroys it in ``finally``. ``data.batch_size`` is the *global*
batch: each of the W processes takes batch_size / W samples per step (it must divide), so a config
trains the same under torchrun as in one process. The model is wrapped in DistributedDataParallel for
training (the α's are parameters of the wrapped model, so their gradients are averaged like the
weights'; the compression loss is computed from them identically on every rank). ``train.sync_bn``
(default on) normalises over the global batch (:func:`sync_batch_norm`); off, each process uses its own
batch statistics (faster; fine for large per-GPU batches). Each process draws its own random numbers
(augmentation, dropout; its loader's workers too): the stages seed ``seed + rank`` once the model is built,
while the samplers' order is shared (:func:`latopt.data.make_loaders`). Metrics are summed over the
processes; only rank 0 writes files and prints; the other ranks log warnings and errors only.

Public API::

    Accel                                            one process's resolved settings (a frozen dataclass)
    resolve(cfg) -> Accel                            from cfg.train / cfg.data, LOCAL_RANK and the process group
    resolve_device(spec, local_rank=0, local_world=1) -> torch.device
    process_group(train_cfg) -> context manager      torchrun: init / destroy the process group
    launched_by_torchrun() -> bool;  is_main_process() -> bool
    sync_batch_norm() -> context manager             batch norm over the global batch (any BatchNorm module)
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.overrides import TorchFunctionMode

from latopt.config import RunConfig, TrainConfig
from latopt.errors import LatoptError, first_line
from latopt.log import QUIET, get_logger, setup

_LOG = get_logger("train")
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
MAX_AUTO_WORKERS = 8
_AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


# ------------------------------------------------------------------------------------------------ device
def launched_by_torchrun() -> bool:
    """Whether this process was started by torchrun (or another launcher that sets its environment)."""
    return all(k in os.environ for k in TORCHRUN_ENV)


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    if not value:
        return default
    if not value.isdigit():
        raise LatoptError(f"environment variable {name}={value!r} is not a non-negative integer (set by torchrun)")
    return int(value)


def _local() -> tuple[int, int]:
    """(LOCAL_RANK, LOCAL_WORLD_SIZE) of this process: (0, 1) outside torchrun."""
    return _env_int("LOCAL_RANK", 0), _env_int("LOCAL_WORLD_SIZE", 1)


def resolve_device(spec: str, local_rank: int = 0, local_world: int = 1) -> torch.device:
    """The torch device ``train.device = spec`` names for the process of ``local_rank`` (see module doc). Its errors
    carry ``param="train_device"``, the keyword that sets ``train.device`` (:func:`latopt.cli.flag_for`)."""
    if spec == "cpu":
        return torch.device("cpu")
    has_cuda = torch.cuda.is_available()
    if spec == "auto" and not has_cuda:
        return torch.device("cpu")
    if not has_cuda:
        raise LatoptError(f"train.device {spec}: torch sees no CUDA GPU (torch.cuda.is_available() is False"
                          f"{'' if torch.version.cuda else '; this torch is a CPU-only build'}); "
                          "use train.device auto or cpu", param="train_device")
    count = torch.cuda.device_count()
    m = re.fullmatch(r"cuda:(\d+)", spec)
    if m:
        index = int(m.group(1))
        if local_world > 1:
            raise LatoptError(f"train.device {spec} would put all {local_world} processes of this machine on GPU "
                              f"{index}; under torchrun use train.device cuda or auto (GPU = LOCAL_RANK)",
                              param="train_device")
    else:
        index = local_rank
    if index >= count:
        what = f"LOCAL_RANK {local_rank} needs GPU {index}" if not m else f"train.device {spec}"
        raise LatoptError(f"{what} but torch sees {count} GPU(s) (cuda:0 .. cuda:{count - 1}); "
                          "start fewer processes per machine or pick another GPU", param="train_device")
    return torch.device("cuda", index)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_workers(device: torch.device, local_world: int = 1) -> int:
    """DataLoader worker processes when ``data.workers`` is null: none on the CPU (training needs the
    cores), else one less than this process's share of the cores, at most :data:`MAX_AUTO_WORKERS`."""
    if device.type != "cuda":
        return 0
    return max(1, min(MAX_AUTO_WORKERS, _cores() // max(1, local_world) - 1))


# ------------------------------------------------------------------------------------------------- Accel
@dataclass(frozen=True)
class Accel:
    """How one training process runs (the defaults: the CPU, float32, one process, no loader workers)."""

    device: torch.device = torch.device("cpu")
    amp: str = "none"                 # none | bf16 | fp16
    channels_last: bool = False
    sync_bn: bool = True
    distributed: bool = False         # a process group is initialised (torchrun)
    rank: int = 0
    world_size: int = 1
    workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def memory_format(self) -> torch.memory_format:
        return torch.channels_last if self.channels_last else torch.contiguous_format

    def prepare(self, model: nn.Module) -> nn.Module:
        """``model`` moved (in place) to the device and memory format; returned."""
        # torch's stubs of Module.to lack memory_format, which it takes (as Tensor.to does)
        return model.to(self.device, memory_format=self.memory_format)  # type: ignore[call-overload]

    def batch(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch on the device (asynchronous copies from pinned memory)."""
        x = x.to(self.device, non_blocking=True, memory_format=self.memory_format if x.dim() == 4 else
                 torch.preserve_format)
        return x, y.to(self.device, non_blocking=True)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.amp == "none":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=_AMP_DTYPES[self.amp])

    def grad_scaler(self) -> torch.amp.GradScaler | None:
        """A loss scaler for fp16 training (None otherwise)."""
        return torch.amp.GradScaler(self.device.type) if self.amp == "fp16" else None

    def wrap(self, model: nn.Module) -> nn.Module:
        """The module to train: ``model`` in DistributedDataParallel under torchrun, else itself."""
        if not self.distributed:
            return model
        ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids, output_device=ids[0] if ids else None)

    def batch_norm(self) -> contextlib.AbstractContextManager[Any]:
        """The context of a training forward: global-batch statistics under torchrun with ``sync_bn``."""
        if self.distributed and self.sync_bn and self.world_size > 1:
            return sync_batch_norm()
        return contextlib.nullcontext()

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        """The sum of ``t`` over the processes (``t`` itself in one process); ``t`` is overwritten."""
        if self.distributed:
            dist.all_reduce(t)
        return t

    def gather(self, obj: Any) -> list[Any]:
        """``obj`` of every process, by rank (``[obj]`` in one process)."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every process."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]


def _check_amp(amp: str, device: torch.device) -> None:
    if amp == "fp16" and device.type != "cuda":
        raise LatoptError(f"train.amp fp16 needs a CUDA GPU (the training device is {device}); "
                          "use train.amp bf16 or none on the CPU", param="amp")
    if amp == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
        name = torch.cuda.get_device_name(device)
        raise LatoptError(f"train.amp bf16: the GPU {name} has no bfloat16 arithmetic (Ampere or newer has); "
                          "use train.amp fp16 or none", param="amp")


def resolve(cfg: RunConfig) -> Accel:
    """The :class:`Accel` of this process for ``cfg`` (one line when the device or precision cannot be had)."""
    t, d = cfg.train, cfg.data
    local_rank, local_world = _local()
    device = resolve_device(t.device, local_rank, local_world)
    _check_amp(t.amp, device)
    distributed = dist.is_available() and dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    workers = d.workers if d.workers is not None else default_workers(device, local_world)
    pin = d.pin_memory if d.pin_memory is not None else device.type == "cuda"
    persistent = (d.persistent_workers if d.persistent_workers is not None else True) and workers > 0
    channels_last = t.channels_last if t.channels_last is not None else device.type == "cpu"
    return Accel(device=device, amp=t.amp, channels_last=channels_last, sync_bn=t.sync_bn,
                 distributed=distributed, rank=rank, world_size=world, workers=workers, pin_memory=pin,
                 persistent_workers=persistent)


# ---------------------------------------------------------------------------------------------- torchrun
def is_main_process() -> bool:
    """Rank 0 of the process group, or the only process."""
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


@contextlib.contextmanager
def process_group(train_cfg: TrainConfig) -> Iterator[None]:
    """Under torchrun: join the process group for the block (NCCL on CUDA, gloo on the CPU; every
    collective times out after ``train_cfg.dist_timeout_s``), quiet the progress of ranks > 0, destroy
    the group when the block ends, however it ends. A collective that raises because another process died
    (gloo: the connection closes at once) or timed out (gloo) becomes one line (:class:`LatoptError`), as
    does an NCCL error raised here, so every process of a job in which one failed exits non-zero.

    NCCL raises nothing for a dead peer: the collective waits on the GPU, and the process blocks at its next
    read of a result. torchrun stops it (every process of a job is stopped when one fails); otherwise
    PyTorch's NCCL watchdog aborts the process once the collective has waited ``dist_timeout_s`` (its
    default, ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` 3), with NCCL's own error output, not one line.
    Outside torchrun: nothing."""
    if not launched_by_torchrun() or dist.is_initialized():
        yield
        return
    local_rank, local_world = _local()
    device = resolve_device(train_cfg.device, local_rank, local_world)
    kwargs: dict[str, Any] = {"timeout": timedelta(seconds=train_cfg.dist_timeout_s)}
    if device.type == "cuda":
        torch.cuda.set_device(device)
        kwargs["device_id"] = device  # binds the NCCL communicator to this GPU at once
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", **kwargs)
    if dist.get_rank() != 0:
        setup(QUIET)  # rank 0 reports; the others only warn and fail
    rank, world = dist.get_rank(), dist.get_world_size()
    _LOG.debug(f"rank {rank}/{world} on {device} ({dist.get_backend()})")
    try:
        yield
    except RuntimeError as e:
        if not (isinstance(e, dist.DistError) or "/gloo/" in str(e) or "NCCL" in str(e)):
            raise
        raise LatoptError(f"rank {rank} of {world}: a collective failed, another process of the job stopped or "
                          f"hung (see its error) — {first_line(e, 160)}") from None
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------------------------- global batch norm
class _AllReduceSum(torch.autograd.Function):
    """The sum over the processes, differentiable: the gradient of a sum shared by all is the sum of theirs."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor) -> torch.Tensor:
        t = t.clone()
        dist.all_reduce(t)
        return t

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


def _global_batch_norm(x: torch.Tensor, running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
                       weight: torch.Tensor | None, bias: torch.Tensor | None, momentum: float,
                       eps: float) -> torch.Tensor:
    """Training-mode batch norm of ``x`` with the statistics of the batch of every process.

    Each process's (count, mean, M2) are combined exactly (Chan et al.) in float64 by one autograd-aware
    all-reduce, so gradients flow through the global statistics as in one process."""
    dims = [0, *range(2, x.dim())]
    c = x.shape[1]
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x  # autocast: statistics in float32
    n = xf.numel() // c
    var, mean = torch.var_mean(xf, dim=dims, unbiased=False)
    mean64 = mean.double()
    local = torch.cat([mean64 * n, mean64 * mean64 * n, var.double() * n, mean64.new_full((1,), float(n))])
    total = _AllReduceSum.apply(local)
    count = total[-1]
    g_mean = total[:c] / count
    g_var = (total[2 * c:3 * c] + total[c:2 * c] - count * g_mean * g_mean) / count
    if running_mean is not None and running_var is not None:
        with torch.no_grad():
            unbiased = g_var * (count / (count - 1).clamp(min=1))
            running_mean.mul_(1 - momentum).add_(g_mean.to(running_mean.dtype), alpha=momentum)
            running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
    shape = [1, c] + [1] * (x.dim() - 2)
    y = (xf - g_mean.to(xf.dtype).view(shape)) * torch.rsqrt(g_var.to(xf.dtype) + eps).view(shape)
    if weight is not None:
        y = y * weight.to(xf.dtype).view(shape)
    if bias is not None:
        y = y + bias.to(xf.dtype).view(shape)
    return y.to(x.dtype)


def _bound_batch_norm(input: torch.Tensor, running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
                      weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, training: bool = False,
                      momentum: float = 0.1, eps: float = 1e-5) -> torch.Tensor | None:
    """An ``F.batch_norm`` call's arguments, bound as it binds them (its signature and defaults): the global
    batch norm in training mode (:func:`_global_batch_norm`), None otherwise."""
    if not training:
        return None
    return _global_batch_norm(input, running_mean, running_var, weight, bias, momentum, eps)


class _SyncBatchNorm(TorchFunctionMode):
    """Routes every training-mode ``F.batch_norm`` call (nn.BatchNorm2d, timm's BatchNormAct2d, ...) to
    :func:`_global_batch_norm`; everything else runs as it is."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is F.batch_norm:
            y = _bound_batch_norm(*args, **kwargs)
            if y is not None:
                return y
        return func(*args, **kwargs)


def sync_batch_norm() -> contextlib.AbstractContextManager[Any]:
    """While active, batch norm in training mode uses the statistics of the whole (global) batch of all
    processes of the process group — on any device (torch's SyncBatchNorm is CUDA-only) and for any
    BatchNorm module, without replacing modules (checkpoints and the fold see plain BatchNorm2d)."""
    return _SyncBatchNorm()


__all__ = ["Accel", "default_workers", "is_main_process", "launched_by_torchrun", "process_group", "resolve",
           "resolve_device", "sync_batch_norm"]
