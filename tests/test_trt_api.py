"""latopt's TensorRT calls checked against the real TensorRT Python API, without a GPU.

``tests/data/tensorrt-<version>.names`` (made by ``tools/trt_api_names.py`` from the bindings wheels: every
class, method, property and enum member each version's ``tensorrt`` module has) are the reference. An AST
walk over :data:`TRT_SOURCES` collects every attribute latopt takes from the ``tensorrt`` module and from the
objects it returns, and checks that each exists in every version the code path claims:

- **Receivers.** The module object is whatever ``import tensorrt`` binds, what a function returning it gives
  (``runtime.import_tensorrt()``: found by the walk, any file), or a parameter named ``trt``. The class of
  every other object comes from the names files themselves: ``trt.Builder(...)`` is a ``Builder``,
  ``builder.create_network()`` returns what the recorded pybind11 signature says (``INetworkDefinition``),
  properties and enum members have their recorded types, ``self.x = ...`` in any method types ``self.x`` in
  all methods of the class. Parameters get a class from :data:`PARAM_TYPES` (by name, only when not
  annotated or annotated ``Any``), e.g. ``config`` → ``IBuilderConfig``.
- **Version branches.** ``if tensorrt_major(v) >= 10:`` (also a variable holding ``tensorrt_major(...)``,
  ``int(trt.__version__.split(".")[0])``, ``and``/``or``/``not``, ``in (10, 11)``) restricts its body to those
  majors and ``else`` to the rest; an ``if`` whose body ends in ``return``/``raise`` restricts the statements
  after it to the complement. Code outside any branch must work on every supported version
  (:func:`supported_apis`: the committed lists, 8.6, 10.x and 11.x).
- **Calls.** A call of a TensorRT method, function or class must fit one of the recorded pybind11 overloads
  (number of positional arguments, keyword names, required parameters).
- **Guards.** ``if hasattr(X, "NAME"):`` makes ``X.NAME`` optional inside its body.
- **Dynamic names.** ``getattr(trt.BuilderFlag, name)`` cannot be read statically: the walk reports every such
  site, and each owner must be covered by a check of the data that feeds it (:data:`DYNAMIC_COVERED`: the
  precision dispatch :data:`DISPATCH` is called for every version and precision, and its
  ``NetworkDefinitionCreationFlag`` / ``BuilderFlag`` names must be members there; on 8.x its network must be
  explicit-batch, which TensorRT 8's ONNX parser requires).

Limits: 10.x is checked against one list (10.13.3.9): a name added in 10.1–10.13 passes here but would fail on
10.0. Objects the walk cannot type (a TensorRT object passed under a name not in :data:`PARAM_TYPES`, kept in a
container, returned from a non-TensorRT function) are not checked; ``test_collector_sees_latopt_tensorrt_calls``
pins the calls it must see today.

Known misses, when any, are listed in :data:`KNOWN_MISSES` (empty since the TensorRT 8.6 path was added);
such version checks are ``xfail(strict=True, raises=KnownMisses)``: they fail loudly when the misses change in
any way, including when they are fixed (then empty the entry).
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tools import trt_api_names as names_tool

REPO = Path(__file__).resolve().parents[1]

# The files whose TensorRT use is checked (paths relative to the repository root): the runtime package and the
# TensorRT backend, a module or a package. Keep this the one list: test_every_tensorrt_user_is_scanned fails when
# another latopt module starts using TensorRT.
TRT_SOURCES: tuple[str, ...] = tuple(sorted(
    str(p.relative_to(REPO)) for pattern in ("latopt/runtime/**/*.py", "latopt/latency/backends/tensorrt.py",
                                             "latopt/latency/backends/tensorrt/**/*.py")
    for p in REPO.glob(pattern)))
PACKAGE_GLOB = "latopt/**/*.py"

# Classes of parameters by name (used only for unannotated / ``Any`` parameters).
MODULE = "<tensorrt>"
PARAM_TYPES: dict[str, str] = {
    "trt": MODULE,
    "builder": "Builder",
    "network": "INetworkDefinition",
    "config": "IBuilderConfig",
    "parser": "OnnxParser",
    "engine": "ICudaEngine",
    "context": "IExecutionContext",
    "logger": "ILogger",
    "timing_cache": "ITimingCache",
}

# The version dispatch: callable(version, precision) -> object with network_flags/set_flags/clear_flags.
DISPATCH = "latopt.latency.backends.tensorrt.precision:precision_plan"
PRECISIONS = ("fp32", "fp16")
# owner of a dynamic getattr(...) → the check that covers the names it is fed
DYNAMIC_COVERED = {
    "BuilderFlag": "DISPATCH set_flags (clear_flags are applied under hasattr) in dispatch_misses",
    "NetworkDefinitionCreationFlag": "DISPATCH network_flags in dispatch_misses",
}

# What today's code gets wrong, per names-list version: API names only (file:line is in the report), so
# that unrelated edits do not disturb the list. Empty an entry when its defects are fixed. (8.6.1 had
# "dispatch: precision_plan('8.6.1', 'fp32'|'fp16') refuses" until latopt gained its TensorRT 8.6 path.)
KNOWN_MISSES: dict[str, frozenset[str]] = {}


@functools.cache
def supported_apis() -> dict[str, Any]:
    return names_tool.load_all()


# ------------------------------------------------------------------------------------------ collector
@dataclass(frozen=True)
class Use:
    file: str
    line: int
    owner: str  # MODULE or a class name
    attr: str
    majors: frozenset[int] | None  # None: outside any version branch (every version)
    guarded: bool = False
    call: str | None = None  # a call's shape "(2 positional, flags=)": its arguments fit no overload when fits
    fits: bool | None = None  # is False

    @property
    def name(self) -> str:
        base = f"tensorrt.{self.attr}" if self.owner == MODULE else f"{self.owner}.{self.attr}"
        return base + (self.call or "")


@dataclass(frozen=True)
class Dynamic:
    file: str
    line: int
    owner: str
    guarded: bool


@dataclass(frozen=True)
class Miss:
    file: str
    line: int
    version: str
    name: str

    def __str__(self) -> str:
        what = "fits no signature" if self.name.endswith(")") else "does not exist"
        return f"{self.file}:{self.line}: {self.name} {what} in TensorRT {self.version}"


# types of expressions
@dataclass(frozen=True)
class _Mod:
    pass


@dataclass(frozen=True)
class _Cls:
    name: str


@dataclass(frozen=True)
class _Inst:
    name: str


@dataclass(frozen=True)
class _Fn:
    returns: str  # TYPE string from the names file
    entry: Any = None  # its Entry when a call's arguments can be checked (bound method, function, static)
    owner: str = MODULE


@dataclass(frozen=True)
class _Major:  # an int holding the TensorRT major version
    pass


@dataclass
class _Ctx:
    majors: frozenset[int] | None
    guards: frozenset[tuple[str, str]] = frozenset()
    dyn_guards: frozenset[str] = frozenset()


@dataclass
class Report:
    uses: list[Use] = field(default_factory=list)
    dynamic: list[Dynamic] = field(default_factory=list)
    misses: list[Miss] = field(default_factory=list)


def module_returning_functions(sources: dict[str, str]) -> set[str]:
    """Names of functions that return the tensorrt module (``def import_tensorrt(): import tensorrt as trt;
    return trt``), in any of ``sources``."""
    out: set[str] = set()
    for src in sources.values():
        for fn in ast.walk(ast.parse(src)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            bound = {a.asname or a.name for n in ast.walk(fn) if isinstance(n, ast.Import)
                     for a in n.names if a.name == "tensorrt"}
            if any(isinstance(r, ast.Return) and isinstance(r.value, ast.Name) and r.value.id in bound
                   for r in ast.walk(fn)):
                out.add(fn.name)
    return out


def _terminates(stmts: Sequence[ast.stmt]) -> bool:
    return bool(stmts) and isinstance(stmts[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))


def _call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    return None


class _Walker:
    """Types expressions of one file against one TrtApi and records every TensorRT attribute used."""

    def __init__(self, api: Any, file: str, universe: frozenset[int], mod_fns: set[str], report: Report) -> None:
        self.api, self.file, self.universe, self.mod_fns, self.report = api, file, universe, mod_fns, report
        self.recording = True

    # ---- types ---------------------------------------------------------------------------------
    def _class_type(self, name: str | None) -> Any:
        c = self.api.canonical(name) if name else None
        return _Cls(c) if c else None

    def _entry_type(self, e: Any, on_instance: bool, owner: str = MODULE) -> Any:
        if e is None:
            return None
        if e.kind == "class":
            return _Cls(e.name)
        if e.kind == "alias":
            return self._class_type(e.type)
        if e.kind in ("method", "static", "function"):
            return _Fn(e.type, e if on_instance or e.kind != "method" else None, owner)
        if e.kind == "property":
            cls = self.api.trt_class_in(e.type)
            return _Inst(cls) if cls and on_instance else None
        cls = self.api.trt_class_in(e.type)  # value
        return _Inst(cls) if cls else None

    def _use(self, owner: str, attr: str, node: ast.AST, ctx: _Ctx) -> None:
        if self.recording:
            guarded = (owner, attr) in ctx.guards
            self.report.uses.append(Use(self.file, node.lineno, owner, attr, ctx.majors, guarded))

    def attribute(self, base: Any, attr: str, node: ast.AST, ctx: _Ctx) -> Any:
        if isinstance(base, _Mod):
            self._use(MODULE, attr, node, ctx)
            return self._entry_type(self.api.get(attr), on_instance=True)
        if isinstance(base, (_Cls, _Inst)):
            self._use(base.name, attr, node, ctx)
            return self._entry_type(self.api.member(base.name, attr), isinstance(base, _Inst), base.name)
        return None

    @staticmethod
    def _owner(t: Any) -> str | None:
        return MODULE if isinstance(t, _Mod) else t.name if isinstance(t, (_Cls, _Inst)) else None

    def expr(self, node: ast.AST | None, env: dict[str, Any], ctx: _Ctx) -> Any:
        if node is None:
            return None
        if isinstance(node, ast.Name):
            return env.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.expr(node.value, env, ctx)
            if isinstance(node.value, ast.Name) and node.value.id == "self" and base is None:
                return env.get(f"self.{node.attr}")
            if node.attr == "__version__" and isinstance(base, _Mod):
                self._use(MODULE, "__version__", node, ctx)
                return None
            return self.attribute(base, node.attr, node, ctx)
        if isinstance(node, ast.Call):
            return self.call(node, env, ctx)
        for child in ast.iter_child_nodes(node):
            self.expr(child, env, ctx)
        return None

    def call(self, node: ast.Call, env: dict[str, Any], ctx: _Ctx) -> Any:
        name = _call_name(node)
        if name in ("getattr", "hasattr") and isinstance(node.func, ast.Name) and len(node.args) >= 2:
            base = self.expr(node.args[0], env, ctx)
            for a in node.args[2:]:
                self.expr(a, env, ctx)
            owner = self._owner(base)
            lit = node.args[1]
            if isinstance(lit, ast.Constant) and isinstance(lit.value, str):
                if name == "getattr":
                    return self.attribute(base, lit.value, node, ctx)
                return None  # hasattr is a check, not a use
            self.expr(lit, env, ctx)
            if owner is not None and name == "getattr" and self.recording:
                self.report.dynamic.append(Dynamic(self.file, node.lineno, owner, owner in ctx.dyn_guards))
            return None
        if name == "tensorrt_major":
            for a in node.args:
                self.expr(a, env, ctx)
            return _Major()
        if name in self.mod_fns:
            self.expr(node.func, env, ctx)
            for a in node.args:
                self.expr(a, env, ctx)
            return _Mod()
        if self._is_version_major(node, env):
            self.expr(node.args[0], env, ctx)
            return _Major()
        f = self.expr(node.func, env, ctx)
        for a in node.args:
            self.expr(a, env, ctx)
        for k in node.keywords:
            self.expr(k.value, env, ctx)
        self._check_call(f, node, ctx)
        if isinstance(f, _Cls):
            return _Inst(f.name)
        if isinstance(f, _Fn):
            cls = self.api.trt_class_in(f.returns)
            return _Inst(cls) if cls else None
        return None

    def _check_call(self, f: Any, node: ast.Call, ctx: _Ctx) -> None:
        """Record a call whose arguments fit none of the recorded overloads."""
        if isinstance(f, _Cls):
            entry, owner, attr = self.api.get(f.name), MODULE, f.name
        elif isinstance(f, _Fn) and f.entry is not None:
            entry, owner, attr = f.entry, f.owner, f.entry.name.rsplit(".", 1)[-1]
        else:
            return
        if entry is None or any(isinstance(a, ast.Starred) for a in node.args) or any(
                k.arg is None for k in node.keywords):
            return
        keywords = [k.arg for k in node.keywords]
        fits = entry.fits(len(node.args), keywords)
        if fits is False and self.recording:
            shape = f"({len(node.args)} positional" + "".join(f", {k}=" for k in keywords) + ")"
            self.report.uses.append(Use(self.file, node.lineno, owner, attr, ctx.majors,
                                        (owner, attr) in ctx.guards, shape, False))

    @staticmethod
    def _is_version_major(node: ast.Call, env: dict[str, Any]) -> bool:
        """``int(X.__version__.split(".")[0])`` with X the tensorrt module."""
        if not (isinstance(node.func, ast.Name) and node.func.id == "int" and len(node.args) == 1):
            return False
        sub = node.args[0]
        if not (isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Constant) and sub.slice.value == 0):
            return False
        call = sub.value
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "split"):
            return False
        ver = call.func.value
        return isinstance(ver, ast.Attribute) and ver.attr == "__version__" and (
            isinstance(ver.value, ast.Name) and isinstance(env.get(ver.value.id), _Mod))

    # ---- version conditions ----------------------------------------------------------------------
    def condition(self, test: ast.AST, env: dict[str, Any]) -> frozenset[int] | None:
        """The majors for which ``test`` is true, or None when it is not a version condition."""
        u = self.universe
        if isinstance(test, ast.BoolOp):
            parts = [self.condition(v, env) for v in test.values]
            known = [p for p in parts if p is not None]
            if not known:
                return None
            if isinstance(test.op, ast.And):
                out = u
                for p in known:
                    out &= p
                return out
            if len(known) != len(parts):
                return None  # "major >= 10 or something": not a restriction
            out = frozenset()
            for p in known:
                out |= p
            return out
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.condition(test.operand, env)
            return None if inner is None else u - inner
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            left, op, right = test.left, test.ops[0], test.comparators[0]
            sandbox = _Walker(self.api, self.file, u, self.mod_fns, Report())
            sandbox.recording = False
            lt = sandbox.expr(left, env, _Ctx(None))
            rt = sandbox.expr(right, env, _Ctx(None))
            if isinstance(lt, _Major) and isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
                vals = {e.value for e in right.elts if isinstance(e, ast.Constant) and isinstance(e.value, int)}
                inside = frozenset(m for m in u if m in vals)
                return inside if isinstance(op, ast.In) else u - inside
            if isinstance(rt, _Major) and isinstance(left, ast.Constant):
                left, right, lt, rt = right, left, rt, lt
                op = {ast.Lt: ast.Gt(), ast.Gt: ast.Lt(), ast.LtE: ast.GtE(), ast.GtE: ast.LtE()}.get(type(op), op)
            if isinstance(lt, _Major) and isinstance(right, ast.Constant) and isinstance(right.value, int):
                k = right.value
                fn = {ast.Lt: lambda m: m < k, ast.LtE: lambda m: m <= k, ast.Gt: lambda m: m > k,
                      ast.GtE: lambda m: m >= k, ast.Eq: lambda m: m == k, ast.NotEq: lambda m: m != k}.get(type(op))
                return frozenset(m for m in u if fn(m)) if fn else None
        return None

    def hasattr_guards(self, test: ast.AST, env: dict[str, Any]) -> tuple[set[tuple[str, str]], set[str]]:
        static, dynamic = set(), set()
        tests = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
        for t in tests:
            if _call_name(t) == "hasattr" and isinstance(t.func, ast.Name) and len(t.args) == 2:
                sandbox = _Walker(self.api, self.file, self.universe, self.mod_fns, Report())
                sandbox.recording = False
                owner = self._owner(sandbox.expr(t.args[0], env, _Ctx(None)))
                if owner is None:
                    continue
                if isinstance(t.args[1], ast.Constant) and isinstance(t.args[1].value, str):
                    static.add((owner, t.args[1].value))
                else:
                    dynamic.add(owner)
        return static, dynamic

    # ---- statements ------------------------------------------------------------------------------
    def bind(self, target: ast.AST, value_type: Any, env: dict[str, Any], self_env: dict[str, Any] | None) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value_type
        elif (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
              and self_env is not None and value_type is not None):
            self_env.setdefault(f"self.{target.attr}", value_type)
            env.setdefault(f"self.{target.attr}", value_type)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self.bind(t, None, env, self_env)

    def block(self, stmts: Sequence[ast.stmt], env: dict[str, Any], ctx: _Ctx,
              self_env: dict[str, Any] | None) -> None:
        for stmt in stmts:
            if isinstance(stmt, ast.If):
                self.expr(stmt.test, env, ctx)
                cond = self.condition(stmt.test, env)
                static, dynamic = self.hasattr_guards(stmt.test, env)
                outer = ctx.majors if ctx.majors is not None else self.universe
                body_ctx = _Ctx(outer & cond if cond is not None else ctx.majors,
                                ctx.guards | static, ctx.dyn_guards | dynamic)
                else_ctx = _Ctx(outer - cond if cond is not None else ctx.majors, ctx.guards, ctx.dyn_guards)
                self.block(stmt.body, env, body_ctx, self_env)
                self.block(stmt.orelse, env, else_ctx, self_env)
                if cond is not None and _terminates(stmt.body):
                    ctx = _Ctx(else_ctx.majors, ctx.guards, ctx.dyn_guards)
                elif cond is not None and _terminates(stmt.orelse):
                    ctx = _Ctx(body_ctx.majors, ctx.guards, ctx.dyn_guards)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                t = self.expr(stmt.value, env, ctx)
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if isinstance(stmt, ast.AugAssign):
                    continue
                for target in targets:
                    if isinstance(target, ast.Attribute):
                        self.expr(target.value, env, ctx)
                    self.bind(target, t, env, self_env)
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for a in stmt.names:
                    if isinstance(stmt, ast.Import) and a.name == "tensorrt":
                        env[a.asname or a.name] = _Mod()
                    else:
                        env[(a.asname or a.name).split(".")[0]] = None
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.function(stmt, env, ctx, self_env)
            elif isinstance(stmt, ast.ClassDef):
                self.klass(stmt, env, ctx)
            elif isinstance(stmt, (ast.For, ast.AsyncFor)):
                self.expr(stmt.iter, env, ctx)
                self.bind(stmt.target, None, env, None)
                self.block(stmt.body, env, ctx, self_env)
                self.block(stmt.orelse, env, ctx, self_env)
            elif isinstance(stmt, (ast.With, ast.AsyncWith)):
                for item in stmt.items:
                    self.expr(item.context_expr, env, ctx)
                    if item.optional_vars is not None:
                        self.bind(item.optional_vars, None, env, None)
                self.block(stmt.body, env, ctx, self_env)
            elif isinstance(stmt, ast.Try):
                self.block(stmt.body, env, ctx, self_env)
                for h in stmt.handlers:
                    self.block(h.body, env, ctx, self_env)
                self.block(stmt.orelse, env, ctx, self_env)
                self.block(stmt.finalbody, env, ctx, self_env)
            elif isinstance(stmt, ast.While):
                self.expr(stmt.test, env, ctx)
                self.block(stmt.body, env, ctx, self_env)
                self.block(stmt.orelse, env, ctx, self_env)
            else:
                for child in ast.iter_child_nodes(stmt):
                    if isinstance(child, ast.expr):
                        self.expr(child, env, ctx)

    def function(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, outer: dict[str, Any], ctx: _Ctx,
                 self_env: dict[str, Any] | None) -> None:
        env = dict(outer)
        if self_env is not None:
            env.update(self_env)
        args = fn.args
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            ann = a.annotation
            plain = ann is None or (isinstance(ann, ast.Name) and ann.id == "Any")
            cls = PARAM_TYPES.get(a.arg) if plain else None
            if cls == MODULE:
                env[a.arg] = _Mod()
            else:
                canonical = self.api.canonical(cls) if cls else None
                env[a.arg] = _Inst(canonical) if canonical else None
        for d in [*args.defaults, *args.kw_defaults]:
            self.expr(d, outer, ctx)
        self.block(fn.body, env, ctx, self_env)

    def klass(self, cls: ast.ClassDef, outer: dict[str, Any], ctx: _Ctx) -> None:
        self_env: dict[str, Any] = {}
        recording = self.recording
        self.recording = False  # first pass: learn the types of self.<attr> from every method
        self.block(cls.body, dict(outer), ctx, self_env)
        self.recording = recording
        self.block(cls.body, dict(outer), ctx, self_env)


def scan(sources: dict[str, str], apis: dict[str, Any]) -> dict[str, Report]:
    """``{version: Report}``: every TensorRT attribute used in ``sources`` ({file: text}) and what is missing."""
    universe = frozenset(a.major for a in apis.values())
    mod_fns = module_returning_functions(sources)
    out: dict[str, Report] = {}
    for version, api in apis.items():
        rep = Report()
        for file, src in sources.items():
            walker = _Walker(api, file, universe, mod_fns, rep)
            walker.block(ast.parse(src, filename=file).body, {}, _Ctx(None), None)
        for u in rep.uses:
            claimed = u.majors is None or api.major in u.majors
            if not claimed or u.guarded:
                continue
            if u.call is not None:
                exists = bool(u.fits)
            elif u.owner == MODULE:
                exists = u.attr in api.entries
            else:
                exists = api.member(u.owner, u.attr) is not None
            if not exists:
                rep.misses.append(Miss(u.file, u.line, version, u.name))
        out[version] = rep
    return out


def source_files(globs: Iterable[str] = TRT_SOURCES, root: Path = REPO) -> dict[str, str]:
    files: dict[str, str] = {}
    for g in globs:
        matched = sorted(root.glob(g))
        assert matched, f"TRT_SOURCES entry {g!r} matches no file (code moved? update TRT_SOURCES)"
        for p in matched:
            files[str(p.relative_to(root))] = p.read_text()
    return files


def dispatch_misses(api: Any) -> list[str]:
    """The precision dispatch's flag names for ``api``'s version that its BuilderFlag /
    NetworkDefinitionCreationFlag lack, plus versions it refuses (with the first line of the error)."""
    mod_name, fn_name = DISPATCH.split(":")
    plan_fn = getattr(importlib.import_module(mod_name), fn_name)
    out = []
    for precision in PRECISIONS:
        try:
            plan = plan_fn(api.version, precision)
        except Exception as e:  # LatoptError: a supported version must get a plan
            out.append((f"dispatch: {fn_name}({api.version!r}, {precision!r}) refuses", str(e).splitlines()[0]))
            continue
        for flag in plan.network_flags:
            if flag not in api.enum_members("NetworkDefinitionCreationFlag"):
                out.append((f"dispatch: NetworkDefinitionCreationFlag.{flag} ({precision})", ""))
        for flag in plan.set_flags:
            if flag not in api.enum_members("BuilderFlag"):
                out.append((f"dispatch: BuilderFlag.{flag} ({precision})", ""))
        # clear_flags are applied under hasattr(): a missing one is skipped on purpose
        if api.major < 10 and "EXPLICIT_BATCH" not in plan.network_flags:
            # TensorRT 8.x's ONNX parser needs an explicit-batch network (EXPLICIT_BATCH is implicit from 10.0)
            out.append((f"dispatch: {precision} network lacks EXPLICIT_BATCH on {api.version}", ""))
    return out


# ------------------------------------------------------------------------------------------ the lists
def test_lists_cover_supported_versions():
    apis = supported_apis()
    assert sorted(a.major for a in apis.values()) == [8, 10, 11], sorted(apis)
    for api in apis.values():
        assert len(api.entries) > 1000 and any(line.startswith("# wheel: ") for line in api.header)


def test_lists_are_well_formed():
    """Sorted, every member's owner is a class, every base and alias target is a class (no hand edits)."""
    for path in names_tool.default_names_files():
        api = names_tool.TrtApi.load(path)
        body = [x for x in path.read_text().splitlines() if x and not x.startswith("#")]
        assert body == sorted(body), path
        for e in api.entries.values():
            if "." in e.name:
                assert api.canonical(e.name.rsplit(".", 1)[0]), (path.name, e)
            if e.kind == "class" and e.type != "-":
                assert all(api.canonical(b) for b in e.type.split(",")), (path.name, e)
            if e.kind == "alias":
                assert api.canonical(e.type), (path.name, e)


