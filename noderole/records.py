"""The records plugins return: services, their pre-start steps, settings and stand-ins.

Every record is a frozen record class (:mod:`noderole.recordclass`: attrs' keyword API, built
without generated code) with keyword-only arguments. Converters normalise input (lists become
tuples, mappings become read-only mappings) so two records built from equal inputs compare equal,
and validators reject an invalid field at construction with a :class:`DefinitionError` that
names the record and the field. The plugin manager adds the plugin and hook to that message.

Paths in records are always the paths *as the booted node sees them* (``/etc/...``); the engine
resolves them under ``--root`` when it reads, writes or executes. That is what lets one record serve
a real boot, a rehearsal in a scratch directory, and a rendered OpenRC or systemd file.

Internal module: import the records from :mod:`noderole` (``noderole.Service``).
"""

from __future__ import annotations

import functools
import math
import operator
import posixpath
import threading
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias, TypeVar

from noderole import recordclass
from noderole.errors import DefinitionError
from noderole.names import SERVICE_NAME_MAX, is_lower_name, is_service_name, is_variable_name
from noderole.root import climbs_out

if TYPE_CHECKING:
    from noderole.stepcontext import StepContext

__all__ = [
    "Call",
    "Fail",
    "MakeDirectories",
    "MintCertificate",
    "Readiness",
    "Secret",
    "Service",
    "Setting",
    "SettingsTable",
    "Step",
    "Supervision",
    "Wait",
    "WaitForCommand",
    "WaitForHttp",
    "WaitForPaths",
    "WaitForSocket",
    "WaitForTcp",
    "Warn",
    "WriteFile",
    # helpers the configuration and the plan use
    "CA_CLOCK_WAIT",
    "LEAF_LIFETIME_DAYS",
    "MAX_SECONDS",
    "RecordBase",
    "did_you_mean",
    "in_words",
    "unknown_names",
]


# --------------------------------------------------------------------------- helpers

MAX_SECONDS = 366 * 24 * 3600.0
"""Longest duration a record accepts (a year): beyond it a bound is no bound, and the clock's
arithmetic would overflow the OS's timeout types."""

LEAF_LIFETIME_DAYS = 365
"""Days a minted serving certificate lives (``noderole.certs.LEAF_LIFETIME``; repeated here because
importing the certificate module loads cryptography, which building records must not)."""

CA_CLOCK_WAIT = 120.0
"""Longest time a :class:`MintCertificate` step waits for this node's clock to reach its CA's
notBefore (``noderole.certs.CLOCK_WAIT``, which says why). Defined here, where a renderer that
bounds a unit's start by its steps finds it without loading cryptography."""

_LIST = {"list": True}
"""Field metadata: the field takes a list (or tuple); a lone string is refused, never split."""

T = TypeVar("T")


def _fail(record: str, field: str, why: str) -> DefinitionError:
    return DefinitionError(f"{record}: field {field!r} {why}", field=field)


def _fail_with(value: object, record: str, field: str, why: str) -> DefinitionError:
    error = _fail(record, field, why)
    error.value = value
    return error


def _tuple_of_str(value: Iterable[str] | None) -> tuple[str, ...]:
    """Normalise a list of names: None is empty, order is kept (strings are refused earlier)."""
    if value is None:
        return ()
    return tuple(value)


def _tuple(value: Iterable[Any]) -> tuple[Any, ...]:
    """Any iterable to a tuple (a typed converter: mypy's attrs plugin cannot type ``tuple``)."""
    return tuple(value)


def _optional_tuple(value: Iterable[str] | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(value)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'k3s'?)`` for the closest of ``choices`` to ``word``, or ``""``.

    Pure and cheap: used by records (a misspelled keyword), configuration (an unknown key) and
    ``plan`` (a dependency on a name no service provides).
    """
    close = closest(word, choices)
    return f" (did you mean {close!r}?)" if close is not None else ""


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The closest of ``choices`` to ``word`` (difflib, cutoff 0.6), or None: what
    :func:`did_you_mean` suggests."""
    candidates = _may_match(word, sorted(set(choices)), cutoff=0.6)
    if not candidates:
        return None  # the common case (a name of another role): difflib is not even imported
    import difflib

    close = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return close[0] if close else None


