"""Quoting for the languages rendered files are read in: POSIX sh, systemd units, env files.

Every function here turns *data* (an argument, a path, an environment value) into text that the
reader turns back into exactly that data: nothing is re-split, globbed or expanded. Each is tested
by round trip against the real reader (``sh``, ``systemd --test``) in the backend tests.

The rules, with their sources:

- sh: inside single quotes every byte is literal except ``'`` (POSIX XCU 2.2.2); inside double
  quotes ``\\`` escapes only ``$ ` " \\`` and newline (2.2.3).
- systemd ``Exec*=`` lines (systemd.service(5), "Command lines"; systemd.syntax(7)): ``%`` starts a
  specifier on the whole line (``%%`` is a literal ``%``); words are split on whitespace unless
  quoted; C escapes are decoded; at exec time ``$VAR``/``${VAR}`` are expanded and ``$$`` is a
  literal ``$``. A lone ``;`` separates commands unless quoted.
- systemd ``EnvironmentFile=`` (load_env_file, shell-like since v243): in double quotes ``\\``
  escapes ``" \\ ` $`` and keeps itself before any other character, like sh. Values are not
  expanded (expansion exists only in ``environment.d``, which noderole does not use).
"""

from __future__ import annotations

import re

__all__ = [
    "envfile_assignment",
    "is_plain_word",
    "sh_double_quoted",
    "sh_quote",
    "systemd_arg",
    "systemd_command_line",
    "systemd_environment",
    "systemd_setting_value",
]

# A word every reader here takes literally when left bare: no whitespace, quotes, escapes,
# expansions ($ ` %), globs (* ? [), separators (; & |), redirections or comments.
_PLAIN = re.compile(r"^[A-Za-z0-9_@+=:,./-]+\Z")
# Characters systemd's C-unescape understands by letter; all other controls go as \xNN.
_SYSTEMD_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def is_plain_word(value: str) -> bool:
    """True when ``value`` can stand bare in sh and in systemd files and read back unchanged."""
    return bool(_PLAIN.match(value))


def sh_quote(value: str) -> str:
    """``value`` as one sh word: bare when plain, else single-quoted (``'`` becomes ``'\\''``)."""
    if is_plain_word(value):
        return value
    return "'" + value.replace("'", "'\\''") + "'"


def sh_double_quoted(value: str) -> str:
    """``value`` inside sh double quotes, with the quotes: ``$ ` " \\`` are escaped."""
    escaped = re.sub(r'([$`"\\])', r"\\\1", value)
    return f'"{escaped}"'


def envfile_assignment(key: str, value: str) -> str:
    """One ``KEY="value"`` line that both ``. FILE`` in sh and systemd's ``EnvironmentFile=`` read
    back as exactly ``value`` (newlines included)."""
    return f"{key}={sh_double_quoted(value)}"


def _systemd_escape(value: str) -> str:
    out: list[str] = []
    for char in value:
        if char in _SYSTEMD_ESCAPES:
            out.append(_SYSTEMD_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02x}")
        elif char == "%":
            out.append("%%")
        else:
            out.append(char)
    return "".join(out)


def systemd_arg(value: str) -> str:
    """One argument of an ``Exec*=`` line that systemd passes to the program as exactly ``value``.

    Plain words stay bare; anything else is double-quoted with C escapes, ``%`` doubled (specifier)
    and ``$`` doubled (systemd's own variable expansion, which runs before any shell).
    """
    if is_plain_word(value):
        return value
    return '"' + _systemd_escape(value).replace("$", "$$") + '"'


def systemd_command_line(argv: tuple[str, ...] | list[str]) -> str:
    """An ``Exec*=`` value for ``argv``; ``argv[0]`` must be an absolute plain path."""
    if not argv or not argv[0].startswith("/") or not is_plain_word(argv[0]):
        raise ValueError(
            f"systemd needs the executable as a plain absolute path, got {argv[:1]!r}: "
            "rename it without spaces, quotes, '%' or '$'"
        )
    return " ".join(systemd_arg(arg) for arg in argv)


def systemd_environment(key: str, value: str) -> str:
    """One ``Environment=`` word setting ``key`` to exactly ``value`` (systemd never expands it)."""
    return '"' + _systemd_escape(f"{key}={value}") + '"'


def systemd_setting_value(value: str) -> str:
    """A single-line unit setting value (``Description=``, paths): ``%`` doubled, controls refused.

    Raises ``ValueError`` for a newline or other control character (a unit file setting is one
    line), and for a trailing backslash (it would continue the line).
    """
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise ValueError(f"{value!r} contains a control character; a unit setting is one line")
    if value.endswith("\\"):
        raise ValueError(f"{value!r} ends with a backslash, which systemd reads as a continuation")
    return value.strip().replace("%", "%%")
