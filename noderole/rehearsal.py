"""Rehearsals: run a role end to end in a scratch root, with what plugins supply as data.

A plugin's ``noderole_standins`` hook returns four kinds of record, each merged its own way:

- :class:`noderole.StandIn`: a *program* that stands in for a real one (mode with an execute
  bit). Two plugins supplying a program at one path is an error naming both.
- :class:`RehearsalFile`: an *input file* a boot would find (a first-boot environment file).
  Several plugins may supply one path: their texts are joined in plugin-name order, with the
  strictest mode (each adds its keys to ``first-boot.env``). A ``StandIn`` without an execute
  bit is read as one, as it was before this record existed.
- :class:`RehearsalSetting`: one key of one table of the rehearsal's ``config.toml``. Settings
  are merged per table and key: the same value from two plugins agrees, different values are an
  error naming both plugins and the key.
- :class:`FreePort`: a setting the rehearsal fills with a free TCP port on 127.0.0.1, chosen once
  per rehearsal (so a rehearsal never collides with a real server or another rehearsal).

The rehearsal's own settings (``[noderole] net_check = false``: a scratch root has no network of
its own to wait for) come first, as the ``builtin`` plugin's. ``config.toml`` is written by the
rehearsal alone; a file or program at its path is refused.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from noderole.config import CONFIG_PATH
from noderole.errors import DefinitionError, PluginError, UsageError
from noderole.records import StandIn

if TYPE_CHECKING:
    from noderole.context import NodeContext
    from noderole.errors import ExitCode
    from noderole.operations import Operations
    from noderole.plugins import PluginSet
    from noderole.root import NodeRoot

__all__ = [
    "INPUT_KINDS",
    "REHEARSAL_SETTINGS",
    "FreePort",
    "RehearsalFile",
    "RehearsalSetting",
    "Staging",
    "collect_inputs",
    "free_port",
    "merge_inputs",
    "render_config",
    "run_rehearsal",
    "stage_rehearsal",
]

_NAME = re.compile(r"[A-Za-z0-9_-]+\Z")


def _check_absolute(inst: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    if not isinstance(value, str) or not value.startswith("/"):
        raise DefinitionError(
            f"{type(inst).__name__}: field {attribute.name!r} must be an absolute node path, "
            f"got {value!r}"
        )


def _check_name(inst: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    if not isinstance(value, str) or not _NAME.match(value):
        raise DefinitionError(
            f"{type(inst).__name__}: field {attribute.name!r} must be a settings name (letters, "
            f"digits, '_' and '-'), got {value!r}"
        )


def _check_value(inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    items = value if isinstance(value, tuple) else (value,)
    if not all(isinstance(item, str | int | float | bool) for item in items):
        raise DefinitionError(
            f"{type(inst).__name__}: field 'value' must be a string, number, boolean or a list "
            f"of them, got {value!r}"
        )


def _freeze(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


@attrs.frozen(kw_only=True)
class RehearsalFile:
    """An input file a rehearsal writes into its scratch root (a first-boot environment file).

    Example::

        RehearsalFile(path="/etc/my-image/first-boot.env", content="MY_KEY=1\\n")
    """

    path: str = attrs.field(validator=_check_absolute)
    """Node path of the file."""
    content: str = attrs.field(repr=lambda s: f"<{len(s)} chars>")
    """The file's text. Texts several plugins supply at one path are joined."""
    mode: int = attrs.field(default=0o644)
    """File mode (0o600 for a file holding a token)."""
    description: str = ""
    """What the file stands for."""
    origin: str = attrs.field(default="", eq=False, repr=False)
    """The plugin that returned this record; stamped by the plugin manager."""

    @mode.validator
    def _check_mode(self, attribute: attrs.Attribute[Any], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0o777:
            raise DefinitionError(f"RehearsalFile: field 'mode' must be 0o0..0o777, got {value!r}")
        if value & 0o111:
            raise DefinitionError(
                f"RehearsalFile: field 'mode' {value:#o} is executable; a program is a "
                "noderole.StandIn"
            )


@attrs.frozen(kw_only=True)
class RehearsalSetting:
    """One key of the rehearsal's ``config.toml``: ``[table] key = value``.

    Example::

        RehearsalSetting(table="node-exporter", key="wait_timeout", value=5.0)
    """

    table: str = attrs.field(validator=_check_name)
    """Settings table (``[konnectivity]``)."""
    key: str = attrs.field(validator=_check_name)
    """Key in the table."""
    value: Any = attrs.field(converter=_freeze, validator=_check_value)
    """String, number, boolean, or a list of them."""
    origin: str = attrs.field(default="", eq=False, repr=False)
    """The plugin that returned this record; stamped by the plugin manager."""


@attrs.frozen(kw_only=True)
class FreePort:
    """Ask the rehearsal for a free TCP port on 127.0.0.1, set as ``[table] key``.

    The port is chosen once per rehearsal, when the scratch root is staged.

    Example::

        FreePort(table="konnectivity", key="health_port")
    """

    table: str = attrs.field(validator=_check_name)
    """Settings table."""
    key: str = attrs.field(validator=_check_name)
    """Key in the table that gets the port."""
    origin: str = attrs.field(default="", eq=False, repr=False)
    """The plugin that returned this record; stamped by the plugin manager."""


INPUT_KINDS: tuple[type[Any], ...] = (StandIn, RehearsalFile, RehearsalSetting, FreePort)
"""What ``noderole_standins`` may return."""

REHEARSAL_SETTINGS = (
    RehearsalSetting(table="noderole", key="net_check", value=False, origin="builtin"),
)
"""The rehearsal's own settings: the scratch root has no network of its own to wait for."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@attrs.frozen(kw_only=True)
class Staging:
    """What a rehearsal writes into its scratch root."""

    files: Mapping[str, tuple[str, int]]
    """Content and mode per node path: programs and input files."""
    settings: Mapping[str, Mapping[str, Any]]
    """``config.toml``'s tables and keys."""


def collect_inputs(plugins: PluginSet, node: NodeContext) -> list[Any]:
    """Every rehearsal record the plugins' ``noderole_standins`` return, origin stamped."""
    return plugins.collect_any("noderole_standins", INPUT_KINDS, {"node": node})


def _owners(records: Iterable[Any]) -> str:
    return " and ".join(f"plugin {r.origin!r}" for r in records)


def merge_inputs(records: Sequence[Any], *, pick_port: Callable[[], int] = free_port) -> Staging:
    """Merge the records: programs, joined input files, settings per table and key, ports."""
    programs: dict[str, list[StandIn]] = {}
    inputs: dict[str, list[Any]] = {}
    settings: dict[tuple[str, str], list[Any]] = {}
    for record in [*REHEARSAL_SETTINGS, *records]:
        if isinstance(record, StandIn) and record.mode & 0o111:
            programs.setdefault(record.path, []).append(record)
        elif isinstance(record, StandIn | RehearsalFile):
            inputs.setdefault(record.path, []).append(record)
        elif isinstance(record, RehearsalSetting | FreePort):
            settings.setdefault((record.table, record.key), []).append(record)
        else:
            raise PluginError(f"not a rehearsal record: {record!r}")
    for path in sorted({*programs, *inputs}):
        if path == CONFIG_PATH:
            owners = _owners([*programs.get(path, []), *inputs.get(path, [])])
            raise PluginError(
                f"{owners} supplies {CONFIG_PATH} as a file; the rehearsal writes it from "
                "RehearsalSetting and FreePort records: return those instead"
            )
        if path in programs and (len(programs[path]) > 1 or path in inputs):
            group = [*programs[path], *inputs.get(path, [])]
            raise PluginError(
                f"{_owners(group)} both supply the stand-in program {path}; disable one with "
                "--disable-plugin NAME"
            )
    files: dict[str, tuple[str, int]] = {}
    for path, (program,) in programs.items():
        files[path] = (program.content, program.mode)
    for path, group in inputs.items():
        group.sort(key=lambda r: r.origin)
        if len(group) == 1:
            files[path] = (group[0].content, group[0].mode)
            continue
        text = "".join(r.content if r.content.endswith("\n") else r.content + "\n" for r in group)
        mode = group[0].mode
        for other in group[1:]:
            mode &= other.mode
        files[path] = (text, mode)
    tables: dict[str, dict[str, Any]] = {}
    for (table, key), group in sorted(settings.items()):
        # Keyed by type too: TOML's true and 1 are different values (Python's True == 1).
        values = {_typed(r.value): r.value for r in group if isinstance(r, RehearsalSetting)}
        ports = [r for r in group if isinstance(r, FreePort)]
        if len(values) > 1 or (values and ports):
            shown = ", ".join(
                f"{r.value!r} from plugin {r.origin!r}"
                if isinstance(r, RehearsalSetting)
                else f"a free port from plugin {r.origin!r}"
                for r in group
            )
            raise PluginError(
                f"rehearsal setting [{table}] {key} is given different values: {shown}; the "
                "plugins disagree: change one, or disable one with --disable-plugin NAME"
            )
        value = next(iter(values.values())) if values else pick_port()
        tables.setdefault(table, {})[key] = list(value) if isinstance(value, tuple) else value
    return Staging(files=files, settings=tables)


def _typed(value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(_typed(item) for item in value)
    return (type(value).__name__, value)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return json.dumps(str(value))  # a JSON string is a TOML basic string


def render_config(settings: Mapping[str, Mapping[str, Any]]) -> str:
    """The rehearsal's ``config.toml`` text, tables and keys sorted, ``noderole`` first."""
    lines = ["# Written by `noderole rehearse` from the plugins' rehearsal settings."]
    for table in sorted(settings, key=lambda name: (name != "noderole", name)):
        lines.append(f"\n[{table}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in sorted(settings[table].items())]
    return "\n".join(lines) + "\n"


def stage_rehearsal(
    root: NodeRoot,
    plugins: PluginSet,
    node: NodeContext,
    *,
    pick_port: Callable[[], int] = free_port,
) -> Staging:
    """Collect and merge every plugin's rehearsal records, write them under ``root``.

    ``node`` is a context over ``root`` (hooks may read the settings a stand-in depends on).
    Everything is merged, and every conflict raised, before the first file is written.
    """
    staging = merge_inputs(collect_inputs(plugins, node), pick_port=pick_port)
    files = {**staging.files, CONFIG_PATH: (render_config(staging.settings), 0o644)}
    for path, (content, mode) in sorted(files.items()):
        target = root.resolve(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        target.chmod(mode)
    return staging


def run_rehearsal(
    ops: Operations,
    role: str,
    *,
    keep: bool,
    echo: Callable[[str], None],
    show_status: Callable[[str, Sequence[Mapping[str, Any]], ExitCode], None],
) -> bool:
    """Rehearse ``apply role`` in a fresh scratch root; True when every service came up.

    Stages the plugins' records, applies with the native supervisor and its normal progress
    output, hands the status rows to ``show_status``, then stops everything and removes the
    scratch root (unless ``keep``).
    """
    from noderole.backends.native import NativeBackend
    from noderole.console import ConsoleProgress
    from noderole.root import NodeRoot

    if not ops.root.is_real:
        raise UsageError("rehearse makes its own scratch root; do not combine it with --root")
    scratch = Path(tempfile.mkdtemp(prefix=f"noderole-rehearse-{role}-"))
    echo(f"rehearsing role {role} in {scratch}")
    ok = False
    backend = None
    try:
        staging = ops.at_root(NodeRoot(scratch))
        stage_rehearsal(staging.root, staging.plugins, staging.node_for(role))
        rehearsal = ops.at_root(NodeRoot(scratch))  # a fresh one: it reads the new config.toml
        plan = rehearsal.plan(role)
        backend = NativeBackend(rehearsal.root)
        report = rehearsal.apply(plan, backend, progress=ConsoleProgress(), lock_timeout=30)
        ok = report.ok
        echo("")
        rows, verdict = rehearsal.status(plan, backend, wait=True, timeout=30.0)
        show_status(plan.role, rows, verdict)
    finally:
        if backend is not None:
            backend.supervisor.shutdown()
            echo("\nstopped every service of the rehearsal")
        if keep:
            echo(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    return ok
