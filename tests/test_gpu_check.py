"""tools/gpu_check.py without a GPU: its exit codes, the rows it cannot exercise, its GPU budgets, the wheels
``--carry`` downloads for a GPU image without pydantic (no network here: pip is a stand-in), and, in the tools
tier (marked ``tools``), that the image and the carried wheels hold what the check imports and the whole
``--cpu-smoke``."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tools import gpu_check
from tools.gpu_check import NOT_EXERCISED, Row

ROOT = Path(__file__).resolve().parents[1]

# The Python packages of the GPU image that --carry serves (Python 3.12, torch 2.11 for CUDA 13; the image's
# list as its machine's documentation gave it, read 2026-11): no pydantic, optuna, SQLAlchemy or highspy.
IMAGE_PACKAGES = """
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax
fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2
joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch
mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti
nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver
nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13
nvidia-nvtx onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache
protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest
pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml
regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece
sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy tabulate
tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer
typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split()


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


CARRIED = {_norm(s.split("==")[0]) for s in gpu_check.CARRY_WHEELS}


def _bare(smoke: bool, out: Path) -> gpu_check.Checks:
    """A Checks without its __init__ (which loads the config): enough for the steps that need no training."""
    c = gpu_check.Checks.__new__(gpu_check.Checks)
    c.smoke, c.out, c.rows, c.bases, c.step = smoke, out, [], {}, ""
    c.device, c.fold_dir = ("cpu" if smoke else "cuda"), out / "fold"
    return c


# ------------------------------------------------------------------------------------- exit codes, rows
def test_exit_code_says_the_tensorrt_path_was_not_covered() -> None:
    ok, idle, bad = Row("train fp32", "pass"), Row("TensorRT", NOT_EXERCISED), Row("fold", "FAIL")
    assert gpu_check.exit_code([ok, idle]) == 3     # a clean run: never a plain 0
    assert gpu_check.exit_code([ok, idle, bad]) == 1
    assert gpu_check.exit_code([ok, Row("fold", "skipped")]) == 0
    assert 3 not in (1, 2) and "**3**" in gpu_check.__doc__ and "never with 0" in gpu_check.__doc__


def test_rows_that_cannot_run_say_not_exercised(monkeypatch: pytest.MonkeyPatch) -> None:
    real = gpu_check.importlib.util.find_spec
    monkeypatch.setattr(gpu_check.importlib.util, "find_spec",
                        lambda name, *a: None if name in ("tensorrt", "pycuda", "onnxruntime") else real(name, *a))
    rows = [gpu_check.Checks.tensorrt(), gpu_check.Checks.ort_cuda(), gpu_check.Checks.pycuda()]
    assert [r.status for r in rows] == [NOT_EXERCISED] * 3
    assert all("not installed" in r.detail for r in rows)
    # installed: still not exercised (this script has no TensorRT step); a tensorrt that does not import fails
    monkeypatch.setattr(gpu_check.importlib.util, "find_spec", lambda name, *a: object())
    fake = types.SimpleNamespace(__version__="10.99")
    monkeypatch.setattr(gpu_check.importlib, "import_module", lambda name: fake)
    row = gpu_check.Checks.tensorrt()
    assert row.status == NOT_EXERCISED and "10.99 imports" in row.detail

    def broken(name: str) -> None:
        raise ImportError("libnvinfer.so.10: cannot open shared object file")

    monkeypatch.setattr(gpu_check.importlib, "import_module", broken)
    assert gpu_check.Checks.tensorrt().status == "FAIL"
    monkeypatch.setattr(gpu_check.importlib, "import_module",
                        lambda name: types.SimpleNamespace(__version__="1.0",
                                                           get_available_providers=lambda: ["CUDAExecutionProvider"]))
    assert gpu_check.Checks.ort_cuda().status == NOT_EXERCISED


def test_smoke_leaves_the_fp16_timing_row_not_exercised(tmp_path: Path) -> None:
    row = _bare(True, tmp_path).latency("fp16")
    assert row.status == NOT_EXERCISED and row.check == "latency gpu-torch fp16"
    assert "not exercised" in gpu_check.format_table([row])


