"""Models by name and checkpoints: build, names, pretrained offline, save/load round trips
(σ_α model, folded models) and one-line errors for bad files."""

from __future__ import annotations

import urllib.error
from pathlib import Path

import pytest
import torch
from torch import nn

from latopt.cli import main
from latopt.errors import LatoptError, VerificationError
from latopt.files.checkpoint import (
    AlphaArch,
    CheckpointMeta,
    FoldArch,
    FoldHow,
    checkpoint_digest,
    load_checkpoint,
    make_arch,
    read_arch,
    save_checkpoint,
)
from latopt.nets.models import SUPPORTED, build_model, canonical_name
from latopt.rewrite import alpha_parameters, fold_blocks, get_alphas, install_alpha, randomize_bn_

pytestmark = pytest.mark.floor   # .ci/run's lower-bounds run selects these tests


@pytest.mark.parametrize("name", SUPPORTED + ["torchvision/mobilenet_v2?width=0.5", "timm/mobilenetv2_050"])
def test_build_every_supported_name(name: str) -> None:
    m = build_model(name, num_classes=5)
    assert not m.training
    with torch.no_grad():
        assert m(torch.randn(1, 3, 32, 32)).shape == (1, 5)


def test_names() -> None:
    assert canonical_name("torchvision/mobilenet_v2?width=0.750") == "torchvision/mobilenet_v2?width=0.75"
    assert canonical_name("torchvision/mobilenet_v2?width=1") == "torchvision/mobilenet_v2"
    assert canonical_name("timm/efficientnet_lite0") == "efficientnet_lite0"
    tv = build_model("torchvision/mobilenet_v2?width=0.75")
    assert tv.features[0][0].out_channels == 24  # 32 * 0.75
    with pytest.raises(LatoptError) as e:
        build_model("resnet_bogus")
    msg = str(e.value)
    assert "unknown model 'resnet_bogus'" in msg and all(n in msg for n in SUPPORTED) and "\n" not in msg
    for bad in ("torchvision/mobilenet_v2?width=abc", "torchvision/mobilenet_v2?depth=2",
                "torchvision/mobilenet_v2?width=9"):
        with pytest.raises(LatoptError, match="width|option"):
            build_model(bad)
    with pytest.raises(LatoptError, match="spaces"):
        build_model(" mobilenetv2_100")


def test_strides_option() -> None:
    """``&strides=`` sets the seven stages' strides; the default spelling is dropped; bad ones are one line."""
    small = "torchvision/mobilenet_v2?width=0.5&strides=1,2,2,1,1,2,1"
    assert canonical_name("torchvision/mobilenet_v2?strides=1,2,2,1,1,2,1&width=0.50") == small
    assert canonical_name("torchvision/mobilenet_v2?width=0.5&strides=1,2,2,2,1,2,1") == \
        "torchvision/mobilenet_v2?width=0.5"
    torch.manual_seed(0)
    default = build_model("torchvision/mobilenet_v2?width=0.5", 10)
    torch.manual_seed(0)
    plain = build_model("torchvision/mobilenet_v2?width=0.5&strides=1,2,2,2,1,2,1", 10)
    assert all(torch.equal(a, b) for a, b in zip(default.state_dict().values(), plain.state_dict().values(), strict=True))
    with torch.no_grad():
        assert build_model(small, 10).features(torch.zeros(1, 3, 32, 32)).shape[-2:] == (2, 2)
        assert default.features(torch.zeros(1, 3, 32, 32)).shape[-2:] == (1, 1)
    for bad in ("1,2", "1,2,2,3,1,2,1", "1,2,2,2,1,2,1,1", ""):
        with pytest.raises(LatoptError, match="strides|option") as e:
            build_model(f"torchvision/mobilenet_v2?strides={bad}")
        assert "\n" not in str(e.value)
    with pytest.raises(LatoptError, match="option"):
        build_model("torchvision/mobilenet_v2?width=0.5&width=0.75")
    with pytest.raises(LatoptError, match="pretrained"):
        build_model(small, pretrained=True)
    with pytest.raises(LatoptError, match="num_classes"):
        build_model("mobilenetv2_035", 0)


