"""Device profiles: the shipped YAML files parse, bad files and unknown names are one clear LatoptError."""

from __future__ import annotations

from pathlib import Path

import pytest

from latopt.errors import LatoptError
from latopt.latency.backends import backend_names
from latopt.latency.devices import SHIPPED_PROFILES, DeviceProfile, list_devices, load_device, profiles_dir
from latopt.latency.lut import default_lut_path
from latopt.latency.timing import TimingPolicy

pytestmark = pytest.mark.floor   # .ci/run's lower-bounds run selects these tests

SHIPPED = ("cpu", "cpu-int8", "titanx", "gpu-trt-fp16", "gpu-torch", "cpu-torch", "flops", "params", "uniform")


def test_shipped_profiles_load() -> None:
    assert set(SHIPPED) <= set(list_devices())
    for name in SHIPPED:
        p = load_device(name)
        assert isinstance(p, DeviceProfile) and p.name == name
        assert p.batch == 1 and p.min_repeats <= p.max_repeats
    cpu = load_device("cpu")
    assert (cpu.backend, cpu.provider, cpu.precision, cpu.threads, cpu.clock) == (
        "onnxruntime", "CPUExecutionProvider", "fp32", 1, "thread")
    assert load_device("titanx").expected_gpu == "TITAN X (Pascal)"
    assert load_device("titanx").backend == "tensorrt" and load_device("gpu-trt-fp16").precision == "fp16"
    assert load_device("gpu-torch").backend == "torch" and load_device("gpu-torch").cuda_device == 0
    assert load_device("gpu-torch").is_gpu and not cpu.is_gpu
    assert isinstance(cpu, TimingPolicy) and cpu.clock == "thread"  # a profile is the timing policy compare() takes
    assert cpu.budget_s == 25.0 and type(cpu.budget_s) is float  # `budget_s: 25`: a float key takes an integer
    # cpu-int8: the cpu profile with every timed network ONNX Runtime static INT8
    int8 = load_device("cpu-int8")
    same = set(DeviceProfile.model_fields) - {"name", "description", "precision", "path"}
    assert int8.precision == "int8" and {k: getattr(int8, k) for k in same} == {k: getattr(cpu, k) for k in same}


def test_readme_documents_every_key() -> None:
    text = (SHIPPED_PROFILES / "README.md").read_text()
    for name in DeviceProfile.model_fields:
        if name != "path":
            assert f"`{name}`" in text, f"profiles/README.md does not document {name}"


def test_unknown_device_lists_known_ones() -> None:
    with pytest.raises(LatoptError, match="unknown device 'nope'.*cpu.*gpu-torch"):
        load_device("nope")


