"""The training engine (latopt.training.loop): optimizer groups, schedule values, fit's step loss, hook and errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from latopt.config import TrainConfig
from latopt.errors import LatoptError
from latopt.nets.layers import AlphaActivation
from latopt.training.loop import (
    BestWeights,
    Report,
    Step,
    cross_entropy_loss,
    fit,
    make_optimizer,
    make_scheduler,
    seed_everything,
    tensor_loader,
)


def _net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), AlphaActivation("relu"), nn.Linear(8, 3))


def _ids(params) -> set[int]:
    return {id(q) for q in params}


def test_optimizer_one_group_as_configured_without_excluded_and_frozen_parameters() -> None:
    net = _net()
    lin1, bn, act, lin2 = net
    cfg = TrainConfig(optimizer="sgd", momentum=0.8, weight_decay=0.01)
    opt = make_optimizer(net, cfg, 0.1, exclude=[act.alpha])
    assert isinstance(opt, torch.optim.SGD) and len(opt.param_groups) == 1
    (group,) = opt.param_groups
    # weight decay on every parameter, biases and BN too (timm's filter_bias_and_bn cost accuracy); α excluded
    assert _ids(group["params"]) == _ids([lin1.weight, lin1.bias, bn.weight, bn.bias, lin2.weight, lin2.bias])
    assert (group["lr"], group["weight_decay"], group["momentum"], group["nesterov"]) == (0.1, 0.01, 0.8, True)
    # frozen parameters are left out; classical momentum on request; plain SGD at momentum 0
    lin2.bias.requires_grad_(False)
    (classical,) = make_optimizer(net, cfg, 0.1, nesterov=False).param_groups
    assert not classical["nesterov"] and classical["momentum"] == 0.8
    assert _ids(classical["params"]) == _ids([lin1.weight, lin1.bias, bn.weight, bn.bias, act.alpha, lin2.weight])
    (plain,) = make_optimizer(net, TrainConfig(optimizer="sgd", momentum=0.0), 0.1).param_groups
    assert plain["momentum"] == 0.0 and not plain["nesterov"]
    adamw = make_optimizer(net, TrainConfig(optimizer="adamw", weight_decay=0.0), 0.003)
    assert isinstance(adamw, torch.optim.AdamW) and adamw.param_groups[0]["weight_decay"] == 0.0


def _lrs(cfg: TrainConfig, epochs: int, steps: int) -> list[float]:
    """The learning rate each update of a run uses, driven the way fit drives it."""
    opt = make_optimizer(nn.Linear(2, 2), cfg, cfg.lr)
    sched = make_scheduler(opt, cfg, epochs, steps)
    out = []
    for k in range(epochs * steps):
        out.append(opt.param_groups[0]["lr"])
        sched.step_update(k + 1)
    return out


def test_schedule_values_at_chosen_updates() -> None:
    # 4 epochs x 5 updates = 20 updates, lr 1
    cos = _lrs(TrainConfig(lr=1.0, schedule="cosine"), 4, 5)
    assert cos[0] == pytest.approx(1.0) and cos[10] == pytest.approx(0.5)
    assert cos[5] == pytest.approx(0.5 * (1 + math.cos(math.pi / 4))) and cos[19] == pytest.approx(0.00616, abs=1e-5)
    # linear warm-up from 0 over 1 epoch replaces the schedule, then the cosine measured from update 0
    warm = _lrs(TrainConfig(lr=1.0, schedule="cosine", warmup_epochs=1), 4, 5)
    assert warm[:5] == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8]) and warm[5:] == pytest.approx(cos[5:])
    # step: x0.1 every 2 epochs, counted from the first update (the warm-up does not shift the drops)
    step = _lrs(TrainConfig(lr=1.0, schedule="step", step_size=2, gamma=0.1, warmup_epochs=1), 4, 5)
    assert step[:5] == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8])
    assert step[5:] == pytest.approx([1.0] * 5 + [0.1] * 10)
    assert _lrs(TrainConfig(lr=0.5, schedule="constant"), 2, 3) == pytest.approx([0.5] * 6)
    # a warm-up longer than the run is capped at half of it, so the decay still happens
    capped = _lrs(TrainConfig(lr=1.0, schedule="cosine", warmup_epochs=10), 4, 5)
    assert capped[:10] == pytest.approx([k / 10 for k in range(10)]) and capped[10:] == pytest.approx(cos[10:])


def test_fit_steps_schedule_hook_extras_and_extra_optimizer() -> None:
    torch.manual_seed(0)
    x, y = torch.randn(10, 4), torch.randint(0, 3, (10,))
    net = _net()
    alpha = net[2].alpha
    cfg = TrainConfig(optimizer="sgd", lr=0.1, schedule="step", step_size=1, gamma=0.5)
    opt = make_optimizer(net, cfg, cfg.lr, exclude=[alpha])
    alpha_opt = torch.optim.Adam([alpha], lr=0.05)
    loader = tensor_loader(x, y, 4, seed=0)  # batches of 4, 4, 2
    seen_lrs: list[tuple[float, float]] = []

    def step_loss(m: nn.Module, xb: torch.Tensor, yb: torch.Tensor):
        logits = m(xb)
        return nn.functional.cross_entropy(logits, yb) - alpha, logits, {"batch": float(len(yb))}

    def hook() -> None:
        seen_lrs.append((opt.param_groups[0]["lr"], alpha_opt.param_groups[0]["lr"]))

    step = Step(step_loss, opt, make_scheduler(opt, cfg, 2, len(loader)), extra_optimizers=(alpha_opt,), after_step=hook)
    history = fit(net, loader, 2, step, val_loader=[(x, y)], report=Report(show=False))
    assert len(seen_lrs) == 6  # the hook runs after every update, after the schedule's step
    assert [a for a, _ in seen_lrs] == pytest.approx([0.1, 0.1, 0.05, 0.05, 0.05, 0.025])
    assert {b for _, b in seen_lrs} == {0.05}  # the extra optimizer is not scheduled
    assert float(alpha.detach()) > 0  # ... but it steps (the loss rewards a larger α)
    assert [h["epoch"] for h in history] == [1, 2]
    assert history[0]["batch"] == pytest.approx((4 * 4 + 4 * 4 + 2 * 2) / 10)  # extras: sample-weighted mean
    assert history[0]["lr"] == pytest.approx(0.05) and 0.0 <= history[1]["val_acc"] <= 1.0


def test_fit_stops_on_a_non_finite_loss_with_one_line() -> None:
    net = nn.Linear(2, 2)
    opt = make_optimizer(net, TrainConfig(), 0.1)

    def nan_loss(m: nn.Module, x: torch.Tensor, y: torch.Tensor):
        logits = m(x)
        return logits.sum() * float("nan"), logits, {}

    with pytest.raises(LatoptError) as e:
        fit(net, [(torch.ones(1, 2), torch.zeros(1, dtype=torch.long))], 3, Step(nan_loss, opt),
            report=Report(False, "post-fold"))
    msg = str(e.value)
    assert msg.startswith("post-fold:") and "nan" in msg and "epoch 1" in msg and "learning rate" in msg, msg


def test_clip_grad_bounds_the_update() -> None:
    """Plain SGD at lr 1 moves the weights by exactly the (clipped) gradient: its norm is the clip."""
    torch.manual_seed(0)
    x, y = 100 * torch.randn(8, 4), torch.randint(0, 3, (8,))
    for clip in (None, 0.01):
        net = nn.Linear(4, 3)
        before = torch.cat([q.detach().flatten().clone() for q in net.parameters()])
        opt = make_optimizer(net, TrainConfig(optimizer="sgd", momentum=0.0, weight_decay=0.0), 1.0)
        fit(net, [(x, y)], 1, Step(cross_entropy_loss(), opt, clip_grad=clip), report=Report(show=False))
        step = torch.cat([q.detach().flatten() for q in net.parameters()]) - before
        if clip is None:
            assert float(step.norm()) > 1.0    # the unclipped gradient of these large inputs is large
        else:
            assert float(step.norm()) == pytest.approx(clip, rel=1e-4)


def _collapsing_run(keep_best: bool, caplog: pytest.LogCaptureFixture) -> tuple[nn.Module, list[dict]]:
    """A linearly separable task learnt in a few epochs; in epoch 5 a hook wrecks the weights (a stand-in
    for a diverging step). Returns the model and its history."""
    torch.manual_seed(0)
    x = torch.randn(64, 4)
    y = (x[:, 0] > 0).long()
    net = nn.Linear(4, 2)
    opt = make_optimizer(net, TrainConfig(optimizer="sgd", momentum=0.0, weight_decay=0.0), 0.5)
    loader = tensor_loader(x, y, 16, seed=0)   # 4 steps an epoch
    steps = [0]

    def wreck() -> None:
        steps[0] += 1
        if steps[0] > 16:                        # epoch 5: the weights are pushed to the wrong class
            with torch.no_grad():
                net.weight.copy_(-10 * net.weight.abs().sum() * torch.tensor([[-1.0, 0, 0, 0], [1.0, 0, 0, 0]]))

    best = BestWeights() if keep_best else None
    with caplog.at_level("INFO", logger="latopt"):
        history = fit(net, loader, 5, Step(cross_entropy_loss(), opt, after_step=wreck), val_loader=[(x, y)],
                      best=best, report=Report(False, "base"))
    return net, history


def test_a_collapse_is_one_warning_and_the_best_weights_are_kept(caplog: pytest.LogCaptureFixture) -> None:
    net, history = _collapsing_run(True, caplog)
    vals = [h["val_acc"] for h in history]
    assert max(vals[:4]) >= 0.9 and vals[4] < 0.2           # it learnt, then collapsed
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len([w for w in warnings if "validation accuracy fell" in w]) == 1
    assert len([w for w in warnings if "training loss jumped" in w]) == 1
    best_epoch = max(range(4), key=lambda i: (vals[i], i)) + 1
    assert any(f"kept the weights of epoch {best_epoch}" in r.getMessage() for r in caplog.records)
    with torch.no_grad():                                     # the model holds the best epoch's weights
        x = torch.randn(64, 4)
        assert float((net(x).argmax(1) == (x[:, 0] > 0).long()).float().mean()) >= 0.85
    assert history[4].get("unstable_val") == 1.0 and "unstable_val" not in history[3]


def test_without_keep_best_the_last_weights_stay(caplog: pytest.LogCaptureFixture) -> None:
    net, history = _collapsing_run(False, caplog)
    with torch.no_grad():
        x = torch.randn(256, 4)
        assert float((net(x).argmax(1) == (x[:, 0] > 0).long()).float().mean()) < 0.2
    assert not any("kept the weights" in r.getMessage() for r in caplog.records)


def test_best_weights_ties_go_to_the_later_epoch_and_survive_a_round_trip() -> None:
    net = nn.Linear(2, 2)
    best = BestWeights()
    best.update(net, 1, 0.5)
    with torch.no_grad():
        net.weight.add_(1.0)
    best.update(net, 2, 0.5)                      # a tie: the later epoch's weights
    best.update(nn.Linear(2, 2), 3, 0.4)          # worse: ignored
    again = BestWeights()
    again.load_state_dict(best.state_dict())
    assert (again.epoch, again.val_acc) == (2, 0.5)
    assert torch.equal(again.weights["weight"], net.weight.detach())


def test_a_smooth_run_warns_nothing(caplog: pytest.LogCaptureFixture) -> None:
    torch.manual_seed(0)
    x = torch.randn(64, 4)
    y = (x[:, 0] > 0).long()
    net = nn.Linear(4, 2)
    opt = make_optimizer(net, TrainConfig(optimizer="sgd", weight_decay=0.0), 0.05)
    with caplog.at_level("INFO", logger="latopt"):
        fit(net, tensor_loader(x, y, 16, seed=0), 6, Step(cross_entropy_loss(), opt), val_loader=[(x, y)],
            best=BestWeights(), report=Report(show=False))
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_tensor_loader_covers_each_sample_once_per_epoch_reproducibly() -> None:
    x, y = torch.arange(10.0)[:, None], torch.arange(10)

    def epochs(loader):
        return [[yb.tolist() for _, yb in loader] for _ in range(2)]

    a, b = epochs(tensor_loader(x, y, 4, seed=1)), epochs(tensor_loader(x, y, 4, seed=1))
    assert a == b and a[0] != a[1]
    for ep in a:
        assert [len(batch) for batch in ep] == [4, 4, 2] and sorted(sum(ep, [])) == list(range(10))
    assert epochs(tensor_loader(x, y, 4, seed=2)) != a


def test_a_run_that_watches_the_loss_only_says_nothing_of_its_accuracy(caplog: pytest.LogCaptureFixture) -> None:
    # pre-fold: validation accuracy falls by design while non-linearity is removed; only the loss is watched
    torch.manual_seed(0)
    x = torch.randn(64, 4)
    y = (x[:, 0] > 0).long()
    val = [[(x, y)]]

    def worse_labels() -> None:          # the task the validation set measures drifts away (a stand-in)
        val[0] = [(x, 1 - y)] if len(seen) >= 8 else val[0]
        seen.append(1)

    seen: list[int] = []

    class Val:
        def __iter__(self):
            return iter(val[0])

    for watch, warned in ((("loss",), False), (("loss", "val"), True)):
        val[0], seen[:] = [(x, y)], []
        net = nn.Linear(4, 2)
        opt = make_optimizer(net, TrainConfig(optimizer="sgd", momentum=0.0, weight_decay=0.0), 0.5)
        caplog.clear()
        with caplog.at_level("INFO", logger="latopt"):
            fit(net, tensor_loader(x, y, 16, seed=0), 4, Step(cross_entropy_loss(), opt, after_step=worse_labels),
                val_loader=Val(), report=Report(show=False, watch=watch))
        assert any("validation accuracy fell" in r.getMessage() for r in caplog.records) == warned, watch


def test_seed_everything_seeds_python_numpy_and_torch() -> None:
    import random

    import numpy as np

    def draws() -> tuple[float, float, float]:
        return random.random(), float(np.random.rand()), float(torch.rand(()))

    seed_everything(7)
    first = draws()
    seed_everything(7)
    assert draws() == first
    seed_everything(8)
    assert all(a != b for a, b in zip(draws(), first, strict=True))
    seed_everything(2**40 + 7)   # numpy takes seeds below 2**32: the seed is taken modulo 2**32
    assert draws() == first


# ----------------------------------------------------------------------------- the training loss (latopt.training.losses)
def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    return torch.randn(6, 4), torch.randint(0, 3, (6,))


def test_the_task_loss_is_cross_entropy_exactly() -> None:
    from latopt.training.losses import TrainingLoss

    net, (x, y) = _net(), _batch()
    loss, logits, extras = TrainingLoss(0.1)(net, x, y)
    assert torch.equal(loss, nn.functional.cross_entropy(net(x), y, label_smoothing=0.1)) and extras == {}
    assert torch.equal(logits, net(x))
    assert cross_entropy_loss(0.1) == TrainingLoss(0.1)   # the engine's task loss is the same object


def _old_distilled(student: nn.Module, teacher: nn.Module, x: torch.Tensor, y: torch.Tensor, w: float, t: float,
                   ls: float) -> torch.Tensor:
    """layerfold/phases.py's ``_task_loss`` with a teacher, as it was before latopt.training.losses."""
    logits = student(x)
    ce = nn.functional.cross_entropy(logits, y, label_smoothing=ls)
    with torch.no_grad():
        t_logits = teacher(x)
    kd = nn.functional.kl_div(nn.functional.log_softmax(logits / t, 1), nn.functional.log_softmax(t_logits / t, 1),
                              log_target=True, reduction="batchmean") * t * t
    return (1 - w) * ce + w * kd