def in_words(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``: a list inside a sentence of a message."""
    if len(items) < 2:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"


def _may_match(word: str, choices: list[str], cutoff: float) -> list[str]:
    """The ``choices`` that could score ``cutoff`` or more in ``difflib.get_close_matches``.

    Its score (``SequenceMatcher.ratio``) never exceeds ``2 * shared / total``, where ``shared``
    counts the letters both strings hold (with repeats) and ``total`` is their summed length:
    difflib's own ``quick_ratio`` bound, computed the same way. A choice under it cannot match,
    so leaving it out changes no answer; the order of ``choices`` is kept.
    """
    counts: dict[str, int] = {}
    for letter in word:
        counts[letter] = counts.get(letter, 0) + 1
    kept = []
    for choice in choices:
        total = len(word) + len(choice)
        if not total:
            kept.append(choice)  # two empty strings: difflib scores them 1.0
            continue
        left = dict(counts)
        shared = 0
        for letter in choice:
            if left.get(letter, 0) > 0:
                left[letter] -= 1
                shared += 1
        if 2.0 * shared / total >= cutoff:
            kept.append(choice)
    return kept


def _checked(cls: type[T]) -> type[T]:
    """Make every mistake in a record's construction a :class:`DefinitionError`.

    A class's ``__init__`` raises ``TypeError`` for a misspelled or missing keyword and a
    converter may raise a bare ``ValueError``; a plugin author should instead see the record, the
    field and the fix. A string given where a list is expected is refused here too: iterating it
    would split a command line into characters.
    """
    init = cls.__init__
    fields = recordclass.fields(cls)  # type: ignore[arg-type]
    known = [f.alias or f.name for f in fields]
    required = [f.alias or f.name for f in fields if f.default is recordclass.NOTHING]
    lists = [f.alias or f.name for f in fields if f.metadata.get("list")]
    kind = cls.__name__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        name = kwargs.get("name")
        label = f"{kind} {name!r}" if isinstance(name, str) else kind
        if args:
            raise DefinitionError(
                f"{label}: takes keyword arguments only (field=value), got {len(args)} "
                f"positional argument(s)"
            )
        for key in kwargs:
            if key not in known:
                raise DefinitionError(
                    f"{label}: unknown field {key!r}{did_you_mean(key, known)}; "
                    f"fields: {', '.join(known)}"
                )
        missing = [key for key in required if key not in kwargs]
        if missing:
            raise DefinitionError(f"{label}: field {missing[0]!r} is required")
        for key in lists:
            if isinstance(kwargs.get(key), str | bytes):
                raise _fail_with(
                    kwargs[key],
                    label,
                    key,
                    f"must be a list, got the string {kwargs[key]!r}; write [{kwargs[key]!r}] "
                    f"for one item (a string is never split)",
                )
        try:
            init(self, **kwargs)
        except DefinitionError as error:
            if error.field in kwargs and error.value is DefinitionError.NO_VALUE:
                error.value = kwargs[error.field]
            raise
        except (TypeError, ValueError) as error:
            raise DefinitionError(f"{label}: {error}") from None

    cls.__init__ = __init__  # type: ignore[method-assign]
    return cls


def _check_names(inst: Any, attribute: recordclass.Attribute[Any], value: tuple[str, ...]) -> None:
    for item in value:
        if not isinstance(item, str) or not is_service_name(item):
            raise _fail(
                _label(inst),
                attribute.name,
                f"has {item!r}, which is not a service name (letters, digits, '_.@+-')",
            )
        if len(item) > SERVICE_NAME_MAX:
            raise _fail(
                _label(inst),
                attribute.name,
                f"has {item[:40]!r}... ({len(item)} characters): a service name has at most "
                f"{SERVICE_NAME_MAX} characters",
            )


def _check_absolute(inst: Any, attribute: recordclass.Attribute[Any], value: str | None) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value.startswith("/"):
        raise _fail(_label(inst), attribute.name, f"must be an absolute path, got {value!r}")
    if "\0" in value:
        raise _fail(_label(inst), attribute.name, f"has a NUL character: {value!r}")
    if climbs_out(value):
        raise _fail(
            _label(inst),
            attribute.name,
            f"is {value!r}, whose '..' climbs above the root /; write the path without '..'",
        )


def _check_file(inst: Any, attribute: recordclass.Attribute[Any], value: str | None) -> None:
    """:func:`_check_absolute`, for the path of a file: one ending in ``/`` names a directory."""
    _check_absolute(inst, attribute, value)
    if value is not None and value.endswith("/"):
        raise _fail(
            _label(inst),
            attribute.name,
            f"is {value!r}, which ends in '/': name the file itself (such as /run/x.pid)",
        )


def _check_absolute_all(
    inst: Any, attribute: recordclass.Attribute[Any], value: tuple[str, ...]
) -> None:
    if not value:
        raise _fail(_label(inst), attribute.name, "must name at least one path")
    for item in value:
        try:
            _check_absolute(inst, attribute, item)
        except DefinitionError as error:
            # The path refused, not the list: a path from config.toml is traced to its key.
            error.value = item
            raise


def _one_of(*choices: str) -> Callable[[Any, recordclass.Attribute[Any], Any], None]:
    def check(inst: Any, attribute: recordclass.Attribute[Any], value: Any) -> None:
        if value not in choices:
            shown = ", ".join(repr(choice) for choice in choices)
            raise _fail(_label(inst), attribute.name, f"must be one of {shown}, got {value!r}")

    return check


def _non_empty(inst: Any, attribute: recordclass.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise _fail(_label(inst), attribute.name, f"must be a non-empty string, got {value!r}")


COMMON_NAME_MAX = 64
"""Longest subject common name of a minted leaf: X.509's ub-common-name (RFC 5280), which
cryptography enforces on the name's UTF-8 bytes."""


def _check_common_name(inst: Any, attribute: recordclass.Attribute[Any], value: Any) -> None:
    _non_empty(inst, attribute, value)
    if not _passable(value):
        raise _fail(_label(inst), attribute.name, f"must be UTF-8 text without NUL, got {value!r}")
    size = len(value.encode("utf-8"))
    if size > COMMON_NAME_MAX:
        raise _fail(
            _label(inst),
            attribute.name,
            f"must be 1 to {COMMON_NAME_MAX} characters long (X.509's ub-common-name, counted "
            f"in UTF-8 bytes), got {size}: {value[:40]!r}...",
        )


def _is_table_name(text: str) -> bool:
    return is_lower_name(text, hyphen=True)


def _matches(
    shape: Callable[[str], bool], what: str
) -> Callable[[Any, recordclass.Attribute[Any], Any], None]:
    def check(inst: Any, attribute: recordclass.Attribute[Any], value: Any) -> None:
        if not isinstance(value, str) or not shape(value):
            raise _fail(_label(inst), attribute.name, f"must be {what}, got {value!r}")

    return check


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_seconds(
    inst: Any, attribute: recordclass.Attribute[Any], value: float | None, *, zero: bool
) -> None:
    if value is None:
        return
    low = ">= 0" if zero else "> 0"
    if (
        not _is_number(value)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not zero)
        or value > MAX_SECONDS
    ):
        raise _fail(
            _label(inst),
            attribute.name,
            f"must be a finite number of seconds {low} and <= {MAX_SECONDS:g} (a year), "
            f"got {value!r}",
        )


def _check_non_negative(
    inst: Any, attribute: recordclass.Attribute[Any], value: float | None
) -> None:
    _check_seconds(inst, attribute, value, zero=True)


def _check_positive(inst: Any, attribute: recordclass.Attribute[Any], value: float | None) -> None:
    _check_seconds(inst, attribute, value, zero=False)


_COUNT_MAX = 2**31 - 1
"""The largest count the supervisor takes (a C int's)."""


