"""Options every ``latopt`` sub-command takes."""

from __future__ import annotations

import argparse


def common_parser() -> argparse.ArgumentParser:
    """Options every sub-command takes (use as ``parents=[common_parser()]``)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0); same seed, same result on CPU")
    return p
