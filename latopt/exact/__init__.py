"""Exact tools for fully connected ReLU networks on a box domain.

* :func:`analyze_stability` -- which units are stably active / inactive over the box (interval, LP, MILP
  via HiGHS), each verdict with a certificate (solver proof or two float64-checked witnesses);
* :func:`compress` / :func:`stability_compression` -- the seed's StabilityCompression: remove stable units,
  collapse affine layers; the result is a plain ``nn.Sequential`` verified equal on >= 100,000 points;
* :func:`enumerate_regions` -- the linear regions of a small network (counted, certified, plotted for 2-D);
* :func:`eps_network` / :class:`IndicatorNet` -- shallow rewrites built from the regions;
* :mod:`latopt.exact.mlp` -- Linear/ReLU classifiers on scikit-learn's digits, ``latopt.mlp/1`` checkpoints.
"""

from latopt.exact.analysis import StabilityAnalysis, UnitVerdict, analyze_stability
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

__all__ = [
    "Box",
    "CompressReport",
    "CompressionResult",
    "IndicatorNet",
    "RegionEnumeration",
    "RegionLimits",
    "ReluMLP",
    "StabilityAnalysis",
    "UnitVerdict",
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
    "region_margin",
    "sampled_patterns",
    "save_mlp",
    "stability_compression",
    "train_mlp",
    "verify_equal",
    "widths",
]
