"""Device profiles: one YAML file per target (schema in ``latopt/profiles/README.md``).

Public API::

    DeviceProfile                     frozen, validated record, one field per YAML key: the device's, and the
                                      timing keys of :class:`latopt.latency.timing.TimingPolicy`, which it extends
    load_device(name_or_path) -> DeviceProfile   "cpu" → profiles/cpu.yaml, else the shipped cpu.yaml;
                                      or a path to a .yaml file
    list_devices() -> list[str]       names of the added and the shipped profiles
    profiles_dir() -> Path            the user's profiles directory: $LATOPT_PROFILES_DIR, else ./profiles
    SHIPPED_PROFILES                  the profiles shipped inside the package (``latopt/profiles/``)

A device NAME is looked up as ``NAME.yaml`` in :func:`profiles_dir` (relative to the working directory),
then among the shipped profiles, so a user adds a device (or replaces a shipped one) by putting a YAML
file there, or passes the file's path. Measured LUTs are written to ``profiles_dir()/<device>/`` too
(:func:`latopt.latency.lut.default_lut_path`), never into the installed package. A variant of a profile:
``profile.model_copy(update={"precision": "fp16"})``.

Checks beyond each key's type and range (one error line naming the file): a name must not announce what the
profile does not measure (:data:`NAME_WORDS`: ``cpu-int8`` with ``precision: fp32`` would file fp32 LUTs as
the INT8 device's); ``options`` takes only the keys its backend reads (:data:`BACKEND_OPTIONS`); a profile
found by device name must carry that name (``profiles/cpu.yaml`` is device ``cpu``).
"""

from __future__ import annotations

import os
import re
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, model_validator

from latopt.constants import MAX_BATCH, MAX_THREADS, Backend, Precision
from latopt.errors import LatoptError
from latopt.files.readers import read_yaml
from latopt.files.records import Name, validated
from latopt.latency.timing import TimingPolicy
from latopt.log import get_logger
from latopt.runtime.runner import existing_file

if TYPE_CHECKING:  # annotations only (importlib.resources.abc is Python >= 3.11)
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

_LOG = get_logger("profile")

MAX_WORKSPACE_MIB = 1 << 20  # TensorRT builder workspace (1 TiB; shipped: 1024 MiB)

# What each backend reads from a profile's ``options`` (none reads any yet): any other key is refused.
BACKEND_OPTIONS: dict[str, tuple[str, ...]] = {"onnxruntime": (), "tensorrt": (), "torch": (), "count": ()}

# Words of a device name (split at "-", "_", ".") that say what the profile measures, as the shipped names
# do (cpu, cpu-int8, cpu-torch, gpu-torch, gpu-trt-fp16): a name with one must agree with the profile's
# fields. word -> (field, value); "place" is "gpu" for a GPU profile (DeviceProfile.is_gpu), else "cpu".
NAME_WORDS: dict[str, tuple[str, str]] = {
    "fp32": ("precision", "fp32"), "fp16": ("precision", "fp16"), "int8": ("precision", "int8"),
    "ort": ("backend", "onnxruntime"), "onnxruntime": ("backend", "onnxruntime"),
    "trt": ("backend", "tensorrt"), "tensorrt": ("backend", "tensorrt"),
    "torch": ("backend", "torch"), "pytorch": ("backend", "torch"),
    "cpu": ("place", "cpu"), "gpu": ("place", "gpu"), "cuda": ("place", "gpu"),
}


