"""privbench: attack-and-defense evaluation suite for differentially private decentralized learning."""

__version__ = "0.1.0"
