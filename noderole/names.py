"""The shapes of names noderole checks, without regular expressions.

Every command that loads a plugin checks service names, environment variable names, settings'
keys and tables, DNS labels of certificate names and environment-file keys. Compiling a regular
expression for each costs more than all the checks it would make on a node (about 0.4 M
instructions apiece, a tenth of a millisecond, on every start-up); these use ``str`` methods. A
test compares each with the regular expression it stands for on generated text.
"""

from __future__ import annotations

__all__ = [
    "RESERVED_NAMES",
    "SERVICE_NAME_MAX",
    "is_dns_label",
    "is_lower_name",
    "is_service_name",
    "is_variable_name",
]

SERVICE_NAME_MAX = 128
"""The longest service or virtual name: the file names made from it (a unit, a runscript, a
pidfile, each one's temporary) must fit in a file system's 255 bytes."""

RESERVED_NAMES = frozenset({"noderole", "noderole-renew"})
"""Names noderole's own boot entry and daily renew job take as unit and runscript names: a
service of one of them would overwrite them, or be left out of what ``render`` writes."""

_SERVICE_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.@+-"
_LOWER_DIGITS = "abcdefghijklmnopqrstuvwxyz0123456789"


def is_service_name(text: str) -> bool:
    """``[A-Za-z0-9][A-Za-z0-9_.@+-]*``, the whole text (a service or virtual name)."""
    return text[:1].isalnum() and text.isascii() and not text.strip(_SERVICE_CHARS)


def is_variable_name(text: str) -> bool:
    """``[A-Za-z_][A-Za-z0-9_]*``, the whole text (an environment variable's name)."""
    return text.isascii() and text.isidentifier()


def is_lower_name(text: str, *, hyphen: bool = False) -> bool:
    """``[a-z][a-z0-9_]*`` (with ``hyphen``: ``[a-z][a-z0-9_-]*``), the whole text."""
    if hyphen:
        text = text.replace("-", "_")
    return text.isascii() and text.isidentifier() and text[0].isalpha() and text.islower()


def is_dns_label(text: str) -> bool:
    """``[a-z0-9]([a-z0-9-]*[a-z0-9])?``, the whole text (one label of a lower-case name)."""
    return (
        text[:1] != ""
        and text[0] in _LOWER_DIGITS
        and text[-1] in _LOWER_DIGITS
        and not text.strip(_LOWER_DIGITS + "-")
    )
