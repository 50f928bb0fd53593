"""Extract the names of TensorRT's Python API from the bindings wheels, without a GPU.

``tensorrt-bindings`` wheels are plain wheels on the package index; each holds ``tensorrt_bindings/tensorrt.so``
(a pybind11 module) and ``tensorrt_bindings/__init__.py``. ``import tensorrt`` is ``from tensorrt_bindings import
*`` plus ``__version__`` (NVIDIA/TensorRT ``python/packaging/frontend_sdist/tensorrt/__init__.py``), so the public
names of ``tensorrt_bindings`` are the API latopt can call.

How the names are read (exact, not guessed from string order):

1. The ``.so`` cannot be imported as it is: it needs ``libnvinfer.so.N``, ``libnvonnxparser.so.N``,
   ``libnvinfer_plugin.so.N`` (and ``libnvparsers.so.8``), which are not in the bindings wheel. Its undefined
   dynamic symbols that the Python process cannot resolve (read from ``.dynsym``/``.gnu.version`` with the
   small ELF reader below: ``createInferBuilder_INTERNAL``, ``getPluginRegistry``, ... a dozen) are defined in
   one stub library (each stub traps if called), compiled with the C compiler and installed under every
   NEEDED ``libnv*`` name.
2. In a child Python of the wheel's ABI (CPython 3.11 for these wheels; ``--python``) with
   ``LD_LIBRARY_PATH`` on the stubs, the package is imported. Module init only *registers* classes,
   methods, properties and enum values with pybind11; no stub is called (one would kill the child). The live
   type objects are then walked: module attributes, each class's own members (``vars(cls)``, so inherited
   ones are found through the recorded bases), nested types, pybind11 signatures (return types, parameter
   names) and enum values.
3. The ``.so`` is also loaded on its own (without ``__init__.py``) in a second child, to tell names
   registered in C++ from names that ``__init__.py`` adds (``nptype``, ``Logger.WARNING``, ...). Every
   C++-registered name is checked to occur as a NUL-terminated C string in the ``.so``'s ``.rodata`` (a static
   cross-check that the stubs changed nothing); the counts go into the header.

Why not from the strings alone: the binary does not say which class a string belongs to. pybind11 keeps
signatures as type-less templates (``({%}, {str}) -> None``; 1,223 of them in 11.4, none naming a class: the
``(self: tensorrt.IBuilderConfig, ...)`` text is built at import time), and the linker merges equal strings and
string tails (``name`` exists only as the tail of longer strings), so one ``.rodata`` string serves every
class that has that member. String order gives a guess at best; importing gives the registrations themselves.

Output ``tests/data/tensorrt-<version>.names``, sorted, one entry a line, ``NAME KIND TYPE [EXTRA]``:

    Builder class - (logger)                  a class; TYPE = its TensorRT base classes (comma-separated) or -,
                                              EXTRA = the parameters of its own __init__ (when it has one)
    Logger class ILogger (min_severity=)
    Logger.Severity alias ILogger.Severity    a class attribute that is another (canonical) class
    Builder.create_network method INetworkDefinition (flags=)
                                              TYPE = pybind11 return type, EXTRA = parameters without self
                                              (``=``: has a default); overloads joined by |
    IExecutionContext.execute_async_v3 method bool (stream_handle)
    Builder.platform_has_fast_fp16 property bool         TYPE = the getter's return type
    BuilderFlag.FP16 value BuilderFlag 0      enum member (EXTRA = its int) or other constant (TYPE = its type)
    nptype function ? (trt_type)              module-level function; ? where no return type is known
    IPluginRegistry.get_... static ...        static method

TYPE strings drop the ``tensorrt_bindings.tensorrt.`` and ``typing.`` prefixes and all spaces. Names starting
with ``_`` (pybind11 internals, dunders) are left out except the module's ``__version__``; so are imported
modules (``os``, ``ctypes``, ...) and the loop variables ``attr`` and ``value`` that ``__init__.py`` leaves
behind (``for attr, value in ILogger.Severity.__members__.items()``).

Usage (x86-64 Linux with a C compiler; the child Python must match the wheels' cpXY tag)::

    python tools/trt_api_names.py /work/trt/            # wheels or folders holding them
    python tools/trt_api_names.py --download            # pip download --no-deps the DEFAULT_SPECS first
    python tools/trt_api_names.py --download --spec tensorrt-cu12-bindings==10.14.1.48

:class:`TrtApi` reads a names file back (used by tests/test_trt_api.py and tests/test_tensorrt.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = REPO / "tests" / "data"
FORMAT = 1
DEFAULT_SPECS = ("tensorrt-bindings==8.6.1", "tensorrt-cu12-bindings==10.13.3.9", "tensorrt-cu13-bindings==11.4.0.106")
INIT_LEFTOVERS = frozenset({"attr", "value"})  # loop variables left in the namespace by __init__.py


# ------------------------------------------------------------------------------------------ reading names
@dataclass(frozen=True)
class Entry:
    name: str
    kind: str  # class | alias | method | static | property | value | function
    type: str  # bases (class), target (alias), return/property/value type, "-" or "?"
    value: int | None = None  # enum member's int
    params: tuple[tuple[str, ...], ...] | None = None  # overloads' parameters (callables, class constructors)

    def fits(self, n_positional: int, keywords: Sequence[str]) -> bool | None:
        """Whether a call with ``n_positional`` arguments and these keywords fits one overload (None: unknown)."""
        if self.params is None:
            return None
        for overload in self.params:
            if "?" in overload:
                return None
            named = [p.rstrip("=") for p in overload if not p.startswith("*")]
            var_pos = any(p.startswith("*") and not p.startswith("**") for p in overload)
            var_kw = any(p.startswith("**") for p in overload)
            if n_positional > len(named) and not var_pos:
                continue
            filled = set(named[:n_positional])
            if any(k in filled or (k not in named and not var_kw) for k in keywords):
                continue
            required = {p for p in overload if not p.endswith("=") and not p.startswith("*")}
            if required <= filled | set(keywords):
                return True
        return False


class TrtApi:
    """One TensorRT version's names, as written by this tool (see the module docstring for the format)."""

    KINDS = ("class", "alias", "method", "static", "property", "value", "function")

    def __init__(self, entries: Iterable[Entry], version: str, header: Sequence[str] = ()) -> None:
        self.entries = {e.name: e for e in entries}
        self.version = version
        self.major = int(version.split(".")[0])
        self.header = list(header)

    @classmethod
    def load(cls, path: str | Path) -> TrtApi:
        path = Path(path)
        header, entries, version = [], [], None
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.startswith("#"):
                header.append(line)
                m = re.match(r"#\s*version:\s*(\S+)", line)
                if m:
                    version = m.group(1)
                continue
            if not line.strip():
                continue
            parts = line.split(" ")
            if len(parts) not in (3, 4) or parts[1] not in cls.KINDS:
                raise ValueError(f"{path}:{n}: not 'NAME KIND TYPE [EXTRA]': {line!r}")
            value = params = None
            if len(parts) == 4 and parts[1] == "value":
                value = int(parts[3])
            elif len(parts) == 4:
                params = tuple(tuple(p for p in o.strip("()").split(",") if p) for o in parts[3].split("|"))
            entries.append(Entry(parts[0], parts[1], parts[2], value, params))
        if version is None:
            raise ValueError(f"{path}: no '# version:' header line")
        return cls(entries, version, header)

    # -- queries -----------------------------------------------------------------------------------
    def __contains__(self, name: str) -> bool:
        return self.member(*name.rsplit(".", 1)) is not None if "." in name else name in self.entries

    def get(self, name: str) -> Entry | None:
        return self.entries.get(name)

    def canonical(self, cls: str) -> str | None:
        """The canonical class name for ``cls`` (following aliases), or None if it is not a class."""
        for _ in range(8):
            e = self.entries.get(cls)
            if e is None:
                return None
            if e.kind == "class":
                return cls
            if e.kind != "alias":
                return None
            cls = e.type
        return None

    def mro(self, cls: str) -> list[str]:
        """``cls`` and its TensorRT base classes, nearest first (as recorded; C3 is not needed here)."""
        out, todo = [], [cls]
        while todo:
            c = self.canonical(todo.pop(0))
            if c is None or c in out:
                continue
            out.append(c)
            bases = self.entries[c].type
            todo.extend(b for b in bases.split(",") if b and b != "-")
        return out

    def member(self, cls: str, attr: str) -> Entry | None:
        """``cls.attr`` looked up through the bases (``cls`` may be an alias); None when it does not exist."""
        for c in self.mro(cls):
            e = self.entries.get(f"{c}.{attr}")
            if e is not None:
                return e
        return None

    def classes(self) -> set[str]:
        return {n for n, e in self.entries.items() if e.kind == "class"}

    def enum_members(self, cls: str) -> dict[str, int]:
        """``{member: int}`` of enum class ``cls`` (values only, not ``name``/``value`` properties)."""
        c = self.canonical(cls)
        prefix = f"{c}."
        return {n[len(prefix):]: e.value for n, e in self.entries.items()
                if n.startswith(prefix) and "." not in n[len(prefix):] and e.kind == "value"
                and e.value is not None}

    def trt_class_in(self, type_str: str) -> str | None:
        """The one TensorRT class named in a TYPE string (``ICudaEngine|None`` → ICudaEngine), else None."""
        if type_str in ("-", "?"):
            return None
        found = {t for t in re.findall(r"[A-Za-z_][\w.]*", type_str) if self.canonical(t) is not None}
        return self.canonical(found.pop()) if len(found) == 1 else None


