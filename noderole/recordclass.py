"""Record classes as attrs declares them, built without generating code at import.

Every record class of noderole (and of its shipped plugins) is declared with the keyword API of
attrs' ``frozen``/``define``/``field``: annotated fields, ``converter=``, ``validator=`` (and the
``@field.validator`` decorator), ``default=``/``factory=``, ``repr``/``eq``/``hash`` per field,
``init=False``, ``metadata``, ``alias``, ``__attrs_post_init__``. attrs turns each declaration into
source code for ``__init__``, ``__repr__``, ``__eq__`` and ``__hash__`` and compiles it when the
class is created: 0.5 to 0.8 ms per class, paid by every command that loads a plugin, plus
attrs' own import. This module builds the same classes from one generic ``__init__`` and
generic methods that read a per-class table of fields: no source, no compilation, and attrs is not
imported. Only a call that ``__init__`` refuses compiles something: the class's signature, once
called with the same arguments, so that the refusal is Python's own, word for word and in the
order a compiled ``__init__`` checks (a positional argument given twice, an unknown keyword, too
many positions, then what is missing).

What a class gets is what attrs gives it (a test builds an attrs twin of every public record class,
noderole's and the k3s plugin's, from the same source, and compares them on generated input):

- ``__slots__`` of its fields (and ``__weakref__``); frozen classes refuse assignment with
  :class:`FrozenInstanceError`, mutable ones run a field's converter and validators on
  assignment, as attrs' ``define`` does;
- ``__init__``: keyword-only where asked, positional otherwise, in field order; a default or a
  factory for a missing argument; each converter applied (to defaults too), then, once every
  field is set, each validator called as ``validator(instance, field, value)`` in field order;
  then ``__attrs_post_init__``;
- ``__repr__``, ``__eq__``/``__ne__`` and ``__hash__`` where asked and not written in the class
  body (a class body's own method wins, like attrs' ``auto_detect``); ``hash=None`` follows attrs:
  frozen and compared classes hash their compared fields, mutable compared classes are unhashable;
- copy and pickle support, ``__match_args__`` for positional classes.

Type checkers see attrs itself (its mypy plugin types converters, which PEP 681's
``dataclass_transform`` cannot). Code outside noderole that calls attrs' own functions on a record
(``attrs.evolve``, ``attrs.asdict``, ``attrs.fields``) still works: a class's
``__attrs_attrs__`` is made on first use, importing attrs then.

Not supported (a clear ``TypeError`` at class creation, never a silent difference): any other
option of ``frozen``/``define``/``field``, ``order``, ``on_setattr``, ``@field.default``.
"""

from __future__ import annotations

import operator
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

__all__ = [
    "NOTHING",
    "Attribute",
    "Factory",
    "Field",
    "FrozenInstanceError",
    "asdict",
    "define",
    "evolve",
    "field",
    "fields",
    "frozen",
    "has",
]

T = TypeVar("T")
Validator = Callable[[Any, Any, Any], Any]