def test_profile_from_path_and_validation(tmp_path) -> None:
    p = tmp_path / "mine.yaml"
    p.write_text("name: mine\nbackend: onnxruntime\nthreads: 1\nmin_repeats: 3\nmax_repeats: 4\n")
    d = load_device(str(p))
    assert d.name == "mine" and d.max_repeats == 4 and d.path == str(p)

    bad = {
        "name: x\nbackend: nope\n": "key 'backend' is 'nope'; choose one of " + ", ".join(backend_names()),
        "name: x\nprecision: int4\n": "key 'precision' is 'int4'; choose one of fp32, fp16, int8",
        "name: x\nthreads: 0\n": r"key 'threads' must be in \[1, 1024\], got 0",
        "name: x\nthreads: true\n": "key 'threads' must be an integer, got True",
        "name: x\nwarmup: -1\n": r"key 'warmup' must be in \[0, 10000\], got -1",   # bounded above too (issue 29)
        "name: x\nbudget_s: -1\n": r"key 'budget_s' must be in \(0, 3600.0\], got -1",
        "name: x\nstable_rel: .inf\n": "key 'stable_rel' must be a finite number",
        "name: x\ncuda_device: -1\n": "key 'cuda_device' must be >= 0, got -1",
        "name: x\nbackend: tensorrt\nworkspace_mib: 0\n": r"key 'workspace_mib' must be in \[1, 1048576\], got 0",
        # a key of another backend names the backend that reads it (each backend's record declares its keys)
        "name: x\nworkspace_mib: 64\n": "key 'workspace_mib' is read by the tensorrt backend, not by onnxruntime",
        "name: x\nbackend: tensorrt\nprovider: CUDAExecutionProvider\n": "key 'provider' is read by the onnxruntime",
        "name: x\noptions: {}\n": "unknown key 'options'",
        "name: x\nmin_repeats: 10\nmax_repeats: 5\n": r"min_repeats > max_repeats \(10 > 5\)",
        "name: x\nwarmup_rounds: 3\n": "unknown key 'warmup_rounds'; known: warmup, min_repeats, .*, name, description, backend",
        "name: x\npath: /etc\n": "unknown key 'path'",
        "backend: torch\n": "key 'name' is missing",
        "name: x\nthreads: 2\nclock: thread\n": "clock: thread .* needs threads: 1",
        "name: x\nbackend: tensorrt\nclock: thread\n": "clock: thread .* on a CPU backend",
        # an ORT profile on a CUDA provider without cuda_device is a GPU profile too
        "name: x\nprovider: CUDAExecutionProvider\nclock: thread\n": "clock: thread .* on a CPU backend",
        "name: x\nprovider: TensorrtExecutionProvider\nclock: thread\n": "clock: thread .* on a CPU backend",
        "name: x\nbackend: torch\ncuda_device: 0\nclock: thread\n": "clock: thread .* on a CPU backend",
        "name: x\nclock: tsc\n": "key 'clock' is 'tsc'; choose one of wall, thread",
        "- a\n- b\n": "must be a YAML mapping",
        "name: [unclosed\n": "not valid YAML",
        "name: ../../x\n": "key 'name' = '../../x' is not a valid name",  # it names profiles/<name>/ (its LUTs)
        "name: a/b\n": "key 'name' = 'a/b' is not a valid name",
        "name: 5\n": "key 'name' = 5 is not a valid name",
    }
    for i, (text, msg) in enumerate(bad.items()):
        f = tmp_path / f"bad{i}.yaml"
        f.write_text(text)
        with pytest.raises(LatoptError, match=msg) as e:
            load_device(str(f))
        assert str(e.value).startswith(f"device profile {f}") and "\n" not in str(e.value)
    with pytest.raises(LatoptError, match="does not exist"):
        load_device(str(tmp_path / "missing.yaml"))


def test_user_profiles_come_before_the_shipped_ones(tmp_path, monkeypatch) -> None:
    # ./profiles in the working directory: added devices, a shipped name replaced, and the LUTs' home
    monkeypatch.delenv("LATOPT_PROFILES_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert profiles_dir() == Path("profiles") and load_device("cpu").path == str(SHIPPED_PROFILES / "cpu.yaml")
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "edge.yaml").write_text("name: edge\n")
    (tmp_path / "profiles" / "cpu.yaml").write_text("name: cpu\nbackend: torch\n")
    assert list_devices() == sorted({"edge", *SHIPPED})
    assert load_device("edge").path == str(Path("profiles") / "edge.yaml")
    assert load_device("cpu").backend == "torch" and load_device("titanx").path.startswith(str(SHIPPED_PROFILES))
    assert default_lut_path("edge", "mobilenetv2_100", 224, 1) == Path("profiles/edge/mobilenetv2_100-r224-b1.json")
    with pytest.raises(LatoptError, match=r"'nope'.*add nope\.yaml to profiles/"):
        load_device("nope")

    # $LATOPT_PROFILES_DIR takes the place of ./profiles, for device files and LUTs alike
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "edge2.yaml").write_text("name: edge2\n")
    monkeypatch.setenv("LATOPT_PROFILES_DIR", str(other))
    assert list_devices() == sorted({"edge2", *SHIPPED}) and load_device("cpu").backend == "onnxruntime"
    assert default_lut_path("edge2", "mobilenetv2_100", 224, 1).parent == other / "edge2"
