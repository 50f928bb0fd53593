"""Export: a folded checkpoint → ONNX (+ TensorRT engine), numeric gates, measured latency, report.

``latopt export --checkpoint CKPT --device DEVICE [--format onnx|engine|all] [--precision fp32|fp16]
[--fold PLAN] [--lut FILE] [--resolution R] [--samples N] [--out DIR]``

What it does, in order (nothing is written unless every gate passes):

1. Load the checkpoint (``weights_only``, SHA-256 verified). A folded checkpoint (``arch["fold"]``, its
   plan possibly empty) is exported as it is; an exact-mode one only at the input size it was folded
   for (checked first). An unfolded one is exported as it is unless ``--fold`` asks for a fold (``all``,
   ``auto`` = every block whose fold lowers the latency on this device according to its LUT, or indices
   ``1,3,5``), computed here in ``--mode`` (exact by default) at the export resolution.
2. Fold gate (only when export folds, or for a folded checkpoint's own plan): the folded network against the unfolded σ_α network it came from with the folded
   activations set to α = 1 (``linearize``), on real samples of the task when the checkpoint names one
   (random inputs otherwise; the report says which). For a folded checkpoint that was fine-tuned after
   folding, the fold is recomputed from its pre-fold checkpoint and checked the same way (the fine-tuned
   weights no longer have an unfolded twin).
3. ONNX (TorchScript exporter, opset 17, dynamic batch, ``onnx.checker.check_model(full_check=True)``),
   node names prefixed with the block index they come from (``b03/...``); ONNX Runtime against the
   PyTorch folded model. A TensorRT engine (``--format engine|all``) is built through the profiler's
   TensorRT backend (timing cache reused), loaded by the shipped runner and checked against ONNX
   Runtime (looser for fp16). Each of these tolerances is at least ``NOISE_K`` × the network's own
   float32 noise floor (PyTorch float32 vs the same network in float64 on the gate inputs): a deep
   network whose float32 rounding alone exceeds the base tolerance is not refused for it.
4. Accuracy on the task's whole test split, as ONNX (and engine). A checkpoint exported as it is (export
   folded nothing) must reproduce the test accuracy it records (``latopt.models.recorded_test_acc``:
   ``meta.acc.finetuned`` of a folded.pt, ``meta.test_acc`` of a base.pt) within one test sample, or
   export refuses (VerificationError; fp16 engines get ``ACC_TOL_FP16`` more). When export folds, the
   fold gates apply and the accuracy is reported beside the recorded one.
5. Latency: the as-is and the folded network measured end to end on the device in one interleaved run;
   speed-up with spread; the LUT's prediction beside the measurement when a LUT exists.
6. ``export.json`` + ``REPORT.md`` (+ ``model.onnx``, ``model.engine``) in DIR, written atomically.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from torch import nn

from latopt.artifacts import atomic_dir, write_json_atomic, write_text_atomic
from latopt.blocks import find_blocks
from latopt.config import check_resolution
from latopt.constants import MAX_GATE_SAMPLES
from latopt.data import get_task, limit_task
from latopt.errors import LatoptError, VerificationError
from latopt.fold import fold_blocks, fold_spec, linearize, normalize_plan, plain_activations_, verify_fold
from latopt.latency.backends import get_backend
from latopt.latency.backends.tensorrt import build_engine
from latopt.latency.devices import load_device
from latopt.latency.lut import costs, default_lut_path, load_lut, predict
from latopt.latency.onnx_io import export_onnx
from latopt.latency.profiler import measure_networks
from latopt.models import build_model, load_checkpoint, recorded_test_acc
from latopt.runtime import OrtRunner, TrtEngineRunner

EXPORT_SCHEMA = "latopt.export/1"
# Tolerances of the numeric gates, relative to the reference output's scale (max |reference|).
TOL_FOLD64 = 1e-9        # the fold algebra: folded vs linearised σ_α network, both computed in float64
TOL_FOLD32 = 1e-3        # the float32 folded network vs the float32 linearised one
TOL_ONNX = 1e-4          # ONNX Runtime vs PyTorch
TOL_ENGINE = {"fp32": 1e-3, "fp16": 2e-2}   # TensorRT engine vs ONNX Runtime
# The ONNX and engine gates use max(tolerance, NOISE_K × floor), floor = the network's float32 noise
# (PyTorch float32 vs float64, relative, on the gate inputs): two correct float32 runs of one network
# differ by up to about twice the floor (measured: 1.0-2.6x on folded MobileNetV2s), so 4 leaves room
# without hiding a wrong weight, which moves the output by far more than the rounding does.
NOISE_K = 4.0
ACC_TOL_FP16 = 0.005     # accuracy gate: an fp16 engine may differ by this much more than one sample


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

    @property
    def passed(self) -> bool:
        return bool(self.rel <= self.tol)

    def line(self) -> str:
        verdict = "ok" if self.passed else "FAILED"
        tol = f"tol {self.tol:.3g}" + ("" if self.floor is None else f", float32 noise floor {self.floor:.3g}")
        return (f"{self.name}: max|diff| {self.max_abs:.3g} on scale {self.scale:.3g} → rel {self.rel:.3g} "
                f"({tol}, {self.samples} {self.inputs} inputs) {verdict}")


def _rel_diff(out: np.ndarray, ref: np.ndarray, name: str) -> tuple[float, float]:
    """(max |out − ref|, scale = max |ref|) in float64; inf when ``out`` is not finite."""
    out64, ref64 = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    if out64.shape != ref64.shape:
        raise VerificationError(f"{name}: output shape {out64.shape} differs from reference {ref64.shape}")
    max_abs = float(np.max(np.abs(out64 - ref64))) if out64.size else 0.0
    if not np.isfinite(out64).all():
        max_abs = float("inf")
    return max_abs, max(float(np.max(np.abs(ref64))) if ref64.size else 0.0, 1e-12)


def compare_outputs(name: str, out: np.ndarray, ref: np.ndarray, tol: float, inputs: str,
                    floor: float | None = None) -> Gate:
    """The gate ``out`` vs ``ref`` at relative tolerance ``tol``, raised to ``NOISE_K × floor`` when the
    network's float32 noise ``floor`` is given."""
    max_abs, scale = _rel_diff(out, ref, name)
    if floor is not None:
        tol = max(tol, NOISE_K * floor)
    return Gate(name, max_abs, scale, max_abs / scale, tol, int(np.shape(ref)[0]), inputs, floor)


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


