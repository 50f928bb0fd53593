"""Task specs and dataset loaders (latopt.data); tiny image folders / CIFAR batches built on disk."""

from __future__ import annotations

import functools
import io
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from latopt.data import CIFAR_MEAN, CIFAR_STD, Task, get_task, limit_task, make_loaders
from latopt.errors import LatoptError
from latopt.training.accel import Accel

pytestmark = pytest.mark.floor   # .ci/run's lower-bounds run selects these tests


def _all(ds) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = zip(*(ds[i] for i in range(len(ds))), strict=True)
    return torch.stack(xs), torch.tensor(ys)


def test_digits_split_is_deterministic_and_disjoint() -> None:
    a, b, c = get_task("digits", 16, 0), get_task("digits", 16, 0), get_task("digits", 16, 1)
    assert a.num_classes == 10 and sum(a.sizes().values()) == 1797
    assert a.sizes() == {"train": 1078, "val": 359, "test": 360}
    xa, ya = _all(a.train)
    xb, yb = _all(b.train)
    assert xa.shape == (1078, 3, 16, 16) and torch.equal(xa, xb) and torch.equal(ya, yb)
    assert not torch.equal(xa, _all(c.train)[0])  # another split seed, another split
    assert abs(float(xa.mean())) < 1e-4 and abs(float(xa.std()) - 1) < 1e-3  # normalised by the train split
    assert set(ya.tolist()) == set(range(10))
    # disjoint: no test image equals a training image exactly (the source digits are distinct samples)
    xt = _all(a.test)[0]
    flat_train = {tuple(v) for v in xa[:, 0].flatten(1).numpy().round(5).tolist()}
    overlap = sum(tuple(v) in flat_train for v in xt[:, 0].flatten(1).numpy().round(5).tolist())
    assert overlap <= 2  # load_digits holds a couple of exact duplicates, not a leak


def test_digits_augment_shifts_training_images_only() -> None:
    plain, aug = get_task("digits", 16, 0), get_task("digits", 16, 0, augment=True)
    torch.manual_seed(0)
    shifted = [aug.train[i][0] for i in range(20)]
    assert any(not torch.equal(s, plain.train[i][0]) for i, s in enumerate(shifted))
    assert all(torch.equal(aug.test[i][0], plain.test[i][0]) for i in range(5))


def test_digits_clutter_task() -> None:
    a = get_task("digits-clutter", 24, 3)
    assert a.sizes() == {"train": 3 * 1078, "val": 3 * 359, "test": 3 * 360}
    x, y = a.test[5]
    assert x.shape == (3, 24, 24) and 0 <= y < 10
    assert abs(float(_all(limit_task(a, 200).train)[0].mean())) < 0.2


def test_digits_clutter_augment_draws_fresh_canvases_reproducibly() -> None:
    task = get_task("digits-clutter", 24, 3, augment=True)
    assert len(task.train) == 3 * 1078
    torch.manual_seed(0)
    a = [task.train[i] for i in (0, 0, 4)]
    torch.manual_seed(0)
    b = [task.train[i] for i in (0, 0, 4)]
    assert all(torch.equal(x[0], y[0]) and x[1] == y[1] for x, y in zip(a, b, strict=True))
    assert a[0][0].shape == (3, 24, 24) and not torch.equal(a[0][0], a[1][0])  # a new canvas each draw
    assert a[0][1] == a[1][1]  # copies of one source digit keep its label
    assert torch.equal(task.test[7][0], get_task("digits-clutter", 24, 3).test[7][0])  # eval splits fixed