def test_signature_fit():
    e = names_tool.Entry("X.f", "method", "None", None, (("a", "b="), ("c",)))
    assert e.fits(1, []) and e.fits(2, []) and e.fits(0, ["a"]) and e.fits(0, ["c"]) and e.fits(1, ["b"])
    assert not e.fits(3, []) and not e.fits(0, []) and not e.fits(1, ["a"]) and not e.fits(0, ["z"])
    assert names_tool.Entry("f", "function", "?", None, (("*args", "**kwargs"),)).fits(5, ["any"])
    assert names_tool.Entry("f", "function", "?").fits(9, []) is None  # no signature recorded


@pytest.mark.parametrize("name,present", [
    # facts from NVIDIA's Python API docs and migration guides (8.x → 10.x → 11.x)
    ("IExecutionContext.execute_async_v3", {8: True, 10: True, 11: True}),
    ("IExecutionContext.set_tensor_address", {8: True, 10: True, 11: True}),
    ("ICudaEngine.num_io_tensors", {8: True, 10: True, 11: True}),
    ("NetworkDefinitionCreationFlag.EXPLICIT_BATCH", {8: True, 10: True, 11: False}),
    ("NetworkDefinitionCreationFlag.STRONGLY_TYPED", {8: False, 10: True, 11: True}),
    ("BuilderFlag.FP16", {8: True, 10: True, 11: False}),
    ("BuilderFlag.INT8", {8: True, 10: True, 11: False}),
    ("BuilderFlag.TF32", {8: True, 10: True, 11: True}),
    ("IExecutionContext.execute_async_v2", {8: True, 10: False, 11: False}),
    ("ICudaEngine.num_bindings", {8: True, 10: False, 11: False}),
    ("IBuilderConfig.max_workspace_size", {8: True, 10: False, 11: False}),
    ("IBuilderConfig.set_memory_pool_limit", {8: True, 10: True, 11: True}),
    ("IExecutionContext.update_device_memory_size_for_shapes", {8: False, 10: True, 11: True}),
    ("IBuilderConfig.int8_calibrator", {8: True, 10: True, 11: False}),
    ("Builder.platform_has_fast_fp16", {8: True, 10: True, 11: False}),
    ("Logger.WARNING", {8: True, 10: True, 11: True}),  # set by __init__.py from ILogger.Severity
    ("nptype", {8: True, 10: True, 11: True}),
    ("ILayer.name", {8: True, 10: True, 11: True}),
    ("IConvolutionLayer.name", {8: True, 10: True, 11: True}),  # inherited from ILayer
])
def test_lists_match_documented_facts(name, present):
    for api in supported_apis().values():
        assert (name in api) is present[api.major], f"{name} in TensorRT {api.version}"


