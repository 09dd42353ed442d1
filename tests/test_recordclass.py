"""The record class builder gives what attrs gives, without attrs or generated code.

Two kinds of evidence. Unit tests pin each rule (converters, validators after every field is set,
defaults and factories, aliases, frozen and mutable assignment, equality and hashing, copies).
A differential test executes the modules that declare records a second time with attrs itself
behind ``recordclass``, so the same source builds real attrs classes, and checks that both builds
answer every generated input the same way: the same values, or the same error and message.
"""

from __future__ import annotations

import copy
import importlib.util
import math
import pickle
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import noderole
from noderole import recordclass
from noderole.errors import DefinitionError
from tests.modules_probe import run_snippet

# --------------------------------------------------------------------------- the rules


def _upper(value: Any) -> str:
    return str(value).upper()


class TestConstruction:
    def test_converters_run_on_arguments_and_defaults_then_validators_see_every_field(
        self,
    ) -> None:
        seen: list[tuple[str, Any, Any]] = []

        def check(inst: Any, attribute: Any, value: Any) -> None:
            seen.append((attribute.name, value, inst.b))  # every field is set by now

        @recordclass.frozen(kw_only=True)
        class R:
            a: str = recordclass.field(converter=_upper, validator=check)
            b: str = recordclass.field(default="x", converter=_upper)

        record = R(a="q")
        assert (record.a, record.b) == ("Q", "X")
        assert seen == [("a", "Q", "X")]

    def test_validators_run_in_field_order_and_decorated_methods_after_field_validators(
        self,
    ) -> None:
        order: list[str] = []

        @recordclass.frozen(kw_only=True)
        class R:
            a: int = recordclass.field(validator=lambda i, at, v: order.append("a"))
            b: int = recordclass.field(validator=[lambda i, at, v: order.append("b1")])

            @b.validator
            def _b2(self, attribute: Any, value: int) -> None:
                order.append("b2")

            def __attrs_post_init__(self) -> None:
                order.append("post")

        R(a=1, b=2)
        assert order == ["a", "b1", "b2", "post"]

    def test_factory_gives_each_instance_its_own_value(self) -> None:
        @recordclass.define(kw_only=True)
        class R:
            items: list[int] = recordclass.field(factory=list)

        first, second = R(), R()
        first.items.append(1)
        assert second.items == []

    def test_a_private_field_is_passed_without_its_underscore(self) -> None:
        @recordclass.frozen
        class R:
            _secret: str

        assert R(secret="s")._secret == "s"
        assert recordclass.fields(R)._secret.alias == "secret"

    def test_init_false_fields_take_their_default_or_stay_unset(self) -> None:
        @recordclass.frozen(kw_only=True)
        class R:
            a: int
            cache: Any = recordclass.field(init=False, default=None)
            unset: Any = recordclass.field(init=False)

        record = R(a=1)
        assert record.cache is None
        assert not hasattr(record, "unset")
        with pytest.raises(TypeError, match="unexpected keyword argument 'cache'"):
            R(a=1, cache=2)  # type: ignore[call-arg]

    def test_positional_arguments_follow_field_order(self) -> None:
        @recordclass.frozen
        class R:
            a: int
            b: int = 2

        assert R(1) == R(a=1, b=2)
        assert R(1, 3).b == 3
        assert R.__match_args__ == ("a", "b")
        with pytest.raises(TypeError, match="takes from 2 to 3 positional arguments but 4 were"):
            R(1, 2, 3)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="multiple values for argument 'a'"):
            R(1, a=2)  # type: ignore[misc]

    def test_keyword_only_refuses_positions_and_names_missing_and_unknown_arguments(
        self,
    ) -> None:
        @recordclass.frozen(kw_only=True)
        class R:
            a: int

        with pytest.raises(TypeError, match="takes 1 positional argument but 2 were given"):
            R(1)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'a'"):
            R()  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
            R(a=1, z=2)  # type: ignore[call-arg]

    def test_argument_errors_come_before_any_converter_runs(self) -> None:
        """An unexpected or missing argument is reported before a converter can fail, in the
        order Python reports them for attrs' generated __init__ (unexpected first)."""

        def refuse(value: Any) -> Any:
            raise ValueError("converter ran")

        def build(decorate: Any, make: Any) -> Any:
            @decorate(kw_only=True)
            class R:
                a: Any = make(converter=refuse)
                b: int

            return R

        ours, theirs = (
            build(recordclass.frozen, recordclass.field),
            build(attrs.frozen, attrs.field),
        )
        for kwargs in ({"a": 1}, {"a": 1, "c": 2}, {"c": 2}, {"a": 1, "b": 2}):
            outcomes = []
            for cls in (ours, theirs):
                with pytest.raises((TypeError, ValueError)) as caught:
                    cls(**kwargs)
                outcomes.append((type(caught.value), str(caught.value).split(".__init__")[-1]))
            assert outcomes[0] == outcomes[1], kwargs

    def test_a_mandatory_field_after_a_default_is_refused_unless_keyword_only(self) -> None:
        with pytest.raises(ValueError, match="No mandatory attributes allowed"):

            @recordclass.frozen
            class R:
                a: int = 1
                b: int  # type: ignore[misc]

        @recordclass.frozen(kw_only=True)
        class K:
            a: int = 1
            b: int

        assert K(b=2).a == 1

    def test_class_variables_and_unannotated_fields(self) -> None:
        @recordclass.frozen
        class R:
            kind: ClassVar[str] = "r"
            a: int

        assert [f.name for f in recordclass.fields(R)] == ["a"]
        assert R.kind == "r"
        with pytest.raises(TypeError, match="needs a type annotation"):

            @recordclass.frozen
            class Bad:
                a = recordclass.field(default=1)  # type: ignore[var-annotated]

    def test_options_it_does_not_support_are_refused(self) -> None:
        with pytest.raises(TypeError, match="order"):

            @recordclass.frozen(order=True)
            class R:
                a: int

        with pytest.raises(TypeError, match="factory"):

            @recordclass.frozen
            class D:
                a: int = recordclass.field()

                @a.default  # type: ignore[untyped-decorator, unused-ignore]
                def _a(self) -> int:
                    return 1

        with pytest.raises(TypeError, match="slotted"):

            @recordclass.define(slots=False)
            class S:
                a: int

    def test_fields_are_inherited_base_first(self) -> None:
        @recordclass.frozen(kw_only=True)
        class Base:
            a: int
            b: int = 2

        @recordclass.frozen(kw_only=True)
        class Child(Base):
            c: int = 3
            b: int = 20

        assert [f.name for f in recordclass.fields(Child)] == ["a", "c", "b"]
        record = Child(a=1)
        assert (record.a, record.b, record.c) == (1, 20, 3)
        assert Child.__slots__ == ("c",)  # type: ignore[attr-defined]


