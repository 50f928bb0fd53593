"""The numeric and accuracy gates of export: nothing is written unless every one holds.

Public API::

    Gate                                          one comparison: max |diff|, scale, relative, tolerance, verdict;
                                                  ``.record()`` what export.json keeps of it (GateRecord)
    compare_outputs(name, out, ref, tol, inputs, floor=None, roundoff=1.0) -> Gate
    engine_gate(precision, out, ref, inputs, floor) -> Gate   the TensorRT engine against ONNX Runtime
    noise_floor(model, x) -> float                the network's own float32 rounding (float32 vs float64)
    fold_gates(plan, x, inputs) -> list[Gate]     the fold against the linearised σ_α network it came from
    deferred_gates(exact, shipped, resolution, x, inputs, floor) -> list[Gate]
                                                  deferred bias maps against the per-block exact folded network
    onnx_gate(model, onnx_path, x, inputs, floor=None) -> (Gate, ONNX Runtime outputs)
    check_gates(gates)                            VerificationError naming every failed gate
    checkpoint_task(meta, resolution) -> Task | None;  gate_inputs(task, resolution, n, seed) -> (x, what)
    runner_accuracy(runner, task, batch) -> float
    accuracy_gate(plan, task, accs, precision, say, gated=True) -> AccuracySection | None
    int8_gate(plan, task, int8_acc, onnx_acc, enabled, say, off=...) -> Int8Accuracy   the INT8 model against the
                                                  fp32 ONNX file
    ungated_reason(plan, task) -> str | None      why the record does not describe the shipped network (None: it does)
    require_accuracy_gate(plan, task, enabled, timing_only=False) -> str | None
                                                  refuse an export whose accuracy cannot be gated as recorded
    torch_out(model, x), ort_out(onnx_path, x), run_samples(runner, x) -> np.ndarray (float64 for torch_out)
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from latopt.data import collate, get_task, limit_task, renormalize
from latopt.errors import LatoptError, VerificationError
from latopt.export.export_record import AccuracySection, GateRecord, Int8Accuracy
from latopt.export.shipped import Plan
from latopt.files.checkpoint import CheckpointMeta, recorded_test_acc
from latopt.rewrite import as_shipped, fold_blocks, linearize, merge_spans, verify_fold
from latopt.runtime import OrtRunner

# Tolerances of the numeric gates, relative to the reference output's scale (max |reference|).
TOL_FOLD64 = 1e-9        # the fold algebra: folded vs linearised σ_α network, both computed in float64
TOL_FOLD32 = 1e-3        # the float32 folded network vs the float32 linearised one
TOL_ONNX = 1e-4          # ONNX Runtime vs PyTorch
TOL_DEFER32 = 1e-4       # the shipped float32 network with deferred bias maps vs the per-block one (float32)
TOL_ENGINE = {"fp32": 1e-3, "fp16": 2e-2}   # TensorRT engine vs ONNX Runtime
# The ONNX, engine and float32 deferred-map gates use max(tolerance, NOISE_K × floor), floor = the
# network's float32 noise (PyTorch float32 vs float64, relative, on the gate inputs): two correct float32
# runs of one network differ by a few times the floor (measured: 1.0-2.6x on folded MobileNetV2s, and 5.4x
# for ONNX Runtime's kernels on one correct fold set, which a factor of 4 refused with exit 3), so 8; a
# wrong weight moves the output by orders of magnitude more than the rounding does (1e-2 and up).
NOISE_K = 8.0
# An fp16 engine rounds every value to 11 significant bits, float32 to 24: fp16's unit roundoff (2^-11) is
# 2^13 times float32's (2^-24). Rounding errors travel through a network in proportion to the unit roundoff,
# so the engine at fp16 is about 2^13 × the float32 noise floor away from the exact output (measured on the
# CPU, PyTorch float16 against float64: 0.2-4.5 × 2^13 × the floor on MobileNetV2, deep conv stacks and
# cancelling networks; fp16 also rounds the weights, which the float32 floor does not see), so its gate uses
# NOISE_K × 2^13 × the floor where that exceeds TOL_ENGINE["fp16"]: the fixed 2e-2 refused every correct fp16
# engine of a network whose float32 floor is above ~2.5e-6 (2e-2 / 2^13). At such floors the bound is loose
# (floor 5e-6: 0.33 relative) and lets a slightly wrong engine through; the accuracy gate on the test split
# (ACC_TOL_FP16) stays the final word on an fp16 engine.
ROUNDOFF_VS_FP32 = {"fp32": 1.0, "fp16": 2.0 ** 13}
ACC_TOL_FP16 = 0.005     # accuracy gate: an fp16 engine may differ by this much more than one sample
# INT8 accuracy gate: the static INT8 model may lose this much test accuracy against the fp32 ONNX file, plus
# one test sample. fp16 keeps 11 significant bits of every value; INT8 puts every weight and activation on 256
# levels, which flips a few borderline samples, so it cannot be held to one sample as fp32 is. One point is
# the margin within which docs/evaluation.md counts a network as accurate as another (non-inferiority,
# lower end >= -1 point). What the gate is there to catch: a calibration that does not fit the data, a layer
# outside the range it was calibrated for. Only a loss is gated: INT8 may be the more accurate by chance.
ACC_TOL_INT8 = 0.01


@dataclass
class Gate:
    name: str
    max_abs: float
    scale: float
    rel: float
    tol: float
    samples: int
    inputs: str
    floor: float | None = None   # the network's float32 noise floor, where the tolerance depends on it
    roundoff: float = 1.0        # the compared output's unit roundoff over float32's (ROUNDOFF_VS_FP32): scales the floor

    @property
    def passed(self) -> bool:
        return bool(self.rel <= self.tol)

    def record(self) -> GateRecord:
        """What export.json records of this gate."""
        return GateRecord(**asdict(self), passed=self.passed)

    def line(self) -> str:
        verdict = "ok" if self.passed else "FAILED"
        scaled = "" if self.roundoff == 1.0 else f" × {self.roundoff:g} (unit roundoff vs float32)"
        tol = f"tol {self.tol:.3g}" + ("" if self.floor is None else f", float32 noise floor {self.floor:.3g}{scaled}")
        return (f"{self.name}: max|diff| {self.max_abs:.3g} on scale {self.scale:.3g} → rel {self.rel:.3g} "
                f"({tol}, {self.samples} {self.inputs} inputs) {verdict}")


def _rel_diff(out: np.ndarray, ref: np.ndarray, name: str) -> tuple[float, float]:
    """(max |out − ref|, scale = max |ref|) in float64; inf when ``out`` or ``ref`` is not finite (a network
    whose outputs are NaN or Inf on the gate inputs never passes a gate, even against itself)."""
    out64, ref64 = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    if out64.shape != ref64.shape:
        raise VerificationError(f"{name}: output shape {out64.shape} differs from reference {ref64.shape}")
    max_abs = float(np.max(np.abs(out64 - ref64))) if out64.size else 0.0
    if not (np.isfinite(out64).all() and np.isfinite(ref64).all()):
        return float("inf"), 1.0
    return max_abs, max(float(np.max(np.abs(ref64))) if ref64.size else 0.0, 1e-12)


def compare_outputs(name: str, out: np.ndarray, ref: np.ndarray, tol: float, inputs: str,
                    floor: float | None = None, roundoff: float = 1.0) -> Gate:
    """The gate ``out`` vs ``ref`` at relative tolerance ``tol``, raised to ``NOISE_K × roundoff × floor`` when
    the network's float32 noise ``floor`` is given; ``roundoff``: the unit roundoff of the precision ``out`` was
    computed at, relative to float32's (:data:`ROUNDOFF_VS_FP32`)."""
    max_abs, scale = _rel_diff(out, ref, name)
    if floor is not None:
        tol = max(tol, NOISE_K * roundoff * floor)
    return Gate(name, max_abs, scale, max_abs / scale, tol, int(np.shape(ref)[0]), inputs, floor, roundoff)


