"""Models by name (timm / torchvision, used as they are) and what they cost (FLOPs, parameters).

One change to timm's models: a classifier that is not pretrained starts at the scale of a fresh ``nn.Linear``
(timm's initialisation is sized for 1000 classes; with 10 the initial loss is ~8, not ln 10:
``_rescale_new_timm_head``).

Names (``SUPPORTED``)::

    mobilenetv2_035 mobilenetv2_050 mobilenetv2_075 mobilenetv2_100 mobilenetv2_140      timm
    efficientnet_lite0 .. efficientnet_lite4                                               timm
    tf_efficientnet_lite0 .. tf_efficientnet_lite4       timm, TF "SAME" padding (folds supported)
    torchvision/mobilenet_v2[?width=W][&strides=S1,...,S7]   torchvision, width multiplier W (default 1.0),
                                                         the strides of its seven inverted-residual stages

    resnet20_cifar resnet32_cifar resnet44_cifar resnet56_cifar resnet110_cifar   latopt (latopt.nets.cifar_resnets)
    vgg11_cifar vgg13_cifar vgg16_cifar vgg19_cifar                               latopt (latopt.nets.cifar_resnets)

Besides these (the names latopt is tested and profiled on), any other model name timm knows
(``timm.list_models()``, e.g. ``mobilenetv3_large_100``, ``mnasnet_100``, ``efficientnet_b0``, ``resnet18``) and
``torchvision/NAME`` for torchvision's classification models (``torchvision.models.list_models``, e.g.
``torchvision/mobilenet_v3_small``, ``torchvision/resnet18``) build, with random weights unless ``pretrained``;
`latopt inspect` says which of their blocks latopt can change (docs/compatibility.md lists the families).
torchvision ResNets get one activation module per use (:func:`latopt.adapters.resnet.separate_activations_`), and
every model's VGG stacks their conv pairs (:func:`latopt.adapters.vgg.pair_convs_`).

A ``timm/`` prefix is accepted (``timm/mobilenetv2_100``). The torchvision options are part of the name, e.g.
``torchvision/mobilenet_v2?width=0.75``; the canonical spelling drops the defaults (width 1.0, strides
1,2,2,2,1,2,1, ImageNet's layout). ``strides`` suits small images: at 32 px ImageNet's layout leaves a 1x1 map
for the last four stages; ``strides=1,2,2,1,1,2,1`` (the ``fashion_mnist`` config's) keeps 4x4 and 2x2 maps
(results/fashion-mnist/README.md).

Checkpoints (save, load, verify) are :mod:`latopt.files.checkpoint`.

Public API: ``SUPPORTED``, ``parse_name``, ``canonical_name``, ``build_model``, ``count_flops`` (the one FLOP
counter), ``model_cost``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import timm
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode
from torchvision.models import MobileNet_V2_Weights, mobilenet_v2

from latopt.adapters.resnet import separate_activations_
from latopt.adapters.vgg import pair_convs_
from latopt.constants import MAX_CLASSES, SUPPORTED_MODELS, TIMM_MODELS, TORCHVISION_MODEL
from latopt.errors import LatoptError, first_line
from latopt.nets.cifar_resnets import DEPTHS, VGG_CONFIGS, CifarResNet, CifarVGG

CIFAR_MODELS: tuple[str, ...] = (*(f"resnet{d}_cifar" for d in DEPTHS), *(f"vgg{d}_cifar" for d in VGG_CONFIGS))
SUPPORTED: list[str] = [*SUPPORTED_MODELS, *CIFAR_MODELS]

# torchvision's MobileNetV2 stage table (``torchvision.models.mobilenetv2``): t, c, n, s
_TORCHVISION_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1))


def _unknown(name: str) -> LatoptError:
    return LatoptError(
        f"unknown model {name!r}; supported: {', '.join(SUPPORTED)} "
        f"(torchvision width: {TORCHVISION_MODEL}?width=0.75), any timm model name (timm.list_models()) "
        "or torchvision/NAME of a torchvision classification model")


def _torchvision_names() -> list[str]:
    import torchvision.models

    return list(torchvision.models.list_models(module=torchvision.models))


# torchvision's MobileNetV2: the strides of its seven inverted-residual stages (ImageNet's layout). The stem
# convolution has stride 2 and is not among them.
TORCHVISION_STRIDES: tuple[int, ...] = (1, 2, 2, 2, 1, 2, 1)


class ModelName(NamedTuple):
    """A parsed model name: its family (``timm`` / ``torchvision`` / ``latopt``), base name and the options of
    torchvision's MobileNetV2."""
    family: str
    base: str
    width: float = 1.0
    strides: tuple[int, ...] = TORCHVISION_STRIDES


