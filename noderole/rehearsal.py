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

import contextlib
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from noderole import recordclass
from noderole.config import CONFIG_PATH
from noderole.errors import PluginError, UsageError
from noderole.rehearsal_records import (
    REHEARSAL_INPUTS,
    FreePort,
    RehearsalFile,
    RehearsalSetting,
    StandIn,
)

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

INPUT_KINDS: tuple[type[Any], ...] = REHEARSAL_INPUTS
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


@recordclass.frozen(kw_only=True)
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


def merge_inputs(
    records: Sequence[Any],
    *,
    pick_port: Callable[[], int] = free_port,
    declared: Mapping[str, Iterable[str]] | None = None,
) -> Staging:
    """Merge the records: programs, joined input files, settings per table and key, ports.

    ``declared``: the settings the loaded plugins declare, by table; a rehearsal setting or
    port of another table or key is the plugin's error (written into config.toml, it was
    reported as the operator's, in a file he never wrote)."""
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
    if declared is not None:
        for (table, key), group in sorted(settings.items()):
            if key not in declared.get(table, ()):
                from noderole.records import did_you_mean

                where = (
                    f"table [{table}] has no setting {key!r}{did_you_mean(key, declared[table])}"
                    if table in declared
                    else f"no plugin declares a table [{table}]{did_you_mean(table, declared)}"
                )
                raise PluginError(
                    f"{_owners(group)} gives the rehearsal a value for [{table}] {key}, but "
                    f"{where}: fix the plugin's noderole_standins, or disable it with "
                    "--disable-plugin NAME"
                )
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
    declared = {t.table: {s.name for s in t.settings} for t in plugins.settings_tables()}
    staging = merge_inputs(collect_inputs(plugins, node), pick_port=pick_port, declared=declared)
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
    with _one_interruption() as hold:
        try:
            staging = ops.at_root(NodeRoot(scratch))
            stage_rehearsal(staging.root, staging.plugins, staging.node_for(role))
            rehearsal = ops.at_root(NodeRoot(scratch))  # a fresh one: it reads the new config.toml
            plan = rehearsal.plan(role)
            # Its daemon ends with this process, even killed (SIGKILL): nothing outlives it.
            backend = NativeBackend(rehearsal.root, owner=os.getpid())
            report = rehearsal.apply(plan, backend, progress=ConsoleProgress(), lock_timeout=30)
            ok = report.ok
            echo("")
            rows, verdict = rehearsal.status(plan, backend, wait=True, timeout=30.0)
            show_status(plan.role, rows, verdict)
            hold()  # done: from here a signal waits for the clean-up, which nothing cuts short
        finally:
            # Cut short, it would leave a supervisor or the scratch root; and the terminal may be
            # gone (a SIGHUP), so what it says comes last and may be lost. Every signal now
            # waits for it: the first one held the rest when it interrupted the rehearsal, and
            # the rehearsal's end held them before leaving its block (and, should the work have
            # raised, this first statement does).
            hold()
            try:
                if backend is not None:
                    backend.supervisor.close()  # and no thread of the apply starts another
            finally:  # even if the daemon would not stop: its root gone, it stops itself
                if not keep:
                    shutil.rmtree(scratch, ignore_errors=True)
            with contextlib.suppress(OSError):
                if backend is not None:
                    echo("\nstopped every service of the rehearsal")
                if keep:
                    echo(f"kept {scratch}")
    return ok


_TERMINATIONS = ("SIGTERM", "SIGHUP")
"""What ends a rehearsal from outside besides Ctrl-C: ``timeout``, an init system, a lost SSH
session."""


@contextlib.contextmanager
def _one_interruption() -> Iterator[Callable[[], None]]:
    """Within: the first Ctrl-C (SIGINT), SIGTERM or SIGHUP interrupts the block as a Ctrl-C
    does (a ``KeyboardInterrupt``, so its clean-up runs: the scratch supervisor stopped, the
    scratch root removed), and every signal after it waits until the block is done, as does
    every signal once the block calls the ``hold()`` it is given. Then the process ends as the
    first signal would have it: 130 for Ctrl-C, death by SIGTERM or SIGHUP. Before, a signal
    that landed as the clean-up began (between the end of the work and the clean-up's own
    deferral) cut it short, leaving the scratch root; and before that, a SIGTERM or SIGHUP left
    the supervisor, its services and the scratch root for good.

    A signal the caller ignores stays ignored; only the main thread receives signals, and
    elsewhere the block runs as it is. On SIGTERM or SIGHUP the command tries of this
    process's waits are ended first, as :func:`noderole._start.end_wait_attempts` ends them
    (looked up, never imported: a handler must not import); one this thread is starting when
    the signal lands is ended by the start, which then sends the signal again."""
    import signal
    import sys
    import threading
    import types

    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    first: list[int] = []  # the signal that decides how the command ends
    holding = [False]

    def on_signal(number: int, frame: types.FrameType | None) -> None:
        if holding[0]:
            if not first:
                first.append(number)
            return
        code = frame.f_code if frame is not None else None
        if code is not None and code.co_name == "cb" and "importlib" in code.co_filename:
            # A module lock's weakref callback: an exception raised here is printed ("Exception
            # ignored in ...") and dropped. The signal again, from the frame after it.
            signal.raise_signal(number)
            return
        if number != signal.SIGINT:
            end = getattr(sys.modules.get("noderole.supervisor.probes"), "end_attempts", None)
            if end is not None and not end(dying_of=number):
                return  # the try being started ends itself, and sends the signal again
        holding[0] = True  # before raising: a second signal must not cut the clean-up short
        first.append(number)
        raise KeyboardInterrupt

    previous: dict[int, Any] = {}
    for number in (signal.SIGINT, *(getattr(signal, name) for name in _TERMINATIONS)):
        handler = signal.getsignal(number)
        if handler not in (signal.SIG_IGN, None):
            previous[number] = handler
            signal.signal(number, on_signal)
    try:
        yield lambda: holding.__setitem__(0, True)
    except KeyboardInterrupt:
        if not first:
            raise
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if first:
        number = first[0]
        if number == signal.SIGINT:
            handler = previous[number]
            if callable(handler):
                handler(number, None)  # Python's own raises KeyboardInterrupt: exit 130
            raise KeyboardInterrupt
        _die_of(number, previous[number])


def _die_of(number: int, handler: Any) -> None:
    """End the command as the signal ``number`` would have, under ``handler``, the caller's:
    noderole's own (the command's tries ended, then death by the signal), the default (death
    by it), or another program's (run; the command ends anyway, with 128 + ``number``)."""
    import signal
    import sys

    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"noderole: terminated by {signal.Signals(number).name}\n")
        sys.stdout.flush()
        sys.stderr.flush()
    if callable(handler):
        handler(number, None)
    else:
        signal.signal(number, signal.SIG_DFL)
        signal.raise_signal(number)
    raise SystemExit(128 + number)