def engine_gate(precision: str, out: np.ndarray, ref: np.ndarray, inputs: str, floor: float | None) -> Gate:
    """The TensorRT engine built at ``precision`` against ONNX Runtime (float32): ``TOL_ENGINE[precision]``,
    raised to ``NOISE_K`` × the float32 noise ``floor`` scaled to the engine's precision (× 2^13 at fp16:
    :data:`ROUNDOFF_VS_FP32`)."""
    return compare_outputs(f"TensorRT ({precision}) vs ONNX Runtime", out, ref, TOL_ENGINE[precision], inputs,
                           floor, ROUNDOFF_VS_FP32[precision])


def check_gates(gates: list[Gate]) -> None:
    """VerificationError (nothing is written) when any gate failed."""
    bad = [g for g in gates if not g.passed]
    if bad:
        raise VerificationError("numeric gate failed, nothing written: " + "; ".join(g.line() for g in bad))


def torch_out(model: nn.Module, x: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return model(x).double().numpy()


def run_samples(runner: Any, x: torch.Tensor) -> np.ndarray:
    """A ``latopt.runtime`` runner's outputs, one sample of ``x`` at a time (batch-1 runners)."""
    return np.concatenate([runner.run(x[i:i + 1].numpy()) for i in range(x.shape[0])])


def ort_out(onnx_path: Path, x: torch.Tensor) -> np.ndarray:
    """ONNX Runtime outputs, one sample at a time, through the shipped runner (``latopt.runtime``)."""
    with OrtRunner(onnx_path, input_shape=(1, *x.shape[1:])) as runner:
        return run_samples(runner, x)


def noise_floor(model: nn.Module, x: torch.Tensor) -> float:
    """The float32 rounding of ``model`` alone: max |float32 − float64 output| / max |float64 output| on
    ``x`` (the same network and weights, run in float64)."""
    max_abs, scale = _rel_diff(torch_out(model, x), torch_out(copy.deepcopy(model).double().eval(), x.double()),
                               "float64 twin")
    return max_abs / scale


def onnx_gate(model: nn.Module, onnx_path: Path, x: torch.Tensor, inputs: str,
              floor: float | None = None) -> tuple[Gate, np.ndarray]:
    """(ONNX Runtime vs PyTorch ``model`` gate, the ONNX Runtime outputs) at max(``TOL_ONNX``, ``NOISE_K`` ×
    the network's float32 noise floor); ``floor`` is measured here unless given."""
    ort = ort_out(onnx_path, x)
    floor = noise_floor(model, x) if floor is None else floor
    return compare_outputs("ONNX Runtime vs PyTorch folded", ort, torch_out(model, x), TOL_ONNX, inputs, floor), ort


def fold_gates(p: Plan, x: torch.Tensor, inputs: str) -> list[Gate]:
    """Two checks of the fold against ``linearize(source, plan)``: the algebra alone (the fold computed
    and run in float64) and the float32 network as exported (float32 rounding, amplified by a deep
    linearised network, is what separates the two tolerances)."""
    if p.source is None or not p.plan:
        return []
    res = (p.resolution, p.resolution)
    src64 = copy.deepcopy(p.source).double().eval()
    if p.mode == "paper":
        # a constant bias is wrong on the border ring by design (repaired by post-fold fine-tuning), and
        # that error spreads through the network: check each folded block alone, away from its border
        chk = verify_fold(linearize(src64, p.plan).eval(), fold_blocks(src64, p.plan, mode="paper", input_size=res),
                          res, batch=2, seed=0)
        worst = chk.worst_interior()
        return [Gate("fold algebra per block, away from the border (float64, paper mode)",
                     worst.max_abs_interior, worst.ref_max, worst.max_rel_interior, TOL_FOLD64, 2, "random normal")]
    ref64 = torch_out(linearize(src64, p.plan).eval(), x.double())
    out64 = torch_out(fold_blocks(src64, p.plan, mode=p.mode, input_size=res).eval(), x.double())
    ref32 = torch_out(linearize(p.source, p.plan).eval(), x)
    # the network that is shipped, when it is the fold itself (folded here, or folded and not fine-tuned);
    # fine-tuned weights have no unfolded twin, so then the fold is recomputed from the pre-fold network
    shipped = not p.asis or p.meta.finetuned is False
    folded32 = p.folded if shipped else fold_blocks(p.source, p.plan, mode=p.mode, input_size=res).eval()
    name32 = "shipped folded network" if shipped else "folded (float32, recomputed)"
    out32 = torch_out(folded32, x)
    return [compare_outputs("fold algebra (float64) vs linearised σ_α network", out64, ref64, TOL_FOLD64, inputs),
            compare_outputs(f"{name32} vs linearised σ_α network", out32, ref32, TOL_FOLD32, inputs)]


def deferred_gates(exact: nn.Module, shipped: nn.Module, resolution: int, x: torch.Tensor, inputs: str,
                   floor: float | None, *, spans: Sequence[Sequence[int]] = (), deferred: bool = True) -> list[Gate]:
    """The shipped rewrite of the per-block ``exact`` folded network: deferred bias maps (one map per chain of
    exact-mode ``full`` folds; ``deferred``) and merged ``spans`` (one convolution each) — recomputed and run
    in float64 (the algebra, ``TOL_FOLD64``), and the ``shipped`` float32 copy (``TOL_DEFER32``, raised to
    ``NOISE_K`` × the float32 noise ``floor``: two float32 runs of one function)."""
    exact64 = copy.deepcopy(exact).double().eval()
    size, merged = (resolution, resolution), [(int(s[0]), int(s[1])) for s in spans]
    deferred64 = (as_shipped(exact64, spans=merged, input_size=size)[0] if deferred
                  else merge_spans(exact64, merged, size).eval())
    x64 = x.double()
    name = " and ".join(n for n, on in (("merged spans", bool(merged)), ("deferred bias maps", deferred)) if on)
    name += " vs exact folded network"
    return [compare_outputs(f"{name} (float64)", torch_out(deferred64, x64), torch_out(exact64, x64), TOL_FOLD64,
                            inputs),
            compare_outputs(f"{name} (float32, shipped)", torch_out(shipped, x), torch_out(exact, x), TOL_DEFER32,
                            inputs, floor)]


def checkpoint_task(meta: CheckpointMeta, resolution: int) -> Any | None:
    """The task a checkpoint was trained on (as ``latopt train`` records it in ``meta``), or None."""
    spec = meta.task
    if not spec:
        return None
    seed, cap = meta.split_seed or 0, meta.max_samples
    try:
        task = renormalize(get_task(spec, resolution, seed), meta.normalize)
    except LatoptError as e:
        raise LatoptError(f"cannot load the checkpoint's task {spec!r} for the numeric gate: {e}") from None
    return limit_task(task, cap)


def gate_inputs(task: Any | None, resolution: int, n: int, seed: int) -> tuple[torch.Tensor, str]:
    """Real test samples of the checkpoint's task when it names one, else seeded random inputs."""
    if task is not None:
        xs = [task.test[i][0] for i in range(min(n, len(task.test)))]
        return torch.stack(xs).float(), f"test samples of {task.name}"
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, resolution, resolution, generator=g), "random normal"


