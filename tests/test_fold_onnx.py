"""A folded model (exact bias map, partial folds, σ_α kept elsewhere) is a plain, ONNX-exportable
module: ONNX Runtime gives the same outputs as PyTorch."""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from latopt.fold import fold_blocks, install_alpha, randomize_bn_
from latopt.models import build_model


@pytest.mark.parametrize("mode", ["exact", "paper"])
def test_folded_model_exports_to_onnx(tmp_path: Path, mode: str) -> None:
    ort = pytest.importorskip("onnxruntime")
    m = randomize_bn_(build_model("mobilenetv2_035", 10), 0)
    install_alpha(m, "all", "activation")
    f = fold_blocks(m, {0: "full", 1: "full", 2: "expand_dw", 3: "dw_project", 6: "full"}, mode, (48, 48)).eval()
    x = torch.randn(2, 3, 48, 48)
    path = tmp_path / "folded.onnx"
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(f, (x,), str(path), dynamo=False, opset_version=17)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    y = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    with torch.no_grad():
        ref = f(x).numpy()
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()
