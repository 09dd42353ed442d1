"""JSON text for noderole's own files and messages, from the interpreter's C accelerator.

``import json`` compiles six regular expressions and loads four modules: about 5 M instructions,
a tenth of what a re-apply spends beyond ``import click``, for reading and writing a few small
documents. The parsing and the compact encoding are the C functions :mod:`json` itself uses
(``_json``: its scanner and its encoder); the indented encoding, which :mod:`json` does in
Python, is done here in the same way. Output and results are those of :mod:`json` for the
same arguments (a test compares them on generated documents); errors are :mod:`json`'s own
(its module is imported then, to raise them). Standard library only: the daemon uses it too.
"""

from __future__ import annotations

import _json

__all__ = ["dumps", "loads"]

TYPE_CHECKING = False  # typing is not imported at run time: the daemon stays small
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_BLANK = " \t\n\r"
"""JSON's whitespace, which may surround the document."""

_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _Context:
    """What ``_json.make_scanner`` reads of a decoder (:class:`json.JSONDecoder`'s defaults)."""

    __slots__ = ("parse_constant",)
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    def __init__(self, parse_constant: Callable[[str], Any]) -> None:
        self.parse_constant = parse_constant


_SCANNERS: dict[object, Any] = {}


def loads(text: str | bytes, *, parse_constant: Callable[[str], Any] | None = None) -> Any:
    """``json.loads(text, parse_constant=...)``: the document ``text`` holds (bytes: UTF-8).

    Raises :class:`json.JSONDecodeError` (a ``ValueError``) for text that is not one JSON
    document, ``UnicodeDecodeError`` (a ``ValueError`` too) for bytes that are not UTF-8, and,
    as :mod:`json` does, ``RecursionError`` for a document nested too deeply.
    """
    if not isinstance(text, str):
        text = bytes(text).decode()
        if text.startswith("\ufeff"):  # json takes a UTF-8 BOM in bytes (not in text)
            text = text[1:]  # as the utf-8-sig codec would, without loading its module
    elif text.startswith("\ufeff"):
        _fail("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    constant = parse_constant or _CONSTANTS.__getitem__
    scan = _SCANNERS.get(parse_constant)
    if scan is None:
        scan = _SCANNERS[parse_constant] = _json.make_scanner(_Context(constant))  # type: ignore[arg-type]
    start = len(text) - len(text.lstrip(_BLANK))
    try:
        value, end = scan(text, start)
    except StopIteration as stop:
        _fail("Expecting value", text, stop.value)
    if text[end:].strip(_BLANK):
        _fail("Extra data", text, len(text) - len(text[end:].lstrip(_BLANK)))
    return value


def _fail(message: str, text: str, position: int) -> None:
    from json import JSONDecodeError

    raise JSONDecodeError(message, text, position)


def dumps(
    value: Any,
    *,
    sort_keys: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    allow_nan: bool = True,
) -> str:
    """``json.dumps(value, sort_keys=..., indent=..., separators=..., allow_nan=...)``.

    ASCII output, as :mod:`json`'s default. Raises ``TypeError`` for a value JSON cannot hold
    and ``ValueError`` for a float out of range when ``allow_nan`` is false, as :mod:`json`.
    """
    if separators is None:
        separators = (",", ": ") if indent is not None else (", ", ": ")
    item, key = separators
    if isinstance(value, str):
        return _json.encode_basestring_ascii(value)
    if indent is None:
        encode = _json.make_encoder(
            {},
            _unserializable,
            _json.encode_basestring_ascii,
            None,
            key,
            item,
            sort_keys,
            False,
            allow_nan,
        )
        return "".join(encode(value, 0))
    chunks: list[str] = []
    _indented(value, chunks, "\n", " " * indent, item, key, sort_keys, allow_nan)
    return "".join(chunks)


def _unserializable(value: object) -> object:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def _float(value: float, allow_nan: bool) -> str:
    if value != value or value in (float("inf"), float("-inf")):
        if not allow_nan:
            raise ValueError(f"Out of range float values are not JSON compliant: {value!r}")
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    return float.__repr__(value)


def _scalar(value: object, allow_nan: bool) -> str | None:
    """A scalar's text, as :mod:`json` writes it; None for a list or an object."""
    if isinstance(value, str):
        return _json.encode_basestring_ascii(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return _float(value, allow_nan)
    return None


def _key(key: object, allow_nan: bool) -> str:
    """An object's key as :mod:`json` writes it (strings; numbers, booleans and null as text)."""
    if isinstance(key, str):
        return key
    if isinstance(key, float):
        return _float(key, allow_nan)
    if key is True or key is False or key is None:
        return "true" if key is True else "false" if key is False else "null"
    if isinstance(key, int):
        return int.__repr__(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {key.__class__.__name__}")


def _indented(
    value: object,
    out: list[str],
    newline: str,
    step: str,
    item: str,
    key: str,
    sort_keys: bool,
    allow_nan: bool,
    seen: set[int] | None = None,
) -> None:
    """Append ``value``'s text at the indentation ``newline`` opens, as json's own encoder."""
    text = _scalar(value, allow_nan)
    if text is not None:
        out.append(text)
        return
    seen = set() if seen is None else seen
    if isinstance(value, list | tuple):
        if not value:
            out.append("[]")
            return
        _enter(value, seen)
        inner = newline + step
        out.append("[" + inner)
        for index, element in enumerate(value):
            if index:
                out.append(item + inner)
            _indented(element, out, inner, step, item, key, sort_keys, allow_nan, seen)
        out.append(newline + "]")
        seen.discard(id(value))
        return
    if isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        _enter(value, seen)
        inner = newline + step
        out.append("{" + inner)
        pairs = sorted(value.items()) if sort_keys else value.items()
        for index, (name, element) in enumerate(pairs):
            if index:
                out.append(item + inner)
            out.append(_json.encode_basestring_ascii(_key(name, allow_nan)) + key)
            _indented(element, out, inner, step, item, key, sort_keys, allow_nan, seen)
        out.append(newline + "}")
        seen.discard(id(value))
        return
    _unserializable(value)


def _enter(container: object, seen: set[int]) -> None:
    if id(container) in seen:
        raise ValueError("Circular reference detected")
    seen.add(id(container))
