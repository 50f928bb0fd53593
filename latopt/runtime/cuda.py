"""The CUDA side of the GPU runners: buffers, one stream, copies, the one CUDA-event timer, the driver query.

:class:`CudaApi` is the interface; :class:`PycudaApi` (pycuda on the device's primary context) and
:class:`TorchCudaApi` (torch CUDA tensors and a torch stream) implement it, and :func:`cuda_api` picks pycuda
when installed, else torch. :meth:`CudaApi.time_ms` is latopt's one CUDA-event timer (TensorRT engines and
torch on CUDA); :func:`driver_version` is latopt's one ``nvidia-smi`` query. pycuda and torch are imported
when an API is opened, never at import.
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import subprocess
import weakref
from typing import Any

import numpy as np

from latopt.errors import LatoptError, first_line

# What a missing GPU tells the user to do instead (``param="device"``: the device profile chose the GPU).
CPU_INSTEAD = "time on the CPU with the device profile 'cpu'"


class CudaApi:
    """The few CUDA operations the GPU runners need: buffers, one stream, copies, events.

    Subclasses set ``stream`` and implement the buffer operations plus ``_event`` / ``_elapsed_ms``;
    :meth:`time_ms` is the one CUDA-event timer of latopt (TensorRT engines and torch on CUDA). A runner on
    the API registers itself (:meth:`track`); ``close`` closes the runners still open before it lets go of
    the GPU (:meth:`close_runners`), so their engines and buffers are freed while the context exists."""

    name = "none"
    device_index = 0
    stream: Any = None
    _runners: weakref.WeakSet[Any] | None = None

    def track(self, runner: Any) -> None:
        """Have :meth:`close_runners` close ``runner`` (held weakly: a runner dropped earlier is freed as usual)."""
        if self._runners is None:
            self._runners = weakref.WeakSet()
        self._runners.add(runner)

    def close_runners(self) -> None:
        """Close every tracked runner that is still open (its TensorRT objects, then its buffers)."""
        runners, self._runners = list(self._runners or ()), None
        for runner in runners:
            runner.close()

    # implemented by the subclasses
    def device_name(self) -> str:
        raise NotImplementedError

    def compute_capability(self) -> tuple[int, int]:
        raise NotImplementedError

    def alloc(self, shape: tuple[int, ...], dtype: np.dtype) -> Any: ...
    def free(self, buf: Any) -> None: ...

    def ptr(self, buf: Any) -> int:
        raise NotImplementedError

    def stream_handle(self) -> int:
        raise NotImplementedError

    def htod(self, buf: Any, host: np.ndarray) -> None: ...

    def dtoh(self, buf: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        raise NotImplementedError

    def synchronize(self) -> None: ...
    def driver_version(self) -> str | None: ...
    def close(self) -> None: ...
    def _event(self) -> Any: ...

    def _elapsed_ms(self, start: Any, end: Any) -> float:
        raise NotImplementedError

    def time_ms(self, fn: Any) -> float:
        """GPU time (ms) of the work ``fn`` queues on :attr:`stream`: one CUDA event pair recorded on the
        stream around the call, then a wait for the end event."""
        start, end = self._event(), self._event()
        start.record(self.stream)
        fn()
        end.record(self.stream)
        end.synchronize()
        return float(self._elapsed_ms(start, end))


class PycudaApi(CudaApi):
    """pycuda on the device's primary context (shared with the CUDA runtime that TensorRT uses).

    The context is pushed here and popped by :meth:`close`, which also runs at interpreter exit (``atexit``)
    when the owner never called it: pycuda aborts the interpreter ("context stack was not empty upon module
    cleanup", exit code 134) when a pushed context is left behind. ``close`` first closes the runners still
    open on it: at exit they would otherwise be destroyed after the pop, TensorRT freeing its memory without
    a context. ``close`` is idempotent."""

    name = "pycuda"

    def __init__(self, device_index: int = 0) -> None:
        import pycuda.driver as cuda

        self.cuda = cuda
        cuda.init()
        if cuda.Device.count() <= device_index:
            raise LatoptError(f"no CUDA GPU with index {device_index} is visible (pycuda sees {cuda.Device.count()}); "
                              f"{CPU_INSTEAD}", param="device")
        self.device_index = device_index
        self.device = cuda.Device(device_index)
        self.ctx = self.device.retain_primary_context()
        self.ctx.push()
        atexit.register(self.close)  # pops the context even when the owner never closes it
        self.stream = cuda.Stream()
        self._allocs: list[Any] = []

    def device_name(self) -> str:
        return str(self.device.name())

    def compute_capability(self) -> tuple[int, int]:
        major, minor = self.device.compute_capability()
        return int(major), int(minor)

    def alloc(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        nbytes = max(1, int(np.prod(shape)) * np.dtype(dtype).itemsize)
        buf = self.cuda.mem_alloc(nbytes)
        self._allocs.append(buf)
        return buf

    def free(self, buf: Any) -> None:
        if buf in self._allocs:
            self._allocs.remove(buf)
            buf.free()

    def ptr(self, buf: Any) -> int:
        return int(buf)

    def stream_handle(self) -> int:
        return int(self.stream.handle)

    # Copies are synchronous (pycuda's *_async copies want page-locked host memory); they are never timed.
    def htod(self, buf: Any, host: np.ndarray) -> None:
        self.stream.synchronize()
        self.cuda.memcpy_htod(buf, np.ascontiguousarray(host))

    def dtoh(self, buf: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        self.stream.synchronize()
        out = np.empty(shape, dtype)
        self.cuda.memcpy_dtoh(out, buf)
        return out

    def synchronize(self) -> None:
        self.stream.synchronize()

    def _event(self) -> Any:
        return self.cuda.Event()

    def _elapsed_ms(self, start: Any, end: Any) -> float:
        return float(end.time_since(start))  # pycuda: end.time_since(start) is in milliseconds

    def driver_version(self) -> str | None:
        return driver_version(self.device_index) or f"CUDA driver API {self.cuda.get_driver_version()}"

    def close(self) -> None:
        """Close the open runners, free the buffers, pop and release the context (idempotent; also registered
        with ``atexit``)."""
        ctx, self.ctx = self.ctx, None
        if ctx is None:
            return
        atexit.unregister(self.close)
        try:
            self.close_runners()  # while the context is current
            self.stream.synchronize()
            for buf in self._allocs:
                buf.free()
            self._allocs.clear()
        finally:  # the context is popped even when a pending CUDA error surfaces above
            self.cuda.Context.pop()
            ctx.detach()


class TorchCudaApi(CudaApi):
    """torch CUDA tensors as buffers and a torch stream; used when pycuda is not installed.

    GPU ``device_index`` is the current CUDA device while the API is open (TensorRT allocates on the current
    device) and :meth:`close` makes the one current before it current again: a process that trains on
    cuda:0 and timed on cuda:1 goes on asking cuda:0 (``is_bf16_supported``, NCCL's object collectives)."""

    name = "torch"

    def __init__(self, device_index: int = 0) -> None:
        import torch

        if not torch.cuda.is_available():
            raise LatoptError(f"no CUDA GPU is visible (torch.cuda.is_available() is False); {CPU_INSTEAD}",
                              param="device")
        if torch.cuda.device_count() <= device_index:
            raise LatoptError(f"no CUDA GPU with index {device_index} is visible (torch sees "
                              f"{torch.cuda.device_count()}); {CPU_INSTEAD}", param="device")
        self.torch = torch
        self.device_index = device_index
        self.device = torch.device("cuda", device_index)
        self._current = contextlib.ExitStack()  # restores the previously current device on close()
        self._current.enter_context(torch.cuda.device(self.device))
        try:
            self.stream = torch.cuda.Stream(device=self.device)
        except BaseException:
            self._current.close()
            raise

    def device_name(self) -> str:
        return str(self.torch.cuda.get_device_name(self.device_index))

    def compute_capability(self) -> tuple[int, int]:
        major, minor = self.torch.cuda.get_device_capability(self.device_index)
        return int(major), int(minor)

    def alloc(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        tdtype = self.torch.from_numpy(np.empty(0, dtype=dtype)).dtype
        return self.torch.empty(tuple(shape), dtype=tdtype, device=self.device)

    def free(self, buf: Any) -> None:
        del buf  # the caching allocator reclaims it once the last reference is gone

    def ptr(self, buf: Any) -> int:
        return int(buf.data_ptr())

    def stream_handle(self) -> int:
        return int(self.stream.cuda_stream)

    def htod(self, buf: Any, host: np.ndarray) -> None:
        with self.torch.cuda.stream(self.stream):
            buf.copy_(self.torch.from_numpy(np.ascontiguousarray(host)).reshape(buf.shape))

    def dtoh(self, buf: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        self.stream.synchronize()
        return buf.detach().cpu().numpy().reshape(shape).astype(dtype, copy=False)

    def synchronize(self) -> None:
        self.stream.synchronize()

    def _event(self) -> Any:
        return self.torch.cuda.Event(enable_timing=True)

    def _elapsed_ms(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end))

    def driver_version(self) -> str | None:
        return driver_version(self.device_index)

    def close(self) -> None:
        """Close the open runners, wait for the stream, make the previously current device current again
        (idempotent)."""
        try:
            self.close_runners()
            self.stream.synchronize()
        finally:
            self._current.close()


def cuda_api(device_index: int = 0) -> CudaApi:
    """pycuda when installed, else torch CUDA; LatoptError (one line) when neither gives a GPU."""
    try:
        import pycuda.driver as pycuda_driver
    except ImportError:
        pass
    else:
        try:
            return PycudaApi(device_index)
        except pycuda_driver.Error as e:  # the base of pycuda's errors (cuInit, no device, out of memory)
            raise LatoptError(f"no usable CUDA GPU ({type(e).__name__}: {first_line(e)}); {CPU_INSTEAD}",
                              param="device") from None
    try:
        import torch  # noqa: F401
    except ImportError:
        raise LatoptError(
            "TensorRT needs pycuda or torch (with CUDA) to hold its buffers: pip install pycuda"
        ) from None
    return TorchCudaApi(device_index)


def driver_version(index: int) -> str | None:
    """The NVIDIA driver version of GPU ``index`` as ``nvidia-smi`` reports it; None without nvidia-smi."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader", "-i", str(index)],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out or None