def test_cannot_start_without_pydantic_exits_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(gpu_check, "_missing", lambda: ["pydantic"])
    assert gpu_check.main(["--cpu-smoke"]) == 2
    assert "missing Python packages pydantic" in capsys.readouterr().err
    monkeypatch.setattr(gpu_check, "_missing", lambda: [])
    monkeypatch.setattr(gpu_check, "CHECK_MODULES", ("latopt.config", "latopt_no_such_module"))
    assert gpu_check.main(["--cpu-smoke"]) == 2
    err = capsys.readouterr().err
    assert "latopt_no_such_module: ModuleNotFoundError" in err and "latopt.config" not in err


# ----------------------------------------------------------------------------------------------- budgets
def test_gpu_budgets_cover_every_gpu_row_and_fit_a_ten_minute_call(tmp_path: Path) -> None:
    steps = [name for name, _ in _bare(False, tmp_path).steps()]
    assert set(gpu_check.GPU_BUDGET_S) == set(steps) - {"TensorRT", "ORT CUDA", "pycuda"}
    # the machine's start (a minute or two) and the install come on top: the rows leave four minutes
    assert sum(gpu_check.GPU_BUDGET_S.values()) <= 360
    assert f"{sum(gpu_check.GPU_BUDGET_S.values()):.0f} s in all" in gpu_check.__doc__


def test_a_gpu_row_over_its_budget_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    c = _bare(False, tmp_path)

    def timed_out() -> Row:
        raise subprocess.TimeoutExpired(["python", "-m", "latopt", "profile"], 60)

    monkeypatch.setattr(c, "steps", lambda: [("train bf16", lambda: Row("train bf16", "pass")),
                                             ("profile", timed_out)])
    monkeypatch.setitem(gpu_check.GPU_BUDGET_S, "train bf16", -1.0)
    rows = c.run()
    assert [r.status for r in rows] == ["FAIL", "FAIL"]
    assert "over its GPU budget of -1 s" in rows[0].detail and "over its GPU budget of 60 s" in rows[1].detail
    smoke = _bare(True, tmp_path)
    monkeypatch.setattr(smoke, "steps", lambda: [("train bf16", lambda: Row("train bf16", "pass"))])
    assert smoke.run()[0].status == "pass"  # the shared CPUs of the smoke have no budgets


def test_the_capped_gpu_profile_loads(tmp_path: Path) -> None:
    from latopt.latency.devices import load_device

    prof = load_device(_bare(False, tmp_path)._device_file())
    assert (prof.name, prof.backend, prof.cuda_device, prof.precision) == ("gpu-torch", "torch", 0, "fp32")
    assert {k: getattr(prof, k) for k in gpu_check.TIMING} == gpu_check.TIMING


