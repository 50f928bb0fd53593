"""The runtime's command line: ``python -m latopt.runtime MODEL [--input x.npy] [--output y.npy] [--bench N]``.

Runs the model once on ``--input`` (default: seeded noise at the runner's input shape), prints the output's
shape and top-5 of sample 0, writes the first output with ``--output`` and times ``--bench N`` synchronised
calls (:func:`latopt.runtime.runner.bench`). Errors are one line, ``latopt.runtime: error: ...``, exit code 2.
This module's own command line names its own flags in its errors. Every count is bounded and checked before a
model is opened: ``--threads`` by latopt's own :data:`latopt.constants.MAX_THREADS`, ``--bench`` by
:data:`latopt.runtime.runner.MAX_BENCH`. Ctrl-C and SIGTERM end it as they end ``latopt``
(:mod:`latopt.signals`): one line, ``latopt.runtime: interrupted`` (exit 130) / ``terminated`` (exit 143).
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from latopt.errors import LatoptError, first_line, one_line
from latopt.files.artifacts import atomic_path
from latopt.runtime import load
from latopt.runtime.runner import MAX_BENCH, bench, existing_file


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m latopt.runtime",
                                description="Run a latopt artefact (TensorRT .engine or .onnx) on one input.")
    p.add_argument("model", help="MODEL.engine (TensorRT) or MODEL.onnx (ONNX Runtime)")
    p.add_argument("--input", help="input tensor as .npy (default: seeded standard-normal noise)")
    p.add_argument("--output", help="write the first output to this .npy file")
    p.add_argument("--bench", type=int, default=0, metavar="N", help="time N synchronised inferences")
    p.add_argument("--gpu", type=int, default=0, help="CUDA device index for engines (default 0)")
    p.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the noise input (default 0)")
    # latopt's own bound and exit codes; read here, not at import: both are standard library only, and importing
    # latopt.runtime stays the floor modules (tests/test_tensorrt.py, RUNTIME_FLOOR)
    from latopt.constants import MAX_THREADS
    from latopt.signals import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated, sigterm_raises

    try:
        args = p.parse_args(argv)
        with sigterm_raises():
            return _main(args, MAX_THREADS)
    except LatoptError as e:
        print(f"latopt.runtime: error: {one_line(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("latopt.runtime: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        print("latopt.runtime: terminated", file=sys.stderr)
        return EXIT_TERMINATED


def _main(args: argparse.Namespace, max_threads: int) -> int:
    if args.bench < 0:
        raise LatoptError(f"--bench must be >= 0, got {args.bench}")
    if args.bench > MAX_BENCH:
        raise LatoptError(f"--bench must be <= {MAX_BENCH}, got {args.bench}")
    if args.threads < 0:
        raise LatoptError(f"--threads must be >= 0 (0: ONNX Runtime's default), got {args.threads}")
    if args.threads > max_threads:  # latopt's own bound (its --threads and config `threads`)
        raise LatoptError(f"--threads must be <= {max_threads}, got {args.threads}")
    if args.gpu < 0:
        raise LatoptError(f"--gpu must be a CUDA device index >= 0, got {args.gpu}")
    if args.seed < 0:
        raise LatoptError(f"--seed must be >= 0, got {args.seed}")
    x = _load_input(args.input) if args.input else None
    with load(args.model, input_shape=None if x is None else x.shape, device_index=args.gpu,
              threads=args.threads, seed=args.seed) as runner:
        if x is None:
            x = np.random.default_rng(args.seed).standard_normal(runner.input_shape).astype(np.float32)
        try:
            y = runner.run(x)
        except Exception as e:     # the runtime's own refusal of this input (shape, rank): one line
            raise LatoptError(f"{Path(args.model).name} refused the input of shape {list(x.shape)} "
                              f"({type(e).__name__}: {first_line(e, 160)})") from None
        flat = y.reshape(y.shape[0], -1) if y.ndim > 1 else y.reshape(1, -1)
        top = np.argsort(-flat[0])[:5].tolist()
        print(f"{Path(args.model).name}: input {list(x.shape)} -> output {list(y.shape)} {y.dtype}; "
              f"sample 0 top-5 {top}; |y|max {float(np.abs(y).max()):.6g}")
        if args.output:
            _save_npy(args.output, y)
            print(f"wrote {args.output}")
        if args.bench:
            stats = bench(runner, args.bench)
            print("  ".join(f"{k} {v:.4f}" for k, v in stats.items()))
    return 0


def _load_input(path: str) -> np.ndarray:
    """The ``--input`` tensor: one numeric array of at least one sample, as float32; else one line."""
    try:
        x = np.load(existing_file(path, "input"), allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise LatoptError(f"input {path} is not a valid .npy file ({first_line(e, 120)})") from None
    if not isinstance(x, np.ndarray):
        x.close()
        raise LatoptError(f"input {path} is an .npz archive of several arrays; give one array as .npy (numpy.save)")
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)) or x.dtype == np.bool_:
        raise LatoptError(f"input {path} holds {x.dtype} values; give numbers (float32 images, batch first)")
    if x.ndim < 2 or x.shape[0] < 1 or x.size == 0:
        raise LatoptError(f"input {path} has shape {list(x.shape)}; give a batch of at least one sample "
                          "(batch, channels, height, width)")
    if not np.isfinite(x).all():
        raise LatoptError(f"input {path} holds NaN or infinite values")
    return np.ascontiguousarray(x, dtype=np.float32)


def _save_npy(path: str, arr: np.ndarray) -> None:
    """``arr`` as .npy at ``path``, which may be a FIFO or a pipe: numpy writes a file through its position
    (which a pipe has not), so the bytes are made in memory and written in one stream."""
    buf = io.BytesIO()
    np.save(buf, arr)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(buf.getvalue())