class TestInstances:
    def test_frozen_records_refuse_assignment_and_deletion(self) -> None:
        @recordclass.frozen
        class R:
            a: int

        record = R(1)
        with pytest.raises(recordclass.FrozenInstanceError):
            record.a = 2  # type: ignore[misc]
        with pytest.raises(recordclass.FrozenInstanceError):
            del record.a
        with pytest.raises(AttributeError):
            record.b = 2  # type: ignore[attr-defined]
        assert issubclass(recordclass.FrozenInstanceError, AttributeError)
        assert recordclass.FrozenInstanceError.__name__ == "FrozenInstanceError"

    def test_mutable_records_convert_and_validate_on_assignment(self) -> None:
        def positive(inst: Any, attribute: Any, value: int) -> None:
            if value <= 0:
                raise ValueError(f"{attribute.name} must be positive")

        @recordclass.define
        class R:
            a: int = recordclass.field(converter=int, validator=positive)

        record = R("1")
        record.a = "5"  # type: ignore[assignment]
        assert record.a == 5
        with pytest.raises(ValueError, match="a must be positive"):
            record.a = 0

    def test_equality_and_hashing_follow_attrs(self) -> None:
        @recordclass.frozen
        class Frozen:
            a: float
            note: str = recordclass.field(default="", eq=False)

        @recordclass.define
        class Mutable:
            a: int

        @recordclass.frozen(eq=False)
        class Identity:
            a: int

        nan = math.nan
        assert Frozen(1.0, "x") == Frozen(1.0, "y")
        assert hash(Frozen(1.0, "x")) == hash(Frozen(1.0, "y"))
        assert Frozen(nan) == Frozen(nan)  # the same nan object: tuples compare it as equal
        assert Frozen(1.0) != Frozen(2.0)
        assert Frozen(1.0).__eq__(1.0) is NotImplemented
        assert Mutable(1) == Mutable(1)
        with pytest.raises(TypeError):
            hash(Mutable(1))
        assert Identity(1) != Identity(1)
        hash(Identity(1))

    def test_repr_and_a_class_bodys_own_methods(self) -> None:
        @recordclass.frozen
        class R:
            a: int
            hidden: str = recordclass.field(default="h", repr=False)
            shown: str = recordclass.field(default="abc", repr=lambda v: f"<{len(v)}>")

        @recordclass.frozen
        class Own:
            a: int

            def __repr__(self) -> str:
                return "own"

        assert repr(R(1)) == "R(a=1, shown=<3>)"
        assert repr(Own(1)) == "own"

    def test_records_take_weak_references_as_attrs_ones_do(self) -> None:
        import weakref

        @recordclass.frozen
        class Base:
            a: int

        @recordclass.frozen
        class Child(Base):
            b: int = 0

        for record in (Base(1), Child(1, 2), noderole.Service(name="x")):
            assert weakref.ref(record)() is record
        assert "__weakref__" not in vars(Child)["__slots__"]  # the base's slot serves

    def test_super_and_class_in_methods_mean_the_built_class(self) -> None:
        """A method's ``super()`` (and ``__class__``) work in the rebuilt class, as in attrs'."""

        class Named:
            __slots__ = ()

            def describe(self) -> str:
                return "named"

        @recordclass.frozen
        class R(Named):
            a: int

            def describe(self) -> str:
                return f"{super().describe()} {self.a}"

            @property
            def kind(self) -> Any:
                return __class__  # type: ignore[name-defined]

            @classmethod
            def make(cls) -> Any:
                assert cls is __class__  # type: ignore[name-defined]
                return cls(1)

        assert R(2).describe() == "named 2"
        assert R(2).kind is R
        assert R.make() == R(1)

    def test_copy_deepcopy_and_pickle(self) -> None:
        record = _Picklable(a=[1], b="x")
        for clone in (
            copy.copy(record),
            copy.deepcopy(record),
            pickle.loads(pickle.dumps(record)),
        ):
            assert clone == record
            assert clone is not record
        assert copy.deepcopy(record).a is not record.a

    def test_evolve_goes_through_init(self) -> None:
        @recordclass.frozen(kw_only=True)
        class R:
            a: int = recordclass.field(validator=lambda i, at, v: _positive(v))
            _b: str = ""

        record = R(a=1, b="x")
        assert recordclass.evolve(record, a=2) == R(a=2, b="x")
        with pytest.raises(ValueError, match="must be positive"):
            recordclass.evolve(record, a=-1)

    def test_asdict_keeps_collection_types_as_attrs_asdict_does(self) -> None:
        @recordclass.frozen(kw_only=True)
        class Inner:
            v: int = 1

        @recordclass.frozen(kw_only=True)
        class Outer:
            t: tuple[Any, ...] = (1, [Inner()], (Inner(), 2))
            d: dict[Any, Any] = recordclass.field(factory=lambda: {"k": Inner(), (1,): [Inner()]})
            p: Any = types.MappingProxyType({"x": 1})

        assert recordclass.asdict(Outer()) == attrs.asdict(Outer())
        assert recordclass.asdict(Outer())["t"] == (1, [{"v": 1}], ({"v": 1}, 2))

    def test_attrs_own_functions_accept_records(self) -> None:
        """Code written for attrs (attrs.evolve, asdict, fields, has) keeps working."""
        service = noderole.Service(name="x", need=["net"])
        assert attrs.has(noderole.Service)
        assert [f.name for f in attrs.fields(noderole.Service)][:3] == [
            "name",
            "description",
            "roles",
        ]
        assert attrs.evolve(service, description="d").need == ("net",)
        with pytest.raises(DefinitionError, match="string"):
            attrs.evolve(service, need="net")
        assert attrs.asdict(noderole.Supervision()) == recordclass.asdict(noderole.Supervision())

    def test_genuine_attrs_classes_pass_through(self) -> None:
        @attrs.frozen
        class Plain:
            a: int

        assert recordclass.evolve(Plain(1), a=2) == Plain(2)
        assert recordclass.asdict(Plain(1)) == {"a": 1}
        assert recordclass.has(Plain)
        assert not recordclass.has(int)


