"""Exact tools for fully connected ReLU networks on a box domain.

* :func:`analyze_stability` -- which units are stably active / inactive over the box (interval, LP, MILP
  via HiGHS), each verdict with a certificate (solver proof or two float64-checked witnesses);
* :func:`compress` / :func:`stability_compression` -- the seed's StabilityCompression: remove stable units,
  collapse affine layers; the result is a plain ``nn.Sequential`` verified equal on >= 100,000 points;
* :func:`enumerate_regions` -- the linear regions of a small network (counted, certified, plotted for 2-D);
* :func:`eps_network` / :class:`IndicatorNet` -- shallow rewrites built from the regions;
* :mod:`latopt.exact.mlp` -- Linear/ReLU classifiers on scikit-learn's digits, ``latopt.mlp/1`` checkpoints;
* :mod:`latopt.exact.exact_record` -- the validated records the tools return and write (:class:`Verification`,
  :class:`Widths`, :class:`CompressRecord`, and the ``latopt compress | regions | shallow`` reports
  :class:`CompressToolReport`, :class:`RegionsReport`, :class:`ShallowReport`, read back with :func:`read_report`).

The exact tools are an extra: ``pip install 'latopt[exact]'`` brings what they import beyond latopt's own
dependencies (HiGHS, through ``highspy``). This package imports lazily, so ``import latopt.exact`` works
without it; the first name used checks it (:func:`load`) and, when it is missing, raises
:class:`MissingExtra` (a LatoptError and an ImportError: one line saying what to install; the ``latopt``
commands ``train-mlp``, ``compress``, ``regions`` and ``shallow`` print it and exit 2).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

from latopt.errors import LatoptError, first_line

EXTRA_MODULES = ("highspy",)   # what pyproject.toml's optional-dependencies "exact" installs
INSTALL = "pip install 'latopt[exact]'"

# public name -> the module of this package that defines it
_API: dict[str, str] = {
    "StabilityAnalysis": "analysis", "UnitVerdict": "analysis", "analyze_stability": "analysis",
    "build_mlp": "mlp", "load_mlp": "mlp", "load_split": "mlp", "save_mlp": "mlp", "train_mlp": "mlp",
    "Box": "network", "ReluMLP": "network", "from_module": "network",
    "RegionEnumeration": "regions", "RegionLimits": "regions", "enumerate_regions": "regions",
    "plot_regions": "regions", "sampled_patterns": "regions",
    "IndicatorNet": "shallow", "collect_hyperplanes": "shallow", "eps_network": "shallow",
    "region_margin": "shallow", "widths": "shallow",
    "CompressionResult": "stability", "CompressReport": "stability", "compress": "stability",
    "stability_compression": "stability",
    "CompressRecord": "exact_record", "CompressToolReport": "exact_record", "RegionsReport": "exact_record", "ShallowReport": "exact_record",
    "Verification": "exact_record", "Widths": "exact_record", "read_report": "exact_record",
    "verify_equal": "verify",
}


class MissingExtra(LatoptError, ImportError):
    """The exact extra is not installed (or one of its modules does not import): exit 2 from the CLI."""


def load(module: str, what: str) -> ModuleType:
    """``latopt.exact.<module>``, after checking that the extra's modules import; :class:`MissingExtra`
    naming ``what`` (e.g. ``"latopt compress"``) and the command that installs them otherwise."""
    for name in EXTRA_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise MissingExtra(f"{what} needs the exact tools' extra: {INSTALL} ({name} does not import: "
                               f"{first_line(e, 120)})") from None
    return importlib.import_module(f"latopt.exact.{module}")


__all__ = [  # _API's names (tests/test_exact_extra.py checks that the two agree)
    "Box",
    "CompressRecord",
    "CompressReport",
    "CompressToolReport",
    "CompressionResult",
    "IndicatorNet",
    "RegionEnumeration",
    "RegionLimits",
    "RegionsReport",
    "ReluMLP",
    "ShallowReport",
    "StabilityAnalysis",
    "UnitVerdict",
    "Verification",
    "Widths",
    "analyze_stability",
    "build_mlp",
    "collect_hyperplanes",
    "compress",
    "enumerate_regions",
    "eps_network",
    "from_module",
    "load_mlp",
    "load_split",
    "plot_regions",
    "read_report",
    "region_margin",
    "sampled_patterns",
    "save_mlp",
    "stability_compression",
    "train_mlp",
    "verify_equal",
    "widths",
]

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ imports on first use
    from latopt.exact.analysis import StabilityAnalysis, UnitVerdict, analyze_stability
    from latopt.exact.exact_record import (
        CompressRecord,
        CompressToolReport,
        RegionsReport,
        ShallowReport,
        Verification,
        Widths,
        read_report,
    )
    from latopt.exact.mlp import build_mlp, load_mlp, load_split, save_mlp, train_mlp
    from latopt.exact.network import Box, ReluMLP, from_module
    from latopt.exact.regions import (
        RegionEnumeration,
        RegionLimits,
        enumerate_regions,
        plot_regions,
        sampled_patterns,
    )
    from latopt.exact.shallow import IndicatorNet, collect_hyperplanes, eps_network, region_margin, widths
    from latopt.exact.stability import CompressionResult, CompressReport, compress, stability_compression
    from latopt.exact.verify import verify_equal


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'latopt.exact' has no attribute {name!r}")
    value = getattr(load(_API[name], f"latopt.exact.{name}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
