"""Timing backends behind one small interface.

Public API::

    get_backend(profile: DeviceProfile) -> Backend
    Backend (Protocol): name; prepare(model | onnx_path, input_shape) -> TimedRunner; environment() -> dict;
                        close() (optional)
    TimedRunner (Protocol): __call__() one synchronised inference on a fixed input; run(x) -> np.ndarray;
                        close(); optional time_ms() -> float (the device's own timer, e.g. CUDA events)

    gpu_matches(live, expected) -> bool       the one rule for a profile's ``expected_gpu``
    require_gpu(profile, live, alternative)   LatoptError when the live GPU does not match it

``get_backend`` imports the backend's module (:data:`BACKEND_MODULES`: ``latopt.latency.backends.<module>``)
lazily and calls its ``create(profile)``, so that importing latopt never needs onnxruntime-gpu, tensorrt or
CUDA (the tensorrt backend, ``tensorrt/backend.py`` in the package of its build steps, imports ``tensorrt``
inside ``create``). ``create`` raises a one-line LatoptError when
the library, the GPU or the GPU model is missing or wrong; the torch and TensorRT backends check the GPU
model (``expected_gpu``) with :func:`require_gpu`. ONNX Runtime's CUDA provider names no GPU model, so
``expected_gpu`` is not checked there (its provider is: a CPU fallback is refused).
"""

from __future__ import annotations

import fnmatch
import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from latopt.errors import LatoptError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from latopt.latency.devices import DeviceProfile

BACKEND_MODULES = {"onnxruntime": "onnxruntime", "tensorrt": "tensorrt.backend", "torch": "torch", "count": "count"}


@runtime_checkable
class TimedRunner(Protocol):
    def __call__(self) -> None: ...

    def run(self, x: np.ndarray) -> np.ndarray: ...

    def close(self) -> None: ...


@runtime_checkable
class Backend(Protocol):
    name: str

    def prepare(self, model: Any | str | Path, input_shape: tuple[int, ...]) -> TimedRunner: ...

    def environment(self) -> dict[str, Any]: ...


def get_backend(profile: DeviceProfile) -> Backend:
    """The backend that times on ``profile``'s device (LatoptError if it cannot run here)."""
    mod_name = BACKEND_MODULES.get(profile.backend)
    if mod_name is None:
        raise LatoptError(f"device {profile.name!r}: unknown backend {profile.backend!r}; "
                          f"choose one of {sorted(BACKEND_MODULES)}")
    mod = importlib.import_module(f"{__name__}.{mod_name}")
    return mod.create(profile)


def close_backend(backend: Any) -> None:
    close = getattr(backend, "close", None)
    if callable(close):
        close()


def gpu_matches(live: str, expected: str | None) -> bool:
    """True when a profile's ``expected_gpu`` names the live GPU ``live`` (rule in profiles/README.md).

    Case-insensitive. Empty, "any" or "*": any GPU. With a glob character (``*``, ``?``, ``[``): a glob on
    the whole name ("*RTX 40*"). Otherwise the name must contain it, "NVIDIA" and repeated spaces ignored
    ("A100" names "NVIDIA A100-SXM4-80GB"; "TITAN X (Pascal)" does not name "NVIDIA TITAN Xp").
    """
    if not expected or expected.strip().lower() in ("any", "*"):
        return True
    if any(c in expected for c in "*?["):
        return fnmatch.fnmatch(live.lower(), expected.lower())

    def norm(s: str) -> str:
        return " ".join(s.lower().replace("nvidia", " ").split())

    return norm(expected) in norm(live)


def require_gpu(profile: Any, live: str, *, alternative: str) -> None:
    """A one-line LatoptError when the live GPU ``live`` does not match ``profile.expected_gpu``;
    ``alternative`` is the shipped profile of the same backend that takes any NVIDIA GPU."""
    expected = getattr(profile, "expected_gpu", None)
    if not gpu_matches(live, expected):
        raise LatoptError(f"device profile {getattr(profile, 'name', '?')!r} expects GPU {expected!r} but this "
                          f"machine has {live!r}; use the device {alternative} (any NVIDIA GPU) or add a "
                          f"profile with expected_gpu: {live!r}", param="device")
