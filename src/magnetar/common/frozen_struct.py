"""Frozen, slotted dataclasses whose methods are compiled on first use.

``@frozen_struct`` makes what ``@dataclass(frozen=True, slots=True, kw_only=True)`` makes,
and ``@frozen_struct(kw_only=False)`` what ``@dataclass(frozen=True, slots=True)`` makes:
the same fields (``dataclasses.fields``, ``replace``, ``asdict``), ``__init__``,
``__repr__``, ``__eq__``, ``__hash__`` over the compared fields, ``__match_args__``,
``FrozenInstanceError`` on assignment and deletion, no ``__dict__``, pickling and copying;
a method the class defines itself is kept, as ``dataclass`` keeps it. Only *when* differs:
``dataclass`` compiles six methods per class while the class is created (about 0.5 ms a
class: most of the import time of a module of small classes), here each of ``__init__``,
``__repr__``, ``__eq__`` and ``__hash__`` is compiled by its first call on that class and
then replaces itself on the class, so later calls run the generated code directly;
assignment and deletion, which only ever raise, share one function for every class.

Supported fields: those ``dataclass`` accepts, including defaults and ``default_factory``;
not ``field(init=False)`` nor ``__post_init__`` (refused when the class is made), so no
``InitVar`` either. A subclass must be decorated too.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform, overload

_T = TypeVar("_T")


def _compile(
    cls: type[Any],
    name: str,
    source: str,
    namespace: dict[str, Any],
    wrap: Callable[[Any], Any] = lambda fn: fn,
) -> Any:
    """Compiles ``source`` (defining ``name``), installs the function (through ``wrap``) on
    ``cls`` and returns it."""
    exec(source, namespace)  # as dataclasses generates its methods
    fn = namespace[name]
    fn.__qualname__ = f"{cls.__qualname__}.{name}"
    fn = wrap(fn)
    setattr(cls, name, fn)
    return fn


def _make_init(cls: type[Any]) -> Callable[..., None]:
    namespace: dict[str, Any] = {"_HAS_FACTORY": _HAS_FACTORY}
    positional: list[str] = []
    keyword: list[str] = []
    body = []
    for f in dataclasses.fields(cls):
        # the slot's descriptor: stores past the frozen __setattr__, as object.__setattr__
        namespace[f"_set_{f.name}"] = getattr(cls, f.name).__set__
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{f.name}"] = f.default
            param = f"{f.name}=_default_{f.name}"
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
            param = f"{f.name}=_HAS_FACTORY"
            body.append(f" if {f.name} is _HAS_FACTORY: {f.name} = _factory_{f.name}()\n")
        else:
            param = f.name
        (keyword if f.kw_only else positional).append(param)
        body.append(f" _set_{f.name}(self, {f.name})\n")
    params = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    source = f"def __init__({params}) -> None:\n{''.join(body)} pass\n"
    init: Callable[..., None] = _compile(cls, "__init__", source, namespace)
    return init


def _compared(cls: type[Any]) -> str:
    return "".join(f"self.{f.name}," for f in dataclasses.fields(cls) if f.compare)


def _lazy_init(self: Any, /, *args: Any, **kwargs: Any) -> None:
    _make_init(type(self))(self, *args, **kwargs)


def _lazy_repr(self: Any) -> str:
    cls = type(self)
    parts = ", ".join(f"{f.name}={{self.{f.name}!r}}" for f in dataclasses.fields(cls) if f.repr)
    source = f"def __repr__(self):\n return self.__class__.__qualname__ + f'({parts})'\n"
    # recursive_repr: "..." for a cycle, as dataclasses' own
    result: str = _compile(cls, "__repr__", source, {}, reprlib.recursive_repr())(self)
    return result


def _lazy_eq(self: Any, other: object) -> Any:
    cls = type(self)
    mine = _compared(cls)
    source = (
        "def __eq__(self, other):\n if other.__class__ is self.__class__:\n"
        f"  return ({mine})==({mine.replace('self.', 'other.')})\n return NotImplemented\n"
    )
    return _compile(cls, "__eq__", source, {})(self, other)


def _lazy_hash(self: Any) -> int:
    cls = type(self)
    source = f"def __hash__(self):\n return hash(({_compared(cls)}))\n"
    result: int = _compile(cls, "__hash__", source, {})(self)
    return result


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def _getstate(self: Any) -> list[Any]:
    return [getattr(self, f.name) for f in dataclasses.fields(self)]


def _setstate(self: Any, state: list[Any]) -> None:
    for f, value in zip(dataclasses.fields(self), state, strict=True):
        object.__setattr__(self, f.name, value)


class _HasFactory:
    def __repr__(self) -> str:
        return "<factory>"


_HAS_FACTORY = _HasFactory()

_METHODS: dict[str, Callable[..., Any]] = {
    "__init__": _lazy_init,
    "__repr__": _lazy_repr,
    "__eq__": _lazy_eq,
    "__hash__": _lazy_hash,
    "__setattr__": _frozen_setattr,
    "__delattr__": _frozen_delattr,
    "__getstate__": _getstate,
    "__setstate__": _setstate,
}


def _struct(cls: type[_T], kw_only: bool) -> type[_T]:
    if "__post_init__" in cls.__dict__:
        raise TypeError(f"{cls.__name__}: frozen_struct does not call __post_init__")
    for name in ("__setattr__", "__delattr__"):
        if name in cls.__dict__:  # as dataclass refuses for a frozen class
            raise TypeError(f"Cannot overwrite attribute {name} in class {cls.__name__}")
    doc = cls.__doc__
    cls.__doc__ = doc or "-"  # dataclass would derive one through inspect.signature
    made = dataclasses.dataclass(slots=True, kw_only=kw_only, init=False, repr=False, eq=False)(cls)
    names = []
    default_seen = False
    for f in dataclasses.fields(made):  # type: ignore[arg-type]
        if not f.init:
            raise TypeError(f"{cls.__name__}.{f.name}: frozen_struct needs init fields")
        has_default = not (
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
        if not f.kw_only and not has_default and default_seen:  # as dataclass checks
            raise TypeError(f"non-default argument {f.name!r} follows default argument")
        default_seen = default_seen or (has_default and not f.kw_only)
        default = "" if f.default is dataclasses.MISSING else f" = {f.default!r}"
        names.append(f"{f.name}: {f.type}{default}")
    made.__doc__ = doc or f"{cls.__name__}({', '.join(names)})"
    own = made.__dict__
    # an explicit __hash__ is kept; one Python set to None because the class defines
    # __eq__ is not (dataclass's rule for a frozen class)
    explicit_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
    for name, fn in _METHODS.items():
        if name not in own or (name == "__hash__" and not explicit_hash):
            setattr(made, name, fn)  # on every class: a subclass makes its own methods
    return made


@overload
def frozen_struct(cls: type[_T], /) -> type[_T]: ...


@overload
def frozen_struct(*, kw_only: bool = True) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(
    frozen_default=True,
    kw_only_default=True,
    field_specifiers=(dataclasses.field, dataclasses.Field),
)
def frozen_struct(
    cls: type[_T] | None = None, /, *, kw_only: bool = True
) -> type[_T] | Callable[[type[_T]], type[_T]]:
    """``cls`` as a frozen, slotted dataclass, keyword-only unless ``kw_only=False`` (see
    the module docstring). Raises TypeError for what the lazy methods do not support."""
    if cls is None:
        return lambda c: _struct(c, kw_only)
    return _struct(cls, kw_only)