# ------------------------------------------------------------------------------------------ the collector
SAMPLE = '''
import tensorrt as trt

def tensorrt_major(v):
    return int(v.split(".")[0])

def build(onnx):
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    network.add_frobnicator()                                   # made up: every version
    config = builder.create_builder_config()
    cache = config.create_timing_cache(b"")
    config.set_timing_cache(cache)                               # ignore_mismatch missing: every version
    config.set_timing_cache(cache, ignore_mismatch=False)        # fits
    builder.create_network(flags=0)                              # fits
    if tensorrt_major(trt.__version__) >= 11:
        network.get_input(0).shape
        flags = trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH # gone in 11
    else:
        config.set_flag(trt.BuilderFlag.FP16)                    # fine on 8.6 and 10
    if hasattr(trt.BuilderFlag, "INT8"):
        config.set_flag(trt.BuilderFlag.INT8)                    # guarded
    config.set_flag(trt.BuilderFlag.FP16)                        # unguarded: missing on 11
    major = tensorrt_major(trt.__version__)
    if major < 10:
        return builder.build_engine(network, config)             # 8.x only: fine
    builder.build_engine(network, config)                        # after the early return: 10, 11
    name = "FP16"
    config.set_flag(getattr(trt.BuilderFlag, name))              # dynamic

def run_with(context, plan):
    context.execute_async_v2([], 0)                              # table-typed parameter: gone in 10

class Runner:
    def __init__(self, plan):
        self.trt = load()
        self.engine = self.trt.Runtime(trt.Logger()).deserialize_cuda_engine(plan)

    def go(self):
        return self.engine.num_bindings                          # typed through self.engine: gone in 10

def load():
    import tensorrt as t
    return t
'''