def _parse_strides(val: str, name: str) -> tuple[int, ...]:
    parts = val.split(",")
    if len(parts) != len(TORCHVISION_STRIDES) or not all(p in ("1", "2") for p in parts):
        default = ",".join(map(str, TORCHVISION_STRIDES))
        raise LatoptError(f"bad strides {val!r} in {name!r}: give {len(TORCHVISION_STRIDES)} strides of 1 or 2, "
                          f"one per inverted-residual stage (default {default})")
    return tuple(int(p) for p in parts)


def parse_name(name: str) -> ModelName:
    """The parsed model name; LatoptError listing the supported ones."""
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        if isinstance(name, str) and name.strip():
            raise LatoptError(f"model name {name!r} has leading or trailing spaces; give {name.strip()!r}")
        raise _unknown(str(name))
    n = name
    if n.startswith("timm/"):
        n = n[len("timm/"):]
    if n in TIMM_MODELS or ("." not in n and "?" not in n and "/" not in n and timm.is_model(n)):
        return ModelName("timm", n)
    if n in CIFAR_MODELS and n == name:
        return ModelName("latopt", n)
    base, _, query = n.partition("?")
    if base != TORCHVISION_MODEL:
        if n == name and base.startswith("torchvision/") and base.split("/", 1)[1] in _torchvision_names():
            if query:
                raise LatoptError(f"bad model option {query!r} in {name!r}: only {TORCHVISION_MODEL} takes options")
            return ModelName("torchvision", base)
        raise _unknown(name)
    width, strides, seen = 1.0, TORCHVISION_STRIDES, set()
    for option in query.split("&") if query else ():
        key, _, val = option.partition("=")
        if key not in ("width", "strides") or not val or key in seen:
            raise LatoptError(f"bad model option {option!r} in {name!r}: the options are ?width=W and "
                              "&strides=S1,...,S7, each once, e.g. ?width=0.5&strides=1,2,2,1,1,2,1")
        seen.add(key)
        if key == "strides":
            strides = _parse_strides(val, name)
            continue
        try:
            width = float(val)
        except ValueError:
            raise LatoptError(f"bad width {val!r} in {name!r}: give a number such as 0.75") from None
        if not 0.1 <= width <= 4.0:
            raise LatoptError(f"width {width} in {name!r} is out of range; use 0.1 .. 4.0")
    return ModelName("torchvision", base, width, strides)


def canonical_name(name: str) -> str:
    """The canonical spelling of a model name (what checkpoints and LUTs record): defaults dropped."""
    parsed = parse_name(name)
    if parsed.family != "torchvision" or parsed.base != TORCHVISION_MODEL:
        return parsed.base
    options = []
    if parsed.width != 1.0:
        options.append(f"width={parsed.width:g}")
    if parsed.strides != TORCHVISION_STRIDES:
        options.append("strides=" + ",".join(map(str, parsed.strides)))
    return parsed.base + ("?" + "&".join(options) if options else "")


def same_model(a: str, b: str) -> bool:
    """Whether two names spell one model (``torchvision/mobilenet_v2?width=1.0`` is ``torchvision/mobilenet_v2``):
    checkpoints record the canonical name, LUTs and plan files the name they were made with. A name latopt
    cannot parse is equal only to itself."""
    if a == b:
        return True
    try:
        return canonical_name(a) == canonical_name(b)
    except LatoptError:
        return False


def _pretrained_error(name: str, e: BaseException, cache: str) -> LatoptError:
    """One line from the library's own error: timm's RuntimeError ("No pretrained weights exist for ..."), or an
    OSError (huggingface_hub: not in the cache, offline mode on, hub unreachable; torchvision: download failed)."""
    msg = first_line(e, 120).split(". ")[0]
    why = f"; this needs internet access once, or the weights in {cache}" if isinstance(e, OSError) else ""
    return LatoptError(f"could not get pretrained weights for {name} ({type(e).__name__}: {msg}){why} — leave "
                       "pretrained off to start from random weights", param="pretrained")