def test_pretrained_offline_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import socket

    import huggingface_hub.constants as hfc

    lookups: list[object] = []
    real_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host, *a, **k):  # records any attempt to reach a host (there must be none offline)
        lookups.append(host)
        return real_getaddrinfo(host, *a, **k)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    # huggingface_hub's own offline switch: HF_HUB_OFFLINE=1 in the environment sets this when it is imported
    monkeypatch.setattr(hfc, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hfc, "HF_HUB_CACHE", str(tmp_path / "hf"))  # an empty cache
    with pytest.raises(LatoptError) as e:
        build_model("mobilenetv2_100", pretrained=True)  # timm has weights for it: not in the cache
    msg = str(e.value)
    assert msg.startswith("could not get pretrained weights for mobilenetv2_100 (LocalEntryNotFoundError: "), msg
    assert "needs internet access once" in msg and "HF_HUB_OFFLINE=1" in msg and "leave pretrained off" in msg
    assert "\n" not in msg and lookups == []
    with pytest.raises(LatoptError) as e:  # timm's own error: there are no pretrained weights for this one
        build_model("mobilenetv2_035", pretrained=True)
    msg = str(e.value)
    assert "mobilenetv2_035" in msg and "No pretrained weights exist" in msg and "leave pretrained off" in msg, msg
    assert e.value.param == "pretrained"

    def no_net(*a, **k):
        raise urllib.error.URLError("offline (test)")

    monkeypatch.setattr(torch.hub, "urlopen", no_net)
    monkeypatch.setattr(torch.hub, "_hub_dir", str(tmp_path / "torch"))
    with pytest.raises(LatoptError, match=r"mobilenet_v2 \(URLError.*offline \(test") as e:
        build_model("torchvision/mobilenet_v2", pretrained=True)
    assert "leave pretrained off" in str(e.value)
    with pytest.raises(LatoptError, match="only for width 1.0"):
        build_model("torchvision/mobilenet_v2?width=0.75", pretrained=True)


def _same_outputs(a: nn.Module, b: nn.Module, size: int) -> None:
    x = torch.randn(2, 3, size, size)
    with torch.no_grad():
        assert torch.equal(a.eval()(x), b.eval()(x))


def test_round_trip_alpha_model(tmp_path: Path) -> None:
    m = randomize_bn_(build_model("mobilenetv2_035", 10), 0)
    params = install_alpha(m, "all", "block")
    for i, (p,) in params.items():
        with torch.no_grad():
            p.fill_(i / 20)
    arch = make_arch(m, "mobilenetv2_035", 10)
    assert arch.alpha == AlphaArch(granularity="block", blocks=list(range(17))) and arch.fold is None
    path = save_checkpoint(tmp_path / "a.pt", m, arch, CheckpointMeta(val_acc=0.5))
    rng = torch.get_rng_state()
    m2, arch2, meta = load_checkpoint(path, expect_model="timm/mobilenetv2_035")
    assert torch.equal(rng, torch.get_rng_state())  # loading does not disturb the global RNG
    assert arch2 == arch and meta == CheckpointMeta(val_acc=0.5)
    assert get_alphas(m2) == get_alphas(m)
    assert len(alpha_parameters(m2)) == 17  # still one shared α per block
    _same_outputs(m, m2, 40)


@pytest.mark.parametrize("name,mode,plan", [
    ("mobilenetv2_035", "exact", {0: "full", 1: "expand_dw", 2: "dw_project", 5: "full"}),
    ("torchvision/mobilenet_v2?width=0.5", "paper", "all"),
    ("tf_efficientnet_lite0", "exact", {1: "full", 3: "dw_project", 4: "expand_dw"}),
    ("mobilenetv2_035", "exact", {0: "pw", 1: "pw", 2: "drop", 3: "full", 4: "drop", 6: "pw"}),  # pw and drop variants
])
def test_round_trip_folded_model(tmp_path: Path, name: str, mode: str, plan) -> None:
    m = randomize_bn_(build_model(name, 10), 1)
    install_alpha(m, [1, 2, 3, 4, 6], "activation")
    f = fold_blocks(m, plan, mode, (40, 40))
    arch = make_arch(f, name, 10)
    assert arch.fold is not None and arch.fold.mode == mode and arch.fold.input_size == [40, 40]
    path = save_checkpoint(tmp_path / "f.pt", f, arch)
    f2, arch2, _ = load_checkpoint(path)
    assert arch2 == arch and get_alphas(f2) == get_alphas(f)
    _same_outputs(f, f2, 40)


def test_bad_checkpoints_are_one_line_errors(tmp_path: Path, edit_checkpoint) -> None:
    m = build_model("mobilenetv2_035", 10)
    good = save_checkpoint(tmp_path / "good.pt", m, make_arch(m, "mobilenetv2_035", 10))
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint at all")
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(3)}, other)
    pickled = tmp_path / "pickled.pt"
    torch.save(nn.Linear(2, 2), pickled)
    wrong = tmp_path / "wrong.pt"
    edit_checkpoint(good, wrong, lambda d: d["arch"].update(model="mobilenetv2_050"))
    cases = [
        (tmp_path / "missing.pt", None, "does not exist"),
        (tmp_path, None, "does not exist"),
        (garbage, None, "not a latopt checkpoint"),
        (other, None, "not a latopt checkpoint"),
        (pickled, None, "weights_only loading refuses"),
        (good, "mobilenetv2_100", "is for model 'mobilenetv2_035', not 'mobilenetv2_100'"),
        (wrong, None, "does not match its architecture 'mobilenetv2_050'"),
    ]
    for path, expect, msg in cases:
        with pytest.raises(LatoptError, match=msg) as e:
            load_checkpoint(path, expect_model=expect)
        assert "\n" not in str(e.value)