def _sample_misses() -> tuple[dict[str, set[tuple[int, str]]], dict[str, Report]]:
    reports = scan({"sample.py": SAMPLE}, supported_apis())
    return {v: {(m.line, m.name) for m in r.misses} for v, r in reports.items()}, reports


def test_collector_reports_made_up_attribute_everywhere():
    misses, _ = _sample_misses()
    line = SAMPLE.splitlines().index(next(x for x in SAMPLE.splitlines() if "add_frobnicator" in x)) + 1
    for v, got in misses.items():
        assert (line, "INetworkDefinition.add_frobnicator") in got, (v, got)


def test_collector_follows_branches_guards_and_types():
    misses, reports = _sample_misses()
    lines = SAMPLE.splitlines()

    def at(text: str) -> int:
        return next(i for i, x in enumerate(lines, 1) if text in x)

    v8, v10, v11 = sorted(misses, key=lambda v: int(v.split(".")[0]))
    everywhere = {(at("add_frobnicator"), "INetworkDefinition.add_frobnicator"),
                  (at("ignore_mismatch missing"), "IBuilderConfig.set_timing_cache(1 positional)")}
    assert misses[v8] == everywhere
    assert misses[v10] == everywhere | {
        (at("after the early return"), "Builder.build_engine"),
        (at("execute_async_v2"), "IExecutionContext.execute_async_v2"),
        (at("self.engine.num_bindings"), "ICudaEngine.num_bindings"),
    }
    assert misses[v11] == misses[v10] | {
        (at("gone in 11"), "NetworkDefinitionCreationFlag.EXPLICIT_BATCH"),
        (at("unguarded: missing on 11"), "BuilderFlag.FP16"),
    }
    (dyn,) = reports[v11].dynamic
    assert (dyn.line, dyn.owner, dyn.guarded) == (at("# dynamic"), "BuilderFlag", False)
    used = {u.name for u in reports[v11].uses}
    assert {"tensorrt.Logger", "Logger.WARNING", "Builder.create_network", "tensorrt.__version__",
            "ICudaEngine.num_bindings", "Runtime.deserialize_cuda_engine"} <= used


