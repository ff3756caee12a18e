"""The one place that turns a user's device choice into a `torch.device`."""

from __future__ import annotations

import torch

from privbench.errors import ConfigError

ACCEPTED = ("auto", "cpu", "cuda", "cuda:N", "mps")


def resolve_device(name: str = "auto") -> torch.device:
    """Resolve `auto` / `cpu` / `cuda[:N]` / `mps` to an available `torch.device`.

    `auto` picks CUDA when present, else CPU. Asking for an unavailable accelerator is an error
    (never a silent fallback, so a benchmark never reports CPU numbers as GPU ones).
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"unknown device {name!r}; accepted: {', '.join(ACCEPTED)}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r} requested but CUDA is not available; use --device cpu")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device {name!r} requested but MPS is not available; use --device cpu")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"unsupported device {name!r}; accepted: {', '.join(ACCEPTED)}")
    return dev


def device_description(dev: torch.device) -> str:
    """A human-readable name of the device for reports and benchmarks."""
    if dev.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(dev)})"
    import platform

    cpu = platform.processor() or platform.machine()
    return f"{dev.type} ({cpu}, {torch.get_num_threads()} threads)"
