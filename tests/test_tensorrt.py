"""TensorRT backend and the deploy runtime (latopt.runtime).

Three kinds of tests:

- ``@pytest.mark.tensorrt``: real TensorRT on a real GPU (build from ONNX, compare with ONNX Runtime, time).
  They skip with the conftest reason where ``tensorrt`` or a GPU is missing.
- Our own dispatch code driven by a small *stand-in* ``tensorrt`` module (``FakeTRT``) that only records the
  calls made on it. These test latopt's version/precision dispatch, timing-cache handling, error listing and
  I/O binding — not TensorRT, and no figure from them is a TensorRT result. Its enums come from, and all its
  other names are checked against, the real API lists (tests/data/tensorrt-*.names; see tests/test_trt_api.py).
- ``latopt.runtime`` on ``.onnx`` files with the real ONNX Runtime, and the error paths that need no GPU.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import pwd
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from latopt import runtime
from latopt.errors import LatoptError
from latopt.latency.backends import get_backend
from latopt.latency.backends.tensorrt import backend as trt_backend
from latopt.latency.backends.tensorrt import build as trt_build
from latopt.latency.backends.tensorrt import fp16 as trt_fp16
from latopt.latency.backends.tensorrt import precision as trt_precision
from latopt.latency.devices import DeviceProfile, load_device, make_profile
from tools import trt_api_names as names_tool

pytestmark = pytest.mark.floor

REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------ fixtures
def _small_net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU6(),
        torch.nn.Conv2d(8, 8, 3, padding=1, groups=8), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 16, 1), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10),
    ).eval()


def _export(path: Path, *, dynamic_batch: bool = False, shape=(2, 3, 16, 16)) -> tuple[Path, torch.nn.Module]:
    net = _small_net()
    kwargs: dict[str, Any] = {}
    if dynamic_batch:
        kwargs["dynamic_axes"] = {"x": {0: "n"}, "y": {0: "n"}}
    # TorchScript exporter chosen explicitly (torch >= 2.9 defaults to dynamo); small, deterministic graph.
    torch.onnx.export(net, (torch.randn(*shape),), str(path), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"], **kwargs)
    return path, net


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory) -> tuple[Path, torch.nn.Module]:
    return _export(tmp_path_factory.mktemp("onnx") / "net.onnx")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("LATOPT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _profile(**kw: Any) -> DeviceProfile:
    base = {"name": "test-trt", "backend": "tensorrt", "precision": "fp32", "cuda_device": 0, "batch": 2}
    base.update(kw)
    return make_profile(base)


# ------------------------------------------------------------------- stand-in tensorrt module
class _Member(int):
    """An enum member of the stand-in module: the real member's int value and name (from the lists)."""

    def __new__(cls, owner: str, name: str, value: int) -> _Member:
        obj = super().__new__(cls, value)
        obj.name = name
        obj._owner = owner
        return obj

    def __repr__(self) -> str:
        return f"<{self._owner}.{self.name}: {int(self)}>"


def _enum(api: Any, cls: str) -> types.SimpleNamespace:
    """The members of the real enum ``cls`` in ``api``'s version, no more and no fewer."""
    return types.SimpleNamespace(**{m: _Member(cls, m, v) for m, v in api.enum_members(cls).items()})


def _fakes(real: str):
    """Marks a stand-in class with the real TensorRT class it stands for (checked by
    test_fake_trt_matches_real_api: every public attribute must exist there, with the same parameters)."""

    def mark(cls: type) -> type:
        cls._real = real
        return cls

    return mark


# Attributes of FakeTRT that are test helpers, not stand-ins for tensorrt names.
FAKE_HELPERS = frozenset({"calls", "named"})


class FakeTRT(types.SimpleNamespace):
    """Records what latopt asks of ``tensorrt``. Its enums (BuilderFlag, NetworkDefinitionCreationFlag,
    MemoryPoolType, TensorIOMode, Logger severities) are built from the real API list of the same major
    version (tests/data/tensorrt-*.names via ``names_tool.api_for``: 10.x fakes use the 10.13.3.9 list), so
    e.g. 11.x has no BuilderFlag.FP16 and 8.6 no STRONGLY_TYPED, exactly as the real modules. Every other
    attribute is checked against the same lists by test_fake_trt_matches_real_api.

    ``cuda`` (a :class:`_FakeCuda`) backs the runtime side: ``Runtime.deserialize_cuda_engine(b"PLAN")``
    gives an engine with input "x" (dynamic batch, profile min 1 / opt 3 / max 8: ``set_input_shape``
    returns False outside it, as TensorRT does) and output "y" = 2x + 1.

    ``bad_cache``: what ``create_timing_cache`` does with a non-empty blob it cannot parse ("none": returns
    None, "raise": raises RuntimeError, as pybind11 turns a C++ exception into); ``bind_ok``: what
    ``set_tensor_address`` returns."""

    def __init__(self, version: str, *, parse_ok: bool = True, accept_cache: bool = True,
                 dynamic_input: bool = False, cuda: Any = None, bad_cache: str | None = None,
                 bind_ok: bool = True, input_shape: tuple[int, ...] = (2, 3, 16, 16)) -> None:
        calls: list[tuple] = []
        api = names_tool.api_for(version)
        state = {"cache": b""}
        severity = _enum(api, "ILogger.Severity")
        io_mode = _enum(api, "TensorIOMode")
        addr: dict[str, int] = {}

        @_fakes("Logger")
        class Logger:
            def __init__(self, min_severity=severity.WARNING):
                calls.append(("Logger", min_severity.name))

        for member, value in vars(severity).items():
            setattr(Logger, member, value)

        @_fakes("ITensor")
        class Tensor:
            name = "x"
            shape = (-1, *input_shape[1:]) if dynamic_input else input_shape

        @_fakes("INetworkDefinition")
        class Network:
            num_inputs = 1

            def get_input(self, index):
                return Tensor()

        @_fakes("OnnxParser")
        class Parser:
            num_errors = 0 if parse_ok else 2

            def __init__(self, network, logger):
                pass

            def parse_from_file(self, model):
                import onnx

                loaded = onnx.load(model)  # read while it exists: the fp16 copy lives in a temp dir
                calls.append(("parse_from_file", model, loaded))
                return parse_ok

            def get_error(self, index):
                return f"node Conv_{index}: unsupported\nattribute"

        @_fakes("ITimingCache")
        class Cache:
            def __init__(self, blob):
                self._blob = blob

            def serialize(self):
                return memoryview(self._blob + b"+entry")

        @_fakes("IBuilderConfig")
        class Config:
            def set_memory_pool_limit(self, pool, pool_size):
                calls.append(("set_memory_pool_limit", pool.name, pool_size))

            def set_flag(self, flag):
                calls.append(("set_flag", flag.name))

            def clear_flag(self, flag):
                calls.append(("clear_flag", flag.name))

            def create_timing_cache(self, serialized_timing_cache):
                blob = bytes(serialized_timing_cache)
                calls.append(("create_timing_cache", blob))
                if blob and bad_cache == "none":
                    return None
                if blob and bad_cache == "raise":
                    raise RuntimeError("[TRT] [E] Timing cache: deserialization failed (blob version mismatch)")
                return Cache(blob)

            def set_timing_cache(self, cache, ignore_mismatch):
                if not isinstance(cache, Cache):  # pybind11 refuses anything but an ITimingCache
                    raise TypeError("set_timing_cache(): incompatible function arguments")
                calls.append(("set_timing_cache", cache._blob, ignore_mismatch))
                ok = accept_cache or cache._blob == b""
                if ok:
                    state["cache"] = cache._blob
                return ok

            def get_timing_cache(self):
                return Cache(state["cache"])

            def add_optimization_profile(self, profile):
                calls.append(("add_optimization_profile", profile._shapes))
                return 0

        @_fakes("IOptimizationProfile")
        class Profile:
            def set_shape(self, input, min, opt, max):  # the real parameter names
                self._shapes = (input, tuple(min), tuple(opt), tuple(max))

        @_fakes("Builder")
        class Builder:
            def __init__(self, logger):
                pass

            def create_network(self, flags=0):
                calls.append(("create_network", flags))
                return Network()

            def create_builder_config(self):
                return Config()

            def create_optimization_profile(self):
                return Profile()

            def build_serialized_network(self, network, config):
                calls.append(("build_serialized_network",))
                return memoryview(b"PLAN")

        @_fakes("IExecutionContext")
        class Context:
            _shape: tuple = ()

            def set_input_shape(self, name, shape):
                calls.append(("set_input_shape", name, tuple(shape)))
                if not 1 <= shape[0] <= 8:  # outside the profile: refused, the shape left unresolved
                    Context._shape = (-1, 4)
                    return False
                Context._shape = tuple(shape)
                return True

            def get_tensor_shape(self, name):
                return Context._shape

            def set_tensor_address(self, name, memory):
                addr[name] = memory
                return bind_ok

            def execute_async_v3(self, stream_handle):
                calls.append(("execute_async_v3", stream_handle))
                cuda.mem[addr["y"]][...] = 2 * cuda.mem[addr["x"]] + 1
                return True

        @_fakes("ICudaEngine")
        class Engine:
            num_io_tensors = 2
            _names = ("x", "y")

            def get_tensor_name(self, index):
                return self._names[index]

            def get_tensor_mode(self, name):
                return io_mode.INPUT if name == "x" else io_mode.OUTPUT

            def get_tensor_shape(self, name):
                return (-1, 4)

            def get_tensor_profile_shape(self, name, profile_index):
                return ((1, 4), (3, 4), (8, 4))

            def get_tensor_dtype(self, name):
                return "float32"

            def create_execution_context(self):
                return Context()

        @_fakes("Runtime")
        class Runtime:
            def __init__(self, logger):
                pass

            def deserialize_cuda_engine(self, serialized_engine):
                calls.append(("deserialize", serialized_engine))
                return Engine() if serialized_engine == b"PLAN" else None

        def nptype(trt_type):
            return np.float32

        super().__init__(
            __version__=version, calls=calls, Logger=Logger, Builder=Builder, OnnxParser=Parser, Runtime=Runtime,
            BuilderFlag=_enum(api, "BuilderFlag"), MemoryPoolType=_enum(api, "MemoryPoolType"),
            NetworkDefinitionCreationFlag=_enum(api, "NetworkDefinitionCreationFlag"), TensorIOMode=io_mode,
            nptype=nptype,
        )
        self._api = api
        self._addr = addr
        self._classes = (Logger, Tensor, Network, Parser, Cache, Config, Profile, Builder, Context, Engine, Runtime)

    def named(self, kind: str) -> list[tuple]:
        return [c for c in self.calls if c[0] == kind]


