"""YAML for the k3s plugin, without importing PyYAML for the plain shapes k3s files take.

Every ``plan`` and ``apply`` of a server reads ``config.yaml`` and renders the drop-ins, and
``import yaml`` costs more than the rest of the plugin. Most of these files are flat: keys, plain
words, numbers and lists of words. :func:`dump_all` and :func:`load` handle exactly those shapes,
with the text PyYAML itself would produce or the values it would read; anything outside them (a
quoted or multi-line string, a float, a flow collection, an anchor, a comment after a value...)
is handed to PyYAML, imported then. The tests compare both paths on generated documents.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["YAMLError", "dump_all", "load"]

_WIDTH = 80
"""PyYAML's default line width: a plain scalar with spaces may be folded past it."""
_SIMPLE_KEY = 100
"""PyYAML writes a key of 128 characters or more as a complex key (``? key``)."""

_WORD_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./=+,@%$()-"
"""``[A-Za-z0-9_./=+,@%$()-]``: the characters of a plain word (besides single inner ``:``)."""
_KEY_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"
"""``[A-Za-z0-9_.-]``: the characters of a key :func:`load` reads without PyYAML."""
_SPECIAL = frozenset(["yes", "no", "true", "false", "on", "off", "null", "y", "n", "~"])
"""Words (in any case) a YAML 1.1 reader may take for a boolean or a null."""
_BOOLEANS = {
    **dict.fromkeys(["yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"], True),
    **dict.fromkeys(["no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"], False),
}
_NULLS = frozenset(["~", "null", "Null", "NULL"])


# --------------------------------------------------------------------------- shapes
#
# The shapes below were regular expressions; compiling them cost nine tenths of this module's
# import, on every plan and apply of a server. Each function gives exactly the expression's
# answer (its docstring), written with ``str`` methods; the tests compare them on generated text.
# ASCII ranges are spelled out: ``str.isdigit`` and ``str.isalpha`` accept other scripts.


def _is_word(text: str) -> bool:
    """``[A-Za-z0-9_./=+,@%$()-]+(?::[A-Za-z0-9_./=+,@%$()-]+)*``, the whole text: runs of
    word characters joined by single colons (none first or last, never two together)."""
    return all(part and not part.strip(_WORD_CHARS) for part in text.split(":"))


def _is_plain(text: str) -> bool:
    """Whether PyYAML writes and reads ``text`` as a plain string (unless it is a YAML 1.1
    boolean or null): the whole text matches
    ``(?:[A-Za-z_/]|--?[A-Za-z])(?:WORD)?(?: WORD)*|[0-9]+(?:\\.[0-9]+){2,}`` (WORD as
    :func:`_is_word`).

    A letter, ``_``, ``/`` or one or two dashes and a letter first (no indicator, no number, no
    timestamp), a ``:`` only inside a word, single spaces only between words; or dotted numbers
    with three parts or more (an address, a version). The first character is not part of the
    first word, so ``a:b`` is refused (a word cannot start with ``:``) where ``ab:c`` is not.
    """
    first = text[:1]
    if first == "-":
        start = 3 if text[1:2] == "-" else 2
        letter = text[start - 1 : start]
        if not (letter.isascii() and letter.isalpha()):  # "".isalpha() is False
            return False
    elif (first.isascii() and first.isalpha()) or first in ("_", "/"):
        start = 1
    else:
        parts = text.split(".")
        return len(parts) >= 3 and all(part.isascii() and part.isdigit() for part in parts)
    words = text[start:].split(" ")
    # what follows the first character: a word or nothing, then words each after one space
    return (not words[0] or _is_word(words[0])) and all(_is_word(word) for word in words[1:])


def _is_int(text: str) -> bool:
    """``(?:0|-?[1-9][0-9]*)``, the whole text: a decimal integer as :func:`load` reads it."""
    digits = text[1:] if text[:1] == "-" else text
    return text == "0" or (digits.isascii() and digits.isdigit() and digits[0] != "0")


def _is_quoted_number(text: str) -> bool:
    """``(?:0|[1-9][0-9]*|0[0-7]+)``, the whole text: digits PyYAML reads as an integer
    (decimal or octal), so writes quoted as a string."""
    if not (text.isascii() and text.isdigit()):
        return False
    return text[0] != "0" or ("8" not in text and "9" not in text)


def _key_line(line: str) -> tuple[str, str | None] | None:
    """``([A-Za-z_][A-Za-z0-9_.-]*):(?: +(.*))?``, the whole line: its two groups, the key and
    the value after the spaces (None when nothing follows the ``:``); None for no match.

    The value may be empty (spaces only) and never holds a newline (``.`` does not match one).
    """
    name, colon, rest = line.partition(":")  # the key's characters do not include ":"
    first = name[:1]
    if not colon or not ((first.isascii() and first.isalpha()) or first == "_"):
        return None
    if name.strip(_KEY_CHARS):
        return None
    if not rest:
        return name, None
    if rest[0] != " " or "\n" in rest:
        return None
    return name, rest.lstrip(" ")