class _Nothing:
    """The sentinel of "no default": one instance, :data:`NOTHING`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOTHING"

    def __bool__(self) -> bool:
        return False


_NOTHING = _Nothing()


class _FrozenInstanceError(AttributeError):
    """A field of a frozen record was assigned or deleted."""

    msg = "can't set attribute"

    def __init__(self, name: str = "") -> None:
        super().__init__(self.msg if not name else f"{self.msg}: {name!r} of a frozen record")


_FrozenInstanceError.__name__ = _FrozenInstanceError.__qualname__ = "FrozenInstanceError"


class _Factory:
    """A default made anew for every instance: ``field(factory=list)`` stores ``Factory(list)``."""

    __slots__ = ("factory",)

    def __init__(self, factory: Callable[[], Any]) -> None:
        self.factory = factory

    def __repr__(self) -> str:
        return f"Factory({self.factory!r})"


class Field:
    """One field of a record class: what ``field()`` declared, completed when the class is built.

    Read by :func:`fields` (``name``, ``alias``, ``default``, ``metadata``, ``repr``, ``eq``,
    ``hash``, ``init``, ``kw_only``, ``converter``, ``validator``); passed to validators as their
    second argument, as attrs passes its ``Attribute``.
    """

    __slots__ = (
        "alias",
        "converter",
        "default",
        "eq",
        "hash",
        "init",
        "kw_only",
        "metadata",
        "name",
        "repr",
        "validators",
    )

    def __init__(
        self,
        name: str,
        default: Any,
        validators: list[Validator],
        converter: Callable[[Any], Any] | None,
        repr: bool | Callable[[Any], str],
        eq: bool,
        hash: bool | None,
        init: bool,
        metadata: Mapping[Any, Any] | None,
        alias: str,
        kw_only: bool,
    ) -> None:
        # Positional, in this order: a class of twenty fields makes twenty of these at import.
        self.name = name
        self.default = default
        self.validators = validators
        self.converter = converter
        self.repr = repr
        self.eq = eq
        self.hash = hash
        self.init = init
        self.metadata: Mapping[Any, Any] = (
            types.MappingProxyType(dict(metadata)) if metadata else _NO_METADATA
        )
        self.alias = alias
        self.kw_only = kw_only

    @property
    def validator(self) -> Validator | None:
        """The field's validators as one callable (None without any)."""
        checks = tuple(self.validators)
        if not checks:
            return None
        if len(checks) == 1:
            return checks[0]

        def all_of(inst: Any, attribute: Any, value: Any) -> None:
            for check in checks:
                check(inst, attribute, value)

        return all_of

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, default={self.default!r}, alias={self.alias!r})"


_NO_METADATA: Mapping[Any, Any] = types.MappingProxyType({})


class _Declared:
    """What ``field()`` returns in a class body: the declaration of a :class:`Field`, and a
    decorator of validator methods (``@name.validator``)."""

    __slots__ = ("options", "validators")

    def __init__(self, validators: list[Validator], options: tuple[Any, ...]) -> None:
        self.validators = validators
        self.options = options
        """``field()``'s arguments as one tuple (no dict per field): default, converter, repr, eq,
        hash, init, metadata, alias, kw_only."""

    def validator(self, method: Validator) -> Validator:
        """Add ``method`` (``def _check(self, attribute, value)``) to this field's validators."""
        self.validators.append(method)
        return method

    def default(self, method: Callable[..., Any]) -> Any:
        """attrs' ``@x.default`` is not supported: say so where the class is written."""
        raise TypeError("record classes do not support @field.default; use field(factory=...)")


def _field(
    *,
    default: Any = _NOTHING,
    validator: Validator | Iterable[Validator] | None = None,
    repr: bool | Callable[[Any], str] = True,
    hash: bool | None = None,
    init: bool = True,
    metadata: Mapping[Any, Any] | None = None,
    converter: Callable[[Any], Any] | None = None,
    factory: Callable[[], Any] | None = None,
    kw_only: bool = False,
    eq: bool = True,
    alias: str | None = None,
) -> Any:
    """Declare a field (attrs' ``field``, with the options noderole's records use)."""
    if factory is not None:
        if default is not _NOTHING:
            raise ValueError("The `default` and `factory` arguments are mutually exclusive.")
        default = _Factory(factory)
    if validator is None:
        validators: list[Validator] = []
    elif callable(validator):
        validators = [validator]
    else:
        validators = list(validator)
    return _Declared(
        validators, (default, converter, repr, eq, hash, init, metadata, alias, kw_only)
    )


