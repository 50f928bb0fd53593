"""`latopt train-mlp --data fashion-mnist[:PATH] | mnist[:PATH]` and `latopt compress` on the result, on small
IDX files written here (60 training and 20 test images of 28x28), and the one-line errors of a missing set."""

from __future__ import annotations

import gzip
import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from latopt.cli import main
from latopt.data.mnist import split_train_val
from latopt.exact.exact_record import CompressToolReport, read_report
from latopt.exact.mlp import DEFAULT_EPOCHS, IDX_SPLIT, load_mlp, load_split, split_of

N_TRAIN, N_TEST = 60, 20


def _idx_bytes(a: np.ndarray) -> bytes:
    """An IDX file of unsigned bytes: 00 00 08 <ndim>, one big-endian uint32 per dimension, the data."""
    return bytes([0, 0, 0x08, a.ndim]) + struct.pack(f">{a.ndim}I", *a.shape) + a.astype(np.uint8).tobytes()


def write_idx_set(d: Path, seed: int = 0, gz: bool = True) -> dict[str, np.ndarray]:
    """The four MNIST files in ``d`` (gzipped when ``gz``): images with a bright 7x7 block whose place is the
    label, over noise (learnable by a tiny MLP), labels 0..9."""
    rng = np.random.default_rng(seed)
    d.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for split, n in (("train", N_TRAIN), ("t10k", N_TEST)):
        y = rng.permutation(np.arange(n) % 10).astype(np.uint8)
        x = rng.integers(0, 80, size=(n, 28, 28)).astype(np.uint8)
        for i, c in enumerate(y):
            r, col = divmod(int(c), 4)
            x[i, 7 * r:7 * r + 7, 7 * col:7 * col + 7] = 255
        for kind, a, magic in (("images", x, 3), ("labels", y, 1)):
            name = f"{split}-{kind}-idx{magic}-ubyte"
            raw = _idx_bytes(a)
            if gz:
                (d / f"{name}.gz").write_bytes(gzip.compress(raw, mtime=0))
            else:
                (d / name).write_bytes(raw)
        arrays[f"{split}_images"], arrays[f"{split}_labels"] = x, y
    return arrays


