"""``python -m normlab`` runs the command line."""

import sys

from normlab.cli import main

sys.exit(main())