@torch.no_grad()
def _rescale_new_timm_head(model: Any) -> None:  # a timm model (its get_classifier())
    """Give a new timm classifier the scale of a fresh ``nn.Linear``: U(±1/sqrt(in_features)).

    timm's EfficientNet/MobileNetV2 initialisation (``_init_weight_goog``) draws the classifier from
    U(±1/sqrt(num_classes)), TensorFlow's rule, scaled for 1000 ImageNet classes. For few classes that head is
    far too large: with 10 classes and 1280 features the initial logits have a std of ~4.6 (~2.8 at 224 px) and
    the initial loss is 7-9 instead of ln 10 = 2.3, gradients are ~18x those of torchvision's MobileNetV2 (norm
    ~1500, mostly in the stem), and with ``train.clip_grad`` the updates shrink as much: digits "did not learn"
    (loss 8 -> 6 where it should start at 2.3). Multiplying timm's draw by sqrt(num_classes / in_features) turns
    it into U(±1/sqrt(in_features)), what torch's ``nn.Linear`` (and torchvision's new head below) starts from;
    rescaling instead of redrawing keeps the global random stream, so everything drawn after the model is built
    (augmentation, dropout) is what it was. Biases stay 0."""
    head = model.get_classifier()
    if isinstance(head, nn.Linear):
        head.weight.mul_((head.out_features / head.in_features) ** 0.5)


def _build_timm(base: str, num_classes: int, pretrained: bool) -> nn.Module:
    """timm's model; with ``pretrained`` its Hugging Face weights: cached, or downloaded unless huggingface_hub's
    own offline switch is on (``HF_HUB_OFFLINE=1`` in the environment, read when huggingface_hub is imported).
    A classifier that is not pretrained (from scratch, or a new one for ``num_classes`` != the weights') is
    rescaled (:func:`_rescale_new_timm_head`)."""
    if not pretrained:
        model = timm.create_model(base, pretrained=False, num_classes=num_classes)
        _rescale_new_timm_head(model)
        return model
    try:
        model = timm.create_model(base, pretrained=True, num_classes=num_classes)
    except (OSError, RuntimeError) as e:  # OSError: huggingface_hub's errors; RuntimeError: timm's own
        raise _pretrained_error(base, e, "the Hugging Face cache (with HF_HUB_OFFLINE=1 timm looks only there, "
                                         "without network retries)") from None
    if num_classes != (getattr(model, "pretrained_cfg", None) or {}).get("num_classes", 1000):
        _rescale_new_timm_head(model)  # timm kept its own initialisation for the new classifier
    return model


def _build_torchvision(width: float, strides: tuple[int, ...], num_classes: int, pretrained: bool) -> nn.Module:
    if not pretrained:
        # torchvision's own stage table with the strides replaced: (expansion t, channels c, blocks n, stride s)
        setting = [[t, c, n, s] for (t, c, n, _), s in zip(_TORCHVISION_STAGES, strides, strict=True)]
        return mobilenet_v2(weights=None, width_mult=width, num_classes=num_classes,
                            inverted_residual_setting=setting)
    if width != 1.0 or strides != TORCHVISION_STRIDES:
        raise LatoptError(f"torchvision has pretrained MobileNetV2 weights only for width 1.0 and the default "
                          f"strides, not width {width:g}, strides {','.join(map(str, strides))}; "
                          "leave pretrained off or use the plain name", param="pretrained")
    try:
        model = mobilenet_v2(weights=MobileNet_V2_Weights.IMAGENET1K_V2)
    except (OSError, RuntimeError, ValueError) as e:
        raise _pretrained_error(TORCHVISION_MODEL, e, "the torch hub cache") from None
    if num_classes != 1000:
        last = model.classifier[-1]
        model.classifier[-1] = nn.Linear(last.in_features, num_classes)
    return model


