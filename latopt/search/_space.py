"""The searched hyper-parameters: λ_c (log scale), τ, p and optionally the α granularity.

Ranges come from the run config's ``search`` section (a dataclass or a mapping); every range is
checked before a study is touched, so a bad range is one clear :class:`LatoptError` line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from latopt.constants import GRANULARITIES
from latopt.errors import LatoptError

if TYPE_CHECKING:  # pragma: no cover
    import optuna



@dataclass(frozen=True)
class Range:
    """A closed interval ``[lo, hi]``; ``log`` samples it on a log scale."""

    lo: float
    hi: float
    log: bool = False


@dataclass(frozen=True)
class SearchSpace:
    """What one trial samples. Defaults follow the Layer Folding paper's operating range."""

    lambda_c: Range = Range(0.05, 5.0, log=True)
    tau: Range = Range(0.5, 0.95)
    p: Range = Range(1.5, 4.0)
    granularity: tuple[str, ...] = ("block",)

    def validate(self) -> SearchSpace:
        for name, r in (("lambda_c", self.lambda_c), ("tau", self.tau), ("p", self.p)):
            if not (math.isfinite(r.lo) and math.isfinite(r.hi)):
                raise LatoptError(f"search range {name} = [{r.lo}, {r.hi}] is not finite")
            if r.lo > r.hi:
                raise LatoptError(f"search range {name} = [{r.lo}, {r.hi}] has lo > hi; swap the bounds")
            if r.log and r.lo <= 0:
                raise LatoptError(f"search range {name} = [{r.lo}, {r.hi}] is on a log scale and must be > 0")
        if self.lambda_c.lo <= 0:
            raise LatoptError(f"search range lambda_c = [{self.lambda_c.lo}, {self.lambda_c.hi}] must be > 0 (λ_c is searched on a log scale)")
        if not (0 < self.tau.lo and self.tau.hi <= 1):
            raise LatoptError(f"search range tau = [{self.tau.lo}, {self.tau.hi}] must lie in (0, 1] (fold threshold on α)")
        if self.p.lo <= 1:
            raise LatoptError(f"search range p = [{self.p.lo}, {self.p.hi}] must be > 1 (q = α^p needs p > 1)")
        if not self.granularity:
            raise LatoptError("search granularity list is empty; use [block], [activation] or both")
        bad = [g for g in self.granularity if g not in GRANULARITIES]
        if bad:
            raise LatoptError(f"search granularity {bad[0]!r} is unknown; choose from {', '.join(GRANULARITIES)}")
        return self

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Sample one point (Optuna records the distributions in the study)."""
        out: dict[str, Any] = {
            "lambda_c": trial.suggest_float("lambda_c", self.lambda_c.lo, self.lambda_c.hi, log=True),
            "tau": trial.suggest_float("tau", self.tau.lo, self.tau.hi, log=self.tau.log),
            "p": trial.suggest_float("p", self.p.lo, self.p.hi, log=self.p.log),
        }
        if len(self.granularity) > 1:
            out["granularity"] = trial.suggest_categorical("granularity", list(self.granularity))
        else:
            out["granularity"] = self.granularity[0]
        return out

    def base_params(self) -> dict[str, Any]:
        """Parameters recorded for the enqueued base trial: the weakest push, the strictest threshold."""
        params: dict[str, Any] = {"lambda_c": self.lambda_c.lo, "tau": self.tau.hi, "p": self.p.lo}
        if len(self.granularity) > 1:
            params["granularity"] = self.granularity[0]
        return params

    def as_dict(self) -> dict[str, Any]:
        return {
            "lambda_c": [self.lambda_c.lo, self.lambda_c.hi],
            "tau": [self.tau.lo, self.tau.hi],
            "p": [self.p.lo, self.p.hi],
            "granularity": list(self.granularity),
        }


def _get(section: Any, key: str, default: Any = None) -> Any:
    if section is None:
        return default
    if isinstance(section, Mapping):
        return section.get(key, default)
    return getattr(section, key, default)


def _range(value: Any, default: Range, name: str, *, log: bool = False) -> Range:
    if value is None:
        return default
    if isinstance(value, Range):
        return Range(value.lo, value.hi, log or value.log)
    if isinstance(value, Mapping):
        lo, hi = value.get("lo", value.get("low")), value.get("hi", value.get("high"))
    elif isinstance(value, (list, tuple)) and len(value) == 2:
        lo, hi = value
    else:
        lo = getattr(value, "lo", None)
        hi = getattr(value, "hi", None)
        if lo is None or hi is None:
            raise LatoptError(f"search range {name} must be [lo, hi], got {value!r}")
    try:
        return Range(float(lo), float(hi), log)
    except (TypeError, ValueError):
        raise LatoptError(f"search range {name} must be two numbers [lo, hi], got {value!r}") from None


def space_from_config(cfg: Any) -> SearchSpace:
    """Build and validate the space from ``cfg.search`` (missing keys keep the defaults)."""
    section = _get(cfg, "search")
    d = SearchSpace()
    gran = _get(section, "granularity", None)
    if gran is None:
        gran_t = d.granularity
    elif isinstance(gran, str):
        gran_t = (gran,)
    else:
        gran_t = tuple(str(g) for g in gran)
    return SearchSpace(
        lambda_c=_range(_get(section, "lambda_c"), d.lambda_c, "lambda_c", log=True),
        tau=_range(_get(section, "tau"), d.tau, "tau"),
        p=_range(_get(section, "p"), d.p, "p"),
        granularity=gran_t,
    ).validate()
