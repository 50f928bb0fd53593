"""The vocabularies latopt's options, files and modules share: one place for each list of names.

Each is a tuple of the accepted values (what ``choices=`` and error messages list) and a ``Literal`` of
the same values (what the validated config models use as field types). Keep them in step: a new value is
added here once and every parser, validator and message picks it up.
"""

from __future__ import annotations

from typing import Literal, get_args

# the fold variants: their names and one record each (what it removes, which blocks it applies to, its module, its
# algebra) are in latopt.nets.variants, where a new variant is added
from latopt.nets.variants import FoldVariant

# Layer Folding
Granularity = Literal["block", "activation"]      # one α per MBConv block, or one per activation
FoldMode = Literal["exact", "paper"]              # exact: bias map for one input size; paper: constant bias
UnfoldedAlpha = Literal["zero", "keep"]           # α of blocks left unfolded: back to 0, or kept
ActKind = Literal["relu", "relu6", "hardswish", "silu"]  # activations σ_α can replace (latopt.nets.layers.ACTIVATIONS)

# training
Optimizer = Literal["sgd", "adamw"]
Schedule = Literal["cosine", "step", "constant"]
Amp = Literal["none", "bf16", "fp16"]             # mixed precision of training (autocast; fp16 with a GradScaler)

# search
Sampler = Literal["auto", "tpe", "nsga2", "random", "grid"]   # auto: a λ_c grid for few trials, else TPE
Objective = Literal["latency", "depth"]           # second objective: LUT latency or non-linear layers left
Costs = Literal["lut", "uniform"]                 # c_l from the device's LUT, or 1 for every block
SearchMethod = Literal["optuna", "dp"]            # Layer Folding's Optuna study, or the budgeted DP (latopt.dp)
Importance = Literal["proxy", "finetune", "uniform"]  # the DP's loss per (block, variant) (latopt.dp.importance)

# latency and export
Precision = Literal["fp32", "fp16", "int8"]    # int8: ONNX Runtime static INT8 on the CPU (latopt.latency.quantize)
Clock = Literal["wall", "thread"]
ExportFormat = Literal["onnx", "engine", "all"]
BiasMaps = Literal["deferred", "per-block"]       # exact folds exported with one bias map per chain, or per block
LutVariant = Literal["none", FoldVariant]         # a LUT's variants: "none" = the block as it is

GRANULARITIES: tuple[str, ...] = get_args(Granularity)
FOLD_MODES: tuple[str, ...] = get_args(FoldMode)
FOLD_VARIANTS: tuple[str, ...] = get_args(FoldVariant)
LUT_VARIANTS: tuple[str, ...] = get_args(LutVariant)  # "none", then FOLD_VARIANTS
SPAN_FOLD_MODE = "exact"  # merged spans are exact-mode rewrites: export merges them in this fold mode only
UNFOLDED_ALPHA: tuple[str, ...] = get_args(UnfoldedAlpha)
ACT_KINDS: tuple[str, ...] = get_args(ActKind)
OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
SCHEDULES: tuple[str, ...] = get_args(Schedule)
AMP_MODES: tuple[str, ...] = get_args(Amp)
TRAIN_DEVICES = ("auto", "cpu", "cuda", "cuda:N")  # train.device (N: a GPU index)
SAMPLERS: tuple[str, ...] = get_args(Sampler)
OBJECTIVES: tuple[str, ...] = get_args(Objective)
COSTS: tuple[str, ...] = get_args(Costs)
SEARCH_METHODS: tuple[str, ...] = get_args(SearchMethod)
IMPORTANCE_METHODS: tuple[str, ...] = get_args(Importance)
PRECISIONS: tuple[str, ...] = get_args(Precision)
EXPORT_FORMATS: tuple[str, ...] = get_args(ExportFormat)
BIAS_MAPS: tuple[str, ...] = get_args(BiasMaps)

# models (timm names; torchvision's MobileNetV2 takes a width: torchvision/mobilenet_v2?width=0.75)
TIMM_MODELS: tuple[str, ...] = (
    *(f"mobilenetv2_{w}" for w in ("035", "050", "075", "100", "140")),
    *(f"efficientnet_lite{i}" for i in range(5)),
    *(f"tf_efficientnet_lite{i}" for i in range(5)),
)
TORCHVISION_MODEL = "torchvision/mobilenet_v2"
SUPPORTED_MODELS: tuple[str, ...] = (*TIMM_MODELS, TORCHVISION_MODEL)

# the validation split cut in two (latopt.data.split_validation): this share of it confirms a search's
# recommendation (latopt.search._confirm) and nothing else reads it, a base's choice of its best epoch included
CONFIRM_FRACTION = 0.5

# limits of numeric checks
RESOLUTION_RANGE = (8, 1024)  # input resolution R (R x R): config, export, inspect, profile and checkpoints
MAX_SPLIT_SEED = 2**32 - 1   # data.split_seed, config and checkpoints (numpy's and scikit-learn's seeds are 32-bit)
MAX_CLASSES = 100_000        # classifier outputs: checkpoints, --num-classes, every model latopt builds
FOLD_CHECK_TOLERANCE = 1e-4  # `latopt inspect --check-fold`: largest relative error of a fold with random BN
MAX_THREADS = 1024           # intra-op threads (config `threads`, device profiles, --threads): 10000 exhausted the OS
MAX_BATCH = 4096             # a device profile's batch (profiling builds every block at it)
MAX_BUDGET_ROUNDS = 10       # dp.budget_rounds: plans the DP's budget loop measures at most (latopt.dp.budgetloop)
MAX_REFINE = 10              # dp.refine: candidates fine-tuned again, longer, at most
REFINE_REACH = 2.0          # a candidate is within reach of the constraint when its drop is at most this times it
MAX_GATE_SAMPLES = 1024      # `latopt export --samples`: inputs of the numeric gates (held in memory at once)

# the named input normalisations (data.normalize; latopt import --normalize): per-channel (mean, std) of [0, 1]
# pixels; "task" (each task's own) is the default
NORMALIZE_NAMES: dict[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = {
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),    # timm's and torchvision's ImageNet weights
    "inception": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),               # [-1, 1]: TensorFlow ports (tf_*, the Lite family)
}
