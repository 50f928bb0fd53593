"""Base training, compression loss, pre-fold / fold / post-fold and the folded checkpoint (latopt.training.base_training,
latopt.layerfold). Tiny: MobileNetV2-0.35 at 16 px on 96 digits per split, one epoch per phase."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from latopt.config import load_config
from latopt.data import load_task, make_loaders
from latopt.errors import LatoptError
from latopt.layerfold import CompressionLoss, fold_and_finetune, plan_from_alphas, prefold, run_fold
from latopt.layerfold.fold_record import LayerFoldReport, read_report
from latopt.training.base_training import read_metrics, train_base
from latopt.training.loop import evaluate
from latopt.training.losses import training_loss

MODEL = "torchvision/mobilenet_v2?width=0.35"
TINY = f"""
name: tiny
model: {{name: "{MODEL}"}}
data: {{task: digits, resolution: 16, batch_size: 32, max_samples: 96}}
train: {{epochs: 1, optimizer: adamw, lr: 0.003}}
fold: {{epochs: 2, post_epochs: 1, lambda_c: 5.0, alpha_lr: 0.3, lr: 0.001, post_lr: 0.001}}
"""



@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("tiny")
    (root / "tiny.yaml").write_text(TINY)
    cfg = load_config(root / "tiny.yaml")
    result = train_base(cfg, root / "base", progress=False, seed=0)
    return {"root": root, "cfg": cfg, "result": result, "metrics": result.metrics, "ckpt": root / "base" / "base.pt"}


# ----------------------------------------------------------------------------- compression loss
def _alpha(v: float) -> nn.Parameter:
    return nn.Parameter(torch.tensor(float(v)))


def test_compression_loss_block_formula_uniform_and_weighted() -> None:
    vals, c = [0.0, 0.5, 1.0, 0.8], [1.0, 3.0, 2.0, 4.0]
    alphas = {i: [_alpha(v)] for i, v in enumerate(vals)}
    p = 2.0
    uniform = CompressionLoss(alphas, p=p, variant_times={i: {"none": 1.0, "full": 0.0} for i in alphas})
    assert float(uniform().detach()) == pytest.approx(sum(1 - v**p for v in vals) / len(vals))
    weighted = CompressionLoss(alphas, p=p, variant_times={i: {"none": c[i], "full": 0.0} for i in alphas})
    assert float(weighted().detach()) == pytest.approx(sum(ci * (1 - v**p) for ci, v in zip(c, vals, strict=True)) / sum(c))
    # absolute times: only t(none) - t(full) matters (the paper's c_l)
    shifted = CompressionLoss(alphas, p=p, variant_times={i: {"none": 10 + c[i], "full": 10.0} for i in alphas})
    assert float(shifted().detach()) == pytest.approx(float(weighted().detach()))


def test_compression_loss_freezes_blocks_that_do_not_pay() -> None:
    alphas = {0: [_alpha(0.3)], 1: [_alpha(0.3)]}
    loss = CompressionLoss(alphas, p=2.0, variant_times={0: {"none": 1.0, "full": 1.2}, 1: {"none": 2.0, "full": 1.0}})
    assert loss.frozen == [0]
    assert not alphas[0][0].requires_grad and float(alphas[0][0]) == 0.0
    assert float(loss().detach()) == pytest.approx(1 - 0.3**2)
    everything_frozen = CompressionLoss({0: [_alpha(0.0)]}, p=2.0, variant_times={0: {"none": 1.0, "full": 1.0}})
    assert float(everything_frozen().detach()) == 0.0


def test_compression_loss_per_activation_is_expected_latency() -> None:
    t = {"none": 5.0, "full": 2.0, "expand_dw": 4.5, "dw_project": 3.0}
    a1, a2, p = 0.6, 0.9, 3.0
    loss = CompressionLoss({0: [_alpha(a1), _alpha(a2)]}, p=p, variant_times={0: t})
    q1, q2 = a1**p, a2**p
    expected = q1 * q2 * t["full"] + q1 * (1 - q2) * t["expand_dw"] + (1 - q1) * q2 * t["dw_project"] \
        + (1 - q1) * (1 - q2) * t["none"]
    assert float(loss().detach()) == pytest.approx((expected - 2.0) / (5.0 - 2.0))
    # uniform times: the mean of (1 - q) over the activations
    pair = [_alpha(a1), _alpha(a2)]
    uni = CompressionLoss({0: pair}, p=p,
                          variant_times={0: {"none": 1.0, "full": 0.0, "expand_dw": 0.5, "dw_project": 0.5}})
    assert float(uni().detach()) == pytest.approx(((1 - q1) + (1 - q2)) / 2)
    uni().backward()  # gradients reach both alphas and push them up: dL/dα = -p α^(p-1) / 2
    assert [float(a.grad) for a in pair] == pytest.approx([-p * a1 ** (p - 1) / 2, -p * a2 ** (p - 1) / 2])
    with pytest.raises(LatoptError, match="partial fold variants"):
        CompressionLoss({0: [_alpha(0), _alpha(0)]}, p=2.0, variant_times={0: {"none": 1.0, "full": 0.0}})


def test_plan_from_alphas() -> None:
    alphas = {0: [0.95], 1: [0.5], 2: [0.95, 0.99], 3: [0.95, 0.1], 4: [0.0, 0.92], 5: [0.2, 0.3]}
    assert plan_from_alphas(alphas, 0.9) == {0: "full", 2: "full", 3: "expand_dw", 4: "dw_project"}
    assert plan_from_alphas(alphas, 1.0) == {}


# ----------------------------------------------------------------------------- train -> fold -> reload
def test_train_base_writes_checkpoint_metrics_config(tiny: dict) -> None:
    from latopt.files.checkpoint import load_checkpoint

    base, m = tiny["root"] / "base", tiny["metrics"]
    assert sorted(p.name for p in base.iterdir()) == ["base.pt", "config.yaml", "metrics.json"]
    saved = json.loads((base / "metrics.json").read_text())
    assert saved["schema"] == "latopt.train_metrics/1" and saved["init"] == "scratch"
    assert len(saved["history"]) == 1 and {"loss", "train_acc", "val_acc", "lr"} <= saved["history"][0].keys()
    assert 0.0 <= m.test_acc <= 1.0 and m.flops > 0 and m.params > 0 and read_metrics(base / "metrics.json") == m
    model, arch, meta = load_checkpoint(base / "base.pt", expect_model=MODEL)
    assert arch.alpha is None and arch.fold is None and meta.task == "digits"
    _, _, test = make_loaders(load_task(tiny["cfg"]), 32)
    assert evaluate(model, test) == pytest.approx(m.test_acc)
    assert load_config(base / "config.yaml") == tiny["cfg"]
    # the result hands the trained network itself (the one the checkpoint holds) and names the files
    result = tiny["result"]
    assert not result.model.training and evaluate(result.model, test) == pytest.approx(m.test_acc)
    assert result.paths == {"checkpoint": base / "base.pt", "metrics": base / "metrics.json",
                            "config": base / "config.yaml"}


def _conv_weights(path: Path) -> dict[str, torch.Tensor]:
    from latopt.files.checkpoint import load_checkpoint

    return {k: v for k, v in load_checkpoint(path)[0].state_dict().items() if k.endswith("weight") and v.dim() == 4}


def _distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return float(sum(((a[k] - b[k]) ** 2).sum() for k in a)) ** 0.5


def test_train_is_reproducible_and_resumes_from_checkpoint(tiny: dict) -> None:
    from latopt.nets.models import build_model
    from latopt.training.loop import seed_everything

    root, cfg = tiny["root"], tiny["cfg"]
    again = train_base(cfg, root / "again", progress=False, seed=0).metrics
    assert again.test_acc == tiny["metrics"].test_acc
    assert again.history[0]["loss"] == pytest.approx(tiny["metrics"].history[0]["loss"], rel=1e-6)
    base = _conv_weights(tiny["ckpt"])
    # 0 epochs from the checkpoint reproduce it: its weights, its accuracy
    zero = train_base(cfg.with_overrides({"train.epochs": 0}), root / "zero", checkpoint=tiny["ckpt"],
                      progress=False, seed=1).metrics
    assert zero.init == "checkpoint" and zero.history == [] and zero.test_acc == tiny["metrics"].test_acc
    assert _distance(_conv_weights(root / "zero" / "base.pt"), base) == 0.0
    # 1 epoch from the checkpoint starts there: it moves off the checkpoint's weights by far less than the
    # distance of a fresh initialisation (what a run that ignored --checkpoint would start from)
    train_base(cfg, root / "ft", checkpoint=tiny["ckpt"], progress=False, seed=1)
    seed_everything(1)
    fresh = {k: v for k, v in build_model(MODEL, 10).state_dict().items() if k in base}
    moved = _distance(_conv_weights(root / "ft" / "base.pt"), base)
    assert 0.0 < moved < 0.1 * _distance(fresh, base)


def test_run_fold_end_to_end_and_reload(tiny: dict) -> None:
    from latopt.files.checkpoint import load_checkpoint

    cfg, out = tiny["cfg"], tiny["root"] / "fold"
    result = run_fold(cfg.with_overrides({"fold.lambda_c": 5.0, "fold.tau": 0.6, "fold.p": 2.0}), tiny["ckpt"], out,
                      progress=False, seed=0)
    r = result.report
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml", "folded.pt", "prefold.pt", "report.json", "report.txt"]
    assert read_report(out / "report.json", LayerFoldReport) == r   # the file is the record, read back
    acc = r.acc
    assert None not in (acc.base, acc.prefold, acc.folded, acc.finetuned, acc.linearized)
    assert acc.base == pytest.approx(tiny["metrics"].test_acc)
    alphas = {int(k): v for k, v in r.alphas.items()}
    assert all(0.0 <= a <= 1.0 for vs in alphas.values() for a in vs)
    assert set(r.plan) == {i for i, vs in alphas.items() if vs[0] >= 0.6}
    assert r.n_folded >= 1, "λ_c = 5 with a fast α learning rate must fold something"
    fc = r.fold_check
    assert fc.passed and fc.max_rel < 1e-4 and len(fc.per_block) == r.n_folded
    # exact mode: the folded network IS the linearised one (same test predictions)
    assert acc.folded == pytest.approx(acc.linearized)
    assert r.flops.folded != r.flops.base and r.latency_pred_ms.asis is None and r.latency_pred_ms.folded is None
    model, arch, meta = load_checkpoint(out / "folded.pt", expect_model=MODEL)
    assert arch.fold is not None and arch.fold.mode == "exact" and arch.fold.plan == r.folded
    _, val, test = make_loaders(load_task(cfg), 32)
    assert evaluate(model, test) == pytest.approx(acc.finetuned)
    assert evaluate(model, val) == pytest.approx(r.val_acc_finetuned)
    # before fine-tuning the fold is the variant network of the network it was folded from: the agreement it
    # reports is the variant network's with that network, on the validation images
    from latopt.rewrite import linearize
    from latopt.training.loop import agreement

    pre = load_checkpoint(out / "prefold.pt")[0]
    assert r.agreement is not None and agreement(linearize(pre, r.plan), pre, val) == pytest.approx(r.agreement)
    assert "before fine-tuning the fold predicts what the network it was folded from predicts" in \
        (out / "report.txt").read_text()
    # the result hands the folded network itself: what the saved checkpoint reloads to
    assert result.paths["folded"] == out / "folded.pt" and result.paths["prefold"] == out / "prefold.pt"
    assert not result.model.training and evaluate(result.model, test) == pytest.approx(acc.finetuned)
    x = next(iter(test))[0]
    with torch.no_grad():
        assert torch.allclose(result.model(x), model.eval()(x), atol=1e-6)
    # unfolded blocks are back to their plain activation (alpha = 0) and stay there
    from latopt.rewrite import get_alphas

    left = get_alphas(model)
    assert all(v == 0.0 for i, vs in left.items() if str(i) not in r.folded for v in vs)
    assert not [i for i in left if str(i) not in r.folded], "unfolded blocks are saved with their plain σ"
    text = (out / "report.txt").read_text()
    assert "fold check (exact)" in text and "folded, fine-tuned" in text
    # the exporter re-checks the fold from the saved pre-fold network, on real test samples
    from latopt.export import CheckOptions, export

    rec = export(out / "folded.pt", "cpu", tiny["root"] / "export", checks=CheckOptions(samples=8, measure=False),
                 progress=False)
    names = [g.name for g in rec.gates]
    assert any(n.startswith("fold algebra") for n in names) and all(g.passed for g in rec.gates)
    assert "test samples" in rec.gates[0].inputs
    assert rec.accuracy.test_acc == pytest.approx(r.acc.finetuned)


def test_activation_granularity_partial_folds(tiny: dict) -> None:
    """Set α by hand: full / expand_dw / dw_project / none; the fold check and snapping follow."""
    from latopt.files.checkpoint import load_checkpoint
    from latopt.nets.blocks import find_blocks
    from latopt.rewrite import install_alpha

    cfg = tiny["cfg"].with_overrides({"fold.post_epochs": 0, "fold.granularity": "activation"})
    model, _, _ = load_checkpoint(tiny["ckpt"])
    alphas = install_alpha(model, "all", "activation")
    two = [b.index for b in find_blocks(model) if len(b.acts) == 2]
    wanted = {two[0]: (1.0, 0.97), two[1]: (0.95, 0.3), two[2]: (0.05, 0.91), two[3]: (0.4, 0.2)}
    with torch.no_grad():
        for i, (a1, a2) in wanted.items():
            alphas[i][0].fill_(a1)
            alphas[i][1].fill_(a2)
    folded, info = fold_and_finetune(cfg, model, load_task(cfg), tau=0.9, mode="exact", progress=False)
    assert info.plan == {two[0]: "full", two[1]: "expand_dw", two[2]: "dw_project"}
    assert info.fold_check.passed and info.fold_check.max_rel < 1e-4
    assert info.snapped == 4  # the kept activations 0.3 and 0.05, both of the unfolded block (0.4, 0.2)
    assert info.acc["folded"] == pytest.approx(info.acc["linearized"])


def test_prefold_with_lut_freezes_unprofitable_blocks(tiny: dict, tmp_path: Path) -> None:
    from latopt.files.checkpoint import load_checkpoint
    from latopt.latency.lut import LUT, BlockEntry, costs, load_lut, save_lut
    from latopt.nets.blocks import find_blocks

    base, _, _ = load_checkpoint(tiny["ckpt"])
    blocks = find_blocks(base)
    entries = [BlockEntry(index=b.index, path=b.path, kind=b.kind, input_shape=(1, b.cin, 8, 8),
                          foldable=b.foldable, reason=b.reason, raw={},
                          ms={"none": 1.0, "full": 0.5 if b.index % 2 else 1.5}) for b in blocks]
    lut_path = save_lut(LUT(device="cpu", model=MODEL, resolution=16, batch=1, blocks=entries,
                            fixed_ms=0.25), tmp_path / "lut.json")
    lut = load_lut(lut_path)
    c = costs(lut)
    assert c[0] == 0.0 and c[1] == 0.5
    fold = {"fold.lambda_c": 5.0, "fold.tau": 0.6, "fold.p": 2.0, "fold.distill": True}
    pre = prefold(tiny["cfg"].with_overrides(fold), base, load_task(tiny["cfg"]), costs=c, progress=False, lut=lut)
    from latopt.rewrite import get_alphas

    got = get_alphas(pre.model)
    assert pre.frozen == [i for i in c if c[i] == 0.0] and len(pre.history) == 2
    assert all(got[i] == [0.0] for i in c if c[i] == 0.0)
    assert any(got[i][0] > 0.0 for i in c if c[i] > 0.0)
    with_lut = tiny["cfg"].with_overrides({**fold, "lut": str(lut_path)})
    r = run_fold(with_lut, tiny["ckpt"], tmp_path / "f", progress=False).report
    plan = r.plan
    assert all(c[i] > 0 for i in plan)
    assert r.latency_pred_ms.asis == pytest.approx(0.25 + len(blocks))
    assert r.latency_pred_ms.folded == pytest.approx(0.25 + len(blocks) - 0.5 * len(plan))
    with pytest.raises(LatoptError, match="profiled for resolution 16, not 32"):
        run_fold(with_lut.with_overrides({"data.resolution": 32}), tiny["ckpt"], tmp_path / "g")
    assert not (tmp_path / "g").exists()
    with pytest.raises(LatoptError, match="partial fold variants"):  # this LUT has no partial-variant times
        run_fold(with_lut.with_overrides({"fold.granularity": "activation"}), tiny["ckpt"], tmp_path / "g")
    other = save_lut(LUT(device="cpu", model="mobilenetv2_100", resolution=16, batch=1, blocks=entries,
                         fixed_ms=0.25), tmp_path / "other.json")
    with pytest.raises(LatoptError, match="profiled for model 'mobilenetv2_100'"):
        run_fold(with_lut.with_overrides({"lut": str(other)}), tiny["ckpt"], tmp_path / "g")
    with pytest.raises(LatoptError, match="trained with data"):
        run_fold(tiny["cfg"].with_overrides({"data.split_seed": 1}), tiny["ckpt"], tmp_path / "g")
    assert not (tmp_path / "g").exists()


# ----------------------------------------------------------------------------- distillation
class _Says(nn.Module):
    """A teacher whose logits always name class ``k``."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(x.shape[0], 10)
        out[:, self.k] = 10.0
        return out


