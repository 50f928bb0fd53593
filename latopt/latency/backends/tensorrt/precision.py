"""TensorRT's precision policy per version, and the GPUs each TensorRT release runs on (pure data and rules).

Precision (:func:`precision_plan`), after ``samples/python/strongly_type_autocast/sample.py`` in
github.com/NVIDIA/TensorRT:

- networks: TensorRT 8.6 ``create_network(1 << EXPLICIT_BATCH)`` (its ONNX parser needs an explicit-batch
  network). 10.x and 11.x: 0 — TensorRT 10 networks are always explicit-batch (``EXPLICIT_BATCH`` is
  "[DEPRECATED] Ignored", Python API ``Core/Builder.html``; 11 has no such member), and TensorRT 11 networks are
  always strongly typed (``STRONGLY_TYPED`` "Deprecated in TensorRT 11.0. Strongly typed mode is always enabled
  ... ignored", 11.0.0 ``_static/python-api/infer/Core/Builder.html``).
- fp16: TensorRT 8.6 and 10 set ``BuilderFlag.FP16`` on the fp32 ONNX model (weak typing; deprecated in 10,
  still there). TensorRT 11 removed ``BuilderFlag.FP16`` ("Removed Python APIs and Replacements":
  docs.nvidia.com/deeplearning/tensorrt/latest/api/migration/tensorrt-10x-to-11x-python-api-reference.html,
  replacement "Strong typing with ModelOpt AutoCast"), so fp16 there parses an FP16 copy of the ONNX model
  (:mod:`latopt.latency.backends.tensorrt.fp16`).
- fp32 clears ``BuilderFlag.TF32`` (on by default) so "fp32" means fp32 on Ampere and newer.
- int8 is refused (:func:`check_precision`, before TensorRT is imported): latopt builds no INT8 engines.

GPUs (:func:`check_compute_capability`): :data:`SM_SUPPORT` gives the compute capabilities each TensorRT release
runs on, :data:`NO_FP16` those without fp16 in TensorRT; a GPU that does not fit is one :class:`LatoptError`
line naming the TensorRT version to install.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from latopt.errors import LatoptError

SUPPORTED = "8.6, 10.x or 11.x"


@dataclass(frozen=True)
class PrecisionPlan:
    """How one precision is obtained on one TensorRT major version (pure data; see :func:`precision_plan`)."""

    major: int
    precision: str
    network_flags: tuple[str, ...]  # NetworkDefinitionCreationFlag members OR'd into create_network()
    set_flags: tuple[str, ...]  # BuilderFlag members to set
    clear_flags: tuple[str, ...]  # BuilderFlag members to clear (skipped when the version lacks them)
    fp16_onnx: bool  # parse an FP16 copy of the ONNX model (strongly typed fp16)

    def describe(self) -> str:
        if self.fp16_onnx:
            return "fp16: strongly typed network from an FP16 ONNX model (fp32 I/O)"
        if "FP16" in self.set_flags:
            return "fp16: BuilderFlag.FP16 on the fp32 ONNX model"
        return "fp32 (BuilderFlag.TF32 cleared)"


def tensorrt_version(version: str) -> tuple[int, int]:
    """(major, minor) of a TensorRT version string ("8.6.1.post1" → (8, 6)), read by ``packaging.version``."""
    try:
        release = Version(str(version)).release
    except InvalidVersion:
        raise LatoptError(f"cannot read the TensorRT version {version!r}") from None
    return release[0], (release + (0,))[1]


def check_precision(precision: str) -> None:
    """A one-line LatoptError unless TensorRT builds ``precision`` in latopt: fp32 or fp16 (no INT8 engines)."""
    if precision not in ("fp32", "fp16"):
        hint = ("; TensorRT INT8 is not supported by latopt: INT8 is ONNX Runtime static INT8 on the CPU "
                "(device profile cpu-int8)") if precision == "int8" else ""
        raise LatoptError(f"TensorRT precision must be fp32 or fp16, got {precision!r}{hint}", param="precision")


def precision_plan(version: str, precision: str) -> PrecisionPlan:
    """The builder settings for ``precision`` ("fp32" | "fp16") on TensorRT ``version`` (8.6, 10.x, 11.x)."""
    check_precision(precision)
    major, minor = tensorrt_version(version)
    if (major, minor) < (8, 6) or major == 9:
        raise LatoptError(f"TensorRT {version} is not supported: latopt needs TensorRT {SUPPORTED} "
                          f"(pip install 'tensorrt==8.6.1' for Maxwell/Pascal GPUs, else pip install -U tensorrt)")
    clear = ("TF32",) if precision == "fp32" else ()
    fp16_flag = ("FP16",) if precision == "fp16" else ()
    if major == 8:  # 8.6: explicit batch must be asked for; weak typing with BuilderFlag.FP16
        return PrecisionPlan(major, precision, ("EXPLICIT_BATCH",), fp16_flag, clear, False)
    if major == 10:  # explicit batch implicit (the flag is ignored); BuilderFlag.FP16 deprecated but present
        return PrecisionPlan(major, precision, (), fp16_flag, clear, False)
    return PrecisionPlan(major, precision, (), (), clear, precision == "fp16")  # 11+: strongly typed


# Compute capabilities each TensorRT release runs on (first release of a row → (lowest SM, highest SM or None:
# no upper bound known)). Sources: TensorRT 8.5.2 release notes ("8.5 will be the last release supporting
# Kepler (SM 3.x) ... Maxwell (SM 5.x) dropped in 9.0"), 8.6.1 support matrix (Maxwell to Hopper 9.0);
# 10.0-10.4 release notes ("Volta (SM 7.0) deprecated", 10.1 support matrix: "SM 7.0 or higher"); 10.5 release
# notes ("Volta support removed"); 10.8 release notes (Blackwell added); 11.x builds only for CUDA 13, whose
# lowest target is Turing (SM 7.5) — NVIDIA's 11.x support matrix is an interactive page not read here.
SM_SUPPORT: tuple[tuple[tuple[int, int], tuple[int, int], tuple[int, int] | None], ...] = (
    ((8, 6), (5, 0), (9, 0)),
    ((10, 0), (7, 0), (9, 0)),
    ((10, 5), (7, 5), (9, 0)),
    ((10, 8), (7, 5), None),
    ((11, 0), (7, 5), None),
)


def sm_range(version: str) -> tuple[tuple[int, int], tuple[int, int] | None]:
    """(lowest, highest or None) compute capability TensorRT ``version`` runs on (:data:`SM_SUPPORT`)."""
    v = tensorrt_version(version)
    rows = [row for row in SM_SUPPORT if row[0] <= v]
    if not rows:
        raise LatoptError(f"TensorRT {version} is not supported: latopt needs TensorRT {SUPPORTED}")
    return rows[-1][1], rows[-1][2]


# Compute capabilities without FP16 in TensorRT's hardware/precision table (8.x support matrices: 6.1, e.g.
# TITAN X (Pascal) and Tesla P4/P40, and Maxwell 5.0/5.2 have only low-rate FP16: "FP16 No").
NO_FP16 = ((5, 0), (5, 2), (6, 1))


def check_compute_capability(version: str, sm: tuple[int, int], gpu: str, precision: str = "fp32") -> None:
    """LatoptError (one line naming the TensorRT version to install) when TensorRT ``version`` does not run
    on a GPU of compute capability ``sm``, or (one line, about ``precision``) when that GPU has no fp16 in
    TensorRT."""
    lo, hi = sm_range(version)
    if lo <= sm and (hi is None or sm <= hi):
        if precision == "fp16" and tuple(sm) in NO_FP16:
            raise LatoptError(f"TensorRT has no fp16 on {gpu} (compute capability {sm[0]}.{sm[1]}: low-rate FP16 "
                              f"only, 'FP16: No' in NVIDIA's support matrix); use precision fp32 (the device "
                              f"profile titanx)", param="precision")
        return
    cc = f"{sm[0]}.{sm[1]}"
    if sm < (5, 0):
        fix = ("no TensorRT release latopt supports runs on it (TensorRT 8.6 needs compute capability >= 5.0); "
               "use the device profile gpu-torch or cpu")
    elif sm < (7, 0):
        fix = ("install TensorRT 8.6, the last release for Maxwell and Pascal: pip install 'tensorrt==8.6.1' "
               "(Python <= 3.11)")
    elif sm < (7, 5):
        fix = "install TensorRT 10.4 or older (Volta was removed in 10.5): pip install 'tensorrt>=10.0,<10.5'"
    else:  # newer than this release knows
        fix = "install a newer TensorRT: pip install -U 'tensorrt>=10.8'"
    rng = f"{lo[0]}.{lo[1]}" + (f" to {hi[0]}.{hi[1]}" if hi else " and newer")
    raise LatoptError(f"TensorRT {version} does not run on {gpu} (compute capability {cc}; this release supports "
                      f"{rng}): {fix}")
