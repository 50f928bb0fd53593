"""``python -m latopt.runtime``: the runtime's command line (:func:`latopt.runtime.cli.main`)."""

import sys

from latopt.runtime.cli import main

if __name__ == "__main__":
    sys.exit(main())
