"""The training engine (latopt.engine): optimizer groups, schedule values, fit's step loss, hook and errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from latopt.config import TrainConfig
from latopt.engine import fit, make_optimizer, make_scheduler, set_threads, tensor_loader
from latopt.errors import LatoptError
from latopt.layers import AlphaActivation


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

    history = fit(net, loader, 2, opt, make_scheduler(opt, cfg, 2, len(loader)), step_loss, progress=False,
                  after_step=hook, extra_optimizers=(alpha_opt,), val_loader=[(x, y)])
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
        fit(net, [(torch.ones(1, 2), torch.zeros(1, dtype=torch.long))], 3, opt, None, nan_loss, progress=False,
            desc="post-fold")
    assert str(e.value) == "post-fold: the loss became nan in epoch 1 (by step 1); lower the learning rate"


def test_tensor_loader_covers_each_sample_once_per_epoch_reproducibly() -> None:
    x, y = torch.arange(10.0)[:, None], torch.arange(10)

    def epochs(loader):
        return [[yb.tolist() for _, yb in loader] for _ in range(2)]

    a, b = epochs(tensor_loader(x, y, 4, seed=1)), epochs(tensor_loader(x, y, 4, seed=1))
    assert a == b and a[0] != a[1]
    for ep in a:
        assert [len(batch) for batch in ep] == [4, 4, 2] and sorted(sum(ep, [])) == list(range(10))
    assert epochs(tensor_loader(x, y, 4, seed=2)) != a


def test_set_threads() -> None:
    old = torch.get_num_threads()
    try:
        set_threads(None)
        assert torch.get_num_threads() == old
        set_threads(1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(old)
