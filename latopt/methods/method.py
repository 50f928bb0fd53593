"""What a compression method is to the search: a registered object that makes candidates, and the trial context
every method shares.

A method (:class:`Method`) is registered under its name (:func:`register`) and chosen by the run config's
``method:`` key (``latopt run``), by ``latopt search`` (``layerfold``) or ``latopt plan`` (``dp``). The
method-blind Optuna loop (:mod:`latopt.search`) asks it, before any training, for its search space and sampler,
the trials it runs by default, the variants its LUT must time, whether it needs a LUT, what identifies its study,
and what of the config it reads (a run's fingerprint); then, in each trial, for one candidate: a network folded
and fine-tuned from the base, written to the trial's directory (:meth:`Method.candidate`). The search evaluates
every candidate the same way (its objectives, the confirmation on held-out validation images) and picks among them
by one rule for every method (:func:`latopt.search.recommendation`).

A method instance is made per study and per worker process (:func:`make_method`): it holds the config and may
keep what its trials share in that process (the DP's importance losses).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

import optuna
from torch import nn

from latopt.config import RunConfig
from latopt.data import Task
from latopt.errors import LatoptError
from latopt.files.checkpoint import load_checkpoint
from latopt.latency.devices import load_device
from latopt.latency.lut import LUT, check_blocks, default_lut_path, load_lut
from latopt.layerfold import FoldResult
from latopt.nets.blocks import find_blocks
from latopt.nets.models import build_model


class Space(Protocol):
    """What one trial of a method samples, and how."""

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Sample one point (Optuna records the distributions in the study)."""

    def base_params(self) -> dict[str, Any]:
        """The parameters recorded for the enqueued base trial (the network as it is)."""

    def as_dict(self) -> dict[str, Any]:
        """The space as plain data (part of a study's identity)."""

    def sampler(self, seed: int, trials: int, name: str) -> optuna.samplers.BaseSampler:
        """The sampler of a study of ``trials`` trials (``name``: the config's or ``--sampler``'s)."""


@dataclass
class TrialContext:
    """What every trial of a study sees, whatever its method: the config, the base checkpoint, the task (its ``val``
    the selection part of the validation split), the study's directory, the LUT, the seed; the base network loaded
    once per process (:meth:`base_model`)."""

    cfg: RunConfig
    base_checkpoint: Path
    task: Task
    study_dir: Path
    lut: LUT | None = None
    lut_path: Path | None = None
    seed: int = 0
    progress: bool = True
    _base_model: nn.Module | None = field(default=None, repr=False)

    def base_model(self) -> nn.Module:
        """The base network (eval mode), loaded on first use; not to be modified."""
        if self._base_model is None:
            self._base_model, _, _ = load_checkpoint(self.base_checkpoint, expect_model=self.cfg.model.name)
            self._base_model.eval()
        return self._base_model


@dataclass(frozen=True)
class Candidate:
    """One candidate a method made: its fold (the network in memory, its report, the files written) and what the
    method adds to the trial's record (plain JSON values)."""

    fold: FoldResult[Any]
    attrs: dict[str, Any] = field(default_factory=dict)


