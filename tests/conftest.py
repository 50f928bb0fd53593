"""Shared test set-up: determinism, and markers for hardware- and service-dependent tests.

Every test runs the same way on every run (a commit passes or fails the same way everywhere): hypothesis is
derandomized (examples drawn from a hash of the test, no example database replaying earlier failures) and
python's, numpy's and torch's global generators are seeded before each test.

- ``@pytest.mark.tensorrt``: skipped with a reason unless ``tensorrt`` imports and a CUDA GPU is visible.
- ``@pytest.mark.cuda``: skipped with a reason unless ``torch.cuda.is_available()``.
- ``@pytest.mark.postgres``: needs ``LATOPT_TEST_PG_URL`` (an SQLAlchemy URL of a live server).
  Skipped locally when it is unset, but *fails* under CI (``CI=true``), where ``.ci/run`` starts one.
- ``@pytest.mark.fashion_mnist``: needs the Fashion-MNIST files where latopt looks for them
  (``$LATOPT_DATA/fashion-mnist``, Debian's ``/usr/share/datasets/fashion-mnist``); skipped without them, the
  reason saying what to install (``apt-get install dataset-fashion-mnist``). A fresh machine lacks them.
- ``@pytest.mark.tools``: the tools tier (an evaluation tool of ``tools/`` run end to end), left out of the
  default run by ``addopts = "-m 'not tools'"`` (pyproject.toml); ``-m tools`` runs it, ``-m ""`` everything.
  The default run ends with a line saying how many tests it left out and how to run them.
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch
from hypothesis import settings

from latopt.training.loop import seed_everything

# the same examples on every run and machine (for one hypothesis version): a failure is found by every
# run, never by a newcomer's only; print_blob lets one reproduce a failing example exactly
settings.register_profile("latopt", derandomize=True, database=None, print_blob=True)
settings.load_profile("latopt")

# One torch thread: on the 2-core CI machine torch's default (2 threads) made the suite ~5x slower under
# load, and results are only bit-reproducible at a fixed thread count.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seeded() -> None:
    """Python's, numpy's and torch's global generators seeded before every test (no unseeded randomness)."""
    seed_everything(0)


def _cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # pragma: no cover
        return False


def _fashion_mnist_missing() -> str | None:
    """Why the Fashion-MNIST files cannot be read (latopt's own one line: where it looked, what to install), or
    None when latopt finds them."""
    from latopt.data.mnist import locate
    from latopt.errors import LatoptError

    try:
        locate("fashion-mnist", None)
    except LatoptError as e:
        return str(e)
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    fm_missing = _fashion_mnist_missing() if any("fashion_mnist" in item.keywords for item in items) else None
    has_cuda = _cuda()
    has_trt = importlib.util.find_spec("tensorrt") is not None
    pg_url = os.environ.get("LATOPT_TEST_PG_URL")
    in_ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    for item in items:
        if "cuda" in item.keywords and not has_cuda:
            item.add_marker(pytest.mark.skip(reason="no CUDA GPU visible to torch (torch.cuda.is_available() is False)"))
        if "tensorrt" in item.keywords:
            if not has_trt:
                item.add_marker(pytest.mark.skip(reason="tensorrt is not installed (pip install 'latopt[trt]' on a machine with an NVIDIA GPU)"))
            elif not has_cuda:
                item.add_marker(pytest.mark.skip(reason="tensorrt is installed but no CUDA GPU is visible"))
        if "fashion_mnist" in item.keywords and fm_missing:
            item.add_marker(pytest.mark.skip(reason=f"needs the Fashion-MNIST files: {fm_missing}"))
        if "postgres" in item.keywords and not pg_url and not in_ci:
            item.add_marker(pytest.mark.skip(reason="LATOPT_TEST_PG_URL is not set (.ci/run starts a PostgreSQL server and sets it)"))