def test_save_refuses_inconsistent_arch_and_writes_nothing(tmp_path: Path) -> None:
    m = build_model("mobilenetv2_035", 10)
    install_alpha(m, [2])
    with pytest.raises(LatoptError, match="does not describe the model"):
        save_checkpoint(tmp_path / "x.pt", m, read_arch({"model": "mobilenetv2_035", "num_classes": 10}))
    with pytest.raises(LatoptError, match="not JSON-able"):
        save_checkpoint(tmp_path / "x.pt", m, make_arch(m, "mobilenetv2_035", 10), CheckpointMeta(bad=object()))
    with pytest.raises(LatoptError, match="unknown model"):
        read_arch({"model": "vgg", "num_classes": 10})
    assert list(tmp_path.iterdir()) == []


def test_empty_fold_plan_is_saved_as_folded_not_unfolded(tmp_path: Path) -> None:
    m = randomize_bn_(build_model("mobilenetv2_035", 10), 0)
    f = fold_blocks(m, {}, "exact", (32, 32))
    # the network holds no trace of a fold that folded nothing: the caller says how it folded
    assert make_arch(f, "mobilenetv2_035", 10).fold is None
    how = FoldHow("exact", [32, 32])
    arch = make_arch(f, "mobilenetv2_035", 10, fold=how)
    assert arch.fold == FoldArch(mode="exact", input_size=[32, 32], plan={})
    assert not hasattr(f, "latopt_fold")  # nothing hung on the module
    f2, arch2, _ = load_checkpoint(save_checkpoint(tmp_path / "f.pt", f, arch))
    assert arch2 == arch and make_arch(f2, "mobilenetv2_035", 10, fold=how) == arch
    _same_outputs(f, f2, 32)
    g = fold_blocks(m, {1: "full"}, "exact", (32, 32))  # a folded block cannot be saved as unfolded, nor as nothing
    for fold in (None, arch.fold):
        with pytest.raises(LatoptError, match=r"arch\['fold'\].*does not describe"):
            save_checkpoint(tmp_path / "x.pt", g, arch.model_copy(update={"fold": fold}))


def test_digest_detects_a_corrupted_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               edit_checkpoint) -> None:
    m = build_model("mobilenetv2_035", 10)
    good = save_checkpoint(tmp_path / "good.pt", m, make_arch(m, "mobilenetv2_035", 10), CheckpointMeta(test_acc=0.5))
    data = torch.load(good, weights_only=True)
    assert data["schema"] == "latopt.checkpoint/2"
    assert data["sha256"] == checkpoint_digest(data["arch"], data["meta"], data["state_dict"])
    name = next(k for k in data["state_dict"] if k.endswith("conv_dw.weight"))

    def flip(d: dict) -> None:
        d["state_dict"][name].view(-1)[0] += 1.0

    cases = {
        "weight": edit_checkpoint(good, tmp_path / "weight.pt", flip, digest=False),
        "meta": edit_checkpoint(good, tmp_path / "meta.pt", lambda d: d["meta"].update(test_acc=0.99), digest=False),
        "dtype": edit_checkpoint(good, tmp_path / "dtype.pt",
                         lambda d: d["state_dict"].update({name: d["state_dict"][name].double()}), digest=False),
        "no digest": edit_checkpoint(good, tmp_path / "nodigest.pt", lambda d: d.pop("sha256"), digest=False),
    }
    for what, path in cases.items():
        with pytest.raises(VerificationError, match=f"checkpoint {path}") as e:
            load_checkpoint(path)
        assert "\n" not in str(e.value), what
        assert main(["export", "--checkpoint", str(path), "--no-measure", "--out", str(tmp_path / "o"), "-q"]) == 3, what
        err = capsys.readouterr().err.strip()
        assert err.startswith("latopt: error:") and len(err.splitlines()) == 1, (what, err)
        assert not (tmp_path / "o").exists()
    # the same edit with the digest recomputed loads (what the digest cannot see: export's accuracy gate)
    m2, _, _ = load_checkpoint(edit_checkpoint(good, tmp_path / "consistent.pt", flip))
    assert not torch.equal(m2.state_dict()[name], m.state_dict()[name])


