"""`latopt train-mlp | compress | regions | shallow` end to end, and their one-line errors (exit 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from latopt.cli import main
from latopt.data import split_indices
from latopt.exact.exact_record import CompressToolReport, RegionsReport, ShallowReport, read_report
from latopt.exact.mlp import SPLIT, MlpMeta, load_mlp, load_split, save_mlp, split_of


@pytest.fixture(scope="module")
def random_ckpt(tmp_path_factory):
    p = tmp_path_factory.mktemp("exact") / "r.pt"
    assert main(["train-mlp", "--data", "random", "--inputs", "2", "--hidden", "8,8,8", "--outputs", "1",
                 "--seed", "4", "--out", str(p)]) == 0
    return p


def _region_radius(model: torch.nn.Module, pattern: str, lo: float, hi: float) -> float:
    """Radius of the largest ball inside the input region where ``model``'s units have ``pattern`` (1: z > 0),
    within the box: an LP solved with SciPy, not with latopt's own LP code."""
    from scipy.optimize import linprog

    linears = [m for m in model if isinstance(m, torch.nn.Linear)]
    on = np.array([c == "1" for c in pattern])
    a, c = np.eye(linears[0].in_features), np.zeros(linears[0].in_features)   # layer input = a x + c
    rows, rhs, start = [], [], 0
    for lin in linears[:-1]:
        w, b = lin.weight.detach().double().numpy(), lin.bias.detach().double().numpy()
        za, zc = w @ a, w @ c + b
        s = on[start:start + len(zc)]
        start += len(zc)
        rows.append(np.where(s[:, None], -za, za))   # active: z >= 0, inactive: z <= 0
        rhs.append(np.where(s, zc, -zc))
        a, c = za * s[:, None], zc * s
    d = a.shape[1]
    rows.append(np.vstack([np.eye(d), -np.eye(d)]))
    rhs.append(np.concatenate([np.full(d, hi), np.full(d, -lo)]))
    g, h = np.vstack(rows), np.concatenate(rhs)
    norms = np.linalg.norm(g, axis=1, keepdims=True)
    res = linprog(np.r_[np.zeros(d), -1.0], A_ub=np.hstack([g, norms]), b_ub=h, bounds=[(None, None)] * d + [(0, None)])
    assert res.status == 0, res.message
    return float(res.x[-1])


def test_regions_and_shallow_cli(random_ckpt, tmp_path, capsys):
    out = tmp_path / "reg"
    assert main(["regions", str(random_ckpt), "--out", str(out)]) == 0
    rep = read_report(out / "report.json", RegionsReport)   # schema latopt.regions/1
    assert rep.regions == len(set(rep.patterns)) > 1 and rep.out is None   # out is not written
    # the grid cross-check, redone here: the activation patterns at the centres of the 1000 x 1000 cells
    model, _ = load_mlp(random_ckpt)
    g = rep.grid
    assert g is not None and isinstance(rep.box.lo, float) and isinstance(rep.box.hi, float)
    lo, hi, n = rep.box.lo, rep.box.hi, g.resolution
    centres = lo + (np.arange(n) + 0.5) * (hi - lo) / n
    x = torch.as_tensor(np.stack(np.meshgrid(centres, centres, indexing="ij"), -1).reshape(-1, 2))
    units, h = [], x
    with torch.no_grad():
        for m in model.double():
            h = m(h)
            if isinstance(m, torch.nn.Linear):
                units.append(h > 0)
    bits = torch.cat(units[:-1], 1).numpy()
    grid = set(np.unique(bits @ (1 << np.arange(bits.shape[1], dtype=np.int64))).tolist())  # one int per pattern
    enumerated = {int(p[::-1], 2): p for p in rep.patterns}
    assert grid <= set(enumerated)                           # every pattern the grid sees was enumerated
    missed = [p for key, p in enumerated.items() if key not in grid]
    assert (g.distinct_patterns, g.missed_regions) == (len(grid), len(missed))
    # a region the grid missed holds no cell centre, so no ball of half a cell diagonal fits inside it
    half_diagonal = (hi - lo) / n * 2**0.5 / 2
    assert g.half_cell_diagonal == pytest.approx(half_diagonal)
    assert all(_region_radius(model, p, lo, hi) < half_diagonal for p in missed)
    assert (out / "regions.png").stat().st_size > 1000
    sh = tmp_path / "sh"
    assert main(["shallow", str(random_ckpt), "--epsilon", "1e-3", "--out", str(sh)]) == 0
    sr = read_report(sh / "report.json", ShallowReport)
    assert sr.exact_network.verification.ok and sr.exact_network.verification.points >= 100_000
    ver = sr.eps_network.verification
    assert ver.ok and ver.fraction_of_points_used is not None   # the share of the same samples at least eps away
    assert ver.points == round(ver.fraction_of_points_used * sr.exact_network.verification.points)
    assert "fraction_of_points_used" not in json.loads((sh / "report.json").read_text())["exact_network"]["verification"]
    eps_model, _ = load_mlp(sh / "eps_network.pt")
    assert len([m for m in eps_model if isinstance(m, torch.nn.Linear)]) == 3  # two hidden layers
    text = capsys.readouterr().out
    assert "linear regions" in text and "exact network" in text


