"""A folded model (exact bias map, partial folds, σ_α kept elsewhere) is a plain module that latopt's own
ONNX exporter writes and its ONNX Runtime runner runs with the same outputs as PyTorch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from latopt.latency.onnx_io import export_onnx
from latopt.nets.models import build_model
from latopt.rewrite import alpha_parameters, fold_blocks, install_alpha, randomize_bn_
from latopt.runtime import OrtRunner

pytestmark = pytest.mark.floor   # .ci/run's lower-bounds run selects these tests


@pytest.mark.parametrize("mode", ["exact", "paper"])
def test_folded_model_exports_to_onnx(tmp_path: Path, mode: str) -> None:
    m = randomize_bn_(build_model("mobilenetv2_035", 10), 0)
    install_alpha(m, "all", "activation")
    with torch.no_grad():
        for a in alpha_parameters(m):  # the σ_α left unfolded are real interpolations, not plain σ
            a.fill_(0.3)
    f = fold_blocks(m, {0: "full", 1: "full", 2: "expand_dw", 3: "dw_project", 6: "full"}, mode, (48, 48)).eval()
    x = torch.randn(2, 3, 48, 48)
    path = export_onnx(f, (1, 3, 48, 48), tmp_path / "folded.onnx", dynamic_batch=True)
    with OrtRunner(path, input_shape=tuple(x.shape)) as runner:
        y = runner.run(x.numpy())
    with torch.no_grad():
        ref = f(x).numpy()
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()
