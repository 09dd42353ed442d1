"""The configuration file: ``/etc/noderole/config.toml``, one table per plugin.

Plugins declare their settings (:class:`noderole.SettingsTable`) with types and defaults; the file
overrides them. Anything the file says that no plugin declared, or says with the wrong type, is an
error naming the file, the table and the key — a typo in a boot configuration must never be
silently ignored.
"""

from __future__ import annotations

import tomllib
import types
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from noderole.errors import ConfigError
from noderole.records import Setting, SettingsTable, _matches_type
from noderole.root import NodeRoot

__all__ = ["CONFIG_PATH", "Config", "ConfigValue", "load_config"]

CONFIG_PATH = "/etc/noderole/config.toml"
"""Node path of the configuration file (read under ``--root``)."""


@attrs.frozen(kw_only=True)
class ConfigValue:
    """One effective setting and where its value came from."""

    table: str
    """Table name."""
    setting: Setting
    """The declaration."""
    value: Any
    """Effective value."""
    source: str
    """``default`` or ``/etc/noderole/config.toml``."""

    def shown(self) -> Any:
        """The value as ``config show`` prints it (secrets as ``***``)."""
        return "***" if self.setting.secret else self.value


@attrs.frozen
class Config:
    """Effective configuration of every declared table."""

    values: Mapping[str, Mapping[str, ConfigValue]]
    """table -> key -> value."""
    path: str = CONFIG_PATH
    """Node path of the file that was read."""
    file_found: bool = False
    """Whether the file existed."""

    def table(self, name: str) -> Mapping[str, Any]:
        """Effective values of one table; an undeclared table is a :class:`ConfigError`."""
        try:
            entries = self.values[name]
        except KeyError:
            known = ", ".join(sorted(self.values)) or "none"
            raise ConfigError(
                f"no plugin declares the settings table [{name}] (declared tables: {known})"
            ) from None
        return types.MappingProxyType({key: entry.value for key, entry in entries.items()})

    def entries(self) -> list[ConfigValue]:
        """Every value, sorted by table then declaration order."""
        return [entry for name in sorted(self.values) for entry in self.values[name].values()]


def load_config(root: NodeRoot, tables: Sequence[SettingsTable]) -> Config:
    """Read ``ROOT/etc/noderole/config.toml`` (absent: all defaults) against the declared tables."""
    local = root.resolve(CONFIG_PATH)
    try:
        raw = local.read_bytes()
    except FileNotFoundError:
        return _build(tables, {}, found=False)
    except OSError as exc:
        raise ConfigError(f"{CONFIG_PATH}: cannot read it: {exc.strerror}") from exc
    try:
        document = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{CONFIG_PATH}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{CONFIG_PATH}: not valid TOML: {exc}") from exc
    return _build(tables, document, found=True)


def _build(tables: Sequence[SettingsTable], document: Mapping[str, Any], *, found: bool) -> Config:
    declared = {table.table: table for table in tables}
    for name, body in document.items():
        if name not in declared:
            known = ", ".join(f"[{t}]" for t in sorted(declared)) or "none"
            raise ConfigError(
                f"{CONFIG_PATH}: table [{name}] is not declared by any installed plugin "
                f"(known tables: {known}); remove it or install the plugin that reads it"
            )
        if not isinstance(body, dict):
            raise ConfigError(f"{CONFIG_PATH}: [{name}] must be a table, got {body!r}")
    values: dict[str, dict[str, ConfigValue]] = {}
    for name, table in declared.items():
        body = document.get(name, {})
        settings = {s.name: s for s in table.settings}
        for key in body:
            if key not in settings:
                known = ", ".join(settings) or "none"
                raise ConfigError(
                    f"{CONFIG_PATH}: [{name}] has unknown key {key!r} (known keys: {known})"
                )
        entries: dict[str, ConfigValue] = {}
        for setting in table.settings:
            if setting.name in body:
                value = body[setting.name]
                if not _matches_type(value, setting.type):
                    raise ConfigError(
                        f"{CONFIG_PATH}: [{name}] {setting.name} = {value!r} must be of type "
                        f"{setting.type.__name__} (default: {setting.default!r})"
                    )
                if setting.type is float:
                    value = float(value)
                entries[setting.name] = ConfigValue(
                    table=name, setting=setting, value=value, source=CONFIG_PATH
                )
            else:
                entries[setting.name] = ConfigValue(
                    table=name, setting=setting, value=setting.default, source="default"
                )
        values[name] = entries
    return Config(values=values, file_found=found)
