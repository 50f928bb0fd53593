"""Options every ``latopt`` sub-command takes."""

from __future__ import annotations

import argparse

from latopt.log import DEFAULT, QUIET, VERBOSE


def common_parser() -> argparse.ArgumentParser:
    """Options every sub-command takes (use as ``parents=[common_parser()]``)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0); same seed, same result on CPU")
    g = p.add_mutually_exclusive_group()
    g.add_argument("-v", "--verbose", dest="verbosity", action="store_const", const=VERBOSE, default=DEFAULT,
                   help="also debug lines on stderr")
    g.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const=QUIET, default=DEFAULT,
                   help="no progress on stderr (warnings and errors only); results still go to stdout")
    return p