def _check_count(inst: Any, attribute: recordclass.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _COUNT_MAX:
        raise _fail(
            _label(inst),
            attribute.name,
            f"must be a whole number from 0 to {_COUNT_MAX}, got {value!r}",
        )


def _check_port(inst: Any, attribute: recordclass.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise _fail(_label(inst), attribute.name, f"must be a port 1-65535, got {value!r}")


def _passable(text: str) -> bool:
    """True when ``text`` can be an argument or environment value of a program: no NUL, and
    UTF-8 text (what the rendered units, runscripts and JSON state carry)."""
    if "\0" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _label(inst: Any) -> str:
    name = getattr(inst, "name", None)
    kind = type(inst).__name__
    return f"{kind} {name!r}" if isinstance(name, str) else kind


# --------------------------------------------------------------------------- record methods


class _Shape:
    """What :class:`RecordBase`'s methods read of one record class, from its fields."""

    __slots__ = ("compared", "hashed", "name", "shown")

    def __init__(self, cls: type) -> None:
        fields = recordclass.fields(cls)
        self.name = cls.__qualname__.rsplit(">.", 1)[-1]
        self.shown = [(f.name, f.repr) for f in fields if f.repr]
        self.compared = _getter([f.name for f in fields if f.eq])
        self.hashed = _getter([f.name for f in fields if (f.eq if f.hash is None else f.hash)])


def _getter(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    get = operator.attrgetter(*names) if names else None
    if get is None:
        return lambda _: ()
    if len(names) == 1:
        return lambda obj: (get(obj),)
    return get


_SHAPES: dict[type, _Shape] = {}
_REPRING = threading.local()


def _shape(cls: type) -> _Shape:
    shape = _SHAPES.get(cls)
    if shape is None:
        shape = _SHAPES[cls] = _Shape(cls)
    return shape


class RecordBase:
    """``repr()``, ``==`` and ``hash()`` of the record classes, written once for all of them.

    One implementation reads each class's fields (``recordclass.fields``: ``repr``, ``eq`` and
    ``hash`` of each) and gives what attrs would generate: ``Name(field=value, ...)`` with
    ``...`` for a record already being shown, equality of records of the same class field by
    field, and a hash of the hashed fields.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        shape = _shape(type(self))
        active: set[int] | None = getattr(_REPRING, "active", None)
        if active is None:
            active = _REPRING.active = set()
        if id(self) in active:
            return "..."
        active.add(id(self))
        try:
            parts = (
                f"{name}={shown(value) if callable(shown) else repr(value)}"
                for name, shown in shape.shown
                for value in (getattr(self, name),)
            )
            return f"{shape.name}({', '.join(parts)})"
        finally:
            active.discard(id(self))

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        compared = _shape(type(self)).compared
        return compared(self) == compared(other)

    def __hash__(self) -> int:
        shape = _shape(type(self))
        return hash((shape.name, *shape.hashed(self)))


# --------------------------------------------------------------------------- secrets


@recordclass.frozen(repr=False, eq=False)
class Secret(RecordBase):
    """A string that must never be printed: ``str()`` and ``repr()`` show ``***``.

    Use it for tokens in a service's environment. Call :meth:`reveal` where the real value is needed
    (the process launcher does, nothing else should).
    """

    _value: str = recordclass.field(repr=False)

    def reveal(self) -> str:
        """The real value."""
        return self._value

    def __str__(self) -> str:
        return "***"

    def __repr__(self) -> str:
        return "Secret('***')"


EnvValue: TypeAlias = "str | Secret"


_NO_ENVIRONMENT: Final[Mapping[str, EnvValue]] = types.MappingProxyType({})


def _environment(value: Mapping[str, EnvValue] | None) -> Mapping[str, EnvValue]:
    if not value:
        return _NO_ENVIRONMENT
    return types.MappingProxyType(dict(sorted(value.items())))


def _check_environment(
    inst: Any, attribute: recordclass.Attribute[Any], value: Mapping[str, Any]
) -> None:
    for key, val in value.items():
        if not isinstance(key, str) or not is_variable_name(key):
            raise _fail(_label(inst), attribute.name, f"has key {key!r}, not a variable name")
        if not isinstance(val, str | Secret):
            raise _fail(
                _label(inst), attribute.name, f"has {key}={val!r}: values must be str or Secret"
            )
        text = val.reveal() if isinstance(val, Secret) else val
        if not _passable(text):
            shown = "*** (a Secret)" if isinstance(val, Secret) else repr(val)
            raise _fail(
                _label(inst),
                attribute.name,
                f"has {key}={shown}, which cannot be passed to a program (NUL or not UTF-8 "
                "text): remove the NUL or the undecodable character",
            )


# --------------------------------------------------------------------------- waits


@_checked
@recordclass.frozen(kw_only=True, repr=False, eq=False)
class WaitForPaths(RecordBase):
    """Wait until the paths exist (and are readable, by default): all of them, or any one."""

    paths: tuple[str, ...] = recordclass.field(
        converter=_tuple_of_str, validator=_check_absolute_all, metadata=_LIST
    )
    """Absolute node paths to wait for."""
    timeout: float = recordclass.field(validator=_check_positive)
    """Seconds before the wait fails."""
    require: Literal["all", "any"] = recordclass.field(
        default="all", validator=_one_of("all", "any")
    )
    """``all``: every path must be there; ``any``: one is enough."""
    readable: bool = True
    """Require read permission too, not only existence (the seed uses ``[ -r ]``)."""
    message: str | None = None
    """Timeout message; ``{elapsed}`` (whole seconds) and ``{missing}`` are filled in."""

    def describe(self) -> str:
        what = "readable" if self.readable else "present"
        joined = ", ".join(self.paths)
        return f"wait up to {self.timeout:g}s for {self.require} {what}: {joined}"


@_checked
@recordclass.frozen(kw_only=True, repr=False, eq=False)
class WaitForSocket(RecordBase):
    """Wait until a unix stream socket accepts a connection."""

    path: str = recordclass.field(validator=_check_absolute)
    """Absolute node path of the socket."""
    timeout: float = recordclass.field(validator=_check_positive)
    """Seconds before the wait fails."""
    message: str | None = None
    """Timeout message; ``{elapsed}`` and ``{missing}`` are filled in."""

    def describe(self) -> str:
        return f"wait up to {self.timeout:g}s for unix socket {self.path}"


@_checked
@recordclass.frozen(kw_only=True, repr=False, eq=False)
class WaitForTcp(RecordBase):
    """Wait until a TCP port accepts a connection."""

    host: str
    """Host name or address (loopback for a local service)."""
    port: int = recordclass.field(validator=_check_port)
    """TCP port."""
    timeout: float = recordclass.field(validator=_check_positive)
    """Seconds before the wait fails."""
    message: str | None = None
    """Timeout message; ``{elapsed}`` and ``{missing}`` are filled in."""

    def describe(self) -> str:
        return f"wait up to {self.timeout:g}s for tcp {self.host}:{self.port}"


def _is_http_url(text: str) -> bool:
    r"""``https?://[^/\s]+`` at the start of the text: a scheme, then a host's first character."""
    scheme, sep, rest = text.partition("://")
    return (
        bool(sep)
        and scheme in ("http", "https")
        and rest[:1] not in ("", "/")
        and not rest[0].isspace()
    )


def _authority_problem(url: str) -> str:
    """What keeps the host and port of ``url`` (of :func:`_is_http_url`'s shape) from being
    read as ``urllib.parse.urlsplit`` reads them when a probe connects, or ``""``: a host, in
    brackets if an IPv6 address, and a port of digits if one is given. A number outside 1-65535
    is left to the plugin, which may check its setting with a ``Fail`` step of its own (the
    node-exporter example does), and to the probe, which says ``(cannot be probed: ...)``. By
    hand: records are built on every command that loads a plugin, and urllib.parse is not
    imported for them."""
    authority = url.partition("://")[2]
    for end in "/?#":
        authority = authority.partition(end)[0]
    host = authority.rpartition("@")[2]  # user:password@ is the request's, not the address
    if host.startswith("["):
        address, closed, after = host[1:].partition("]")
        if not closed:
            return "an IPv6 address with no closing ]"
        if after and not after.startswith(":"):
            return f"text after the IPv6 address: {after!r}"
        if address and not _is_ipv6(address.partition("%")[0]):  # %25eth0: a zone
            return f"{address!r} in brackets, which is not an IPv6 address"
        name, port = address, after[1:]
    elif "[" in host or "]" in host:
        return "a bracket outside an IPv6 address"
    else:
        name, _, port = host.partition(":")
        if ":" in port:
            return "colons in its host: an IPv6 address needs brackets, http://[::1]:6443/"
    if not name:
        return "no host"
    if port and not (port.isascii() and port.isdigit()):
        return f"port {port!r}, not a number"
    return ""


def _is_ipv6(text: str) -> bool:
    import _socket  # built in, and loaded already by the supervisor's client

    try:
        _socket.inet_pton(_socket.AF_INET6, text)
    except (OSError, ValueError):
        return False
    return True


def _check_url(inst: Any, attribute: recordclass.Attribute[Any], value: str) -> None:
    if not isinstance(value, str) or not _is_http_url(value):
        raise _fail(
            _label(inst), attribute.name, f"must be an http:// or https:// URL, got {value!r}"
        )
    problem = _authority_problem(value)
    if problem:
        raise _fail(_label(inst), attribute.name, f"has {problem}, in {value!r}")


@_checked
@recordclass.frozen(kw_only=True, repr=False, eq=False)
class WaitForHttp(RecordBase):
    """Wait until an HTTP(S) URL answers with a 2xx status."""

    url: str = recordclass.field(validator=_check_url)
    """The URL to GET."""
    timeout: float = recordclass.field(validator=_check_positive)
    """Seconds before the wait fails."""
    message: str | None = None
    """Timeout message; ``{elapsed}`` and ``{missing}`` are filled in."""

    def describe(self) -> str:
        return f"wait up to {self.timeout:g}s for HTTP 2xx from {self.url}"


@_checked
@recordclass.frozen(kw_only=True, repr=False, eq=False)
class WaitForCommand(RecordBase):
    """Wait until a command exits 0 (run again and again, each run bounded by the timeout)."""

    argv: tuple[str, ...] = recordclass.field(converter=_tuple_of_str, metadata=_LIST)
    """The command, as an argv list; ``argv[0]`` is an absolute path."""
    timeout: float = recordclass.field(validator=_check_positive)
    """Seconds before the wait fails."""
    message: str | None = None
    """Timeout message; ``{elapsed}`` and ``{missing}`` are filled in."""

    def __attrs_post_init__(self) -> None:
        if not self.argv or not all(isinstance(arg, str) for arg in self.argv):
            raise _fail("WaitForCommand", "argv", f"must be a list of strings, got {self.argv!r}")
        if not self.argv[0].startswith("/"):
            raise _fail(
                "WaitForCommand", "argv", f"must start with an absolute path, got {self.argv!r}"
            )

    def describe(self) -> str:
        return f"wait up to {self.timeout:g}s for `{' '.join(self.argv)}` to succeed"


Wait: TypeAlias = WaitForPaths | WaitForSocket | WaitForTcp | WaitForHttp | WaitForCommand
"""Any bounded wait. A service's readiness check is one of these."""
Readiness: TypeAlias = Wait
WAIT_TYPES = (WaitForPaths, WaitForSocket, WaitForTcp, WaitForHttp, WaitForCommand)


# --------------------------------------------------------------------------- other steps


def _mode(inst: Any, attribute: recordclass.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0o7777:
        raise _fail(
            _label(inst), attribute.name, f"must be a file mode such as 0o755, got {value!r}"
        )


@_checked
@recordclass.frozen(kw_only=True, repr=False, eq=False)
class MakeDirectories(RecordBase):
    """Create directories and their parents, like ``mkdir -p``; existing ones are left alone."""

    paths: tuple[str, ...] = recordclass.field(
        converter=_tuple_of_str, validator=_check_absolute_all, metadata=_LIST
    )
    """Absolute node paths."""
    mode: int = recordclass.field(default=0o755, validator=_mode)
    """Mode for directories this step creates."""

    def describe(self) -> str:
        return f"mkdir -p {' '.join(self.paths)}"


@_checked
@recordclass.frozen(kw_only=True, repr=False, eq=False)
class WriteFile(RecordBase):
    """Write a file atomically (temp file, fsync, rename) unless it already has this content."""

    path: str = recordclass.field(validator=_check_absolute)
    """Absolute node path."""
    content: str = recordclass.field(repr=lambda s: f"<{len(s)} chars>")
    """The text to write (UTF-8)."""
    mode: int = recordclass.field(default=0o644, validator=_mode)
    """File mode."""

    def describe(self) -> str:
        return f"write {self.path} ({len(self.content)} bytes, mode {self.mode:o})"


@_checked
@recordclass.frozen(kw_only=True, repr=False, eq=False)
class MintCertificate(RecordBase):
    """Mint, or reuse when still good, a serving pair ``DIR/tls.crt`` + ``DIR/tls.key`` from a CA.

    Replaces ``eks-konnectivity-cert -dir D -ca-cert C -ca-key K -cn CN -sans LIST``.
    """

    directory: str = recordclass.field(validator=_check_absolute)
    """Directory that holds (or will hold) ``tls.crt`` and ``tls.key``."""
    ca_cert: str = recordclass.field(validator=_check_absolute)
    """The CA certificate (PEM; the first certificate of a chain is the signer)."""
    ca_key: str = recordclass.field(validator=_check_absolute)
    """The CA private key (PEM: EC or RSA, SEC1/PKCS#1 or PKCS#8)."""
    common_name: str = recordclass.field(validator=_check_common_name)
    """The leaf's subject CN: 1 to 64 characters (X.509's limit, counted in UTF-8 bytes)."""
    sans: tuple[str, ...] = recordclass.field(converter=_tuple_of_str, metadata=_LIST)
    """Subject alternative names: DNS names and IP addresses, as given (checked here, so a port,
    a URL or a CIDR is a definition error at ``plan``, not a failure at apply)."""
    renew_before_days: int = recordclass.field(default=90)
    """Re-mint when fewer than this many days remain (0 to 364: a new certificate lives 365)."""
    failure_message: str = "failed to mint serving cert: {reason}"
    """Message when minting fails; ``{reason}`` is filled in."""

    @sans.validator
    def _check_sans(self, attribute: recordclass.Attribute[Any], value: tuple[str, ...]) -> None:
        from noderole.errors import CertificateError
        from noderole.sans import parse_sans

        try:
            parse_sans(value)
        except CertificateError as error:
            raise _fail("MintCertificate", "sans", f"is invalid: {error}") from None

    @renew_before_days.validator
    def _check_renewal(self, attribute: recordclass.Attribute[Any], value: int) -> None:
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not (0 <= value < LEAF_LIFETIME_DAYS)
        ):
            raise _fail(
                "MintCertificate",
                "renew_before_days",
                f"must be a whole number of days from 0 to {LEAF_LIFETIME_DAYS - 1} (a new "
                f"certificate lives {LEAF_LIFETIME_DAYS} days; k3s uses 90), got {value!r}",
            )

    def __attrs_post_init__(self) -> None:
        # Minting writes DIR/tls.crt and DIR/tls.key: under the CA's own names it would replace
        # the cluster CA with the leaf and serve with the CA's private key.
        pair = (("tls.crt", self.cert_path), ("tls.key", self.key_path))
        for field in ("ca_cert", "ca_key"):
            value = getattr(self, field)
            for name, written in pair:
                if posixpath.normpath(value) == posixpath.normpath(written):
                    raise _fail_with(
                        value,
                        "MintCertificate",
                        field,
                        f"is {value!r}, the {name} this step writes in field 'directory' "
                        f"({self.directory!r}): minting would overwrite the cluster CA's file "
                        f"with the serving pair; give the pair a directory of its own",
                    )

    @property
    def cert_path(self) -> str:
        """Node path of the leaf certificate."""
        return f"{self.directory.rstrip('/')}/tls.crt"

    @property
    def key_path(self) -> str:
        """Node path of the leaf key."""
        return f"{self.directory.rstrip('/')}/tls.key"

    def describe(self) -> str:
        return (
            f"mint-or-reuse {self.cert_path} (CN {self.common_name}, SANs {','.join(self.sans)}) "
            f"from {self.ca_cert}"
        )


@_checked
@recordclass.frozen(kw_only=True, repr=False, eq=False)
class Fail(RecordBase):
    """A step that fails with a message: how a hook reports a problem it found in its inputs.

    Put it where the check belongs in the step order (the seed checks ``EKS_KONNECTIVITY_SANS``
    only after the CA wait), so the service fails with the right message at the right moment
    while every other service goes on.
    """

    message: str = recordclass.field(validator=_non_empty)
    """The reason shown next to the service."""

    def describe(self) -> str:
        return f"fail: {self.message}"


@_checked
@recordclass.frozen(kw_only=True, repr=False, eq=False)
class Warn(RecordBase):
    """A step that reports a problem without failing: shown by ``plan``, printed by ``apply``
    (`` * NAME: warning: ...``) and kept in its report. For inputs that degrade the node but must
    not stop the service (no konnectivity agent host: the server runs, no agent will connect).
    """

    message: str = recordclass.field(validator=_non_empty)
    """What is wrong and what it means."""

    def describe(self) -> str:
        return f"warning: {self.message}"


@_checked
@recordclass.frozen(kw_only=True, repr=False, eq=False)
class Call(RecordBase):
    """Run a plugin's own function as a step: ``function(ctx)``; raise ``StepError`` to fail.

    For work that is not data (merging configuration, staging manifests). Prefer a data step
    when one fits: data steps can be compared in tests and shown by ``noderole plan``.
    """

    function: Callable[[StepContext], None] = recordclass.field(eq=False)
    """Called with a :class:`noderole.StepContext`."""
    description: str = recordclass.field(validator=_non_empty)
    """What the function does, for ``plan`` and progress output."""
    key: str = ""
    """Anything that identifies the work for equality (two Calls compare by description and key)."""
    timeout: float = recordclass.field(default=300.0, validator=_check_positive)
    """Seconds (real time) the function may take before the step fails as hung: a plugin bug
    must fail its service, not hang the boot."""

    def describe(self) -> str:
        return self.description


Step: TypeAlias = MakeDirectories | WriteFile | MintCertificate | Fail | Warn | Call | Wait
"""Any pre-start step."""
STEP_TYPES = (MakeDirectories, WriteFile, MintCertificate, Fail, Warn, Call, *WAIT_TYPES)


def _check_steps(inst: Any, attribute: recordclass.Attribute[Any], value: tuple[Any, ...]) -> None:
    for step in value:
        if not isinstance(step, STEP_TYPES):
            raise _fail(_label(inst), attribute.name, f"has {step!r}, which is not a step record")


def _check_readiness(inst: Any, attribute: recordclass.Attribute[Any], value: Any) -> None:
    if value is not None and not isinstance(value, WAIT_TYPES):
        raise _fail(_label(inst), attribute.name, f"must be a wait record, got {value!r}")


# --------------------------------------------------------------------------- supervision

_COMMON_SIGNALS = frozenset(
    {"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGKILL", "SIGUSR1", "SIGUSR2"}
)
"""Stop signals every POSIX system has: checked without the ``signal`` module, whose import
builds three enums (``plan`` checks each service's ``stop_signal``, SIGTERM nearly always)."""


@functools.cache
def _signal_names() -> frozenset[str]:
    import signal

    return frozenset(s.name for s in signal.Signals)


_STOP_SCOPES = ("group", "process")
"""The values of :attr:`Supervision.stop_scope`."""


_MAX_OPEN_FILES = 1073741816
"""The largest limit of open files Linux allows (``fs.nr_open`` at its ceiling)."""


def _check_open_files(inst: Any, attribute: recordclass.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 3 <= value <= _MAX_OPEN_FILES:
        raise _fail(
            _label(inst),
            attribute.name,
            f"must be a whole number of files from 3 (stdin, stdout and stderr) to "
            f"{_MAX_OPEN_FILES}, got {value!r}",
        )


def _check_tasks(inst: Any, attribute: recordclass.Attribute[Any], value: Any) -> None:
    if value is None or value == "infinity":
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _fail(
            _label(inst),
            attribute.name,
            f"must be a whole number of tasks >= 1 or 'infinity', got {value!r}",
        )


def _check_flag(inst: Any, attribute: recordclass.Attribute[Any], value: Any) -> None:
    if not isinstance(value, bool):
        raise _fail(_label(inst), attribute.name, f"must be True or False, got {value!r}")


def _check_signal(inst: Any, attribute: recordclass.Attribute[Any], value: str) -> None:
    if value not in _COMMON_SIGNALS and value not in _signal_names():
        raise _fail(
            _label(inst), attribute.name, f"must be a signal name such as SIGTERM, got {value!r}"
        )


@_checked
@recordclass.frozen(kw_only=True, repr=False, eq=False)
class Supervision(RecordBase):
    """How a service's process is kept alive and stopped (OpenRC supervise-daemon semantics)."""

    respawn_delay: float = recordclass.field(default=5, validator=_check_non_negative)
    """Seconds to wait after the process exits before starting it again."""
    respawn_max: int = recordclass.field(default=0, validator=_check_count)
    """Respawns allowed within ``respawn_period`` before giving up; 0 means unlimited."""
    respawn_period: float | None = recordclass.field(default=None, validator=_check_positive)
    """Window, in seconds from the first crash, that ``respawn_max`` counts in; None: whole life."""
    backoff_max: float | None = recordclass.field(default=None, validator=_check_positive)
    """If set, the delay doubles after each consecutive crash, up to this many seconds."""
    stop_signal: str = recordclass.field(default="SIGTERM", validator=_check_signal)
    """Signal sent first on stop."""
    stop_timeout: float = recordclass.field(default=5, validator=_check_non_negative)
    """Seconds to wait after ``stop_signal`` before SIGKILL."""
    stop_scope: Literal["group", "process"] = recordclass.field(
        default="group", validator=_one_of(*_STOP_SCOPES)
    )
    """What a stop, and the exit of the service's process, ends.

    ``"group"``: what the service started too. The native supervisor signals its process group
    (a process that left it with ``setsid`` runs on), systemd its control group
    (``KillMode=control-group``, everything), OpenRC the process and then, from the runscript's
    ``stop_post``, its process group (on a stop; supervise-daemon's respawn leaves the group as
    it is). ``"process"``: the service's process alone; what it started runs on (systemd
    ``KillMode=process``; OpenRC's supervise-daemon alone). For a service whose children must
    outlive its restart: k3s, whose containers would die with it. Should the native supervisor
    itself be killed, its watchdog ends the process groups of the services that ran, whatever
    their scope."""
    delegate: bool = recordclass.field(default=False, validator=_check_flag)
    """The service manages control groups below its own, as a container runtime does (k3s).

    systemd hands it its control group's subtree (``Delegate=yes``), without which it may not
    enable the cgroup controllers its containers are limited by. The native supervisor and OpenRC
    make no control group of the service's to hand over: nothing to do there."""
    open_files: int | None = recordclass.field(default=None, validator=_check_open_files)
    """The limit of open files (``RLIMIT_NOFILE``) the process starts with, which what it
    starts inherits; None: the one its supervisor gives (the native supervisor: the one it was
    started with; systemd: 1,024 soft, 524,288 hard). systemd ``LimitNOFILE=`` and OpenRC
    ``rc_ulimit="-n N"`` set soft and hard; the native supervisor sets the soft limit, and the
    hard one too where it is higher than its own. Raising a hard limit takes
    ``CAP_SYS_RESOURCE``; without it (an unprivileged container) systemd and the native
    supervisor give the closest they may, the native one saying so in its log, and OpenRC starts
    the service with the limit it had, ``openrc-run`` saying it could not apply it."""
    tasks: int | Literal["infinity"] | None = recordclass.field(
        default=None, validator=_check_tasks
    )
    """The processes and threads the service's control group may hold: systemd ``TasksMax=``
    (``"infinity"``: no limit); None: systemd's default (``DefaultTasksMax``, 15% of the node's
    threads, a few thousand on a small node). The native supervisor and OpenRC make no control
    group of a service's: nothing to limit there."""
    notify: bool = recordclass.field(default=False, validator=_check_flag)
    """The program says when it is ready with systemd's notification protocol: ``READY=1`` on
    the datagram socket ``$NOTIFY_SOCKET`` names (``sd_notify``), as k3s does once it is up.
    systemd then counts the service started only from that word (``Type=notify``, accepted from
    the main process: the program ``noderole exec`` became), so what is ordered after it starts
    once it is up and ``systemctl start`` returns then; its start-up is not bounded
    (``TimeoutStartSec=infinity``, as k3s's unit has ``TimeoutStartSec=0``: a first boot may
    take minutes). The native supervisor and OpenRC's supervise-daemon set no
    ``$NOTIFY_SOCKET`` (the program does not notify): there, the service's ``readiness`` check
    says when it is ready, as it does for ``apply`` under every backend."""


# --------------------------------------------------------------------------- the service


_DEFAULT_SUPERVISION: Final = Supervision()


@_checked
@recordclass.frozen(kw_only=True, repr=False, eq=False)
class Service(RecordBase):
    """One supervised service (or, without ``command``, a milestone that only runs its steps).

    Example::

        Service(
            name="konnectivity-server",
            description="Konnectivity server",
            roles=["server", "server-join"],
            need=["net"],
            after=["k3s"],
            command=["/usr/local/bin/konnectivity-server", "--mode=grpc"],
            pidfile="/run/konnectivity-server.pid",
            output_log="/var/log/konnectivity-server.log",
            error_log="/var/log/konnectivity-server.log",
            supervision=Supervision(respawn_delay=5, respawn_max=0),
        )
    """

    name: str = recordclass.field()
    """Unique service name (letters, digits, ``_.@+-``)."""
    description: str = ""
    """One line for people."""
    roles: tuple[str, ...] = recordclass.field(
        default=(), converter=_tuple_of_str, validator=_check_names, metadata=_LIST
    )
    """Roles it belongs to; a service with none joins a plan only when another needs it."""

    need: tuple[str, ...] = recordclass.field(
        default=(), converter=_tuple_of_str, validator=_check_names, metadata=_LIST
    )
    """Start these first; if one fails, this service is not started."""
    use: tuple[str, ...] = recordclass.field(
        default=(), converter=_tuple_of_str, validator=_check_names, metadata=_LIST
    )
    """Start after these if they are in the role; never pulls them in."""
    want: tuple[str, ...] = recordclass.field(
        default=(), converter=_tuple_of_str, validator=_check_names, metadata=_LIST
    )
    """Pull these in and start after them, but start even if they are absent or fail."""
    after: tuple[str, ...] = recordclass.field(
        default=(), converter=_tuple_of_str, validator=_check_names, metadata=_LIST
    )
    """Order only: start after these if they are in the plan."""
    before: tuple[str, ...] = recordclass.field(
        default=(), converter=_tuple_of_str, validator=_check_names, metadata=_LIST
    )
    """Order only: start before these if they are in the plan."""
    provide: tuple[str, ...] = recordclass.field(
        default=(), converter=_tuple_of_str, validator=_check_names, metadata=_LIST
    )
    """Virtual names this service provides (``need V`` is satisfied by V's providers)."""

    command: tuple[str, ...] | None = recordclass.field(
        default=None, converter=_optional_tuple, metadata=_LIST
    )
    """argv list (never a shell string); ``command[0]`` is an absolute path. None: no process."""
    environment: Mapping[str, EnvValue] = recordclass.field(
        factory=dict, converter=_environment, validator=_check_environment, hash=False
    )
    """Extra environment for the process; wrap secrets in :class:`Secret`."""
    user: str | None = None
    """Run as this user (name or uid); None keeps noderole's user (root at boot)."""
    group: str | None = None
    """Run as this group (name or gid); None: the user's primary group."""
    working_directory: str | None = recordclass.field(default=None, validator=_check_absolute)
    """Working directory of the process; None: ``/``."""
    pidfile: str | None = recordclass.field(default=None, validator=_check_file)
    """Where the native supervisor writes the child's pid."""
    output_log: str | None = recordclass.field(default=None, validator=_check_file)
    """Append stdout here."""
    error_log: str | None = recordclass.field(default=None, validator=_check_file)
    """Append stderr here (may be the same file as ``output_log``)."""
    supervision: Supervision = recordclass.field(default=_DEFAULT_SUPERVISION)
    """Respawn and stop settings."""
    pre_start: tuple[Step, ...] = recordclass.field(
        default=(), converter=_tuple, validator=_check_steps, metadata=_LIST
    )
    """Steps run in order before the command starts; the first failure fails the service."""
    readiness: Readiness | None = recordclass.field(default=None, validator=_check_readiness)
    """Check that tells when the started service is ready (its timeout bounds waiting for it)."""
    origin: str = recordclass.field(default="", eq=False, repr=False)
    """The plugin that returned this record; stamped by the plugin manager."""

    @name.validator
    def _check_name(self, attribute: recordclass.Attribute[Any], value: str) -> None:
        if not isinstance(value, str) or not is_service_name(value):
            raise _fail("Service", "name", f"must be a non-empty service name, got {value!r}")

        if len(value) > SERVICE_NAME_MAX:
            raise _fail(
                "Service",
                "name",
                f"must have at most {SERVICE_NAME_MAX} characters (the file names made from it "
                f"must fit in 255 bytes), got {value[:40]!r}... ({len(value)} characters)",
            )

    @command.validator
    def _check_command(
        self, attribute: recordclass.Attribute[Any], value: tuple[str, ...] | None
    ) -> None:
        if value is None:
            return
        if not value:
            raise _fail(_label(self), "command", "is empty; use None for a service with no process")
        if not all(isinstance(arg, str) for arg in value):
            raise _fail(_label(self), "command", f"must be a list of strings, got {value!r}")
        for arg in value:
            if not _passable(arg):
                raise _fail(
                    _label(self),
                    "command",
                    f"has {arg!r}, which cannot be passed to a program (NUL or not UTF-8 text)",
                )
        if not value[0].startswith("/"):
            # The program refused, not the whole command: a program path from config.toml (a
            # plugin's ``binary``) is traced to its key.
            raise _fail_with(
                value[0],
                _label(self),
                "command",
                f"must start with an absolute path, got {value[0]!r}",
            )

    @property
    def is_milestone(self) -> bool:
        """True when the service has no process: it is done once its steps succeed."""
        return self.command is None

    def revealed_environment(self) -> dict[str, str]:
        """The environment with secrets revealed: only for the process launcher."""
        return {k: v.reveal() if isinstance(v, Secret) else v for k, v in self.environment.items()}


def unknown_names(services: Iterable[Service], every: Iterable[Service]) -> list[str]:
    """Warnings for names in ``after``/``before``/``use``/``want`` of ``services`` that no
    service of ``every`` is called or provides, each with a did-you-mean when one is close.

    Such a name is ignored by rule (order-only and optional dependencies may name services of
    other roles), so a typo (``after k3ss``) would otherwise silently lose its ordering.
    """
    every = list(every)
    known = {service.name for service in every} | {v for s in every for v in s.provide}
    warnings = []
    for service in services:
        for kind in ("after", "before", "use", "want"):
            for name in getattr(service, kind):
                if name not in known:
                    warnings.append(
                        f"{service.name}: {kind} {name!r}: no service is called or provides "
                        f"{name!r}{did_you_mean(name, known)}; the {kind} is ignored"
                    )
    return warnings


# --------------------------------------------------------------------------- settings

SettingType: TypeAlias = type[str] | type[int] | type[float] | type[bool]


def _check_setting_type(inst: Any, attribute: recordclass.Attribute[Any], value: Any) -> None:
    if value not in (str, int, float, bool):
        raise _fail(_label(inst), "type", f"must be str, int, float or bool, got {value!r}")


def _check_bound(inst: Any, attribute: recordclass.Attribute[Any], value: float | None) -> None:
    if value is not None and (not _is_number(value) or not math.isfinite(value)):
        raise _fail(_label(inst), attribute.name, f"must be a finite number, got {value!r}")


def _optional_tuple_any(value: Iterable[Any] | None) -> tuple[Any, ...] | None:
    return None if value is None else tuple(value)


@_checked
@recordclass.frozen(kw_only=True, repr=False, eq=False)
class Setting(RecordBase):
    """One configurable value in a plugin's table of ``/etc/noderole/config.toml``.

    Declare what a valid value is, and ``noderole config check`` (and every command that reads the
    file) refuses anything else naming file, table and key::

        Setting(name="respawn_delay", type=float, default=5.0, min=0, max=3600,
                description="Seconds before a crashed server is started again.")
        Setting(name="backend", type=str, default="auto",
                choices=["auto", "native", "openrc", "systemd"])
    """

    name: str = recordclass.field(
        validator=_matches(
            is_lower_name, "lower case letters, digits and '_', starting with a letter"
        )
    )
    """Key in the table (lower case, underscores)."""
    type: SettingType = recordclass.field(validator=_check_setting_type)
    """``str``, ``int``, ``float`` or ``bool``; an int is accepted where a float is asked. A float
    setting never accepts ``nan`` or an infinity."""
    default: str | int | float | bool
    """Value when the file does not set it (the shipped plugins use the seed's values)."""
    description: str = ""
    """One line for the configuration reference."""
    secret: bool = False
    """Shown as ``***`` by ``config show``."""
    min: float | None = recordclass.field(default=None, validator=_check_bound)
    """Smallest value allowed (int and float settings); None: no lower bound."""
    max: float | None = recordclass.field(default=None, validator=_check_bound)
    """Largest value allowed (int and float settings); None: no upper bound."""
    choices: tuple[str | int | float, ...] | None = recordclass.field(
        default=None, converter=_optional_tuple_any, metadata=_LIST
    )
    """The only values allowed, in the order the reference lists them; None: any value."""

    def __attrs_post_init__(self) -> None:
        label = f"Setting {self.name!r}"
        if (self.min is not None or self.max is not None) and self.type not in (int, float):
            raise _fail(
                label, "min", f"applies to int and float settings, not {self.type.__name__}"
            )
        if self.min is not None and self.max is not None and self.min > self.max:
            raise _fail(label, "min", f"is {self.min!r}, above max {self.max!r}")
        if self.choices is not None:
            if not self.choices:
                raise _fail(label, "choices", "is empty; use None for any value")
            for choice in self.choices:
                if not _matches_type(choice, self.type):
                    raise _fail(
                        label, "choices", f"has {choice!r}, not of type {self.type.__name__}"
                    )
        if not _matches_type(self.default, self.type):
            raise _fail(label, "default", f"is {self.default!r}, not of type {self.type.__name__}")
        why = self.invalid(self.default)
        if why is not None:
            raise _fail(label, "default", f"is {self.default!r}, which {why}")

    def invalid(self, value: object) -> str | None:
        """Why ``value`` is not a valid value of this setting (completing "VALUE ..."), or None."""
        if not _matches_type(value, self.type):
            return f"is not {type_words(self.type)}"
        if self.type is float and not math.isfinite(value):  # type: ignore[arg-type]
            return "is not a finite number"
        if self.choices is not None and value not in self.choices:
            return f"is not one of {', '.join(repr(c) for c in self.choices)}"
        if self.min is not None and value < self.min:  # type: ignore[operator]
            return f"is below the minimum {self.min:g}"
        if self.max is not None and value > self.max:  # type: ignore[operator]
            return f"is above the maximum {self.max:g}"
        return None

    def bounds(self) -> str:
        """The declared constraint for people (``0..3600``, ``one of 'a', 'b'``), or ``""``."""
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.min is not None and self.max is not None:
            return f"{self.min:g} to {self.max:g}"
        if self.min is not None:
            return f">= {self.min:g}"
        if self.max is not None:
            return f"<= {self.max:g}"
        return ""


_TYPE_WORDS: dict[type, str] = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "true or false",
}


def type_words(kind: SettingType) -> str:
    """A setting's type as a TOML file's author says it (``an integer``, ``a string``)."""
    return _TYPE_WORDS.get(kind, f"of type {kind.__name__}")


def _matches_type(value: object, kind: SettingType) -> bool:
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _settings_tuple(value: Iterable[Any]) -> tuple[Any, ...]:
    """A table's settings as a tuple; a mapping (``{"port": 9100}``) is refused, naming it:
    iterated, it would give its keys, each then refused as no setting, far from the mistake."""
    if isinstance(value, Mapping):
        raise _fail_with(
            value,
            "SettingsTable",
            "settings",
            f"must be a list of noderole.Setting records, got the {type(value).__name__} "
            f"{_shown(value)}; write settings=[noderole.Setting(name=..., type=..., "
            "default=..., description=...), ...]",
        )
    if not isinstance(value, Iterable):
        raise _fail_with(
            value,
            "SettingsTable",
            "settings",
            f"must be a list of noderole.Setting records, got {_shown(value)} "
            f"({type(value).__name__})",
        )
    return tuple(value)


def _shown(value: object, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters for a message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@_checked
@recordclass.frozen(kw_only=True, repr=False, eq=False)
class SettingsTable(RecordBase):
    """The settings a plugin declares: one ``[table]`` of the configuration file."""

    table: str = recordclass.field(
        validator=_matches(
            _is_table_name, "lower case letters, digits, '_' and '-', starting with a letter"
        )
    )
    """Table name in config.toml, usually the plugin's name."""
    settings: tuple[Setting, ...] = recordclass.field(converter=_settings_tuple, metadata=_LIST)
    """The settings, in the order the reference lists them: each a :class:`Setting`."""
    description: str = ""
    """What the table configures."""

    @settings.validator
    def _check_settings(
        self, attribute: recordclass.Attribute[Any], value: tuple[Setting, ...]
    ) -> None:
        seen: set[str] = set()
        for setting in value:
            if not isinstance(setting, Setting):
                raise _fail(
                    f"SettingsTable {self.table!r}",
                    "settings",
                    f"has {_shown(setting)} ({type(setting).__name__}), which is not a "
                    "noderole.Setting; write each as noderole.Setting(name=..., type=..., "
                    "default=..., description=...)",
                )
            name = setting.name
            if name in seen:
                raise _fail(
                    "SettingsTable",
                    "settings",
                    f"declares {name!r} twice: one key of [{self.table}] is one setting; "
                    "remove one of them",
                )
            if isinstance(name, str):
                seen.add(name)

    origin: str = recordclass.field(default="", eq=False, repr=False)
    """The plugin that returned this record; stamped by the plugin manager."""
