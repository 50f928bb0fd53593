"""Export: a folded checkpoint → ONNX (+ TensorRT engine), numeric gates, measured latency, report.

``latopt export --checkpoint CKPT --device DEVICE [--format onnx|engine|all] [--precision fp32|fp16]
[--fold PLAN] [--lut FILE] [--out DIR]``

What it does, in order (nothing is written unless every gate passes):

1. Load the checkpoint (``weights_only``). A folded checkpoint (``arch["fold"]``) is exported as it is.
   An unfolded one is folded here with ``--fold`` (``all``, ``auto`` = every block whose fold lowers the
   latency on this device according to its LUT, or indices ``1,3,5``), exact mode at the checkpoint's
   resolution.
2. Fold gate: the folded network against the unfolded σ_α network it came from with the folded
   activations set to α = 1 (``linearize``), on real samples of the task when the checkpoint names one
   (random inputs otherwise; the report says which). For a folded checkpoint that was fine-tuned after
   folding, the fold is recomputed from its pre-fold checkpoint and checked the same way (the fine-tuned
   weights no longer have an unfolded twin).
3. ONNX (TorchScript exporter, opset 17, dynamic batch, ``onnx.checker.check_model(full_check=True)``),
   node names prefixed with the block index they come from (``b03/...``); ONNX Runtime against the
   PyTorch folded model. A TensorRT engine (``--format engine|all``) is built through the profiler's
   TensorRT backend (timing cache reused) and checked against ONNX Runtime (looser for fp16).
4. Latency: the as-is and the folded network measured end to end on the device in one interleaved run;
   speed-up with spread; the LUT's prediction beside the measurement when a LUT exists.
5. ``export.json`` + ``REPORT.md`` (+ ``model.onnx``, ``model.engine``) in DIR, written atomically.
"""

from __future__ import annotations

import argparse
import copy
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from latopt.errors import LatoptError, VerificationError

EXPORT_SCHEMA = "latopt.export/1"
# Tolerances of the numeric gates, relative to the reference output's scale (max |reference|).
TOL_FOLD64 = 1e-9        # the fold algebra: folded vs linearised σ_α network, both computed in float64
TOL_FOLD32 = 1e-3        # the float32 folded network vs the float32 linearised one
TOL_ONNX = 1e-4          # ONNX Runtime vs PyTorch
TOL_ENGINE = {"fp32": 1e-3, "fp16": 2e-2}   # TensorRT engine vs ONNX Runtime


@dataclass
class Gate:
    name: str
    max_abs: float
    scale: float
    rel: float
    tol: float
    samples: int
    inputs: str

    @property
    def passed(self) -> bool:
        return bool(self.rel <= self.tol)

    def line(self) -> str:
        verdict = "ok" if self.passed else "FAILED"
        return (f"{self.name}: max|diff| {self.max_abs:.3g} on scale {self.scale:.3g} → rel {self.rel:.3g} "
                f"(tol {self.tol:g}, {self.samples} {self.inputs} inputs) {verdict}")


def compare_outputs(name: str, out: np.ndarray, ref: np.ndarray, tol: float, inputs: str) -> Gate:
    out64, ref64 = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    if out64.shape != ref64.shape:
        raise VerificationError(f"{name}: output shape {out64.shape} differs from reference {ref64.shape}")
    max_abs = float(np.max(np.abs(out64 - ref64))) if out64.size else 0.0
    if not np.isfinite(out64).all():
        max_abs = float("inf")
    scale = max(float(np.max(np.abs(ref64))) if ref64.size else 0.0, 1e-12)
    return Gate(name, max_abs, scale, max_abs / scale, tol, int(ref64.shape[0]), inputs)


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


def _asis_network(arch: dict[str, Any]) -> nn.Module:
    from latopt.models import build_model

    return build_model(arch["model"], num_classes=int(arch["num_classes"])).eval()