class _Fields(tuple[Field, ...]):
    """A class's fields, in order; each also reachable by name (``fields(C).name``)."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Field:
        for item in self:
            if item.name == name:
                return item
        raise AttributeError(name)


def _fields(cls: type) -> _Fields:
    """The fields of a record class, in order (attrs' ``fields``; an attrs class's own too)."""
    if not isinstance(cls, type):
        raise TypeError("Passed object must be a class.")
    found = getattr(cls, "__record_fields__", None)
    if found is None:
        import attrs

        found = _Fields(attrs.fields(cls))
    result: _Fields = found
    return result


def _has(cls: type) -> bool:
    """Whether ``cls`` is a record class (built here, or by attrs itself)."""
    if getattr(cls, "__record_fields__", None) is not None:
        return True
    attr = sys.modules.get("attr")  # no attrs class can exist before attrs is imported
    return attr is not None and bool(attr.has(cls))


def _evolve(inst: T, **changes: Any) -> T:
    """A copy of ``inst`` with ``changes``, made through its ``__init__`` (attrs' ``evolve``)."""
    cls = type(inst)
    if getattr(cls, "__record_fields__", None) is None:
        import attrs

        evolved: T = attrs.evolve(cast(Any, inst), **changes)
        return evolved
    for item in _fields(cls):
        if item.init and item.alias not in changes:
            changes[item.alias] = getattr(inst, item.name)
    return cls(**changes)


def _asdict(inst: Any, *, recurse: bool = True) -> dict[str, Any]:
    """The fields of ``inst`` as a dict (``attrs.asdict`` with its defaults).

    Nested records become dicts too, also inside tuples, lists, sets and dicts, which keep their
    own type (a dict subclass becomes a dict); other values (mapping proxies included) are kept.
    """
    cls = type(inst)
    if getattr(cls, "__record_fields__", None) is None:
        import attrs

        return attrs.asdict(inst, recurse=recurse)
    result = {}
    for item in _fields(cls):
        value = getattr(inst, item.name)
        result[item.name] = _as_data(value) if recurse else value
    return result


def _as_data(value: Any) -> Any:
    kind = type(value)
    if kind in _ATOMS:
        return value
    if _has(kind):
        return _asdict(value)
    if issubclass(kind, tuple | list | set | frozenset):
        items = [_as_data(item) for item in value]
        if hasattr(kind, "_fields"):
            return kind(*items)  # a named tuple takes its items one by one
        return kind(items)
    if issubclass(kind, dict):
        return {_as_data(key): _as_data(item) for key, item in value.items()}
    return value


_ATOMS = frozenset({type(None), bool, int, float, complex, str, bytes, range, type})


# --------------------------------------------------------------------------- building

_OPTIONS = frozenset({"kw_only", "repr", "eq", "hash", "slots"})


def _frozen(maybe_cls: type[T] | None = None, **options: Any) -> Any:
    """A frozen, slotted record class (attrs' ``frozen``)."""
    return _decorate(maybe_cls, options, frozen=True)


def _define(maybe_cls: type[T] | None = None, **options: Any) -> Any:
    """A mutable, slotted record class (attrs' ``define``)."""
    return _decorate(maybe_cls, options, frozen=False)


def _decorate(maybe_cls: type[T] | None, options: dict[str, Any], *, frozen: bool) -> Any:
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise TypeError(f"record classes do not support the option(s) {', '.join(unknown)}")
    if options.get("slots", True) is not True:
        raise TypeError("record classes are always slotted (slots=False is not supported)")

    def wrap(cls: type[T]) -> type[T]:
        return _build(
            cls,
            frozen=frozen,
            kw_only=bool(options.get("kw_only", False)),
            repr=bool(options.get("repr", True)),
            eq=bool(options.get("eq", True)),
            hash=options.get("hash"),
        )

    return wrap if maybe_cls is None else wrap(maybe_cls)


def _is_classvar(annotation: object) -> bool:
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return text.startswith(
        ("ClassVar", "typing.ClassVar", "t.ClassVar", "typing_extensions.ClassVar")
    )


def _collect(cls: type, kw_only: bool) -> tuple[list[Field], list[str], list[str]]:
    """The class's fields (its bases' first, as attrs orders them), the names it declares and
    those of them no base has a slot for."""
    inherited: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for item in base.__dict__.get("__record_fields__", ()):
            inherited[item.name] = item
    own: dict[str, Field] = {}
    body = cls.__dict__
    annotations = body.get("__annotations__", {})  # as inspect.get_annotations reads a class
    for name, annotation in annotations.items():
        if _is_classvar(annotation):
            continue
        value = body.get(name, _NOTHING)
        if isinstance(value, _Declared):
            default, converter, shown, eq, hashed, init, metadata, alias, only = value.options
            made = Field(
                name,
                default,
                list(value.validators),
                converter,
                shown,
                eq,
                eq if hashed is None else hashed,
                init,
                metadata,
                alias or name.lstrip("_"),
                only or kw_only,
            )
        else:  # a plain default (or none): field()'s defaults
            made = Field(
                name, value, [], None, True, True, True, True, None, name.lstrip("_"), kw_only
            )
        own[name] = made
        inherited.pop(name, None)
    for name, value in body.items():
        if isinstance(value, _Declared) and name not in own:
            raise TypeError(f"{cls.__qualname__}.{name}: a field needs a type annotation")
    every = [*inherited.values(), *own.values()]
    seen_default = False
    for item in every:
        if item.kw_only or not item.init:
            continue
        if item.default is _NOTHING and seen_default:
            raise ValueError(
                f"No mandatory attributes allowed after an attribute with a default value or "
                f"factory.  Attribute in question: {item.name!r}"
            )
        seen_default = seen_default or item.default is not _NOTHING
    taken = _slot_names(cls.__mro__[1:])
    added = [name for name in own if name not in taken]
    return every, list(own), added


def _slot_names(bases: Iterable[type]) -> set[str]:
    names: set[str] = set()
    for base in bases:
        slots = base.__dict__.get("__slots__", ())
        names.update((slots,) if isinstance(slots, str) else slots)
    return names


def _build(
    cls: type[T], *, frozen: bool, kw_only: bool, repr: bool, eq: bool, hash: bool | None
) -> type[T]:
    every, declared, added = _collect(cls, kw_only)
    body = cls.__dict__
    namespace = {
        key: value
        for key, value in body.items()
        if key not in ("__dict__", "__weakref__") and not isinstance(value, _Declared)
    }
    for name in declared:
        namespace.pop(name, None)  # a plain default lives in the field, not on the class
    table = _Fields(every)
    # Weak references to records work, as attrs' weakref_slot gives, unless a base has them.
    weakref = () if any(base.__weakrefoffset__ for base in cls.__mro__[1:]) else ("__weakref__",)
    namespace["__slots__"] = (*added, *weakref)
    namespace["__record_fields__"] = table
    namespace["__attrs_attrs__"] = _AttrsView()
    namespace["__init__"], bind = _make_init(cls.__qualname__, table, body)
    if not any(item.kw_only for item in table):
        namespace["__match_args__"] = tuple(item.name for item in table if item.init)
    if repr and "__repr__" not in body:
        namespace["__repr__"] = _make_repr(table)
    if eq and "__eq__" not in body:
        namespace["__eq__"], namespace["__ne__"] = _make_eq(table)
    if "__hash__" not in body:
        if hash is True or (hash is None and eq and frozen):
            namespace["__hash__"] = _make_hash(table)
        elif hash is None and eq:
            namespace["__hash__"] = None
    if frozen:
        namespace["__setattr__"] = _refuse_set
        namespace["__delattr__"] = _refuse_delete
    elif any(item.converter or item.validators for item in table):
        namespace["__setattr__"] = _make_setattr(table)
    namespace["__getstate__"] = _getstate
    namespace["__setstate__"] = _setstate
    metaclass: Any = type(cls)
    built: type[T] = metaclass(cls.__name__, cls.__bases__, namespace)
    bind(built)
    _repoint_class_cells(body, cls, built)
    return built


def _repoint_class_cells(body: Mapping[str, Any], old: type, new: type) -> None:
    """Make ``super()`` and ``__class__`` in the class body's methods mean the rebuilt class, as
    attrs does for the slotted classes it rebuilds (the compiler bound them to ``old``)."""
    for value in body.values():
        functions: tuple[Any, ...]
        if isinstance(value, types.FunctionType):
            functions = (value,)
        elif isinstance(value, property):
            functions = (value.fget, value.fset, value.fdel)
        elif isinstance(value, classmethod | staticmethod):
            functions = (value.__func__,)
        else:
            continue  # a constant, a nested class...: no cell of its own
        for function in functions:
            # Only a function that uses super() or __class__ has that cell (named __class__).
            if not isinstance(function, types.FunctionType):
                continue
            names, cells = function.__code__.co_freevars, function.__closure__
            if cells is None or "__class__" not in names:
                continue
            cell = cells[names.index("__class__")]
            try:
                if cell.cell_contents is old:
                    cell.cell_contents = new
            except ValueError:  # an empty cell
                continue


def _make_init(
    qualname: str, table: _Fields, body: Mapping[str, Any]
) -> tuple[Callable[..., None], Callable[[type], None]]:
    """The class's ``__init__``, and what binds it to the built class's slots."""
    positional = tuple(item.alias for item in table if item.init and not item.kw_only)
    known = frozenset(item.alias for item in table if item.init)
    required = frozenset(item.alias for item in table if item.init and item.default is _NOTHING)
    checks = tuple(
        (item, check) for item in table for check in (item.validator,) if check is not None
    )
    post_init = body.get("__attrs_post_init__")
    steps: list[tuple[Callable[[Any, Any], None], str | None, Any, Any, Any]] = []

    def bind(built: type) -> None:
        # Each slot's own descriptor sets it: no lookup by name, and past a frozen __setattr__.
        own = built.__dict__
        for item in table:
            slot = own.get(item.name)
            if slot is None:  # a base's field: the nearest base's slot
                slot = next(k.__dict__[item.name] for k in built.__mro__ if item.name in k.__dict__)
            steps.append(
                (
                    slot.__set__,
                    item.alias if item.init else None,
                    item.default.factory if isinstance(item.default, _Factory) else None,
                    item.default,
                    item.converter,
                )
            )

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        given = kwargs
        if args:  # placed by name; a position given twice or one too many is refused below
            given = {**kwargs, **dict(zip(positional, args, strict=False))}
            if len(args) > len(positional) or len(given) < len(kwargs) + len(args):
                _refuse(qualname, table, args, kwargs)
        if not known.issuperset(given) or not required.issubset(given):
            _refuse(qualname, table, args, kwargs)
        for assign, key, factory, default, converter in steps:
            value = given.get(key, _NOTHING)  # type: ignore[arg-type]
            if value is _NOTHING:
                if factory is not None:
                    value = factory()
                elif default is _NOTHING:
                    continue  # init=False without a default: left unset, as attrs does
                else:
                    value = default
            if converter is not None:
                value = converter(value)
            assign(self, value)
        for item, check in checks:
            check(self, item, getattr(self, item.name))
        if post_init is not None:
            post_init(self)

    __init__.__qualname__ = f"{qualname}.__init__"
    return __init__, bind


def _refuse(qualname: str, table: _Fields, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Raise the :class:`TypeError` attrs' compiled ``__init__`` raises for this call, in
    Python's words and order: the class's signature is compiled (only now, for a call that is
    refused) and called with the same arguments."""
    params = [item for item in table if item.init]
    spelled = [f"{f.alias}=None" if f.default is not _NOTHING else f.alias for f in params]
    head = [text for f, text in zip(params, spelled, strict=True) if not f.kw_only]
    tail = [text for f, text in zip(params, spelled, strict=True) if f.kw_only]
    signature = ", ".join(["self", *head, *(["*", *tail] if tail else [])])
    scope: dict[str, Any] = {}
    exec(f"def __init__({signature}): pass", scope)
    reference = scope["__init__"]
    reference.__qualname__ = f"{qualname}.__init__"
    reference(None, *args, **kwargs)
    raise AssertionError(f"{qualname}: a call its signature takes was refused")  # pragma: no cover


def _make_repr(table: _Fields) -> Callable[[Any], str]:
    shown = tuple((item.name, item.repr) for item in table if item.repr)

    def __repr__(self: Any) -> str:
        parts = []
        for name, how in shown:
            value = getattr(self, name, _NOTHING)
            text = how(value) if callable(how) else repr(value)
            parts.append(f"{name}={text}")
        return f"{type(self).__qualname__.rsplit('>.', 1)[-1]}({', '.join(parts)})"

    return __repr__


def _make_eq(table: _Fields) -> tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Any]]:
    values = _getter(tuple(item.name for item in table if item.eq))

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return values(self) == values(other)  # tuples: an identical nan equals itself, as in attrs

    def __ne__(self: Any, other: Any) -> Any:
        result = __eq__(self, other)
        return result if result is NotImplemented else not result

    return __eq__, __ne__


def _make_hash(table: _Fields) -> Callable[[Any], int]:
    values = _getter(tuple(item.name for item in table if item.hash))

    def __hash__(self: Any) -> int:
        return hash((type(self).__qualname__, *values(self)))

    return __hash__


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The values of ``names`` of an instance, as a tuple."""
    if not names:
        return lambda _: ()
    get = operator.attrgetter(*names)
    if len(names) == 1:
        return lambda obj: (get(obj),)
    return get


def _make_setattr(table: _Fields) -> Callable[[Any, str, Any], None]:
    by_name = {item.name: item for item in table}

    def __setattr__(self: Any, name: str, value: Any) -> None:
        item = by_name.get(name)
        if item is not None:
            if item.converter is not None:
                value = item.converter(value)
            check = item.validator
            if check is not None:
                check(self, item, value)
        object.__setattr__(self, name, value)

    return __setattr__


def _refuse_set(self: Any, name: str, value: Any) -> None:
    raise _FrozenInstanceError(name)


def _refuse_delete(self: Any, name: str) -> None:
    raise _FrozenInstanceError(name)


def _getstate(self: Any) -> dict[str, Any]:
    return {
        item.name: getattr(self, item.name)
        for item in _fields(type(self))
        if hasattr(self, item.name)
    }


def _setstate(self: Any, state: Mapping[str, Any]) -> None:
    for name, value in state.items():
        object.__setattr__(self, name, value)


class _AttrsView:
    """``__attrs_attrs__`` made on first use, so attrs' own functions accept a record class."""

    def __get__(self, instance: object, owner: type) -> Any:
        import attrs

        twin = attrs.make_class(
            owner.__name__,
            {
                item.name: attrs.field(
                    default=(
                        attrs.Factory(item.default.factory)
                        if isinstance(item.default, _Factory)
                        else item.default
                        if item.default is not _NOTHING
                        else attrs.NOTHING
                    ),
                    validator=item.validator,
                    converter=item.converter,
                    repr=item.repr,
                    eq=item.eq,
                    hash=item.hash,
                    init=item.init,
                    metadata=dict(item.metadata),
                    alias=item.alias,
                    kw_only=item.kw_only,
                )
                for item in _fields(owner)
            },
            slots=True,
            frozen=True,
        )
        view = attrs.fields(twin)
        type.__setattr__(owner, "__attrs_attrs__", view)
        return view


if TYPE_CHECKING:
    from attrs import (
        NOTHING,
        Attribute,
        Factory,
        asdict,
        define,
        evolve,
        field,
        fields,
        frozen,
        has,
    )
    from attrs.exceptions import FrozenInstanceError
else:
    Attribute = Field
    NOTHING = _NOTHING
    Factory = _Factory
    FrozenInstanceError = _FrozenInstanceError
    asdict = _asdict
    define = _define
    evolve = _evolve
    field = _field
    fields = _fields
    frozen = _frozen
    has = _has