def _positive(value: int) -> None:
    if value <= 0:
        raise ValueError("must be positive")


@recordclass.frozen(kw_only=True)
class _Picklable:
    a: list[int]
    b: str


def test_building_records_imports_neither_attrs_nor_compiles() -> None:
    """The point of the builder: records and plans without attrs, and no code generated."""
    probe = (
        "import sys, builtins\n"
        "compiled = []\n"
        "real = builtins.compile\n"
        "def spy(source, filename, *a, **k):\n"
        "    if not str(filename).endswith('.py'):\n"  # modules loaded from source are fine
        "        compiled.append(filename)\n"
        "    return real(source, filename, *a, **k)\n"
        "builtins.compile = spy\n"
        "import noderole.records, noderole.plan, noderole.engine, noderole_k3s.records\n"
        "noderole.records.Service(name='x', command=['/bin/true'])\n"
        "print(sorted(m for m in sys.modules if m == 'attr' or m.startswith(('attr.', 'attrs'))))\n"
        "print(compiled)\n"
    )
    assert run_snippet(probe) == ["[]", "[]"]


# --------------------------------------------------------------------------- differential


def _attrs_facade() -> types.ModuleType:
    """``recordclass`` with attrs itself behind every name."""
    facade = types.ModuleType("recordclass_attrs")
    for name in recordclass.__all__:
        setattr(facade, name, getattr(attrs, name, None))
    facade.FrozenInstanceError = attrs.exceptions.FrozenInstanceError  # type: ignore[attr-defined]
    return facade


