"""Check that two networks compute the same function on a box, by dense sampling.

``verify_equal`` compares on ``n`` uniform points plus corners (all of them up to 4096, else 4096 random
ones) and the centre, in float64 *and* in the float32 the user will run, and raises
:class:`~latopt.errors.VerificationError` when ``max |f - g| > rtol * scale`` with
``scale = max(max |f|, 1e-12)`` over the same points; otherwise it returns the comparison as a
:class:`~latopt.exact.exact_record.Verification` record.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from latopt.errors import VerificationError
from latopt.exact.exact_record import Dtype, Verification
from latopt.exact.network import Box


def verification_points(box: Box, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([box.sample(n, rng), box.corners(4096, rng), box.center[None, :]])


def verify_equal(
    reference,
    candidate,
    box: Box,
    *,
    n: int = 100_000,
    rtol: float = 1e-5,
    seed: int = 0,
    points: np.ndarray | None = None,
    mask: Callable[[np.ndarray], np.ndarray] | None = None,
    what: str = "compressed network",
    dtypes: tuple[Dtype, ...] = ("float64", "float32"),
) -> Verification:
    """Max |reference - candidate| on sampled points of ``box``; VerificationError when above ``rtol * scale``.

    ``mask(points) -> bool array`` restricts the comparison (e.g. to points away from region boundaries); the
    record then says which fraction of the points it kept (``fraction_of_points_used``). Modules are compared
    in each of ``dtypes`` (default float64 and float32); their dtype is restored afterwards.
    """

    if not dtypes or not set(dtypes) <= {"float64", "float32"}:
        raise ValueError(f"dtypes must be float64 and/or float32, got {dtypes}")
    pts = verification_points(box, n, seed) if points is None else points
    fraction = None
    if mask is not None:
        keep = np.asarray(mask(pts), dtype=bool)
        fraction = float(keep.mean()) if keep.size else 0.0
        pts = pts[keep]
    if len(pts) == 0:
        raise VerificationError(f"no points left to compare the {what} on")
    diffs: dict[str, float] = {}
    scale = 0.0
    for dtype in dtypes:
        saved = {}
        for name, m in (("ref", reference), ("cand", candidate)):
            if isinstance(m, nn.Module):
                p = next(itertools.chain(m.parameters(), m.buffers()), None)
                saved[name] = p.dtype if p is not None else torch.float32
        try:
            ya = evaluate(reference, pts, dtype)
            yb = evaluate(candidate, pts, dtype)
        finally:
            for name, m in (("ref", reference), ("cand", candidate)):
                if name in saved:
                    m.to(saved[name])
        if ya.shape != yb.shape:
            raise VerificationError(f"{what}: output shape {yb.shape} differs from the original's {ya.shape}")
        if not diffs:
            scale = max(float(np.max(np.abs(ya))), 1e-12)
        diffs[dtype] = float(np.max(np.abs(ya - yb)))
    worst = max(diffs[d] / scale for d in dtypes)
    if not worst <= rtol:   # NaN too
        raise VerificationError(
            f"{what} differs from the original: max |diff| = {max(diffs.values()):.3g} "
            f"({worst:.3g} of the output scale {scale:.3g}; allowed {rtol:g}) on {len(pts)} points"
        )
    return Verification(
        points=int(len(pts)),
        max_abs_float64=diffs.get("float64"), max_rel_float64=_rel(diffs.get("float64"), scale),
        max_abs_float32=diffs.get("float32"), max_rel_float32=_rel(diffs.get("float32"), scale),
        output_scale=scale, rtol=rtol, ok=True, fraction_of_points_used=fraction,
    )


def _rel(diff: float | None, scale: float) -> float | None:
    return None if diff is None else diff / scale


def evaluate(fn, x: np.ndarray, dtype: str = "float64") -> np.ndarray:
    """Evaluate an ``nn.Module`` (cast to ``dtype`` in place), a ReluMLP (float64 on ``x`` rounded to ``dtype``) or a callable."""

    if isinstance(fn, nn.Module):
        tdt = torch.float64 if dtype == "float64" else torch.float32
        fn.to(tdt)
        fn.eval()
        out = []
        with torch.no_grad():
            for i in range(0, len(x), 65536):
                out.append(fn(torch.as_tensor(x[i : i + 65536], dtype=tdt)).double().numpy())
        return np.concatenate(out)
    if hasattr(fn, "forward"):
        return np.asarray(fn.forward(x.astype(dtype).astype(np.float64)), dtype=np.float64)
    return np.asarray(fn(x.astype(dtype).astype(np.float64)), dtype=np.float64)
