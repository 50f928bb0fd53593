"""Hostile input on the data side (issue 49, classes A, B, C, E, F, L): a last training batch of one image, an
unbounded split seed, IDX images of another size and a gzip bomb, counts without bounds, a configured data
location replaced by another copy, and messages that did not say what was wrong. Each ends in one line (exit 2 from
the CLI) and nothing written. Nothing here trains a network."""

from __future__ import annotations

import gzip
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch

from latopt.cli import main
from latopt.config import RunConfig, config_from_dict
from latopt.counts import COUNTS, MAX_LOADER_WORKERS, MAX_TRIALS, check_count
from latopt.data import get_task, load_task, make_loaders
from latopt.data import mnist as mnist_mod
from latopt.data.idx import MAX_IDX_BYTES, read_mnist_files
from latopt.errors import LatoptError
from latopt.files.checkpoint import read_meta
from latopt.nets.models import build_model
from latopt.training.torch_settings import set_threads
from tests.test_data_idx import write_idx, write_set


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("latopt: error: "), err
    return lines[0]


def _refused(args: list[str], capsys, *words: str) -> str:
    assert main(args) == 2
    line = _one_line(capsys.readouterr().err)
    assert all(w in line for w in words), (words, line)
    return line


# ------------------------------------------------------------------------------------ A: a batch of one image
def _digits(**data) -> RunConfig:
    return config_from_dict({"data": {"task": "digits", "resolution": 8, **data}})


def test_a_last_batch_of_one_image_is_dropped_and_a_one_image_split_refused() -> None:
    """N = 1 (mod batch): the epoch's last batch of one image, which batch norm cannot train on (1x1 maps: one
    value per channel), is dropped; no other batch is."""
    for n, batch, sizes in ((257, 32, [32] * 8), (65, 32, [32, 32]), (40, 32, [32, 8]), (2, 32, [2])):
        train = make_loaders(load_task(_digits(train_samples=n, batch_size=batch)), batch)[0]
        assert [len(y) for _, y in train] == sizes, n
    for data in ({"train_samples": 1}, {"max_samples": 1}):
        with pytest.raises(LatoptError, match="holds 1 image.*batch norm needs 2 or more.*data.train_samples") as e:
            make_loaders(load_task(_digits(**data)), 64)
        assert "\n" not in str(e.value)
    with pytest.raises(LatoptError, match="data.batch_size 1 is 1 image per training step.*batch of 2 or more"):
        make_loaders(load_task(_digits()), 1)


def test_a_one_image_training_split_is_one_line_from_latopt_train(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model: {name: mobilenetv2_035}\ndata: {task: digits, resolution: 8, max_samples: 1}\n"
                   "train: {epochs: 1}\n")
    _refused(["train", "--config", str(cfg), "--out", str(tmp_path / "o")], capsys, "batch norm needs 2 or more")
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------------------- B: data.split_seed
@pytest.mark.parametrize("seed", [-1, 2**32, 10**30])
def test_split_seed_is_bounded_as_checkpoints_bound_it(seed: int) -> None:
    with pytest.raises(LatoptError, match=r"'data.split_seed' must be in \[0, 4294967295\]"):
        _digits(split_seed=seed)
    with pytest.raises(LatoptError, match=r"'split_seed' must be in \[0, 4294967295\]"):
        read_meta({"split_seed": seed}, "ck.pt")
    assert _digits(split_seed=2**32 - 1).data.split_seed == read_meta({"split_seed": 2**32 - 1}).split_seed


# ------------------------------------------------------------------------------------ C: IDX image sizes
@pytest.mark.parametrize("size", [(0, 28), (1, 1), (5, 5), (28, 27)])
def test_idx_images_of_another_size_are_refused_naming_the_file(tmp_path: Path, size: tuple[int, int]) -> None:
    d = write_set(tmp_path / "fm")
    bad = write_idx(d / "train-images-idx3-ubyte", np.zeros((60, *size), np.uint8), True)
    with pytest.raises(LatoptError) as e:
        get_task(f"fashion-mnist:{d}", 32, 0)
    msg = str(e.value)
    assert str(bad) in msg and f"{size[0]}x{size[1]} pixels" in msg and "are 28x28" in msg and "\n" not in msg


