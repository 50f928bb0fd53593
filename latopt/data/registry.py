"""The task registry: a task spec (``data.task`` in the config, ``--data`` on the command line) names a
registered task, ``NAME`` for a bundled one or ``NAME:PATH`` for one read from a directory.

A task module registers its factory with :func:`register_task`; :func:`get_task` looks the spec's name up
and calls it, and a name that is not registered is refused with one line listing the registered ones. A
factory is called as ``build(spec, root, resolution, seed, augment)``: ``root`` is the spec's directory
(``~`` expanded) for a directory task, None for a bundled one (and for a task whose PATH is optional,
``directory=None``, when the spec gives none: ``fashion-mnist`` or ``fashion-mnist:PATH``); it returns a
:class:`~latopt.data.task.Task` named ``spec``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from latopt.config import RunConfig
from latopt.data.normalize import config_norm, renormalize
from latopt.data.task import Task, limit_task, subsample_train
from latopt.errors import LatoptError

TaskFactory = Callable[[str, Path | None, int, int, bool], Task]


@dataclass(frozen=True)
class TaskEntry:
    """A registered task: its name, its factory, and whether its spec is ``NAME:PATH`` (True), ``NAME`` (False) or
    either (None: the task has a default place)."""

    name: str
    build: TaskFactory
    directory: bool | None = False

    @property
    def form(self) -> str:
        """How a spec of this task is written: ``digits``, ``imagefolder:PATH``, ``fashion-mnist[:PATH]``."""
        return {True: f"{self.name}:PATH", None: f"{self.name}[:PATH]"}.get(self.directory, self.name)


TASKS: dict[str, TaskEntry] = {}  # name -> entry, in registration order


def register_task(name: str, *, directory: bool | None = False) -> Callable[[TaskFactory], TaskFactory]:
    """Decorator registering ``build`` as the factory of task ``name`` (``directory``: specs are ``name:PATH``;
    None: ``name`` or ``name:PATH``)."""
    if not name or ":" in name or name in TASKS:
        raise ValueError(f"task name {name!r} is empty, holds ':' or is registered already")

    def add(build: TaskFactory) -> TaskFactory:
        TASKS[name] = TaskEntry(name, build, directory)
        return build

    return add


def task_forms() -> str:
    """The registered tasks as their specs are written, comma-separated (for error lines and help)."""
    return ", ".join(e.form for e in TASKS.values())


def task_root(spec: str) -> Path | None:
    """The directory a directory task's spec names (``imagefolder:PATH`` -> PATH, ``~`` expanded); None for a
    bundled task or a spec that names no registered directory task."""
    kind, sep, path = spec.partition(":")
    entry = TASKS.get(kind)
    return Path(path).expanduser() if sep and path and entry and entry.directory is not False else None


def get_task(spec: str, resolution: int, seed: int = 0, *, augment: bool = False) -> Task:
    """Build the task named by ``spec`` at ``resolution``; ``seed`` fixes the split (and clutter)."""
    if not isinstance(spec, str) or not spec:
        raise LatoptError(f"data task must be one of {task_forms()}", param="spec")
    kind, sep, path = spec.partition(":")
    entry = TASKS.get(kind)
    if entry is None or (entry.directory is not None and bool(sep) != entry.directory):
        raise LatoptError(f"unknown data task {spec!r}; choose one of {task_forms()}", param="spec")
    if entry.directory is not False and sep and not path:
        raise LatoptError(f"data task {spec!r} needs a directory: {entry.form}", param="spec")
    return entry.build(spec, task_root(spec), resolution, seed, augment)


def load_task(cfg: RunConfig) -> Task:
    """The task of a run config (``data`` section): split, resolution, augmentation, normalisation
    (:func:`~latopt.data.normalize.config_norm`), ``train_samples`` (a seeded subset of the training split),
    ``max_samples`` (every split cut)."""
    d = cfg.data
    task = renormalize(get_task(d.task, d.resolution, d.split_seed, augment=d.augment), config_norm(cfg))
    return limit_task(subsample_train(task, d.train_samples, d.split_seed), d.max_samples)
