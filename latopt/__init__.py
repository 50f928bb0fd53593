"""latopt: a hardware-aware latency optimizer for mobile CNNs (Layer Folding + device LUTs).

The public Python API is the handful of calls in ``__all__`` (docs/api.md: what each is for, and a runnable
example): the package's own functions, re-exported from their documented homes (``_API`` below) and
imported on first use (PEP 562), so ``import latopt`` loads none of torch, timm or ONNX and the ``latopt``
command starts fast. Each call's arguments are checked against its annotations at this entry point
(:func:`latopt.argtypes.checked`: a wrong type is one LatoptError line; ``__wrapped__`` is the home function). ``export_model`` is :func:`latopt.export.export` (``latopt.export`` is the export
package). The exact tools for ReLU MLPs are the ``exact`` extra's (:mod:`latopt.exact`), not in this list.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (2 ms); type checkers read the name alike

__version__ = "0.1.0"

# public name -> (module, attribute there)
_API: dict[str, tuple[str, str]] = {
    "load_config": ("latopt.config", "load_config"),
    "train_base": ("latopt.training.base_training", "train_base"),
    "load_device": ("latopt.latency.devices", "load_device"),
    "profile_model": ("latopt.latency.profiler", "profile_model"),
    "save_lut": ("latopt.latency.lut", "save_lut"),
    "load_lut": ("latopt.latency.lut", "load_lut"),
    "run_fold": ("latopt.layerfold", "run_fold"),
    "run_dp": ("latopt.dp", "run_dp"),
    "export_model": ("latopt.export", "export"),
    "load_checkpoint": ("latopt.files.checkpoint", "load_checkpoint"),
    "import_weights": ("latopt.files.weights_import", "import_weights"),
    "LatoptError": ("latopt.errors", "LatoptError"),
    "VerificationError": ("latopt.errors", "VerificationError"),
}

__all__ = [  # _API's names (tests/test_public_api.py checks that the two agree)
    "__version__",
    "load_config",
    "train_base",
    "load_device",
    "profile_model",
    "save_lut",
    "load_lut",
    "run_fold",
    "run_dp",
    "export_model",
    "load_checkpoint",
    "import_weights",
    "LatoptError",
    "VerificationError",
]

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ imports on first use
    from typing import Any

    from latopt.config import load_config
    from latopt.dp import run_dp
    from latopt.errors import LatoptError, VerificationError
    from latopt.export import export as export_model
    from latopt.files.checkpoint import load_checkpoint
    from latopt.files.weights_import import import_weights
    from latopt.latency.devices import load_device
    from latopt.latency.lut import load_lut, save_lut
    from latopt.latency.profiler import profile_model
    from latopt.layerfold import run_fold
    from latopt.training.base_training import train_base


def __getattr__(name: str) -> Any:
    try:
        module, attr = _API[name]
    except KeyError:
        raise AttributeError(f"module 'latopt' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    if not isinstance(value, type):   # a call: its arguments checked at this entry point (one LatoptError line)
        value = importlib.import_module("latopt.argtypes").checked(value, name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