def test_clutter_canvases_are_deterministic_in_the_seed() -> None:
    from latopt.data.digits import CLUTTER_CANVAS, _clutter_canvases, _load_digits

    src = torch.from_numpy(_load_digits()[0])[:40, None]
    idx = np.arange(40)

    def make(seed: int) -> torch.Tensor:
        return _clutter_canvases(src, idx, 2, np.random.default_rng(seed))

    a, b, c = make(1), make(1), make(2)
    assert a.shape == (80, 1, CLUTTER_CANVAS, CLUTTER_CANVAS) and torch.equal(a, b) and not torch.equal(a, c)
    assert 0.0 <= float(a.min()) and float(a.max()) <= 1.0
    # the digit itself (intensity ~1) is brighter than the dimmed fragments (<= 0.9) + noise
    assert float(a.amax(dim=(1, 2, 3)).median()) > 0.9


def test_limit_task_and_loaders_are_reproducible() -> None:
    task = limit_task(get_task("digits", 8, 0), 50)
    assert task.sizes() == {"train": 50, "val": 50, "test": 50}
    first = [next(iter(make_loaders(task, 16, seed=s)[0]))[1] for s in (0, 0, 1)]
    assert torch.equal(first[0], first[1]) and not torch.equal(first[0], first[2])


class _Draws(torch.utils.data.Dataset):
    """Each sample is a number from the torch generator of the process that loads it (augmentation's source)."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.rand(()), i


def test_the_loader_workers_of_each_process_draw_their_own_random_numbers() -> None:
    """Under torchrun the loader workers of process r are seeded from ``seed + rank``: rank 1 does not draw rank
    0's augmentation (each still a function of the seed)."""
    ds = _Draws()
    task = Task("draws", 2, ["a", "b"], 8, ds, ds, ds)

    def draws(rank: int) -> torch.Tensor:
        train = make_loaders(task, 4, seed=0, accel=Accel(rank=rank, world_size=2, workers=1))[0]
        return torch.cat([x for x, _ in train])

    first = draws(0)
    assert not torch.equal(first, draws(1)) and torch.equal(first, draws(0))


def _png(path: Path, value: int, size=(10, 12)) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((*size, 3), value, dtype=np.uint8)).save(path)


def _imagefolder(root: Path, classes=("cat", "dog"), splits=("train", "val"), n=2) -> Path:
    for s in splits:
        for k, c in enumerate(classes):
            for i in range(n):
                _png(root / s / c / f"{i}.png", 40 * k + i)
    return root


def test_imagefolder_loads_and_resizes(tmp_path: Path) -> None:
    root = _imagefolder(tmp_path / "imgs")
    task = get_task(f"imagefolder:{root}", 16, 0)
    assert task.num_classes == 2 and task.classes == ["cat", "dog"]
    assert task.sizes() == {"train": 4, "val": 4, "test": 4}  # no test/: val doubles as test
    x, y = task.train[3]
    assert x.shape == (3, 16, 16) and y == 1
    _imagefolder(root, splits=("test",), n=1)
    assert get_task(f"imagefolder:{root}", 16, 0, augment=True).sizes()["test"] == 2


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda r: r, "does not exist"),
        (lambda r: (r / "train").mkdir(parents=True) or r, "no val/ sub-folder"),
        (lambda r: [(r / s).mkdir(parents=True) for s in ("train", "val")] and r, "empty or malformed"),
        (lambda r: [(r / s / "a").mkdir(parents=True) for s in ("train", "val")] and r, "empty or malformed"),
        (lambda r: _imagefolder(r, classes=("a",)), "at least 2"),
        (lambda r: _imagefolder(r / "x", splits=("train",)) and _imagefolder(r / "x", ("a", "z"), ("val",)),
         "same class folders"),
    ],
)
def test_imagefolder_errors(tmp_path: Path, make, match: str) -> None:
    root = make(tmp_path / "d")
    with pytest.raises(LatoptError, match=match) as e:
        get_task(f"imagefolder:{root}", 16, 0)
    assert "\n" not in str(e.value)


def test_imagefolder_corrupt_image(tmp_path: Path) -> None:
    root = _imagefolder(tmp_path / "d")
    (root / "val" / "cat" / "0.png").write_bytes(b"not a png")
    with pytest.raises(LatoptError, match="not a readable image"):
        get_task(f"imagefolder:{root}", 16, 0)


