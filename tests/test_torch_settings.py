"""torch's process-wide switches (latopt.training.torch_settings): intra-op threads and TF32, each restored where scoped."""

from __future__ import annotations

import torch

from latopt.training.torch_settings import (
    TF32_OFF,
    set_tf32_flags,
    set_threads,
    strict_fp32,
    tf32_flags,
    torch_threads,
)


def test_set_threads_and_torch_threads_restore() -> None:
    old = torch.get_num_threads()
    try:
        set_threads(None)
        assert torch.get_num_threads() == old
        set_threads(1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(old)
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == old


def test_strict_fp32_switches_tf32_off_and_restores_it() -> None:
    saved = tf32_flags()
    try:
        on = {"cudnn.allow_tf32": True, "cuda.matmul.allow_tf32": True}
        set_tf32_flags(on)
        with strict_fp32():
            assert tf32_flags() == TF32_OFF
        assert tf32_flags() == on
    finally:
        set_tf32_flags(saved)
