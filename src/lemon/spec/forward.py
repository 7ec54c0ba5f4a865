"""`Forward`: an attribute a class shows as its own but that belongs to one of its parts (`self.ex.pool`),
declared in one line instead of a read-only property per attribute, in every layer above this one."""

from __future__ import annotations

from operator import attrgetter
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


class Forward(Generic[T]):
    """A read-only attribute that reads dotted `path` from the instance: `kind = Forward[str]("answers.name")`
    is the `@property` returning `self.answers.name`, and, like it, refuses assignment."""

    __slots__ = ("_get", "name", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self.name = path
        self._get = attrgetter(path)

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Forward[T]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        return self if obj is None else self._get(obj)

    def __set__(self, obj: object, value: object) -> None:
        raise AttributeError(f"can't set {type(obj).__name__}.{self.name}: it reads self.{self.path}")