def _resolution(arch: dict[str, Any], meta: dict[str, Any], override: int | None) -> int:
    if override:
        return int(override)
    fold = arch.get("fold") or {}
    if fold.get("input_size"):
        return int(fold["input_size"][0])
    if meta.get("resolution"):
        return int(meta["resolution"])
    res = ((meta.get("config") or {}).get("data") or {}).get("resolution")
    if res:
        return int(res)
    raise LatoptError("the checkpoint does not record its input resolution; pass --resolution R")


def auto_plan(lut: Any) -> list[int]:
    """Blocks whose full fold lowers the latency on the LUT's device (c_l > 0)."""
    from latopt.latency.lut import costs

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
        return [int(s) for s in spec.split(",") if s.strip()]
    except ValueError:
        raise LatoptError(f"--fold {spec!r}: give 'all', 'none', 'auto' or block indices like 1,3,5") from None


def build_plan(checkpoint: str | Path, loaded: tuple[nn.Module, dict[str, Any], dict[str, Any]], *,
               fold: str | None, lut: Any | None, res: int, mode: str = "exact") -> Plan:
    """What to export from the ``loaded`` checkpoint (``load_checkpoint``'s result) at resolution ``res``."""
    from latopt.fold import fold_blocks, fold_spec, normalize_plan, plain_activations_
    from latopt.models import load_checkpoint

    model, arch, meta = loaded
    model.eval()
    source_model = copy.deepcopy(model) if not arch.get("fold") else None
    n_plain = plain_activations_(model)  # σ_α with α = 0 is σ: export the plain activation
    notes: list[str] = []
    if n_plain:
        notes.append(f"{n_plain} σ_α activations with α = 0 exported as the plain activation they equal")
    if arch.get("fold"):
        if fold is not None:
            raise LatoptError(f"{checkpoint} is already folded; drop --fold (it applies to unfolded checkpoints)")
        fspec = arch["fold"]
        plan = {int(k): v for k, v in fspec["plan"].items()}
        source = None
        # the σ_α network the fold came from: recorded by `latopt fold`, or beside the checkpoint
        candidates = [meta.get("prefold_checkpoint"), Path(checkpoint).parent / "prefold.pt"]
        prefold = next((str(c) for c in candidates if c and Path(c).is_file()), None)
        if prefold:
            source = load_checkpoint(prefold)[0].eval()
            if meta.get("finetuned", True):
                notes.append("the fold gates check the fold recomputed from the pre-fold checkpoint "
                             f"({prefold}); the exported weights were fine-tuned after folding")
        else:
            notes.append("no pre-fold checkpoint recorded or found: fold gates skipped (ONNX gate still applies)")
        return Plan(model, source, arch, meta, plan, fspec["mode"], res, notes)
    spec = parse_fold_spec(fold or "all", lut)
    if spec == []:  # --fold none: export the network as it is (no fold gate)
        notes.append("nothing folded (--fold none): the network is exported as it is")
        return Plan(model, None, arch, meta, {}, "none", res, notes)
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
    from latopt.fold import fold_blocks, linearize

    if p.source is None or not p.plan:
        return []
    res = (p.resolution, p.resolution)
    src64 = copy.deepcopy(p.source).double().eval()
    if p.mode == "paper":
        # a constant bias is wrong on the border ring by design (repaired by post-fold fine-tuning), and
        # that error spreads through the network: check each folded block alone, away from its border
        from latopt.fold import verify_fold

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
    from latopt.data import get_task, limit_task

    try:
        task = get_task(spec, resolution, int(meta.get("split_seed", 0) or 0))
    except LatoptError as e:
        raise LatoptError(f"cannot load the checkpoint's task {spec!r} for the numeric gate: {e}") from None
    return limit_task(task, meta.get("max_samples"))


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
    from latopt.runtime import OrtRunner

    runner = OrtRunner(onnx_path, input_shape=(1, *x.shape[1:]))
    try:
        return np.concatenate([runner.run(x[i:i + 1].numpy()) for i in range(x.shape[0])])
    finally:
        runner.close()


