"""The command-line verbs, one module each; `privbench.cli` parses and dispatches to them."""