def test_logits_distillation_is_the_former_formula_bit_for_bit() -> None:
    from latopt.config import load_config
    from latopt.training.losses import LogitDistillation, training_loss

    cfg = load_config(None, {"fold.distill": "logits", "fold.distill_weight": 0.3, "fold.temperature": 3.0,
                             "train.label_smoothing": 0.05})
    student, x, y = _net(), *_batch()
    torch.manual_seed(5)
    base = _net().train()
    loss = training_loss(cfg, base)
    assert isinstance(loss.distill, LogitDistillation) and loss.distill_weight == 0.3
    got, logits, extras = loss(student, x, y)
    got.backward()
    grads = [q.grad.clone() for q in student.parameters()]
    student.zero_grad()
    want = _old_distilled(student, base.eval(), x, y, 0.3, 3.0, 0.05)
    want.backward()
    assert torch.equal(got, want) and extras == {}
    assert all(torch.equal(a, q.grad) for a, q in zip(grads, student.parameters(), strict=True))


def test_the_teacher_is_a_frozen_copy_built_once_and_shared_by_penalties() -> None:
    from latopt.config import load_config
    from latopt.training.losses import training_loss

    base = _net().train()
    loss = training_loss(load_config(None, {"fold.distill": "logits"}), base)
    teacher = loss.teacher
    assert teacher is not None and teacher is not base and not teacher.training and base.training
    assert not any(q.requires_grad for q in teacher.parameters()) and all(q.requires_grad for q in base.parameters())
    assert training_loss(load_config(None), base).teacher is None   # fold.distill none: no teacher
    with_lc = loss.with_penalty("L_c", 2.0, lambda: torch.tensor(0.25))
    assert with_lc.teacher is teacher and loss.penalties == ()
    net, (x, y) = _net(), _batch()
    total, _, extras = with_lc(net, x, y)
    assert torch.equal(total, loss(net, x, y)[0] + 2.0 * torch.tensor(0.25)) and float(extras["L_c"]) == 0.25


