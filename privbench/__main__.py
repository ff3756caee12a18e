"""`python -m privbench` runs the command-line interface."""

import sys

from privbench.cli import main

sys.exit(main())
