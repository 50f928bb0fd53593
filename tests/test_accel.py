"""Placement without a GPU (latopt.training.accel): device resolution, mixed precision, loaders, global batch norm,
device-independent checkpoints, and the training loop's device reads."""

from __future__ import annotations

import copy
import os
import traceback
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from timm.layers import BatchNormAct2d
from torch import nn

from latopt.cli import main
from latopt.config import TrainConfig, load_config
from latopt.data import Task, make_loaders
from latopt.errors import LatoptError
from latopt.files.checkpoint import checkpoint_digest, load_checkpoint, make_arch, save_checkpoint
from latopt.nets.models import build_model
from latopt.training import accel as A
from latopt.training.accel import Accel, default_workers, resolve, resolve_device
from latopt.training.loop import Report, Step, fit, make_optimizer

CONFIG = """
name: acc
model: {name: mobilenetv2_035}
data: {task: digits, resolution: 16, batch_size: 16, max_samples: 32}
train: {epochs: 1}
threads: 1
"""


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


def test_device_resolution_without_a_gpu(no_gpu: None) -> None:
    assert resolve_device("auto") == resolve_device("cpu") == torch.device("cpu")
    for spec in ("cuda", "cuda:1"):
        with pytest.raises(LatoptError, match=rf"train\.device {spec}: .*no CUDA GPU"):
            resolve_device(spec)


def test_device_resolution_with_gpus(two_gpus: None) -> None:
    assert resolve_device("auto") == resolve_device("cuda") == torch.device("cuda", 0)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_device("auto", local_rank=1, local_world=2) == torch.device("cuda", 1)  # torchrun: LOCAL_RANK
    with pytest.raises(LatoptError, match=r"cuda:2 .*sees 2 GPU"):
        resolve_device("cuda:2")
    with pytest.raises(LatoptError, match="all 2 processes .*on GPU 0"):
        resolve_device("cuda:0", local_rank=1, local_world=2)
    with pytest.raises(LatoptError, match="LOCAL_RANK 2 needs GPU 2"):
        resolve_device("cuda", local_rank=2, local_world=3)


def test_config_keys_are_validated(tmp_path: Path) -> None:
    with pytest.raises(LatoptError, match=r"'train\.device' must be one of .*cuda:N"):
        load_config(None, {"train.device": "gpu"})
    with pytest.raises(LatoptError, match=r"'train\.amp' is 'fp8'"):
        load_config(None, {"train.amp": "fp8"})
    cfg = load_config(None, {"train.device": "cuda:3", "train.amp": "bf16"})
    assert (cfg.train.device, cfg.train.amp, cfg.data.workers) == ("cuda:3", "bf16", None)


def test_amp_fp16_on_the_cpu_is_refused_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(LatoptError, match=r"train\.amp fp16 needs a CUDA GPU"):
        resolve(load_config(None, {"train.amp": "fp16", "train.device": "cpu"}))
    (tmp_path / "c.yaml").write_text(CONFIG)
    out = tmp_path / "out"
    cases = [(["--amp", "fp16"], "train.amp fp16 needs a CUDA GPU"),
             (["--train-device", "tpu"], "config key 'train.device' must be one of")]
    if not torch.cuda.is_available():
        cases.append((["--train-device", "cuda"], "train.device cuda: torch sees no CUDA GPU"))
    for args, match in cases:
        capsys.readouterr()
        assert main(["train", "--config", str(tmp_path / "c.yaml"), "--out", str(out), "-q", *args]) == 2, args
        err = capsys.readouterr().err
        assert match in err and err.count("\n") == 1, err
        assert not out.exists() and not (tmp_path / "out.resume.pt").exists()


def test_default_loader_settings(no_gpu: None) -> None:
    a = resolve(load_config(None))
    assert (a.device.type, a.workers, a.pin_memory, a.persistent_workers, a.distributed) == ("cpu", 0, False, False, False)
    a = resolve(load_config(None, {"data.workers": 2}))
    assert (a.workers, a.persistent_workers) == (2, True)
    assert 1 <= default_workers(torch.device("cuda", 0)) <= A.MAX_AUTO_WORKERS
    assert default_workers(torch.device("cpu")) == 0


def _tiny_task(n: int = 20, res: int = 8) -> Task:
    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(n, 3, res, res, generator=g), torch.arange(n) % 3)
    return Task("tiny", 3, ["a", "b", "c"], res, ds, ds, ds)


def test_loaders_split_the_global_batch_over_processes() -> None:
    task = _tiny_task(16)

    def batches(loader, epoch: int) -> list[list[int]]:
        loader.sampler.set_epoch(epoch)
        return [sorted(x[:, 0, 0, 0].tolist()) for x, _ in loader]

    one = make_loaders(task, 8, seed=3)[0]
    ranks = [make_loaders(task, 8, seed=3, accel=Accel(world_size=2, rank=r))[0] for r in (0, 1)]
    assert [r.batch_size for r in ranks] == [4, 4]
    for epoch in (0, 1):  # step k of 2 processes = step k of one process; another order each epoch
        together = [sorted(a + b) for a, b in zip(batches(ranks[0], epoch), batches(ranks[1], epoch), strict=True)]
        assert together == batches(one, epoch)
    assert batches(one, 0) != batches(one, 1)
    val = [list(make_loaders(task, 9, accel=Accel(world_size=3, rank=r))[1].sampler) for r in range(3)]
    assert sorted(sum(val, [])) == list(range(16))  # every sample once, no padding
    with pytest.raises(LatoptError, match=r"batch_size 30 .*4 processes"):
        make_loaders(task, 30, accel=Accel(world_size=4))


