"""Plans as files: what the DP would do on a device, chosen without training, written as JSON.

``latopt search --method dp --plan-only`` writes one (:func:`plan_only` + :func:`write_plan`): the LUT's
times, the importance losses (``uniform``: no checkpoint; ``proxy``: the trained base, no fine-tuning) and
:func:`latopt.dp.select_plan`. ``latopt export --checkpoint CKPT --plan plan.json`` applies one to an
unfolded checkpoint (:func:`read_plan`, :func:`check_plan`) through the fold algebra and ships it with all
the export gates, on any device (a plan made for one device is how it is measured on another).

The file (schema ``latopt.plan/1``)::

    schema        "latopt.plan/1"; a reader refuses any other
    model, resolution            what the plan applies to (export refuses a checkpoint of another)
    num_classes   the base checkpoint's classes (proxy importance), null when the plan depends on no
                  checkpoint (uniform importance: then any head fits)
    task          the task the losses were measured on (proxy), or null
    lut           the device the times are from: {file, sha256 (of the LUT file's bytes), device, backend,
                  precision, batch, fold_mode}
    fold_mode     the fold mode the plan is applied in (the LUT's: its times are of that mode's folds)
    budget, importance, variants (the variants the blocks were allowed), base_checkpoint (proxy) or null
    blocks        {"<block index>": variant} for every block of the LUT ("none": left as it is; the blocks
                  of a span in the variants the span composes)
    spans         [[start, end, kernel], ...]: runs of consecutive blocks export merges into one
                  ``kernel``×``kernel`` convolution each (exact; :mod:`latopt.fold.merge`), [] when the LUT
                  times no span
    predicted     {asis_ms, ms, ratio, speedup}: the LUT's prediction of the as-is and planned networks
    selection     select_plan's info (target_ms, fastest_ms, loss, resolution, slack_ms, ...)
    losses        {"<block>": {variant: loss}} the DP chose over
    latopt_version, created

Public API::

    PLAN_SCHEMA
    plan_only(cfg, lut_path, *, budget, importance="uniform", base_checkpoint=None, variants=None,
              seed=0, progress=True) -> dict          the plan file's content (no training, no fine-tuning)
    write_plan(path, plan) -> Path;  read_plan(path) -> dict (checked)
    plan_variants(plan) -> {block: variant}           the changed blocks, as fold_blocks takes them
    check_plan(plan, path, *, model, resolution, num_classes)   LatoptError when it is not for that network
    format_plan_summary(plan, path) -> str
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from latopt import __version__
from latopt.artifacts import file_sha256, write_json_atomic
from latopt.config import RunConfig
from latopt.constants import LUT_VARIANTS
from latopt.dp.importance import candidates, variant_losses
from latopt.dp.stage import check_budget, select_plan
from latopt.errors import LatoptError
from latopt.latency.lut import load_lut
from latopt.log import get_logger
from latopt.readers import read_json

PLAN_SCHEMA = "latopt.plan/1"
PLAN_IMPORTANCE = ("uniform", "proxy")   # what a plan without training may be scored by
_LOG = get_logger("dp")


def plan_only(cfg: RunConfig, lut_path: str | Path, *, budget: float, importance: str = "uniform",
              base_checkpoint: str | Path | None = None, variants: Iterable[str] | None = None, seed: int = 0,
              progress: bool = True) -> dict[str, Any]:
    """The DP's plan for ``cfg``'s model and resolution on the LUT's device at ``budget``, chosen by
    :func:`latopt.dp.select_plan` over ``importance`` losses, without training anything: ``uniform`` needs
    no checkpoint; ``proxy`` scores each variant on the trained ``base_checkpoint`` (forward passes only).
    Returns the plan file's content (module docstring)."""
    t0 = time.perf_counter()
    budget = check_budget(budget)
    if importance not in PLAN_IMPORTANCE:
        raise LatoptError(f"importance {importance!r}: a plan made without training is scored by "
                          f"{' or '.join(PLAN_IMPORTANCE)} (finetune fine-tunes every candidate)", param="importance")
    if importance == "proxy" and base_checkpoint is None:
        raise LatoptError("importance 'proxy' scores the variants on a trained base: give base_checkpoint (latopt "
                          "train makes one), or use importance 'uniform', which needs no checkpoint", param="importance")
    lut = load_lut(lut_path, model=cfg.model.name, resolution=int(cfg.data.resolution), fold_mode=cfg.fold.mode)
    cands = candidates(lut, variants)
    num_classes = task_name = None
    if importance == "uniform":
        losses = variant_losses(cfg, None, None, cands, method="uniform")
    else:
        from latopt.data import load_task
        from latopt.layerfold import check_base

        base, arch, _ = check_base(cfg, base_checkpoint)
        task = load_task(cfg)
        if int(arch["num_classes"]) != task.num_classes:
            raise LatoptError(f"base checkpoint {base_checkpoint} has {arch['num_classes']} classes, task "
                              f"{task.name!r} has {task.num_classes}")
        num_classes, task_name = int(arch["num_classes"]), task.name
        losses = variant_losses(cfg, base, task, cands, method="proxy", seed=seed, progress=progress)
    plan, sel = select_plan(lut, losses, budget)
    blocks = {str(b.index): plan.get(b.index, "none") for b in lut.blocks}
    allowed = sorted({v for vs in cands.values() for v in vs if v != "none"}, key=LUT_VARIANTS.index)
    out = {
        "schema": PLAN_SCHEMA, "model": lut.model, "resolution": lut.resolution, "num_classes": num_classes,
        "task": task_name,
        "lut": {"file": str(lut_path), "sha256": file_sha256(lut_path), "device": lut.device, "backend": lut.backend,
                "precision": lut.precision, "batch": lut.batch, "fold_mode": lut.fold_mode},
        "fold_mode": lut.fold_mode, "budget": budget, "importance": importance, "variants": allowed,
        "base_checkpoint": None if base_checkpoint is None else str(base_checkpoint),
        "blocks": blocks, "spans": sel["spans"],
        "predicted": {"asis_ms": sel["asis_ms"], "ms": sel["predicted_ms"], "ratio": sel["ratio"],
                      "speedup": sel["asis_ms"] / sel["predicted_ms"]},
        "selection": sel, "losses": {str(b): ls for b, ls in sorted(losses.items())},
        "latopt_version": __version__, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": time.perf_counter() - t0,
    }
    if progress:
        _LOG.info(f"DP plan at budget {budget} on {lut.device}: {len(plan)} blocks changed {plan}; predicted "
                  f"{sel['predicted_ms']:.3f} ms = {sel['ratio']:.3f} of as-is {sel['asis_ms']:.3f} ms")
    return out