def check_num_classes(num_classes: object) -> int:
    """``num_classes`` as a classifier's outputs, 1 .. :data:`~latopt.constants.MAX_CLASSES` (the bound checkpoints
    enforce), or one line; checked before a classifier is allocated."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or not 1 <= num_classes <= MAX_CLASSES:
        raise LatoptError(f"num_classes must be in [1, {MAX_CLASSES}] (an integer; the bound latopt checkpoints "
                          f"enforce), got {num_classes!r}", param="num_classes")
    return num_classes


def build_model(name: str, num_classes: int = 1000, *, pretrained: bool = False) -> nn.Module:
    """Build a supported model (see module docstring), returned in eval mode.

    ``pretrained`` loads the library's own ImageNet weights (timm: Hugging Face hub; torchvision:
    download.pytorch.org); a new classifier is created when ``num_classes`` != 1000. Offline and not
    cached: one-line LatoptError."""
    family, base, width, strides = parse_name(name)
    check_num_classes(num_classes)
    if family == "timm":
        model = _build_timm(base, num_classes, pretrained)
    elif family == "latopt":
        if pretrained:
            raise LatoptError(f"latopt has no pretrained weights for {base}; leave pretrained off",
                              param="pretrained")
        arch = base.split("_")[0]  # resnet20 / vgg16
        prefix = "vgg" if arch.startswith("vgg") else "resnet"
        model = (CifarVGG if prefix == "vgg" else CifarResNet)(int(arch[len(prefix):]), num_classes)
    elif base != TORCHVISION_MODEL:
        model = _build_torchvision_any(base.split("/", 1)[1], num_classes, pretrained)
    else:
        model = _build_torchvision(width, strides, num_classes, pretrained)
    pair_convs_(model)
    return model.eval()


def check_input_size(model: nn.Module, resolution: int, name: str = "") -> None:
    """A one-line LatoptError (param ``resolution``) when ``model`` takes only inputs of another size: timm's
    models of a fixed input size (``pretrained_cfg['fixed_input_size']``: the vision transformers) at any other
    resolution than theirs."""
    cfg = getattr(model, "pretrained_cfg", None)
    if not isinstance(cfg, dict) or not cfg.get("fixed_input_size"):
        return
    size = tuple(cfg.get("input_size") or ())[-2:]
    if len(size) == 2 and (resolution, resolution) != size:
        raise LatoptError(f"{name or type(model).__name__} takes only {size[0]}x{size[1]} inputs (a fixed input "
                          f"size), not {resolution}x{resolution}; give the resolution {size[0]} (--resolution, "
                          "data.resolution)", param="resolution")


def _build_torchvision_any(arch: str, num_classes: int, pretrained: bool) -> nn.Module:
    """Any torchvision classification model: random weights, or with ``pretrained`` its ``DEFAULT`` weights (1000
    classes only; a new classifier is made only for torchvision's MobileNetV2). ResNet blocks get one activation
    module per use."""
    import torchvision.models

    if not pretrained:
        model = torchvision.models.get_model(arch, weights=None, num_classes=num_classes)
    else:
        try:
            model = torchvision.models.get_model(arch, weights="DEFAULT")
        except (OSError, RuntimeError, ValueError) as e:
            raise _pretrained_error(f"torchvision/{arch}", e, "the torch hub cache") from None
        if num_classes != 1000:
            raise LatoptError(f"pretrained torchvision/{arch} has 1000 classes; a new classifier for "
                              f"{num_classes} is made only for {TORCHVISION_MODEL}", param="pretrained")
    separate_activations_(model)
    return model


@torch.no_grad()
def count_flops(module: nn.Module, input_shape: tuple[int, ...]) -> int:
    """FLOPs of one forward of ``module`` on a zero input of ``input_shape``: torch's FlopCounterMode, 2 per
    multiply-add. The one FLOP counter of latopt (inspect, train and fold reports)."""
    p = next(module.parameters(), None)
    x = torch.zeros(input_shape, dtype=p.dtype if p is not None else torch.float32,
                    device=p.device if p is not None else None)
    was = module.training
    module.eval()
    try:
        with FlopCounterMode(display=False) as fc:
            module(x)
    finally:
        module.train(was)
    return int(fc.get_total_flops())


class Cost(NamedTuple):
    """A network's FLOPs (2 per multiply-add) on one 3xRxR image, and its parameter count."""

    flops: int
    params: int


def model_cost(model: nn.Module, resolution: int) -> Cost:
    """FLOPs (2 per multiply-add) of one 3xRxR image, and the parameter count."""
    return Cost(flops=count_flops(model, (1, 3, resolution, resolution)),
                params=int(sum(q.numel() for q in model.parameters())))