def test_train_and_compress_digits(tmp_path, capsys):
    ck = tmp_path / "d.pt"
    assert main(["train-mlp", "--hidden", "12,12", "--epochs", "15", "--l1", "0.01", "--out", str(ck)]) == 0
    out = tmp_path / "c"
    assert main(["compress", str(ck), "--samples", "2000", "--out", str(out)]) == 0
    rep = read_report(out / "report.json", CompressToolReport)
    acc = rep.accuracy
    assert acc is not None and acc.before == acc.after and acc.prediction_changes == 0
    assert acc.test_points == 360  # the CNN tasks' test split: 20 % of the 1797 digits
    assert rep.verification.ok and rep.verification.points >= 100_000
    comp, meta = load_mlp(out / "compressed.pt")
    sizes = [m.out_features for m in comp if isinstance(m, torch.nn.Linear)]
    assert sum(sizes[:-1]) == rep.compression.hidden_units_after <= 24
    cert = json.loads((out / "certificates.json").read_text())
    assert cert["schema"] == "latopt.stability/1" and len(cert["units"]) == 2
    text = capsys.readouterr().out
    assert "hidden units 24 ->" in text and "accuracy" in text


def test_mlp_split_is_the_cnn_split_and_older_checkpoints_get_no_accuracy(tmp_path, capsys):
    sp = load_split("digits", 3)
    d = load_digits()
    train, val, test = split_indices(d.target, 3)
    np.testing.assert_array_equal(sp.x_test, (d.data[test] / 16).astype(np.float32))  # the CNN tasks' test digits
    np.testing.assert_array_equal(sp.y_train, d.target[np.sort(np.concatenate([train, val]))])  # train + val
    assert len(sp.y_test) == 360 and len(sp.y_train) == 1437 and sp.box == (0.0, 1.0)
    assert split_of(MlpMeta(data="digits", split=SPLIT, split_seed=3)).y_test.tolist() == sp.y_test.tolist()
    assert split_of(MlpMeta(data="digits", split_seed=3)) is None and split_of(MlpMeta(data="random")) is None
    old = save_mlp(tmp_path / "old.pt", torch.nn.Sequential(torch.nn.Linear(64, 4), torch.nn.ReLU(), torch.nn.Linear(4, 10)),
                   MlpMeta(data="digits", split_seed=0, box=[0.0, 1.0]))  # made before meta.split
    assert main(["compress", str(old), "--samples", "200", "--out", str(tmp_path / "c")]) == 0
    out, err = capsys.readouterr()
    assert "older digits split: no test accuracy" in out + err
    assert json.loads((tmp_path / "c" / "report.json").read_text())["accuracy"] is None


