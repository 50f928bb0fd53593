"""The inputs every case starts from, built once with the checkout's own commands."""

from __future__ import annotations

import dataclasses
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from .process import ROOT, latopt

MODEL, RES, SAMPLES = "mobilenetv2_035", 32, 64
TINY_CONFIG = {
    "name": "tiny", "model": {"name": MODEL},
    "data": {"task": "digits", "resolution": RES, "batch_size": 64, "max_samples": SAMPLES},
    "train": {"epochs": 1, "optimizer": "adamw", "lr": 0.01},
    "fold": {"epochs": 1, "post_epochs": 1, "lr": 0.003, "alpha_lr": 0.5},
    "search": {"lambda_c": [0.5, 50.0], "tau": [0.3, 0.9], "p": [1.5, 3.0], "trials": 2, "max_acc_drop": 0.5},
    "threads": 1,
}
FAST_DEVICE = {"name": "cpu-fuzz", "warmup": 1, "min_repeats": 3, "max_repeats": 5, "budget_s": 1}
FOLD_SOME = ["--lambda-c", "50", "--tau", "0.3", "--p", "1.5"]   # folds most blocks of the tiny model
FOLD_NONE = ["--lambda-c", "0", "--tau", "1"]                    # folds nothing


@dataclasses.dataclass
class Fixtures:
    """Inputs every case starts from, built once by the checkout's own commands."""

    root: Path
    in_process: bool = False

    def __getattr__(self, name: str) -> Path:   # fx.base, fx.folded, ... (see PATHS)
        if name in self.PATHS:
            return self.root / self.PATHS[name]
        raise AttributeError(name)

    PATHS = {"config": "tiny.yaml", "device": "device.yaml", "base": "base/base.pt", "folded": "fold/folded.pt",
             "folded_nothing": "fold0/folded.pt", "lut": "lut.json", "study_runs": "runs",
             "study_db": "runs/tiny/search/study.db", "mlp": "mlp.pt", "export": "export", "cifar_ok": "cifar-ok",
             "images_ok": "images-ok", "images_corrupt": "images-corrupt"}

    def build(self, log: Callable[[str], None] = print) -> Fixtures:
        ready = self.root / "READY"
        if ready.is_file():
            return self
        self.root.mkdir(parents=True, exist_ok=True)
        device = yaml.safe_load((ROOT / "latopt" / "profiles" / "cpu.yaml").read_text())
        device.update(FAST_DEVICE)
        self.device.write_text(yaml.safe_dump(device))
        self.config.write_text(yaml.safe_dump({**TINY_CONFIG, "device": str(self.device)}))
        steps = [
            ("train", ["train", "--config", str(self.config), "--out", str(self.root / "base"), "--quiet"]),
            ("fold", ["fold", "--config", str(self.config), "--checkpoint", str(self.base), "--out",
                      str(self.root / "fold"), "--quiet", *FOLD_SOME]),
            ("fold (nothing)", ["fold", "--config", str(self.config), "--checkpoint", str(self.base), "--out",
                                str(self.root / "fold0"), "--quiet", *FOLD_NONE]),
            ("profile", ["profile", "--device", str(self.device), "--model", MODEL, "--resolution", str(RES),
                         "--num-classes", "10", "--out", str(self.lut), "--quiet"]),
            ("search", ["search", "--config", str(self.config), "--base", str(self.base), "--lut", str(self.lut),
                        "--trials", "1", "--runs-dir", str(self.study_runs), "--quiet"]),
            ("export", ["export", "--checkpoint", str(self.folded), "--device", str(self.device), "--samples", "4",
                        "--no-measure", "--out", str(self.export)]),
            ("train-mlp", ["train-mlp", "--data", "random", "--inputs", "2", "--hidden", "8,8", "--outputs", "1",
                           "--out", str(self.mlp)]),
        ]
        for what, argv in steps:
            log(f"[harness] fixture: {what}")
            r = latopt(argv, self.root, in_process=self.in_process)
            if r.rc != 0:
                raise SystemExit(f"fixture step {what!r} failed (exit {r.rc}) on this checkout:\n{r.err[-3000:]}")
        make_cifar(self.cifar_ok, None)
        make_images(self.images_ok, corrupt=False)
        make_images(self.images_corrupt, corrupt=True)
        ready.write_text("ok\n")
        return self


class RunsOnUnpickle:
    """Pickles as a call ``open(marker, "a")``: a full unpickler that loads it creates the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple:
        return (open, (self.marker, "a"))


def make_cifar(root: Path, marker: Path | None) -> None:
    """A 5 x 20 + 20 image ``cifar-10-batches-py``; with ``marker``, ``batches.meta`` holds a pickle global."""
    import numpy as np

    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {"data": rng.integers(0, 256, (20, 3072), dtype=np.uint8), "labels": [i % 10 for i in range(20)]}
        (d / name).write_bytes(pickle.dumps(batch, protocol=2))
    meta: dict[str, Any] = {"label_names": [f"class{i}" for i in range(10)]}
    if marker is not None:
        meta["x"] = RunsOnUnpickle(marker)
    (d / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))


def make_images(root: Path, corrupt: bool) -> None:
    """An image folder (train/val, 2 classes x 4/2 PNGs); ``corrupt``: an image that is not the first of
    its split is junk, in both splits."""
    from PIL import Image

    for split, n in (("train", 4), ("val", 2)):
        for c, colour in (("a", (200, 30, 30)), ("b", (30, 30, 200))):
            d = root / split / c
            d.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                Image.new("RGB", (12, 12), colour).save(d / f"img{i}.png")
    if corrupt:
        for junk in (root / "train" / "a" / "img2.png", root / "val" / "a" / "img1.png"):
            junk.write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(64))
