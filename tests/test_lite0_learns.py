"""timm's models learn a 10-class task from scratch (regression: EfficientNet-lite0 "did not learn" digits).

timm's EfficientNet/MobileNetV2 initialisation draws the classifier from U(±1/sqrt(num_classes)), sized for
1000 classes: with 10 the initial loss was ~8 instead of ln 10, the gradients ~18x torchvision's, and under
the quickstart recipe's gradient clipping the loss crawled from 8 to 6. ``build_model`` now gives a classifier
that is not pretrained the scale of a fresh ``nn.Linear`` (``latopt.nets.models._rescale_new_timm_head``). Tiny: a
fixed batch of 20 digits (2 per class) at 32 px, 30 SGD steps of the quickstart recipe (~10 s on one thread)."""

from __future__ import annotations

import math

import pytest
import timm
import torch
import torch.nn.functional as F

from latopt.config import load_config
from latopt.data import load_task
from latopt.nets.models import build_model
from latopt.training.loop import make_optimizer

pytestmark = pytest.mark.floor   # the lower-bounds run (oldest timm) must have the same head scale

LN10 = math.log(10)


def _digits_batch(per_class: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``per_class`` training digits of each class, as the quickstart config serves them (32 px)."""
    train = load_task(load_config("quickstart", {"data.augment": False})).train
    first = [train[i] for i in range(100)]
    picked = [s for c in range(10) for s in [s for s in first if int(s[1]) == c][:per_class]]
    xs, ys = zip(*picked, strict=True)
    return torch.stack(xs), torch.as_tensor(ys)


# the head widths of the timm models: 1280 features (MobileNetV2 <= 1.0, every EfficientNet-lite), 1792 (1.4)
@pytest.mark.parametrize("name", ["mobilenetv2_035", "mobilenetv2_140", "efficientnet_lite0", "tf_efficientnet_lite0"])
def test_new_timm_classifier_has_the_scale_of_a_fresh_linear(name: str) -> None:
    head = build_model(name, num_classes=10).get_classifier()
    bound = head.in_features ** -0.5  # nn.Linear's U(±1/sqrt(in_features)); timm drew U(±1/sqrt(10)) = ±0.32
    w = head.weight.abs().max().item()
    assert 0.9 * bound < w <= bound * (1 + 1e-6), (name, w, bound)
    assert not head.bias.any()


def test_pretrained_classifier_is_kept_and_a_new_one_rescaled(monkeypatch: pytest.MonkeyPatch) -> None:
    """With pretrained weights, only a classifier timm did not load (num_classes != 1000) is rescaled. The
    weights are not fetched: timm's model at random weights stands in for the pretrained one."""
    real = timm.create_model
    monkeypatch.setattr(timm, "create_model", lambda name, pretrained, **kw: real(name, pretrained=False, **kw))
    new = build_model("mobilenetv2_035", num_classes=10, pretrained=True).get_classifier()
    assert new.weight.abs().max().item() <= new.in_features ** -0.5 * (1 + 1e-6)
    kept = build_model("mobilenetv2_035", num_classes=1000, pretrained=True).get_classifier()
    assert kept.weight.abs().max().item() > 0.03   # timm's own U(±1/sqrt(1000)) = ±0.0316, as loaded


def test_efficientnet_lite0_starts_at_ln10_and_learns_digits() -> None:
    x, y = _digits_batch()
    cfg = load_config("quickstart", {"model.name": "efficientnet_lite0"})
    t = cfg.train
    model = build_model(cfg.model.name, num_classes=10).train()
    opt = make_optimizer(model, t, t.lr)   # SGD, Nesterov momentum 0.9, lr 0.05, weight decay 5e-4
    losses = []
    for _ in range(30):
        loss = F.cross_entropy(model(x), y, label_smoothing=t.label_smoothing)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.clip_grad)   # 2.0: the quickstart recipe's
        opt.step()
        losses.append(loss.item())
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    # measured (torch 2.14, timm 1.0.31): 2.39 at the start, first 5 steps 2.38, last 5 1.95; before the fix
    # 7.87 at the start (gradient norm 4150, clipped to 2), first 5 steps 7.64, last 5 5.06
    assert abs(losses[0] - LN10) < 0.3, losses
    assert last < first - 0.2 and last < LN10 - 0.15, losses