def _item_line(line: str) -> tuple[int, str] | None:
    """``( *)- +(.*)``, the whole line: the width of its indent and the item after the spaces;
    None for no match (the item never holds a newline)."""
    item = line.lstrip(" ")
    if item[:2] != "- " or "\n" in item:
        return None
    return len(line) - len(item), item[2:].lstrip(" ")


class _NotPlain(Exception):
    """The value or text is outside the shapes handled here: PyYAML decides."""


class YAMLError(ValueError):
    """Text that is not valid YAML: PyYAML's error, in one line, and where it found it."""

    def __init__(
        self,
        message: str,
        line: int | None,
        *,
        column: int | None = None,
        character: int | None = None,
        problem: str = "",
    ) -> None:
        super().__init__(message)
        self.line = line
        """The 1-based line of the problem, when PyYAML gave one."""
        self.column = column
        """The 1-based column on that line, when PyYAML gave one."""
        self.character = character
        """The 1-based character of the text, for an error PyYAML places no other way (a
        character YAML refuses)."""
        self.problem = problem or (message.splitlines() or [""])[0]
        """What is wrong, in one line (PyYAML's context and problem, without its excerpt)."""

    @property
    def where(self) -> str:
        """``line 2, column 1``, ``line 2``, ``character 9``, or empty when unknown."""
        if self.line is not None:
            return f"line {self.line}" + (f", column {self.column}" if self.column else "")
        return f"character {self.character}" if self.character is not None else ""


# --------------------------------------------------------------------------- writing


def dump_all(documents: Sequence[Any]) -> str:
    """``yaml.safe_dump_all(documents, sort_keys=False, default_flow_style=False)``'s text."""
    try:
        return "".join(_document(document, first=i == 0) for i, document in enumerate(documents))
    except _NotPlain:
        import yaml

        return yaml.safe_dump_all(
            documents, sort_keys=False, default_flow_style=False, explicit_start=False
        )


def _document(value: Any, *, first: bool) -> str:
    if not isinstance(value, dict | list):
        raise _NotPlain
    if not value:
        empty = "{}" if isinstance(value, dict) else "[]"
        return f"{empty}\n" if first else f"--- {empty}\n"
    lines = _block(value, 0)
    return ("" if first else "---\n") + "\n".join(lines) + "\n"


def _block(value: dict[Any, Any] | list[Any], indent: int) -> list[str]:
    """The lines of a non-empty mapping or sequence written at ``indent``."""
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            text = _scalar(key) if isinstance(key, str) else None
            if text is None or len(text) > _SIMPLE_KEY:
                raise _NotPlain
            if isinstance(item, dict) and item:
                lines.append(f"{pad}{text}:")
                lines += _block(item, indent + 2)
            elif isinstance(item, list) and item:
                lines.append(f"{pad}{text}:")
                lines += _block(item, indent)  # PyYAML does not indent a mapping's sequence
            else:
                lines.append(_line(f"{pad}{text}: ", item))
        return lines
    for item in value:
        if isinstance(item, dict | list) and item:
            inner = _block(item, indent + 2)
            lines.append(f"{pad}- {inner[0][indent + 2 :]}")
            lines += inner[1:]
        else:
            lines.append(_line(f"{pad}- ", item))
    return lines


def _line(prefix: str, value: Any) -> str:
    if isinstance(value, dict | list):  # empty: PyYAML writes it in flow style
        return prefix + ("{}" if isinstance(value, dict) else "[]")
    text = _scalar(value)
    if text is None or (" " in text and len(prefix) + len(text) > _WIDTH):
        raise _NotPlain  # PyYAML would quote it, or fold it across lines
    return prefix + text


