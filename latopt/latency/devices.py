"""Device profiles: one YAML file per target (schema in ``latopt/profiles/README.md``).

Public API::

    DeviceProfile                     frozen, validated record of the keys every device has: the device's, and
                                      the timing keys of :class:`latopt.latency.timing.TimingPolicy`, which it
                                      extends; each backend's subclass adds the keys it reads (its module in
                                      :mod:`latopt.latency.backends`: ``provider``, ``cuda_device``, ...)
    make_profile(data, prefix=...) -> DeviceProfile   the backend's record for YAML-like ``data``
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
the INT8 device's; a backend's words are its own, :class:`latopt.latency.backends.BackendSpec`); a key that
another backend reads is refused (``workspace_mib`` on an ``onnxruntime`` device); a profile found by device
name must carry that name (``profiles/cpu.yaml`` is device ``cpu``).
"""

from __future__ import annotations

import os
import re
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, model_validator

from latopt.constants import MAX_BATCH, MAX_THREADS, Precision
from latopt.errors import LatoptError
from latopt.files.readers import read_yaml
from latopt.files.records import Name, validated
from latopt.latency.backends import backend_names, backend_spec
from latopt.latency.timing import TimingPolicy
from latopt.log import get_logger
from latopt.runtime.runner import existing_file

if TYPE_CHECKING:  # annotations only (importlib.resources.abc is Python >= 3.11)
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

_LOG = get_logger("profile")

DEFAULT_BACKEND = "onnxruntime"   # a profile without ``backend``

# Words of a device name (split at "-", "_", ".") that say what the profile measures, as the shipped names
# do (cpu, cpu-int8, cpu-torch, gpu-torch, gpu-trt-fp16): a name with one must agree with the profile's
# fields. word -> (field, value); "place" is "gpu" for a GPU profile (DeviceProfile.is_gpu), else "cpu". The
# backends' words are their own (register_backend's ``words``).
NAME_WORDS: dict[str, tuple[str, str]] = {
    "fp32": ("precision", "fp32"), "fp16": ("precision", "fp16"), "int8": ("precision", "int8"),
    "cpu": ("place", "cpu"), "gpu": ("place", "gpu"), "cuda": ("place", "gpu"),
}


class DeviceProfile(TimingPolicy):
    """One latency target: the keys every device has. Times are measured with ``backend`` at ``precision`` and
    ``batch``; each backend's record (a subclass in its module) adds the keys it reads.

    Repeat policy: the fields of :class:`~latopt.latency.timing.TimingPolicy` (``warmup`` calls per runner,
    then interleaved rounds until at least ``min_repeats`` rounds are done and every median moved less than
    ``stable_rel`` between two checks, or ``max_repeats`` rounds or ``budget_s`` seconds are reached; the
    ``clock`` and ``warm_calls``), flat keys of the same YAML file with the same defaults.
    """

    name: Name  # names profiles/<name>/ (the device's LUTs) and runs/<run>/lut-<name>.json
    description: str = ""
    backend: str = DEFAULT_BACKEND   # a registered backend (its subclass narrows this to its name)
    precision: Precision = "fp32"
    batch: Annotated[int, Field(ge=1, le=MAX_BATCH)] = 1
    threads: Annotated[int, Field(ge=1, le=MAX_THREADS)] = 1  # intra-op threads (ONNX Runtime) / torch.set_num_threads on CPU
    path: str | None = None  # the YAML file it came from (set by load_device, not a YAML key)

    @property
    def is_gpu(self) -> bool:
        """Whether it times on a GPU (each backend's record says; the base: no)."""
        return False

    @model_validator(mode="after")
    def _consistent(self) -> DeviceProfile:
        if self.clock == "thread" and (self.threads != 1 or self.is_gpu):
            raise ValueError("clock: thread measures the calling thread's CPU time, so it needs threads: 1 on a "
                             "CPU backend")
        have = {"precision": self.precision, "backend": self.backend, "place": "gpu" if self.is_gpu else "cpu"}
        words = dict(NAME_WORDS)
        for b in backend_names():
            words.update({w: ("backend", b) for w in backend_spec(b).words})
        for word in re.split(r"[-_.]", self.name.lower()):
            field, value = words.get(word, ("", ""))
            if field and have[field] != value:
                what = (f"runs on the {'GPU' if self.is_gpu else 'CPU'}" if field == "place"
                        else f"has {field}: {have[field]}")
                said = f"the {value.upper()}" if field == "place" else f"{field} {value}"
                raise ValueError(f"key 'name' = {self.name!r} says {said}, but the profile {what}: its LUTs "
                                 "would be filed as what they are not; rename the device or fix the key")
        return self


def make_profile(data: dict[str, Any], *, prefix: str = "device profile: ") -> DeviceProfile:
    """The record of ``data``'s backend (``backend``, else onnxruntime) validated from ``data`` (a YAML
    mapping); a key its backend does not read is one error line naming the backend that reads it."""
    name = data.get("backend", DEFAULT_BACKEND)
    if name not in backend_names():
        raise LatoptError(f"{prefix}key 'backend' is {name!r}; choose one of {', '.join(backend_names())}")
    cls = backend_spec(name).profile
    for key in data:
        if key not in cls.model_fields:
            owners = [b for b in backend_names() if key in backend_spec(b).profile.model_fields]
            if owners:
                raise LatoptError(f"{prefix}key {key!r} is read by the {' and '.join(owners)} backend, not by "
                                  f"{name}; remove it, or set backend: {owners[0]}")
    profile = validated(cls, data, prefix=prefix, key="key")
    if not isinstance(profile, DeviceProfile):   # a backend registered with a record of another kind: a bug
        raise TypeError(f"backend {name!r}'s record {cls.__name__} is not a DeviceProfile")
    return profile


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
    profile = make_profile({**data, "path": str(path)}, prefix=f"device profile {path}: ")
    if by_name and profile.name != s:
        raise LatoptError(f"device profile {path} has name {profile.name!r}, not {s!r}, the device it was found as: "
                          f"LUTs are filed under a profile's name; set name: {s}, or give the file's path")
    return profile
