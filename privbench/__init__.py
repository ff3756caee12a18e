"""privbench: attack-and-defense evaluation of differentially private decentralized learning."""

__version__ = "0.1.0"