def tag_block_nodes(onnx_path: Path, model: nn.Module, plan: dict[int, str]) -> None:
    """Prefix every node that comes from block i with ``bII/`` and record the block map in metadata."""
    import onnx

    from latopt.blocks import find_blocks

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
    from latopt.latency.lut import default_lut_path, load_lut

    model_name = arch["model"]
    if path:
        return load_lut(path, model=model_name, resolution=resolution)
    p = default_lut_path(device.name, model_name, resolution, device.batch)
    return load_lut(p, model=model_name, resolution=resolution) if Path(p).is_file() else None


def export(checkpoint: str | Path, device_name: str, out: str | Path, *, fmt: str = "onnx",
           precision: str | None = None, fold: str | None = None, lut_path: str | None = None,
           resolution: int | None = None, samples: int = 32, seed: int = 0, measure: bool = True,
           progress: bool = True, mode: str = "exact") -> dict[str, Any]:
    """The whole export; returns the export.json dict. Raises LatoptError / VerificationError."""
    from latopt.artifacts import atomic_dir, write_json_atomic, write_text_atomic
    from latopt.latency.devices import load_device
    from latopt.latency.onnx_io import export_onnx

    def say(msg: str) -> None:
        if progress:
            print(f"[export] {msg}", flush=True)

    if fmt not in ("onnx", "engine", "all"):
        raise LatoptError(f"--format {fmt!r}: choose onnx, engine or all")
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

    from latopt.models import load_checkpoint

    say(f"loading {checkpoint}")
    loaded = load_checkpoint(checkpoint)
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
        ort = ort_out(onnx_path, x)
        gates.append(compare_outputs("ONNX Runtime vs PyTorch folded", ort, torch_out(p.folded, x),
                                     TOL_ONNX, inputs))
        say(gates[-1].line())
        _check(gates)
        files = ["model.onnx"]
        if trt_backend is not None:
            engine_gate = _build_engine(trt_backend, p, tmp, precision, x, ort, inputs, say)
            gates.append(engine_gate)
            _check(gates)
            files.append("model.engine")
        result["gates"] = [asdict(g) | {"passed": g.passed} for g in gates]
        result["accuracy"] = _accuracy(p, task, say)
        if measure:
            result["latency"] = _latency(p, device, lut, say)
        result["files"] = files
        write_json_atomic(tmp / "export.json", result)
        write_text_atomic(tmp / "REPORT.md", render_report(result))
    say(f"wrote {out}/export.json and REPORT.md")
    return result


def _tensorrt_backend(device: Any, precision: str) -> Any:
    import dataclasses

    from latopt.latency.backends import get_backend

    if device.backend != "tensorrt":
        raise LatoptError(f"--format engine needs a TensorRT device profile, but {device.name!r} uses "
                          f"{device.backend}; use --device titanx or --device gpu-trt-fp16")
    prof = dataclasses.replace(device, precision=precision) if precision != device.precision else device
    return get_backend(prof)


def _build_engine(backend: Any, p: Plan, tmp: Path, precision: str, x: torch.Tensor, ort_out: np.ndarray,
                  inputs: str, say: Any) -> Gate:
    from latopt.latency.backends.tensorrt import build_engine
    from latopt.latency.onnx_io import export_onnx

    static = tmp / ".static.onnx"
    export_onnx(p.folded, (1, 3, p.resolution, p.resolution), static)
    say("building TensorRT engine")
    engine_path = build_engine(static, backend.profile, tmp / "model.engine")
    static.unlink()
    runner = backend.prepare(str(engine_path), (1, 3, p.resolution, p.resolution))
    try:
        out = np.concatenate([runner.run(x[i:i + 1].numpy()) for i in range(x.shape[0])])
    finally:
        runner.close()
    g = compare_outputs(f"TensorRT ({precision}) vs ONNX Runtime", out, ort_out, TOL_ENGINE[precision], inputs)
    say(g.line())
    return g