class _SaysWhenEval(nn.Module):
    """``net`` in training mode, :class:`_Says` in eval mode: pre-fold trains a copy of its base (training
    mode) against another copy in eval mode, so with this base its teacher always names class ``k``."""

    def __init__(self, net: nn.Module, k: int) -> None:
        super().__init__()
        self.net, self.says = net, _Says(k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) if self.training else self.says(x)


def _class_shares(model: nn.Module, loader) -> torch.Tensor:  # type: ignore[no-untyped-def]
    model.eval()
    with torch.no_grad():
        preds = torch.cat([model(x).argmax(1) for x, _ in loader])
    return torch.bincount(preds, minlength=10).float() / len(preds)


def test_distillation_pulls_the_student_towards_the_teacher(tiny: dict) -> None:
    """distill_weight 1: the task loss is the KL to the teacher alone. A teacher that always names the class
    the student names least makes the student name it, in pre-fold and in post-fold."""
    from latopt.files.checkpoint import load_checkpoint

    cfg = tiny["cfg"].with_overrides({"fold.distill_weight": 1.0})
    task = load_task(cfg)
    _, _, test = make_loaders(task, 256)
    base, _, _ = load_checkpoint(tiny["ckpt"])
    cfg = cfg.with_overrides({"fold.lambda_c": 0.0, "fold.p": 2.0, "fold.granularity": "block"})
    plain = prefold(cfg.with_overrides({"fold.distill": "none"}), base, task, progress=False).model
    shares = _class_shares(plain, test)
    k = int(shares.argmin())
    assert shares[k] <= 0.1
    distil = cfg.with_overrides({"fold.distill": "logits"})
    pulled = prefold(distil, _SaysWhenEval(base, k), task, progress=False).model
    assert _class_shares(pulled.net, test)[k] >= 0.9
    folded, info = fold_and_finetune(cfg, plain, task, tau=0.9, mode="exact", progress=False,
                                     loss=training_loss(distil, _Says(k)))
    assert info.finetuned and _class_shares(folded, test)[k] >= 0.9


