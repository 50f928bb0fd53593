"""Fully connected ReLU networks as plain float64 arrays, and the input box they are analysed on.

:class:`ReluMLP` is the one representation every exact tool works on: ``weights[k]`` has shape
``(n_{k+1}, n_k)``, hidden layers ``0 .. L-1`` are followed by ReLU, the last layer is affine. It is built
from an ``nn.Module`` with :func:`from_module` (only ``Linear``/``ReLU`` sequences are accepted; anything else
is a :class:`~latopt.errors.LatoptError` naming the module) and turned back into a plain ``nn.Sequential``
with :meth:`ReluMLP.to_module`. All arithmetic here is float64 (the "re-check by a float64 forward pass").

A unit is *active* at ``x`` when its pre-activation ``z(x) > 0`` (``ReLU(0) = 0``: a unit at zero is inactive).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from latopt.errors import LatoptError
from latopt.exact.exact_record import BoxRecord


@dataclass(frozen=True)
class Box:
    """An axis-aligned box ``lo <= x <= hi`` (float64, ``lo < hi`` in every coordinate)."""

    lo: np.ndarray
    hi: np.ndarray

    def __post_init__(self) -> None:
        lo = np.asarray(self.lo, dtype=np.float64).reshape(-1)
        hi = np.asarray(self.hi, dtype=np.float64).reshape(-1)
        if lo.size == 0 or lo.shape != hi.shape:
            raise LatoptError(f"box is empty: lo has {lo.size} and hi has {hi.size} coordinates; give LO,HI such as 0,1",
                              param="box")
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
            raise LatoptError("box bounds must be finite numbers; give LO,HI such as 0,1", param="box")
        bad = np.flatnonzero(lo >= hi)
        if bad.size:
            i = int(bad[0])
            kind = "inverted" if lo[i] > hi[i] else "empty (zero width)"
            raise LatoptError(f"box is {kind} in coordinate {i}: lo={lo[i]:g} must be < hi={hi[i]:g}; give LO,HI with "
                              "LO < HI", param="box")
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)

    @property
    def dim(self) -> int:
        return int(self.lo.size)

    @property
    def center(self) -> np.ndarray:
        return (self.lo + self.hi) / 2

    @property
    def diameter(self) -> float:
        return float(np.linalg.norm(self.hi - self.lo))

    @classmethod
    def uniform(cls, dim: int, lo: float, hi: float) -> Box:
        return cls(np.full(dim, float(lo)), np.full(dim, float(hi)))

    @classmethod
    def parse(cls, spec: str, dim: int) -> Box:
        """``"LO,HI"`` -> the box ``[LO, HI]^dim``."""
        parts = [p.strip() for p in str(spec).split(",")]
        if not spec or not spec.strip() or len(parts) != 2 or not all(parts):
            raise LatoptError(f"box {spec!r} is not LO,HI (two numbers, e.g. 0,1)", param="box")
        try:
            lo, hi = float(parts[0]), float(parts[1])
        except ValueError:
            raise LatoptError(f"box {spec!r} is not LO,HI (two numbers, e.g. 0,1)", param="box") from None
        return cls.uniform(dim, lo, hi)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.lo + (self.hi - self.lo) * rng.random((n, self.dim))

    def corners(self, max_count: int, rng: np.random.Generator) -> np.ndarray:
        """All ``2^dim`` corners when that is at most ``max_count``, else ``max_count`` random distinct-ish ones."""
        if self.dim <= 20 and 2**self.dim <= max_count:
            bits = (np.arange(2**self.dim)[:, None] >> np.arange(self.dim)[None, :]) & 1
        else:
            bits = rng.integers(0, 2, size=(max_count, self.dim))
        return np.where(bits.astype(bool), self.hi, self.lo)

    def contains(self, x: np.ndarray, tol: float = 0.0) -> np.ndarray:
        x = np.atleast_2d(x)
        return np.all((x >= self.lo - tol) & (x <= self.hi + tol), axis=1)

    def clip(self, x: np.ndarray) -> np.ndarray:
        return np.clip(x, self.lo, self.hi)

    def record(self) -> BoxRecord:
        """The box as the reports have it: one number each for lo and hi when every coordinate agrees."""
        if np.all(self.lo == self.lo[0]) and np.all(self.hi == self.hi[0]):
            return BoxRecord(lo=float(self.lo[0]), hi=float(self.hi[0]), dim=self.dim)
        return BoxRecord(lo=[float(v) for v in self.lo], hi=[float(v) for v in self.hi], dim=self.dim)

    def to_json(self) -> dict[str, Any]:
        """:meth:`record` as JSON (certificates.json's box)."""
        return self.record().model_dump(mode="json")


@dataclass(frozen=True)
class ReluMLP:
    """``y = W_L relu(... relu(W_0 x + b_0) ...) + b_L`` in float64."""

    weights: tuple[np.ndarray, ...]
    biases: tuple[np.ndarray, ...]
    _sizes: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        ws = tuple(np.array(w, dtype=np.float64, copy=True) for w in self.weights)
        bs = tuple(np.array(b, dtype=np.float64, copy=True).reshape(-1) for b in self.biases)
        if not ws or len(ws) != len(bs):
            raise LatoptError("a ReLU network needs at least one Linear layer (and one bias per layer)")
        sizes = [ws[0].shape[1]]
        for k, (w, b) in enumerate(zip(ws, bs, strict=True)):
            if w.ndim != 2 or w.shape[1] != sizes[-1] or b.shape != (w.shape[0],):
                raise LatoptError(f"layer {k}: weight {w.shape} / bias {b.shape} do not chain from width {sizes[-1]}")
            if not (np.all(np.isfinite(w)) and np.all(np.isfinite(b))):
                raise LatoptError(f"layer {k} has non-finite weights (NaN or inf); the checkpoint is corrupt")
            sizes.append(w.shape[0])
        for a in (*ws, *bs):
            a.setflags(write=False)
        object.__setattr__(self, "weights", ws)
        object.__setattr__(self, "biases", bs)
        object.__setattr__(self, "_sizes", tuple(int(s) for s in sizes))

    # -- shape ---------------------------------------------------------------------------------------
    @property
    def sizes(self) -> tuple[int, ...]:
        """``(n_in, n_1, ..., n_L, n_out)``."""
        return self._sizes

    @property
    def hidden(self) -> tuple[int, ...]:
        return self._sizes[1:-1]

    @property
    def n_hidden_layers(self) -> int:
        return len(self.weights) - 1

    @property
    def n_params(self) -> int:
        return int(sum(w.size + b.size for w, b in zip(self.weights, self.biases, strict=True)))

    # -- evaluation (float64) --------------------------------------------------------------------------
    def preactivations(self, x: np.ndarray) -> list[np.ndarray]:
        """Pre-activations of every hidden layer, each ``(N, n_k)``, at points ``x`` ``(N, n_in)``."""
        h = np.atleast_2d(np.asarray(x, dtype=np.float64))
        out = []
        for w, b in zip(self.weights[:-1], self.biases[:-1], strict=True):
            z = h @ w.T + b
            out.append(z)
            h = np.maximum(z, 0.0)
        return out

    def forward(self, x: np.ndarray) -> np.ndarray:
        h = np.atleast_2d(np.asarray(x, dtype=np.float64))
        for w, b in zip(self.weights[:-1], self.biases[:-1], strict=True):
            h = np.maximum(h @ w.T + b, 0.0)
        return h @ self.weights[-1].T + self.biases[-1]

    def patterns(self, x: np.ndarray) -> np.ndarray:
        """Activation patterns ``(N, total hidden units)`` as bools (``z > 0``)."""
        zs = self.preactivations(x)
        if not zs:
            return np.zeros((np.atleast_2d(x).shape[0], 0), dtype=bool)
        return np.concatenate([z > 0 for z in zs], axis=1)

    # -- conversion ------------------------------------------------------------------------------------
    def to_module(self, dtype: torch.dtype | None = None) -> nn.Sequential:
        """A plain ``nn.Sequential(Linear, ReLU, ..., Linear)`` (float32 unless ``dtype`` says otherwise)."""

        dtype = dtype or torch.float32
        mods: list[nn.Module] = []
        for k, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            lin = nn.Linear(w.shape[1], w.shape[0]).to(dtype)
            with torch.no_grad():
                lin.weight.copy_(torch.from_numpy(np.array(w)))
                lin.bias.copy_(torch.from_numpy(np.array(b)))
            mods.append(lin)
            if k < len(self.weights) - 1:
                mods.append(nn.ReLU())
        return nn.Sequential(*mods).eval()


def _flatten_modules(module) -> list:
    if isinstance(module, nn.Sequential):
        out = []
        for m in module:
            out.extend(_flatten_modules(m))
        return out
    return [module]


def from_module(module) -> ReluMLP:
    """Read a ``Linear``/``ReLU`` network (nested ``nn.Sequential`` allowed) into a :class:`ReluMLP`.

    ``Identity`` and ``Dropout`` (a no-op at inference) are skipped, a leading ``Flatten`` is allowed, and a
    trailing ReLU becomes a hidden layer followed by an identity output layer. Any other module (another
    activation, a convolution, normalisation, ...) is a :class:`LatoptError` naming it.
    """

    if not isinstance(module, nn.Module):
        raise LatoptError(f"expected a torch nn.Module, got {type(module).__name__}")
    mods = _flatten_modules(module)
    if not isinstance(module, nn.Sequential) and not isinstance(module, nn.Linear):
        raise LatoptError(
            f"{type(module).__name__} is not an nn.Sequential of Linear and ReLU layers; "
            "the exact tools only handle fully connected ReLU networks"
        )
    weights: list[np.ndarray] = []
    biases: list[np.ndarray] = []
    expect_linear = True
    for i, m in enumerate(mods):
        if isinstance(m, (nn.Identity, nn.Dropout)) or (isinstance(m, nn.Flatten) and i == 0):
            continue
        if isinstance(m, nn.Linear):
            if not expect_linear:
                raise LatoptError(f"module {i} (Linear) follows another Linear without a ReLU; merge them or insert a ReLU")
            w = m.weight.detach().cpu().double().numpy()
            b = m.bias.detach().cpu().double().numpy() if m.bias is not None else np.zeros(w.shape[0])
            weights.append(w)
            biases.append(b)
            expect_linear = False
        elif type(m) is nn.ReLU:
            if expect_linear:
                raise LatoptError(f"module {i} (ReLU) is not preceded by a Linear layer")
            expect_linear = True
        else:
            kind = "a convolution" if isinstance(m, nn.modules.conv._ConvNd) else "not supported"
            raise LatoptError(
                f"module {i} is {type(m).__name__} ({kind}); the exact tools handle only Linear and ReLU layers "
                "(fully connected ReLU networks)"
            )
    if not weights:
        raise LatoptError("the network has no Linear layer")
    if expect_linear:  # ends with ReLU: add an identity output layer
        n = weights[-1].shape[0]
        weights.append(np.eye(n))
        biases.append(np.zeros(n))
    return ReluMLP(tuple(weights), tuple(biases))


def float_slack(w: np.ndarray, mag_in: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A bound on the float64 rounding error of ``w @ x + b`` for ``|x| <= mag_in`` (used to keep bounds sound)."""
    n = w.shape[1] + 1
    gamma = 2.0 * n * np.finfo(np.float64).eps
    return gamma * (np.abs(w) @ mag_in + np.abs(b))
