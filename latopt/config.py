"""Run configuration: frozen, validated pydantic models read from YAML and written back, resolved, with every run.

A config file has the sections below; every key is optional (defaults shown by ``dump_config``), an
unknown section or key, a value of the wrong type or an invalid value is a :class:`LatoptError` naming
the key. ``overrides`` take dotted keys (``{"fold.lambda_c": 0.5}``) and are validated the same way.

.. code-block:: yaml

    name: quickstart              # runs/<name>/ is the default output directory (letters, digits, . _ -)
    model:  {name: mobilenetv2_050, pretrained: false}
    data:   {task: digits, resolution: 32, batch_size: 64, workers: null, pin_memory: null,
             persistent_workers: null, augment: false, split_seed: 0, train_samples: null, max_samples: null}
    train:  {epochs: 30, optimizer: adamw, lr: 0.003, momentum: 0.9, weight_decay: 0.0001,
             schedule: cosine, warmup_epochs: 0, step_size: 10, gamma: 0.1, label_smoothing: 0.0,
             clip_grad: null, keep_best: true, device: auto, amp: none, channels_last: null,
             sync_bn: true, dist_timeout_s: 600}
    fold:   {lambda_c: 1.0, tau: 0.9, p: 2.0, granularity: block, alpha_lr: 0.05, epochs: 8, lr: 0.001,
             distill: none, distill_weight: 0.5, temperature: 2.0, mode: exact, post_epochs: 4,
             post_lr: 0.0005, unfolded_alpha: zero, max_fold_error: 0.001}
    search: {lambda_c: [0.05, 5.0], tau: [0.7, 0.95], p: [1.5, 4.0], granularity: [block],
             trials: 20, max_acc_drop: 0.01, sampler: auto, storage: null}
    method: dp                    # what the search stage runs: a registered method (latopt.methods): dp | layerfold
    dp:     {budgets: [0.5, 0.6, 0.7, 0.8, 0.9], importance: proxy, variants: null, budget_rounds: 3,
             refine: 2, refine_epochs: 12}
    device: cpu                   # device profile: a name (profiles/<name>.yaml or shipped) or a path
    lut: null                     # latency LUT (JSON) giving c_l; null = uniform c_l = 1
    threads: null                 # torch intra-op threads for train/fold (null = torch's default)

A config is given by path, or by the name of one shipped inside the package (``latopt/configs/``:
``quickstart``, ``digits_clutter``, ``fashion_mnist``, ``mobilenetv2_100``, ``efficientnet_lite0``); see :func:`config_path`.

Public API: :class:`RunConfig` (+ section classes), :func:`load_config`, :func:`config_path`, :func:`config_from_dict`,
:func:`dump_config`, :func:`write_config`, :func:`validate_fold_params`, :func:`check_resolution` (the
input resolution bound, ``RESOLUTION_RANGE``, shared by every stage that takes a ``resolution``).

The config's sections are :class:`~latopt.files.records.StrictModel` records, validated by
:func:`latopt.files.records.validated` (one line naming the key: ``config key 'fold.tau' must be in (0, 1], got 1.5``).
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, model_validator

from latopt.constants import (
    MAX_BUDGET_ROUNDS,
    MAX_REFINE,
    MAX_THREADS,
    RESOLUTION_RANGE,
    TRAIN_DEVICES,
    Amp,
    FoldMode,
    Granularity,
    Importance,
    Optimizer,
    Sampler,
    Schedule,
    UnfoldedAlpha,
)
from latopt.counts import MAX_LOADER_WORKERS, MAX_TRIALS
from latopt.errors import LatoptError
from latopt.files.artifacts import check_name, write_text_atomic
from latopt.files.readers import read_yaml
from latopt.files.records import (
    DistillName,
    Name,
    Normalize,
    Positive,
    Resolution,
    SplitSeed,
    StrictModel,
    validated,
)
from latopt.log import get_logger

_LOG = get_logger("config")

# the shipped run configs (package data); a real directory: pip installs latopt as files, and a run records
# its config's path
SHIPPED_CONFIGS = Path(str(resources.files("latopt") / "configs"))


# ------------------------------------------------------------------------- the run config's field types
def _list_to_tuple(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v  # YAML gives lists; the frozen records hold tuples


def _pair(v: Any) -> Any:
    if isinstance(v, (list, tuple)) and len(v) == 2:
        return tuple(v)
    raise ValueError(f"must have 2 values [lo, hi], got {v!r}")


def _ordered(v: tuple[float, float]) -> tuple[float, float]:
    if v[0] > v[1]:
        raise ValueError(f"= {list(v)} has lo > hi; swap the bounds")
    return v


def _train_device(v: str) -> str:
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", v):
        raise ValueError(f"must be one of {', '.join(TRAIN_DEVICES)} (N: a GPU index), got {v!r}")
    return v


TrainDevice = Annotated[str, AfterValidator(_train_device)]
LambdaC = Annotated[float, Field(ge=0)]           # weight of the compression loss
Tau = Annotated[float, Field(gt=0, le=1)]         # fold an activation when alpha >= tau
Power = Annotated[float, Field(gt=1)]             # q = alpha ** p
# a range [lo, hi] (a YAML list) with lo <= hi and both ends of one type (its bounds)
LogRange = Annotated[tuple[Positive, Positive], BeforeValidator(_pair), AfterValidator(_ordered)]
TauRange = Annotated[tuple[Tau, Tau], BeforeValidator(_pair), AfterValidator(_ordered)]
PowerRange = Annotated[tuple[Power, Power], BeforeValidator(_pair), AfterValidator(_ordered)]


# ---------------------------------------------------------------------------------- run config
class Section(StrictModel):
    """A run-config section: every key optional, strings non-empty."""

    model_config = ConfigDict(str_min_length=1)


class ModelConfig(Section):
    name: str = "mobilenetv2_050"  # a name of latopt.nets.models.SUPPORTED; width is part of the name
    pretrained: bool = False  # start base training from pretrained weights (needs them cached offline)
    weights: str | None = None  # start base training from this latopt checkpoint (latopt import makes one of a weights file)


class DataConfig(Section):
    task: str = "digits"  # digits | digits-clutter | fashion-mnist[:PATH] | fashion-mnist-mini | mnist[:PATH] | imagefolder:PATH | cifar10:PATH
    resolution: Resolution = 32
    batch_size: Annotated[int, Field(ge=1)] = 64  # the global batch: under torchrun each of W processes takes 1/W
    # DataLoader worker processes per training process, pinned memory, workers kept across epochs;
    # null = automatic (latopt.training.accel: no workers on the CPU; on CUDA min(8, cores per process - 1), pinned, kept)
    workers: Annotated[int, Field(ge=0, le=MAX_LOADER_WORKERS)] | None = None
    pin_memory: bool | None = None
    persistent_workers: bool | None = None
    augment: bool = False  # random shifts (digits) / random crop + flip (fashion-mnist, mnist, cifar10) / random-resized-crop + flip (image folders)
    split_seed: SplitSeed = 0  # fixes the train/val/test split (independent of --seed, so base and fold agree)
    train_samples: Annotated[int, Field(ge=1)] | None = None  # a seeded subset of the training split (val, test whole)
    max_samples: Annotated[int, Field(ge=1)] | None = None  # cap every split at this many samples (smoke runs)
    # the input normalisation: task (each task's own) | imagenet | inception ([-1, 1]) | {mean: [3], std: [3]} of
    # [0, 1] pixels; null = what the starting checkpoint (model.weights) records, else task
    normalize: Normalize | None = None


class TrainConfig(Section):
    epochs: Annotated[int, Field(ge=0)] = 30
    optimizer: Optimizer = "adamw"
    lr: Positive = 0.003
    momentum: Annotated[float, Field(ge=0, lt=1)] = 0.9
    weight_decay: Annotated[float, Field(ge=0)] = 1e-4
    schedule: Schedule = "cosine"
    warmup_epochs: Annotated[int, Field(ge=0)] = 0  # linear LR warm-up (also used by pre-fold / post-fold)
    step_size: Annotated[int, Field(ge=1)] = 10  # epochs between LR drops (schedule: step)
    gamma: Annotated[float, Field(gt=0, le=1)] = 0.1
    label_smoothing: Annotated[float, Field(ge=0, lt=1)] = 0.0
    clip_grad: Positive | None = None  # clip the global gradient norm to this (null: no clipping)
    keep_best: bool = True  # end on the weights of the best-validation epoch (not the last one)
    # where and how train / fold / search trials train (latopt.training.accel)
    device: TrainDevice = "auto"  # auto | cpu | cuda | cuda:N; auto = CUDA when torch sees a GPU, else the CPU
    amp: Amp = "none"  # mixed precision: none | bf16 | fp16 (fp16: CUDA only, with a GradScaler)
    # NHWC weights and batches; null = on for the CPU (measured faster there: README, tools/bench_train.py), off on CUDA
    channels_last: bool | None = None
    sync_bn: bool = True  # under torchrun: batch norm over the global batch (off: per-process statistics)
    dist_timeout_s: Annotated[int, Field(ge=1)] = 600  # under torchrun: a collective waiting longer fails the run


class FoldConfig(Section):
    lambda_c: LambdaC = 1.0  # weight of the compression loss L_c
    tau: Tau = 0.9  # fold an activation when alpha >= tau
    p: Power = 2.0  # q = alpha ** p
    granularity: Granularity = "block"  # block: one alpha per MBConv block; activation: one per activation
    alpha_lr: Positive = 0.05  # learning rate of the alphas (Adam, own optimizer)
    epochs: Annotated[int, Field(ge=1)] = 8  # pre-fold epochs
    lr: Annotated[float, Field(ge=0)] = 0.001  # weight learning rate during pre-fold
    # distil from the base in every fine-tune: none | logits (KL on the logits) | a variant latopt.training.losses registers
    # (checked there: latopt.training.losses.check_loss_config); true / false read as logits / none
    distill: DistillName = "none"
    distill_weight: Annotated[float, Field(ge=0, le=1)] = 0.5
    temperature: Positive = 2.0
    mode: FoldMode = "exact"  # exact: bias map at the config resolution; paper: constant bias, any size
    post_epochs: Annotated[int, Field(ge=0)] = 4  # post-fold fine-tune epochs
    post_lr: Annotated[float, Field(ge=0)] = 0.0005
    unfolded_alpha: UnfoldedAlpha = "zero"  # zero: alphas of blocks left unfolded go back to 0 (plain activation)
    max_fold_error: Positive = 1e-3  # exact mode: max |folded - linearised| / max |linearised| allowed


class SearchConfig(Section):
    """The searched ranges (``latopt.search`` samples them as they are: this is their one check)."""

    lambda_c: LogRange = (0.05, 5.0)  # sampled log-uniformly
    tau: TauRange = (0.7, 0.95)
    p: PowerRange = (1.5, 4.0)
    granularity: Annotated[tuple[Granularity, ...], BeforeValidator(_list_to_tuple), Field(min_length=1)] = ("block",)
    trials: Annotated[int, Field(ge=1, le=MAX_TRIALS)] = 20
    max_acc_drop: Annotated[float, Field(ge=0, le=1)] = 0.01  # feasible when base - finetuned accuracy <= this
    sampler: Sampler = "auto"  # auto: grid for at most GRID_TRIALS trials (latopt.methods.layerfold), else tpe
    storage: str | None = None  # Optuna storage URL; null = runs/<name>/search/study.db

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        if isinstance(data, dict) and "budget_rounds" in data:
            raise ValueError("has budget_rounds, which is the DP's setting now: write it as dp.budget_rounds")
        return data


def _once(v: tuple[float, ...]) -> tuple[float, ...]:
    if len(set(v)) != len(v):
        raise ValueError(f"= {list(v)} gives a budget twice; give each budget once, e.g. [0.5, 0.7, 0.9]")
    return v


Budget = Annotated[float, Field(gt=0, le=1)]   # a fraction of the as-is LUT latency


class DPConfig(Section):
    """The DP's settings (``method: dp``, ``latopt plan``): one trial per budget, how each (block, variant) is
    scored, the variants blocks may take, and the budget loop."""

    budgets: Annotated[tuple[Budget, ...], BeforeValidator(_list_to_tuple), Field(min_length=1),
                       AfterValidator(_once)] = (0.5, 0.6, 0.7, 0.8, 0.9)
    importance: Importance = "proxy"  # proxy (validation loss of the variant alone) | finetune | uniform
    # the variants the blocks may take (null: every variant the LUT timed)
    variants: Annotated[tuple[str, ...], BeforeValidator(_list_to_tuple), Field(min_length=1)] | None = None
    # plans measured on the device and re-solved until one meets its budget when measured (latopt.dp.budgetloop); 0 = off
    budget_rounds: Annotated[int, Field(ge=0, le=MAX_BUDGET_ROUNDS)] = 3
    # successive halving: the `refine` fastest candidates within reach of the constraint are made again with
    # `refine_epochs` epochs of fine-tuning (instead of fold.post_epochs) before they are confirmed; 0 = none
    refine: Annotated[int, Field(ge=0, le=MAX_REFINE)] = 2
    refine_epochs: Annotated[int, Field(ge=1)] = 12


SECTIONS = ("model", "data", "train", "fold", "search", "dp")


class RunConfig(Section):
    name: Name = "run"
    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    train: TrainConfig = TrainConfig()
    fold: FoldConfig = FoldConfig()
    search: SearchConfig = SearchConfig()
    method: str = "dp"  # the search stage's method, a name of latopt.methods' registry (checked there)
    dp: DPConfig = DPConfig()
    device: str = "cpu"  # device profile name, or a path to one
    lut: str | None = None
    threads: Annotated[int, Field(ge=1, le=MAX_THREADS)] | None = None  # torch intra-op threads for train/fold; null = torch's default

    @model_validator(mode="before")
    @classmethod
    def _empty_sections(cls, data: Any) -> Any:  # `fold:` with nothing under it is an empty section
        if isinstance(data, dict):
            return {k: ({} if v is None and k in SECTIONS else v) for k, v in data.items()}
        return data

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
        loaded = read_yaml(path, what="config file")
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise LatoptError(f"config file {path} must be a YAML mapping of sections, got {type(loaded).__name__}")
        raw = loaded
        if "name" not in raw:  # the run is named after the file unless the config names it
            check_name(path.stem, f"config file {path} has no 'name:' key, and its file name")
            raw["name"] = path.stem
        _LOG.debug(f"run config {path}")
    return config_from_dict(_merge(raw, overrides or {}))


def config_from_dict(raw: dict[str, Any]) -> RunConfig:
    """Build and validate a :class:`RunConfig` from plain data (as YAML gives it)."""
    return validated(RunConfig, raw)


def dump_config(cfg: RunConfig) -> dict[str, Any]:
    """Plain-data form of ``cfg`` (tuples become lists), suitable for YAML/JSON; ``load_config`` reads it back."""
    return cfg.model_dump(mode="json")


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


def check_resolution(value: Any, what: str, *, param: str | None = None) -> int:
    """``value`` as an input resolution in ``RESOLUTION_RANGE``; a one-line LatoptError naming ``what`` (the
    parameter, e.g. ``"resolution"``, or where the value came from) otherwise, carrying ``param`` (the parameter
    the caller took it as, for the CLI to name its flag)."""
    lo, hi = RESOLUTION_RANGE
    if isinstance(value, bool) or not isinstance(value, int):
        raise LatoptError(f"{what} must be an integer in [{lo}, {hi}], got {value!r}", param=param)
    if value < lo:
        raise LatoptError(f"{what} {value} is too small; use {lo} .. {hi} (e.g. 224)", param=param)
    if value > hi:
        raise LatoptError(f"{what} {value} is too large; use {lo} .. {hi} (e.g. 224)", param=param)
    return value


def validate_fold_params(lambda_c: float, tau: float, p: float) -> None:
    """The Layer Folding hyper-parameter domain (``fold.lambda_c``, ``fold.tau``, ``fold.p``): lambda_c >= 0,
    tau in (0, 1], p > 1."""
    validated(FoldConfig, {"lambda_c": lambda_c, "tau": tau, "p": p}, key="fold parameter")


__all__ = [
    "RESOLUTION_RANGE",
    "DPConfig",
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
