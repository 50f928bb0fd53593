"""tools/depth_table.py (docs/resnet-fold.md): the rows it makes from published cells — the paired t-interval
over seeds against the as-is network, the protocol's words — and the ONNX count of non-linear layers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from tools import bench_methods as bm
from tools import depth_table as dt


def _results(tmp: Path, cells: dict[str, list[tuple[float, int, list[float]]]]) -> Path:
    """A published run: method -> per seed (test accuracy, non-linear layers, fp32 speed-up [median, q1, q3])."""
    root = tmp / "res"
    (root / "cells").mkdir(parents=True)
    env = {"cpu": "test CPU", "cpu_flags": ["avx512f"], "cpu_count": 2}
    run = {"schema": bm.RESULTS_SCHEMA, "commit": "abcdef0" + "0" * 33, "model": "resnet20_cifar",
           "task": "fashion-mnist", "resolution": 32, "seeds": [0, 1, 2], "test_group": 1,
           "schedule": {"base_epochs": 30, "ft_epochs": 4, "prefold_epochs": 2, "postfold_epochs": 2},
           "sizes": {"test": 10000}, "measure": {"32": {"environment": env}}}
    (root / "run.json").write_text(json.dumps(run))
    for meth, per_seed in cells.items():
        for s, (acc, nl, sp) in enumerate(per_seed):
            rec = {"cell": f"s{s}-{meth}", "seed": s, "method": meth, "test_acc": acc, "onnx_acc": acc,
                   "nonlinear_ops": nl, "speedup": {"32": {"fp32": {"vs_fp32_asis": sp}}}}
            if meth.startswith("lf-"):
                rec["n_folded"] = 19 - nl
            (root / "cells" / f"s{s}-{meth}.json").write_text(json.dumps(rec))
    return root


def test_rows_pair_by_seed_and_say_the_protocols_words(tmp_path: Path) -> None:
    one = [1.0, 1.0, 1.0]
    root = _results(tmp_path, {
        "base": [(0.90, 19, one)] * 3,
        "asis": [(0.900, 19, one), (0.910, 19, one), (0.920, 19, one)],
        # the same drop on every seed (0.3 pt): a zero-width interval, small; quartiles above 1: faster
        "lf-uniform@1": [(0.897, 15, [1.3, 1.2, 1.4]), (0.907, 15, [1.3, 1.2, 1.4]), (0.917, 14, [1.3, 1.1, 1.4])],
        # drops of 1, 3, 5 pt: the interval reaches below -1 pt; one seed's lower quartile below 1
        "lf-uniform@10": [(0.89, 11, [1.5, 1.4, 1.6]), (0.88, 10, [1.5, 0.99, 1.6]), (0.87, 10, [1.6, 1.5, 1.7])],
    })
    rows = {r["method"]: r for r in dt.depth_rows(bm.Results(root))}
    assert [r for r in rows] == ["base", "asis", "lf-uniform@1", "lf-uniform@10"]
    small = rows["lf-uniform@1"]
    assert small["diff"] == pytest.approx((-0.003, -0.003, -0.003))
    assert small["small"] is True and small["faster"] is True
    assert small["nonlinear"] == [15, 15, 14] and small["folded"] == [4, 4, 5]
    big = rows["lf-uniform@10"]
    d = np.array([-0.01, -0.03, -0.05])
    half = 4.302652729911275 * d.std(ddof=1) / np.sqrt(3)   # t(0.975, 2)
    assert big["diff"] == pytest.approx((d.mean(), d.mean() - half, d.mean() + half))
    assert big["small"] is False and big["faster"] is False
    assert rows["asis"]["diff"] is None and rows["asis"]["folded"] == [0, 0, 0]

    text = dt.render_depth(root)
    assert "| Layer Folding | 1 | 3 | 4, 4, 5 | 15, 15, 14 | 90.70 ± 1.00 | -0.30 [-0.30, -0.30] |" in text
    assert "| yes | yes |" in text and "| no | no |" in text
    assert "As-is: 19, 19, 19 non-linear layers" in text and "AVX-512" in text and "code abcdef0" in text


def test_onnx_count_is_of_uses_not_modules(tmp_path: Path) -> None:
    """One ReLU module applied twice is two non-linear layers of the exported graph; ReLU6 (Clip) counts too."""
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.relu, self.relu6 = nn.Linear(4, 4), nn.Linear(4, 4), nn.ReLU(), nn.ReLU6()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.relu6(self.b(self.relu(self.a(self.relu(x)))))

    path = tmp_path / "net.onnx"
    torch.onnx.export(Net().eval(), (torch.zeros(1, 4),), str(path), dynamo=False)
    assert dt.onnx_nonlinear(path) == 3


def test_before_the_run_is_published_the_page_says_so(tmp_path: Path) -> None:
    assert dt.render_depth(tmp_path / "resnet-fold" / "resnet20").startswith("No results yet")


def test_the_command_line_wants_one_directory(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        dt.main([])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip() == "depth_table: error: the following arguments are required: RESULTS_DIR"