def _fake_params_fit(fn: Any, entry: Any) -> bool:
    """The stand-in's parameters (without self) are the real ones' leading names, the rest defaulted."""
    if entry.params is None:
        return True
    sig = inspect.signature(fn)
    names = [p.name for p in sig.parameters.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY)]
    names = names[1:] if names and names[0] == "self" else names
    for overload in entry.params:
        real = [p.rstrip("=") for p in overload]
        if names == real[:len(names)] and all(p.endswith("=") for p in overload[len(names):]):
            return True
    return False


def fake_trt_problems(fake: FakeTRT, api: Any) -> list[str]:
    """Every name the stand-in module defines that TensorRT ``api.version`` lacks, or defines differently."""
    problems: list[str] = []
    exposed = {}
    for name, value in vars(fake).items():
        if (name.startswith("_") and name != "__version__") or name in FAKE_HELPERS:
            continue
        entry = api.get(name)
        if entry is None:
            problems.append(f"tensorrt.{name} does not exist")
            continue
        if isinstance(value, types.SimpleNamespace):  # an enum
            members = api.enum_members(name)
            problems += [f"{name}.{m} is not a member" for m in vars(value) if m not in members]
        elif isinstance(value, type):
            exposed[value] = name
            if api.canonical(name) != api.canonical(getattr(value, "_real", "")):
                problems.append(f"tensorrt.{name} is a stand-in for {getattr(value, '_real', '?')}")
        elif callable(value) and not _fake_params_fit(value, entry):
            problems.append(f"tensorrt.{name}{inspect.signature(value)} does not match {entry.params}")
    for cls in fake._classes:
        real = cls._real
        if api.canonical(real) is None:
            problems.append(f"{cls.__name__} stands for {real}, which does not exist")
            continue
        if cls in exposed and "__init__" in vars(cls):
            ctor = api.get(api.canonical(real))
            if not _fake_params_fit(vars(cls)["__init__"], ctor):
                problems.append(f"{real}{inspect.signature(vars(cls)['__init__'])} does not match {ctor.params}")
        for attr, value in vars(cls).items():
            if attr.startswith("_"):
                continue
            entry = api.member(real, attr)
            if entry is None:
                problems.append(f"{real}.{attr} does not exist (stand-in {cls.__name__}.{attr})")
            elif inspect.isfunction(value) != (entry.kind in ("method", "static", "function")):
                problems.append(f"{real}.{attr} is a {entry.kind}; the stand-in's is a {type(value).__name__}")
            elif inspect.isfunction(value) and not _fake_params_fit(value, entry):
                problems.append(f"{real}.{attr}{inspect.signature(value)} does not match {entry.params}")
    return problems


@pytest.mark.parametrize("version", list(names_tool.load_all()))
def test_fake_trt_matches_real_api(version):
    """The stand-in module defines only names the real TensorRT ``version`` has (same parameter names,
    methods stay methods), so dispatch tests cannot pass against an API that does not exist."""
    assert fake_trt_problems(FakeTRT(version, cuda=_FakeCuda()), names_tool.load_all()[version]) == []


def test_fake_trt_check_can_fail():
    fake = FakeTRT("11.4.0.106", cuda=_FakeCuda())
    by_real = {cls._real: cls for cls in fake._classes}
    fake.BuilderFlag.FP16 = _Member("BuilderFlag", "FP16", 0)  # removed in 11
    by_real["IBuilderConfig"].set_flags = lambda self, flags: None  # invented
    by_real["IBuilderConfig"].set_memory_pool_limit = lambda self, pool, size: None  # real: (pool, pool_size)
    by_real["ICudaEngine"].get_binding_shape = lambda self, name: ()  # removed in 10
    by_real["ICudaEngine"].num_io_tensors = lambda self: 2  # a property, not a method
    problems = fake_trt_problems(fake, names_tool.api_for("11.4.0.106"))
    assert problems == [
        "BuilderFlag.FP16 is not a member",
        "IBuilderConfig.set_memory_pool_limit(self, pool, size) does not match (('pool', 'pool_size'),)",
        "IBuilderConfig.set_flags does not exist (stand-in Config.set_flags)",
        "ICudaEngine.num_io_tensors is a property; the stand-in's is a function",
        "ICudaEngine.get_binding_shape does not exist (stand-in Engine.get_binding_shape)",
    ]


