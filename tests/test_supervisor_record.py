"""The supervisor's record classes (noderole/supervisor/_record.py): what it kept of dataclasses."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Mapping
from types import MappingProxyType

import pytest

from noderole.supervisor._record import FrozenInstanceError, field, fields, record, replace
from noderole.supervisor._spec import ProcessSpec, SupervisionSpec
from noderole.supervisor._state import State
from noderole.supervisor._status import ServiceStatus
from noderole.supervisor.probes import Outcome, TcpProbe


@record()
class Point:
    """A frozen, keyword-only record with a hidden, unhashed field."""

    x: int
    y: int = 0
    tags: Mapping[str, str] = field(default_factory=dict, repr=False, hash=False)
    checked: int = 0

    def __post_init__(self) -> None:
        if self.x < 0:
            raise ValueError(f"x must be >= 0, got {self.x}")
        object.__setattr__(self, "tags", MappingProxyType(dict(self.tags)))


@record(frozen=False, kw_only=False)
class Box:
    """A mutable, positional record."""

    items: list[int] = field(default_factory=list)
    label: str = ""


class TestRecord:
    def test_fields_in_order_and_keyword_only(self) -> None:
        """The annotated names are the fields; a frozen record takes keywords only."""
        assert fields(Point) == ("x", "y", "tags", "checked")
        with pytest.raises(TypeError):
            Point(1, 2)  # type: ignore[call-arg]
        with pytest.raises(TypeError):
            Point()  # type: ignore[call-arg]
        with pytest.raises(TypeError):
            Point(x=1, z=2)  # type: ignore[call-arg]

    def test_defaults_and_fresh_factories(self) -> None:
        """Defaults fill in; a factory makes a new value for every instance."""
        first, second = Box(), Box()
        first.items.append(1)
        assert second.items == []
        assert Point(x=1).y == 0

    def test_post_init_runs_and_may_refuse(self) -> None:
        """__post_init__ checks and normalises, as with dataclasses."""
        assert isinstance(Point(x=1, tags={"a": "b"}).tags, MappingProxyType)
        with pytest.raises(ValueError, match="x must be >= 0"):
            Point(x=-1)

    def test_frozen_refuses_assignment_and_deletion(self) -> None:
        """Assigning or deleting a field raises FrozenInstanceError, an AttributeError."""
        point = Point(x=1)
        with pytest.raises(FrozenInstanceError):
            point.x = 2  # type: ignore[misc]
        with pytest.raises(AttributeError):
            del point.x
        assert point.x == 1

    def test_slotted(self) -> None:
        """No instance dictionary: an unknown attribute cannot be set."""
        box = Box()
        assert not hasattr(box, "__dict__")
        with pytest.raises(AttributeError):
            box.other = 1  # type: ignore[attr-defined]
        box.label = "now"
        assert box.label == "now"

    def test_repr_leaves_out_hidden_fields(self) -> None:
        """repr names the class and every field but those with repr=False."""
        assert repr(Point(x=1, y=2, tags={"secret": "s"})) == "Point(x=1, y=2, checked=0)"
        assert repr(Box([1], "b")) == "Box(items=[1], label='b')"

    def test_equality_and_hash(self) -> None:
        """Equal by fields and class; the hash leaves out hash=False fields; mutable: none."""
        assert Point(x=1, tags={"a": "1"}) == Point(x=1, tags={"a": "1"})
        assert Point(x=1, tags={"a": "1"}) != Point(x=1, tags={"a": "2"})
        assert hash(Point(x=1, tags={"a": "1"})) == hash(Point(x=1, tags={"a": "2"}))
        assert Point(x=1) != Box()  # type: ignore[comparison-overlap]
        assert Box([1]) == Box([1])
        with pytest.raises(TypeError):
            hash(Box())

    def test_replace_checks_like_init(self) -> None:
        """replace copies with changes, through __init__ (and __post_init__)."""
        point = Point(x=1, y=2)
        assert replace(point, y=3) == Point(x=1, y=3)
        with pytest.raises(ValueError, match="x must be"):
            replace(point, x=-1)
        with pytest.raises(TypeError):
            replace(point, z=1)

    def test_copy_and_pickle_of_frozen(self) -> None:
        """copy, deepcopy and pickle work on frozen slotted records."""
        probe = TcpProbe(host="h", port=1)
        assert copy.copy(probe) == probe
        assert copy.deepcopy(probe) == probe
        assert pickle.loads(pickle.dumps(probe)) == probe

    def test_match_args(self) -> None:
        """Positional records match positionally; keyword-only ones do not."""
        assert Box.__match_args__ == ("items", "label")
        assert Point.__match_args__ == ()


class TestSupervisorRecords:
    def test_spec_round_trips_and_hides_environment(self) -> None:
        """ProcessSpec: the wire form round-trips; repr leaves out the environment."""
        spec = ProcessSpec(
            name="a",
            argv=["/bin/true"],  # type: ignore[arg-type]
            environment={"TOKEN": "s3cret"},
            supervision=SupervisionSpec(respawn_max=3),
        )
        assert spec.argv == ("/bin/true",)
        assert ProcessSpec.from_wire(spec.to_wire()) == spec
        assert "s3cret" not in repr(spec)
        assert hash(spec) == hash(replace(spec, environment={"TOKEN": "other"}))

    def test_status_but_and_state_defaults(self) -> None:
        """ServiceStatus.but copies with changes; State starts empty, mutable."""
        status = ServiceStatus(name="a")
        assert status.but(state="running").state == "running"
        state = State()
        state.services["a"] = status
        assert State().services == {}

    def test_probe_and_outcome(self) -> None:
        """Probes are keyword-only and frozen; Outcome is positional."""
        assert TcpProbe(host="h", port=1) == TcpProbe(host="h", port=1)
        assert Outcome(True).missing == ()


@record(kw_only=False)
class _Positional:
    a: int
    b: int
    c: int = 0


@record()
class _Keywords:
    a: int
    b: int
    c: int
    d: int = 0


_REFERENCES = {
    _Positional: "def __init__(self, a, b, c=0): pass",
    _Keywords: "def __init__(self, *, a, b, c, d=0): pass",
}
_BAD_CALLS: list[tuple[tuple[object, ...], dict[str, object]]] = [
    ((), {}),
    ((1,), {}),
    ((1, 2, 3, 4), {}),
    ((1, 2, 3, 4, 5), {}),
    ((1,), {"a": 2}),
    ((), {"z": 1}),
    ((), {"a": 1, "z": 1}),
    ((), {"a": 1}),
    ((), {"b": 1, "c": 2}),
    ((1, 2), {"b": 3, "z": 4}),
]


class TestRefusedCalls:
    """__init__ is made without compiling source (a tenth of the daemon's start went to
    compiling eleven of them); a bad call is refused in the words a compiled one would use."""

    @pytest.mark.parametrize("cls", list(_REFERENCES), ids=lambda cls: cls.__name__)
    @pytest.mark.parametrize("call", _BAD_CALLS, ids=repr)
    def test_same_words_as_a_compiled_init(
        self, cls: type, call: tuple[tuple[object, ...], dict[str, object]]
    ) -> None:
        scope: dict[str, object] = {}
        exec(_REFERENCES[cls], scope)
        reference = scope["__init__"]
        reference.__qualname__ = f"{cls.__qualname__}.__init__"  # type: ignore[attr-defined]
        args, kwargs = call
        with pytest.raises(TypeError) as expected:
            reference(object(), *args, **kwargs)  # type: ignore[operator]
        with pytest.raises(TypeError) as got:
            cls(*args, **kwargs)
        assert str(got.value) == str(expected.value)

    def test_good_calls_fill_defaults_and_factories(self) -> None:
        assert (_Positional(1, 2).c, _Positional(1, b=2, c=3).c) == (0, 3)
        assert _Keywords(a=1, b=2, c=3) == _Keywords(c=3, b=2, a=1, d=0)
        assert Box().items is not Box().items