# ------------------------------------------------------------------------------------------ latopt itself
def test_every_tensorrt_user_is_scanned():
    """Every latopt module that touches the tensorrt module is in TRT_SOURCES (code moves between files)."""
    scanned = set(source_files())
    everything = {str(p.relative_to(REPO)): p.read_text() for p in sorted(REPO.glob(PACKAGE_GLOB))}
    mod_fns = module_returning_functions(everything)
    users = set()
    for file, src in everything.items():
        for node in ast.walk(ast.parse(src)):
            imports = isinstance(node, ast.Import) and any(a.name == "tensorrt" for a in node.names)
            imports |= isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tensorrt"
            calls = _call_name(node) in mod_fns
            named = isinstance(node, ast.arg) and node.arg == "trt"
            if imports or calls or named:
                users.add(file)
    assert users <= scanned, f"TensorRT used in {sorted(users - scanned)}: add them to TRT_SOURCES"


@functools.cache
def _latopt_reports() -> dict[str, Report]:
    return scan(source_files(), supported_apis())


def test_collector_sees_latopt_tensorrt_calls():
    """The walk types latopt's objects through the lists (a regression here would hide misses)."""
    for version, rep in _latopt_reports().items():
        used = {u.name for u in rep.uses}
        expected = {
            "tensorrt.Builder", "tensorrt.OnnxParser", "tensorrt.Runtime", "Logger.WARNING",
            "Builder.create_network", "Builder.build_serialized_network", "Builder.create_optimization_profile",
            "OnnxParser.parse_from_file", "OnnxParser.get_error", "IBuilderConfig.set_memory_pool_limit",
            "IBuilderConfig.create_timing_cache", "IBuilderConfig.set_timing_cache", "ITimingCache.serialize",
            "INetworkDefinition.get_input", "ITensor.shape", "IOptimizationProfile.set_shape",
            "Runtime.deserialize_cuda_engine", "ICudaEngine.num_io_tensors", "ICudaEngine.get_tensor_profile_shape",
            "IExecutionContext.set_input_shape", "IExecutionContext.set_tensor_address",
            "IExecutionContext.execute_async_v3", "tensorrt.nptype", "tensorrt.__version__",
        }
        assert expected <= used, (version, sorted(expected - used))


