"""The configuration file: ``/etc/noderole/config.toml``, one table per plugin.

Plugins declare their settings (:class:`noderole.SettingsTable`) with types and defaults; the file
overrides them. Anything the file says that no plugin declared, or says with the wrong type, is an
error naming the file, the table and the key — a typo in a boot configuration must never be
silently ignored.

Internal module: the public names are ``noderole.CONFIG_PATH`` and ``noderole.ConfigError``.
"""

from __future__ import annotations

import types
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

from noderole import recordclass, tomlcache
from noderole.errors import ConfigError, DefinitionError
from noderole.records import RecordBase, Setting, SettingsTable, did_you_mean, type_words
from noderole.root import NodeRoot

__all__ = [
    "CONFIG_PATH",
    "Config",
    "ConfigValue",
    "check_config",
    "config_from_values",
    "load_config",
]

CONFIG_PATH: Final = tomlcache.CONFIG_PATH
"""Node path of the configuration file (read under ``--root``)."""


@recordclass.frozen(kw_only=True, repr=False, eq=False)
class ConfigValue(RecordBase):
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


@recordclass.frozen(repr=False, eq=False)
class Config(RecordBase):
    """Effective configuration of every declared table."""

    values: Mapping[str, Mapping[str, ConfigValue]]
    """table -> key -> value."""
    path: str = CONFIG_PATH
    """Node path of the file that was read."""
    file_found: bool = False
    """Whether the file existed."""
    unchecked: tuple[str, ...] = ()
    """Tables of the file left unchecked: those of plugins disabled for this command."""

    def table(self, name: str) -> Mapping[str, Any]:
        """Effective values of one table; an undeclared table is a :class:`PluginError`.

        The name comes from code (a plugin's ``node.settings("...")``), never from the file:
        config.toml cannot fix it. Asked from a hook, the error is reported naming the plugin
        and the hook that asked.
        """
        try:
            entries = self.values[name]
        except KeyError:
            from noderole.errors import PluginError

            known = ", ".join(sorted(self.values)) or "none"
            raise PluginError(
                f"no plugin declares the settings table [{name}]{did_you_mean(name, self.values)}"
                f" (declared tables: {known}); node.settings() reads a table some loaded plugin "
                "declares with noderole_settings: check the name, and that the plugin declaring "
                "it is installed and enabled"
            ) from None
        return types.MappingProxyType({key: entry.value for key, entry in entries.items()})

    def blame(self, error: DefinitionError) -> ConfigError | None:
        """The configuration error behind a plugin's rejected record, when a value set in the file
        is what the record refused; None when the record's value did not come from the file.

        A ``pidfile = "/../x.pid"`` that passes its ``str`` type but that the plugin's
        ``Service`` refuses is the operator's mistake in config.toml, not the plugin's: it is
        reported naming the file, table and key, with the configuration exit code.
        """
        field = error.field
        if field is None or error.value is DefinitionError.NO_VALUE:
            return None
        from_file = [entry for entry in self.entries() if entry.source == self.path]
        culprits = [
            entry
            for entry in from_file
            if type(entry.value) is type(error.value) and entry.value == error.value
        ]
        refused = error.value
        if not culprits and isinstance(refused, str) and refused:
            # A path the plugin derived from a value: the directory of a file's path (uds_name =
            # "run/k.sock" gives the directory "run" to create), or a file in a directory's
            # (manifests_dir = "m" gives "m/agent.yaml" to write).
            culprits = [
                entry
                for entry in from_file
                if isinstance(entry.value, str)
                and entry.value
                and (
                    entry.value.startswith(f"{refused}/")
                    or refused.startswith(f"{entry.value.rstrip('/')}/")
                )
            ]
        if not culprits:
            return None
        # Several file values may be equal (two ports of 0); the key named like the field wins.
        culprits.sort(key=lambda entry: field not in entry.setting.name)
        entry = culprits[0]
        shown = "***" if entry.setting.secret else repr(entry.value)
        return ConfigError(
            f"{self.path}:{entry.table}.{entry.setting.name}: {shown} is refused by the plugin "
            f"that uses it: {error}; fix the value in {self.path}"
        )

    def entries(self) -> list[ConfigValue]:
        """Every value, sorted by table then declaration order."""
        return [entry for name in sorted(self.values) for entry in self.values[name].values()]


def load_config(
    root: NodeRoot, tables: Sequence[SettingsTable], *, disabled: Collection[str] = ()
) -> Config:
    """Read ``ROOT/etc/noderole/config.toml`` (absent: all defaults) against the declared tables.

    Raises :class:`ConfigError` listing every problem (one line each, ``file:table.key: why``).
    A table named after a plugin in ``disabled`` (``--disable-plugin``) is left unchecked.
    """
    config, problems = check_config(root, tables, disabled=disabled)
    if problems or config is None:
        raise ConfigError("\n".join(problems))
    return config