def runner_correct(runner: Any, task: Any, batch: int) -> np.ndarray:
    """Per test sample of the task (in order), whether a ``latopt.runtime`` runner (ONNX Runtime / TensorRT)
    predicts its label: a boolean vector, ``batch`` samples per call."""
    loader = torch.utils.data.DataLoader(task.test, batch_size=batch, collate_fn=collate)  # batched tasks too
    hits = [np.asarray(runner.run(xb.float().numpy())).argmax(1) == yb.numpy() for xb, yb in loader]
    if not hits:
        raise LatoptError(f"the test split of {task.name} is empty: cannot measure the exported accuracy")
    return np.concatenate(hits)


def runner_accuracy(runner: Any, task: Any, batch: int) -> float:
    """Top-1 accuracy of a runner on the task's whole test split (:func:`runner_correct`)."""
    return float(runner_correct(runner, task, batch).mean())


MIN_GATE_SAMPLES = 30   # a test split smaller than this cannot gate anything (one sample = 1/n of tolerance)
GATE_OFF = "--no-accuracy-gate"   # gate_accuracy=False: ship unchecked, under the usual file names
TIMING_ONLY = "--timing-only"     # timing_only=True: a timing-only artefact, its files named so (model.timing-only.*)


def ungated_reason(p: Plan, task: Any | None) -> str | None:
    """Why the shipped network's test accuracy cannot be gated against the one the checkpoint records (None: it
    can). The one rule: the record must describe the network that is shipped, at the size it is shipped at. Not
    so when the checkpoint names no task, its test split is smaller than :data:`MIN_GATE_SAMPLES`
    (``meta.max_samples`` edited to 1 gave a tolerance of 100 %), export folds here (``--fold`` / ``--plan``:
    the fold is not fine-tuned, so the record is the unfolded network's; ``--fold all`` of a base shipped ~10 %),
    the checkpoint records no test accuracy, records no resolution for it, or records another one than the
    export's (``--resolution 8`` of a base trained at 32 px shipped 10 %; for a folded checkpoint, exported at
    its fold's size, an edited ``meta.resolution`` alone once switched the gate off). None of it may hinge on
    fields a forger can edit (the SHA-256 is recomputed with them): each edit makes the export refused."""
    if task is None:
        return "it names no task (meta.task), so its exported accuracy cannot be measured; re-create it with latopt train / fold"
    if len(task.test) < MIN_GATE_SAMPLES:
        return (f"its test split has {len(task.test)} sample(s) (meta.max_samples {p.meta.max_samples}), "
                f"too few to gate anything (at least {MIN_GATE_SAMPLES}); re-create it with latopt train / fold")
    if not p.asis:
        return (f"export folds {len(p.plan)} block(s) here without fine-tuning, so the accuracy the checkpoint records "
                "is the unfolded network's, not the shipped one's (latopt fold / search fold, fine-tune and record it)")
    if recorded_test_acc(p.meta) is None:
        return "it records no test accuracy to check the exported one against; re-create it with latopt train / fold"
    rec_res = p.meta.resolution
    if rec_res is None:
        return (f"it records no resolution for its test accuracy (meta.resolution), so the accuracy at {p.resolution} "
                "px cannot be held to it; re-create it with latopt train / fold")
    if rec_res != p.resolution:
        return (f"exported at {p.resolution} px, its test accuracy was recorded at {rec_res!r} px (export it at "
                "that resolution, or train at this one)")
    return None