def _check(gates: list[Gate]) -> None:
    bad = [g for g in gates if not g.passed]
    if bad:
        raise VerificationError("numeric gate failed, nothing written: " + "; ".join(g.line() for g in bad))


@dataclass
class Plan:
    """What is exported: the folded network, the unfolded σ_α network it came from, and the fold plan."""

    folded: nn.Module
    source: nn.Module | None   # the unfolded σ_α network the fold was computed from (None: no fold gate)
    arch: dict[str, Any]
    meta: dict[str, Any]
    plan: dict[int, str]
    mode: str
    resolution: int
    notes: list[str] = field(default_factory=list)
    asis: bool = False         # export folded nothing: the checkpoint's own network is what is shipped


def _asis_network(arch: dict[str, Any]) -> nn.Module:
    return build_model(arch["model"], num_classes=int(arch["num_classes"])).eval()


def _resolution(arch: dict[str, Any], meta: dict[str, Any], override: int | None) -> int:
    if override is not None:
        return check_resolution(override, "--resolution")
    fold = arch.get("fold") or {}
    if fold.get("input_size"):
        return check_resolution(fold["input_size"][0], "the checkpoint's fold input size")
    if meta.get("resolution") is not None:
        return check_resolution(meta["resolution"], "the checkpoint's meta resolution")
    config = meta.get("config")
    data = config.get("data") if isinstance(config, dict) else None
    if isinstance(data, dict) and data.get("resolution") is not None:
        return check_resolution(data["resolution"], "the checkpoint's config data.resolution")
    raise LatoptError("the checkpoint does not record its input resolution; pass --resolution R")


def check_fold_size(checkpoint: str | Path, fspec: dict[str, Any], res: int) -> None:
    """An exact-mode fold holds bias maps for one input size: refuse another ``res`` up front."""
    size = fspec.get("input_size")
    if fspec["mode"] != "exact" or not fspec["plan"] or size is None or list(size) == [res, res]:
        return
    h, w = size
    raise LatoptError(f"{checkpoint} was folded in exact mode for {h}x{w} inputs (its bias maps hold for that "
                      f"size only), so it cannot be exported at --resolution {res}: export it at {h}, or fold again "
                      f"at {res} (latopt fold with data.resolution: {res}) or in paper mode (fold.mode: paper), "
                      "which works at any input size")


