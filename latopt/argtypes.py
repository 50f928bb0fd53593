"""The public API's argument check (``latopt.<call>``, :mod:`latopt`): each argument against its parameter's
annotation, before the call runs, so that a wrong type is one :class:`~latopt.errors.LatoptError` line naming
the parameter, what it takes and what it got, never an AttributeError from deep inside (``train_base({...})``,
``load_config(name, [(key, value)])``) nor a value taken silently (``run_dp(budget='0.6')``).

What is checked: ``str``, ``bool``, ``int`` (not a bool), ``float`` (an int or float, not a bool), ``Path``
and ``os.PathLike`` (a path-like object), ``None``, unions of them, classes (``RunConfig``, ``LUT``,
``DeviceProfile``, ``nn.Module``, ...: an instance), mappings, sequences and iterables (the container, not its
items; a string is not an iterable of names). ``Any``, literals and what the annotation cannot name are left to
the call itself.

Public API::

    checked(func, name=None) -> func'   ``func`` with its arguments checked (``__wrapped__`` is ``func``)
"""

from __future__ import annotations

import collections.abc as abc
import functools
import inspect
import numbers
import os
import sys
import types
import typing
from collections.abc import Callable
from pathlib import PurePath
from typing import Any

from latopt.errors import LatoptError

# how a caller makes an object of a class the API takes
_HOW = {"RunConfig": "latopt.load_config(...)", "LUT": "latopt.load_lut(...) or latopt.profile_model(...)",
        "DeviceProfile": "latopt.load_device(...)", "Task": "latopt.data.load_task(cfg)"}


def _hints(func: Callable[..., Any]) -> dict[str, Any]:
    """``func``'s parameter annotations, evaluated; one that cannot be (a name imported for type checkers only)
    is left out: not checked."""
    module = sys.modules.get(func.__module__)
    names = dict(vars(module)) if module is not None else {}
    out: dict[str, Any] = {}
    for name, p in inspect.signature(func).parameters.items():
        ann = p.annotation
        if ann is inspect.Parameter.empty:
            continue
        if isinstance(ann, str):
            try:
                ann = eval(ann, names)  # noqa: S307 - the package's own annotations
            except Exception:
                continue
        out[name] = ann
    return out


def _fits(value: Any, hint: Any) -> bool:
    """``value`` is of type ``hint`` (module docstring: what is checked, the rest passes)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, h) for h in typing.get_args(hint))
    if hint is None or hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint in (os.PathLike, PurePath) or (isinstance(hint, type) and issubclass(hint, PurePath)) \
            or origin is os.PathLike:
        return isinstance(value, os.PathLike)
    if origin is not None and isinstance(origin, type):   # dict[...], Mapping[...], Iterable[...], tuple[...]
        if isinstance(value, str) and origin in (abc.Iterable, abc.Sequence, list, tuple):
            return False   # a string is not a list of names
        return isinstance(value, origin)
    if isinstance(hint, type) and hint not in (object, Any):
        return isinstance(value, hint)
    return True   # Any, a Literal, a TypeVar: the call checks


def _name(hint: Any) -> str:
    """``hint`` in words: "a str, a Path or None"."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        parts = [_name(h) for h in typing.get_args(hint)]
        return ", ".join(parts[:-1]) + f" or {parts[-1]}" if len(parts) > 1 else parts[0]
    if hint is None or hint is type(None):
        return "None"
    args = typing.get_args(hint)
    if origin in (abc.Iterable, abc.Sequence, list, tuple) and args:
        return f"a list of {_name(args[0]).split(' ', 1)[1]}"
    if origin is not None:
        hint = origin
    name = getattr(hint, "__name__", str(hint))
    how = f" ({_HOW[name]})" if name in _HOW else ""
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}{how}"


def _got(value: Any) -> str:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return f"{type(value).__name__} {shown}"


def checked(func: Callable[..., Any], name: str | None = None) -> Callable[..., Any]:
    """``func`` whose arguments are checked against its annotations (module docstring) before it runs; a wrong
    one is a LatoptError naming the call (``name``, default its own), the parameter, what it takes and what it
    got."""
    sig = inspect.signature(func)
    called = name or func.__name__
    hints: dict[str, Any] | None = None

    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        nonlocal hints
        if hints is None:
            hints = _hints(func)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise LatoptError(f"{called}(): {e}; its parameters are {sig}") from None
        for arg, value in bound.arguments.items():
            hint = hints.get(arg)
            kind = sig.parameters[arg].kind
            if hint is None or kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                continue
            if not _fits(value, hint):
                raise LatoptError(f"{called}(): {arg} must be {_name(hint)}, got {_got(value)}", param=arg)
        return func(*args, **kwargs)

    return call
