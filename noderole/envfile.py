"""``KEY=VALUE`` environment files, parsed as data: nothing in them is ever executed or expanded.

Replaces the seed's ``awk -F= '/^KEY=/{print $2}'``, which cuts a value containing ``=`` short,
prints a repeated key once per assignment, and knows nothing of quotes or comments. The accepted
syntax is the subset of POSIX shell assignments such files are written in:

- ``KEY=value``; ``export KEY=value``; keys are ``[A-Za-z_][A-Za-z0-9_]*``.
- Blank lines and lines whose first non-blank character is ``#`` are skipped; after an unquoted or
  quoted value, whitespace followed by ``#`` starts a comment (``a#b`` keeps its ``#``).
- Unquoted values are taken literally up to the comment, surrounding whitespace trimmed.
- ``'single quotes'`` are literal; ``"double quotes"`` understand ``\\"``, ``\\\\``, ``\\$`` and
  ``\\n`` (newline) and nothing else: ``$X``, ``${X}``, ``$(cmd)`` and backticks stay as written.
- CRLF line ends are accepted; the last assignment of a key wins.

A malformed line is skipped and reported as ``PATH:LINE: why``; the other lines still count.

Internal module: import ``EnvFile``, ``read_env_file`` and ``parse_env_text`` from :mod:`noderole`.
"""

from __future__ import annotations

import os
import types
from collections.abc import Iterable, Mapping

from noderole import recordclass
from noderole.errors import EnvFileError
from noderole.names import is_variable_name
from noderole.reading import read_regular

__all__ = ["EnvFile", "parse_env_text", "read_env_file"]

_DOUBLE_ESCAPES = {'"': '"', "\\": "\\", "$": "$", "n": "\n"}
_BYTE_ORDER_MARK = b"\xef\xbb\xbf"


def _readonly(value: Mapping[str, str]) -> Mapping[str, str]:
    return types.MappingProxyType(dict(value))


