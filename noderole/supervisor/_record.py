"""Slotted record classes for the supervisor, without :mod:`dataclasses`.

The daemon's start is on the boot's critical path when apply's go finds its standby still
importing: :mod:`dataclasses` imports :mod:`inspect` (and with it ``ast``, ``dis``, ``tokenize``),
which is most of the daemon's import time beyond what it needs anyway. :func:`record` makes what
the supervisor used of a ``dataclass(slots=True)``: the class is rebuilt with ``__slots__``, and
given an ``__init__`` (keyword-only unless asked; a closure over the fields, not compiled source,
which cost up to 1M instructions a class at every daemon start), ``__repr__``, ``__eq__``, and,
when frozen, ``__hash__``, assignment refused (:class:`FrozenInstanceError`) and copy support.
``__post_init__`` runs after ``__init__``. Type checkers see it as a dataclass transform.
"""

from __future__ import annotations

__all__ = ["FrozenInstanceError", "field", "fields", "record", "replace"]

TYPE_CHECKING = False  # typing is not imported at run time: the daemon stays small
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar, dataclass_transform

    T = TypeVar("T")
else:

    def dataclass_transform(**_: object) -> Callable[[T], T]:
        return lambda function: function


class FrozenInstanceError(AttributeError):
    """A field of a frozen record was assigned or deleted."""


_MISSING: Any = object()


class _Field:
    __slots__ = ("default", "factory", "hash", "repr")

    def __init__(
        self, default: object, factory: Callable[[], object] | None, repr: bool, hash: bool
    ) -> None:
        self.default = default
        self.factory = factory
        self.repr = repr
        self.hash = hash


def field(
    *,
    default: Any = _MISSING,
    default_factory: Callable[[], Any] | None = None,
    repr: bool = True,
    hash: bool = True,
) -> Any:
    """A field with a default (or a factory of one), left out of ``repr`` or ``hash`` if asked."""
    return _Field(default, default_factory, repr, hash)


def fields(cls: type) -> tuple[str, ...]:
    """The field names of a record class, in order."""
    names: tuple[str, ...] = cls.__record_fields__  # type: ignore[attr-defined]
    return names


def replace(obj: T, **changes: Any) -> T:
    """A copy of the record ``obj`` with ``changes`` (checked by its ``__init__``)."""
    values = {name: getattr(obj, name) for name in fields(type(obj))}
    return type(obj)(**{**values, **changes})


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(field,))
def record(*, frozen: bool = True, kw_only: bool = True) -> Callable[[type[T]], type[T]]:
    """Make the decorated class a slotted record of its annotated fields."""

    def build(cls: type[T]) -> type[T]:
        return _build(cls, frozen=frozen, kw_only=kw_only)

    return build


def _build(cls: type[T], *, frozen: bool, kw_only: bool) -> type[T]:
    namespace = dict(cls.__dict__)
    names = tuple(namespace.get("__annotations__", {}))
    specs: dict[str, _Field] = {}
    for name in names:
        value = namespace.pop(name, _MISSING)
        specs[name] = value if isinstance(value, _Field) else _Field(value, None, True, True)
    namespace.pop("__dict__", None)
    namespace.pop("__weakref__", None)
    namespace["__slots__"] = names
    namespace["__record_fields__"] = names
    namespace["__match_args__"] = () if kw_only else names
    namespace["__init__"] = _make_init(
        cls.__qualname__,
        specs,
        frozen=frozen,
        kw_only=kw_only,
        post_init="__post_init__" in namespace,
    )
    shown = tuple(name for name in names if specs[name].repr)
    hashed = tuple(name for name in names if specs[name].hash)

    def __repr__(self: object) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
        return f"{type(self).__qualname__}({inner})"

    def __eq__(self: object, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        mine = tuple(getattr(self, name) for name in names)
        return mine == tuple(getattr(other, name) for name in names)

    namespace["__repr__"] = __repr__
    namespace["__eq__"] = __eq__
    if frozen:

        def __hash__(self: object) -> int:
            return hash(tuple(getattr(self, name) for name in hashed))

        def __setattr__(self: object, name: str, value: object) -> None:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")

        def __delattr__(self: object, name: str) -> None:
            raise FrozenInstanceError(f"cannot delete field {name!r}")

        def __getstate__(self: object) -> tuple[object, ...]:
            return tuple(getattr(self, name) for name in names)

        def __setstate__(self: object, state: tuple[object, ...]) -> None:
            for name, value in zip(names, state, strict=True):
                object.__setattr__(self, name, value)

        namespace.update(
            __hash__=__hash__,
            __setattr__=__setattr__,
            __delattr__=__delattr__,
            __getstate__=__getstate__,
            __setstate__=__setstate__,
        )
    else:
        namespace["__hash__"] = None  # mutable and compared by value: unhashable, as a dataclass
    metaclass: Any = type(cls)
    built: type[T] = metaclass(cls.__name__, cls.__bases__, namespace)
    return built


def _make_init(
    qualname: str, specs: dict[str, _Field], *, frozen: bool, kw_only: bool, post_init: bool
) -> Callable[..., None]:
    """The class's ``__init__``, a closure rather than compiled source: compiling one cost up to
    1M instructions a class, paid at every daemon start and by a boot's apply for half of them.
    A call it cannot take is refused by Python itself (:func:`_refuse`)."""
    names = tuple(specs)
    positional = () if kw_only else names
    known = frozenset(names)
    required = frozenset(
        name for name, spec in specs.items() if spec.default is _MISSING and spec.factory is None
    )
    fills = tuple((name, spec.factory, spec.default) for name, spec in specs.items())
    assign = object.__setattr__ if frozen else setattr

    def __init__(self: object, *args: object, **kwargs: object) -> None:
        given = kwargs
        if args:
            given = {**kwargs, **dict(zip(positional, args, strict=False))}
            if len(args) > len(positional) or len(given) < len(kwargs) + len(args):
                _refuse(qualname, specs, positional, args, kwargs)
        if not known.issuperset(given) or not required.issubset(given):
            _refuse(qualname, specs, positional, args, kwargs)
        for name, factory, default in fills:
            value = given.get(name, _MISSING)
            if value is _MISSING:
                value = factory() if factory is not None else default
            assign(self, name, value)
        if post_init:
            self.__post_init__()  # type: ignore[attr-defined]

    __init__.__qualname__ = f"{qualname}.__init__"
    return __init__


def _refuse(
    qualname: str,
    specs: dict[str, _Field],
    positional: tuple[str, ...],
    args: tuple[object, ...],
    kwargs: dict[str, object],
) -> None:
    """Raise the :class:`TypeError` a compiled ``__init__`` raises for this call, in its words
    and order: the class's signature is compiled (only now, for a call that is refused) and
    called with the same arguments."""
    params = [
        f"{name}=None" if specs[name].default is not _MISSING or specs[name].factory else name
        for name in specs
    ]
    head = ", ".join(params[: len(positional)])
    rest = ", ".join(params[len(positional) :])
    signature = ", ".join(part for part in (head, f"*, {rest}" if rest else "") if part)
    scope: dict[str, Any] = {}
    exec(f"def __init__(self, {signature}): pass", scope)
    reference = scope["__init__"]
    reference.__qualname__ = f"{qualname}.__init__"
    reference(None, *args, **kwargs)
    raise AssertionError(f"{qualname}: a call its signature takes was refused")  # pragma: no cover
