"""Several training processes on the CPU (gloo) and resuming an interrupted run (latopt.training.accel, latopt.training.resume).

Most jobs here are the processes of a torchrun job without the launcher: forked from this process (no
imports to repeat), each with torchrun's environment, running ``latopt.cli.main`` or the engine. One test
runs the real ``torchrun -m latopt train``. Tiny: MobileNetV2-0.35 at 16 px, 64 digits, 1-2 epochs.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from latopt.cli import main
from latopt.config import TrainConfig, load_config
from latopt.data import Task, make_loaders
from latopt.layerfold import CompressionLoss, block_variant_times, run_fold
from latopt.nets.models import build_model
from latopt.rewrite import alpha_parameters, clamp_alphas_, install_alpha
from latopt.training.accel import Accel, process_group, resolve
from latopt.training.loop import Report, Step, fit, make_optimizer, make_scheduler
from latopt.training.resume import resume_path

pytestmark = pytest.mark.slow   # processes of a torchrun job (forked, or the real launcher)
ROOT = Path(__file__).resolve().parents[1]
CONFIG = """
name: ddp
model: {name: mobilenetv2_035}
data: {task: digits, resolution: 16, batch_size: 16, max_samples: 64}
train: {epochs: 2, optimizer: adamw, lr: 0.003, device: cpu, dist_timeout_s: 30}
fold: {epochs: 1, post_epochs: 1, lambda_c: 5.0, alpha_lr: 0.3}
threads: 1
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(target: Callable[[int], int | None], rank: int, world: int, port: int) -> None:
    # tqdm's default lock is a multiprocessing lock, shared through the fork with this test process: every bar
    # takes it (disabled ones too), and so does tqdm's monitor thread, so a rank SIGKILLed while holding it hung
    # the test process at its next bar, for good (seen: the rest of the suite stuck). Each rank gets its own.
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        rc = target(rank)
    except BaseException:
        traceback.print_exc()
        rc = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(rc or 0))


def _start(target: Callable[[int], int | None], world: int = 2) -> list[mp.Process]:
    ctx = mp.get_context("fork")
    port = _free_port()
    procs = [ctx.Process(target=_rank_main, args=(target, r, world, port)) for r in range(world)]
    for p in procs:
        p.start()
    return procs


def _join(procs: list[mp.Process], timeout: float = 120) -> list[int | None]:
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    return [p.exitcode for p in procs]


def _ranks(target: Callable[[int], int | None], world: int = 2, timeout: float = 120) -> list[int | None]:
    return _join(_start(target, world), timeout)


def _state(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["state_dict"]


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def cfg_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("ddp") / "ddp.yaml"
    p.write_text(CONFIG)
    return p


# ------------------------------------------------------------------------------------- the engine, exactly
def _float64_task() -> Task:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 3, 16, 16, generator=g, dtype=torch.float64)
    ds = torch.utils.data.TensorDataset(x, torch.arange(64) % 10)
    return Task("rand", 10, [str(i) for i in range(10)], 16, ds, ds, ds)


def _prefold_like(accel: Accel, out: Path) -> None:
    """Two epochs of pre-fold on the engine: σ_α parameters of the model with their own Adam and the
    compression loss, AdamW on the weights, global batch 16, float64 (so that 1 and 2 processes can be
    compared exactly: float32 training of a random tiny network amplifies rounding, as 1 vs 2 threads do)."""
    torch.manual_seed(0)
    model = build_model("mobilenetv2_035", 10).double()
    alphas = install_alpha(model, "all", "block")
    comp = CompressionLoss(alphas, p=2.0, variant_times=block_variant_times(sorted(alphas)))
    cfg = TrainConfig(optimizer="adamw", lr=0.003)
    train, val, _ = make_loaders(_float64_task(), 16, seed=0, accel=accel)
    opt = make_optimizer(model, cfg, cfg.lr, exclude=alpha_parameters(model))
    alpha_opt = torch.optim.Adam(alpha_parameters(model), lr=0.3)

    def step_loss(m, x, y):
        logits = m(x)
        lc = comp()
        return F.cross_entropy(logits, y) + lc, logits, {"L_c": lc.detach()}

    step = Step(step_loss, opt, make_scheduler(opt, cfg, 2, len(train)), extra_optimizers=(alpha_opt,),
                after_step=lambda: clamp_alphas_(model))
    hist = fit(model, train, 2, step, val_loader=val, accel=accel, report=Report(show=False))
    torch.save({"state": model.state_dict(), "history": hist}, out)


