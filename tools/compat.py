"""The compatibility table (docs/compatibility.md): which timm / torchvision / latopt models of the mobile-CNN and
ResNet families latopt can change, checked by folding them.

For each model name (random weights, seed 0, one 3xRxR input, default R = 32): its blocks as the adapters see
them (latopt.adapters), how many fold in exact mode and how many in paper mode only (ResNet BasicBlocks, VGG
conv pairs), how many may only be dropped (residual squeeze-excitation blocks), the fold check of
:func:`latopt.nets.block_table.check_fold` (random BN statistics; every block that folds, against the linearised
network) with its worst per-block relative error — over all positions in exact mode, in the interior in paper
mode — and the whole model's (float64: the fold algebra; float32: with float32 rounding, next to the unfolded
network's own float32 rounding), and for what is not changeable the reasons.

A model *folds* when at least one of its blocks folds and every folded block is within 1e-4
(FOLD_CHECK_TOLERANCE) of its linearised twin: in exact mode, or, where its blocks fold only in paper mode,
in paper mode's interior; in exact mode the whole model folded in float64 must be within 1e-4 as well.

    python tools/compat.py                       # all of MODELS -> results/compatibility/compat.json
    python tools/compat.py --models a,b --out -  # a few, printed as JSON
    python tools/compat.py --models a,b --merge  # re-check a few, their records replaced in the file

The published file is written only by a check of every model (or ``--merge``) in which every model could be
checked; a name latopt cannot build, or a resolution out of range, is refused in one line (exit 2) before any
model is checked.
    python tools/regenerate.py                   # docs/compatibility.md from that file (generator "compatibility")

tests/test_compat.py re-checks a few models live against the file, and test_readme's regenerate check keeps the
page current with the file.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

from latopt.constants import FOLD_CHECK_TOLERANCE  # noqa: E402

SCHEMA = "latopt.compat/1"
DEFAULT_OUT = ROOT / "results" / "compatibility" / "compat.json"

MODELS: tuple[str, ...] = (
    # MobileNetV2 / EfficientNet-lite (the names latopt started with)
    "mobilenetv2_035", "mobilenetv2_050", "mobilenetv2_075", "mobilenetv2_100", "mobilenetv2_140",
    "mobilenetv2_110d", "mobilenetv2_120d",
    "efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2", "efficientnet_lite3", "efficientnet_lite4",
    "tf_efficientnet_lite0", "tf_efficientnet_lite1", "tf_efficientnet_lite2", "tf_efficientnet_lite3",
    "tf_efficientnet_lite4",
    # no squeeze-excitation, ReLU family
    "mnasnet_050", "mnasnet_075", "mnasnet_100", "mnasnet_140", "spnasnet_100", "fbnetc_100", "mobilenetv1_100",
    "mobilenetv1_125", "tf_mobilenetv3_large_minimal_100", "tf_mobilenetv3_small_minimal_100",
    # EdgeResidual (fused expansion)
    "efficientnet_es", "efficientnet_em", "efficientnet_el", "tf_efficientnet_es", "mobilenet_edgetpu_100",
    "mobilenet_edgetpu_v2_xs", "mobilenet_edgetpu_v2_s",
    # squeeze-excitation in some or all blocks, hard-swish / SiLU
    "mobilenetv3_small_050", "mobilenetv3_small_100", "mobilenetv3_large_075", "mobilenetv3_large_100",
    "tf_mobilenetv3_large_100", "lcnet_050", "lcnet_100", "mnasnet_small", "semnasnet_100", "mixnet_s",
    "fbnetv3_b", "efficientnet_b0", "tinynet_e", "mobilenetv4_conv_small",
    # ResNets
    "resnet18", "resnet34", "resnet26", "resnet50", "resnet18d", "resnet20_cifar", "resnet32_cifar",
    "resnet44_cifar", "resnet56_cifar",
    # VGG (conv pairs)
    "vgg11_bn", "vgg16_bn", "vgg11_cifar", "vgg16_cifar",
    # torchvision
    "torchvision/mobilenet_v2", "torchvision/mobilenet_v3_small", "torchvision/mobilenet_v3_large",
    "torchvision/mnasnet0_5", "torchvision/mnasnet1_0", "torchvision/resnet18", "torchvision/resnet50",
    "torchvision/efficientnet_b0", "torchvision/vgg11", "torchvision/vgg11_bn", "torchvision/vgg16_bn",
)


def check_model(name: str, resolution: int = 32, seed: int = 0) -> dict:
    """The compatibility record of one model name (module docstring)."""
    import torch

    from latopt.nets.block_table import check_fold, unrecognised_parts
    from latopt.nets.blocks import find_blocks
    from latopt.nets.models import build_model

    torch.manual_seed(seed)
    model = build_model(name, 10)
    blocks = find_blocks(model)
    exact = [b for b in blocks if b.foldable and "exact" in b.fold_modes]
    paper_only = [b for b in blocks if b.foldable and "exact" not in b.fold_modes]
    drop_only = [b for b in blocks if not b.foldable and b.variants]
    reasons = Counter(b.reason.split(" (")[0] for b in blocks if not b.variants)
    others = unrecognised_parts(model, tuple(b.path for b in blocks))
    rec: dict = {"model": name, "blocks": len(blocks), "fold_exact": len(exact), "fold_paper_only": len(paper_only),
                 "drop_only": len(drop_only), "not_foldable": dict(sorted(reasons.items())),
                 "unrecognised": {o.kind: len(o.paths) for o in others if o.reason != "a plain layer outside any block"
                                  and "a single convolution" not in o.reason}}
    mode = "exact" if exact else "paper" if paper_only else None
    if mode is not None:
        res = check_fold(model, resolution, mode, seed=seed, batch=1)
        assert res.output is not None and res.float64 is not None   # mode is one its blocks fold in
        rec["check"] = {"mode": mode, "folded": res.folded, "per_block_worst": res.worst(interior=mode == "paper"),
                        "whole_model": res.output.max_rel, "noise_floor": res.noise_floor,
                        "whole_model_float64": res.float64.max_rel}
    rec["folds"] = mode is not None and rec["check"]["per_block_worst"] <= FOLD_CHECK_TOLERANCE and (
        mode == "paper" or rec["check"]["whole_model_float64"] <= FOLD_CHECK_TOLERANCE)
    return rec


def why_not(rec: dict) -> str:
    """One line: why a model does not fold."""
    if rec.get("error"):
        return f"could not be checked: {rec['error']}"
    if rec.get("check"):
        c = rec["check"]
        err = max(c["per_block_worst"], c["whole_model_float64"] if c["mode"] == "exact" else 0.0)
        return f"fold error {err:.1e} > {FOLD_CHECK_TOLERANCE:g}"
    parts = [f"{n} × {r}" for r, n in rec["not_foldable"].items()]
    if rec.get("drop_only"):
        parts.insert(0, f"{rec['drop_only']} × squeeze-excitation, residual: drop only")
    parts += [f"{n} × {k} (no block adapter)" for k, n in rec["unrecognised"].items()]
    return "; ".join(parts) or "no blocks latopt knows"


def render(path: Path) -> str:
    """The table of docs/compatibility.md from ``path`` (this tool's JSON)."""
    data = json.loads(Path(path).read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a {SCHEMA} file")
    recs = data["models"]
    ok = [r for r in recs if r["folds"]]
    exact = [r for r in ok if r["check"]["mode"] == "exact"]
    drops = [r for r in recs if r.get("drop_only")]
    lines = [f"{len(ok)} of {len(recs)} model names fold (random weights, seed {data['seed']}, "
             f"{data['resolution']}x{data['resolution']}, batch 1): {len(exact)} in exact mode, "
             f"{len(ok) - len(exact)} (ResNets of BasicBlocks, VGGs) in paper mode's interior; "
             f"{len(drops)} have residual squeeze-excitation blocks that may be dropped "
             f"({sum(r['drop_only'] for r in drops)} blocks). Errors are relative to the max |reference| of "
             "what they compare (random BN statistics): *per block*, the worst folded block against its "
             "linearised twin, in float32; *whole model*, the logits, folded and run in float64 (the fold "
             "algebra) and in float32; *float32 rounding*, the unfolded linearised network in float32 against "
             "float64 (the worse of logits and last block's output), which the float32 whole-model error is of "
             "the order of. In paper mode the whole-model "
             "errors include the border ring, which that mode does not fold exactly (not gated).", "",
             "| model | blocks | fold (exact) | fold (paper only) | drop only | mode | per block | whole model "
             "(float64) | whole model (float32) | float32 rounding | not changeable |",
             "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---|"]
    for r in ok:
        c = r["check"]
        nf = "; ".join(f"{n} × {k}" for k, n in r["not_foldable"].items()) or "-"
        lines.append(f"| `{r['model']}` | {r['blocks']} | {r['fold_exact']} | {r['fold_paper_only']} | "
                     f"{r['drop_only']} | {c['mode']} | {c['per_block_worst']:.1e} | {c['whole_model_float64']:.1e} | "
                     f"{c['whole_model']:.1e} | {c['noise_floor']:.1e} | {nf} |")
    lines += ["", f"Not folding ({len(recs) - len(ok)}):", ""]
    lines += [f"- `{r['model']}` ({r['blocks']} blocks): {why_not(r)}" for r in recs if not r["folds"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from latopt.config import check_resolution
    from latopt.errors import LatoptError, first_line
    from latopt.files.readers import read_json
    from tools.bench_methods import Parser, refuse

    p = Parser(prog="compat", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", help="comma-separated names (default: MODELS)")
    p.add_argument("--resolution", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None,
                   help=f"JSON file, or - for stdout (default: the published {DEFAULT_OUT.relative_to(ROOT)}, "
                        "written only by a check of every model of MODELS, or with --merge)")
    p.add_argument("--merge", action="store_true",
                   help="replace the records of --models in the existing --out file (same resolution and seed), "
                        "keeping the others; the file lists each merge")
    a = p.parse_args(argv)
    out = DEFAULT_OUT if a.out is None else a.out
    if a.merge and (not a.models or out == "-"):
        p.error("--merge needs --models and a file --out")
    names = [n.strip() for n in a.models.split(",")] if a.models else list(MODELS)
    if not all(names) or len(set(names)) != len(names):
        p.error(f"--models {a.models!r}: give comma-separated model names, each once")
    if a.out is None and a.models and not a.merge:   # the published table is replaced only when asked
        p.error(f"--models checks a few models: the published {DEFAULT_OUT.relative_to(ROOT)} is replaced by a "
                "check of every model only; print them (--out -), write another file (--out FILE) or replace "
                "their records in it (--merge)")
    try:
        check_resolution(a.resolution, "--resolution")
        old = read_json(out, schema=SCHEMA, what="compatibility file") if a.merge else None
    except LatoptError as e:
        refuse(first_line(e, 400), "compat")
    if old is not None and not isinstance(old.get("models"), list):
        p.error(f"{out} holds no list of models; re-run it whole")
    if old is not None and (old.get("resolution"), old.get("seed")) != (a.resolution, a.seed):
        p.error(f"{out} was made at another resolution or seed; re-run it whole")
    from latopt.nets.models import build_model

    for n in names:   # a name latopt cannot build is bad input: refused before any model is checked
        try:
            build_model(n, 10)
        except LatoptError as e:
            refuse(f"--models: {first_line(e, 2000)}", "compat")
    recs = []
    for n in names:
        t = time.perf_counter()
        try:
            recs.append(check_model(n, a.resolution, a.seed))
        except LatoptError as e:   # bad input (e.g. a model of a fixed input size at another resolution)
            refuse(f"{n}: {first_line(e, 2000)}", "compat")
        except Exception as e:  # recorded, and the table lists it: a model that cannot be checked is a finding
            recs.append({"model": n, "blocks": 0, "folds": False, "error": f"{type(e).__name__}: {str(e)[:200]}"})
        print(f"{n}: folds={recs[-1]['folds']} ({time.perf_counter() - t:.1f} s)", file=sys.stderr, flush=True)
    failed = [r["model"] for r in recs if r.get("error")]
    if failed and a.out is None:   # a run with failures never replaces the published results
        print(f"compat: {len(failed)} models could not be checked ({', '.join(failed[:3])}); "
              f"{DEFAULT_OUT.relative_to(ROOT)} is kept as it was (--out FILE writes this run's records)",
              file=sys.stderr)
        return 1
    data = {"schema": SCHEMA, "resolution": a.resolution, "seed": a.seed, "tolerance": FOLD_CHECK_TOLERANCE,
            "command": "python tools/compat.py" + (f" --models {a.models}" if a.models else ""), "models": recs}
    if old is not None:
        new = {r["model"]: r for r in recs}
        merged = [*old.get("merged", []), {"command": data["command"] + " --merge", "models": names}]
        data = {**old, "schema": SCHEMA, "models": [new.pop(r["model"], r) for r in old["models"]]
                + list(new.values()), "merged": merged}
    text = json.dumps(data, indent=1) + "\n"
    if out == "-":
        print(text, end="")
    else:
        from latopt.files.artifacts import write_text_atomic

        write_text_atomic(Path(out), text)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
