"""Datasets (registered loaders, node splits, sampling) and the data files they read."""
