import sys

from latopt.cli import main

sys.exit(main())