def config_from_values(
    tables: Sequence[SettingsTable], document: Mapping[str, Any], *, found: bool = True
) -> Config:
    """The configuration ``document`` (tables of values, as TOML would give) makes of the
    declared ``tables``; :class:`ConfigError` listing every problem."""
    config, problems = _build(tables, document, found=found)
    if problems:
        raise ConfigError("\n".join(problems))
    return config


def check_config(
    root: NodeRoot,
    tables: Sequence[SettingsTable],
    *,
    disabled: Collection[str] = (),
    cached: bool = True,
) -> tuple[Config | None, list[str]]:
    """The effective configuration and every problem found (``noderole config check``).

    Each problem is one line naming ``file:table.key`` and why, with the fix when it is known.
    The configuration is None when the file cannot be read or parsed at all. A table named
    after a plugin in ``disabled`` is left unchecked (:attr:`Config.unchecked`): a plugin is
    declared a table of its own name by convention, and one turned off for a command (as
    noderole's messages advise for a plugin that hangs) declares none.

    With ``cached`` (every command but ``config check``), a parse of this very text stored by an
    earlier command is used instead of parsing it again.
    """
    from noderole.tomlcache import CONFIG_CACHE, parse_config_text, read_config, unreadable

    try:
        raw = read_config(root.local(CONFIG_PATH))  # not through pathlib: `plan` imports none
    except FileNotFoundError:
        return _build(tables, {}, found=False, disabled=disabled)
    except OSError as exc:
        return None, [unreadable(exc)]

    try:
        cache = root.local(CONFIG_CACHE) if cached else None
        document = parse_config_text(raw.decode("utf-8"), cache)
    except UnicodeDecodeError as exc:
        return None, [f"{CONFIG_PATH}: not UTF-8 text ({exc.reason} at byte {exc.start})"]
    except ValueError as exc:  # tomllib.TOMLDecodeError
        return None, [f"{CONFIG_PATH}: not valid TOML: {exc}"]
    return _build(tables, document, found=True, disabled=disabled)


def _build(
    tables: Sequence[SettingsTable],
    document: Mapping[str, Any],
    *,
    found: bool,
    disabled: Collection[str] = (),
) -> tuple[Config, list[str]]:
    declared = {table.table: table for table in tables}
    problems: list[str] = []
    unchecked: list[str] = []
    for name, body in document.items():
        if name not in declared and name in disabled:
            unchecked.append(name)  # its plugin is off for this command
        elif name not in declared:
            known = ", ".join(f"[{t}]" for t in sorted(declared)) or "none"
            scope, off = "installed", ""
            if disabled:
                scope, off = "enabled", f"; disabled: {', '.join(sorted(disabled))}"
            problems.append(
                f"{CONFIG_PATH}:{name}: table [{name}] is not declared by any {scope} plugin"
                f"{did_you_mean(name, declared)} (known tables: {known}{off}); remove it or "
                f"install the plugin that reads it"
            )
        elif not isinstance(body, dict):
            problems.append(f"{CONFIG_PATH}:{name}: [{name}] must be a table, got {body!r}")
    values: dict[str, dict[str, ConfigValue]] = {}
    for name, table in declared.items():
        body = document.get(name, {})
        if not isinstance(body, dict):
            body = {}
        settings = {s.name: s for s in table.settings}
        for key in body:
            if key not in settings:
                known = ", ".join(settings) or "none"
                problems.append(
                    f"{CONFIG_PATH}:{name}.{key}: unknown key{did_you_mean(key, settings)} "
                    f"(known keys of [{name}]: {known})"
                )
        entries: dict[str, ConfigValue] = {}
        for setting in table.settings:
            value, source = setting.default, "default"
            if setting.name in body:
                given = body[setting.name]
                why = setting.invalid(given)
                if why is None:
                    value = float(given) if setting.type is float else given
                    source = CONFIG_PATH
                else:
                    problems.append(_problem(name, setting, given, why))
            entries[setting.name] = ConfigValue(
                table=name, setting=setting, value=value, source=source
            )
        values[name] = entries
    return Config(values=values, file_found=found, unchecked=tuple(unchecked)), problems


def _problem(table: str, setting: Setting, value: object, why: str) -> str:
    shown = "***" if setting.secret else _as_written(value)
    allowed = setting.bounds()
    expected = type_words(setting.type) + (f", {allowed}" if allowed else "")
    default = "***" if setting.secret else repr(setting.default)
    return (
        f"{CONFIG_PATH}:{table}.{setting.name}: {shown} {why}; expected {expected} "
        f"(default: {default})"
    )


def _as_written(value: object) -> str:
    """A value as the file has it: a TOML date or time in its own notation (tomllib gives
    ``datetime`` objects, whose repr no TOML author wrote), anything else as its repr."""
    isoformat = getattr(value, "isoformat", None)
    if callable(isoformat) and not isinstance(value, int | float | str):
        return str(isoformat())
    return repr(value)
