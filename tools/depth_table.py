"""The Layer Folding paper's depth experiment, as latopt runs it (docs/resnet-fold.md; protocol in
docs/evaluation.md, "the Layer Folding paper's ResNet experiment, on Fashion-MNIST"): per λ_c, the blocks folded,
the non-linear layers left, the test accuracy against the as-is network and the measured speed-up.

The runs are ``tools/bench_methods.py``'s (``--methods asis lf-uniform --lambdas ...``), published with its
``publish`` stage into ``results/resnet-fold/<network>/``; this module only reads what was published:

    python tools/depth_table.py results/resnet-fold/resnet20     # the table, as docs/resnet-fold.md holds it

Non-linear layers are counted in each cell's exported ONNX graph (:func:`onnx_nonlinear`, recorded at publish):
the activations the shipped file computes, uses not modules (a module applied twice counts twice).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):   # run as a script: the checkout's root, for tools.<module>
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from tools import bench_methods as bm  # noqa: E402
from tools.compare import t_interval  # noqa: E402

# ONNX operators that are a non-linear activation layer (SiLU exports as Sigmoid + Mul: its Sigmoid counts)
NONLINEAR_OPS = frozenset({"Relu", "Clip", "HardSwish", "HardSigmoid", "Sigmoid", "LeakyRelu", "PRelu", "Elu",
                           "Tanh", "Mish", "Gelu", "Selu", "Softplus"})
SMALL_PT = 1.0   # the protocol's words: a drop is "small" when its interval lies within 1 point


def onnx_nonlinear(path: str | Path) -> int:
    """The non-linear activation nodes (:data:`NONLINEAR_OPS`) in an ONNX file's graph, subgraphs included."""
    import onnx

    def count(g: Any) -> int:
        n = 0
        for node in g.node:
            n += node.op_type in NONLINEAR_OPS
            n += sum(count(a.g) for a in node.attribute if a.type == onnx.AttributeProto.GRAPH)
        return n
    return count(onnx.load(str(path), load_external_data=False).graph)


def _quartiles(r: dict[str, Any], res: str) -> list[float] | None:
    q = r.get("speedup", {}).get(res, {}).get("fp32", {}).get("vs_fp32_asis")
    return None if q is None else [float(v) for v in q]


def depth_rows(R: bm.Results) -> list[dict[str, Any]]:
    """One row per method (base, asis, each λ_c): per seed its blocks folded, non-linear layers, fp32 ONNX test
    accuracy and speed-up [median, q1, q3]; the mean accuracy difference from ``asis`` with its 95 % t-interval
    over seeds (paired by seed), and the protocol's words."""
    asis = {s: r["onnx_acc"] for s, r in R.by_method.get("asis", {}).items() if "onnx_acc" in r}
    rows = []
    for meth in R.methods():
        recs = dict(sorted(R.by_method[meth].items()))
        acc = {s: r["test_acc"] if meth == "base" else r.get("onnx_acc") for s, r in recs.items()}
        row: dict[str, Any] = {
            "method": meth, "seeds": list(recs), "acc": [acc[s] for s in recs],
            "folded": [r.get("n_folded", 0 if meth == "asis" else None) for r in recs.values()],
            "nonlinear": [r.get("nonlinear_ops") for r in recs.values()],
            "speedup": [_quartiles(r, R.res) for r in recs.values()],
            "diff": None, "small": None, "faster": None}
        if meth.startswith("lf-"):
            paired = [acc[s] - asis[s] for s in recs if s in asis and acc[s] is not None]
            if len(paired) >= 2:
                mean, lo, hi, _, _ = t_interval(paired)
                row["diff"] = (mean, lo, hi)
                row["small"] = lo >= -SMALL_PT / 100
            sp = row["speedup"]
            if sp and all(q is not None for q in sp):
                row["faster"] = all(q[1] > 1 for q in sp)
        rows.append(row)
    return rows


def _ints(v: list[Any]) -> str:
    return ", ".join("–" if x is None else str(x) for x in v)


def _words(flag: bool | None, yes: str, no: str) -> str:
    return "–" if flag is None else (yes if flag else no)