def require_accuracy_gate(p: Plan, task: Any | None, enabled: bool, *, timing_only: bool = False) -> str | None:
    """Refuse (one line, before anything is written) an export whose accuracy cannot be gated as recorded
    (:func:`ungated_reason`) unless the gate is off: ``enabled=False`` (``--no-accuracy-gate``: shipped unchecked)
    or ``timing_only`` (``--timing-only``: a timing-only artefact, named so). Returns None when the export is
    gated, else why it is not (export.json's ``accuracy_gate_reason``; the notes say it too)."""
    why = ungated_reason(p, task)
    if enabled and not timing_only:
        if why is None:
            return None
        raise LatoptError(f"the export cannot be accuracy-gated: {why}; ask for a timing-only artefact (its files "
                          "named model.timing-only.*, recorded as not gated) to time it, or turn the accuracy gate "
                          "off to ship it unchecked (said in export.json and REPORT.md)", param="gate_accuracy")
    flag = TIMING_ONLY if timing_only else GATE_OFF
    if timing_only:
        p.notes.append("exported with --timing-only: a timing-only artefact for measuring latency, not a deployable "
                       "model; its accuracy is reported, not gated" + (f", and could not be: {why}" if why else ""))
    else:
        p.notes.append(f"exported with --no-accuracy-gate: not gated, {why}" if why else
                       "exported with --no-accuracy-gate: the accuracy is reported, not gated")
    return f"{flag}: {why}" if why else f"{flag}: the accuracy gate was turned off"