def _twin_module(
    module: types.ModuleType, *, records: types.ModuleType | None = None
) -> types.ModuleType:
    """``module`` executed again from its source with attrs behind ``recordclass`` (and the
    ``records`` twin behind ``noderole.records``, whose ``_checked`` the other modules use)."""
    path = Path(module.__file__ or "")
    spec = importlib.util.spec_from_file_location(f"{module.__name__}_attrs_twin", path)
    assert spec is not None
    assert spec.loader is not None
    twin = importlib.util.module_from_spec(spec)
    real_recordclass, real_records = noderole.recordclass, sys.modules["noderole.records"]
    noderole.recordclass = _attrs_facade()
    if records is not None:
        sys.modules["noderole.records"] = records
    try:
        spec.loader.exec_module(twin)
    finally:
        noderole.recordclass = real_recordclass
        sys.modules["noderole.records"] = real_records
    return twin


def _pairs() -> list[tuple[type, type]]:
    records = importlib.import_module("noderole.records")
    twins = {"noderole.records": _twin_module(records)}
    for name in ("noderole.rehearsal_records", "noderole_k3s.records"):
        twins[name] = _twin_module(importlib.import_module(name), records=twins["noderole.records"])
    return [
        (getattr(sys.modules[name], cls), getattr(twin, cls))
        for name, twin in twins.items()
        for cls in _record_classes(sys.modules[name])
    ]


