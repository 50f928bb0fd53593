"""The bundled Fashion-MNIST subset (task ``fashion-mnist-mini``, the quickstart's data): what the package ships,
how it is split, and that it is what tools/make_fashion_mini.py makes from the real files (when they are here)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from latopt.config import load_config
from latopt.data import load_task
from latopt.data.mnist import MINI_FILE, MINI_LICENSE

DEBIAN = Path("/usr/share/datasets/fashion-mnist")


def test_the_subset_ships_with_its_licence() -> None:
    assert MINI_FILE.is_file() and (MINI_FILE.parent / MINI_LICENSE).is_file()
    notice = (MINI_FILE.parent / MINI_LICENSE).read_text()
    assert "Copyright © 2017 Zalando SE" in notice and "Permission is hereby granted" in notice
    with np.load(MINI_FILE) as z:
        assert z["train_x"].shape == (13000, 28, 28) and z["train_x"].dtype == np.uint8
        assert z["test_x"].shape == (5000, 28, 28)
        # stratified: 1,300 and 500 of each class
        assert np.bincount(z["train_y"]).tolist() == [1300] * 10 and np.bincount(z["test_y"]).tolist() == [500] * 10
        assert len(set(z["train_index"].tolist())) == 13000 and len(set(z["test_index"].tolist())) == 5000


def test_the_task_splits_train_and_validation_by_split_seed_and_keeps_the_test_split() -> None:
    cfg = load_config("quickstart", {"data.task": "fashion-mnist-mini", "data.resolution": 16})
    a, b = load_task(cfg), load_task(cfg.with_overrides({"data.split_seed": 1}))
    assert a.sizes() == {"train": 8000, "val": 5000, "test": 5000} and a.num_classes == 10
    assert not np.array_equal(a.val.labels.numpy(), b.val.labels.numpy())          # another validation split
    assert np.array_equal(a.test.labels.numpy(), b.test.labels.numpy())            # the same test split
    x, y = a.train[0]
    assert tuple(x.shape) == (3, 16, 16) and 0 <= y < 10


@pytest.mark.fashion_mnist
@pytest.mark.skipif(not DEBIAN.is_dir(), reason="the tool reads Debian's copy: apt-get install -y dataset-fashion-mnist")
def test_it_is_what_the_tool_makes_from_the_real_files(tmp_path: Path) -> None:
    from tools.make_fashion_mini import main

    assert main(["--source", str(DEBIAN), "--out", str(tmp_path / "m.npz")]) == 0
    with np.load(tmp_path / "m.npz") as made, np.load(MINI_FILE) as shipped:
        for key in ("train_x", "train_y", "test_x", "test_y", "train_index", "test_index", "sources"):
            assert np.array_equal(made[key], shipped[key]), key
    from latopt.data.idx import read_mnist_files

    train_x, train_y, test_x, test_y = read_mnist_files(DEBIAN)
    with np.load(MINI_FILE) as z:
        assert np.array_equal(train_x[z["train_index"]], z["train_x"]) and np.array_equal(test_y[z["test_index"]], z["test_y"])
    digest = hashlib.sha256((DEBIAN / "train-images-idx3-ubyte.gz").read_bytes()).hexdigest()
    assert any(digest in s for s in np.load(MINI_FILE)["sources"].tolist())