def auto_plan(lut: Any) -> list[int]:
    """Blocks whose full fold lowers the latency on the LUT's device (c_l > 0)."""

    return sorted(i for i, c in costs(lut).items() if c > 0)


def parse_fold_spec(spec: str, lut: Any | None) -> list[int] | str:
    spec = spec.strip()
    if spec == "none":
        return []
    if spec == "all":
        return "all"
    if spec == "auto":
        if lut is None:
            raise LatoptError("--fold auto needs the device's LUT: run `latopt profile` first or pass --lut FILE")
        return auto_plan(lut)
    try:
        blocks = [int(s) for s in spec.split(",") if s.strip()]
    except ValueError:
        blocks = []
    if not blocks:
        raise LatoptError(f"--fold {spec!r}: give 'all', 'none', 'auto' or block indices like 1,3,5")
    return blocks


def build_plan(checkpoint: str | Path, loaded: tuple[nn.Module, dict[str, Any], dict[str, Any]], *,
               fold: str | None, lut: Any | None, res: int, mode: str = "exact") -> Plan:
    """What to export from the ``loaded`` checkpoint (``load_checkpoint``'s result) at resolution ``res``.

    ``fold`` None: the checkpoint as it is (folded or not); else a ``--fold`` spec for an unfolded one."""
    model, arch, meta = loaded
    model.eval()
    fspec = arch.get("fold")
    if fspec is not None:
        if fold is not None:
            raise LatoptError(f"{checkpoint} is already folded; drop --fold (it applies to unfolded checkpoints)")
        check_fold_size(checkpoint, fspec, res)
    source_model = copy.deepcopy(model) if fspec is None else None
    n_plain = plain_activations_(model)  # σ_α with α = 0 is σ: export the plain activation
    notes: list[str] = []
    if n_plain:
        notes.append(f"{n_plain} σ_α activations with α = 0 exported as the plain activation they equal")
    if fspec is not None:
        plan = {int(k): v for k, v in fspec["plan"].items()}
        if not plan:
            notes.append("the checkpoint's fold folded no block (its plan is empty): exported as it is")
            return Plan(model, None, arch, meta, {}, fspec["mode"], res, notes, asis=True)
        source = None
        # the σ_α network the fold came from: recorded by `latopt fold`, or beside the checkpoint
        recorded = meta.get("prefold_checkpoint")
        candidates = [recorded if isinstance(recorded, str) else None, Path(checkpoint).parent / "prefold.pt"]
        prefold = next((str(c) for c in candidates if c and Path(c).is_file()), None)
        if prefold:
            source = load_checkpoint(prefold)[0].eval()
            if meta.get("finetuned", True):
                notes.append("the fold gates check the fold recomputed from the pre-fold checkpoint "
                             f"({prefold}); the exported weights were fine-tuned after folding")
        else:
            notes.append("no pre-fold checkpoint recorded or found: fold gates skipped (ONNX gate still applies)")
        return Plan(model, source, arch, meta, plan, fspec["mode"], res, notes, asis=True)
    spec = parse_fold_spec("none" if fold is None else fold, lut)
    if spec == []:  # export the network as it is (no fold gate)
        if fold is None:
            notes.append("an unfolded checkpoint and no --fold: the network is exported as it is")
        elif fold.strip() == "auto":
            notes.append("--fold auto: no block's fold pays on this device per the LUT; exported as it is")
        else:
            notes.append("nothing folded (--fold none): the network is exported as it is")
        return Plan(model, None, arch, meta, {}, "none", res, notes, asis=True)
    plan = normalize_plan(model, spec)
    if not plan:
        raise LatoptError("the fold plan is empty: nothing to fold (check --fold and the LUT's c_l)")
    if mode not in ("exact", "paper"):
        raise LatoptError(f"--mode {mode!r}: choose exact or paper")
    folded = fold_blocks(model, plan, mode=mode, input_size=(res, res)).eval()
    if mode == "paper":
        notes.append("paper mode: a constant bias per folded block, wrong on the border ring by design "
                     "(fine-tune after folding to repair it); the fold gate checks each block away from its border")
    new_arch = dict(arch)
    new_arch["fold"] = fold_spec(folded)
    return Plan(folded, source_model, new_arch, meta, plan, mode, res, notes)


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
        worst = max(chk["per_block"].values(), key=lambda e: e["max_rel_interior"])
        return [Gate("fold algebra per block, away from the border (float64, paper mode)",
                     worst["max_abs_interior"], worst["ref_max"], worst["max_rel_interior"], TOL_FOLD64, 2,
                     "random normal")]
    ref64 = torch_out(linearize(src64, p.plan).eval(), x.double())
    out64 = torch_out(fold_blocks(src64, p.plan, mode=p.mode, input_size=res).eval(), x.double())
    ref32 = torch_out(linearize(p.source, p.plan).eval(), x)
    out32 = torch_out(fold_blocks(p.source, p.plan, mode=p.mode, input_size=res).eval(), x)
    return [compare_outputs("fold algebra (float64) vs linearised σ_α network", out64, ref64, TOL_FOLD64, inputs),
            compare_outputs("folded (float32) vs linearised σ_α network", out32, ref32, TOL_FOLD32, inputs)]