def render_depth(root: Path) -> str:
    """The table of docs/resnet-fold.md from ``results/resnet-fold/<network>/`` (bench_methods' publish)."""
    if not (Path(root) / "run.json").is_file():
        return (f"No results yet: `results/{Path(root).parent.name}/{Path(root).name}/run.json` is written by "
                "`tools/bench_methods.py publish` when the run's final interleaved run is done.\n")
    R = bm.load_results(Path(root))
    rows = depth_rows(R)
    base_nl = next((r["nonlinear"] for r in rows if r["method"] == "asis"), [])
    head = ["network", "λ_c", "seeds", "blocks folded (per seed)", "non-linear layers (per seed, ONNX)",
            "test acc fp32 (%)", "vs as-is (pt, 95 % t over seeds)", f"speed-up fp32 @{R.res} (per seed: median, q1–q3)",
            "small drop", "faster"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        meth = r["method"]
        lam = meth.split("@", 1)[1] if "@" in meth else "–"
        name = {"base": "base (trained)", "asis": "as-is (fine-tuned alike: the reference)"}.get(meth, "Layer Folding")
        acc = [a for a in r["acc"] if a is not None]
        acc_text = "–" if not acc else (f"{100 * np.mean(acc):.2f} ± {100 * np.std(acc, ddof=1):.2f}" if len(acc) > 1
                                        else f"{100 * acc[0]:.2f}")
        diff = "–" if r["diff"] is None else "{:+.2f} [{:+.2f}, {:+.2f}]".format(*(100 * v for v in r["diff"]))
        sp = "–" if meth in ("base", "asis") else "; ".join(
            "–" if q is None else f"{q[0]:.2f}× ({q[1]:.2f}–{q[2]:.2f})" for q in r["speedup"])
        out.append("| " + " | ".join([name, lam, str(len(r["seeds"])), _ints(r["folded"]) if meth != "base" else "–",
                                      _ints(r["nonlinear"]) if meth != "base" else "–", acc_text, diff, sp,
                                      _words(r["small"], "yes", "no"), _words(r["faster"], "yes", "no")]) + " |")
    run = R.run
    g = (run.get("groups") or [run])[0]
    m = g["measure"].get(R.res, {})
    out += ["", (f"{run['model']} on {run['task']} at {R.res} px, seeds {', '.join(map(str, run['seeds']))}; "
                 f"{run['schedule']['base_epochs']} base epochs, {run['schedule']['prefold_epochs']} pre-fold + "
                 f"{run['schedule']['postfold_epochs']} post-fold epochs a fold, the as-is network "
                 f"{run['schedule']['ft_epochs']} more. As-is: {_ints(base_nl)} non-linear layers. "
                 f"Test accuracy of the exported fp32 ONNX file on the {run['sizes']['test']:,} test images. "
                 f"Speed-up: as-is time / folded time per round of one interleaved run of every network"
                 + (f" ({bm.machine(m['environment'])})" if "environment" in m else "")
                 + f"; code {str(run.get('commit'))[:7]}. Words (fixed by the protocol): *small drop* when the "
                 f"interval's lower end is above −{SMALL_PT:g} pt, *faster* when every seed's lower quartile is "
                 "above 1.")]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    import json

    from latopt.errors import first_line

    ap = bm.Parser(prog="depth_table", description="the depth table of a published run (docs/resnet-fold.md)")
    ap.add_argument("results_dir", metavar="RESULTS_DIR", help="e.g. results/resnet-fold/resnet20")
    root = Path(ap.parse_args(sys.argv[1:] if argv is None else argv).results_dir)
    if not (root / "run.json").is_file():
        ap.error(f"{root} holds no published run ({root / 'run.json'} is missing): `tools/bench_methods.py "
                 "publish --results DIR` writes it when the run's final interleaved run is done")
    for f in [root / "run.json", *sorted((root / "cells").glob("*.json"))]:   # each file read is JSON
        try:
            json.loads(f.read_text())
        except (ValueError, OSError) as e:   # truncated, not UTF-8, unreadable
            ap.error(f"{f} is not a JSON file bench_methods published ({first_line(e)}); publish the run again")
    try:
        text = render_depth(root)
    except (KeyError, TypeError, ValueError, IndexError) as e:   # a published file edited by hand
        ap.error(f"{root} is not a run bench_methods published ({type(e).__name__}: {first_line(e)}); "
                 "publish the run again")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
