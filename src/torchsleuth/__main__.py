"""``python -m torchsleuth``: the command line, as the ``torchsleuth`` script runs it (``torchrun -m torchsleuth watch``)."""

import sys

from torchsleuth.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
