"""Timing backends: one registry, each backend's name written once, in its own module.

Public API::

    register_backend(profile_cls, words=...)   the decorator on a backend module's ``create(profile)``: registers
                                              the backend named by ``profile_cls``'s ``backend`` field, with its
                                              profile record (the YAML keys it reads) and the device-name words
                                              that announce it
    backend_spec(name) -> BackendSpec         the registered backend ``name`` (LatoptError naming the known ones)
    backend_names() -> tuple[str, ...]        every registered backend
    get_backend(profile: DeviceProfile) -> Backend
    Backend (Protocol): name; prepare(model | onnx_path, input_shape) -> TimedRunner; environment() -> dict;
                        close() (optional)
    TimedRunner (Protocol): __call__() one synchronised inference on a fixed input; run(x) -> np.ndarray;
                        close(); optional time_ms() -> float (the device's own timer, e.g. CUDA events)

    gpu_matches(live, expected) -> bool       the one rule for a profile's ``expected_gpu``
    require_gpu(profile, live, alternative)   LatoptError when the live GPU does not match it

A backend is a module of this package (or the ``backend`` module of a sub-package, as ``tensorrt/``): it
defines its profile record, a :class:`latopt.latency.devices.DeviceProfile` with ``backend: Literal[NAME]`` and
its own keys, and decorates its ``create(profile)`` with :func:`register_backend`. The registry imports the
backend modules the first time it is asked (none imports onnxruntime-gpu, tensorrt or CUDA at module level,
so importing latopt never needs them: the tensorrt backend imports ``tensorrt`` inside ``create``). ``create``
raises a one-line LatoptError when the library, the GPU or the GPU model is missing or wrong; the torch and
TensorRT backends check the GPU model (``expected_gpu``) with :func:`require_gpu`. Adding a backend: one
module here, a shipped profile in ``latopt/profiles/`` if it has one, its tests.
"""

from __future__ import annotations

import fnmatch
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel

from latopt.errors import LatoptError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np


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


@dataclass(frozen=True)
class BackendSpec:
    """One registered backend: its name, its profile record (the keys its devices' YAML files take), the words of
    a device name that announce it, and the function that opens it for a profile."""

    name: str
    profile: type[BaseModel]   # a latopt.latency.devices.DeviceProfile (not imported here: devices imports this)
    words: tuple[str, ...]
    create: Callable[[Any], Backend]


_REGISTRY: dict[str, BackendSpec] = {}
_LOADED = False
C = TypeVar("C", bound=Callable[..., Any])


def register_backend(profile: type[BaseModel], *, words: tuple[str, ...] = ()) -> Callable[[C], C]:
    """Register the decorated ``create(profile)`` as the backend ``profile.backend`` names (its ``Literal``
    default); ``words`` announce it in a device name (``trt`` in ``gpu-trt-fp16``)."""
    name = profile.model_fields["backend"].default

    def deco(create: C) -> C:
        if name in _REGISTRY and _REGISTRY[name].create is not create:
            raise RuntimeError(f"backend {name!r} registered twice")
        _REGISTRY[name] = BackendSpec(name, profile, (name, *words), create)
        return create

    return deco


def _load() -> None:
    """Import every backend module once (their decorators fill the registry)."""
    global _LOADED
    if _LOADED:
        return
    for m in pkgutil.iter_modules(__path__):
        if not m.name.startswith("_"):
            importlib.import_module(f"{__name__}.{m.name}{'.backend' if m.ispkg else ''}")
    _LOADED = True


def backend_names() -> tuple[str, ...]:
    """The registered backends' names, sorted."""
    _load()
    return tuple(sorted(_REGISTRY))


def backend_spec(name: str, *, where: str = "") -> BackendSpec:
    """The registered backend ``name``; a one-line LatoptError naming the known ones otherwise."""
    _load()
    spec = _REGISTRY.get(name)
    if spec is None:
        raise LatoptError(f"{where}unknown backend {name!r}; choose one of {', '.join(backend_names())}")
    return spec


def get_backend(profile: Any) -> Backend:
    """The backend that times on ``profile``'s device (LatoptError if it cannot run here)."""
    return backend_spec(profile.backend, where=f"device {profile.name!r}: ").create(profile)


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
