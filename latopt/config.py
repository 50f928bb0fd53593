"""Run configuration: frozen dataclasses read from YAML and written back, resolved, with every run.

A config file has the sections below; every key is optional (defaults shown by ``dump_config``), an
unknown section or key, a value of the wrong type or an invalid value is a :class:`LatoptError` naming
the key. ``overrides`` take dotted keys (``{"fold.lambda_c": 0.5}``) and are validated the same way.

.. code-block:: yaml

    name: quickstart              # runs/<name>/ is the default output directory (letters, digits, . _ -)
    model:  {name: mobilenetv2_050, pretrained: false}
    data:   {task: digits, resolution: 32, batch_size: 64, workers: 0, augment: false, split_seed: 0,
             max_samples: null}
    train:  {epochs: 30, optimizer: adamw, lr: 0.003, momentum: 0.9, weight_decay: 0.0001,
             schedule: cosine, warmup_epochs: 0, step_size: 10, gamma: 0.1, label_smoothing: 0.0}
    fold:   {lambda_c: 1.0, tau: 0.9, p: 2.0, granularity: block, alpha_lr: 0.05, epochs: 8, lr: 0.001,
             distill: false, distill_weight: 0.5, temperature: 2.0, mode: exact, post_epochs: 4,
             post_lr: 0.0005, unfolded_alpha: zero, max_fold_error: 0.001}
    search: {lambda_c: [0.05, 5.0], tau: [0.7, 0.95], p: [1.5, 4.0], granularity: [block],
             trials: 20, max_acc_drop: 0.01, sampler: tpe, storage: null}
    device: cpu                   # device profile: a name (profiles/<name>.yaml or shipped) or a path
    lut: null                     # latency LUT (JSON) giving c_l; null = uniform c_l = 1
    threads: null                 # torch intra-op threads for train/fold (null = torch's default)

A config is given by path, or by the name of one shipped inside the package (``latopt/configs/``:
``quickstart``, ``digits_clutter``, ``mobilenetv2_100``, ``efficientnet_lite0``); see :func:`config_path`.

Public API: :class:`RunConfig` (+ section classes), :func:`load_config`, :func:`config_path`,
:func:`config_from_dict`, :func:`dump_config`, :func:`write_config`, :func:`check_resolution` (the input
resolution bound, ``RESOLUTION_RANGE``, shared by every command that takes ``--resolution``).
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import dataclass, field, fields, is_dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from latopt.artifacts import check_name, write_text_atomic
from latopt.constants import FOLD_MODES, GRANULARITIES, OPTIMIZERS, SAMPLERS, SCHEDULES, UNFOLDED_ALPHA
from latopt.errors import LatoptError

RESOLUTION_RANGE = (8, 1024)  # input resolution R (R x R): config, export, inspect and profile share it
# the shipped run configs (package data); a real directory: pip installs latopt as files, and a run records
# its config's path
SHIPPED_CONFIGS = Path(str(resources.files("latopt") / "configs"))


@dataclass(frozen=True)
class ModelConfig:
    name: str = "mobilenetv2_050"  # a name of latopt.models.SUPPORTED; width is part of the name
    pretrained: bool = False  # start base training from pretrained weights (needs them cached offline)


@dataclass(frozen=True)
class DataConfig:
    task: str = "digits"  # digits | digits-clutter | imagefolder:PATH | cifar10:PATH
    resolution: int = 32
    batch_size: int = 64
    workers: int = 0
    augment: bool = False
    split_seed: int = 0  # fixes the train/val/test split (independent of --seed, so base and fold agree)
    max_samples: int | None = None  # cap every split at this many samples (smoke runs); null = all  # random shifts (digits) / random-resized-crop + flip (image folders)


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 30
    optimizer: str = "adamw"
    lr: float = 0.003
    momentum: float = 0.9
    weight_decay: float = 1e-4
    schedule: str = "cosine"
    warmup_epochs: int = 0  # linear LR warm-up (also used by pre-fold / post-fold)
    step_size: int = 10  # epochs between LR drops (schedule: step)
    gamma: float = 0.1
    label_smoothing: float = 0.0


@dataclass(frozen=True)
class FoldConfig:
    lambda_c: float = 1.0  # weight of the compression loss L_c
    tau: float = 0.9  # fold an activation when alpha >= tau
    p: float = 2.0  # q = alpha ** p
    granularity: str = "block"  # block: one alpha per MBConv block; activation: one per activation
    alpha_lr: float = 0.05  # learning rate of the alphas (Adam, own optimizer)
    epochs: int = 8  # pre-fold epochs
    lr: float = 0.001  # weight learning rate during pre-fold
    distill: bool = False  # add KL(base || student) on logits during pre-fold and post-fold
    distill_weight: float = 0.5
    temperature: float = 2.0
    mode: str = "exact"  # exact: bias map at the config resolution; paper: constant bias, any size
    post_epochs: int = 4  # post-fold fine-tune epochs
    post_lr: float = 0.0005
    unfolded_alpha: str = "zero"  # zero: alphas of blocks left unfolded go back to 0 (plain activation)
    max_fold_error: float = 1e-3  # exact mode: max |folded - linearised| / max |linearised| allowed


@dataclass(frozen=True)
class SearchConfig:
    lambda_c: tuple[float, float] = (0.05, 5.0)  # sampled log-uniformly
    tau: tuple[float, float] = (0.7, 0.95)
    p: tuple[float, float] = (1.5, 4.0)
    granularity: tuple[str, ...] = ("block",)
    trials: int = 20
    max_acc_drop: float = 0.01  # a trial is feasible when base - finetuned accuracy <= this
    sampler: str = "tpe"
    storage: str | None = None  # Optuna storage URL; null = runs/<name>/search/study.db


@dataclass(frozen=True)
class RunConfig:
    name: str = "run"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    fold: FoldConfig = field(default_factory=FoldConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    device: str = "cpu"
    lut: str | None = None
    threads: int | None = None  # torch intra-op threads for train/fold; null = torch's default

    def with_overrides(self, overrides: dict[str, Any]) -> RunConfig:
        """A copy with dotted-key overrides applied and validated (``None`` values are ignored)."""
        return config_from_dict(_merge(dump_config(self), overrides))


# ---------------------------------------------------------------------------------------------------
def config_path(name_or_path: str | Path) -> Path:
    """The run config file ``name_or_path`` names: an existing file, else the shipped config of that name
    (``quickstart`` → ``latopt/configs/quickstart.yaml``). LatoptError names the shipped ones."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = SHIPPED_CONFIGS / f"{path.name}.yaml"
    if path.name == str(name_or_path) and path.suffix not in (".yaml", ".yml") and shipped.is_file():
        return shipped
    names = ", ".join(sorted(p.stem for p in SHIPPED_CONFIGS.glob("*.yaml")))
    raise LatoptError(f"config file {path} does not exist (or name a shipped config: {names})")


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read a YAML run config (a path or a shipped config's name, :func:`config_path`; ``None`` = all
    defaults) and apply dotted-key ``overrides``."""
    raw: dict[str, Any] = {}
    if path is not None:
        path = config_path(path)
        try:
            loaded = yaml.safe_load(path.read_text())
        except yaml.YAMLError as e:
            where = getattr(e, "problem_mark", None)
            at = f" at line {where.line + 1}" if where is not None else ""
            raise LatoptError(f"config file {path} is not valid YAML{at}; fix its syntax") from None
        except UnicodeDecodeError:
            raise LatoptError(f"config file {path} is not a text file") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise LatoptError(f"config file {path} must be a YAML mapping of sections, got {type(loaded).__name__}")
        raw = loaded
        if "name" not in raw:  # the run is named after the file unless the config names it
            check_name(path.stem, f"config file {path} has no 'name:' key, and its file name")
            raw["name"] = path.stem
    return config_from_dict(_merge(raw, overrides or {}))


def config_from_dict(raw: dict[str, Any]) -> RunConfig:
    """Build and validate a :class:`RunConfig` from plain data (as YAML gives it)."""
    cfg = _build(RunConfig, raw, "")
    _validate(cfg)
    return cfg


def dump_config(cfg: RunConfig) -> dict[str, Any]:
    """Plain-data form of ``cfg`` (tuples become lists), suitable for YAML/JSON."""

    def plain(v: Any) -> Any:
        if is_dataclass(v) and not isinstance(v, type):
            return {f.name: plain(getattr(v, f.name)) for f in fields(v)}
        if isinstance(v, tuple):
            return [plain(x) for x in v]
        return v

    return plain(cfg)


def config_yaml(cfg: RunConfig) -> str:
    return yaml.safe_dump(dump_config(cfg), sort_keys=False, default_flow_style=False)


def write_config(cfg: RunConfig, path: str | Path) -> Path:
    """Write the resolved config as YAML (atomically)."""
    return write_text_atomic(path, config_yaml(cfg))


# ---------------------------------------------------------------------------------------------------
def _merge(raw: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    for key, value in overrides.items():
        if value is None:
            continue
        parts = key.split(".")
        node = out
        for part in parts[:-1]:
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            if not isinstance(nxt, dict):
                raise LatoptError(f"config override {key!r}: {part!r} is not a section")
            node = nxt
        node[parts[-1]] = value
    return out


def _build(cls: type, raw: Any, prefix: str) -> Any:
    where = prefix.rstrip(".") or "config"
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise LatoptError(f"config section {where!r} must be a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(map(str, raw)) - known)
    if unknown:
        raise LatoptError(
            f"unknown config key {prefix + unknown[0]!r} in {where}; known keys: {', '.join(sorted(known))}"
        )
    kwargs = {}
    for f in fields(cls):
        if f.name not in raw:
            continue
        kwargs[f.name] = _coerce(hints[f.name], raw[f.name], f"{prefix}{f.name}")
    return cls(**kwargs)


def _coerce(tp: Any, value: Any, key: str) -> Any:
    if is_dataclass(tp):
        return _build(tp, value, key + ".")
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _coerce(inner, value, key)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise LatoptError(f"config key {key!r} must be a list, got {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            if not value:
                raise LatoptError(f"config key {key!r} must not be empty")
            return tuple(_coerce(args[0], v, key) for v in value)
        if len(value) != len(args):
            raise LatoptError(f"config key {key!r} must have {len(args)} values, got {len(value)}")
        return tuple(_coerce(a, v, key) for a, v in zip(args, value, strict=True))
    if tp is bool:
        if not isinstance(value, bool):
            raise LatoptError(f"config key {key!r} must be true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise LatoptError(f"config key {key!r} must be an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise LatoptError(f"config key {key!r} must be a number, got {value!r}")
        if not math.isfinite(float(value)):
            raise LatoptError(f"config key {key!r} must be finite, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str) or not value:
            raise LatoptError(f"config key {key!r} must be a non-empty string, got {value!r}")
        return value
    raise AssertionError(f"unsupported config type {tp!r} for {key}")  # pragma: no cover


def check_resolution(value: Any, what: str) -> int:
    """``value`` as an input resolution in ``RESOLUTION_RANGE``; a one-line LatoptError naming ``what``
    (e.g. ``"--resolution"``) otherwise."""
    lo, hi = RESOLUTION_RANGE
    if isinstance(value, bool) or not isinstance(value, int):
        raise LatoptError(f"{what} must be an integer in [{lo}, {hi}], got {value!r}")
    if value < lo:
        raise LatoptError(f"{what} {value} is too small; use {lo} .. {hi} (e.g. 224)")
    if value > hi:
        raise LatoptError(f"{what} {value} is too large; use {lo} .. {hi} (e.g. 224)")
    return value


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise LatoptError(msg)


def _choice(value: str, choices: tuple[str, ...], key: str) -> None:
    _check(value in choices, f"config key {key!r} is {value!r}; choose one of {', '.join(choices)}")


def validate_fold_params(lambda_c: float, tau: float, p: float) -> None:
    """The Layer Folding hyper-parameter domain: lambda_c >= 0, tau in (0, 1], p > 1."""
    _check(lambda_c >= 0, f"lambda_c must be >= 0, got {lambda_c}")
    _check(0 < tau <= 1, f"tau must be in (0, 1], got {tau}")
    _check(p > 1, f"p must be > 1 (q = alpha**p), got {p}")


def _validate(cfg: RunConfig) -> None:
    d, t, f, s = cfg.data, cfg.train, cfg.fold, cfg.search
    check_name(cfg.name, "config key 'name' =")  # runs/<name>/ is the run directory
    _check(cfg.threads is None or cfg.threads >= 1, f"config key 'threads' must be >= 1 or null, got {cfg.threads}")
    check_resolution(d.resolution, "config key 'data.resolution'")
    _check(d.batch_size >= 1, f"config key 'data.batch_size' must be >= 1, got {d.batch_size}")
    _check(d.max_samples is None or d.max_samples >= 1,
           f"config key 'data.max_samples' must be >= 1 or null, got {d.max_samples}")
    _check(d.workers >= 0, f"config key 'data.workers' must be >= 0, got {d.workers}")
    _check(t.epochs >= 0, f"config key 'train.epochs' must be >= 0, got {t.epochs}")
    _choice(t.optimizer, OPTIMIZERS, "train.optimizer")
    _choice(t.schedule, SCHEDULES, "train.schedule")
    _check(t.lr > 0, f"config key 'train.lr' must be > 0, got {t.lr}")
    _check(0 <= t.momentum < 1, f"config key 'train.momentum' must be in [0, 1), got {t.momentum}")
    _check(t.weight_decay >= 0, f"config key 'train.weight_decay' must be >= 0, got {t.weight_decay}")
    _check(t.warmup_epochs >= 0, f"config key 'train.warmup_epochs' must be >= 0, got {t.warmup_epochs}")
    _check(t.step_size >= 1, f"config key 'train.step_size' must be >= 1, got {t.step_size}")
    _check(0 < t.gamma <= 1, f"config key 'train.gamma' must be in (0, 1], got {t.gamma}")
    _check(0 <= t.label_smoothing < 1, f"config key 'train.label_smoothing' must be in [0, 1), got {t.label_smoothing}")
    try:
        validate_fold_params(f.lambda_c, f.tau, f.p)
    except LatoptError as e:
        raise LatoptError(f"config section 'fold': {e}") from None
    _choice(f.granularity, GRANULARITIES, "fold.granularity")
    _choice(f.mode, FOLD_MODES, "fold.mode")
    _choice(f.unfolded_alpha, UNFOLDED_ALPHA, "fold.unfolded_alpha")
    _check(f.alpha_lr > 0, f"config key 'fold.alpha_lr' must be > 0, got {f.alpha_lr}")
    _check(f.lr >= 0 and f.post_lr >= 0, "config keys 'fold.lr' and 'fold.post_lr' must be >= 0")
    _check(f.epochs >= 1, f"config key 'fold.epochs' must be >= 1, got {f.epochs}")
    _check(f.post_epochs >= 0, f"config key 'fold.post_epochs' must be >= 0, got {f.post_epochs}")
    _check(0 <= f.distill_weight <= 1, f"config key 'fold.distill_weight' must be in [0, 1], got {f.distill_weight}")
    _check(f.temperature > 0, f"config key 'fold.temperature' must be > 0, got {f.temperature}")
    _check(f.max_fold_error > 0, f"config key 'fold.max_fold_error' must be > 0, got {f.max_fold_error}")
    lo, hi = s.lambda_c
    _check(0 < lo <= hi, f"config key 'search.lambda_c' must be [lo, hi] with 0 < lo <= hi (log scale), got {list(s.lambda_c)}")
    lo, hi = s.tau
    _check(0 < lo <= hi <= 1, f"config key 'search.tau' must be [lo, hi] within (0, 1], got {list(s.tau)}")
    lo, hi = s.p
    _check(1 < lo <= hi, f"config key 'search.p' must be [lo, hi] with 1 < lo <= hi, got {list(s.p)}")
    for g in s.granularity:
        _choice(g, GRANULARITIES, "search.granularity")
    _check(s.trials >= 1, f"config key 'search.trials' must be >= 1, got {s.trials}")
    _check(0 <= s.max_acc_drop <= 1, f"config key 'search.max_acc_drop' must be in [0, 1], got {s.max_acc_drop}")
    _choice(s.sampler, SAMPLERS, "search.sampler")


__all__ = [
    "RESOLUTION_RANGE",
    "DataConfig",
    "FoldConfig",
    "ModelConfig",
    "RunConfig",
    "SearchConfig",
    "TrainConfig",
    "check_resolution",
    "config_from_dict",
    "config_yaml",
    "dump_config",
    "load_config",
    "validate_fold_params",
    "write_config",
]
