"""The Attack contract over every registered attack: it declares what it is (`kind`) and what it
consumes (`needs`), its Config builds from defaults, and the one dispatch has a runner for its
kind; a class that breaks the contract is caught."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from privbench.audit.attack import KINDS, NEEDS, Attack, reads_messages, trains_its_own_run
from privbench.audit.dispatch import RUNNERS
from privbench.plugins import load_plugins
from privbench.registry import ATTACKS

load_plugins()

# per kind, the methods a registered attack of that kind must implement itself (not inherit
# as an abstract or unimplemented stub)
METHODS = {"inversion": ("reconstruct",), "membership": ("score",), "canary": (),
           "mechanism": ()}


def contract_problems(cls: type) -> list[str]:
    """What an attack class gets wrong about the contract (empty: nothing)."""
    if not (isinstance(cls, type) and issubclass(cls, Attack)):
        return ["not an Attack"]
    kind, needs = getattr(cls, "kind", None), getattr(cls, "needs", None)
    out = []
    if kind not in KINDS:
        out.append(f"kind {kind!r} is not one of {KINDS}")
    elif kind not in RUNNERS:
        out.append(f"the dispatch runs no attack of kind {kind!r}")
    if not isinstance(needs, frozenset) or not needs or not needs <= NEEDS:
        out.append(f"needs {needs!r} is not a non-empty subset of {sorted(NEEDS)}")
    elif kind == "membership" and len(needs & {"messages", "model"}) != 1:
        out.append("a membership attack scores either messages or a model")
    elif "reference_systems" in needs and "model" not in needs:
        out.append("reference systems are models: a reference-based attack scores a model")
    elif kind in ("canary", "mechanism") and needs != {"retrain"}:
        out.append(f"a {kind} audit retrains the defense and needs nothing else")
    config = getattr(cls, "Config", None)
    if not (dataclasses.is_dataclass(config) and config.__dataclass_params__.frozen):
        out.append("Config is not a frozen dataclass")
    else:
        try:
            cls(config())
        except Exception as exc:  # a config that cannot build from its defaults
            out.append(f"Config() does not build: {exc}")
    for method in METHODS.get(kind, ()):
        impl = getattr(cls, method, None)
        if impl is None or getattr(impl, "__isabstractmethod__", False) or \
                "raise NotImplementedError" in inspect.getsource(impl):
            out.append(f"{kind} attacks implement {method}")
    return out


@pytest.mark.parametrize("name", ATTACKS.names())
def test_attack_contract(name: str) -> None:
    assert contract_problems(ATTACKS.get(name)) == []


def test_every_kind_is_registered_and_message_attacks_read_messages() -> None:
    kinds = {ATTACKS.get(n).kind for n in ATTACKS.names()}
    assert kinds == set(KINDS)
    assert reads_messages(ATTACKS.get("mia_message")) and reads_messages(ATTACKS.get("idlg"))
    assert not reads_messages(ATTACKS.get("lira")) and not reads_messages(ATTACKS.get("canary"))


def test_a_broken_attack_is_caught() -> None:
    @dataclasses.dataclass(frozen=True)
    class Cfg:
        steps: int = 1

    class NoKind(Attack):
        Config = Cfg
        needs = frozenset({"messages"})

    class BadNeeds(Attack):
        Config = Cfg
        kind = "membership"
        needs = frozenset({"messages", "model"})

    class Unfrozen(Attack):
        Config = dataclasses.make_dataclass("C", [("a", int, dataclasses.field(default=0))])
        kind = "canary"
        needs = frozenset({"retrain"})

    class Stub(Attack):
        Config = Cfg
        kind = "inversion"
        needs = frozenset({"messages"})

        def reconstruct(self) -> None:
            raise NotImplementedError

    assert contract_problems(object) == ["not an Attack"]
    assert contract_problems(NoKind)[0].startswith("kind None is not one of")
    assert contract_problems(BadNeeds) == ["a membership attack scores either messages or a model",
                                           "membership attacks implement score"]
    assert contract_problems(Unfrozen) == ["Config is not a frozen dataclass"]
    assert contract_problems(Stub) == ["inversion attacks implement reconstruct"]


@pytest.mark.parametrize("name", ATTACKS.names())
def test_only_the_audits_that_train_their_own_run_run_on_a_diverged_cell(name: str) -> None:
    cls = ATTACKS.get(name)
    assert trains_its_own_run(cls) == (cls.kind in ("canary", "mechanism"))