def test_bad_inputs_exit_2_and_write_nothing(random_ckpt, tmp_path, capsys):
    out = tmp_path / "never"
    assert main(["compress", str(random_ckpt), "--box", "1,-1", "--out", str(out)]) == 2
    assert "inverted" in capsys.readouterr().err
    assert main(["regions", str(random_ckpt), "--box", "0,0", "--out", str(out)]) == 2
    assert "empty" in capsys.readouterr().err
    assert main(["shallow", str(random_ckpt), "--epsilon", "0", "--out", str(out)]) == 2
    assert "--epsilon" in capsys.readouterr().err
    torch.save({"schema": "latopt.checkpoint/1", "arch": {"model": "mobilenetv2_100"}, "state_dict": {}},
               tmp_path / "cnn.pt")
    assert main(["compress", str(tmp_path / "cnn.pt"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "not a fully connected ReLU network" in err and err.count("\n") == 1
    big = tmp_path / "big.pt"
    assert main(["train-mlp", "--data", "random", "--inputs", "16", "--hidden", "8", "--out", str(big)]) == 0
    assert main(["regions", str(big), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "input limit 8 (max_inputs)" in err and err.endswith("(option --max-inputs)\n"), err
    assert main(["regions", str(random_ckpt), "--max-regions", "3", "--out", str(out)]) == 2
    assert "region limit hit" in capsys.readouterr().err
    assert main(["train-mlp", "--hidden", "0,4", "--out", str(out / "x.pt")]) == 2
    assert not out.exists()


@pytest.mark.parametrize("lr", ["nan", "inf", "-0.1", "0"])
def test_train_mlp_refuses_a_bad_learning_rate_up_front(tmp_path, capsys, lr):
    out = tmp_path / "m.pt"
    assert main(["train-mlp", "--lr", lr, "--epochs", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"lr {float(lr)} must be a finite number > 0, e.g. 0.01 (option --lr)" in err, err
    assert not out.exists()


class _Bomb:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


@pytest.mark.parametrize("fmt", ["zip", "raw pickle"])
def test_compress_on_a_pickle_with_code_prints_one_line_only(tmp_path, capsys, fmt):
    import pickle
    import warnings

    marker, bomb = tmp_path / "pwned", tmp_path / "bomb.pt"
    payload = {"schema": "latopt.mlp/1", "state_dict": _Bomb(marker)}
    if fmt == "zip":
        torch.save(payload, bomb)
    else:
        bomb.write_bytes(pickle.dumps(payload, protocol=4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["compress", str(bomb), "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert not caught, [str(w.message) for w in caught]      # torch's warnings were printed before the error
    why = "holds a pickled reference to io.open" if fmt == "zip" else "cannot be read as a torch checkpoint"
    assert err.count("\n") == 1 and why in err, err
    assert not marker.exists() and not (tmp_path / "c").exists()


def test_compress_refuses_a_nan_time_limit(random_ckpt, tmp_path, capsys):
    assert main(["compress", str(random_ckpt), "--time-limit", "nan", "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert "--time-limit" in err and "got nan" in err, err
    assert not (tmp_path / "c").exists()


def test_regions_grid_is_bounded(tmp_path, capsys):
    p3 = tmp_path / "r3.pt"
    assert main(["train-mlp", "--data", "random", "--inputs", "3", "--hidden", "4", "--outputs", "1",
                 "--out", str(p3)]) == 0
    capsys.readouterr()
    for grid, say in (("1000", "1000^3 = 1e+09 points"), ("-1", "grid -1: give a whole")):   # 1000^3 ran for hours before
        assert main(["regions", str(p3), "--grid", grid, "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err.strip()
        assert say in err and len(err.splitlines()) == 1 and not (tmp_path / "o").exists()
    assert main(["regions", str(p3), "--grid", "20", "--out", str(tmp_path / "ok")]) == 0
    from latopt.exact.tools import MAX_GRID_POINTS
    assert int(MAX_GRID_POINTS ** (1 / 3) + 1e-9) == 271        # the default for 3 inputs, as --help says
