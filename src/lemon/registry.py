"""One registry of named objects, the shape every kind registry shares (answer kinds, stop criteria, baselines).

Why one class: each registry had the same four moves written again (load the family files, look a name up,
register a plug-in under a new name, register one for a `with` block and take it out again), so a fix to one
reached one. A registry holds its objects in order (the order reports and menus list them); `key` names an
object. A leaf module: it imports nothing of LEMON but `lemon.errors`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

from lemon.errors import LemonError

T = TypeVar("T")


class Registry(Generic[T]):
    """Named objects of one kind (`what`, for messages), each named by `key(obj)`, in registration order."""

    def __init__(self, what: str, key: Callable[[T], str], items: Iterable[T] = (),
                 reserved: Iterable[str] = ()) -> None:
        self.what, self.key, self.reserved = what, key, frozenset(reserved)
        self._table: dict[str, T] = {key(x): x for x in items}

    @classmethod
    def from_files(cls, what: str, key: Callable[[T], str], package: str, files: Iterable[str], attr: str,
                   reserved: Iterable[str] = ()) -> Registry[T]:
        """The objects each module `package.FILE` lists in its `attr` tuple, files in order."""
        found = [x for name in files for x in getattr(importlib.import_module(f"{package}.{name}"), attr)]
        return cls(what, key, found, reserved)

    def values(self) -> tuple[T, ...]:
        return tuple(self._table.values())

    def names(self) -> tuple[str, ...]:
        return tuple(self._table)

    def get(self, name: str) -> T | None:
        return self._table.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._table

    def register(self, item: T) -> T:
        """Add an object defined outside the registry's files (a plug-in, a test); its name must be new."""
        name = self.key(item)
        if name in self._table or name in self.reserved:
            raise LemonError(f"{self.what} {name!r} is registered already")
        self._table[name] = item
        return item

    @contextmanager
    def registered(self, item: T) -> Iterator[T]:
        """`item` registered for the duration of a `with` block (a test's own), then taken out again."""
        self.register(item)
        try:
            yield item
        finally:
            self._table.pop(self.key(item), None)
