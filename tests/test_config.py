"""Config coercion and overrides."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from privbench.config import RunConfig, parse_sets, replace_checked
from privbench.errors import ConfigError


@dataclass(frozen=True)
class _Cfg:
    a: int = 1
    b: float = 0.5
    c: bool = False
    d: tuple[int, ...] = (1, 2)
    e: str | None = None


def test_coercion_of_strings():
    cfg = replace_checked(_Cfg(), {"a": "3", "b": "1e-3", "c": "true", "d": "4,5", "e": "x"})
    assert cfg == _Cfg(3, 1e-3, True, (4, 5), "x")
    assert replace_checked(_Cfg(e="x"), {"e": "none"}).e is None


@pytest.mark.parametrize("key,value,needle", [
    ("a", "x", "a must be int"), ("a", 1.5, "must be an integer"), ("c", "maybe", "true or false"),
    ("zz", 1, "unknown _Cfg key 'zz'"),
])
def test_bad_values(key, value, needle):
    with pytest.raises(ConfigError, match=needle):
        replace_checked(_Cfg(), {key: value})


def test_parse_sets_splits_run_and_defense():
    run, defense = parse_sets(["lr=0.1", "defense.clip=2", "run.nodes=3"])
    assert run == {"lr": "0.1", "nodes": "3"} and defense == {"clip": "2"}
    with pytest.raises(ConfigError, match="key=value"):
        parse_sets(["oops"])


def test_run_config_validation():
    with pytest.raises(ConfigError, match="delta"):
        RunConfig(delta=0)
    with pytest.raises(ConfigError, match="max_per_node"):
        RunConfig(max_per_node=1)
