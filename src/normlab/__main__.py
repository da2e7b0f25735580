"""``python -m normlab`` runs the command line."""

import sys

from normlab.cli import main

# Guarded: helper processes (normlab.workers, "spawn") import the main module of their parent.
if __name__ == "__main__":
    sys.exit(main())