def test_two_processes_train_as_one_with_the_same_global_batch(tmp_path: Path) -> None:
    _prefold_like(Accel(), tmp_path / "one.pt")

    def rank(r: int) -> None:
        with process_group(TrainConfig(device="cpu", dist_timeout_s=30)):
            _prefold_like(resolve(load_config(None, {"train.device": "cpu"})), tmp_path / f"rank{r}.pt")

    assert _ranks(rank) == [0, 0]
    one, r0, r1 = (torch.load(tmp_path / f"{n}.pt", weights_only=True) for n in ("one", "rank0", "rank1"))
    assert _same(r0["state"], r1["state"])  # the processes hold the same weights and α, bit for bit
    # float64: equal to rounding. The largest differences (~2e-8, seen) are in the biases of batch norms whose
    # output goes through another batch norm (their true gradient is 0; Adam scales the rounding noise up)
    for k, v in one["state"].items():
        assert torch.allclose(v.double(), r0["state"][k].double(), rtol=0, atol=1e-6), k
    alphas = [v for k, v in one["state"].items() if k.endswith("alpha")]
    assert alphas and any(float(a) > 0 for a in alphas)  # the α's moved (and moved alike)
    for a, b in zip(one["history"], r0["history"], strict=True):  # metrics summed over the processes
        assert a["epoch"] == b["epoch"] and a["val_acc"] == b["val_acc"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-9) and a["L_c"] == pytest.approx(b["L_c"], rel=1e-9)


# -------------------------------------------------------------------------------------- the command line
def test_torchrun_latopt_train(cfg_file: Path, tmp_path: Path) -> None:
    """The real launcher: `torchrun --nproc-per-node 2 -m latopt train`; rank 0 alone reports and writes."""
    out, logs = tmp_path / "runs" / "base", tmp_path / "logs"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                        str(_free_port()), "--log-dir", str(logs), "--redirects", "3", "-m", "latopt", "train",
                        "--config", str(cfg_file), "--out", str(out)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    outs = {int(p.parent.name): p.read_text() for p in logs.rglob("stdout.log")}
    errs = {int(p.parent.name): p.read_text() for p in logs.rglob("stderr.log")}
    assert outs[1] == "" and "[train]" not in errs[1]  # rank 1: no result line, no progress
    assert "wrote" in outs[0] and "base epoch 2/2" in errs[0]
    assert sorted(p.name for p in out.parent.iterdir()) == ["base"]  # no temp dirs, no resume state left
    assert sorted(p.name for p in out.iterdir()) == ["base.pt", "config.yaml", "metrics.json"]
    m = json.loads((out / "metrics.json").read_text())
    assert m["processes"] == 2 and m["device"] == "cpu" and len(m["history"]) == 2


