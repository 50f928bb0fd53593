"""The one FP16 ONNX conversion of TensorRT >= 11, whose fp16 engines come only from an FP16 ONNX model.

TensorRT 11 removed ``BuilderFlag.FP16`` (:mod:`latopt.latency.backends.tensorrt.precision`), so fp16 there
parses an FP16 copy of the ONNX model with fp32 inputs/outputs kept, always made by one conversion
(:data:`FP16_CONVERSION`, recorded in the backend's environment and so in every LUT):
``onnxconverter_common.float16.convert_float_to_float16`` on the whole graph (``keep_io_types=True``;
initializers clamped to fp16's own largest finite value, not the converter's 1e4). Not ModelOpt AutoCast,
NVIDIA's documented route (docs.nvidia.com/deeplearning/tensorrt/latest/api/migration/
tensorrt-10x-to-11x-python-api-patterns.html), even where it is installed: it keeps in fp32 the nodes a rule
picks on random inputs, separately for every model it converts, so the parts of a LUT and its calibration
networks could get different precision mixes. onnxconverter-common is imported when a model is converted; not
installed → LatoptError saying so (the ``trt`` extra installs it).
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Any

import onnx

from latopt.errors import LatoptError

FP16_CONVERTER = "onnxconverter_common.float16.convert_float_to_float16"
# Every float of the whole graph (the converter's default op_block_list holds none of the operators latopt's
# networks use), fp32 inputs and outputs kept; initializers beyond fp16's largest finite value 65504 are clamped
# to it (the converter's default, 1e4, would also change weights that fp16 holds).
FP16_CONVERSION: dict[str, Any] = {"converter": FP16_CONVERTER, "keep_io_types": True, "max_finite_val": 65504.0,
                                   "op_block_list": "the converter's default"}


def fp16_conversion() -> dict[str, Any]:
    """:data:`FP16_CONVERSION` with the installed onnxconverter-common version (None when it is missing)."""
    try:
        version = metadata.version("onnxconverter-common")
    except metadata.PackageNotFoundError:
        version = None
    return {**FP16_CONVERSION, "onnxconverter_common": version}


def to_fp16_onnx(src: str | Path, dst: str | Path) -> str:
    """Write an FP16 copy of ``src`` (fp32 inputs/outputs kept) to ``dst`` with :data:`FP16_CONVERSION`, whatever
    else is installed; returns the converter's name."""
    try:
        from onnxconverter_common import float16  # optional: the trt extra
    except ImportError:
        raise LatoptError(
            "TensorRT >= 11 builds fp16 engines only from an FP16 ONNX model (BuilderFlag.FP16 was removed); "
            "pip install onnxconverter-common to convert it, or use an fp32 device profile"
        ) from None
    model = float16.convert_float_to_float16(onnx.load(str(src)), keep_io_types=FP16_CONVERSION["keep_io_types"],
                                             max_finite_val=FP16_CONVERSION["max_finite_val"])
    onnx.save(model, str(dst))
    return FP16_CONVERTER