def default_names_files(data_dir: Path = DATA_DIR) -> list[Path]:
    return sorted(data_dir.glob("tensorrt-*.names"), key=lambda p: [int(x) for x in re.findall(r"\d+", p.stem)])


def load_all(data_dir: Path = DATA_DIR) -> dict[str, TrtApi]:
    """``{version: TrtApi}`` of every committed names file, oldest first."""
    apis = [TrtApi.load(p) for p in default_names_files(data_dir)]
    return {a.version: a for a in apis}


def api_for(version: str, apis: dict[str, TrtApi] | None = None) -> TrtApi:
    """The committed list of the same major version as ``version`` (e.g. 10.3.0 → the 10.13.3.9 list)."""
    apis = load_all() if apis is None else apis
    major = int(str(version).split(".")[0])
    same = [a for a in apis.values() if a.major == major]
    if not same:
        raise KeyError(f"no TensorRT {major}.x names list in {DATA_DIR} (have {sorted(apis)})")
    return same[-1]


# ------------------------------------------------------------------------------------------ ELF (x86-64)
class Elf:
    """Just enough of an ELF64 little-endian reader: sections, NEEDED, undefined dynamic symbols."""

    def __init__(self, path: Path) -> None:
        self.data = path.read_bytes()
        d = self.data
        if d[:4] != b"\x7fELF" or d[4] != 2 or d[5] != 1:
            raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
        shoff, = struct.unpack_from("<Q", d, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
        raw = [struct.unpack_from("<IIQQQQIIQQ", d, shoff + i * shentsize) for i in range(shnum)]
        names = raw[shstrndx]
        self.sections: dict[str, tuple] = {}
        for s in raw:
            self.sections[self._cstr(names[4] + s[0])] = s

    def _cstr(self, off: int) -> str:
        return self.data[off:self.data.index(b"\0", off)].decode("latin-1")

    def section(self, name: str) -> bytes:
        s = self.sections[name]
        return self.data[s[4]:s[4] + s[5]]

    def needed(self) -> list[str]:
        dynstr = self.sections[".dynstr"][4]
        dyn = self.section(".dynamic")
        out = []
        for i in range(0, len(dyn), 16):
            tag, val = struct.unpack_from("<qQ", dyn, i)
            if tag == 0:
                break
            if tag == 1:  # DT_NEEDED
                out.append(self._cstr(dynstr + val))
        return out

    def undefined_symbols(self) -> list[tuple[str, bool, bool]]:
        """``(name, weak, versioned)`` of every undefined dynamic symbol."""
        dynstr = self.sections[".dynstr"][4]
        syms = self.section(".dynsym")
        versym = self.section(".gnu.version") if ".gnu.version" in self.sections else b""
        out = []
        for i in range(1, len(syms) // 24):
            st_name, st_info, _other, st_shndx = struct.unpack_from("<IBBH", syms, i * 24)
            if st_shndx != 0 or not st_name:
                continue
            ver = struct.unpack_from("<H", versym, i * 2)[0] & 0x7FFF if versym else 1
            out.append((self._cstr(dynstr + st_name), st_info >> 4 == 2, ver > 1))
        return out


def rodata_has(rodata: bytes, name: str) -> bool:
    """``name`` occurs as a NUL-terminated string in ``rodata`` (possibly as the tail of a longer one,
    which is how the linker merges string constants)."""
    return name.encode() + b"\0" in rodata


# ------------------------------------------------------------------------------------------ stubs
def build_stubs(so: Path, out: Path, python: str, cc: str) -> list[str]:
    """An empty library defining the symbols ``so`` needs from TensorRT, installed as each NEEDED libnv*."""
    elf = Elf(so)
    candidates = sorted({n for n, weak, versioned in elf.undefined_symbols() if not weak and not versioned})
    probe = ("import ctypes, json, sys\n"
             "libs = [ctypes.CDLL(None)] + [ctypes.CDLL(n) for n in ('libstdc++.so.6', 'libgcc_s.so.1', 'libm.so.6')]\n"
             "print(json.dumps([s for s in json.loads(sys.argv[1]) if not any(hasattr(l, s) for l in libs)]))")
    res = subprocess.run([python, "-c", probe, json.dumps(candidates)], capture_output=True, text=True, check=True)
    missing = json.loads(res.stdout)
    # Each stub traps: the import succeeds only if module init calls none of them (it only registers names).
    src = ["/* generated by tools/trt_api_names.py: resolved at load time, never called */"]
    src += [f'void latopt_stub_{i}(void) __asm__("{s}");\nvoid latopt_stub_{i}(void) {{ __builtin_trap(); }}'
            for i, s in enumerate(missing)]
    out.mkdir(parents=True, exist_ok=True)
    (out / "stub.c").write_text("\n".join(src) + "\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(out / "libstub.so"), str(out / "stub.c")], check=True)
    for lib in elf.needed():
        if lib.startswith("libnv"):
            (out / lib).symlink_to("libstub.so")
    return missing


# ------------------------------------------------------------------------------------------ introspection
def _introspect(pkg_dir: str, raw_so: bool) -> dict:
    """Runs in the child Python: import and walk the module; returns entries as JSON-able rows."""
    import importlib.machinery
    import importlib.util
    import types

    sys.path.insert(0, pkg_dir)
    if raw_so:
        so = os.path.join(pkg_dir, "tensorrt_bindings", "tensorrt.so")
        loader = importlib.machinery.ExtensionFileLoader("tensorrt", so)
        spec = importlib.util.spec_from_file_location("tensorrt", so, loader=loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
        type_module, namespace = mod.__name__, vars(mod)
    else:
        import tensorrt_bindings as mod  # type: ignore[import-not-found]

        type_module = mod.tensorrt.__name__
        namespace = vars(mod)

    def is_trt(t: object) -> bool:
        return isinstance(t, type) and getattr(t, "__module__", None) == type_module

    def qual(t: type) -> str:
        return t.__qualname__ if is_trt(t) else t.__name__

    def norm(s: str) -> str:
        s = s.strip()
        for p in (type_module + ".", "tensorrt_bindings.tensorrt.", "tensorrt.tensorrt.", "typing."):
            s = s.replace(p, "")
        return s.replace(" ", "") or "?"

    def split_params(text: str) -> list[str]:
        parts, depth, cur = [], 0, ""
        for ch in text:
            if ch in "([{<":
                depth += 1
            elif ch in ")]}>":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur.strip():
            parts.append(cur)
        out = []
        for part in parts:
            part = part.strip()
            m = re.match(r"^(\*{0,2}\w+)\s*(?::\s*(.*?))?\s*(=.*)?$", part, re.S)
            if m is None:
                out.append("?")
                continue
            out.append(m.group(1) + ("=" if m.group(3) else ""))
        return out

    def signatures(doc: str | None, name: str, drop_self: bool) -> tuple[str, str | None]:
        """(return types joined by |, parameter lists "(a,b=)|(c)" or None) from a pybind11 docstring."""
        if not doc:
            return "?", None
        rets: list[str] = []
        params: list[str] = []
        for line in doc.splitlines():
            line = line.strip()
            m = re.match(r"^(?:\d+\.\s+)?" + re.escape(name) + r"\((.*)\) -> (.+)$", line)
            if not m:
                continue
            r = norm(m.group(2))
            if r not in rets:
                rets.append(r)
            ps = split_params(m.group(1))
            if drop_self and ps:
                ps = ps[1:]
            sig = "(" + ",".join(ps) + ")"
            if sig not in params:
                params.append(sig)
        return "|".join(rets) or "?", "|".join(params) or None

    def py_params(fn: object, drop_self: bool) -> str | None:
        import inspect

        try:
            sig = inspect.signature(fn)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return None
        ps = []
        for p in sig.parameters.values():
            star = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
            ps.append(star + p.name + ("=" if p.default is not p.empty else ""))
        return "(" + ",".join(ps[1:] if drop_self else ps) + ")"

    def callable_row(kind: str, fn: object, name: str, drop_self: bool) -> list:
        if isinstance(fn, types.FunctionType):  # defined in __init__.py
            return [kind, "?", py_params(fn, drop_self)]
        ret, params = signatures(getattr(fn, "__doc__", None), name, drop_self)
        return [kind, ret, params]

    rows: dict[str, list] = {}

    def walk_class(path: str, cls: type) -> None:
        bases = [qual(b) for b in cls.__bases__ if is_trt(b)]
        init = vars(cls).get("__init__")
        ctor = callable_row("class", init, "__init__", True)[2] if init is not None else None
        rows[path] = ["class", ",".join(bases) or "-", ctor]
        for k, v in vars(cls).items():
            if k.startswith("_"):
                continue
            p = f"{path}.{k}"
            if isinstance(v, type):
                if is_trt(v) and v.__qualname__ == p:
                    walk_class(p, v)
                else:
                    rows[p] = ["alias", qual(v), None]
            elif isinstance(v, staticmethod):
                rows[p] = callable_row("static", v.__func__, k, False)
            elif isinstance(v, classmethod):
                rows[p] = callable_row("method", v.__func__, k, True)
            elif isinstance(v, property):
                rows[p] = ["property", signatures(getattr(v.fget, "__doc__", None), "", False)[0], None]
            elif callable(v) and not is_trt(type(v)):
                rows[p] = callable_row("method", v, k, True)
            else:
                rows[p] = value_row(v)

    def value_row(v: object) -> list:
        t = type(v)
        enum_like = is_trt(t) and hasattr(t, "__members__")
        return ["value", qual(t), int(v) if enum_like else None]  # type: ignore[call-overload]

    for k, v in namespace.items():
        if (k.startswith("_") and k != "__version__") or k in INIT_LEFTOVERS or isinstance(v, types.ModuleType):
            continue
        if isinstance(v, type):
            if is_trt(v) and v.__qualname__ == k:
                walk_class(k, v)
            else:
                rows[k] = ["alias", qual(v), None]
        elif callable(v) and not is_trt(type(v)):
            rows[k] = callable_row("function", v, k, False)
        else:
            rows[k] = value_row(v)
    return {"version": getattr(mod, "__version__", None), "python": "{}.{}".format(*sys.version_info[:2]), "rows": rows}


def introspect(pkg_dir: Path, stub_dir: Path, python: str, *, raw_so: bool) -> dict:
    env = dict(os.environ, LD_LIBRARY_PATH=f"{stub_dir}:{os.environ.get('LD_LIBRARY_PATH', '')}".rstrip(":"))
    cmd = [python, str(Path(__file__).resolve()), "--introspect", str(pkg_dir)] + (["--raw-so"] if raw_so else [])
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if res.returncode != 0:
        raise RuntimeError(f"introspecting {pkg_dir} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout)


# ------------------------------------------------------------------------------------------ one wheel
def extract(wheel: Path, out_dir: Path, python: str, cc: str) -> Path:
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    with tempfile.TemporaryDirectory(prefix="trt-names-") as tmp:
        pkg = Path(tmp) / "pkg"
        with zipfile.ZipFile(wheel) as z:
            z.extractall(pkg)
        so = pkg / "tensorrt_bindings" / "tensorrt.so"
        if not so.is_file():
            raise SystemExit(f"{wheel.name}: no tensorrt_bindings/tensorrt.so inside")
        stubbed = build_stubs(so, Path(tmp) / "stubs", python, cc)
        full = introspect(pkg, Path(tmp) / "stubs", python, raw_so=False)
        raw = introspect(pkg, Path(tmp) / "stubs", python, raw_so=True)
        rodata = Elf(so).section(".rodata")
    rows, raw_rows = full["rows"], raw["rows"]
    version = full["version"]
    in_cxx = [n for n in rows if n in raw_rows]
    not_in_rodata = sorted(n for n in in_cxx if not rodata_has(rodata, n.rsplit(".", 1)[-1]))
    from_init = sorted(n for n in rows if n not in raw_rows)
    lines = []
    for name in sorted(rows):
        kind, typ, value = rows[name]
        lines.append(f"{name} {kind} {typ}" + ("" if value is None else f" {value}"))
    counts = {k: sum(1 for r in rows.values() if r[0] == k) for k in TrtApi.KINDS}
    header = [
        "# TensorRT Python API names (import tensorrt == tensorrt_bindings public names + __version__)",
        f"# version: {version}",
        f"# wheel: {wheel.name} sha256={digest}",
        f"# made by: python tools/trt_api_names.py (format {FORMAT}); pip download --no-deps reproduces the wheel",
        f"# method: the wheel's tensorrt_bindings imported in CPython {full['python']} with the {len(stubbed)} TensorRT "
        f"symbols it needs ({', '.join(stubbed)}) stubbed; live pybind11 types walked (exact attribution: "
        "each Class.member is read from vars(Class), inherited members via the recorded bases)",
        f"# static check: {len(in_cxx) - len(not_in_rodata)} of {len(in_cxx)} names registered by tensorrt.so occur "
        f"as C strings in its .rodata" + (f" (not: {', '.join(not_in_rodata)})" if not_in_rodata else ""),
        f"# added by tensorrt_bindings/__init__.py ({len(from_init)}): {' '.join(from_init)}",
        f"# entries: {len(rows)} (" + ", ".join(f"{k} {v}" for k, v in counts.items()) + ")",
        "# format: NAME KIND TYPE [EXTRA]; KIND class (TYPE = bases or -, EXTRA = __init__ parameters), alias "
        "(TYPE = class), method/static/function (TYPE = return type, EXTRA = parameters without self, '=' marks a "
        "default; overloads joined by |), property (TYPE = its type), value (TYPE = its type, EXTRA = int of an "
        "enum member); ? = not known",
    ]
    out_dir.mkdir(parents=True, exist_ok=True)
    dst = out_dir / f"tensorrt-{version}.names"
    dst.write_text("\n".join(header + lines) + "\n")
    return dst


def find_wheels(paths: Sequence[str]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        out.extend(sorted(p.glob("tensorrt*bindings-*.whl")) if p.is_dir() else [p])
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheels", nargs="*", help="tensorrt*-bindings wheels, or folders holding them")
    ap.add_argument("--download", action="store_true", help="pip download --no-deps the specs first")
    ap.add_argument("--spec", action="append", help=f"requirement(s) to download (default: {' '.join(DEFAULT_SPECS)})")
    ap.add_argument("--dest", default=None, help="where --download puts the wheels (default: a temp folder)")
    ap.add_argument("--out", default=str(DATA_DIR), help="output folder (default tests/data)")
    ap.add_argument("--python", default=sys.executable, help="child interpreter; must match the wheels' cpXY tag")
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"), help="C compiler for the stub library")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 when the lists in --out differ from what the wheels give")
    ap.add_argument("--introspect", help=argparse.SUPPRESS)
    ap.add_argument("--raw-so", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.introspect:
        print(json.dumps(_introspect(args.introspect, args.raw_so)))
        return 0
    if shutil.which(args.cc) is None:
        raise SystemExit(f"no C compiler {args.cc!r} (--cc): it builds the stub library")
    wheels = find_wheels(args.wheels)
    tmp = None
    if args.download:
        dest = Path(args.dest) if args.dest else Path(tmp := tempfile.mkdtemp(prefix="trt-wheels-"))
        for spec in args.spec or DEFAULT_SPECS:
            subprocess.run([args.python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                            "-d", str(dest), spec], check=True)
        wheels += find_wheels([str(dest)])
    if not wheels:
        ap.error("give wheels/folders or --download")
    check_dir = Path(tempfile.mkdtemp(prefix="trt-names-check-")) if args.check else None
    stale = 0
    try:
        for w in wheels:
            dst = extract(w, check_dir or Path(args.out), args.python, args.cc)
            n = sum(1 for line in dst.read_text().splitlines() if not line.startswith("#"))
            if check_dir is None:
                print(f"{w.name} -> {dst} ({n} names)")
                continue
            committed = Path(args.out) / dst.name
            same = committed.is_file() and committed.read_text() == dst.read_text()
            stale += not same
            print(f"{w.name}: {committed} {'up to date' if same else 'DIFFERS (or is missing)'} ({n} names)")
    finally:
        for d in (tmp, check_dir):
            if d:
                shutil.rmtree(d, ignore_errors=True)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