# ------------------------------------------------------------------------------------------------- carry
def _fake_pip(calls: list[list[str]], rc: int = 0):
    def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
        calls.append(cmd)
        d = Path(cmd[cmd.index("-d") + 1])
        for spec in cmd[cmd.index("-d") + 2:]:
            name, version = spec.split("==")
            (d / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(b"x" * 10)
        return subprocess.CompletedProcess(cmd, rc, "", "" if rc == 0 else "ERROR: No matching distribution")
    return run


def test_carry_downloads_exactly_the_pinned_cp312_wheels(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    dest = tmp_path / "wheels"
    dest.mkdir()
    (dest / "stale-0.1-py3-none-any.whl").write_bytes(b"old")
    calls: list[list[str]] = []
    monkeypatch.setattr(gpu_check.subprocess, "run", _fake_pip(calls))
    assert gpu_check.main(["--carry", str(dest)]) == 0
    cmd = calls[0]
    assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd and "--only-binary=:all:" in cmd
    assert cmd[cmd.index("--python-version") + 1] == "3.12" and cmd[cmd.index("--implementation") + 1] == "cp"
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--platform"] == list(gpu_check.CARRY_PLATFORMS)
    assert all(p.endswith("x86_64") for p in gpu_check.CARRY_PLATFORMS)
    assert cmd[-len(gpu_check.CARRY_WHEELS):] == list(gpu_check.CARRY_WHEELS)
    assert sorted(_norm(w.name.split("-")[0]) for w in dest.glob("*.whl")) == sorted(CARRIED)  # the stale one went
    assert [p.name for p in dest.iterdir() if not p.name.endswith(".whl")] == []
    assert gpu_check.DEVICE_LINE in capsys.readouterr().out
    # a failed download leaves the folder as it was
    monkeypatch.setattr(gpu_check.subprocess, "run", _fake_pip(calls, rc=1))
    before = sorted(p.name for p in dest.iterdir())
    assert gpu_check.main(["--carry", str(dest)]) == 2
    assert sorted(p.name for p in dest.iterdir()) == before


def test_the_device_line_installs_the_carried_folder_offline_and_it_is_git_ignored() -> None:
    line = gpu_check.DEVICE_LINE
    assert "--no-index" in line and "--no-deps" in line and f"{gpu_check.CARRY_DIR}/*.whl" in line
    assert line.endswith("python3 tools/gpu_check.py") and line in gpu_check.__doc__
    assert line in (ROOT / "README.md").read_text()
    r = subprocess.run(["git", "check-ignore", "-q", f"{gpu_check.CARRY_DIR}/x.whl"], cwd=ROOT)
    assert r.returncode == 0, f"{gpu_check.CARRY_DIR}/ must be git-ignored (downloaded wheels are never committed)"


def _third_party_imports_of_latopt() -> set[str]:
    names = set()
    for f in (ROOT / "latopt").rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"latopt", "__future__"}


@pytest.mark.tools   # imports the whole check in a subprocess (~8 s): the tools tier
def test_the_carried_wheels_and_the_image_hold_what_the_check_imports() -> None:
    """Every package that latopt imports directly in the modules the check runs is on the image or carried,
    and what is carried is on the image only where a version is the reason (typing-extensions)."""
    probe = ("import importlib, json, sys\n"
             f"for m in {gpu_check.CHECK_MODULES!r}: importlib.import_module(m)\n"
             "print(json.dumps(sorted({k.split('.')[0] for k in sys.modules})))")
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    loaded = set(json.loads(r.stdout)) & _third_party_imports_of_latopt()
    from importlib.metadata import packages_distributions, requires

    dists = packages_distributions()
    needed = {_norm(d) for m in loaded for d in dists.get(m, [m])}
    image = {_norm(p) for p in IMAGE_PACKAGES}
    assert "pydantic" in needed and not {"optuna", "sqlalchemy", "highspy"} & needed
    assert sorted(needed - image - CARRIED) == [], "add these to gpu_check.CARRY_WHEELS (cp312 wheels)"
    assert CARRIED & image == {"typing-extensions"}
    # the carried wheels need nothing else (pip installs them with --no-deps)
    for dist in CARRIED:
        reqs = [q for q in (requires(dist) or []) if "extra ==" not in q]
        assert {_norm(re.split(r"[ ;<>=!~\[(]", q)[0]) for q in reqs} <= CARRIED | image, dist


# ---------------------------------------------------------------------------------------------- the smoke
@pytest.mark.slow
@pytest.mark.tools   # ~1 min on 2 cores: the tools tier
def test_cpu_smoke_passes_and_exits_3() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--cpu-smoke"], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 3, r.stdout + r.stderr[-3000:]
    rows = {line[:24].strip(): line[25:].split()[0] for line in r.stdout.splitlines()[2:] if line[:1].strip()
            and not line.startswith(("-", "check")) and "checks without failure" not in line}
    idle = {"latency gpu-torch fp16", "TensorRT", "ORT CUDA provider", "pycuda"}
    assert {k for k, v in rows.items() if v == "not"} == idle, rows  # "not exercised"
    assert {k for k, v in rows.items() if k not in idle} == {k for k, v in rows.items() if v == "pass"}
    assert "resume fp32 NHWC" in rows and "exit 3 (the TensorRT path is not covered)" in r.stdout