def test_a_checkpoint_of_another_schema_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               edit_checkpoint) -> None:
    m = build_model("mobilenetv2_035", 10)
    good = save_checkpoint(tmp_path / "good.pt", m, make_arch(m, "mobilenetv2_035", 10))

    def old_schema(d: dict) -> None:  # the unreleased first schema: no digest
        d["schema"] = "latopt.checkpoint/1"
        d.pop("sha256")

    old = edit_checkpoint(good, tmp_path / "old.pt", old_schema, digest=False)
    with pytest.raises(LatoptError, match=r"checkpoint/1'.*reads only.*checkpoint/2") as e:
        load_checkpoint(old)
    assert not isinstance(e.value, VerificationError) and "\n" not in str(e.value)
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(old), "--no-measure", "--out", str(tmp_path / "o"), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("latopt: error:") and "re-create it" in err[0]


BAD_ARCH = [  # (field edit, what the one-line error names)
    ({"num_classes": "ten"}, "num_classes"),
    ({"num_classes": True}, "num_classes"),
    ({"num_classes": 10**9}, r"'num_classes' must be in \[1, 100000\], got 1000000000"),
    ({"model": 123}, "'model'"),
    ({"extra": 1}, "unknown architecture field 'extra'; known: model, num_classes, alpha, fold"),
    ({"alpha": {"granularity": "block", "blocks": ["1"]}}, "blocks"),
    ({"alpha": {"granularity": "block", "blocks": [1.5]}}, "blocks"),
    ({"alpha": {"granularity": "block", "blocks": [True]}}, "blocks"),
    ({"alpha": {"granularity": "block", "blocks": [2, 2]}}, "blocks"),
    ({"alpha": {"granularity": "block", "blocks": []}}, "blocks"),
    ({"alpha": {"granularity": "channel", "blocks": [1]}}, "granularity"),
    ({"alpha": {"blocks": [1]}}, "'alpha.granularity' is missing"),
    ({"alpha": [1, 2]}, "'alpha'"),
    ({"alpha": {"granularity": "block", "blocks": [99]}}, "out of range"),
    ({"fold": "all"}, "'fold'"),
    ({"fold": {"mode": "exact", "plan": {}}}, "'fold.input_size' is missing"),
    ({"fold": {"mode": "fast", "input_size": [32, 32], "plan": {}}}, "mode"),
    ({"fold": {"mode": "exact", "input_size": [32], "plan": {}}}, "input_size"),
    ({"fold": {"mode": "exact", "input_size": "32", "plan": {}}}, "input_size"),
    ({"fold": {"mode": "exact", "input_size": [32, "32"], "plan": {}}}, "input_size"),
    ({"fold": {"mode": "exact", "input_size": [32, 100000], "plan": {}}}, "input_size"),
    ({"fold": {"mode": "exact", "input_size": [4, 4], "plan": {}}}, "input_size"),
    ({"fold": {"mode": "exact", "input_size": None, "plan": {}}}, r"'fold' needs input_size \[H, W\] in exact mode"),
    ({"fold": {"mode": "exact", "input_size": [32, 32], "plan": {"x": "full"}}}, "plan"),
    ({"fold": {"mode": "exact", "input_size": [32, 32], "plan": {"01": "full"}}}, "plan"),
    ({"fold": {"mode": "exact", "input_size": [32, 32], "plan": {"1": "half"}}}, "plan"),
    ({"fold": {"mode": "exact", "input_size": [32, 32], "plan": {"1": 1}}}, "plan"),
    ({"fold": {"mode": "exact", "input_size": [32, 32], "plan": {1: "full"}}}, "'fold.plan' has a key that must be a string"),
    ({"fold": {"mode": "exact", "input_size": [32, 32], "plan": ["1"]}}, "plan"),
    ({"fold": {"mode": "exact", "input_size": [32, 32], "plan": {"99": "full"}}}, "out of range"),
    ({"fold": {"mode": "exact", "input_size": [32, 32], "plan": {"0": "expand_dw"}}}, "variant 'expand_dw' does not apply to block 0.*t = 1 block"),
    ({"fold": {"mode": "exact", "input_size": [32, 32], "plan": {"1": "drop"}}}, "variant 'drop' does not apply to block 1.*no residual"),
]


@pytest.mark.parametrize("edit,names", BAD_ARCH, ids=[str(e) for e, _ in BAD_ARCH])
def test_hand_edited_arch_fields_are_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     base_ckpt: Path, edit_checkpoint, edit: dict, names: str) -> None:
    path = edit_checkpoint(base_ckpt, tmp_path / "edited.pt", lambda d: d["arch"].update(edit))
    with pytest.raises(LatoptError, match=names) as e:
        load_checkpoint(path)
    assert type(e.value) is LatoptError and "\n" not in str(e.value)
    assert main(["export", "--checkpoint", str(path), "--no-measure", "--out", str(tmp_path / "o"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("latopt: error:") and len(err.splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


@pytest.fixture(scope="module")
def base_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    m = build_model("mobilenetv2_035", 10)
    return save_checkpoint(tmp_path_factory.mktemp("base") / "base.pt", m, make_arch(m, "mobilenetv2_035", 10))