def _lines(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


@recordclass.frozen(kw_only=True)
class EnvFile:
    """The parsed content of one environment file."""

    path: str
    """The file as named in messages (the node path, not the path under ``--root``)."""
    exists: bool
    """False when the file is absent; ``values`` is then empty and the caller decides."""
    values: Mapping[str, str] = recordclass.field(converter=_readonly, hash=False)
    """Every assigned key with its last value, in order of first assignment (read-only)."""
    warnings: tuple[str, ...] = recordclass.field(default=(), converter=_lines)
    """One ``PATH:LINE: why`` per skipped line."""

    def get(self, key: str, default: str | None = None) -> str | None:
        """The value of ``key``, or ``default`` when the file does not assign it."""
        return self.values.get(key, default)


def parse_env_text(text: str, *, source: str) -> EnvFile:
    """Parse environment-file text; ``source`` names it in warnings and in ``EnvFile.path``."""
    values: dict[str, str] = {}
    warnings: list[str] = []
    # split("\n"), not splitlines(): a form feed or U+2028 inside a value is not a line end.
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r")
        try:
            parsed = _parse_line(line)
        except _Malformed as error:
            warnings.append(f"{source}:{number}: {error}")
            continue
        if parsed is not None:
            key, value = parsed
            values[key] = value
    return EnvFile(path=source, exists=True, values=values, warnings=tuple(warnings))


def read_env_file(path: str | os.PathLike[str], *, display_path: str | None = None) -> EnvFile:
    """Read and parse ``path``; a missing file reads as empty with ``exists=False``.

    ``display_path`` is how messages name the file (the node path when ``path`` is under
    ``--root``). Raises :class:`EnvFileError` when the file exists but cannot be read, is no
    regular file (a FIFO, a device) or is over 1 MiB, is not UTF-8, or contains NUL bytes (a
    binary file, or one truncated by a crash).
    """
    name = display_path if display_path is not None else os.fspath(path)
    try:
        data = read_regular(path)  # not a FIFO that would wait, nor /dev/zero, nor a disk image
    except FileNotFoundError:
        return EnvFile(path=name, exists=False, values={})
    except OSError as error:
        raise EnvFileError(
            f"cannot read environment file {name}: {error.strerror or error}; "
            "make it a readable regular file, or remove it"
        ) from error
    if b"\0" in data:
        offset = data.index(b"\0")
        raise EnvFileError(
            f"environment file {name} contains a NUL byte (at byte {offset}): it is binary or was "
            "damaged; rewrite it as UTF-8 text with one KEY=VALUE per line"
        )
    # A byte-order mark written by some editors is not part of the first key. It is skipped here
    # rather than by the "utf-8-sig" codec, whose lookup imports a codec module on every apply
    # (2M instructions) and whose errors count bytes from after the mark.
    start = 3 if data.startswith(_BYTE_ORDER_MARK) else 0
    try:
        text = str(data[start:], "utf-8")
    except UnicodeDecodeError as error:
        raise EnvFileError(
            f"environment file {name} is not UTF-8 text (invalid byte at {start + error.start}); "
            "convert it to UTF-8 (e.g. iconv -f LATIN1 -t UTF-8) with one KEY=VALUE per line"
        ) from error
    return parse_env_text(text, source=name)


class _Malformed(Exception):
    """A line that is not an assignment; the message says why."""


def _parse_line(line: str) -> tuple[str, str] | None:
    """The (key, value) a line assigns, None for a blank or comment line."""
    stripped = line.lstrip(" \t")
    if not stripped.strip() or stripped.startswith("#"):
        return None
    # "export KEY=..." as in the shell: the word, then at least one blank.
    exported = stripped.startswith("export") and stripped[6:7] in (" ", "\t")
    body = stripped[6:].lstrip(" \t") if exported else stripped
    key, sep, rest = body.partition("=")
    if not sep:
        # The line's text is not quoted back: a stray line may be half of a secret.
        raise _Malformed("no '=' on this line: expected KEY=VALUE")
    if not is_variable_name(key):
        if key != key.rstrip(" \t") and is_variable_name(key.rstrip(" \t")):
            raise _Malformed(f"space before '=' after {key.strip()}: write {key.strip()}=VALUE")
        raise _Malformed(
            f"bad key {_excerpt(key)}: keys are letters, digits and '_', not starting with a digit"
        )
    return key, _parse_value(rest, key)


def _parse_value(rest: str, key: str) -> str:
    text = rest.lstrip(" \t")
    if text[:1] in ("'", '"'):
        value, after = _quoted(text, key)
        tail = after.lstrip(" \t")
        if tail and not (tail.startswith("#") and after != tail):
            raise _Malformed(
                f"text after the closing quote of {key}; put the whole value inside the quotes"
            )
        return value
    # "a #b" is "a" with a comment; "a#b" and "=#b" keep their '#' (as in the shell).
    found = [at for at in (rest.find(" #"), rest.find("\t#")) if at >= 0]
    return (rest[: min(found)] if found else rest).strip(" \t")


def _quoted(text: str, key: str) -> tuple[str, str]:
    """(value, what follows the closing quote) of a value starting with a quote."""
    quote = text[0]
    if quote == "'":
        end = text.find("'", 1)
        if end < 0:
            raise _Malformed(f"unterminated single quote in the value of {key}")
        return text[1:end], text[end + 1 :]
    out: list[str] = []
    i = 1
    while i < len(text):
        char = text[i]
        if char == '"':
            return "".join(out), text[i + 1 :]
        if char == "\\" and i + 1 < len(text) and text[i + 1] in _DOUBLE_ESCAPES:
            out.append(_DOUBLE_ESCAPES[text[i + 1]])
            i += 2
            continue
        # Any other backslash is kept, as the shell keeps it in "\a".
        out.append(char)
        i += 1
    raise _Malformed(f"unterminated double quote in the value of {key}")


def _excerpt(text: str, limit: int = 40) -> str:
    shown = text.strip()
    return repr(shown if len(shown) <= limit else shown[: limit - 3] + "...")
