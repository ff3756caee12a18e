"""One `Registry` class and the registries every part of privbench shares.

Defenses, attacks, datasets, models and topologies register themselves under their file stem; a
lookup of an unknown name raises `UnknownNameError` listing the known names, which the CLI prints
as a one-line error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from privbench.errors import UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """A name -> object mapping with a helpful error for unknown names.

    Args:
        kind: what is registered ("defense", "dataset", ...), used in error messages.
    """

    def __init__(self, kind: str, plural: str | None = None) -> None:
        self.kind = kind
        self.plural = plural or f"{kind}s"
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator registering an object under `name` (names are unique)."""

        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def add(self, name: str, obj: T) -> None:
        """Register `obj` under `name`; registering a name twice is a programming error."""
        if name in self._items and self._items[name] is not obj:
            raise RuntimeError(f"{self.kind} {name!r} is registered twice")
        self._items[name] = obj

    def get(self, name: str) -> T:
        """The object registered under `name`, or a one-line error listing the known names."""
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items)) or "(none registered)"
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)


def describe(name: str, obj: object) -> str:
    """One sentence about a registered object: the first sentence of its module's docstring when
    that module is its own (the file stem is the registry key: one defense or attack per file),
    else of its own docstring; never a line cut mid-sentence."""
    import inspect
    import re
    import sys

    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    own = module is not None and module.__name__.rsplit(".", 1)[-1] == name
    doc = (module.__doc__ if own and module is not None else None) or inspect.getdoc(obj) or ""
    paragraph = " ".join(doc.strip().split("\n\n", 1)[0].split())
    # a sentence ends at a full stop before a capital letter ("Sec. 5.4" and "e.g. x" go on)
    return re.split(r"(?<=\.)\s+(?=[A-Z])", paragraph, maxsplit=1)[0] or "(no description)"


DATASETS: Registry = Registry("dataset")
MODELS: Registry = Registry("model")
TOPOLOGIES: Registry = Registry("topology", "topologies")
DEFENSES: Registry = Registry("defense")
ATTACKS: Registry = Registry("attack")