def test_a_failing_process_ends_the_job(cfg_file: Path, tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    """One process cannot read an image of its shard: it stops with its one-line error, the other, waiting
    in a collective, stops too (one line, non-zero) at once, not after a timeout."""
    root = tmp_path / "imgs"
    for split, n in (("train", 8), ("val", 2)):
        for c in ("a", "b"):
            (root / split / c).mkdir(parents=True)
            for i in range(n):
                Image.new("RGB", (12, 12), (40 * i, 100 if c == "a" else 200, 0)).save(root / split / c / f"{i}.png")
    (root / "train" / "b" / "5.png").write_bytes(b"\x89PNG broken")
    argv = ["train", "--config", str(cfg_file), "--data", f"imagefolder:{root}", "--out", str(tmp_path / "o"), "-q"]
    t0 = time.monotonic()
    codes = _ranks(lambda r: main(argv), timeout=90)
    assert time.monotonic() - t0 < 60 and sorted(codes) == [2, 2], codes
    err = capfd.readouterr().err.splitlines()
    assert len(err) == 2 and any("5.png is not a readable image" in e for e in err), err
    assert any("a collective failed, another process of the job stopped or hung" in e for e in err), err
    assert not (tmp_path / "o").exists()


def test_each_process_draws_its_own_random_numbers(cfg_file: Path, tmp_path: Path) -> None:
    """Base training, pre-fold and post-fold under two processes: the digits' random shifts (augmentation,
    drawn from the torch generator as dropout is) differ between the processes in every stage, while the
    processes still hold the same weights (DDP) and split one shared sample order."""
    cfg = load_config(cfg_file, {"data.augment": True, "train.epochs": 1})
    fold_cfg = cfg.with_overrides({"fold.lambda_c": 5.0, "fold.tau": 0.6, "fold.p": 2.0})

    def rank(r: int) -> None:
        import latopt.data.digits
        import latopt.layerfold.phases
        import latopt.training.base_training

        draws: dict[str, list[tuple[int, int]]] = {}
        stage = [""]
        translate, fits = latopt.data.digits._translate, {m: m.fit for m in (latopt.training.base_training, latopt.layerfold.phases)}

        def recording_translate(x, dy, dx, fill):
            draws.setdefault(stage[0], []).append((dy, dx))
            return translate(x, dy, dx, fill)

        def staged_fit(module):
            def fit(*args, **kwargs):
                stage[0] = kwargs["report"].desc
                return fits[module](*args, **kwargs)
            return fit

        latopt.data.digits._translate = recording_translate  # this forked process only
        for module in fits:
            module.fit = staged_fit(module)
        with process_group(cfg.train):
            latopt.training.base_training.train_base(cfg, tmp_path / "base", progress=False)
            torch.distributed.barrier()  # rank 0 has written base.pt
            rep = run_fold(fold_cfg, tmp_path / "base" / "base.pt", tmp_path / "fold", progress=False).report
        (tmp_path / f"rank{r}.json").write_text(json.dumps({"draws": draws, "alphas": rep.alphas}))

    assert _ranks(rank) == [0, 0]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["alphas"] == r1["alphas"]
    assert sorted(r0["draws"]) == sorted(r1["draws"]) == ["base", "post-fold", "pre-fold"]
    for stage, d in r0["draws"].items():
        assert len(d) == len(r1["draws"][stage]) >= 8 and d != r1["draws"][stage], stage


# --------------------------------------------------------------------------------------------------- resume
def _kill_after_first_epoch(procs: list[mp.Process], state: Path) -> None:
    deadline = time.monotonic() + 120
    while not state.exists() and time.monotonic() < deadline and all(p.is_alive() for p in procs):
        time.sleep(0.01)
    assert state.exists(), "no epoch state was written"
    for p in procs:
        os.kill(p.pid, signal.SIGKILL)  # mid-epoch 2 (or later): no cleanup runs
    _join(procs)


def test_resume_after_sigkill_gives_the_uninterrupted_weights(cfg_file: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    args = ["train", "--config", str(cfg_file), "-q"]
    assert main([*args, "--out", str(tmp_path / "ref")]) == 0
    out = tmp_path / "run"
    _kill_after_first_epoch(_start(lambda r: main([*args, "--out", str(out)]), world=1), resume_path(out))
    assert not out.exists()
    shutil.copy(resume_path(out), tmp_path / "stale.resume.pt")
    capsys.readouterr()
    assert main([*args[:-1], "--out", str(out)]) == 0
    assert "resuming from" in capsys.readouterr().err
    assert _same(_state(out / "base.pt"), _state(tmp_path / "ref" / "base.pt"))
    m, ref = (json.loads((d / "metrics.json").read_text()) for d in (out, tmp_path / "ref"))
    assert m["resumed_after_epoch"] >= 1 and m["test_acc"] == ref["test_acc"] and not resume_path(out).exists()
    assert [h["loss"] for h in m["history"]] == [h["loss"] for h in ref["history"]]
    # a state written with other settings is not resumed: a warning, and the run starts afresh
    other = tmp_path / "other"
    shutil.copy(tmp_path / "stale.resume.pt", resume_path(other))
    capsys.readouterr()
    assert main([*args[:-1], "--out", str(other), "--epochs", "1"]) == 0
    err = capsys.readouterr().err
    assert "not resuming from" in err and "written by a run with other settings" in err and "resuming from" not in \
        err.replace("not resuming from", "")
    assert json.loads((other / "metrics.json").read_text())["resumed_after_epoch"] == 0


def test_resume_under_two_processes(cfg_file: Path, tmp_path: Path) -> None:
    def train(out: Path) -> Callable[[int], int]:
        return lambda r: main(["train", "--config", str(cfg_file), "--out", str(out), "-q"])

    assert _ranks(train(tmp_path / "ref")) == [0, 0]
    out = tmp_path / "run"
    _kill_after_first_epoch(_start(train(out)), resume_path(out))
    assert len(torch.load(resume_path(out), weights_only=True)["rng"]) == 2  # every process's generators
    assert _ranks(train(out)) == [0, 0]
    assert json.loads((out / "metrics.json").read_text())["resumed_after_epoch"] >= 1
    assert _same(_state(out / "base.pt"), _state(tmp_path / "ref" / "base.pt"))


# ----------------------------------------------------------------------------------------------------- fold
def test_fold_under_two_processes(cfg_file: Path, tmp_path: Path) -> None:
    """Pre-fold, fold, post-fold as one job of two processes: the same α, plan and accuracies on both, one
    output written by rank 0, a fold check that passed."""
    assert main(["train", "--config", str(cfg_file), "--out", str(tmp_path / "base"), "--epochs", "1", "-q"]) == 0
    cfg = load_config(cfg_file)
    fold_cfg = cfg.with_overrides({"fold.lambda_c": 5.0, "fold.tau": 0.6, "fold.p": 2.0})

    def rank(r: int) -> None:
        with process_group(cfg.train):
            rep = run_fold(fold_cfg, tmp_path / "base" / "base.pt", tmp_path / "fold", progress=False).report.to_json()
        (tmp_path / f"rank{r}.json").write_text(json.dumps({k: rep[k] for k in ("alphas", "folded", "acc", "val")}))

    assert _ranks(rank) == [0, 0]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0 == r1
    report = json.loads((tmp_path / "fold" / "report.json").read_text())
    assert report["fold_check"]["passed"] and report["alphas"] == r0["alphas"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("fold", ".fold"))) == ["fold"]
