"""``config.toml`` parsed once, not on every command: the parsed document is kept beside its text.

Importing ``tomllib`` and parsing the file cost more than everything else ``status`` does with
it, and the file changes only when an operator edits it. The cache holds the exact text it was
parsed from and the document (tables, strings, numbers, booleans, lists); a command whose file
text is byte for byte that text uses the document, anything else parses the file. No time stamps
are involved, so an edit within the file system's time granularity cannot be missed.

Only ``apply`` stores (:func:`store_parsed`, once it writes the node's records anyway, and it
records the file for ``reset``): ``plan``, ``status`` and an apply that decides nothing leave the
root as they found it. The cache is an optimisation: one that cannot be read, is damaged or
cannot be written is ignored (a read-only ``/var/cache``, an unprivileged user). It is written
with mode 0600, as settings can be secrets, and never holds a document TOML dates or times are
in (JSON has no such type). It imports only the standard library: ``status`` uses it without
attrs.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

from noderole.supervisor import _jsontext as jsontext

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "CONFIG_CACHE",
    "CONFIG_PATH",
    "parse_config_text",
    "read_config",
    "store_parsed",
    "unreadable",
]

CONFIG_PATH = "/etc/noderole/config.toml"
"""Node path of the configuration file (read under ``--root``); ``noderole.config.CONFIG_PATH``.
"""
CONFIG_CACHE = "/var/cache/noderole/config.json"
"""Where the parsed configuration is kept, as a node path (under ``--root``)."""
_FORMAT = 1
_PLAIN = (str, int, float, bool)
_UNSTORED: dict[str, dict[str, Any]] = {}
"""What this process parsed and found no cache for, by cache path, for :func:`store_parsed`."""


def read_config(local: str | os.PathLike[str]) -> bytes:
    """The bytes of ``config.toml`` at ``local`` (``root.local(CONFIG_PATH)``): a regular file
    of at most 1 MiB, else an :class:`OSError` saying what is there instead (a FIFO would hang
    the boot, a link to /dev/zero fill the memory). Every command reads it through here."""
    from noderole.reading import read_regular

    return read_regular(local)


def unreadable(error: OSError) -> str:
    """The problem line for a ``config.toml`` :func:`read_config` could not read."""
    return (
        f"{CONFIG_PATH}: cannot read it: {error.strerror}; config.toml must be a regular file of "
        "TOML text (at most 1 MiB): fix it, then check it with noderole config check"
    )


def parse_config_text(text: str, cache: str | os.PathLike[str] | None) -> dict[str, Any]:
    """``tomllib.loads(text)`` (a leading byte-order mark skipped), from ``cache`` when it was
    made from this very text.

    Writes nothing: a parse the cache did not have is kept for :func:`store_parsed`. Raises what
    ``tomllib.loads`` raises (``TOMLDecodeError``, a ``ValueError``) for text that is not TOML.
    """
    if cache is not None:
        from noderole.reading import read_json

        try:
            stored = read_json(cache)  # not through pathlib: `status` imports none
        except (OSError, ValueError):  # no cache, or a damaged one: parsed again
            stored = None
        if (
            isinstance(stored, dict)
            and stored.get("format") == _FORMAT
            and stored.get("text") == text
            and isinstance(stored.get("document"), dict)
        ):
            document: dict[str, Any] = stored["document"]
            return document
    import tomllib  # only on a first read or after an edit

    # A byte-order mark some editors write (Notepad) is theirs, not a first statement: tomllib
    # would refuse it as "Invalid statement (at line 1, column 1)", showing nothing to fix.
    try:
        document = tomllib.loads(text[1:] if text.startswith("\ufeff") else text)
    except tomllib.TOMLDecodeError:
        raise
    except RecursionError:  # tomllib recurses into nested arrays and inline tables
        raise tomllib.TOMLDecodeError("arrays or inline tables nested too deeply") from None
    except ValueError as exc:  # int() refused a number of thousands of digits: say which
        raise _long_number(text) or exc from None
    if cache is not None and _plain(document):
        _UNSTORED[os.fspath(cache)] = {"format": _FORMAT, "text": text, "document": document}
    return document


def _long_number(text: str) -> ValueError | None:
    """The error for the first number in ``text`` longer than ``int()`` converts, with its line
    (tomllib's own refusal names Python's setting, not the file's line)."""
    import sys

    limit = sys.get_int_max_str_digits()
    for number, line in enumerate(text.splitlines(), 1):
        run = 0
        for character in line + " ":
            if "0" <= character <= "9":
                run += 1
            elif character != "_":
                if limit and run > limit:
                    return ValueError(
                        f"an integer of {run} digits, more than Python reads ({limit}) "
                        f"(at line {number})"
                    )
                run = 0
    return None


def store_parsed(cache: str | os.PathLike[str]) -> bool:
    """Write to ``cache`` what this process parsed and did not find there: True when written."""
    content = _UNSTORED.pop(os.fspath(cache), None)
    if content is None:
        return False  # found in the cache (every command after the first): no pathlib either
    from pathlib import Path

    return _store(Path(cache), content)


def _plain(value: Any) -> bool:
    """True when JSON gives ``value`` back as it is (no dates or times anywhere in it)."""
    if isinstance(value, dict):
        return all(_plain(item) for item in value.values())
    if isinstance(value, list):
        return all(_plain(item) for item in value)
    return isinstance(value, _PLAIN)


def _store(cache: Path, content: dict[str, Any]) -> bool:
    """Replace ``cache`` with ``content`` (a unique temporary file, then a rename): True, or
    False and nothing changed."""
    temporary = cache.with_name(f".{cache.name}.{os.getpid()}.{os.urandom(4).hex()}")
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with open(descriptor, "wb") as file:
            file.write(jsontext.dumps(content).encode())
        os.replace(temporary, cache)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        return False
    return True