def _accuracy(p: Plan, task: Any | None, say: Any) -> dict[str, Any] | None:
    if task is None:
        return None
    from latopt.train import evaluate

    loader = torch.utils.data.DataLoader(task.test, batch_size=256)
    acc = float(evaluate(p.folded, loader))
    say(f"test accuracy of the exported network on {task.name}: {acc:.4f}")
    recorded = p.meta.get("acc", {}).get("finetuned") if isinstance(p.meta.get("acc"), dict) else p.meta.get("test_acc")
    return {"task": task.name, "test_acc": acc, "reported": recorded}


def _latency(p: Plan, device: Any, lut: Any | None, say: Any) -> dict[str, Any]:
    from latopt.latency.profiler import measure_networks

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
        from latopt.latency.lut import predict

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
             "| check | max abs diff | scale | relative | tolerance | inputs | verdict |", "|---|---|---|---|---|---|---|"]
    for g in r.get("gates", []):
        lines.append(f"| {g['name']} | {g['max_abs']:.3g} | {g['scale']:.3g} | {g['rel']:.3g} | {g['tol']:g} | "
                     f"{g['samples']} {g['inputs']} | {'ok' if g['passed'] else 'FAILED'} |")
    acc = r.get("accuracy")
    if acc:
        lines += ["", "## Accuracy", "", f"Test accuracy on `{acc['task']}`: {acc['test_acc']:.4f}"
                  + (f" (reported at training: {acc['reported']:.4f})" if acc.get("reported") is not None else "")]
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


def _cmd_export(args: argparse.Namespace) -> int:
    r = export(args.checkpoint, args.device, args.out or Path("runs") / "export" / Path(args.checkpoint).stem,
               fmt=args.format, precision=args.precision, fold=args.fold, lut_path=args.lut,
               resolution=args.resolution, samples=args.samples, seed=args.seed, measure=not args.no_measure,
               mode=args.mode)
    lat = r.get("latency")
    if lat:
        print(f"speed-up {lat['speedup']:.2f}× (as-is {lat['as_is_ms']:.3f} ms → folded {lat['folded_ms']:.3f} ms)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from latopt.cli import common_parser

    p = sub.add_parser("export", parents=[common_parser()],
                       help="export a folded checkpoint to ONNX / TensorRT with numeric gates and measured latency")
    p.add_argument("--checkpoint", required=True, help="latopt checkpoint (folded, or unfolded with --fold)")
    p.add_argument("--device", default="cpu", help="device profile (profiles/*.yaml), default cpu")
    p.add_argument("--format", default="onnx", choices=["onnx", "engine", "all"])
    p.add_argument("--precision", choices=["fp32", "fp16"], default=None, help="default: the device profile's")
    p.add_argument("--fold", default=None,
                   help="for an unfolded checkpoint: 'all', 'none', 'auto' (blocks whose fold pays on this device, from the LUT) or 1,3,5")
    p.add_argument("--mode", choices=["exact", "paper"], default="exact",
                   help="with --fold: exact (bias map, equal everywhere; default) or paper (constant bias, any input size)")
    p.add_argument("--lut", default=None, help="LUT JSON (default profiles/<device>/<model>-r<res>-b<batch>.json if present)")
    p.add_argument("--resolution", type=int, default=None, help="input resolution (default: the checkpoint's)")
    p.add_argument("--samples", type=int, default=32, help="inputs used by the numeric gates (default 32)")
    p.add_argument("--no-measure", action="store_true", help="skip the end-to-end latency measurement")
    p.add_argument("--out", default=None, help="output directory (default runs/export/<checkpoint name>)")
    p.set_defaults(func=_cmd_export)


__all__ = ["EXPORT_SCHEMA", "Gate", "Plan", "build_plan", "compare_outputs", "export", "fold_gates", "gate_inputs",
           "ort_out", "render_report", "tag_block_nodes", "torch_out"]
