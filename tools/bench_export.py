"""Benchmark: what does folding buy end to end on the device?

For each model (default mobilenetv2_100 and efficientnet_lite0 at 224 on the ``cpu`` profile; random
weights with randomised BN statistics — latency does not depend on the weights, the numeric checks do
need non-trivial BN):

1. profile it (or reuse ``profiles/<device>/<model>-r<res>-b<batch>.json`` with ``--reuse-lut``);
2. fold sets: (a) ``auto`` = every block whose fold lowers latency on this device per the LUT (c_l > 0),
   (b) a search's choice: the fold set of the recommended trial of ``--study/--storage`` when given,
   else the LUT-greedy stand-in (the half of the foldable blocks that save the most per the LUT: what a
   search under a half-depth budget converges to on latency alone; printed as such), (c) ``dp``: the DP's
   plan at ``--dp-budget`` (``latopt.dp.select_plan`` with uniform importance: on random weights an
   accuracy proxy means nothing, so the fewest changed blocks that meet the budget, the fastest such set;
   the LUT needs the variants: ``--variants full,pw,drop``), with the spans the LUT times merged
   (``--variants full,pw,drop,span``), and ``dp-nospan``: the DP's plan at the same budget without spans;
3. each fold set in three forms: exact mode with a bias map per folded block (``per-block``, what export
   shipped before deferred maps), as export ships it now (``deferred``: one bias map per chain of consecutive
   folds, ``latopt.rewrite.defer_bias_maps``) and paper mode (constant bias, no map); export's numeric gates
   (fold in float64 and float32 against the linearised network, the deferred rewrite against the
   per-block network, ONNX Runtime against PyTorch on each exported file);
4. the as-is network and every (fold set, form) measured end to end in one interleaved run (ONNX Runtime
   sessions of the exported files): speed-ups vs as-is (ratio of medians, the range from the quartiles,
   and t_as-is/t per round: median and quartiles over the rounds), t/t_paper per round
   (median and quartiles over the rounds: sample i of every network is from round i), the ratio of
   medians to the per-block form, and the LUT's prediction error for the deferred form (what it models);
   ``--runs N`` repeats that run N times (a fresh interleaved run each: the spread between runs is the
   machine's, each run's ratios are side by side);
5. the merged-span targets, per run, when the sets ``dp`` and ``dp-nospan`` are timed: the DP plan's speed-up
   over as-is (median of per-round ratios, quartiles), ``dp`` against ``dp-nospan`` (t(dp-nospan)/t(dp) per
   round), and the plan's predicted speed-up (the LUT's) against the measured one; when the plan has spans,
   also ``dp-unmerged`` (the same plan, its spans left as separate blocks: t(dp-unmerged)/t(dp) per round is
   what merging buys).

To measure the targets of merged spans (MobileNetV2-1.0 @224, ONNX Runtime CPU, 1 thread, batch 1, uniform
importance, budget 0.55: ≥ 1.95× over as-is and ≥ 4 % faster than the plan without spans; the prediction within
5 %), three runs::

    python tools/bench_export.py --models mobilenetv2_100 --variants full,pw,drop,span --sets dp dp-nospan \
        --forms deferred --dp-budget 0.55 --runs 3 --min-rounds 200 --json results/spans/mobilenetv2_100.json

    python tools/bench_export.py [--models mobilenetv2_100 efficientnet_lite0] [--resolution 224]
                                 [--device cpu] [--sets auto search dp dp-nospan] [--forms per-block deferred paper]
                                 [--variants full,pw,drop] [--dp-budget 0.55] [--lut FILE]
                                 [--min-rounds N [--budget-s S]] [--runs N] [--reuse-lut] [--study NAME --storage URL]
                                 [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from latopt.dp import candidates, select_plan, variant_losses
from latopt.export import (
    Plan,
    auto_plan,
    defer_plan,
    deferred_gates,
    fold_gates,
    gate_inputs,
    noise_floor,
    onnx_gate,
    tag_block_nodes,
)
from latopt.files.artifacts import write_json_atomic
from latopt.files.checkpoint import CheckpointMeta, read_arch
from latopt.latency.devices import load_device
from latopt.latency.lut import costs, default_lut_path, load_lut, predict, save_lut
from latopt.latency.onnx_io import export_onnx
from latopt.latency.profiler import measure_networks, profile_model
from latopt.nets.models import build_model
from latopt.rewrite import fold_blocks, randomize_bn_
from latopt.training.loop import seed_everything
from latopt.training.torch_settings import set_threads


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def study_fold_set(study: str, storage: str) -> dict[int, str]:
    import optuna

    from latopt.search import recommend

    s = optuna.load_study(study_name=study, storage=storage)
    best = recommend(s, float(s.user_attrs.get("max_acc_drop", 0.01)) if "max_acc_drop" in s.user_attrs else 0.01)
    if best is None:
        raise SystemExit(f"study {study!r} has no recommended trial")
    return {int(k): v for k, v in best.user_attrs.get("fold_set", {}).items()}


FORMS = ("per-block", "deferred", "paper")


def fold_forms(model: Any, name: str, plan: dict[int, str], res: int, x: Any, inputs: str,
               forms: list[str], spans: list[list[int]] | None = None) -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
    """The fold set ``plan`` in each form: exact mode with a bias map per folded block (``per-block``), as
    export ships it (``deferred``: one map per chain) and in paper mode; with export's gates for each
    (the fold, the deferred rewrite, ONNX Runtime vs PyTorch on the file). Returns (networks, the
    rewrite's record, gates)."""
    size = (res, res)
    arch = read_arch({"model": name, "num_classes": 1000})
    p = Plan(fold_blocks(model, plan, mode="exact", input_size=size).eval(), model, arch, CheckpointMeta(), plan, "exact", res, [],
             spans=spans or [])
    floor = noise_floor(p.folded, x)
    exact = defer_plan(p, "deferred")
    gates = fold_gates(p, x, inputs) + deferred_gates(exact, p.folded, res, x, inputs, floor, spans=p.spans)
    nets = {"per-block": exact, "deferred": p.folded}
    if "paper" in forms:
        paper = Plan(fold_blocks(model, plan, mode="paper", input_size=size).eval(), model, arch, CheckpointMeta(), plan, "paper",
                     res, [])
        gates += fold_gates(paper, x, inputs)
        nets["paper"] = paper.folded
    assert p.bias_maps is not None   # defer_plan records how it shipped them
    return {f: nets[f] for f in forms}, p.bias_maps.model_dump(mode="json", exclude_none=True), gates


def bench_model(name: str, res: int, device: Any, args: argparse.Namespace) -> dict[str, Any]:
    print(f"\n=== {name} @{res} on {device.name} (load {_load()})", flush=True)
    seed_everything(args.seed)
    model = build_model(name, num_classes=1000).eval()
    randomize_bn_(model, seed=args.seed)
    lut_path = args.lut or default_lut_path(device.name, name, res, device.batch)
    if args.lut or (args.reuse_lut and Path(lut_path).is_file()):
        lut = load_lut(lut_path, model=name, resolution=res)
        print(f"reusing {lut_path}")
    else:
        t = time.perf_counter()
        lut = profile_model(model, device, res, device.batch, variants=args.variants.split(","), progress=False,
                            name=name)
        print(f"profiled in {time.perf_counter() - t:.1f} s")
        if args.save_lut:
            save_lut(lut, lut_path)
    c = costs(lut)
    auto = auto_plan(lut)
    if args.study:
        chosen, how = study_fold_set(args.study, args.storage), f"recommended trial of study {args.study!r}"
    else:
        ranked = sorted(lut.foldable(), key=lambda i: -c[i])
        chosen = {i: "full" for i in sorted(ranked[: len(ranked) // 2]) if c[i] > 0}
        how = "LUT-greedy stand-in: the half of the foldable blocks with the largest c_l (and c_l > 0)"
    sets = {k: v for k, v in {"auto": {i: "full" for i in auto}, "search": chosen}.items() if k in args.sets}
    print(f"(a) auto: {len(auto)}/{len(lut.foldable())} blocks with c_l > 0: {auto}")
    if "search" in args.sets:
        print(f"(b) search: {sorted(chosen)} ({how})")
    spans: dict[str, list[list[int]]] = {}
    for key in ("dp", "dp-nospan"):
        if key not in args.sets:
            continue
        losses = variant_losses(None, None, None, candidates(lut), method="uniform")
        sets[key], sel = select_plan(lut, losses, args.dp_budget, spans=key == "dp")
        spans[key] = sel.spans
        print(f"(c) {key} at budget {args.dp_budget} (uniform importance, variants {', '.join(lut.variants)}, "
              f"{len(lut.spans)} timed spans): {sets[key]}; spans {sel.spans}; LUT {sel.predicted_ms:.3f} ms = "
              f"{sel.ratio:.3f} of as-is {sel.asis_ms:.3f} ms")
    if spans.get("dp"):  # what merging itself buys: the same plan, its spans not merged
        sets["dp-unmerged"], spans["dp-unmerged"] = sets["dp"], []
        print(f"(c) dp-unmerged: the dp plan with its spans {spans['dp']} left as separate blocks")
    x, inputs = gate_inputs(None, res, args.samples, args.seed)
    out: dict[str, Any] = {"model": name, "resolution": res, "device": device.name, "fold_sets": {},
                           "search_fold_set_source": how, "forms": args.forms}
    tmp = Path(tempfile.mkdtemp(prefix="latopt-bench-export-"))
    shape = (device.batch, 3, res, res)
    onnx_files = {"as-is": export_onnx(model, shape, tmp / "asis.onnx")}
    for key, plan in sets.items():
        if not plan:
            print(f"{key}: empty fold set, skipped")
            continue
        nets, bias_maps, gates = fold_forms(model, name, plan, res, x, inputs, args.forms, spans.get(key))
        for form, net in nets.items():
            path = export_onnx(net, shape, tmp / f"{key}-{form}.onnx")
            tag_block_nodes(path, net, plan)
            gates.append(onnx_gate(net, path, x, inputs)[0])
            gates[-1].name += f" ({form})"
            onnx_files[f"{key}/{form}"] = path
        for g in gates:
            print(f"  {key}: {g.line()}")
        print(f"  {key}: deferred bias maps: chains {bias_maps['chains']}, {bias_maps['adds_per_block']} bias-map Adds "
              f"→ {bias_maps['adds_deferred']}")
        out["fold_sets"][key] = {"plan": {str(i): v for i, v in sorted(plan.items())}, "bias_maps": bias_maps,
                                 "spans": spans.get(key, []),
                                 "gates": [vars(g) | {"passed": g.passed} for g in gates], "forms": {}}
    out["runs"] = [measure_run(r, onnx_files, sets, spans, lut, device, shape, args, out) for r in range(args.runs)]
    return out


def measure_run(run: int, onnx_files: dict[str, Path], sets: dict[str, dict[int, str]], spans: dict[str, list],
                lut: Any, device: Any, shape: tuple[int, ...], args: argparse.Namespace,
                out: dict[str, Any]) -> dict[str, Any]:
    """One interleaved run of every network (module docstring, 4 and 5); its figures as a dict."""
    res: dict[str, Any] = {"run": run + 1, "fold_sets": {k: {"forms": {}} for k in out["fold_sets"]}}
    load = {"before": _load()}
    print(f"run {run + 1}/{args.runs}: measuring {list(onnx_files)} end to end, interleaved (load {load['before']})",
          flush=True)
    t = time.perf_counter()
    timing = device if args.min_rounds is None else device.model_copy(
        update={"min_repeats": args.min_rounds, "max_repeats": max(device.max_repeats, args.min_rounds),
                "budget_s": max(device.budget_s, args.budget_s)})
    stats = measure_networks({k: str(v) for k, v in onnx_files.items()}, timing, shape)
    load["after"] = _load()
    print(f"measured in {time.perf_counter() - t:.1f} s, {stats['as-is'].n} rounds (load {load['after']})")
    res["load"], res["rounds"] = load, stats["as-is"].n
    a = stats["as-is"]
    res["as_is"] = {"measured": a.to_dict(), "lut_ms": predict(lut, {}), "lut_error": predict(lut, {}) / a.median_ms - 1}
    print(f"{'network':<16} {'folded':>6} {'median ms':>10} {'IQR ms':>8} {'speed-up':>9} {'quartile range':>15} "
          f"{'per round [q1, q3]':>22} {'t/t_paper per round [q1, q3]':>30} {'t/t_per-block':>13} {'LUT ms':>8} "
          f"{'LUT err':>8}")
    a_pred = res["as_is"]["lut_ms"]
    print(f"{'as-is':<16} {0:>6} {a.median_ms:>10.3f} {a.iqr_ms:>8.3f} {'':>9} {'':>15} {'':>22} {'':>30} {'':>13} "
          f"{a_pred:>8.3f} {a_pred / a.median_ms - 1:>+8.1%}")
    for key in out["fold_sets"]:
        plan = sets[key]
        pred = predict(lut, plan, spans.get(key, []))  # the LUT predicts what export ships: the deferred form
        for form in args.forms:
            s = stats[f"{key}/{form}"]
            sp, rng = a.median_ms / s.median_ms, (a.q1_ms / s.q3_ms, a.q3_ms / s.q1_ms)
            pr = a.per_round_ratio(s)  # t(as-is)/t(network) within each round: the speed-up's own spread
            entry: dict[str, Any] = {"measured": s.to_dict(), "speedup": sp, "speedup_range": list(rng),
                                     "speedup_per_round": {"median": pr.median_ms, "q1": pr.q1_ms, "q3": pr.q3_ms}}
            cells = ""
            if "paper" in args.forms:
                r = s.per_round_ratio(stats[f"{key}/paper"])
                entry["per_round_vs_paper"] = {"median": r.median_ms, "q1": r.q1_ms, "q3": r.q3_ms}
                cells = f"{r.median_ms:.3f} [{r.q1_ms:.3f}, {r.q3_ms:.3f}]"
            if "per-block" in args.forms:
                entry["medians_vs_per_block"] = s.median_ms / stats[f"{key}/per-block"].median_ms
            lut_cells = ""
            if form == "deferred":
                entry.update(lut_ms=pred, lut_error=pred / s.median_ms - 1)
                lut_cells = f"{pred:>8.3f} {pred / s.median_ms - 1:>+8.1%}"
            vs_pb = entry.get("medians_vs_per_block")
            print(f"{key + '/' + form:<16} {len(plan):>6} {s.median_ms:>10.3f} {s.iqr_ms:>8.3f} {sp:>8.2f}x "
                  f"{rng[0]:>7.2f}-{rng[1]:<6.2f} {f'{pr.median_ms:.2f}x [{pr.q1_ms:.2f}, {pr.q3_ms:.2f}]':>22} {cells:>30} {'' if vs_pb is None else f'{vs_pb:.3f}':>13} {lut_cells}")
            res["fold_sets"][key]["forms"][form] = entry
    if "dp" in res["fold_sets"] and "dp-nospan" in res["fold_sets"] and "deferred" in args.forms:
        dp, flat = stats["dp/deferred"], stats["dp-nospan/deferred"]
        sp, vs = a.per_round_ratio(dp), flat.per_round_ratio(dp)  # t(as-is)/t(dp), t(dp-nospan)/t(dp) per round
        measured = a.median_ms / dp.median_ms
        predicted = predict(lut, {}) / predict(lut, sets["dp"], spans["dp"])
        if "dp-unmerged" in res["fold_sets"]:
            m = stats["dp-unmerged/deferred"].per_round_ratio(dp)
            res["merging"] = {"median": m.median_ms, "q1": m.q1_ms, "q3": m.q3_ms}
            print(f"merging, run {run + 1}: t(dp-unmerged)/t(dp) per round {m.median_ms:.3f} [{m.q1_ms:.3f}, "
                  f"{m.q3_ms:.3f}]")
        res["targets"] = {"speedup": {"median": sp.median_ms, "q1": sp.q1_ms, "q3": sp.q3_ms},
                          "vs_nospan": {"median": vs.median_ms, "q1": vs.q1_ms, "q3": vs.q3_ms},
                          "predicted_speedup": predicted, "measured_speedup": measured,
                          "prediction_error": predicted / measured - 1}
        t = res["targets"]
        print(f"targets, run {run + 1}: dp {sp.median_ms:.3f}x over as-is per round [{sp.q1_ms:.3f}, {sp.q3_ms:.3f}] "
              f"(≥ 1.95x); dp-nospan / dp per round {vs.median_ms:.3f} [{vs.q1_ms:.3f}, {vs.q3_ms:.3f}] (≥ 1.04); "
              f"predicted {predicted:.3f}x vs measured {measured:.3f}x ({t['prediction_error']:+.1%}, within 5 %)")
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["mobilenetv2_100", "efficientnet_lite0"])
    ap.add_argument("--resolution", type=int, default=224)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--forms", nargs="+", choices=FORMS, default=list(FORMS),
                    help="how each fold set is timed: exact mode with a bias map per block (per-block), as export "
                         "ships it (deferred: one map per chain of folds), paper mode (constant bias, no map)")
    ap.add_argument("--sets", nargs="+", choices=["auto", "search", "dp", "dp-nospan"], default=["auto", "search"],
                    help="fold sets to time (default auto and search; dp-nospan: the DP without spans)")
    ap.add_argument("--variants", default="full",
                    help="variants the fresh LUT times (latopt profile --variants; dp wants full,pw,drop)")
    ap.add_argument("--dp-budget", type=float, default=0.55,
                    help="set dp: the DP's budget, a fraction of the as-is LUT latency (default 0.55)")
    ap.add_argument("--lut", help="use this LUT file (e.g. from latopt profile --variants full,pw,drop)")
    ap.add_argument("--samples", type=int, default=8, help="inputs for the numeric gates")
    ap.add_argument("--min-rounds", type=int, default=None,
                    help="at least this many interleaved rounds in the end-to-end run (default: the device's "
                         "min_repeats); its budget is raised to --budget-s")
    ap.add_argument("--budget-s", type=float, default=120.0, help="time budget of the end-to-end run with --min-rounds")
    ap.add_argument("--runs", type=int, default=1, help="interleaved end-to-end runs, one after another (default 1)")
    ap.add_argument("--reuse-lut", action="store_true", help="use profiles/<device>/... when it exists")
    ap.add_argument("--save-lut", action="store_true", help="write the fresh LUT to profiles/<device>/...")
    ap.add_argument("--study", help="take fold set (b) from this search study's recommended trial")
    ap.add_argument("--storage", help="the study's storage URL")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    if args.lut and len(args.models) > 1:
        ap.error("--lut FILE is one model's LUT: give one model with --models")
    set_threads(1)
    device = load_device(args.device)
    results = [bench_model(m, args.resolution, device, args) for m in args.models]
    if args.json:
        write_json_atomic(args.json, {"schema": "latopt.bench_export/1", "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
