"""`python -m frameshard <command>`: the package's command line (frameshard.cli)."""

import sys

from . import _shutdown
from .cli._main import main

if __name__ == "__main__":
    code = main()
    if _shutdown.ended():  # a launched rank, its groups destroyed: skip torch's teardown
        _shutdown.exit_now(code)
    sys.exit(code)
