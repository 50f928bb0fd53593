"""Compression methods as registered objects: what the search stage runs (the run config's ``method:``).

Registered here: ``layerfold`` (Layer Folding, :mod:`latopt.methods.layerfold`; ``latopt search``) and ``dp``
(the budgeted DP, :mod:`latopt.methods.dp`; ``latopt plan``). A new method is a :class:`Method` subclass in a
module of this package, decorated with :func:`register` and imported below; its settings are a section of the run
config (:mod:`latopt.config`).

Public API::

    make_method(cfg, costs="lut") -> Method     the config's method, made for cfg
    get_method(name) -> type[Method]            a registered method (one line naming the registered ones otherwise)
    method_names() -> ("layerfold", "dp")
    Method, Space, TrialContext, Candidate, register   (latopt.methods.method)
"""

from latopt.methods import dp as dp
from latopt.methods import layerfold as layerfold
from latopt.methods.method import (
    METHODS,
    Candidate,
    Method,
    Space,
    TrialContext,
    get_method,
    make_method,
    method_names,
    register,
)

__all__ = ["METHODS", "Candidate", "Method", "Space", "TrialContext", "get_method", "make_method", "method_names",
           "register"]
