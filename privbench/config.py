"""Frozen dataclass configs, TOML run files and `--set key=value` overrides.

A run has one `RunConfig` (data, model, graph, training, privacy target, device, seed) and one
defense config (the defense's own frozen dataclass: every setting the paper leaves open is a field,
with this implementation's default). In a TOML file run fields are top-level keys and defense
fields live under `[defense]`; on the command line `--set lr=0.05` sets a run field and `--set
defense.clip=1.0` a defense field. Every key and value is checked against the field names and types.
"""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from privbench.errors import ConfigError

C = TypeVar("C")

# A run or defense field's value: as given (a TOML value, a `--set` string, a list from a TOML
# array) or as typed by its config (tuples for sequence fields).
FieldValue = str | int | float | bool | tuple[object, ...] | list[object] | None
# Field name -> value: overrides of a run or a defense config, checked by `replace_checked`.
Overrides = dict[str, FieldValue]
# A JSON document as `json.loads` / `tomllib.loads` returns it (keys and values unchecked).
JSONValue = str | int | float | bool | None | list["JSONValue"] | dict[str, "JSONValue"]
JSONObject = dict[str, JSONValue]


@dataclass(frozen=True)
class RunConfig:
    """Everything about a run that is not specific to one defense.

    Attributes:
        dataset: dataset registry key.
        data_root: folder holding torchvision datasets (None for embedded ones).
        download: allow torchvision to download into data_root.
        partition: "iid" or "dirichlet".
        alpha: Dirichlet concentration.
        holdout: fraction of each node's data held out as MIA non-members.
        max_per_node: cap on samples per node (tiny/overfit settings), or None.
        nodes: number of simulated nodes.
        model: model registry key.
        topology: topology registry key, or "auto": the defense's default (`default_topology`:
            random_out; exponential for DPPS / PartPSP, whose sensitivity bound needs a
            doubly-stochastic push-sum matrix).
        out_degree: k of `random_out`.
        time_varying: resample / cycle the graph over rounds (None: the topology's default).
        rounds: training rounds (iterations).
        batch_size: mini-batch size per node and round.
        lr: step size.
        epsilon: target privacy budget per node (DP defenses).
        delta: target delta.
        device: "auto", "cpu", "cuda[:N]".
        seed: the run's seed.
        eval_every: evaluate every this many rounds (and at the end).
        eval_subset: test samples used by the intermediate evaluations and by the final
            per-node accuracies (a fixed subset, the same in every round and run; 0 = the whole
            test set); the final average-model accuracy always uses the whole test set.
    """

    dataset: str = "digits"
    data_root: str | None = None
    download: bool = False
    partition: str = "iid"
    alpha: float = 0.5
    holdout: float = 0.25
    max_per_node: int | None = None
    nodes: int = 8
    model: str = "mlp"
    topology: str = "auto"
    out_degree: int = 2
    time_varying: bool | None = None
    rounds: int = 500
    batch_size: int = 32
    lr: float = 0.2
    epsilon: float = 8.0
    delta: float = 1e-5
    device: str = "auto"
    seed: int = 0
    eval_every: int = 100
    eval_subset: int = 1000

    def __post_init__(self) -> None:
        checks = [
            (self.nodes >= 2, f"nodes must be >= 2, got {self.nodes}"),
            (self.rounds >= 1, f"rounds must be >= 1, got {self.rounds}"),
            (self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}"),
            (self.lr > 0, f"lr must be > 0, got {self.lr}"),
            (self.epsilon > 0, f"epsilon must be > 0, got {self.epsilon}"),
            (0 < self.delta < 1, f"delta must be in (0, 1), got {self.delta}"),
            (self.eval_every >= 1, f"eval_every must be >= 1, got {self.eval_every}"),
            (self.eval_subset >= 0, f"eval_subset must be >= 0 (0 = whole test set), "
                                    f"got {self.eval_subset}"),
            (self.out_degree >= 1, f"out_degree must be >= 1, got {self.out_degree}"),
            (self.max_per_node is None or self.max_per_node >= 2,
             f"max_per_node must be >= 2, got {self.max_per_node}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)


def _coerce(value: Any, tp: Any, name: str) -> Any:
    """Convert a TOML / command-line value to the field's declared type, or raise ConfigError."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        is_none = value is None or (isinstance(value, str) and value.lower() == "none")
        if is_none and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, name)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{name}: bad value {value!r}")
    if origin is typing.Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            choices = ", ".join(map(str, allowed))
            raise ConfigError(f"{name} must be one of {choices}, got {value!r}")
        return value
    if origin is tuple:
        items = value.split(",") if isinstance(value, str) else list(value)
        inner = typing.get_args(tp)[0] if typing.get_args(tp) else str
        return tuple(_coerce(v.strip() if isinstance(v, str) else v, inner, name) for v in items
                     if not (isinstance(v, str) and not v.strip()))
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "false", "0", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"{name} must be true or false, got {value!r}")
    if tp in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{name} must be a number, got {value!r}")
        try:
            out = tp(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name} must be {tp.__name__}, got {value!r}") from None
        if tp is int and isinstance(value, float) and value != out:
            raise ConfigError(f"{name} must be an integer, got {value!r}")
        return out
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{name} must be a string, got {value!r}")
        return value
    return value


def replace_checked(cfg: C, updates: Mapping[str, object], where: str = "") -> C:
    """`dataclasses.replace` with each key and value checked against the fields' names and types."""
    hints = typing.get_type_hints(type(cfg))
    names = [f.name for f in dataclasses.fields(cfg)]  # type: ignore[arg-type]
    coerced = {}
    for key, value in updates.items():
        if key not in names:
            raise ConfigError(f"unknown {where or type(cfg).__name__} key {key!r}; "
                              f"accepted: {', '.join(names)}")
        coerced[key] = _coerce(value, hints[key], f"{where + '.' if where else ''}{key}")
    return dataclasses.replace(cfg, **coerced)  # type: ignore[type-var]


def parse_sets(pairs: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Split `--set key=value` strings into (run overrides, defense overrides)."""
    run: dict[str, str] = {}
    defense: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError("--set expects key=value (e.g. lr=0.05 or defense.clip=1), "
                              f"got {pair!r}")
        if key.startswith("defense."):
            defense[key.removeprefix("defense.")] = value
        else:
            run[key.removeprefix("run.")] = value
    return run, defense


def read_toml(path: str | Path, what: str) -> JSONObject:
    """Parse a TOML file; a missing or malformed file is a one-line ConfigError naming `what`."""
    try:
        return tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{what} {path} not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {path} is a directory; give a TOML file") from None
    except OSError as exc:
        raise ConfigError(f"{what} {path} cannot be read: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{what} {path} is not valid TOML: {exc}") from None


def load_toml(path: str | Path) -> tuple[JSONObject, JSONObject, JSONObject]:
    """Read a run file: (top-level run keys, [defense] table, [audit] table)."""
    data = read_toml(path, "config file")
    tables: dict[str, JSONObject] = {}
    for name in ("defense", "audit"):
        tables[name] = data.pop(name, {})
        if not isinstance(tables[name], dict):
            raise ConfigError(f"config file {path}: [{name}] must be a table")
    return data, tables["defense"], tables["audit"]


def check_choices(owner: str, cfg: Any, choices: dict[str, tuple[Any, ...]]) -> None:
    """Raise a one-line ConfigError when a field of `cfg` is not one of its allowed values."""
    for name, allowed in choices.items():
        if getattr(cfg, name) not in allowed:
            raise ConfigError(f"{owner} {name} must be one of {', '.join(map(str, allowed))}, "
                              f"got {getattr(cfg, name)!r}")


def to_dict(cfg: object) -> JSONObject:
    """JSON-ready dict of a config dataclass (tuples become lists)."""
    return json_ready(dataclasses.asdict(cfg))


def json_ready(obj: Any) -> Any:
    """Tuples -> lists, frozensets -> sorted lists, recursively."""
    if isinstance(obj, dict):
        return {k: json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted(json_ready(v) for v in obj)
    return obj
