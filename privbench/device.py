"""The one place that turns a user's device choice into a `torch.device`."""

from __future__ import annotations

import functools

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
    return f"{dev.type} ({_cpu_model()}, {torch.get_num_threads()} threads)"


def machine_kind(dev: torch.device) -> str:
    """The kind of machine a computation ran on, as far as it decides floating-point results
    beyond the torch build and the thread count: the GPU's name, or the CPU's model and the
    vector kernels torch dispatches to on it ("cpu (AMD EPYC, AVX512)"). Measured: the same
    code, torch build, thread count and seed give another accuracy when only the kernels differ
    (ATEN_CPU_CAPABILITY=avx2 on an AVX-512 machine moves an ADP-VRSGP reduced line from 0.8469
    to 0.8475), so results are bit-reproducible only on the same kind."""
    if dev.type == "cuda":
        return device_description(dev)
    return f"{dev.type} ({_cpu_model()}, {torch.backends.cpu.get_cpu_capability()})"


@functools.cache
def _cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo; else what `platform` knows), read once per
    process: every reproduce line, checkpoint key and audit cell's fingerprint names it."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