_TOOLS_LEFT_OUT = pytest.StashKey[int]()


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        config = items[0].config
        config.stash[_TOOLS_LEFT_OUT] = (config.stash.get(_TOOLS_LEFT_OUT, 0)
                                         + sum(1 for item in items if "tools" in item.keywords))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The default run says what it left out: the tools tier, and how to run it."""
    n = config.stash.get(_TOOLS_LEFT_OUT, 0)
    if n and config.option.markexpr == "not tools":
        terminalreporter.write_line(f"{n} tests of the tools tier were not run: python -m pytest -m tools runs them "
                                    "(docs/development.md)")


@pytest.fixture
def pg_url() -> str:
    url = os.environ.get("LATOPT_TEST_PG_URL")
    if not url:
        pytest.fail("LATOPT_TEST_PG_URL is not set but this test needs PostgreSQL; .ci/run must start the server")
    return url


@pytest.fixture(scope="session")
def fast_cpu_device(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Path of a copy of the ``cpu`` profile with a short timing budget (tests never assert on times)."""
    import yaml

    from latopt.latency.devices import SHIPPED_PROFILES

    d = yaml.safe_load((SHIPPED_PROFILES / "cpu.yaml").read_text())
    d.update(name="cpu-test", warmup=2, min_repeats=5, max_repeats=10, budget_s=2)
    p = tmp_path_factory.mktemp("device") / "cpu-test.yaml"
    p.write_text(yaml.safe_dump(d))
    return str(p)


@pytest.fixture(scope="session")
def harness_fixtures(tmp_path_factory: pytest.TempPathFactory):
    """The fuzz and fault harness' inputs (``tests.harness.fixtures.Fixtures``: a tiny trained, folded,
    profiled, searched and exported network, an MLP, data folders), built once per session by the checkout's
    own commands, in-process; ``test_fuzz.py`` and ``test_faults.py`` share them."""
    from tests.harness.fixtures import Fixtures

    return Fixtures(tmp_path_factory.getbasetemp() / "harness-fixtures", in_process=True).build(log=print)


@pytest.fixture(scope="session")
def edit_checkpoint():
    """``edit_checkpoint(src, dst, edit, digest=True)``: the latopt checkpoint ``src`` with ``edit(data)``
    applied to its loaded dict, saved to ``dst``. ``digest=True`` recomputes the SHA-256 (a file that is
    consistent but wrong), ``False`` keeps the recorded one (a corrupted file)."""
    from pathlib import Path

    from latopt.files.checkpoint import checkpoint_digest

    def edit_(src: Path, dst: Path, edit, *, digest: bool = True) -> Path:
        data = torch.load(src, weights_only=True)
        edit(data)
        if digest:
            data["sha256"] = checkpoint_digest(data["arch"], data["meta"], data["state_dict"])
        torch.save(data, dst)
        return Path(dst)

    return edit_


@pytest.fixture(scope="session")
def check_fold_structure():
    """``check_fold_structure(onnx_path, model_name, num_classes, plan)``: the exported network has exactly the
    convolutions and activations of the as-is ``model_name`` less the ones ``plan`` folds away — what makes a
    folded network faster. Counted without the fold code: Conv2d / ReLU / ReLU6 modules of the as-is model;
    each removed activation takes one convolution with it (a full fold of a block with m activations merges
    its m + 1 convolutions into one, a partial fold merges two)."""
    from collections import Counter

    import onnx
    from torch import nn

    from latopt.nets.blocks import find_blocks
    from latopt.nets.models import build_model

    def check(onnx_path, model_name: str, num_classes: int, plan: dict) -> None:
        asis = build_model(model_name, num_classes)
        acts = {b.index: len(b.acts) for b in find_blocks(asis)}
        removed = sum(acts[int(i)] if v == "full" else 1 for i, v in plan.items())
        convs = sum(isinstance(m, nn.Conv2d) for m in asis.modules())
        relus = sum(isinstance(m, (nn.ReLU, nn.ReLU6)) for m in asis.modules())
        ops = Counter(n.op_type for n in onnx.load(str(onnx_path)).graph.node)
        got = {"Conv": ops["Conv"], "activations": ops["Relu"] + ops["Clip"]}
        assert got == {"Conv": convs - removed, "activations": relus - removed}, (plan, got)

    return check


@pytest.fixture(autouse=True)
def _default_log_level() -> None:
    """Every test starts at the default log level (an in-process `main([..., "-q"])` must not leak)."""
    from latopt import log

    log.setup(log.DEFAULT)


@pytest.fixture
def stand_in_torch_cuda(monkeypatch: pytest.MonkeyPatch) -> list:
    """torch.cuda as on a machine with GPUs, on the CPU: returns the list of the calls made on it
    (``current_device()`` is where torch would create a CUDA context on GPU 0)."""
    import torch

    calls: list = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: calls.append("is_available") or True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: calls.append("current_device") or 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: calls.append(("name", i)) or f"GPU {i}")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: calls.append(("capability", i)) or (8, 0))
    return calls
