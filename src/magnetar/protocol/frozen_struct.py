"""Frozen, slotted, keyword-only dataclasses whose methods are compiled on first use.

``@frozen_struct`` makes what ``@dataclass(frozen=True, slots=True, kw_only=True)`` makes:
the same fields (``dataclasses.fields``, ``replace``, ``asdict``), ``__init__`` (keyword-only),
``__repr__``, ``__eq__``, ``__hash__`` over the compared fields, ``FrozenInstanceError`` on
assignment and deletion, no ``__dict__``, pickling and copying. Only *when* differs:
``dataclass`` compiles six methods per class while the class is created (about 0.6 ms a
class, most of the protocol package's import time), here each of ``__init__``, ``__repr__``,
``__eq__`` and ``__hash__`` is compiled by its first call on that class and then replaces
itself on the class, so later calls run the generated code directly; assignment and
deletion, which only ever raise, share one function for every class.

Supported fields: those ``dataclass`` accepts with ``kw_only``, including defaults and
``default_factory``; not ``field(init=False)`` nor ``__post_init__`` (refused when the class
is made), so no ``InitVar`` either. A subclass must be decorated too.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform

_T = TypeVar("_T")

_new_struct = dataclasses.dataclass(slots=True, kw_only=True, init=False, repr=False, eq=False)


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
    params = []
    body = []
    for f in dataclasses.fields(cls):
        # the slot's descriptor: stores past the frozen __setattr__, as object.__setattr__
        namespace[f"_set_{f.name}"] = getattr(cls, f.name).__set__
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_HAS_FACTORY")
            body.append(f" if {f.name} is _HAS_FACTORY: {f.name} = _factory_{f.name}()\n")
        else:
            params.append(f.name)
        body.append(f" _set_{f.name}(self, {f.name})\n")
    star = "*, " if params else ""
    source = f"def __init__(self, {star}{', '.join(params)}) -> None:\n{''.join(body)} pass\n"
    init: Callable[..., None] = _compile(cls, "__init__", source, namespace)
    return init


def _compared(cls: type[Any]) -> str:
    return "".join(f"self.{f.name}," for f in dataclasses.fields(cls) if f.compare)


def _lazy_init(self: Any, /, **kwargs: Any) -> None:
    _make_init(type(self))(self, **kwargs)


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


@dataclass_transform(
    frozen_default=True,
    kw_only_default=True,
    field_specifiers=(dataclasses.field, dataclasses.Field),
)
def frozen_struct(cls: type[_T]) -> type[_T]:
    """``cls`` as a frozen, slotted, keyword-only dataclass (see the module docstring).

    Raises TypeError for what the lazy methods do not support."""
    if "__post_init__" in cls.__dict__:
        raise TypeError(f"{cls.__name__}: frozen_struct does not call __post_init__")
    doc = cls.__doc__
    cls.__doc__ = doc or "-"  # dataclass would derive one through inspect.signature
    made = _new_struct(cls)
    names = []
    for f in dataclasses.fields(made):  # type: ignore[arg-type]
        if not f.init:
            raise TypeError(f"{cls.__name__}.{f.name}: frozen_struct needs init fields")
        default = "" if f.default is dataclasses.MISSING else f" = {f.default!r}"
        names.append(f"{f.name}: {f.type}{default}")
    made.__doc__ = doc or f"{cls.__name__}(*, {', '.join(names)})"
    for name, fn in _METHODS.items():
        setattr(made, name, fn)  # on every class: a subclass makes its own methods
    return made