def _record_classes(module: types.ModuleType) -> Iterator[str]:
    for name, value in vars(module).items():
        ours = isinstance(value, type) and value.__module__ == module.__name__
        if ours and "__record_fields__" in value.__dict__:
            yield name


_PAIRS = _pairs()

_VALUES = st.sampled_from(
    [
        None,
        "",
        "x",
        "k3s",
        "/etc/x",
        "/a/../../b",
        "all",
        "any",
        "SIGTERM",
        "server",
        "http://h/x",
        "a b",
        ["/etc/x"],
        ["/usr/bin/x", "-v"],
        ["net", "k3s"],
        [],
        ("a",),
        0,
        1,
        -1,
        5,
        65536,
        0o644,
        1.5,
        math.nan,
        math.inf,
        True,
        {"A": "1"},
        {"1A": "x"},
        {"key": [1, 2]},
        [{"kind": "x"}],
        str,
        int,
        print,
    ]
)


def _outcome(cls: type, kwargs: dict[str, Any], args: tuple[Any, ...] = ()) -> tuple[str, str]:
    try:
        made = cls(*args, **dict(kwargs))
    except Exception as error:
        return type(error).__name__, str(error)
    values = {f.alias: getattr(made, f.name) for f in attrs.fields(cls)}
    return "made", repr(values)


@pytest.mark.parametrize(("ours", "theirs"), _PAIRS, ids=[p[0].__qualname__ for p in _PAIRS])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_every_record_class_answers_as_its_attrs_build(
    ours: type, theirs: type, data: st.DataObject
) -> None:
    aliases = [f.alias for f in attrs.fields(theirs) if f.init]
    chosen = data.draw(st.lists(st.sampled_from(aliases), unique=True))
    kwargs = {alias: data.draw(_VALUES) for alias in chosen}
    if data.draw(st.booleans()):
        kwargs["unknown_field"] = 1
    # Positional arguments too, now and then: a refused call is worded (and the refusals are
    # ordered) as attrs' compiled __init__ words and orders them.
    args = tuple(data.draw(st.lists(_VALUES, max_size=3))) if data.draw(st.booleans()) else ()
    assert _outcome(ours, kwargs, args) == _outcome(theirs, kwargs, args)


@pytest.mark.parametrize(("ours", "theirs"), _PAIRS, ids=[p[0].__qualname__ for p in _PAIRS])
def test_every_record_class_declares_what_its_attrs_build_declares(
    ours: type, theirs: type
) -> None:
    def table(cls: type) -> list[tuple[Any, ...]]:
        return [
            (f.name, f.alias, f.init, f.kw_only, f.eq, f.hash is not False and f.eq, bool(f.repr))
            for f in attrs.fields(cls)
        ]

    assert table(ours) == table(theirs)
    assert set(vars(ours)["__slots__"]) == set(vars(theirs)["__slots__"])
    assert bool(ours.__weakrefoffset__) == bool(theirs.__weakrefoffset__)


@given(st.binary(max_size=4096))
def test_the_interpreter_s_sha256_is_hashlib_s(data: bytes) -> None:
    """noderole.supervisor.sha256 (no OpenSSL) gives hashlib's digest, whole and fed in
    pieces."""
    import hashlib

    from noderole.supervisor import sha256

    assert sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
    pieces = sha256()
    for start in range(0, len(data), 7):
        pieces.update(data[start : start + 7])
    assert pieces.digest() == hashlib.sha256(data).digest()