def checkpoint_task(meta: dict[str, Any], resolution: int) -> Any | None:
    """The task a checkpoint was trained on (as ``latopt train`` records it in ``meta``), or None."""
    spec = meta.get("task")
    if not spec:
        return None

    seed, cap = meta.get("split_seed") or 0, meta.get("max_samples")
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (seed, 1 if cap is None else cap))
    if not isinstance(spec, str) or not ints or (cap is not None and cap < 1):
        raise LatoptError(f"the checkpoint's data record is malformed (task {spec!r}, split_seed {seed!r}, "
                          f"max_samples {cap!r}); re-create the checkpoint")
    try:
        task = get_task(spec, resolution, seed)
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


def torch_out(model: nn.Module, x: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return model(x).double().numpy()


def ort_out(onnx_path: Path, x: torch.Tensor) -> np.ndarray:
    """ONNX Runtime outputs, one sample at a time, through the shipped runner (``latopt.runtime``)."""
    with OrtRunner(onnx_path, input_shape=(1, *x.shape[1:])) as runner:
        return _run_samples(runner, x)


def tag_block_nodes(onnx_path: Path, model: nn.Module, plan: dict[int, str]) -> None:
    """Prefix every node that comes from block i with ``bII/`` and record the block map in metadata."""


    m = onnx.load(str(onnx_path))
    blocks = find_blocks(model)
    # Scoped node names carry the module path as "/blocks/blocks.1/blocks.1.0/..." or "/features.2/...".
    keys = sorted(((b.path, b.index) for b in blocks), key=lambda t: -len(t[0]))
    for node in m.graph.node:
        for path, idx in keys:
            if f"/{path}/" in node.name + "/" or f"/{path.replace('.', '/')}/" in node.name + "/":
                node.name = f"b{idx:02d}{node.name if node.name.startswith('/') else '/' + node.name}"
                break
    info = {str(b.index): {"path": b.path, "folded": plan.get(b.index)} for b in blocks}
    entry = m.metadata_props.add()
    entry.key, entry.value = "latopt.blocks", json.dumps(info)
    onnx.save(m, str(onnx_path))
    onnx.checker.check_model(str(onnx_path), full_check=True)


def _load_lut(path: str | None, arch: dict[str, Any], device: Any, resolution: int) -> Any | None:

    model_name = arch["model"]
    if path:
        return load_lut(path, model=model_name, resolution=resolution)
    p = default_lut_path(device.name, model_name, resolution, device.batch)
    return load_lut(p, model=model_name, resolution=resolution) if Path(p).is_file() else None


def export(checkpoint: str | Path, device_name: str, out: str | Path, *, fmt: str = "onnx",
           precision: str | None = None, fold: str | None = None, lut_path: str | None = None,
           resolution: int | None = None, samples: int = 32, seed: int = 0, measure: bool = True,
           progress: bool = True, mode: str = "exact") -> dict[str, Any]:
    """The whole export; returns the export.json dict. Raises LatoptError / VerificationError.

    ``fold`` None exports the checkpoint as it is (never folds it); see the module docstring."""

    def say(msg: str) -> None:
        if progress:
            print(f"[export] {msg}", flush=True)

    if fmt not in ("onnx", "engine", "all"):
        raise LatoptError(f"--format {fmt!r}: choose onnx, engine or all")
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= MAX_GATE_SAMPLES:
        raise LatoptError(f"--samples {samples}: the numeric gates need 1 .. {MAX_GATE_SAMPLES} inputs (default 32)")
    if resolution is not None:
        check_resolution(resolution, "--resolution")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise LatoptError(f"output directory {out} exists and is a file; choose another --out")
    device = load_device(device_name)
    precision = precision or device.precision
    if precision not in ("fp32", "fp16"):
        raise LatoptError(f"--precision {precision!r}: choose fp32 or fp16")
    trt_backend = None
    if fmt in ("engine", "all"):
        trt_backend = _tensorrt_backend(device, precision)   # fails early: nothing written yet
    if not Path(checkpoint).is_file():
        raise LatoptError(f"checkpoint {checkpoint} does not exist")

    say(f"loading {checkpoint}")
    loaded = load_checkpoint(checkpoint)
    recorded_test_acc(loaded[2])  # a malformed record is refused before any work
    res = _resolution(loaded[1], loaded[2], resolution)
    lut = _load_lut(lut_path, loaded[1], device, res)
    p = build_plan(checkpoint, loaded, fold=fold, lut=lut, res=res, mode=mode)
    task = checkpoint_task(p.meta, p.resolution)
    x, inputs = gate_inputs(task, p.resolution, samples, seed)
    gates = fold_gates(p, x, inputs)
    for g in gates:
        say(g.line())
    _check(gates)

    result: dict[str, Any] = {"schema": EXPORT_SCHEMA, "checkpoint": str(checkpoint), "device": device.name,
                              "model": p.arch["model"], "resolution": p.resolution, "mode": p.mode,
                              "precision": precision, "folded": {str(k): v for k, v in p.plan.items()},
                              "notes": p.notes}
    with atomic_dir(out) as tmp:
        onnx_path = tmp / "model.onnx"
        say(f"exporting ONNX → {out / 'model.onnx'}")
        export_onnx(p.folded, (1, 3, p.resolution, p.resolution), onnx_path, dynamic_batch=True)
        tag_block_nodes(onnx_path, p.folded, p.plan)
        floor = noise_floor(p.folded, x)
        gate, ort = onnx_gate(p.folded, onnx_path, x, inputs, floor)
        gates.append(gate)
        say(gates[-1].line())
        _check(gates)
        files = ["model.onnx"]
        accs: dict[str, float] = {}
        if task is not None:
            with OrtRunner(onnx_path) as runner:
                accs["onnx"] = runner_accuracy(runner, task, batch=256)
        if trt_backend is not None:
            engine_path = _build_engine(trt_backend, p, tmp, precision, say)
            # the shipped runner on the engine file as written: what a user runs
            with TrtEngineRunner(engine_path, input_shape=(1, 3, p.resolution, p.resolution),
                                 cuda=trt_backend.cuda) as engine:
                gates.append(compare_outputs(f"TensorRT ({precision}) vs ONNX Runtime", _run_samples(engine, x),
                                             ort, TOL_ENGINE[precision], inputs, floor))
                say(gates[-1].line())
                _check(gates)
                if task is not None:
                    accs["engine"] = runner_accuracy(engine, task, batch=1)
            files.append("model.engine")
        result["gates"] = [asdict(g) | {"passed": g.passed} for g in gates]
        result["accuracy"] = accuracy_gate(p, task, accs, precision, say)
        if measure:
            result["latency"] = _latency(p, device, lut, say)
        result["files"] = files
        write_json_atomic(tmp / "export.json", result)
        write_text_atomic(tmp / "REPORT.md", render_report(result))
    say(f"wrote {out}/export.json and REPORT.md")
    return result


def _tensorrt_backend(device: Any, precision: str) -> Any:


    if device.backend != "tensorrt":
        raise LatoptError(f"--format engine needs a TensorRT device profile, but {device.name!r} uses "
                          f"{device.backend}; use --device titanx or --device gpu-trt-fp16")
    prof = device.model_copy(update={"precision": precision}) if precision != device.precision else device
    return get_backend(prof)


def _build_engine(backend: Any, p: Plan, tmp: Path, precision: str, say: Any) -> Path:
    """``tmp/model.engine`` built from a static-shape (batch 1) ONNX export of the network."""

    static = tmp / ".static.onnx"
    export_onnx(p.folded, (1, 3, p.resolution, p.resolution), static)
    say(f"building TensorRT engine ({precision})")
    engine_path = build_engine(static, backend.profile, tmp / "model.engine")
    static.unlink()
    return engine_path


def _run_samples(runner: Any, x: torch.Tensor) -> np.ndarray:
    return np.concatenate([runner.run(x[i:i + 1].numpy()) for i in range(x.shape[0])])


def runner_accuracy(runner: Any, task: Any, batch: int) -> float:
    """Top-1 accuracy of a ``latopt.runtime`` runner (ONNX Runtime / TensorRT) on the task's whole test
    split, ``batch`` samples per call."""
    loader = torch.utils.data.DataLoader(task.test, batch_size=batch)
    correct = total = 0
    for xb, yb in loader:
        pred = np.asarray(runner.run(xb.float().numpy())).argmax(1)
        correct += int((pred == yb.numpy()).sum())
        total += int(yb.numel())
    if total == 0:
        raise LatoptError(f"the test split of {task.name} is empty: cannot measure the exported accuracy")
    return correct / total


def accuracy_gate(p: Plan, task: Any | None, accs: dict[str, float], precision: str, say: Any
                  ) -> dict[str, Any] | None:
    """The exported artefacts' test accuracy beside the one the checkpoint records; for a checkpoint
    exported as it is (``p.asis``), a difference above one test sample is a VerificationError."""
    if task is None:
        p.notes.append("the checkpoint names no task: exported accuracy not measured (no accuracy gate)")
        return None
    n = len(task.test)
    rec = recorded_test_acc(p.meta)
    record: dict[str, Any] = {"task": task.name, "samples": n, "test_acc": accs["onnx"],
                              "engine_test_acc": accs.get("engine"), "recorded": None, "recorded_at": None,
                              "gated": False, "tolerance": 1.0 / n}
    shown = ", ".join(f"{k} {v:.4f}" for k, v in accs.items())
    if rec is None:
        p.notes.append("the checkpoint records no test accuracy: the exported accuracy is reported, not gated")
        say(f"test accuracy on {task.name} ({n} samples): {shown}")
        return record
    recorded, where = rec
    record.update(recorded=recorded, recorded_at=where)
    rec_res = p.meta.get("resolution")
    if not p.asis:
        why = "export folded the network (the fold gates check it)"
    elif rec_res is not None and rec_res != p.resolution:
        why = f"exported at {p.resolution} px, recorded at {rec_res} px"
    else:
        why = ""
        record["gated"] = True
    say(f"test accuracy on {task.name} ({n} samples): {shown}; recorded {recorded:.4f} ({where})"
        + (f"; not gated: {why}" if why else ""))
    if why:
        p.notes.append(f"accuracy reported beside the recorded one, not gated: {why}")
        return record
    tol = {"onnx": 1.0 / n, "engine": 1.0 / n + (ACC_TOL_FP16 if precision == "fp16" else 0.0)}
    bad = [f"{k} {v:.4f}" for k, v in accs.items() if abs(v - recorded) > tol[k] + 1e-12]
    if bad:
        raise VerificationError(f"accuracy gate failed, nothing written: test accuracy {', '.join(bad)} on "
                                f"{task.name} differs from the checkpoint's recorded {recorded:.4f} ({where}) by more "
                                f"than one test sample (1/{n}); the weights are not the ones that were evaluated")
    return record


def _latency(p: Plan, device: Any, lut: Any | None, say: Any) -> dict[str, Any]:

    shape = (device.batch, 3, p.resolution, p.resolution)
    say(f"measuring as-is vs folded end to end on {device.name} (interleaved)")
    stats = measure_networks({"as-is": _asis_network(p.arch), "folded": p.folded}, device, shape)
    a, f = stats["as-is"], stats["folded"]
    lat: dict[str, Any] = {
        "as_is_ms": a.median_ms, "as_is_iqr_ms": a.iqr_ms,
        "folded_ms": f.median_ms, "folded_iqr_ms": f.iqr_ms,
        "speedup": a.median_ms / f.median_ms,
        # spread of the ratio from the quartiles: slowest-as-is/fastest-folded and the reverse
        "speedup_range": [a.q1_ms / f.q3_ms, a.q3_ms / f.q1_ms],
        "repeats": {"as_is": a.n, "folded": f.n},
    }
    if lut is not None:
        lat["lut_as_is_ms"] = predict(lut, {})
        lat["lut_folded_ms"] = predict(lut, p.plan)
        lat["lut_error_as_is"] = lat["lut_as_is_ms"] / a.median_ms - 1
        lat["lut_error_folded"] = lat["lut_folded_ms"] / f.median_ms - 1
    say(f"as-is {a.median_ms:.3f} ms, folded {f.median_ms:.3f} ms → speed-up {lat['speedup']:.2f}×")
    return lat


def render_report(r: dict[str, Any]) -> str:
    lines = [f"# latopt export: {r['model']} on {r['device']}", "",
             f"- checkpoint: `{r['checkpoint']}`", f"- resolution: {r['resolution']}, fold mode: {r['mode']}, "
             f"precision: {r['precision']}",
             f"- folded blocks ({len(r['folded'])}): " + (", ".join(f"{k} ({v})" for k, v in r["folded"].items()) or "none"),
             f"- files: {', '.join(r.get('files', []))}", "", "## Numeric gates", "",
             "| check | max abs diff | scale | relative | tolerance | float32 noise floor | inputs | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for g in r.get("gates", []):
        floor = "–" if g.get("floor") is None else f"{g['floor']:.3g}"
        lines.append(f"| {g['name']} | {g['max_abs']:.3g} | {g['scale']:.3g} | {g['rel']:.3g} | {g['tol']:.3g} | "
                     f"{floor} | {g['samples']} {g['inputs']} | {'ok' if g['passed'] else 'FAILED'} |")
    if any(g.get("floor") is not None for g in r.get("gates", [])):
        lines += ["", f"Tolerances marked with a noise floor are max(base tolerance, {NOISE_K:g} × the network's "
                  "float32 noise floor: PyTorch float32 vs float64 on the same inputs)."]
    acc = r.get("accuracy")
    if acc:
        engine = "" if acc.get("engine_test_acc") is None else f", engine {acc['engine_test_acc']:.4f}"
        if acc.get("recorded") is None:
            rec = " (the checkpoint records none)"
        else:
            rec = (f"; recorded in the checkpoint: {acc['recorded']:.4f} (`{acc['recorded_at']}`)"
                   + (f", gate: within one test sample (1/{acc['samples']}) ok" if acc["gated"] else ", not gated"))
        lines += ["", "## Accuracy", "", f"Test accuracy on `{acc['task']}` ({acc['samples']} samples): "
                  f"ONNX {acc['test_acc']:.4f}{engine}{rec}"]
    lat = r.get("latency")
    if lat:
        lines += ["", "## Latency (measured end to end in one interleaved run)", "",
                  "| network | median ms | IQR ms | LUT prediction ms | LUT error |", "|---|---|---|---|---|",
                  f"| as-is | {lat['as_is_ms']:.3f} | {lat['as_is_iqr_ms']:.3f} | "
                  + (f"{lat['lut_as_is_ms']:.3f} | {lat['lut_error_as_is']:+.1%} |" if "lut_as_is_ms" in lat else "– | – |"),
                  f"| folded | {lat['folded_ms']:.3f} | {lat['folded_iqr_ms']:.3f} | "
                  + (f"{lat['lut_folded_ms']:.3f} | {lat['lut_error_folded']:+.1%} |" if "lut_folded_ms" in lat else "– | – |"),
                  "", f"Speed-up: **{lat['speedup']:.2f}×** (quartile range {lat['speedup_range'][0]:.2f}–"
                  f"{lat['speedup_range'][1]:.2f}×)"]
    if r.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in r["notes"]]
    return "\n".join(lines) + "\n"


__all__ = ["EXPORT_SCHEMA", "NOISE_K", "Gate", "Plan", "accuracy_gate", "build_plan", "check_fold_size",
           "compare_outputs", "export", "fold_gates", "gate_inputs", "noise_floor", "onnx_gate", "ort_out",
           "render_report", "runner_accuracy", "tag_block_nodes", "torch_out"]
