"""Device profiles: one YAML file per target (schema in ``latopt/profiles/README.md``).

Public API::

    DeviceProfile                     frozen dataclass, one field per YAML key
    load_device(name_or_path) -> DeviceProfile   "cpu" → profiles/cpu.yaml, else the shipped cpu.yaml;
                                      or a path to a .yaml file
    list_devices() -> list[str]       names of the added and the shipped profiles
    profiles_dir() -> Path            the user's profiles directory: $LATOPT_PROFILES_DIR, else ./profiles
    SHIPPED_PROFILES                  the profiles shipped inside the package (``latopt/profiles/``)

A device NAME is looked up as ``NAME.yaml`` in :func:`profiles_dir` (relative to the working directory),
then among the shipped profiles, so a user adds a device (or replaces a shipped one) by putting a YAML
file there, or passes the file's path. Measured LUTs are written to ``profiles_dir()/<device>/`` too
(:func:`latopt.latency.lut.default_lut_path`), never into the installed package.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from latopt.artifacts import check_name
from latopt.constants import BACKENDS, PRECISIONS
from latopt.errors import LatoptError, first_line

if TYPE_CHECKING:  # annotations only (importlib.resources.abc is Python >= 3.11)
    from importlib.resources.abc import Traversable


@dataclass(frozen=True)
class DeviceProfile:
    """One latency target. Times are measured with ``backend`` at ``precision`` and ``batch``.

    Repeat policy (see :mod:`latopt.latency.timing`): ``warmup`` calls per runner, then interleaved rounds
    until at least ``min_repeats`` rounds are done and every median moved less than ``stable_rel``
    between two checks, or ``max_repeats`` rounds or ``budget_s`` seconds are reached.
    """

    name: str
    description: str = ""
    backend: str = "onnxruntime"
    provider: str | None = None  # ONNX Runtime execution provider (default CPUExecutionProvider)
    cuda_device: int | None = None  # CUDA device index for GPU backends
    precision: str = "fp32"
    batch: int = 1
    threads: int = 1  # intra-op threads (ONNX Runtime) / torch.set_num_threads on CPU
    warmup: int = 10
    min_repeats: int = 30
    max_repeats: int = 300
    budget_s: float = 30.0
    stable_rel: float = 0.01
    warm_calls: int = 1  # untimed calls of a runner right before each of its timed calls (0 = cold)
    clock: str = "wall"  # "wall" (host clock) or "thread" (CPU time of the one inference thread; see timing.py)
    expected_gpu: str | None = None  # GPU name the live device must match (substring or glob)
    workspace_mib: int | None = None  # TensorRT builder workspace limit
    options: dict[str, Any] = field(default_factory=dict)  # backend-specific extras
    path: str | None = None  # the YAML file it came from

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
    names = set()
    for d in (profiles_dir(), SHIPPED_PROFILES):
        if d.is_dir():
            names.update(f.name[:-len(".yaml")] for f in d.iterdir() if f.name.endswith(".yaml") and f.is_file())
    return sorted(names)


def _check(cond: bool, path: Traversable, msg: str) -> None:
    if not cond:
        raise LatoptError(f"device profile {path}: {msg}")


def _from_dict(data: dict[str, Any], path: Traversable) -> DeviceProfile:
    known = {f.name for f in dataclasses.fields(DeviceProfile)} - {"path"}
    unknown = sorted(set(data) - known)
    _check(not unknown, path, f"unknown key(s) {unknown}; valid keys: {sorted(known)}")
    _check("name" in data, path, "missing 'name'")
    kw = dict(data)
    try:  # it names profiles/<name>/ (the device's LUTs) and runs/<run>/lut-<name>.json
        check_name(kw["name"], "name")
    except LatoptError as e:
        raise LatoptError(f"device profile {path}: {e}") from None
    _check(kw.get("backend", "onnxruntime") in BACKENDS, path,
           f"backend {kw.get('backend')!r} is not one of {BACKENDS}")
    _check(kw.get("precision", "fp32") in PRECISIONS, path,
           f"precision {kw.get('precision')!r} is not one of {PRECISIONS}")
    for key in ("batch", "threads", "warmup", "warm_calls", "min_repeats", "max_repeats"):
        if key in kw:
            v = kw[key]
            _check(isinstance(v, int) and not isinstance(v, bool) and v >= (0 if key in ("warmup", "warm_calls") else 1),
                   path, f"{key} must be a positive integer, not {v!r}")
    for key in ("budget_s", "stable_rel"):
        if key in kw:
            v = kw[key]
            _check(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0, path,
                   f"{key} must be a positive number, not {v!r}")
            kw[key] = float(v)
    _check(kw.get("clock", "wall") in ("wall", "thread"), path, f"clock must be 'wall' or 'thread', not {kw.get('clock')!r}")
    _check(kw.get("clock", "wall") != "thread" or (kw.get("threads", 1) == 1 and kw.get("cuda_device") is None
                                                   and kw.get("backend") != "tensorrt"), path,
           "clock: thread measures the calling thread's CPU time, so it needs threads: 1 on a CPU backend")
    _check(kw.get("min_repeats", 30) <= kw.get("max_repeats", 300), path, "min_repeats > max_repeats")
    if kw.get("cuda_device") is not None:
        _check(isinstance(kw["cuda_device"], int) and kw["cuda_device"] >= 0, path,
               f"cuda_device must be a non-negative integer, not {kw['cuda_device']!r}")
    _check(isinstance(kw.get("options", {}), dict), path, "options must be a mapping")
    return DeviceProfile(**kw, path=str(path))


def load_device(name_or_path: str | os.PathLike[str]) -> DeviceProfile:
    """Load the device ``name`` (``profiles/<name>.yaml``, else the shipped one) or a YAML file given by path;
    LatoptError lists the known devices."""

    s = str(name_or_path)
    path: Traversable | None
    if s.endswith((".yaml", ".yml")) or os.sep in s:
        path = Path(s)
        if not path.is_file():
            raise LatoptError(f"device profile {path} does not exist")
    else:
        path = _profile_file(s)
        if path is None:
            known = ", ".join(list_devices()) or "(none)"
            raise LatoptError(f"unknown device {s!r}; known devices: {known} "
                              f"(or add {s}.yaml to {profiles_dir()}/, or pass a YAML path)")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise LatoptError(f"device profile {path} is not valid YAML: {first_line(e)}") from None
    if not isinstance(data, dict):
        raise LatoptError(f"device profile {path} must be a YAML mapping")
    return _from_dict(data, path)