def test_a_gzip_bomb_is_refused_before_it_is_inflated(tmp_path: Path) -> None:
    """The header declares 60 images; the body inflates to 64 MB. Reading stops one byte past the declared size."""
    d = write_set(tmp_path / "fm")
    bomb = d / "train-images-idx3-ubyte.gz"
    with gzip.GzipFile(bomb, "wb", compresslevel=1) as f:
        f.write(struct.pack(">BBBB3I", 0, 0, 8, 3, 60, 28, 28))
        for _ in range(64):
            f.write(bytes(1 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(LatoptError, match="longer than its header says: dimensions 60x28x28 need 47040 bytes"):
            read_mnist_files(d)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak   # never the 64 MB body
    # a header declaring more than an IDX file may hold is refused before its body is read
    bomb.write_bytes(gzip.compress(struct.pack(">BBBB3I", 0, 0, 8, 3, MAX_IDX_BYTES // 784 + 1, 28, 28)))
    with pytest.raises(LatoptError, match="malformed"):
        read_mnist_files(d)


# ----------------------------------------------------------------------------------- E: counts and bounds
def test_every_count_has_a_bound_and_one_line() -> None:
    for name, c in COUNTS.items():
        lo, hi = c.lo, (c.hi or 10**9)
        assert check_count(lo, name) == lo
        for bad in (lo - 1, hi + 1, True, 2.0):
            with pytest.raises(LatoptError, match=f"{name} must be"):
                check_count(bad, name)
    with pytest.raises(LatoptError, match=r"threads must be in \[1, 1024\]"):
        set_threads(100_000)
    assert torch.get_num_threads() == 1
    with pytest.raises(LatoptError, match=rf"'data.workers' must be in \[0, {MAX_LOADER_WORKERS}\]"):
        _digits(workers=1000)
    with pytest.raises(LatoptError, match=rf"'search.trials' must be in \[1, {MAX_TRIALS}\]"):
        config_from_dict({"search": {"trials": 1_000_000}})


def test_counts_from_the_command_line_are_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _refused(["train-mlp", "--threads", "100000", "--out", "m.pt"], capsys, "threads must be in [1, 1024]",
             "(option --threads)")
    runs = ["--runs-dir", str(tmp_path / "runs")]
    _refused(["plan", "--config", "quickstart", "--workers", "1000", *runs], capsys, "workers must be in [1, ",
             "cores", "(option --workers)")
    _refused(["plan", "--config", "quickstart", "--trials", "1000000", *runs], capsys,
             f"trials must be in [1, {MAX_TRIALS}]", "(option --trials)")
    _refused(["search", "--config", "quickstart", "--threads", "100000", *runs], capsys, "threads must be in")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- F: a configured data location
def test_a_configured_data_location_is_never_replaced(tmp_path: Path, monkeypatch) -> None:
    layout, _, package, classes = mnist_mod.SETS["fashion-mnist"]
    debian = write_set(tmp_path / "debian")   # a complete copy where Debian's would be
    monkeypatch.setitem(mnist_mod.SETS, "fashion-mnist", (layout, debian, package, classes))
    monkeypatch.delenv("LATOPT_DATA", raising=False)
    assert len(get_task("fashion-mnist", 28, 0).test) == 20          # unset: Debian's copy
    mine = write_set(tmp_path / "data" / "fashion-mnist")
    (mine / "t10k-labels-idx1-ubyte.gz").unlink()
    monkeypatch.setenv("LATOPT_DATA", str(tmp_path / "data"))
    with pytest.raises(LatoptError, match=r"\(\$LATOPT_DATA/fashion-mnist; .*lacks t10k-labels-idx1-ubyte\[\.gz\] \(of"):
        get_task("fashion-mnist", 28, 0)
    (tmp_path / "file").write_text("x")
    for where, what in ((tmp_path / "file", "is not a directory"), (tmp_path / "nowhere", "does not exist")):
        monkeypatch.setenv("LATOPT_DATA", str(where))
        with pytest.raises(LatoptError, match=rf"\$LATOPT_DATA is {where}, which {what}") as e:
            get_task("fashion-mnist", 28, 0)
        assert "\n" not in str(e.value)
    monkeypatch.setenv("LATOPT_DATA", str(tmp_path))                  # no fashion-mnist/ under it: Debian's
    assert len(get_task("fashion-mnist", 28, 0).test) == 20


# ------------------------------------------------------------------------------------- L: clear messages
def test_messages_say_what_is_wrong(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LatoptError, match=r"num_classes must be in \[1, 100000\]"):
        build_model("mobilenetv2_035", 1_000_000_000)
    _refused(["inspect", "mobilenetv2_035", "--num-classes", "1000000000"], capsys, "[1, 100000]",
             "checkpoints enforce", "(option --num-classes)")
    _refused(["profile", "--device", "cpu", "--model", "mobilenetv2_035", "--num-classes", "0"], capsys, "[1, 100000]")
    for variants in ("", "pw,,drop"):
        _refused(["plan", "--config", "quickstart", "--budget", "0.6", "--plan-only", "--importance", "uniform",
                  "--variants", variants], capsys, "the variants list is empty")
    for flag in ("--inputs", "--outputs"):
        _refused(["train-mlp", flag, "5", "--data", "digits", "--out", "m.pt"], capsys,
                 f"{flag[2:]} applies to data 'random' only", f"(option {flag})")
    assert list(tmp_path.iterdir()) == []