def write_plan(path: str | Path, plan: Mapping[str, Any]) -> Path:
    return write_json_atomic(path, dict(plan))


def read_plan(path: str | Path) -> dict[str, Any]:
    """A plan file, checked: its schema, the fields export needs, a variant per block; one line otherwise."""
    plan = read_json(path, schema=PLAN_SCHEMA, what="plan file")

    def bad(what: str) -> LatoptError:
        return LatoptError(f"plan file {path}: {what}; re-create it (latopt search's DP, plan only)", param="plan")

    for key in ("model", "fold_mode"):
        if not isinstance(plan.get(key), str) or not plan[key]:
            raise bad(f"{key} must be a non-empty string")
    for key, optional in (("resolution", False), ("num_classes", True)):
        v = plan.get(key)
        if not (optional and v is None) and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise bad(f"{key} must be a positive integer{' or null' if optional else ''}, not {v!r}")
    blocks = plan.get("blocks")
    if not isinstance(blocks, dict) or not all(isinstance(k, str) and k.isdigit() and v in LUT_VARIANTS
                                               for k, v in blocks.items()):
        raise bad(f"blocks must map block indices to variants ({', '.join(LUT_VARIANTS)})")
    spans = plan.get("spans", [])
    if not isinstance(spans, list) or not all(
            isinstance(s, list) and len(s) == 3 and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                                        for x in s) and s[1] > s[0] for s in spans):
        raise bad("spans must be a list of [start, end, kernel] with start < end")
    covered = [i for s in spans for i in range(s[0], s[1] + 1)]
    if len(set(covered)) != len(covered):
        raise bad("its spans overlap")
    if any(blocks.get(str(i), "none") not in ("full", "pw", "drop") for i in covered):
        raise bad("a block of a span must be full, pw or drop (a span merges affine blocks only)")
    return plan


def plan_variants(plan: Mapping[str, Any]) -> dict[int, str]:
    """The blocks a plan changes, {block index: variant} (``none`` left out), as ``fold_blocks`` takes them."""
    return {int(k): v for k, v in sorted(plan["blocks"].items(), key=lambda kv: int(kv[0])) if v != "none"}


def check_plan(plan: Mapping[str, Any], path: str | Path, *, model: str, resolution: int, num_classes: int) -> None:
    """LatoptError (one line) when the plan was made for another model, resolution or number of classes."""
    have = {"model": model, "resolution": resolution, "num_classes": num_classes}
    for key, value in have.items():
        want = plan.get(key)
        if want is not None and want != value:
            raise LatoptError(f"plan file {path} was made for {key} {want!r}, the checkpoint has {value!r}: make a "
                              "plan for this network (latopt search's DP, plan only)", param="plan")


def format_plan_summary(plan: Mapping[str, Any], path: str | Path) -> str:
    p, changed = plan["predicted"], {str(k): v for k, v in plan_variants(plan).items()}
    spans = "".join(f"; span {a}-{b} as one {k}x{k} conv" for a, b, k in plan.get("spans", []))
    return (f"DP plan at budget {plan['budget']} ({plan['importance']} importance) for {plan['model']} @ "
            f"{plan['resolution']}px on {plan['lut']['device']}: changed {len(changed)}/{len(plan['blocks'])} blocks "
            f"{changed}{spans}; LUT latency {p['asis_ms']:.3f} → {p['ms']:.3f} ms "
            f"({p['speedup']:.2f}x); wrote {path}")