class Method(ABC):
    """A compression method as the search uses it (module doc). Subclasses set :attr:`name` (the registry's key),
    :attr:`section` (the config section that is the method's own) and :attr:`does` (what its search stage does,
    one phrase), and are registered with :func:`register`."""

    name: ClassVar[str]
    section: ClassVar[str]
    does: ClassVar[str]

    def __init__(self, cfg: RunConfig, *, costs: str = "lut") -> None:
        self.cfg = cfg
        self.costs = costs   # Layer Folding's c_l: from the LUT, or 1 for every block (``latopt search --costs``)

    # ---- before any training
    @abstractmethod
    def space(self) -> Space:
        """The method's search space."""

    @abstractmethod
    def default_trials(self) -> int:
        """COMPLETE trials of a study of this method when none are asked for (the base trial included)."""

    def lut_variants(self) -> tuple[str, ...]:
        """The variants the run's profile stage times for this method (``full`` always)."""
        return ("full",)

    def needs_lut(self) -> bool:
        """Whether the method cannot run without the device's LUT."""
        return False

    def check(self, lut: LUT | None, trials: int) -> None:  # noqa: B027 (a method with nothing to refuse keeps it)
        """Refuse, in one line, what cannot run (before any training or storage)."""

    @abstractmethod
    def identity(self, lut: LUT | None) -> dict[str, Any]:
        """What makes a study of this method (besides the model, task, space, constraint and split)."""

    @abstractmethod
    def made_from(self) -> dict[str, Any]:
        """The config values the method's trials read: a run's search stage is made again when one changes, and
        only then."""

    def prepare(self, ctx: TrialContext) -> None:  # noqa: B027 (a method with nothing to share keeps it)
        """Once per study, in the process that created it, on every core, before its workers start: make what every
        trial shares (the DP's importance losses), kept in ``ctx.study_dir`` for the workers."""

    # ---- one trial
    @abstractmethod
    def candidate(self, ctx: TrialContext, params: dict[str, Any], trial_dir: Path) -> Candidate:
        """One candidate at ``params`` (sampled from :meth:`space`), folded and fine-tuned from the base,
        written to ``trial_dir`` as ``latopt fold`` writes a fold."""

    # ---- the few best, fine-tuned longer (successive halving's second rung)
    def refinements(self) -> int:
        """How many of a study's candidates are made again with a longer fine-tune, once every trial has run
        (:func:`latopt.search.run_search` picks them: the fastest within reach of the constraint); 0: none."""
        return 0

    def refine(self, ctx: TrialContext, params: dict[str, Any], trial_dir: Path) -> Candidate:
        """The candidate at ``params`` again, fine-tuned longer (only a method whose :meth:`refinements` is
        not 0 is asked)."""
        raise NotImplementedError(f"method {self.name!r} refines no candidate")


def resolve_lut(cfg: RunConfig, lut_arg: str | Path | None, *, required: bool) -> tuple[LUT | None, Path | None]:
    """The LUT for the config's device/model/resolution (``lut_arg`` > ``cfg.lut`` > the default path), checked
    against the model's blocks before any training; (None, None) when there is none and none is ``required``."""
    model, res = cfg.model.name, int(cfg.data.resolution)
    explicit = lut_arg or cfg.lut
    if explicit:
        path = Path(explicit)
    else:
        device = load_device(cfg.device)
        path = Path(default_lut_path(device.name, model, res, device.batch))
    if not path.is_file():
        if not required and not explicit:
            return None, None
        where = "given" if explicit else "expected"
        raise LatoptError(f"no latency LUT for device {cfg.device!r}, model {model}, resolution {res} ({where} at "
                          f"{path}); run: latopt profile --device {cfg.device} --model {model} --resolution {res}",
                          param="lut")
    lut = load_lut(path, model=model, resolution=res, fold_mode=cfg.fold.mode)
    check_blocks(lut, find_blocks(build_model(model, num_classes=10)), path)  # before any training
    return lut, path


M = TypeVar("M", bound=type[Method])
METHODS: dict[str, type[Method]] = {}


def register(cls: M) -> M:
    """Class decorator: register a :class:`Method` under its ``name`` (a name is registered once)."""
    if cls.name in METHODS:
        raise ValueError(f"method {cls.name!r} is registered twice")
    METHODS[cls.name] = cls
    return cls


def method_names() -> tuple[str, ...]:
    return tuple(METHODS)


def get_method(name: str) -> type[Method]:
    """The registered method ``name``; one line naming the registered ones otherwise."""
    if name not in METHODS:
        raise LatoptError(f"config key 'method': unknown method {name!r}; choose one of {', '.join(METHODS)}",
                          param="method")
    return METHODS[name]


def make_method(cfg: RunConfig, **options: Any) -> Method:
    """The config's method (``cfg.method``), made for ``cfg``."""
    return get_method(cfg.method)(cfg, **options)