def _conv_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, 3))


def _ce(m: nn.Module, x: torch.Tensor, y: torch.Tensor):
    logits = m(x)
    return F.cross_entropy(logits, y), logits, {"scaled": torch.ones((), device=x.device) * 2}


def test_bf16_and_channels_last_train_on_the_cpu() -> None:
    task = _tiny_task()
    for acc in (Accel(amp="bf16"), Accel(channels_last=True)):
        net = acc.prepare(_conv_net())
        opt = make_optimizer(net, TrainConfig(), 0.01)
        hist = fit(net, make_loaders(task, 4, accel=acc)[0], 2, Step(_ce, opt), accel=acc,
                   val_loader=make_loaders(task, 4, accel=acc)[1], report=Report(show=False))
        assert all(torch.isfinite(torch.tensor(h["loss"])) for h in hist) and hist[0]["scaled"] == pytest.approx(2.0)
        assert all(p.dtype == torch.float32 for p in net.parameters())  # autocast: float32 master weights
    assert net[0].weight.is_contiguous(memory_format=torch.channels_last)


def test_checkpoints_are_saved_from_cpu_contiguous_tensors(tmp_path: Path) -> None:
    model = build_model("mobilenetv2_035", 10)
    ref = copy.deepcopy(model)
    Accel(channels_last=True).prepare(model)
    assert not model.conv_stem.weight.is_contiguous()
    save_checkpoint(tmp_path / "m.pt", model, make_arch(model, "mobilenetv2_035", 10))
    data = torch.load(tmp_path / "m.pt", weights_only=True)
    assert all(t.device.type == "cpu" and t.is_contiguous() for t in data["state_dict"].values())
    # the same bytes as the model saved in the default layout: the file does not depend on where it trained
    assert data["sha256"] == checkpoint_digest(data["arch"], data["meta"], ref.state_dict())
    loaded, _, _ = load_checkpoint(tmp_path / "m.pt")
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), ref.state_dict().values(), strict=True))


def test_global_batch_norm_is_batch_norm_in_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The synchronised statistics with the all-reduce as the identity (one process) give torch's batch norm:
    outputs, gradients and running statistics, for nn.BatchNorm2d and timm's BatchNormAct2d."""
    monkeypatch.setattr(A._AllReduceSum, "apply", staticmethod(lambda t: t))
    torch.manual_seed(0)
    x = torch.randn(6, 5, 3, 4, dtype=torch.float64) * 3 + 2
    g = torch.randn(6, 5, 3, 4, dtype=torch.float64)
    for bn in (nn.BatchNorm2d(5), BatchNormAct2d(5, act_layer=nn.ReLU6), nn.BatchNorm2d(5, momentum=None)):
        bn = bn.double().train()
        nn.init.normal_(bn.weight)
        nn.init.normal_(bn.bias)
        outs = []
        for ctx in (A.contextlib.nullcontext(), A.sync_batch_norm()):
            m, xi = copy.deepcopy(bn), x.clone().requires_grad_(True)
            with ctx:
                y = m(xi)
                y = m(xi)  # twice: running statistics and the cumulative average (momentum None)
            grads = torch.autograd.grad((y * g).sum(), [xi, m.weight, m.bias])
            outs.append([y, *grads, m.running_mean, m.running_var])
        for a, b in zip(*outs, strict=True):
            assert torch.allclose(a, b, rtol=0, atol=1e-12)


def test_fit_reads_the_device_once_per_epoch_not_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """No per-step ``.item()`` / ``float()`` in latopt's loop: its reads of tensors (the finite-loss check,
    the epoch's record) do not grow with the number of steps (it used to read the loss and the accuracy
    after every step). torch's own reads of CPU-side state (the optimizers' step counters) do not count."""
    reads = {"n": 0}
    for name in ("item", "tolist", "__float__", "__int__", "__bool__"):
        orig = getattr(torch.Tensor, name)

        def counted(self, *a, _orig=orig, **k):
            caller = traceback.extract_stack(limit=2)[0].filename
            reads["n"] += f"{os.sep}latopt{os.sep}" in caller
            return _orig(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counted)

    def run(n: int) -> int:
        task = _tiny_task(n)
        net = _conv_net()
        opt = make_optimizer(net, TrainConfig(), 0.01)
        reads["n"] = 0
        fit(net, make_loaders(task, 2)[0], 1, Step(_ce, opt), report=Report(show=False))
        return reads["n"]

    assert run(4) == run(24)  # 2 steps or 12 steps: the same reads


def test_torchrun_runs_train_and_fold_only(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    for k, v in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(k, v)
    for argv in (["inspect", "mobilenetv2_035"], ["search", "--config", "quickstart"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"latopt {argv[0]} " in err and "torchrun" in err, err
        assert err.count("\n") == 1