def _scalar(value: Any) -> str | None:
    """How PyYAML writes ``value`` when it is a plain scalar; None when it is not one."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if type(value) is int:
        return str(value)
    if type(value) is str:
        if _is_plain(value) and value.lower() not in _SPECIAL:
            return value
        if value in _BOOLEANS or value in _NULLS or _is_quoted_number(value):
            return f"'{value}'"  # a string a reader would take for a boolean, null or number
    return None


# --------------------------------------------------------------------------- reading


def load(text: str) -> Any:
    """``yaml.safe_load(text)``; a :class:`YAMLError` on a syntax error."""
    try:
        return _flat(text)
    except _NotPlain:
        pass
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise _error(exc) from exc
    except RecursionError:
        # PyYAML composes a node per level, recursively: thousands of nested brackets are a
        # broken file, not a broken plugin.
        raise YAMLError(
            "collections nested too deeply",
            None,
            problem="collections nested thousands deep, past what noderole reads",
        ) from None
    except ValueError as exc:
        # Valid YAML whose value its type cannot hold: a timestamp of month 13, ``!!int x``, an
        # integer of thousands of digits. PyYAML's constructor says only Python's words.
        raise _unconvertible(text, exc) from None


def _unconvertible(text: str, exc: ValueError) -> YAMLError:
    """The scalar of ``text`` that its YAML type cannot hold (``exc`` is what converting the
    whole document raised), with its place: the document is composed again and each scalar
    converted alone, on this error's path only."""
    import yaml

    loader = yaml.SafeLoader(text)
    try:
        pending = [loader.get_single_node()]
        while pending:
            node = pending.pop()
            if isinstance(node, yaml.MappingNode):
                pending.extend(part for pair in reversed(node.value) for part in pair[::-1])
            elif isinstance(node, yaml.SequenceNode):
                pending.extend(reversed(node.value))
            elif isinstance(node, yaml.ScalarNode):
                try:
                    loader.construct_object(node)
                except ValueError as found:
                    return _value_error(node, found)
    except yaml.YAMLError:
        pass
    finally:
        loader.dispose()
    return YAMLError(str(exc), None, problem=f"a value YAML cannot read ({exc})")


def _value_error(node: Any, error: ValueError) -> YAMLError:
    kind = str(node.tag).rpartition(":")[2]
    digits = str(node.value).lstrip("+-")
    limit = sys.get_int_max_str_digits()
    if kind == "int" and digits.isdigit() and limit and len(digits) > limit:
        what = f"an integer of {len(digits)} digits, more than Python reads ({limit})"
    else:
        what = f"{node.value!r} cannot be read as a YAML {kind} ({error})"
    mark = node.start_mark
    return YAMLError(
        str(error),
        mark.line + 1,
        column=mark.column + 1,
        problem=f"{what}; quote it if it is text",
    )


def _error(exc: Exception) -> YAMLError:
    """PyYAML's error as one line and a place: a marked error's context and problem (``while
    parsing a flow sequence, expected ',' or ']', but got '<stream end>'``) at its problem's
    line and column; a reader's (a character YAML refuses) at its character."""
    mark = getattr(exc, "problem_mark", None)
    problem = ", ".join(
        part for part in (getattr(exc, "context", None), getattr(exc, "problem", None)) if part
    )
    if mark is not None:
        return YAMLError(str(exc), mark.line + 1, column=mark.column + 1, problem=problem)
    position = getattr(exc, "position", None)
    return YAMLError(
        str(exc) or type(exc).__name__,
        None,
        character=position + 1 if isinstance(position, int) else None,
        problem=problem,
    )


def _flat(text: str) -> dict[str, Any] | None:
    """A flat document (``key: value``, ``key:`` then ``- item`` lines, comments), read as
    PyYAML reads it; :class:`_NotPlain` for anything else."""
    if not text.isascii() or any(ch < " " and ch != "\n" for ch in text):
        raise _NotPlain  # tabs, carriage returns, other control characters, non-ASCII
    document: dict[str, Any] = {}
    key: str | None = None  # the key whose list the next items extend
    items: list[Any] | None = None
    indent: int | None = None
    for raw in text.split("\n"):
        line = raw.rstrip(" ")
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        item = _item_line(line)
        if item is not None:
            if key is None or (indent is not None and item[0] != indent):
                raise _NotPlain
            indent = item[0]
            if items is None:
                items = document[key] = []
            items.append(_value(item[1]))
            continue
        pair = _key_line(line)
        if pair is None or pair[0].lower() in _SPECIAL:
            raise _NotPlain
        name, value = pair
        if value is None:
            key, items, indent = name, None, None
            document[name] = None
        else:
            key, items, indent = None, None, None
            document[name] = _value(value)
    return document or None


def _value(text: str) -> Any:
    """A scalar as PyYAML reads it, for the plain forms; :class:`_NotPlain` otherwise."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        inner = text[1:-1]
        if "'" in inner or '"' in inner or "\\" in inner or "#" in inner:
            raise _NotPlain
        return inner
    if text in _BOOLEANS:
        return _BOOLEANS[text]
    if text in _NULLS:
        return None
    if _is_int(text):
        limit = sys.get_int_max_str_digits()
        if limit and len(text.lstrip("-")) > limit:  # int() refuses it: PyYAML's path says so
            raise _NotPlain
        return int(text)
    if _is_plain(text) and text.lower() not in _SPECIAL:
        return text
    raise _NotPlain