def _initializer_types(model) -> set[int]:
    return {init.data_type for init in model.graph.initializer}


# ---------------------------------------------------------------- dispatch (stand-in, runs here)
def test_precision_plan_per_version():
    """Pure dispatch table: 8.6 an explicit-batch network, 8.6 and 10.x BuilderFlag.FP16, 11.x an FP16 ONNX
    model; fp32 clears TF32."""
    p8 = trt_precision.precision_plan("8.6.1", "fp16")
    assert p8.network_flags == ("EXPLICIT_BATCH",) and p8.set_flags == ("FP16",) and not p8.fp16_onnx
    p8 = trt_precision.precision_plan("8.6.1.post1", "fp32")
    assert p8.network_flags == ("EXPLICIT_BATCH",) and p8.set_flags == () and p8.clear_flags == ("TF32",)
    p10 = trt_precision.precision_plan("10.13.3.9", "fp16")
    assert p10.set_flags == ("FP16",) and not p10.fp16_onnx and p10.clear_flags == ()
    p11 = trt_precision.precision_plan("11.4.0.106", "fp16")
    assert p11.set_flags == () and p11.fp16_onnx
    for v in ("10.0.1", "11.0.0"):
        p = trt_precision.precision_plan(v, "fp32")
        assert p.set_flags == () and p.clear_flags == ("TF32",) and not p.fp16_onnx
        assert p.network_flags == ()
    for old in ("8.5.3", "7.2.3", "9.2.0"):  # 9.x: an LLM-only release line, not supported
        with pytest.raises(LatoptError, match=r"not supported.*8\.6, 10\.x or 11\.x"):
            trt_precision.precision_plan(old, "fp32")
    with pytest.raises(LatoptError, match="fp32 or fp16"):
        trt_precision.precision_plan("10.3.0", "int8")


def test_v10_fp16_sets_builder_flag(onnx_model, cache_dir):
    """Stand-in module: on 10.x, fp16 = BuilderFlag.FP16 on the original fp32 ONNX file."""
    fake = FakeTRT("10.13.3.9")
    plan, info = trt_build.build_serialized(fake, onnx_model[0], precision="fp16",
                                              cache_path=trt_build.timing_cache_path("dev"))
    assert plan == b"PLAN"
    assert fake.named("set_flag") == [("set_flag", "FP16")]
    assert fake.named("clear_flag") == []
    assert fake.named("create_network") == [("create_network", 0)]
    (_, parsed_path, _), = fake.named("parse_from_file")
    assert Path(parsed_path) == onnx_model[0]
    assert fake.named("set_memory_pool_limit") == [("set_memory_pool_limit", "WORKSPACE", 1024 << 20)]
    assert "BuilderFlag.FP16" in info["mode"]


def _stand_in_modelopt(monkeypatch) -> list:
    """A ``modelopt.onnx.autocast`` stand-in (ModelOpt AutoCast installed): returns the list of its calls."""
    calls: list = []
    autocast = types.ModuleType("modelopt.onnx.autocast")
    autocast.convert_to_mixed_precision = lambda **kw: calls.append(kw)
    for name, mod in (("modelopt", types.ModuleType("modelopt")), ("modelopt.onnx", types.ModuleType("modelopt.onnx")),
                      ("modelopt.onnx.autocast", autocast)):
        monkeypatch.setitem(sys.modules, name, mod)
    return calls