def test_imagefolder_corrupt_image_read_during_training(tmp_path: Path, capsys) -> None:
    """A bad file that is not the first of its split: one line naming it and its split when it is read
    (also from a DataLoader worker process), not a traceback in the middle of training."""
    import yaml

    from latopt.cli import main
    from latopt.data import UnreadableImage

    root = _imagefolder(tmp_path / "d", n=3)
    bad = root / "train" / "dog" / "2.png"
    bad.write_bytes(b"\x89PNG truncated")
    task = get_task(f"imagefolder:{root}", 16, 0)          # the first image of each split is fine
    for workers in (0, 1):
        with pytest.raises(UnreadableImage) as e:
            for _ in make_loaders(task, 2, accel=Accel(workers=workers))[0]:
                pass
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith(f"image folder {root / 'train'}: {bad} is not a readable image"), msg
    cfg = {"name": "bad", "model": {"name": "mobilenetv2_035"},
           "data": {"task": f"imagefolder:{root}", "resolution": 16, "batch_size": 2}, "train": {"epochs": 1}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["train", "--config", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


CIFAR_TRAIN = [f"data_batch_{i}" for i in range(1, 6)]


def _cifar_batches(n: int) -> dict[str, tuple[np.ndarray, list[int]]]:
    rng = np.random.default_rng(0)
    return {name: (rng.integers(0, 256, (n, 3072), dtype=np.uint8), [int(v) for v in rng.integers(0, 10, n)])
            for name in [*CIFAR_TRAIN, "test_batch"]}


class _Python2Pickler(pickle._Pickler):
    """Protocol 2 as Python 2 wrote it, like the files of cifar-10-python.tar.gz: bytes (Python 2's str) as
    BINSTRING, so no ``_codecs.encode`` global as Python 3's protocol 2 would need."""

    dispatch = dict(pickle._Pickler.dispatch)

    def save_bytes(self, obj: bytes) -> None:
        n = len(obj)
        self.write((pickle.SHORT_BINSTRING + bytes([n]) if n < 256 else pickle.BINSTRING + struct.pack("<i", n)) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_bytes


def _cifar(root: Path, n: int = 4, numpy_module: str = "numpy.core.multiarray") -> Path:
    """The python batches as the archive has them (numpy 1 names ``numpy.core.multiarray``; numpy 2
    ``numpy._core.multiarray``): dicts of data, labels, filenames with Python 2 str keys."""
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)

    def dump(obj: dict) -> bytes:
        f = io.BytesIO()
        _Python2Pickler(f, protocol=2).dump(obj)
        return f.getvalue().replace(b"cnumpy._core.multiarray\n", f"c{numpy_module}\n".encode())

    for name, (data, labels) in _cifar_batches(n).items():
        (d / name).write_bytes(dump({b"batch_label": name.encode(), b"labels": labels, b"data": data,
                                     b"filenames": [f"{i}.png".encode() for i in range(n)]}))
    (d / "batches.meta").write_bytes(dump({b"label_names": [f"c{i}".encode() for i in range(10)],
                                           b"num_vis": 3072}))
    return d


def _cifar_bin(root: Path, n: int = 4) -> Path:
    """The binary batches: records of a label byte and 3072 image bytes; class names one per line."""
    d = root / "cifar-10-batches-bin"
    d.mkdir(parents=True)
    for name, (data, labels) in _cifar_batches(n).items():
        rows = np.concatenate([np.asarray(labels, np.uint8)[:, None], data], axis=1)
        (d / f"{name}.bin").write_bytes(rows.tobytes())
    (d / "batches.meta.txt").write_text("\n".join(f"c{i}" for i in range(10)) + "\n\n")
    return d


@pytest.mark.parametrize("make", [_cifar, _cifar_bin, functools.partial(_cifar, numpy_module="numpy._core.multiarray")],
                         ids=["python", "binary", "python-numpy2"])
def test_cifar10_directory(tmp_path: Path, make) -> None:
    d = make(tmp_path)
    reference = _cifar_batches(4)["test_batch"]
    for path in (d, d.parent):
        task = get_task(f"cifar10:{path}", 32, 0)
        assert task.num_classes == 10 and task.sizes() == {"train": 18, "val": 2, "test": 4}
        assert task.classes == [f"c{i}" for i in range(10)]
        x, y = task.val[0]
        assert x.shape == (3, 32, 32) and 0 <= y < 10
        x, y = task.test[1]                 # the stored bytes, channel-major, come back as the image
        pixels = torch.from_numpy(reference[0][1].reshape(3, 32, 32).astype(np.float32) / 255)
        mean, std = torch.tensor(CIFAR_MEAN)[:, None, None], torch.tensor(CIFAR_STD)[:, None, None]
        assert y == reference[1][1] and torch.allclose(x, (pixels - mean) / std, atol=1e-5)
    assert get_task(f"cifar10:{d}", 8, 0).test[0][0].shape == (3, 8, 8)


class _Bomb:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


@pytest.mark.parametrize("victim", ["batches.meta", "data_batch_2"])
def test_cifar10_pickle_that_would_run_code_is_refused(tmp_path: Path, victim: str) -> None:
    d = _cifar(tmp_path / "c")
    marker = tmp_path / "pwned"
    (d / victim).write_bytes(pickle.dumps({"label_names": _Bomb(marker), "data": _Bomb(marker)}, protocol=4))
    with pytest.raises(LatoptError) as e:
        get_task(f"cifar10:{d}", 32, 0)
    assert "global io.open" in str(e.value) and str(d / victim) in str(e.value) and "\n" not in str(e.value)
    assert not marker.exists()


def test_cifar10_errors(tmp_path: Path) -> None:
    with pytest.raises(LatoptError, match="does not exist"):
        get_task(f"cifar10:{tmp_path / 'none'}", 32, 0)
    (tmp_path / "empty").mkdir()
    with pytest.raises(LatoptError, match=r"lacks data_batch_1\.\.5.*batches\.meta"):
        get_task(f"cifar10:{tmp_path / 'empty'}", 32, 0)
    d = _cifar(tmp_path / "a")
    (d / "data_batch_3").unlink()
    with pytest.raises(LatoptError, match="lacks data_batch_3.*never downloads"):
        get_task(f"cifar10:{d}", 32, 0)
    d = _cifar(tmp_path / "b")
    (d / "test_batch").write_bytes(b"garbage")
    with pytest.raises(LatoptError, match="malformed"):
        get_task(f"cifar10:{d}", 32, 0)
    d = _cifar(tmp_path / "c")
    (d / "test_batch").write_bytes(pickle.dumps({"data": np.zeros((2, 3072), np.float32), "labels": [0, 1]}, 4))
    with pytest.raises(LatoptError, match="not a uint8 array"):
        get_task(f"cifar10:{d}", 32, 0)
    d = _cifar_bin(tmp_path / "e")
    with (d / "data_batch_1.bin").open("ab") as f:
        f.write(b"\0" * 10)
    with pytest.raises(LatoptError, match="not a whole number of 3073-byte records"):
        get_task(f"cifar10:{d}", 32, 0)
    d = _cifar_bin(tmp_path / "f")
    (d / "test_batch.bin").write_bytes(np.concatenate([[12], np.zeros(3072)]).astype(np.uint8).tobytes())
    with pytest.raises(LatoptError, match="labels outside 0..9"):
        get_task(f"cifar10:{d}", 32, 0)


@pytest.mark.parametrize("spec", ["mnist", "imagefolder:", "cifar100:/x", "", "digits:x", "cifar10"])
def test_unknown_specs(spec: str) -> None:
    with pytest.raises(LatoptError) as e:
        get_task(spec, 32, 0)
    assert e.value.param == "spec"


def test_the_unknown_task_error_lists_the_registered_tasks() -> None:
    with pytest.raises(LatoptError) as e:
        get_task("emnist", 32, 0)
    msg = str(e.value)
    assert "'emnist'" in msg and "\n" not in msg, msg
    for task in ("digits", "digits-clutter", "fashion-mnist[:PATH]", "mnist[:PATH]", "imagefolder:PATH", "cifar10:PATH"):
        assert task in msg, (task, msg)


def test_a_registered_task_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task registered with ``register_task`` is built by ``get_task`` (a directory task with its PATH), listed
    by the unknown-task error, and fingerprinted by its listing; a name is registered once."""
    from latopt.data import registry
    from latopt.data.fingerprint import data_fingerprint

    monkeypatch.setattr(registry, "TASKS", dict(registry.TASKS))   # the registry as it was, after the test
    calls = []

    @registry.register_task("toy", directory=True)
    def toy(spec: str, root: Path | None, resolution: int, seed: int, augment: bool) -> Task:
        calls.append((spec, root, resolution, seed, augment))
        ds = torch.utils.data.TensorDataset(torch.zeros(3, 3, resolution, resolution), torch.tensor([0, 1, 0]))
        return Task(spec, 2, ["a", "b"], resolution, ds, ds, ds)

    task = get_task(f"toy:{tmp_path}", 8, 5, augment=True)
    assert calls == [(f"toy:{tmp_path}", tmp_path, 8, 5, True)]
    assert task.name == f"toy:{tmp_path}" and task.sizes() == {"train": 3, "val": 3, "test": 3}
    with pytest.raises(LatoptError, match=r"'toys'; choose one of digits.*toy:PATH$"):
        get_task("toys", 8, 0)
    with pytest.raises(LatoptError, match="needs a directory: toy:PATH"):
        get_task("toy:", 8, 0)
    before = data_fingerprint(f"toy:{tmp_path}")
    (tmp_path / "new.png").write_bytes(b"x")
    assert data_fingerprint(f"toy:{tmp_path}") != before != f"toy:{tmp_path}"
    for name in ("toy", "digits", "a:b", ""):
        with pytest.raises(ValueError, match="registered already"):
            registry.register_task(name)


def test_the_cli_names_the_flag_of_a_bad_task_spec(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The library error names the parameter (``spec``); ``latopt train`` adds the flag that sets it."""
    from latopt.cli import main

    assert main(["train", "--config", "quickstart", "--data", "emnist", "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.endswith("cifar10:PATH (option --data)\n")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("make", "match"), [
    (lambda r: (r / "train" / "cat" / "loop").symlink_to(r / "train"), "a link loop"),
    (lambda r: os.mkfifo(r / "train" / "cat" / "0.png"), "not a regular file"),   # the first image: it hung
    (lambda r: (r / "val" / "dog" / "x.png").symlink_to(r / "nowhere.png"), "broken link"),
])
def test_imagefolder_links_loops_and_fifos_are_one_line(tmp_path: Path, make, match: str) -> None:
    root = _imagefolder(tmp_path / "d")
    if "fifo" in match or match == "not a regular file":
        (root / "train" / "cat" / "0.png").unlink()
    make(root)
    with pytest.raises(LatoptError, match=match) as e:
        get_task(f"imagefolder:{root}", 16, 0)
    assert "\n" not in str(e.value)


def test_imagefolder_decompression_bomb_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from PIL import Image

    root = _imagefolder(tmp_path / "d")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10)      # a 10x12 image is then a "bomb" to PIL
    with pytest.raises(LatoptError, match="not a readable image") as e:
        get_task(f"imagefolder:{root}", 16, 0)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("spec", ["inception", "imagenet", {"mean": [0.1, 0.2, 0.3], "std": [0.5, 0.25, 1.0]}])
def test_a_normalisation_serves_the_pixels_so(spec) -> None:  # type: ignore[no-untyped-def]
    """``data.normalize``: every split of a task (batched or read per sample) is the task's pixels normalised as
    asked, per channel, exactly; the task records what it serves."""
    from latopt.data import norm_of, renormalize

    for name in ("fashion-mnist-mini", "digits"):
        task = limit_task(get_task(name, 16, 0), 40)
        (tm, ts), (m, s) = task.norm, norm_of(spec)
        got = renormalize(task, spec)
        assert got.norm == (m, s) and renormalize(task, "task") is task
        for split in ("train", "val", "test"):
            x0, y0 = _all(getattr(task, split))
            x1, y1 = _all(getattr(got, split))
            pixels = x0 * torch.tensor(ts).view(3, 1, 1) + torch.tensor(tm).view(3, 1, 1)
            want = (pixels - torch.tensor(m).view(3, 1, 1)) / torch.tensor(s).view(3, 1, 1)
            assert torch.equal(y0, y1) and torch.allclose(x1, want, atol=1e-5)
        batch = next(iter(make_loaders(got, 8, 0)[1]))[0]
        assert torch.allclose(batch, _all(got.val)[0][: len(batch)], atol=1e-6)
    inception = renormalize(get_task("fashion-mnist-mini", 16, 0), "inception")
    x = _all(limit_task(inception, 50).test)[0]
    assert x.min() >= -1 - 1e-6 and x.max() <= 1 + 1e-6 and x.min() < -0.99   # [0, 1] pixels onto [-1, 1]


@pytest.mark.parametrize("value, says", [
    ("foo", "must be task, imagenet, inception or {mean"),
    ({"mean": [1, 2]}, "field mean: must have 3 values"),
    ({"mean": [0, 0, 0], "std": [1, 0, 1]}, "field std.1: input should be greater than 0"),
    ({"mean": [0, 0, 0]}, "field std: field required"),
    (3, "must be task"),
])
def test_a_bad_normalisation_is_one_line(value, says: str) -> None:  # type: ignore[no-untyped-def]
    from latopt.config import load_config
    from latopt.data import norm_of

    with pytest.raises(LatoptError, match="data.normalize") as e:
        load_config("quickstart", {"data.normalize": value})
    assert says in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(LatoptError, match="normalize"):
        norm_of(value)


def test_the_run_serves_what_the_starting_weights_record(tmp_path: Path) -> None:
    """``data.normalize: null`` (the default) is the starting checkpoint's normalisation (``model.weights``), else
    the task's; a set value wins; what was served is recorded (``data_meta``, so in every checkpoint)."""
    from latopt.config import load_config
    from latopt.data import config_norm, data_meta, load_task
    from latopt.files.checkpoint import CheckpointMeta, make_arch, save_checkpoint
    from latopt.nets.models import build_model

    net = build_model("mobilenetv2_035", 10)
    save_checkpoint(tmp_path / "w.pt", net, make_arch(net, "mobilenetv2_035", 10),
                    CheckpointMeta(normalize="inception"))
    plain = load_config("quickstart", {"data.max_samples": 8})
    carried = plain.with_overrides({"model.weights": str(tmp_path / "w.pt")})
    assert config_norm(plain) == "task" and config_norm(carried) == "inception"
    assert config_norm(carried.with_overrides({"data.normalize": "imagenet"})) == "imagenet"
    assert data_meta(carried)["normalize"] == "inception"
    x = _all(load_task(carried).val)[0]
    assert x.min() >= -1 - 1e-6 and x.max() <= 1 + 1e-6 and load_task(carried).norm == ((0.5,) * 3, (0.5,) * 3)
    # what reads a checkpoint's images reads them as it records: export's gates
    from latopt.export.gates import checkpoint_task

    meta = CheckpointMeta(**data_meta(carried))
    assert checkpoint_task(meta, 16).norm == ((0.5,) * 3, (0.5,) * 3)
    assert checkpoint_task(CheckpointMeta(**data_meta(plain)), 16).norm == get_task("fashion-mnist-mini", 16).norm
