"""Device-blind cost models as devices: a "clock" that counts instead of timing.

A profile with ``backend: count`` and ``count: macs | params | layers`` (the shipped ``flops``, ``params`` and
``uniform`` devices) is profiled like any device (``latopt profile --device flops``): every part and every
calibration network is "timed" by its count, so the LUT, c_l, the DP, ``export --fold auto`` and the search take
it unchanged; what they print and record of it is labelled with the count's unit (:func:`unit`: e.g. "M
multiply-adds"), never as measured milliseconds. This is what a FLOPs-budgeted method does: it optimises a count, not the device. The counts, in
the LUT's ``ms`` fields:

- ``macs``: multiply-adds of one forward at the part's input shape, in millions
  (:func:`latopt.nets.models.count_flops`, torch's FlopCounterMode, divided by 2);
- ``params``: parameters, in millions (a fold that multiplies kernels out can have more than the block);
- ``layers``: convolution and linear layers, 1 each: every layer costs the same (a depth count; uniform c_l).

Each runner counts once when it is prepared; a call does nothing and :meth:`CountRunner.time_ms` returns the
count, so the interleaved timing loop (:func:`latopt.latency.timing.compare`) records it exactly, with no spread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
import torch
from pydantic import AfterValidator
from torch import nn

from latopt.errors import LatoptError
from latopt.latency.backends import register_backend
from latopt.latency.devices import DeviceProfile
from latopt.latency.timing import environment_info
from latopt.nets.models import count_flops


@dataclass(frozen=True)
class CostModel:
    """One thing a count device counts: its name (the profile's ``count``), its unit in full (the LUT's
    environment) and as printed beside its figures (never "ms": a count is not a time), and the count."""

    name: str
    unit: str
    short_unit: str
    measure: Callable[[nn.Module, tuple[int, ...]], float]


COST_MODELS: dict[str, CostModel] = {m.name: m for m in (
    CostModel("macs", "million multiply-adds", "M multiply-adds",
              lambda module, shape: count_flops(module, shape) / 2 / 1e6),
    CostModel("params", "million parameters", "M parameters",
              lambda module, shape: sum(p.numel() for p in module.parameters()) / 1e6),
    CostModel("layers", "convolution/linear layers", "layers",
              lambda module, shape: float(sum(isinstance(m, (nn.Conv2d, nn.Linear)) for m in module.modules()))),
)}
COST_UNITS = "cost units"   # a count LUT that does not say what it counts


def _known_count(name: str) -> str:
    if name not in COST_MODELS:
        raise ValueError(f"must be one of {', '.join(COST_MODELS)}, got {name!r}")
    return name


class CountProfile(DeviceProfile):
    """A device-blind cost model as a device: ``count`` names what it counts (:data:`COST_MODELS`)."""

    backend: Literal["count"] = "count"
    count: Annotated[str, AfterValidator(_known_count)]


def unit(backend: str, what: str | None = None) -> str:
    """The unit of a device's or a LUT's figures (its ``ms`` fields): ``ms`` when its backend times, else the
    count's (its short unit, or :data:`COST_UNITS` when the count is not known)."""
    if backend != "count":
        return "ms"
    model = COST_MODELS.get(what or "")
    return model.short_unit if model else COST_UNITS


def lut_unit(lut: Any) -> str:
    """The unit of a LUT's figures (a count device's LUT records its count in ``environment``)."""
    return unit(lut.backend, lut.environment.get("count"))


def count(module: nn.Module, input_shape: tuple[int, ...], what: str) -> float:
    """``what`` (:data:`COST_MODELS`) of ``module`` run on one input of ``input_shape``, in the LUT's unit."""
    model = COST_MODELS.get(what)
    if model is None:
        raise LatoptError(f"unknown count {what!r}; choose one of {', '.join(COST_MODELS)}", param="count")
    return model.measure(module, tuple(input_shape))


class CountRunner:
    """A part counted once; ``time_ms()`` is its count, a call does nothing."""

    def __init__(self, module: nn.Module, input_shape: tuple[int, ...], what: str) -> None:
        self.module = module.eval()
        self.input_shape = tuple(int(s) for s in input_shape)
        self.value = count(self.module, self.input_shape, what)

    def __call__(self) -> None:
        return None

    def time_ms(self) -> float:
        return self.value

    @torch.inference_mode()
    def run(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.module(torch.from_numpy(np.asarray(x, dtype=np.float32))).numpy())

    def close(self) -> None:
        return None


class CountBackend:
    def __init__(self, profile: CountProfile) -> None:
        self.profile = profile
        self.name = "count"

    def prepare(self, model: Any, input_shape: tuple[int, ...]) -> CountRunner:
        if not isinstance(model, nn.Module):
            raise LatoptError(f"device {self.profile.name!r} counts PyTorch modules, not {type(model).__name__}: "
                              "give it a model, not an exported file", param="device")
        return CountRunner(model, input_shape, self.profile.count)

    def environment(self) -> dict[str, Any]:
        env = environment_info()
        env.update({"backend": self.name, "count": self.profile.count, "unit": COST_MODELS[self.profile.count].unit,
                    "torch": torch.__version__})
        return env


@register_backend(CountProfile)
def create(profile: CountProfile) -> CountBackend:
    return CountBackend(profile)