def test_dynamic_attribute_sites_are_covered():
    for version, rep in _latopt_reports().items():
        uncovered = [d for d in rep.dynamic if d.owner not in DYNAMIC_COVERED]
        assert not uncovered, (
            f"TensorRT {version}: getattr() with a computed name on "
            + ", ".join(f"{d.owner} at {d.file}:{d.line}" for d in uncovered)
            + ": its names are not checked; add a check of the data that feeds it to DYNAMIC_COVERED")


class KnownMisses(AssertionError):
    """The misses are exactly the ones KNOWN_MISSES lists (expected failure)."""


def _version_params() -> list[Any]:
    out = []
    for version in supported_apis():
        known = KNOWN_MISSES.get(version)
        marks = [pytest.mark.xfail(strict=True, raises=KnownMisses, reason=(
            f"TensorRT {version}: known defects: " + "; ".join(sorted(known))
            + f" — fixed? empty KNOWN_MISSES[{version!r}]"))] if known else []
        out.append(pytest.param(version, marks=marks, id=version))
    return out


@pytest.mark.parametrize("version", _version_params())
def test_latopt_tensorrt_calls_exist(version):
    """Every TensorRT attribute latopt uses (AST, per version branch) and every flag name its precision
    dispatch hands to getattr() exists in TensorRT ``version``."""
    api = supported_apis()[version]
    report = _latopt_reports()[version]
    found = {m.name: str(m) for m in report.misses}
    for name, detail in dispatch_misses(api):
        found.setdefault(name, f"{DISPATCH}: {name}" + (f": {detail}" if detail else ""))
    text = "\n".join(sorted(found.values()))
    known = KNOWN_MISSES.get(version, frozenset())
    if found and set(found) == known:
        raise KnownMisses(f"TensorRT {version}: the known misses:\n{text}")
    # all fixed: passes, which xfail(strict=True) turns into a failure naming KNOWN_MISSES to empty
    assert not found, (
        f"TensorRT {version}: misses changed (new: {sorted(set(found) - known)}, "
        f"gone: {sorted(known - set(found))}):\n{text}")
