"""`python -m frameshard <command>`: the package's command line (frameshard.cli)."""

import sys

from .cli._main import main

if __name__ == "__main__":
    sys.exit(main())
