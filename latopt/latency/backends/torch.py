"""PyTorch eager backend: CPU (host clock) or CUDA (CUDA events after synchronisation).

``profile.cuda_device`` set → CUDA: the module is copied to that GPU, each call synchronises, and
:meth:`TorchCudaRunner.time_ms` times one inference with a pair of CUDA events. Otherwise CPU eager with
``latopt.engine.set_threads(profile.threads)`` (process-wide). fp16 is CUDA-only. The runner works on a deep
copy in eval mode under ``torch.inference_mode``; the caller's module is left untouched.
"""

from __future__ import annotations

import copy
import os
import subprocess
from typing import Any

import numpy as np
import torch

from latopt.engine import set_threads
from latopt.errors import LatoptError, first_line
from latopt.latency.timing import environment_info


class TorchRunner:
    def __init__(self, module: Any, input_shape: tuple[int, ...], device: Any, dtype: Any, seed: int = 0) -> None:

        self.torch = torch
        self.device = device
        self.dtype = dtype
        self.module = copy.deepcopy(module).eval().to(device=device, dtype=dtype)
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(tuple(int(s) for s in input_shape), generator=g).to(device=device, dtype=dtype)
        self.cuda = device.type == "cuda"
        try:
            self()
        except RuntimeError as e:
            raise LatoptError(f"PyTorch cannot run {type(module).__name__} at input shape {list(input_shape)}: "
                              f"{first_line(e)}") from None

    def __call__(self) -> None:
        with self.torch.inference_mode():
            self.module(self.x)
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def run(self, x: np.ndarray) -> np.ndarray:
        torch = self.torch
        with torch.inference_mode():
            t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(self.device, self.dtype)
            return self.module(t).float().cpu().numpy()

    def close(self) -> None:
        self.module = None
        self.x = None


class TorchCudaRunner(TorchRunner):
    """A CUDA runner: :meth:`time_ms` times one inference with a pair of CUDA events."""

    def time_ms(self) -> float:
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(self.device)
        with torch.inference_mode():
            start.record()
            self.module(self.x)
            end.record()
        end.synchronize()
        return float(start.elapsed_time(end))


class TorchBackend:
    name = "torch"

    def __init__(self, profile: Any, device: Any, dtype: Any) -> None:
        self.profile = profile
        self.device = device
        self.dtype = dtype

    def prepare(self, model: Any, input_shape: tuple[int, ...]) -> TorchRunner:
        if isinstance(model, (str, os.PathLike)):
            raise LatoptError(f"the torch backend (device {self.profile.name!r}) times nn.Modules, not ONNX files "
                              f"like {model}; use an onnxruntime or tensorrt device")
        cls = TorchCudaRunner if self.device.type == "cuda" else TorchRunner
        return cls(model, tuple(input_shape), self.device, self.dtype)

    def environment(self) -> dict[str, Any]:


        env = environment_info()
        env.update({"backend": self.name, "torch": torch.__version__, "device": str(self.device),
                    "dtype": str(self.dtype).replace("torch.", "")})
        if self.device.type == "cuda":
            env["gpu"] = torch.cuda.get_device_name(self.device)
            env["cuda"] = torch.version.cuda
            drv = _driver_version(self.device.index or 0)
            if drv:
                env["driver"] = drv
        else:
            env["threads"] = torch.get_num_threads()
        return env

    def close(self) -> None:
        pass


def _driver_version(index: int) -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", f"--id={index}", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def create(profile: Any) -> TorchBackend:

    if profile.cuda_device is None:
        if profile.precision != "fp32":
            raise LatoptError(f"device {profile.name!r}: fp16 on the CPU is not supported by the torch backend; "
                              f"use precision: fp32")
        set_threads(profile.threads)
        return TorchBackend(profile, torch.device("cpu"), torch.float32)
    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        raise LatoptError(f"device {profile.name!r} needs a CUDA GPU but torch {torch.__version__} ({build}) sees "
                          f"none; use --device cpu (ONNX Runtime) or --device cpu-torch on this machine")
    idx = int(profile.cuda_device)
    if idx >= torch.cuda.device_count():
        raise LatoptError(f"device {profile.name!r} asks for CUDA device {idx} but only "
                          f"{torch.cuda.device_count()} GPU(s) are visible; set cuda_device in the profile")
    live = torch.cuda.get_device_name(idx)
    expected = profile.expected_gpu
    if expected and expected.lower() not in live.lower():
        raise LatoptError(f"device {profile.name!r} expects GPU {expected!r} but CUDA device {idx} is {live!r}; "
                          f"use --device gpu-torch or add a profile for this GPU")
    dtype = torch.float16 if profile.precision == "fp16" else torch.float32
    return TorchBackend(profile, torch.device("cuda", idx), dtype)