def accuracy_gate(p: Plan, task: Any | None, accs: dict[str, float], precision: str,
                  say: Callable[[str], None], *, gated: bool = True) -> AccuracySection | None:
    """The exported artefacts' test accuracy beside the one the checkpoint records. ``gated`` (what
    :func:`require_accuracy_gate` allowed: the record describes the shipped network): a difference above one
    test sample is a VerificationError; otherwise the accuracy is reported only."""
    if task is None:
        p.notes.append("the checkpoint names no task: exported accuracy not measured (no accuracy gate)")
        return None
    n = len(task.test)
    rec = recorded_test_acc(p.meta)
    shown = ", ".join(f"{k} {v:.4f}" for k, v in accs.items())
    said = "" if rec is None else f"; recorded {rec[0]:.4f} ({rec[1]})"
    record = AccuracySection(task=task.name, samples=n, test_acc=accs["onnx"], engine_test_acc=accs.get("engine"),
                             recorded=None if rec is None else rec[0], recorded_at=None if rec is None else rec[1],
                             gated=gated, tolerance=1.0 / n)
    if not gated:
        say(f"test accuracy on {task.name} ({n} samples): {shown}{said}; not gated")
        return record
    why = ungated_reason(p, task)
    if why is not None or rec is None:   # require_accuracy_gate refused it before any work
        raise VerificationError(f"accuracy gate asked of an export it cannot gate: {why}")
    recorded, where = rec
    say(f"test accuracy on {task.name} ({n} samples): {shown}{said}")
    tol = {"onnx": 1.0 / n, "engine": 1.0 / n + (ACC_TOL_FP16 if precision == "fp16" else 0.0)}
    bad = [f"{k} {v:.4f}" for k, v in accs.items() if abs(v - recorded) > tol[k] + 1e-12]
    if bad:
        raise VerificationError(f"accuracy gate failed, nothing written: test accuracy {', '.join(bad)} on "
                                f"{task.name} differs from the checkpoint's recorded {recorded:.4f} ({where}) by more "
                                f"than one test sample (1/{n}); the weights are not the ones that were evaluated")
    return record