class DeviceProfile(TimingPolicy):
    """One latency target. Times are measured with ``backend`` at ``precision`` and ``batch``.

    Repeat policy: the fields of :class:`~latopt.latency.timing.TimingPolicy` (``warmup`` calls per runner,
    then interleaved rounds until at least ``min_repeats`` rounds are done and every median moved less than
    ``stable_rel`` between two checks, or ``max_repeats`` rounds or ``budget_s`` seconds are reached; the
    ``clock`` and ``warm_calls``), flat keys of the same YAML file with the same defaults.
    """

    name: Name  # names profiles/<name>/ (the device's LUTs) and runs/<run>/lut-<name>.json
    description: str = ""
    backend: Backend = "onnxruntime"
    provider: str | None = None  # ONNX Runtime execution provider (default CPUExecutionProvider)
    cuda_device: Annotated[int, Field(ge=0)] | None = None  # CUDA device index for GPU backends
    precision: Precision = "fp32"
    batch: Annotated[int, Field(ge=1, le=MAX_BATCH)] = 1
    threads: Annotated[int, Field(ge=1, le=MAX_THREADS)] = 1  # intra-op threads (ONNX Runtime) / torch.set_num_threads on CPU
    expected_gpu: str | None = None  # GPU name the live device must match (substring or glob)
    workspace_mib: Annotated[int, Field(ge=1, le=MAX_WORKSPACE_MIB)] | None = None  # TensorRT builder workspace limit
    options: dict[str, Any] = {}  # backend-specific extras: the keys of BACKEND_OPTIONS[backend] only
    # backend count (a device-blind cost model, latency/backends/count.py): what it counts instead of timing
    count: Literal["macs", "params", "layers"] | None = None
    path: str | None = None  # the YAML file it came from (set by load_device, not a YAML key)

    @model_validator(mode="after")
    def _consistent(self) -> DeviceProfile:
        if self.clock == "thread" and (self.threads != 1 or self.is_gpu):
            raise ValueError("clock: thread measures the calling thread's CPU time, so it needs threads: 1 on a "
                             "CPU backend")
        if (self.backend == "count") != (self.count is not None):
            raise ValueError("key 'count' (macs, params or layers) goes with backend: count, and only with it")
        known = BACKEND_OPTIONS[self.backend]
        unknown = [k for k in self.options if k not in known]
        if unknown:
            raise ValueError(f"unknown option {unknown[0]!r} for backend {self.backend}; known: "
                             + (", ".join(known) or f"none (the {self.backend} backend reads no options)"))
        have = {"precision": self.precision, "backend": self.backend, "place": "gpu" if self.is_gpu else "cpu"}
        for word in re.split(r"[-_.]", self.name.lower()):
            field, value = NAME_WORDS.get(word, ("", ""))
            if field and have[field] != value:
                what = (f"runs on the {'GPU' if self.is_gpu else 'CPU'}" if field == "place"
                        else f"has {field}: {have[field]}")
                said = f"the {value.upper()}" if field == "place" else f"{field} {value}"
                raise ValueError(f"key 'name' = {self.name!r} says {said}, but the profile {what}: its LUTs "
                                 "would be filed as what they are not; rename the device or fix the key")
        return self

    @property
    def is_gpu(self) -> bool:
        return self.backend == "tensorrt" or self.cuda_device is not None or (
            self.provider is not None and self.provider != "CPUExecutionProvider")


# read through importlib.resources: the YAML files are package data (pyproject.toml's package-data)
SHIPPED_PROFILES: Traversable = resources.files("latopt") / "profiles"


def profiles_dir() -> Path:
    """The user's profiles directory: ``$LATOPT_PROFILES_DIR``, else ``profiles`` in the working directory.

    Device YAML files found here come before the shipped ones; measured LUTs are written here."""
    return Path(os.environ.get("LATOPT_PROFILES_DIR") or "profiles")


def _profile_file(name: str) -> Traversable | None:
    for d in (profiles_dir(), SHIPPED_PROFILES):
        f = d / f"{name}.yaml"
        if f.is_file():
            return f
    return None


def list_devices() -> list[str]:
    """Names of the profiles in :func:`profiles_dir` and of the shipped ones."""
    names: set[str] = set()
    for d in (profiles_dir(), SHIPPED_PROFILES):
        if d.is_dir():
            names.update(f.name[:-len(".yaml")] for f in d.iterdir() if f.name.endswith(".yaml") and f.is_file())
    return sorted(names)


def load_device(name_or_path: str | os.PathLike[str]) -> DeviceProfile:
    """Load the device ``name`` (``profiles/<name>.yaml``, else the shipped one) or a YAML file given by path;
    LatoptError lists the known devices."""
    s = str(name_or_path)
    path: Traversable | None
    by_name = not (s.endswith((".yaml", ".yml")) or os.sep in s)
    if not by_name:
        path = existing_file(s, "device profile")  # a directory is named one, not "does not exist"
    else:
        path = _profile_file(s)
        if path is None:
            known = ", ".join(list_devices()) or "(none)"
            raise LatoptError(f"unknown device {s!r}; known devices: {known} "
                              f"(or add {s}.yaml to {profiles_dir()}/, or pass a YAML path)")
    data = read_yaml(Path(str(path)), what="device profile")  # a file of the installed package or one given
    if not isinstance(data, dict):
        raise LatoptError(f"device profile {path} must be a YAML mapping")
    if "path" in data:
        raise LatoptError(f"device profile {path}: unknown key 'path' (latopt records the file's own path)")
    _LOG.debug(f"device profile {s!r}: {path}")
    profile = validated(DeviceProfile, {**data, "path": str(path)}, prefix=f"device profile {path}: ", key="key")
    if by_name and profile.name != s:
        raise LatoptError(f"device profile {path} has name {profile.name!r}, not {s!r}, the device it was found as: "
                          f"LUTs are filed under a profile's name; set name: {s}, or give the file's path")
    return profile