@pytest.fixture
def teachers(monkeypatch: pytest.MonkeyPatch) -> list[nn.Module]:
    """Every teacher latopt.training.losses builds while the test runs."""
    from latopt.training import losses
    built: list[nn.Module] = []
    real = losses.frozen_teacher

    def counted(base: nn.Module, accel=None) -> nn.Module:  # type: ignore[no-untyped-def]
        built.append(real(base, accel))
        return built[-1]

    monkeypatch.setattr(losses, "frozen_teacher", counted)
    return built


def test_run_fold_builds_one_teacher_for_pre_fold_and_post_fold(tiny: dict, tmp_path: Path,
                                                                teachers: list[nn.Module]) -> None:
    cfg = tiny["cfg"].with_overrides({"fold.epochs": 1, "fold.distill": "logits"})
    r = run_fold(cfg, tiny["ckpt"], tmp_path / "f", progress=False).report
    assert len(teachers) == 1 and r.params_fold.distill == "logits" and r.history["postfold"]
    assert "distill logits" in (tmp_path / "f" / "report.txt").read_text()
    run_fold(cfg.with_overrides({"fold.distill": False}), tiny["ckpt"], tmp_path / "g", progress=False)
    assert len(teachers) == 1   # no distillation, no teacher
    # a report written before variants had names held a boolean: read as the name
    old = json.loads((tmp_path / "g" / "report.json").read_text())
    old["params_fold"]["distill"] = False
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert read_report(tmp_path / "old.json", LayerFoldReport).params_fold.distill == "none"


