"""`python -m privbench` runs the command-line interface."""

from privbench.cli import run

run()