@pytest.fixture(scope="module")
def idx_dir(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    d = tmp_path_factory.mktemp("fmnist") / "fashion"
    return d, write_idx_set(d)


@pytest.fixture(scope="module")
def trained(idx_dir, tmp_path_factory) -> Path:
    d, _ = idx_dir
    ck = tmp_path_factory.mktemp("ck") / "fm.pt"
    assert main(["train-mlp", "--data", f"fashion-mnist:{d}", "--hidden", "8,6", "--epochs", "4", "--l1", "0.01",
                 "--threads", "1", "--seed", "1", "--out", str(ck)]) == 0
    return ck


def test_train_mlp_records_the_split(idx_dir, trained, capsys):
    d, arrays = idx_dir
    model, meta = load_mlp(trained)
    assert [m.in_features for m in model if isinstance(m, torch.nn.Linear)][0] == 784
    assert model[-1].out_features == 10
    assert meta.data == "fashion-mnist" and meta.split == IDX_SPLIT and meta.split_seed == 1
    assert meta.data_dir == str(d.resolve()) and meta.box == [0.0, 1.0] and meta.epochs == 4
    tr, va = split_train_val(N_TRAIN, 1)
    assert meta.train_images == len(tr) == N_TRAIN - 6 and meta.test_images == N_TEST
    assert "outside the validation split" in meta.split_detail and "split_seed 1" in meta.split_detail
    assert 0 <= meta.val_acc <= 1 and 0 <= meta.test_acc <= 1
    # the split the checkpoint names: the non-validation training images /255, flattened; the test images
    sp = split_of(meta)
    np.testing.assert_array_equal(sp.x_train, arrays["train_images"][tr].reshape(len(tr), 784) / np.float32(255))
    np.testing.assert_array_equal(sp.y_train, arrays["train_labels"][tr])
    np.testing.assert_array_equal(sp.x_val, arrays["train_images"][va].reshape(len(va), 784) / np.float32(255))
    np.testing.assert_array_equal(sp.y_test, arrays["t10k_labels"])
    assert sp.x_train.dtype == np.float32 and sp.x_train.min() >= 0 and sp.x_train.max() == 1.0
    # deterministic: the same command gives the same weights
    again = trained.parent / "again.pt"
    assert main(["train-mlp", "--data", f"fashion-mnist:{d}", "--hidden", "8,6", "--epochs", "4", "--l1", "0.01",
                 "--seed", "1", "--out", str(again)]) == 0
    other, _ = load_mlp(again)
    for a, b in zip(model.state_dict().values(), other.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert "validation accuracy" in capsys.readouterr().out


def test_compress_checks_in_float64_and_reports_test_accuracy(trained, tmp_path, capsys):
    out = tmp_path / "c"
    assert main(["compress", str(trained), "--samples", "1000", "--time-limit", "10", "--threads", "1",
                 "--out", str(out)]) == 0
    rep = read_report(out / "report.json", CompressToolReport)
    assert rep.box.dim == 784
    v = rep.verification
    assert v.ok and v.points >= 100_000 and v.max_rel_float64 is not None and v.max_rel_float64 <= v.rtol == 1e-5
    acc = rep.accuracy
    assert acc is not None and acc.data == "fashion-mnist" and acc.test_points == N_TEST
    assert acc.before == acc.after and acc.prediction_changes == 0
    model, meta = load_mlp(trained)
    assert acc.before == pytest.approx(meta.test_acc)
    comp, cmeta = load_mlp(out / "compressed.pt")
    sizes = [m.out_features for m in comp if isinstance(m, torch.nn.Linear)]
    assert sum(sizes[:-1]) == rep.compression.hidden_units_after <= 14
    assert cmeta.data == "fashion-mnist" and cmeta.box == [0.0, 1.0]
    # the compressed network equals the original on the test images too (float64)
    x = torch.as_tensor(split_of(meta).x_test, dtype=torch.float64)
    with torch.no_grad():
        diff = (model.double()(x) - comp.double()(x)).abs().max().item()
    assert diff <= 1e-5 * max(v.output_scale, 1.0)
    text = capsys.readouterr().out
    assert "hidden units 14 ->" in text and f"on {N_TEST} test fashion-mnist images" in text


def test_compress_finds_moved_files_by_latopt_data_and_refuses_other_files(idx_dir, trained, tmp_path, monkeypatch,
                                                                           capsys):
    d, _ = idx_dir
    moved = tmp_path / "ck.pt"
    shutil.copy(trained, moved)
    _, meta = load_mlp(moved)
    # the recorded directory is gone: LATOPT_DATA/fashion-mnist holds the same files
    meta_gone = meta.model_copy(update={"data_dir": str(tmp_path / "gone")})
    monkeypatch.setenv("LATOPT_DATA", str(tmp_path / "data"))
    shutil.copytree(d, tmp_path / "data" / "fashion-mnist")
    assert split_of(meta_gone).y_test.tolist() == split_of(meta).y_test.tolist()
    # other files there (and the recorded directory gone): compress runs, without accuracy, and says why
    write_idx_set(tmp_path / "other" / "fashion-mnist", seed=5, gz=False)
    monkeypatch.setenv("LATOPT_DATA", str(tmp_path / "other"))
    from latopt.exact.mlp import save_mlp
    model, _ = load_mlp(moved)
    save_mlp(moved, model, meta_gone)
    out = tmp_path / "c"
    assert main(["compress", str(moved), "--samples", "500", "--out", str(out)]) == 0
    data = json.loads((out / "report.json").read_text())
    assert data["accuracy"] is None   # written as null, not left out
    rep = read_report(out / "report.json", CompressToolReport)
    assert rep.accuracy is None and rep.verification.ok
    assert rep.accuracy_note is not None and "are not the ones the network was trained on" in rep.accuracy_note
    captured = capsys.readouterr()
    assert "accuracy not measured" in captured.out and "test split digest" in captured.out + captured.err


def test_latopt_data_mnist_and_the_default_epochs(tmp_path, monkeypatch):
    write_idx_set(tmp_path / "data" / "mnist", seed=2, gz=False)
    monkeypatch.setenv("LATOPT_DATA", str(tmp_path / "data"))
    ck = tmp_path / "m.pt"
    assert main(["train-mlp", "--data", "mnist", "--hidden", "4", "--out", str(ck)]) == 0
    _, meta = load_mlp(ck)
    assert DEFAULT_EPOCHS == {"digits": 600, "fashion-mnist": 120, "mnist": 120}
    assert meta.data == "mnist" and meta.epochs == 120 and meta.split == IDX_SPLIT
    assert meta.data_dir == str((tmp_path / "data" / "mnist").resolve())
    assert len(load_split("mnist", 0).y_test) == N_TEST


def test_a_missing_or_broken_data_set_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LATOPT_DATA", str(tmp_path / "empty"))
    out = tmp_path / "m.pt"
    assert main(["train-mlp", "--data", "mnist", "--hidden", "4", "--epochs", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "mnist not found in" in err and "LATOPT_DATA" in err, err
    assert err.rstrip().endswith("(option --data)")
    for spec, say in ((f"fashion-mnist:{tmp_path / 'nowhere'}", "does not exist"),
                      ("fashion-mnist:", "names no directory"), ("cifar", "unknown data set 'cifar'"),
                      ("digits:/x", "unknown data set")):
        assert main(["train-mlp", "--data", spec, "--epochs", "1", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and say in err, err
    broken = tmp_path / "broken"
    write_idx_set(broken, gz=False)
    (broken / "t10k-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x03" + struct.pack(">3I", N_TEST, 28, 28) + b"\x01")
    assert main(["train-mlp", "--data", f"mnist:{broken}", "--epochs", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is truncated" in err, err
    assert main(["train-mlp", "--data", f"mnist:{broken}", "--threads", "0", "--out", str(out)]) == 2
    assert "threads must be in [1, 1024] (torch intra-op threads), got 0 (option --threads)" in capsys.readouterr().err
    assert not out.exists()
