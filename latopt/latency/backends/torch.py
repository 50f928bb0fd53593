"""PyTorch eager backend: CPU (host clock) or CUDA (CUDA events on the backend's stream).

``profile.cuda_device`` set → CUDA: the backend holds one :class:`latopt.runtime.TorchCudaApi` (that GPU
made current, one CUDA stream on it), each runner's module is copied to the GPU and runs on that stream
(``torch.cuda.stream`` also makes the stream's device current), each call waits for the stream, and
:meth:`TorchCudaRunner.time_ms` times one inference with latopt's one CUDA-event timer
(:meth:`latopt.runtime.CudaApi.time_ms`, events recorded on that stream, shared with the TensorRT runner).
An fp32 CUDA profile times true fp32: TF32 is switched off for cuDNN convolutions and cuBLAS matmuls
(``torch.backends.cudnn.allow_tf32``, on by default, and ``torch.backends.cuda.matmul.allow_tf32``) while
the backend is open and restored by :meth:`TorchBackend.close` — the TensorRT backend clears TF32 for fp32
too; the switches are recorded in the LUT's environment. ``create`` refuses a GPU that the installed torch
has no kernels for (e.g. Pascal, compute capability 6.1, with a torch build for CUDA >= 12.8). Otherwise
CPU eager with ``latopt.training.torch_settings.set_threads(profile.threads)`` (process-wide). fp16 is CUDA-only;
int8 is refused (ONNX Runtime's static INT8: the ``cpu-int8`` device). The runner works on a deep copy in
eval mode under ``torch.inference_mode``; the caller's module is left untouched. Its first call is a check:
an input the module cannot take, or memory the device has not (one line saying to lower the batch or the
resolution), is a :class:`LatoptError`.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import numpy as np
import torch
from pydantic import Field

from latopt.errors import LatoptError, first_line, out_of_memory
from latopt.latency.backends import register_backend, require_gpu
from latopt.latency.devices import DeviceProfile
from latopt.latency.timing import environment_info
from latopt.runtime import TorchCudaApi
from latopt.training.torch_settings import TF32_OFF, set_tf32_flags, set_threads, tf32_flags


class TorchProfile(DeviceProfile):
    """A device timed with PyTorch eager: the CPU, or the GPU ``cuda_device`` (checked against ``expected_gpu``)."""

    backend: Literal["torch"] = "torch"
    cuda_device: Annotated[int, Field(ge=0)] | None = None  # CUDA device index; none: the CPU
    expected_gpu: str | None = None  # GPU name the live device must match (substring or glob)

    @property
    def is_gpu(self) -> bool:
        return self.cuda_device is not None


class TorchRunner:
    """One module on the CPU (or on ``device``), a fixed seeded input; ``runner()`` is one inference."""

    module: Any  # None once closed
    x: torch.Tensor | None

    def __init__(self, module: Any, input_shape: tuple[int, ...], device: Any, dtype: Any, seed: int = 0) -> None:
        self.device = device
        self.dtype = dtype
        with self._stream():
            self.module = copy.deepcopy(module).eval().to(device=device, dtype=dtype)
            g = torch.Generator().manual_seed(seed)
            self.x = torch.randn(tuple(int(s) for s in input_shape), generator=g).to(device=device, dtype=dtype)
        what = f"{type(module).__name__} at input shape {list(input_shape)}"
        try:
            self()
        except RuntimeError as e:  # what torch raises for an input the module cannot take, or memory it lacks
            if out_of_memory(e):
                raise LatoptError(f"out of memory on {device} running {what}: lower the batch (or the device profile's "
                                  f"batch) or the resolution ({first_line(e, 160)})", param="batch") from None
            raise LatoptError(f"PyTorch cannot run {what}: {first_line(e)}") from None

    def _stream(self) -> contextlib.AbstractContextManager[Any]:
        """Where the module's work is queued (the CUDA runner: its backend's stream)."""
        return contextlib.nullcontext()

    def _forward(self) -> None:
        with self._stream(), torch.inference_mode():
            self.module(self.x)

    def __call__(self) -> None:
        self._forward()

    def run(self, x: np.ndarray) -> np.ndarray:
        with self._stream(), torch.inference_mode():
            t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(self.device, self.dtype)
            return np.asarray(self.module(t).float().cpu().numpy())

    def close(self) -> None:
        self.module = None
        self.x = None


class TorchCudaRunner(TorchRunner):
    """A CUDA runner: the module, its input and every call on ``cuda.stream``; :meth:`time_ms` times one
    inference with a pair of CUDA events on that stream."""

    def __init__(self, module: Any, input_shape: tuple[int, ...], cuda: TorchCudaApi, dtype: Any,
                 seed: int = 0) -> None:
        self.cuda = cuda
        super().__init__(module, input_shape, cuda.device, dtype, seed)

    def _stream(self) -> contextlib.AbstractContextManager[Any]:
        return torch.cuda.stream(self.cuda.stream)

    def __call__(self) -> None:
        self._forward()
        self.cuda.synchronize()

    def time_ms(self) -> float:
        return self.cuda.time_ms(self._forward)


def arch_runs_on(capability: Sequence[int], arch_list: Sequence[str]) -> bool:
    """Whether a torch build for ``arch_list`` (``torch.cuda.get_arch_list()``: "sm_61", "sm_90a",
    "compute_90") has code for a GPU of ``capability``: a cubin of the same major version and a lower or equal
    minor one, or PTX of a lower or equal capability (JIT-compiled)."""
    cap = (int(capability[0]), int(capability[1]))
    for arch in arch_list:
        m = re.fullmatch(r"(sm|compute)_(\d+)(\d)([a-z]?)", arch)
        if not m:
            continue
        have = (int(m.group(2)), int(m.group(3)))
        if m.group(1) == "compute" and have <= cap:
            return True
        if m.group(1) == "sm" and (have == cap or (not m.group(4) and have[0] == cap[0] and have[1] <= cap[1])):
            return True
    return False


class TorchBackend:
    name = "torch"

    def __init__(self, profile: Any, device: Any, dtype: Any, cuda: TorchCudaApi | None = None) -> None:
        self.profile = profile
        self.device = device
        self.dtype = dtype
        self.cuda = cuda
        self._tf32_restore: dict[str, bool] | None = None
        if cuda is not None and dtype == torch.float32:  # "fp32" means fp32, not TF32 (restored by close())
            self._tf32_restore = tf32_flags()
            set_tf32_flags(TF32_OFF)

    def prepare(self, model: Any, input_shape: tuple[int, ...]) -> TorchRunner:
        if isinstance(model, (str, os.PathLike)):
            raise LatoptError(f"the torch backend (device {self.profile.name!r}) times nn.Modules, not ONNX files "
                              f"like {model}; use an onnxruntime or tensorrt device")
        if self.cuda is not None:
            return TorchCudaRunner(model, tuple(input_shape), self.cuda, self.dtype)
        return TorchRunner(model, tuple(input_shape), self.device, self.dtype)

    def environment(self) -> dict[str, Any]:
        env = environment_info()
        env.update({"backend": self.name, "torch": torch.__version__, "device": str(self.device),
                    "dtype": str(self.dtype).replace("torch.", "")})
        if self.cuda is not None:
            env["gpu"] = self.cuda.device_name()
            env["compute_capability"] = "{}.{}".format(*self.cuda.compute_capability())
            env["cuda"] = torch.version.cuda
            drv = self.cuda.driver_version()
            if drv:
                env["driver"] = drv
            env["tf32"] = tf32_flags()  # what the timed convolutions and matmuls ran with
            env["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
            env["precision_mode"] = (f"{self.profile.precision}, TF32 off" if self._tf32_restore is not None
                                     else str(self.profile.precision))
        else:
            env["threads"] = torch.get_num_threads()
        return env

    def close(self) -> None:
        """Restore the TF32 switches and release the CUDA stream (idempotent)."""
        if self._tf32_restore is not None:
            set_tf32_flags(self._tf32_restore)
            self._tf32_restore = None
        if self.cuda is not None:
            self.cuda.close()


@register_backend(TorchProfile, words=("pytorch",))
def create(profile: TorchProfile) -> TorchBackend:
    on_cpu = profile.cuda_device is None
    if profile.precision not in (("fp32",) if on_cpu else ("fp32", "fp16")):
        hint = ("; int8 is ONNX Runtime static INT8: use the device cpu-int8" if profile.precision == "int8"
                else "; use precision: fp32")
        raise LatoptError(f"device {profile.name!r}: {profile.precision} {'on the CPU ' if on_cpu else ''}is not "
                          f"supported by the torch backend{hint}", param="device")
    if on_cpu:
        set_threads(profile.threads)
        return TorchBackend(profile, torch.device("cpu"), torch.float32)
    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        raise LatoptError(f"device {profile.name!r} needs a CUDA GPU but torch {torch.__version__} ({build}) sees "
                          f"none; use the device cpu (ONNX Runtime) or cpu-torch on this machine", param="device")
    idx = profile.cuda_device or 0   # not None here: on_cpu returned above
    if idx >= torch.cuda.device_count():
        raise LatoptError(f"device {profile.name!r} asks for CUDA device {idx} but only "
                          f"{torch.cuda.device_count()} GPU(s) are visible; set cuda_device in the profile")
    gpu = torch.cuda.get_device_name(idx)
    require_gpu(profile, gpu, alternative="gpu-torch")
    cap = tuple(torch.cuda.get_device_capability(idx))
    archs = list(torch.cuda.get_arch_list())
    if archs and not arch_runs_on(cap, archs):
        raise LatoptError(f"device {profile.name!r}: torch {torch.__version__} has no CUDA kernels for {gpu} (compute "
                          f"capability {cap[0]}.{cap[1]}; this build has {', '.join(archs)}); install a torch build "
                          f"that does (Maxwell/Pascal/Volta: the CUDA 12.6 wheels, torch <= 2.14, pip install torch "
                          f"--index-url https://download.pytorch.org/whl/cu126) or use a TensorRT device")
    cuda = TorchCudaApi(idx)
    dtype = torch.float16 if profile.precision == "fp16" else torch.float32
    return TorchBackend(profile, cuda.device, dtype, cuda)
