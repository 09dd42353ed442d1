"""The records a rehearsal stages from: stand-in programs, input files, settings, free ports.

Only ``noderole rehearse`` and the plugins' ``noderole_standins`` hooks build them, so they live
apart from :mod:`noderole.records`: ``plan`` and ``apply`` import that module and would otherwise
pay for building these classes at import. Plugins
name them ``noderole.StandIn`` (and so on), which loads this module on first use.
"""

from __future__ import annotations

import re
from typing import Any

from noderole import recordclass
from noderole.errors import DefinitionError
from noderole.records import RecordBase, _check_absolute, _checked, _mode

__all__ = ["REHEARSAL_INPUTS", "FreePort", "RehearsalFile", "RehearsalSetting", "StandIn"]


@_checked
@recordclass.frozen(kw_only=True, repr=False, eq=False)
class StandIn(RecordBase):
    """An executable that stands in for a real one when a role is rehearsed in a scratch root."""

    path: str = recordclass.field(validator=_check_absolute)
    """Node path of the real executable (``/usr/local/bin/k3s``)."""
    content: str = recordclass.field(repr=lambda s: f"<{len(s)} chars>")
    """The stand-in program's text, with a ``#!`` line."""
    description: str = ""
    """What the stand-in does that matters to the boot."""
    mode: int = recordclass.field(default=0o755, validator=_mode)
    """File mode: 0o755 for a program; 0o644 (or 0o600) for an input file the rehearsal needs,
    such as a first-boot environment file."""
    origin: str = recordclass.field(default="", eq=False, repr=False)
    """The plugin that returned this record; stamped by the plugin manager."""


# ---------------------------------------------------------------- rehearsal inputs

_SETTING_NAME = re.compile(r"[A-Za-z0-9_-]+\Z")


def _check_setting_name(inst: Any, attribute: recordclass.Attribute[Any], value: str) -> None:
    if not isinstance(value, str) or not _SETTING_NAME.match(value):
        raise DefinitionError(
            f"{type(inst).__name__}: field {attribute.name!r} must be a settings name (letters, "
            f"digits, '_' and '-'), got {value!r}"
        )


def _check_setting_value(inst: Any, attribute: recordclass.Attribute[Any], value: Any) -> None:
    items = value if isinstance(value, tuple) else (value,)
    if not all(isinstance(item, str | int | float | bool) for item in items):
        raise DefinitionError(
            f"{type(inst).__name__}: field 'value' must be a string, number, boolean or a list "
            f"of them, got {value!r}"
        )


def _tuple_if_list(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


@recordclass.frozen(kw_only=True, repr=False, eq=False)
class RehearsalFile(RecordBase):
    """An input file a rehearsal writes into its scratch root (a first-boot environment file).

    Example::

        RehearsalFile(path="/etc/my-image/first-boot.env", content="MY_KEY=1\\n")
    """

    path: str = recordclass.field(validator=_check_absolute)
    """Node path of the file (absolute, without '..' climbing above /, as a StandIn's)."""
    content: str = recordclass.field(repr=lambda s: f"<{len(s)} chars>")
    """The file's text. Texts several plugins supply at one path are joined."""
    mode: int = recordclass.field(default=0o644)
    """File mode (0o600 for a file holding a token)."""
    description: str = ""
    """What the file stands for."""
    origin: str = recordclass.field(default="", eq=False, repr=False)
    """The plugin that returned this record; stamped by the plugin manager."""

    @mode.validator
    def _check_mode(self, attribute: recordclass.Attribute[Any], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0o777:
            raise DefinitionError(f"RehearsalFile: field 'mode' must be 0o0..0o777, got {value!r}")
        if value & 0o111:
            raise DefinitionError(
                f"RehearsalFile: field 'mode' {value:#o} is executable; a program is a "
                "noderole.StandIn"
            )


@recordclass.frozen(kw_only=True, repr=False, eq=False)
class RehearsalSetting(RecordBase):
    """One key of the rehearsal's ``config.toml``: ``[table] key = value``.

    Example::

        RehearsalSetting(table="node-exporter", key="wait_timeout", value=5.0)
    """

    table: str = recordclass.field(validator=_check_setting_name)
    """Settings table (``[konnectivity]``)."""
    key: str = recordclass.field(validator=_check_setting_name)
    """Key in the table."""
    value: Any = recordclass.field(converter=_tuple_if_list, validator=_check_setting_value)
    """String, number, boolean, or a list of them."""
    origin: str = recordclass.field(default="", eq=False, repr=False)
    """The plugin that returned this record; stamped by the plugin manager."""


@recordclass.frozen(kw_only=True, repr=False, eq=False)
class FreePort(RecordBase):
    """Ask the rehearsal for a free TCP port on 127.0.0.1, set as ``[table] key``.

    The port is chosen once per rehearsal, when the scratch root is staged.

    Example::

        FreePort(table="konnectivity", key="health_port")
    """

    table: str = recordclass.field(validator=_check_setting_name)
    """Settings table."""
    key: str = recordclass.field(validator=_check_setting_name)
    """Key in the table that gets the port."""
    origin: str = recordclass.field(default="", eq=False, repr=False)
    """The plugin that returned this record; stamped by the plugin manager."""


REHEARSAL_INPUTS: tuple[type[Any], ...] = (StandIn, RehearsalFile, RehearsalSetting, FreePort)
"""What ``noderole_standins`` may return."""
