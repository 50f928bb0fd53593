"""Timing backends behind one small interface.

Public API::

    get_backend(profile: DeviceProfile) -> Backend
    Backend (Protocol): name; prepare(model | onnx_path, input_shape) -> Runner; environment() -> dict;
                        close() (optional)
    Runner  (Protocol): __call__() one synchronised inference on a fixed input; run(x) -> np.ndarray;
                        close(); optional time_ms() -> float (the device's own timer, e.g. CUDA events)

``get_backend`` imports ``latopt.latency.backends.<profile.backend>`` lazily and calls its
``create(profile)``; backend modules import their heavy library inside ``create`` so that importing
latopt never needs onnxruntime-gpu, tensorrt or CUDA. ``create`` raises a one-line LatoptError when the
library, the GPU or the GPU model is missing or wrong.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from latopt.errors import LatoptError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from latopt.latency.devices import DeviceProfile

BACKEND_MODULES = {"onnxruntime": "onnxruntime", "tensorrt": "tensorrt", "torch": "torch"}


@runtime_checkable
class Runner(Protocol):
    def __call__(self) -> None: ...

    def run(self, x: np.ndarray) -> np.ndarray: ...

    def close(self) -> None: ...


@runtime_checkable
class Backend(Protocol):
    name: str

    def prepare(self, model: Any | str | Path, input_shape: tuple[int, ...]) -> Runner: ...

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
