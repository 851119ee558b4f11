"""``frozen_struct`` behaves as ``dataclass(frozen=True, slots=True, kw_only=True)``."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from magnetar.common.frozen_struct import frozen_struct


@frozen_struct
class Base:
    a: int
    b: str | None = None


@frozen_struct
class Child(Base):
    c: tuple[int, ...] = ()
    d: list[int] = dataclasses.field(default_factory=list, compare=False, repr=False)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Reference:
    a: int
    b: str | None = None
    c: tuple[int, ...] = ()
    d: list[int] = dataclasses.field(default_factory=list, compare=False, repr=False)


def test_methods_match_the_dataclass_ones() -> None:
    child = Child(a=1, b="x", c=(2,), d=[3])
    reference = Reference(a=1, b="x", c=(2,), d=[3])
    assert repr(child) == repr(reference).replace("Reference", "Child")
    assert hash(child) == hash(reference)
    assert child == Child(a=1, b="x", c=(2,), d=[4])  # d is not compared
    assert child != Child(a=1, b="y", c=(2,))
    assert child != Base(a=1, b="x")  # another class
    assert Base(a=1) == Base(a=1, b=None)
    assert dataclasses.asdict(child) == dataclasses.asdict(reference)
    assert [f.name for f in dataclasses.fields(Child)] == ["a", "b", "c", "d"]
    assert dataclasses.replace(child, a=5).a == 5
    assert Child(a=1).d == [] and Child(a=1).d is not Child(a=1).d  # a fresh default each time
    assert Child.__match_args__ == Reference.__match_args__ == ()


def test_frozen_slotted_keyword_only() -> None:
    base = Base(a=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.a = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del base.a  # type: ignore[misc]
    assert not hasattr(base, "__dict__")
    with pytest.raises(TypeError):
        Base(1)  # type: ignore[misc]
    with pytest.raises(TypeError):
        Base()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Base(a=1, e=2)  # type: ignore[call-arg]


def test_pickles_and_copies() -> None:
    child = Child(a=1, b="x", c=(2,), d=[3])
    for twin in (pickle.loads(pickle.dumps(child)), copy.copy(child), copy.deepcopy(child)):
        assert twin == child and twin.d == [3]


def test_methods_are_compiled_once_on_first_use() -> None:
    @frozen_struct
    class Fresh:
        x: int

    lazy_init = Fresh.__dict__["__init__"]
    Fresh(x=1)
    compiled = Fresh.__dict__["__init__"]
    assert compiled is not lazy_init
    Fresh(x=2)
    assert Fresh.__dict__["__init__"] is compiled


def test_refuses_what_it_cannot_generate() -> None:
    with pytest.raises(TypeError):

        @frozen_struct
        class WithPostInit:
            x: int

            def __post_init__(self) -> None:
                pass

    with pytest.raises(TypeError):

        @frozen_struct
        class WithoutInit:
            x: int = dataclasses.field(init=False, default=0)


@frozen_struct(kw_only=False)
class Point:
    x: int
    y: int = 0
    tags: tuple[str, ...] = dataclasses.field(default=(), kw_only=True)


@dataclasses.dataclass(frozen=True, slots=True)
class PointReference:
    x: int
    y: int = 0
    tags: tuple[str, ...] = dataclasses.field(default=(), kw_only=True)


def test_positional_structs_match_the_dataclass_ones() -> None:
    point, reference = Point(1, 2, tags=("a",)), PointReference(1, 2, tags=("a",))
    assert repr(point) == repr(reference).replace("PointReference", "Point")
    assert hash(point) == hash(reference)
    assert point == Point(x=1, y=2, tags=("a",)) and Point(1) == Point(1, 0)
    assert Point.__match_args__ == PointReference.__match_args__ == ("x", "y")
    match point:
        case Point(1, y):
            assert y == 2
        case _:
            raise AssertionError("no match")
    with pytest.raises(TypeError):
        Point(1, 2, ("a",))  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.x = 2  # type: ignore[misc]


def test_methods_the_class_defines_are_kept() -> None:
    @frozen_struct(kw_only=False)
    class Custom:
        x: int

        def __repr__(self) -> str:
            return "custom"

        def __eq__(self, other: object) -> bool:
            return True

    assert repr(Custom(1)) == "custom" and Custom(1) == Custom(2)
    assert hash(Custom(1)) == hash((1,))  # __eq__ alone: the hash is still generated

    @frozen_struct
    class OwnHash:
        x: int

        def __hash__(self) -> int:
            return 7

    assert hash(OwnHash(x=1)) == 7


def test_refuses_a_field_without_default_after_one_with() -> None:
    with pytest.raises(TypeError):

        @frozen_struct(kw_only=False)
        class Misordered:
            x: int = 0
            y: int  # type: ignore[misc]