def test_v11_fp16_parses_fp16_onnx(onnx_model, cache_dir, monkeypatch, tmp_path):
    """Stand-in module: on 11.x no FP16 flag is touched; the parser gets an FP16 copy of the whole graph with fp32
    I/O, always from onnxconverter-common (one conversion: ModelOpt AutoCast, installed here, is not used), with
    weights up to fp16's largest finite value kept."""
    pytest.importorskip("onnxconverter_common", reason="onnxconverter-common is not installed")
    import onnx
    from onnx import numpy_helper

    autocast_calls = _stand_in_modelopt(monkeypatch)
    net = _small_net()
    with torch.no_grad():
        net[0].weight[0, 0, 0, 0] = 3e4   # fp16 holds it (largest finite 65504); the converter's default clamps at 1e4
    path = tmp_path / "big.onnx"
    torch.onnx.export(net, (torch.randn(2, 3, 16, 16),), str(path), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    fake = FakeTRT("11.4.0.106")
    _, info = trt_build.build_serialized(fake, path, precision="fp16", cache_path=None)
    assert autocast_calls == []
    assert fake.named("set_flag") == [] and fake.named("clear_flag") == []
    (_, parsed_path, model), = fake.named("parse_from_file")
    assert Path(parsed_path) != path
    assert onnx.TensorProto.FLOAT16 in _initializer_types(model)
    assert onnx.TensorProto.FLOAT not in _initializer_types(model)
    io = list(model.graph.input) + list(model.graph.output)
    assert {t.type.tensor_type.elem_type for t in io} == {onnx.TensorProto.FLOAT}
    assert max(float(np.abs(numpy_helper.to_array(i)).max()) for i in model.graph.initializer) == 3e4
    assert info["fp16_converter"] == trt_fp16.FP16_CONVERTER == "onnxconverter_common.float16.convert_float_to_float16"


def test_fp16_conversion_is_recorded_in_the_environment(monkeypatch, cache_dir):
    """The LUT's environment (the backend's) names the fp16 conversion where one is made (TensorRT >= 11), with
    the converter's version; TensorRT 10's BuilderFlag.FP16 and fp32 make none."""
    from importlib import metadata

    pytest.importorskip("onnxconverter_common", reason="the fp16 converter is in the trt and dev extras, not the "
                                                       "core dependencies (the lower-bounds run has only those)")
    _stand_in_modelopt(monkeypatch)
    monkeypatch.setattr(runtime, "cuda_api", lambda index=0: _FakeCuda())
    monkeypatch.setitem(sys.modules, "tensorrt", FakeTRT("11.4.0.106"))
    env = trt_backend.create(_profile(precision="fp16")).environment()
    assert env["fp16_conversion"] == {**trt_fp16.FP16_CONVERSION,
                                      "onnxconverter_common": metadata.version("onnxconverter-common")}
    assert env["fp16_conversion"]["converter"] == trt_fp16.FP16_CONVERTER
    assert "fp16_conversion" not in trt_backend.create(_profile(precision="fp32")).environment()
    monkeypatch.setitem(sys.modules, "tensorrt", FakeTRT("10.13.3.9"))
    assert "fp16_conversion" not in trt_backend.create(_profile(precision="fp16")).environment()


def test_v11_fp32_clears_tf32_and_parses_original(onnx_model):
    fake = FakeTRT("11.0.0")
    trt_build.build_serialized(fake, onnx_model[0], precision="fp32", workspace_mib=64)
    assert fake.named("clear_flag") == [("clear_flag", "TF32")] and fake.named("set_flag") == []
    assert Path(fake.named("parse_from_file")[0][1]) == onnx_model[0]
    assert fake.named("set_memory_pool_limit")[0][2] == 64 << 20


def test_v11_fp16_without_converter_explains(onnx_model, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxconverter_common", None)
    _stand_in_modelopt(monkeypatch)   # installed, and still not the conversion used
    with pytest.raises(LatoptError, match="onnxconverter-common") as e:
        trt_build.build_serialized(FakeTRT("11.1.0"), onnx_model[0], precision="fp16")
    assert "\n" not in str(e.value)


def test_timing_cache_loaded_and_saved(onnx_model, cache_dir):
    """Stand-in module: the cache file is created, then fed back to create_timing_cache next build."""
    path = trt_build.timing_cache_path("titanx")
    assert path == cache_dir / "trt" / "titanx.cache"
    fake = FakeTRT("10.3.0")
    _, info = trt_build.build_serialized(fake, onnx_model[0], precision="fp32", cache_path=path)
    assert path.read_bytes() == b"+entry" and info["timing_cache"]["loaded_bytes"] == 0
    fake2 = FakeTRT("10.3.0")
    _, info2 = trt_build.build_serialized(fake2, onnx_model[0], precision="fp32", cache_path=path)
    assert fake2.named("create_timing_cache")[0] == ("create_timing_cache", b"+entry")
    assert fake2.named("set_timing_cache")[0] == ("set_timing_cache", b"+entry", False)
    assert path.read_bytes() == b"+entry+entry" and info2["timing_cache"]["loaded_bytes"] == len(b"+entry")
    # a cache the builder refuses (other GPU / version) is replaced by an empty one
    fake3 = FakeTRT("10.3.0", accept_cache=False)
    _, info3 = trt_build.build_serialized(fake3, onnx_model[0], precision="fp32", cache_path=path)
    assert [c[1] for c in fake3.named("set_timing_cache")] == [b"+entry+entry", b""]
    assert info3["timing_cache"]["loaded_bytes"] == 0 and path.read_bytes() == b"+entry"


def test_parser_errors_listed_on_one_line(onnx_model):
    with pytest.raises(LatoptError) as e:
        trt_build.build_serialized(FakeTRT("10.3.0", parse_ok=False), onnx_model[0], precision="fp32")
    msg = str(e.value)
    assert "\n" not in msg and "node Conv_0: unsupported" in msg and "node Conv_1" in msg


def test_dynamic_input_needs_shape_and_gets_profile(onnx_model):
    with pytest.raises(LatoptError, match="dynamic shape"):
        trt_build.build_serialized(FakeTRT("10.3.0", dynamic_input=True), onnx_model[0], precision="fp32")
    fake = FakeTRT("10.3.0", dynamic_input=True)
    trt_build.build_serialized(fake, onnx_model[0], precision="fp32", input_shape=(4, 3, 16, 16))
    shape = (4, 3, 16, 16)
    assert fake.named("add_optimization_profile") == [("add_optimization_profile", ("x", shape, shape, shape))]
    with pytest.raises(LatoptError, match="does not fit"):
        trt_build.build_serialized(FakeTRT("10.3.0"), onnx_model[0], precision="fp32", input_shape=(2, 3, 8, 8))


def test_missing_tensorrt_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    with pytest.raises(LatoptError) as e:
        get_backend(load_device("gpu-trt-fp16"))  # the real dispatch from the profile
    msg = str(e.value)
    assert "TensorRT is not installed" in msg and "latopt[trt]" in msg and "'cpu'" in msg and "\n" not in msg, msg
    assert e.value.param == "device"  # the CLI adds the flag that chose the profile


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_no_gpu_is_one_line(monkeypatch):
    """Stand-in tensorrt module, real CUDA discovery (there is no GPU here)."""
    monkeypatch.setitem(sys.modules, "tensorrt", FakeTRT("10.3.0"))
    monkeypatch.setitem(sys.modules, "pycuda", None)
    monkeypatch.setitem(sys.modules, "pycuda.driver", None)
    with pytest.raises(LatoptError) as e:
        trt_backend.create(_profile())
    msg = str(e.value)
    assert msg.startswith("TensorRT 10.3.0 is installed but no CUDA GPU") and "device profile 'cpu'" in msg
    assert "\n" not in msg


class _FakeEvent:
    def __init__(self, log: list) -> None:
        self.log = log

    def record(self, stream) -> None:
        self.log.append(("record", stream))

    def synchronize(self) -> None:
        self.log.append("wait")


class _FakeCuda(runtime.CudaApi):
    """Host-memory stand-in for the CUDA API (device pointers are ids into a dict of numpy arrays); its
    events only log, so :meth:`runtime.CudaApi.time_ms`, latopt's CUDA-event timer, runs as it is."""

    name = "fake"
    stream = "the-stream"

    def __init__(self, gpu: str = "NVIDIA H200", sm: tuple[int, int] = (9, 0)) -> None:
        self.gpu, self.sm, self.mem, self.closed, self.freed, self.log = gpu, sm, {}, False, [], []

    def device_name(self):
        return self.gpu

    def compute_capability(self):
        return self.sm

    def alloc(self, shape, dtype):
        buf = np.zeros(shape, dtype)
        self.mem[id(buf)] = buf
        return buf

    def free(self, buf):
        self.freed.append(self.mem.pop(id(buf)))

    def ptr(self, buf):
        return id(buf)

    def stream_handle(self):
        return 1234

    def htod(self, buf, host):
        buf[...] = host

    def dtoh(self, buf, shape, dtype):
        return buf.copy()

    def synchronize(self):
        pass

    def _event(self):
        return _FakeEvent(self.log)

    def _elapsed_ms(self, start, end):
        return 0.5

    def driver_version(self):
        return "555.42"

    def close(self):
        self.closed = True


def test_cuda_event_timer_brackets_the_call_on_the_stream():
    cuda = _FakeCuda()
    assert cuda.time_ms(lambda: cuda.log.append("inference")) == 0.5
    assert cuda.log == [("record", "the-stream"), "inference", ("record", "the-stream"), "wait"]


def test_driver_version_is_one_nvidia_smi_query(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "$@" > "${0%/*}/args"; echo " 555.42 "\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert runtime.driver_version(1) == "555.42"
    assert (tmp_path / "args").read_text().split() == ["--query-gpu=driver_version", "--format=csv,noheader",
                                                       "-i", "1"]
    smi.write_text("#!/bin/sh\nexit 9\n")
    assert runtime.driver_version(0) is None
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert runtime.driver_version(0) is None


def test_gpu_mismatch_names_live_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", FakeTRT("10.3.0"))
    fake_cuda = _FakeCuda("NVIDIA H200")
    monkeypatch.setattr(runtime, "cuda_api", lambda index=0: fake_cuda)
    with pytest.raises(LatoptError) as e:
        get_backend(load_device("titanx"))
    msg = str(e.value)
    assert "'NVIDIA H200'" in msg and "device gpu-trt-fp16" in msg and "\n" not in msg
    assert fake_cuda.closed
    backend = trt_backend.create(_profile(expected_gpu="H200"))
    env = backend.environment()
    assert env["gpu"] == "NVIDIA H200" and env["tensorrt"] == "10.3.0" and env["driver"] == "555.42"


def test_prepare_exports_module_and_builds(monkeypatch, cache_dir):
    """Stand-in tensorrt + CUDA: prepare() exports an nn.Module with latopt's exporter at the given shape,
    builds with the profile's precision/workspace/cache, and hands the plan to the runner."""
    fake = FakeTRT("10.3.0")
    monkeypatch.setitem(sys.modules, "tensorrt", fake)
    monkeypatch.setattr(runtime, "cuda_api", lambda index=0: _FakeCuda())
    got: dict[str, Any] = {}
    monkeypatch.setattr(runtime, "TrtEngineRunner", lambda plan, **kw: got.update(plan=plan, **kw) or "runner")
    backend = trt_backend.create(_profile(precision="fp16", workspace_mib=256))
    assert backend.prepare(_small_net(), (2, 3, 16, 16)) == "runner"
    assert got["plan"] == b"PLAN" and got["input_shape"] == (2, 3, 16, 16) and got["cuda"] is backend.cuda
    (_, _, model), = fake.named("parse_from_file")
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [2, 3, 16, 16]
    assert fake.named("set_flag") == [("set_flag", "FP16")]
    assert fake.named("set_memory_pool_limit")[0][2] == 256 << 20
    assert backend.cache_path == cache_dir / "trt" / "test-trt-trt10.3.0.cache"  # per TensorRT version
    assert backend.cache_path.read_bytes() == b"+entry"
    assert backend.last_build["timing_cache"]["saved_bytes"] == len(b"+entry")


def test_gpu_matches():
    from latopt.latency.backends import gpu_matches

    assert gpu_matches("NVIDIA TITAN X (Pascal)", "NVIDIA TITAN X (Pascal)")
    assert gpu_matches("NVIDIA TITAN X (Pascal)", "titan x (pascal)")
    assert gpu_matches("NVIDIA A100-SXM4-80GB", "A100")
    assert gpu_matches("NVIDIA A100-SXM4-80GB", "nvidia  a100")
    assert gpu_matches("NVIDIA GeForce RTX 4090", "*RTX 40*")
    assert gpu_matches("anything", None) and gpu_matches("anything", "any") and gpu_matches("anything", "*")
    assert not gpu_matches("NVIDIA TITAN Xp", "NVIDIA TITAN X (Pascal)")
    assert not gpu_matches("NVIDIA H200", "NVIDIA TITAN X (Pascal)")
    assert not gpu_matches("NVIDIA GeForce RTX 3090", "*RTX 40*")


def test_engine_runner_binds_by_name(monkeypatch):
    """Stand-in engine + host-memory CUDA: checks latopt's binding code (names, opt shape, addresses,
    execute_async_v3 on our stream), not TensorRT. The fake 'engine' computes y = 2x + 1."""
    fake_cuda = _FakeCuda()
    fake = FakeTRT("10.3.0", cuda=fake_cuda)
    calls, addr = fake.calls, fake._addr
    monkeypatch.setitem(sys.modules, "tensorrt", fake)
    r = runtime.TrtEngineRunner(b"PLAN", cuda=fake_cuda)
    assert ("set_input_shape", "x", (3, 4)) in calls  # profile "opt" shape by default
    assert set(addr) == {"x", "y"}
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(r.run(x), 2 * x + 1)
    assert calls[-1] == ("execute_async_v3", 1234)
    assert r.time_events_ms(3) == [0.5, 0.5, 0.5] and r.time_ms() == 0.5
    with pytest.raises(LatoptError, match="expects"):
        r.run(np.zeros((2, 4), np.float32))
    r.close()
    assert len(fake_cuda.freed) == 2 and not fake_cuda.closed  # shared CUDA api is not closed by the runner
    with pytest.raises(LatoptError, match="could not deserialize"):
        runtime.TrtEngineRunner(b"garbage", cuda=_FakeCuda())


# ------------------------------------------------------------------ TensorRT 8.6 and the GPU paths (stand-in)
def test_v86_builds_explicit_batch_network(onnx_model, cache_dir):
    """Stand-in 8.6 module: the network is created explicit-batch (its ONNX parser needs it) and fp16 is
    BuilderFlag.FP16 on the fp32 ONNX file; fp32 clears TF32."""
    fake = FakeTRT("8.6.1")
    explicit = int(fake.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    _, info = trt_build.build_serialized(fake, onnx_model[0], precision="fp16")
    assert fake.named("create_network") == [("create_network", 1 << explicit)]
    assert fake.named("set_flag") == [("set_flag", "FP16")] and fake.named("clear_flag") == []
    assert Path(fake.named("parse_from_file")[0][1]) == onnx_model[0] and "BuilderFlag.FP16" in info["mode"]
    fake = FakeTRT("8.6.1")
    trt_build.build_serialized(fake, onnx_model[0], precision="fp32")
    assert fake.named("create_network") == [("create_network", 1 << explicit)]
    assert fake.named("clear_flag") == [("clear_flag", "TF32")] and fake.named("set_flag") == []


@pytest.mark.parametrize("version,sm,ok,fix", [
    ("8.6.1", (6, 1), True, None),                       # TITAN X (Pascal): 8.6 is its last TensorRT
    ("8.6.1", (5, 0), True, None),
    ("8.6.1", (9, 0), True, None),
    ("8.6.1", (12, 0), False, "tensorrt>=10.8"),          # Blackwell: newer than 8.6
    ("10.13.3.9", (6, 1), False, "tensorrt==8.6.1"),
    ("10.4.0", (7, 0), True, None),                      # Volta deprecated in 10.0-10.4, still there
    ("10.5.0", (7, 0), False, "tensorrt>=10.0,<10.5"),
    ("10.7.0", (10, 0), False, "tensorrt>=10.8"),
    ("10.13.3.9", (12, 0), True, None),
    ("11.4.0.106", (7, 5), True, None),
    ("11.4.0.106", (6, 1), False, "tensorrt==8.6.1"),
    ("11.4.0.106", (3, 7), False, "use the device profile gpu-torch or cpu"),
])
def test_compute_capability_table(version, sm, ok, fix):
    if ok:   # runs: no error, and the release's row of SM_SUPPORT holds the GPU
        assert trt_precision.check_compute_capability(version, sm, "GPU") is None
        lo, hi = trt_precision.sm_range(version)
        assert lo <= sm and (hi is None or sm <= hi)
        return
    with pytest.raises(LatoptError) as e:
        trt_precision.check_compute_capability(version, sm, "NVIDIA TITAN X (Pascal)")
    msg = str(e.value)
    assert "\n" not in msg and fix in msg and f"compute capability {sm[0]}.{sm[1]}" in msg
    assert msg.startswith(f"TensorRT {version} does not run on NVIDIA TITAN X (Pascal)")


def test_no_fp16_where_tensorrt_lists_none():
    trt_precision.check_compute_capability("8.6.1", (6, 0), "Tesla P100", "fp16")  # P100: full-rate FP16
    for sm in ((6, 1), (5, 2)):
        with pytest.raises(LatoptError, match=rf"no fp16 .*capability {sm[0]}\.{sm[1]}") as e:
            trt_precision.check_compute_capability("8.6.1", sm, "GPU", "fp16")
        assert "\n" not in str(e.value) and "use precision fp32 (the device profile titanx)" in str(e.value)
        assert e.value.param == "precision"
        trt_precision.check_compute_capability("8.6.1", sm, "GPU", "fp32")


def test_create_refuses_a_gpu_the_installed_tensorrt_cannot_run(monkeypatch, cache_dir):
    """titanx with TensorRT 10 (no Pascal): one line naming TensorRT 8.6; with 8.6 the backend opens."""
    fake_cuda = _FakeCuda("NVIDIA TITAN X (Pascal)", sm=(6, 1))
    monkeypatch.setattr(runtime, "cuda_api", lambda index=0: fake_cuda)
    monkeypatch.setitem(sys.modules, "tensorrt", FakeTRT("10.13.3.9"))
    with pytest.raises(LatoptError) as e:
        get_backend(load_device("titanx"))
    assert "pip install 'tensorrt==8.6.1'" in str(e.value) and "\n" not in str(e.value)
    assert fake_cuda.closed
    monkeypatch.setitem(sys.modules, "tensorrt", FakeTRT("8.6.1"))
    backend = get_backend(load_device("titanx"))
    env = backend.environment()
    assert env["tensorrt"] == "8.6.1" and env["compute_capability"] == "6.1"
    assert "fp32" in env["precision_mode"]
    backend.close()
    with pytest.raises(LatoptError, match="no fp16 on NVIDIA TITAN X"):  # gpu-trt-fp16 on the same card
        get_backend(load_device("gpu-trt-fp16"))


@pytest.mark.parametrize("bad_cache", ["none", "raise"])
def test_unreadable_timing_cache_starts_afresh(onnx_model, cache_dir, bad_cache, capsys):
    """A cache TensorRT cannot parse (create_timing_cache gives None or raises: corrupt, or written by
    another TensorRT version) never stops a build: an empty cache is used, a note says so, and the cache
    written after the build replaces the bad one."""
    path = trt_build.timing_cache_path("titanx", "10.3.0")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"garbage")
    fake = FakeTRT("10.3.0", bad_cache=bad_cache)
    plan, info = trt_build.build_serialized(fake, onnx_model[0], precision="fp32", cache_path=path)
    assert plan == b"PLAN"
    assert [c[1] for c in fake.named("set_timing_cache")] == [b""]
    assert info["timing_cache"]["loaded_bytes"] == 0 and "started afresh" in info["timing_cache"]["note"]
    assert "latopt: warning: timing cache" in capsys.readouterr().err
    assert path.read_bytes() == b"+entry"


@pytest.mark.parametrize("why", ["parent is a file", "disk full"])
def test_unwritable_timing_cache_keeps_the_engine(onnx_model, tmp_path, monkeypatch, capsys, why):
    """A timing cache that cannot be written back after the build (a cache directory that cannot be made, as
    under a read-only or missing home; a full disk) never loses the engine: the plan is returned, the build
    info and a warning say the cache was not saved."""
    from latopt.files.artifacts import OutputError

    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache directory should be")
    monkeypatch.setenv("LATOPT_CACHE_DIR", str(blocker))
    if why == "disk full":
        monkeypatch.setenv("LATOPT_CACHE_DIR", str(tmp_path / "writable"))

        def full(path, data):
            raise OutputError(path, "[Errno 28] No space left on device")

        monkeypatch.setattr(trt_build, "write_bytes_atomic", full)
    path = trt_build.timing_cache_path("titanx", "10.3.0")
    plan, info = trt_build.build_serialized(FakeTRT("10.3.0"), onnx_model[0], precision="fp32", cache_path=path)
    assert plan == b"PLAN"
    cache = info["timing_cache"]
    assert cache["saved_bytes"] == 0 and cache["loaded_bytes"] == 0
    assert cache["note"].startswith(f"timing cache {path} not saved (") and "the engine is built" in cache["note"]
    assert "latopt: warning: timing cache" in capsys.readouterr().err
    assert not path.exists()


def test_timing_cache_directory_follows_xdg(monkeypatch, tmp_path, onnx_model):
    """$LATOPT_CACHE_DIR, else platformdirs' user cache directory: on Linux $XDG_CACHE_HOME/latopt (absolute only,
    as the XDG rule says), else ~/.cache/latopt; no home directory at all (no HOME, no password entry): no timing
    cache, and the build goes on without one."""
    monkeypatch.delenv("LATOPT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    name = "titanx-trt10.3.0.cache"
    assert trt_build.timing_cache_path("titanx", "10.3.0") == tmp_path / "xdg" / "latopt" / "trt" / name
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert trt_build.timing_cache_path("titanx", "10.3.0") == tmp_path / "home" / ".cache" / "latopt" / "trt" / name
    monkeypatch.setenv("LATOPT_CACHE_DIR", str(tmp_path / "own"))
    assert trt_build.timing_cache_path("titanx", "10.3.0") == tmp_path / "own" / "trt" / name
    monkeypatch.delenv("LATOPT_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME")

    def no_passwd_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.delenv("HOME")
    monkeypatch.setattr(pwd, "getpwuid", no_passwd_entry)
    assert trt_build.cache_dir() is None and trt_build.timing_cache_path("titanx", "10.3.0") is None
    monkeypatch.setattr(runtime, "cuda_api", lambda index=0: _FakeCuda())
    monkeypatch.setitem(sys.modules, "tensorrt", FakeTRT("10.3.0"))
    backend = trt_backend.create(_profile())
    assert backend.cache_path is None and backend.environment()["timing_cache"] is None
    assert backend.build(onnx_model[0], (2, 3, 16, 16)) == b"PLAN"
    assert backend.last_build["timing_cache"]["saved_bytes"] == 0


def test_timing_cache_is_per_tensorrt_version(cache_dir):
    assert trt_build.timing_cache_path("titanx", "8.6.1") != trt_build.timing_cache_path("titanx", "10.3.0")
    assert trt_build.timing_cache_path("titanx", "8.6.1").name == "titanx-trt8.6.1.cache"


def test_one_tensorrt_logger_for_builds_and_runners(onnx_model, monkeypatch):
    fake_cuda = _FakeCuda()
    fake = FakeTRT("10.3.0", cuda=fake_cuda)
    monkeypatch.setitem(sys.modules, "tensorrt", fake)
    monkeypatch.setattr(runtime.trt, "_TRT_LOGGER", None)
    for _ in range(2):
        trt_build.build_serialized(fake, onnx_model[0], precision="fp32")
    runtime.TrtEngineRunner(b"PLAN", cuda=fake_cuda).close()
    assert fake.named("Logger") == [("Logger", "WARNING")]
    other = FakeTRT("11.4.0.106")  # another tensorrt module (a test's stand-in): its own logger
    trt_build.build_serialized(other, onnx_model[0], precision="fp32")
    assert other.named("Logger") == [("Logger", "WARNING")]


def test_engine_runner_checks_shape_against_profile_and_bindings(monkeypatch):
    """set_input_shape's result is checked: outside the optimisation profile is one line naming its min and
    max (TensorRT would leave negative shapes, and the buffers would be sized from them)."""
    fake_cuda = _FakeCuda()
    monkeypatch.setitem(sys.modules, "tensorrt", FakeTRT("10.3.0", cuda=fake_cuda))
    with pytest.raises(LatoptError) as e:
        runtime.TrtEngineRunner(b"PLAN", input_shape=(9, 4), cuda=fake_cuda)
    msg = str(e.value)
    assert "\n" not in msg and "[9, 4]" in msg and "min [1, 4] to max [8, 4]" in msg
    assert fake_cuda.mem == {}  # nothing allocated from the refused shape
    runtime.TrtEngineRunner(b"PLAN", input_shape=(8, 4), cuda=fake_cuda).close()
    monkeypatch.setitem(sys.modules, "tensorrt", FakeTRT("10.3.0", cuda=fake_cuda, bind_ok=False))
    with pytest.raises(LatoptError, match="refused the device address of tensor 'x'"):
        runtime.TrtEngineRunner(b"PLAN", cuda=fake_cuda)
    assert fake_cuda.mem == {}  # the failed runner freed what it had allocated


def test_backend_runs_an_engine_file_without_parsing_it(monkeypatch, tmp_path, cache_dir):
    """prepare() on a serialized engine loads it with the runner on the backend's CUDA context; it is never
    handed to the ONNX parser."""
    fake_cuda = _FakeCuda()
    fake = FakeTRT("10.3.0", cuda=fake_cuda)
    monkeypatch.setitem(sys.modules, "tensorrt", fake)
    monkeypatch.setattr(runtime, "cuda_api", lambda index=0: fake_cuda)
    backend = trt_backend.create(_profile())
    (tmp_path / "model.engine").write_bytes(b"PLAN")
    runner = backend.prepare(tmp_path / "model.engine", (2, 4))
    assert isinstance(runner, runtime.TrtEngineRunner) and runner.cuda is fake_cuda
    assert fake.named("parse_from_file") == [] and fake.named("deserialize") == [("deserialize", b"PLAN")]
    x = np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(runner.run(x), 3 * x)
    runner.close()


def test_export_builds_the_engine_with_the_open_backend(monkeypatch, tmp_path, cache_dir):
    """write_engine builds with the backend export opened (one CUDA context), not a second one."""
    import types

    from latopt.export.engine import write_engine

    opened: list[_FakeCuda] = []

    def cuda_api(index=0):
        opened.append(_FakeCuda())
        return opened[-1]

    fake = FakeTRT("10.3.0", input_shape=(1, 3, 16, 16))  # what export's static batch-1 ONNX declares
    monkeypatch.setitem(sys.modules, "tensorrt", fake)
    monkeypatch.setattr(runtime, "cuda_api", cuda_api)
    backend = trt_backend.create(_profile())
    plan = types.SimpleNamespace(folded=_small_net(), resolution=16)
    out = tmp_path / "out"
    out.mkdir()
    path = write_engine(backend, plan, out, lambda msg: None)
    assert path == out / "model.engine" and path.read_bytes() == b"PLAN"
    assert len(opened) == 1 and not opened[0].closed
    assert sorted(p.name for p in out.iterdir()) == ["model.engine"]  # the static ONNX is removed


def test_engine_on_another_backend_names_the_device_parameter():
    """Export's engine on a device that is not TensorRT: the library error names the parameter ``device``; the
    command line adds the flag that sets it."""
    from latopt.cli import build_parser, flag_for
    from latopt.export.engine import open_backend

    with pytest.raises(LatoptError) as e:
        open_backend(load_device("cpu"), "fp32", engine=True, measure=False)
    msg = str(e.value)
    assert "TensorRT" in msg and "'cpu'" in msg and "onnxruntime" in msg and "titanx" in msg, msg
    assert e.value.param == "device" and flag_for(build_parser(), "export", e.value.param) == "--device"


class _FakePycuda(types.ModuleType):
    """pycuda.driver stand-in: records pushes and pops of the one primary context."""

    def __init__(self) -> None:
        super().__init__("pycuda.driver")
        log = self.log = []

        class Ctx:
            def push(self):
                log.append("push")

            def detach(self):
                log.append("detach")

        class Device:
            @staticmethod
            def count():
                return 1

            def __init__(self, index):
                pass

            def retain_primary_context(self):
                return Ctx()

        class Context:
            @staticmethod
            def pop():
                log.append("pop")

        class Stream:
            def synchronize(self):
                log.append("sync")

        self.Device, self.Context, self.Stream = Device, Context, Stream
        self.init = lambda: None


def test_pycuda_context_popped_on_close_and_at_exit(monkeypatch):
    """PycudaApi pushes the primary context; close() pops it once (idempotent) and is registered with atexit,
    so an owner that never closes it does not leave pycuda to abort the interpreter at exit."""
    import atexit

    drv = _FakePycuda()
    pkg = types.ModuleType("pycuda")
    pkg.driver = drv
    monkeypatch.setitem(sys.modules, "pycuda", pkg)
    monkeypatch.setitem(sys.modules, "pycuda.driver", drv)
    registered: list[Any] = []
    monkeypatch.setattr(atexit, "register", lambda fn, *a, **k: registered.append(fn) or fn)
    monkeypatch.setattr(atexit, "unregister", lambda fn: registered.remove(fn) if fn in registered else None)
    api = runtime.PycudaApi(0)
    assert drv.log == ["push"] and registered == [api.close]
    registered[0]()  # what atexit runs for an owner that never closed it
    assert drv.log == ["push", "sync", "pop", "detach"] and registered == []
    api.close()
    assert drv.log.count("pop") == 1  # idempotent


def test_pycuda_closes_the_runners_left_open_before_its_context_pops(monkeypatch):
    """A TensorRT runner nobody closed: what atexit runs (PycudaApi.close) releases its execution context,
    engine and buffers while the context is still pushed, then pops it; at exit they would otherwise be
    destroyed after the pop, TensorRT freeing memory without a context. Stand-in pycuda and tensorrt."""
    import atexit
    import weakref

    drv = _FakePycuda()

    class Buffer(int):
        def free(self):
            drv.log.append("free")

    addresses = iter(range(1, 100))
    drv.mem_alloc = lambda nbytes: Buffer(next(addresses))
    drv.memcpy_htod = lambda buf, host: None
    engine: list[Any] = []
    drv.Context.pop = staticmethod(lambda: drv.log.append(("pop", "engine alive" if engine[0]() else "engine freed")))
    pkg = types.ModuleType("pycuda")
    pkg.driver = drv
    monkeypatch.setitem(sys.modules, "pycuda", pkg)
    monkeypatch.setitem(sys.modules, "pycuda.driver", drv)
    monkeypatch.setitem(sys.modules, "tensorrt", FakeTRT("10.3.0"))
    registered: list[Any] = []
    monkeypatch.setattr(atexit, "register", lambda fn, *a, **k: registered.append(fn) or fn)
    monkeypatch.setattr(atexit, "unregister", lambda fn: registered.remove(fn) if fn in registered else None)
    api = runtime.PycudaApi(0)
    runner = runtime.TrtEngineRunner(b"PLAN", cuda=api)  # the backend's shared API, as in a profile
    engine.append(weakref.ref(runner.engine))
    del drv.log[:]
    registered[0]()  # the owner never closed either
    assert drv.log[-2:] == [("pop", "engine freed"), "detach"] and drv.log.count("free") == 2
    assert runner.engine is None and runner.buffers == {} and registered == []
    runner.close()  # idempotent
    assert drv.log.count("free") == 2


def test_pycuda_context_popped_at_interpreter_exit(tmp_path):
    """A real interpreter that never closes its PycudaApi (stand-in pycuda package on the path): atexit pops."""
    pkg = tmp_path / "pycuda"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "driver.py").write_text(
        "import sys\nstack = []\ndef init(): pass\n"
        "class Ctx:\n    def push(self): stack.append(self)\n    def detach(self): pass\n"
        "class Device:\n    count = staticmethod(lambda: 1)\n    def __init__(self, i): pass\n"
        "    def retain_primary_context(self): return Ctx()\n"
        "class Context:\n    pop = staticmethod(lambda: stack.pop())\n"
        "class Stream:\n    def synchronize(self): pass\n"
        "import atexit\n"
        "atexit.register(lambda: print('context stack', len(stack), file=sys.stderr))\n")
    code = "from latopt import runtime; api = runtime.PycudaApi(0); print('pushed')"
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "pushed" and "context stack 0" in out.stderr


# --------------------------------------------------------------- runtime on .onnx (real, runs here)
def _run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "latopt.runtime", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=env)


# the latopt modules the runtime may import (each imports only the standard library and numpy)
RUNTIME_FLOOR = ("latopt", "latopt.errors", "latopt.files", "latopt.files.artifacts", "latopt.signals")
HEAVY = ("torch", "torchvision", "timm", "optuna", "onnx", "onnxruntime", "tensorrt", "pycuda", "pydantic", "scipy",
         "yaml")


@pytest.mark.parametrize("module", ["latopt.runtime", "latopt.runtime.cli"])
def test_runtime_import_is_light(module):
    """The deploy runner (its library and its command line) imports none of the training stack nor a runtime
    library (those come when a model is loaded), and of latopt only its floor modules and itself."""
    code = ("import json, sys\n"
            f"import {module}\n"
            f"heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
            "mine = sorted(m for m in sys.modules if m.split('.')[0] == 'latopt')\n"
            "print(json.dumps([heavy, mine]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    heavy, mine = json.loads(out.stdout)
    assert heavy == []
    assert "latopt.runtime.runner" in mine  # the check sees latopt's modules
    assert [m for m in mine if m not in RUNTIME_FLOOR and not m.startswith("latopt.runtime")] == []


def test_runtime_cli_runs_onnx(tmp_path):
    path, net = _export(tmp_path / "dyn.onnx", dynamic_batch=True)
    x = np.random.default_rng(1).standard_normal((3, 3, 16, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    res = _run_cli(str(path), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy"), "--bench", "3")
    assert res.returncode == 0, res.stderr
    assert "wall_median_ms" in res.stdout and "output [3, 10]" in res.stdout
    with torch.no_grad():
        ref = net(torch.from_numpy(x)).numpy()
    y = np.load(tmp_path / "y.npy")
    assert y.shape == (3, 10)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5 * float(np.abs(ref).max()))


def test_runtime_ort_runner_api(onnx_model):
    path, net = onnx_model
    with runtime.load(path, seed=3) as r:
        assert isinstance(r, runtime.OrtRunner) and r.input_shape == (2, 3, 16, 16)
        r()
        x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
        with torch.no_grad():
            ref = net(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(r.run(x), ref, rtol=1e-4, atol=1e-5)
        stats = runtime.bench(r, 3, warmup=1)
        assert stats["wall_q1_ms"] <= stats["wall_median_ms"] <= stats["wall_q3_ms"]
    with pytest.raises(LatoptError, match="does not fit"):
        runtime.load(path, input_shape=(1, 3, 16, 16))


@pytest.mark.parametrize("case", ["missing", "missing-engine", "suffix", "corrupt", "engine-no-trt", "bad-npy"])
def test_runtime_cli_errors(tmp_path, case, onnx_model):
    if case == "missing":
        args, want = [str(tmp_path / "nope.onnx")], "does not exist"
    elif case == "missing-engine":
        args, want = [str(tmp_path / "nope.engine")], "TensorRT engine"
    elif case == "suffix":
        (tmp_path / "m.pt").write_bytes(b"x")
        args, want = [str(tmp_path / "m.pt")], "unknown model type"
    elif case == "corrupt":
        (tmp_path / "bad.onnx").write_bytes(b"this is not protobuf")
        args, want = [str(tmp_path / "bad.onnx")], "ONNX Runtime cannot load"
    elif case == "engine-no-trt":
        if importlib.util.find_spec("tensorrt") is not None:
            pytest.skip("tensorrt is installed here; this checks the message without it")
        (tmp_path / "m.engine").write_bytes(b"plan")
        args, want = [str(tmp_path / "m.engine")], "TensorRT is not installed: pip install tensorrt on a machine"
    else:
        (tmp_path / "x.npy").write_bytes(b"not npy")
        args, want = [str(onnx_model[0]), "--input", str(tmp_path / "x.npy")], "not a valid .npy"
    res = _run_cli(*args)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("latopt.runtime: error:") and want in lines[0], res.stderr


def test_fp16_onnx_conversion_matches_fp32(onnx_model, tmp_path):
    """The FP16 model TensorRT 11 would parse, checked for real with ONNX Runtime (CPU, fp16 kernels)."""
    pytest.importorskip("onnxconverter_common", reason="onnxconverter-common is not installed")
    path, _ = onnx_model
    dst = tmp_path / "fp16.onnx"
    trt_fp16.to_fp16_onnx(path, dst)
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    with runtime.load(path) as r32, runtime.load(dst) as r16:
        a, b = r32.run(x), r16.run(x)
    assert b.dtype == np.float32
    scale = float(np.abs(a).max())
    assert float(np.abs(a - b).max()) <= 1e-2 * scale


# ---------------------------------------------------------------------- real TensorRT on a GPU
def _ort_reference(path: Path, x: np.ndarray) -> np.ndarray:
    with runtime.load(path) as r:
        return r.run(x)


@pytest.mark.tensorrt
@pytest.mark.parametrize("precision,rel_tol", [("fp32", 1e-4), ("fp16", 2e-2)])
def test_trt_engine_matches_onnxruntime(onnx_model, cache_dir, precision, rel_tol):
    path, _ = onnx_model
    backend = trt_backend.create(_profile(precision=precision))
    try:
        runner = backend.prepare(path, (2, 3, 16, 16))
        x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
        ref = _ort_reference(path, x)
        got = runner.run(x)
        err = float(np.abs(got - ref).max()) / float(np.abs(ref).max())
        assert got.shape == ref.shape and err <= rel_tol, f"{precision}: relative error {err:.3g}"
        for _ in range(5):
            runner()  # synchronised inference on the fixed input
        times = runner.time_events_ms(10) + [runner.time_ms()]
        assert len(times) == 11 and all(np.isfinite(t) and t > 0 for t in times)
        runner.close()
        assert backend.cache_path.stat().st_size > 0
        env = backend.environment()
        assert env["tensorrt"] and env["gpu"]
    finally:
        backend.close()


@pytest.mark.tensorrt
def test_trt_module_input_and_engine_file_runtime(tmp_path, cache_dir):
    net = _small_net()
    backend = trt_backend.create(_profile())
    try:
        runner = backend.prepare(net, (2, 3, 16, 16))
        x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
        with torch.no_grad():
            ref = net(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(runner.run(x), ref, rtol=1e-3, atol=1e-4 * float(np.abs(ref).max()))
        runner.close()
        onnx_path, net = _export(tmp_path / "net.onnx")
        engine = trt_build.build_engine(backend, onnx_path, tmp_path / "net.engine")
    finally:
        backend.close()
    with runtime.load(engine) as r:
        np.testing.assert_allclose(r.run(x), _ort_reference(onnx_path, x), rtol=1e-3, atol=1e-4)
    res = _run_cli(str(engine), "--bench", "5")
    assert res.returncode == 0, res.stderr
    assert "gpu_median_ms" in res.stdout
