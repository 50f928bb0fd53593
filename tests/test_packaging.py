"""Packaging: the data latopt reads at run time ships inside the package and is found from any working
directory; the optional ONNX exporter the declared ``onnxscript`` dependency is for still works."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from torch import nn

from latopt.config import SHIPPED_CONFIGS, config_path, load_config
from latopt.errors import LatoptError
from latopt.latency import onnx_io
from latopt.latency.devices import SHIPPED_PROFILES

pytestmark = pytest.mark.floor   # .ci/run's lower-bounds run selects these tests

ROOT = Path(__file__).resolve().parents[1]


def test_package_data_ships_every_profile_and_config() -> None:
    # a file added to latopt/profiles/ or latopt/configs/ that pyproject's package-data does not match would be
    # missing from a normal (non-editable) install; .ci/run checks such an install from another directory
    section = re.search(r"\[tool\.setuptools\.package-data\]\n(?:#.*\n)*latopt = \[(.*)\]\n",
                        (ROOT / "pyproject.toml").read_text())
    assert section, "pyproject.toml has no [tool.setuptools.package-data] latopt = [...] line"
    globs = re.findall(r'"([^"]+)"', section.group(1))
    files = [p.relative_to(ROOT / "latopt").as_posix() for d in ("profiles", "configs")
             for p in (ROOT / "latopt" / d).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    files += [p.relative_to(ROOT / "latopt").as_posix() for p in (ROOT / "latopt" / "data").glob("fashion-mnist-mini.*")]
    assert "profiles/cpu.yaml" in files and "configs/quickstart.yaml" in files and "profiles/README.md" in files
    assert {"data/fashion-mnist-mini.npz", "data/fashion-mnist-mini.LICENSE"} <= set(files)   # the bundled subset
    assert [f for f in files if not any(fnmatch.fnmatch(f, g) for g in globs)] == []
    assert Path(str(SHIPPED_PROFILES)) == ROOT / "latopt" / "profiles" and SHIPPED_CONFIGS == ROOT / "latopt" / "configs"


def test_configs_by_shipped_name_from_any_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert config_path("quickstart") == SHIPPED_CONFIGS / "quickstart.yaml"
    assert load_config("digits_clutter").name == "digits_clutter"
    (tmp_path / "quickstart").write_text("name: mine\n")  # an existing file comes first
    assert load_config("quickstart").name == "mine"
    for missing in ("nope", "nope.yaml", "sub/quickstart", "quickstart.yml"):
        with pytest.raises(LatoptError, match=rf"config file {missing} does not exist") as e:
            load_config(missing)
        shipped = sorted(p.stem for p in SHIPPED_CONFIGS.glob("*.yaml"))
        assert ", ".join(shipped) in str(e.value)


def test_dynamo_exporter_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # export_onnx uses torch's TorchScript exporter while torch ships it (all supported versions) and falls
    # back to the torch.export-based one (which needs onnxscript) when a torch without it comes
    monkeypatch.setattr(onnx_io, "torchscript_exporter_available", lambda: False)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 2, 1)).eval()
    path = onnx_io.export_onnx(net, (1, 3, 8, 8), tmp_path / "net.onnx")
    x = torch.randn(1, 3, 8, 8)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == [onnx_io.INPUT_NAME]
    (y,) = sess.run(None, {onnx_io.INPUT_NAME: x.numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(y, net(x).numpy(), rtol=1e-4, atol=1e-5)