def test_the_dp_and_its_finetune_importance_build_one_teacher(tiny: dict, tmp_path: Path, teachers: list[nn.Module],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import latopt.dp.dp_stage
    from latopt.dp import DPReport, run_dp, variant_losses
    from latopt.files.checkpoint import load_checkpoint
    from latopt.latency.lut import LUT, BlockEntry
    from latopt.nets.blocks import find_blocks

    cfg = tiny["cfg"].with_overrides({"fold.distill": "logits"})
    base, _, _ = load_checkpoint(tiny["ckpt"])
    blocks = find_blocks(base)
    two = [b.index for b in blocks if b.foldable][:2]
    losses = variant_losses(cfg, base, load_task(cfg), {i: ("none", "full") for i in two}, method="finetune",
                            progress=False)
    assert len(teachers) == 1 and sorted(losses) == two   # one teacher for both fine-tunes
    lut = LUT(device="cpu", model=MODEL, resolution=16, batch=1, fixed_ms=0.25, blocks=[
        BlockEntry(index=b.index, path=b.path, kind=b.kind, input_shape=(1, b.cin, 8, 8), foldable=b.foldable,
                   reason=b.reason, raw={}, ms={"none": 1.0, **({"full": 0.5} if b.foldable else {})}) for b in blocks])
    passed: list = []

    def importance(*args, loss, **kw):  # type: ignore[no-untyped-def]
        passed.append(loss)
        return {i: {"none": 0.0, "full": 0.0 if i in two else 1.0} for i in (b.index for b in blocks if b.foldable)}

    monkeypatch.setattr(latopt.dp.dp_stage, "variant_losses", importance)
    r = run_dp(cfg, tiny["ckpt"], tmp_path / "dp", lut=lut, budget=0.97, importance="finetune", progress=False,
               budget_rounds=0).report
    # run_dp builds its own, once, for the importance and the fine-tune
    assert len(teachers) == 2 and passed[0].teacher is teachers[1] and r.distill == "logits" and r.n_folded >= 1
    old = json.loads((tmp_path / "dp" / "report.json").read_text())
    old["distill"] = True
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert read_report(tmp_path / "old.json", DPReport).distill == "logits"


def test_an_unknown_distillation_stops_a_fold_before_it_trains(tiny: dict, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import latopt.dp.dp_stage
    import latopt.layerfold.fold_stage
    from latopt.dp import run_dp

    def no_task(cfg):  # type: ignore[no-untyped-def]
        raise AssertionError("the stage went on to its data")

    monkeypatch.setattr(latopt.layerfold.fold_stage, "load_task", no_task)
    monkeypatch.setattr(latopt.dp.dp_stage, "load_task", no_task)
    cfg = tiny["cfg"].with_overrides({"fold.distill": "feature"})
    line = "config key 'fold.distill' is 'feature'; choose one of none, logits"
    with pytest.raises(LatoptError) as e:
        run_fold(cfg, tiny["ckpt"], tmp_path / "f", progress=False)
    assert str(e.value) == line and not (tmp_path / "f").exists()
    with pytest.raises(LatoptError) as e:
        run_dp(cfg, tiny["ckpt"], tmp_path / "d", lut=tmp_path / "none.json", budget=0.9, progress=False)
    assert str(e.value) == line



def test_the_resume_fingerprint_holds_content_not_paths(tmp_path: Path) -> None:
    # a checkpoint replaced at the same path, or an image folder changed in place, is not resumed
    from latopt.config import load_config
    from latopt.training.base_training import _fingerprint

    cfg = load_config(None)
    ckpt = tmp_path / "base.pt"
    ckpt.write_bytes(b"one")
    before = _fingerprint(cfg, 0, "checkpoint", ckpt)
    ckpt.write_bytes(b"two")
    assert _fingerprint(cfg, 0, "checkpoint", ckpt) != before
    folder = tmp_path / "imgs"
    (folder / "train" / "a").mkdir(parents=True)
    (folder / "train" / "a" / "x.png").write_bytes(b"x")
    cfg = load_config(None, {"data.task": f"imagefolder:{folder}"})
    before = _fingerprint(cfg, 0, "scratch", None)
    assert _fingerprint(cfg, 0, "scratch", None) == before
    (folder / "train" / "a" / "y.png").write_bytes(b"y")
    assert _fingerprint(cfg, 0, "scratch", None) != before