def test_distillation_names_and_the_booleans_configs_and_reports_held() -> None:
    from latopt.config import load_config
    from latopt.layerfold.fold_record import FoldParams
    from latopt.training.losses import distill_names

    assert distill_names()[:2] == ("none", "logits")
    assert load_config(None).fold.distill == "none"
    assert load_config(None, {"fold.distill": True}).fold.distill == "logits"
    assert load_config(None, {"fold.distill": False}).fold.distill == "none"
    params = {"lambda_c": 1.0, "tau": 0.9, "p": 2.0, "granularity": "block", "mode": "exact",
              "unfolded_alpha": "zero", "lut": None}
    assert FoldParams.model_validate({**params, "distill": True}).distill == "logits"   # strict, as reports are read
    assert FoldParams.model_validate({**params, "distill": "none"}).distill == "none"


def test_an_unknown_distillation_is_one_line_naming_the_key_and_the_names() -> None:
    from latopt.config import load_config
    from latopt.training.losses import check_loss_config, training_loss

    cfg = load_config(None, {"fold.distill": "feature"})   # the config module cannot see the registry
    with pytest.raises(LatoptError) as e:
        check_loss_config(cfg)
    assert str(e.value) == "config key 'fold.distill' is 'feature'; choose one of none, logits"
    with pytest.raises(LatoptError, match="'fold.distill' is 'feature'"):
        training_loss(cfg, _net())
    check_loss_config(load_config(None, {"fold.distill": "logits"}))
    with pytest.raises(LatoptError, match="distils from the base network"):
        training_loss(load_config(None, {"fold.distill": "logits"}))


def test_a_registered_variant_is_a_valid_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from latopt.config import load_config
    from latopt.training import losses

    monkeypatch.setattr(losses, "DISTILLATIONS", dict(losses.DISTILLATIONS))

    @losses.distillation("mse")
    class Mse(losses.Distillation):
        def __call__(self, model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            logits = model(x)
            with torch.no_grad():
                target = self.teacher(x)
            return logits, ((logits - target) ** 2).mean()

    cfg = load_config(None, {"fold.distill": "mse", "fold.distill_weight": 1.0})
    losses.check_loss_config(cfg)
    assert losses.distill_names() == ("none", "logits", "mse")
    net, (x, y) = _net(), _batch()
    teacher = _net()
    loss, _, _ = losses.training_loss(cfg, teacher)(net, x, y)
    assert torch.allclose(loss, ((net(x) - teacher.eval()(x)) ** 2).mean())
    with pytest.raises(ValueError, match="registered already"):
        losses.distillation("logits")(Mse)


def test_the_config_module_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = "import sys, latopt.config; print('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "False", r.stdout + r.stderr