def int8_gate(p: Plan, task: Any | None, acc: float | None, onnx_acc: float | None, enabled: bool,
              say: Callable[[str], None], *, off: str = GATE_OFF) -> Int8Accuracy:
    """The INT8 model's test accuracy against the fp32 ONNX file's (which :func:`accuracy_gate` ties to the
    checkpoint's record): lower by more than :data:`ACC_TOL_INT8` + one test sample is a VerificationError.
    Not gated, and said in the notes, when the checkpoint names no task (nothing to measure it on) or with
    ``enabled=False`` (the export is not accuracy-gated: ``off`` says by which flag, ``--no-accuracy-gate`` or
    ``--timing-only``; measured and reported only)."""
    if task is None or acc is None or onnx_acc is None:
        p.notes.append("INT8 model not accuracy-gated: the checkpoint names no task (its calibration inputs were "
                       "random, not data)")
        return Int8Accuracy(test_acc=None, onnx_test_acc=None, samples=None, tolerance=None,
                            tolerance_base=ACC_TOL_INT8, gated=False)
    n = len(task.test)
    tol = ACC_TOL_INT8 + 1.0 / n
    record = Int8Accuracy(test_acc=acc, onnx_test_acc=onnx_acc, samples=n, tolerance=tol,
                          tolerance_base=ACC_TOL_INT8, gated=enabled)
    say(f"INT8 test accuracy on {task.name} ({n} samples): {acc:.4f} vs ONNX fp32 {onnx_acc:.4f}"
        + ("" if enabled else f"; not gated: {off}"))
    if not enabled:
        p.notes.append(f"exported with {off}: the INT8 accuracy is reported beside the fp32 ONNX one, not gated")
        return record
    if onnx_acc - acc > tol + 1e-12:
        raise VerificationError(f"INT8 accuracy gate failed, nothing written: the INT8 model's test accuracy "
                                f"{acc:.4f} on {task.name} is {onnx_acc - acc:.4f} below the fp32 ONNX model's "
                                f"{onnx_acc:.4f}, more than {ACC_TOL_INT8:g} + one test sample (1/{n}); export at "
                                "precision fp32", param="precision")
    return record
