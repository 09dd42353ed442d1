"""``noderole wait``: a bounded, event-driven wait for scripts (replaces ``while ...; sleep 2``)."""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, TypeAlias

import click

from noderole.cli import Command
from noderole.cli._app import App
from noderole.cli._params import Seconds, seconds_text
from noderole.errors import DefinitionError, UsageError, WaitTimeout
from noderole.root import climbs_out

if TYPE_CHECKING:
    from noderole.records import Wait

_Builder: TypeAlias = "Callable[[float], Wait]"

__all__ = ["wait"]


@click.command("wait", cls=Command)
@click.option("--path", "paths", multiple=True, metavar="P", help="A node path to wait for.")
@click.option("--any", "any_path", is_flag=True, help="One --path is enough (default: all).")
@click.option(
    "--exists", "exists_only", is_flag=True, help="Paths need only exist, not be readable."
)
@click.option("--socket", "socket_path", metavar="P", help="A unix socket that must accept.")
@click.option("--tcp", metavar="HOST:PORT", help="A TCP port that must accept ([::1]:80 for IPv6).")
@click.option("--http", "url", metavar="URL", help="A URL that must answer GET with a 2xx status.")
@click.option(
    "--command", "command", metavar="CMD", help="A command that must exit 0 (shell words)."
)
@click.option(
    "--timeout",
    type=Seconds(),
    required=True,
    metavar="S",
    help="Seconds before giving up (shared by all conditions).",
)
@click.option("-q", "--quiet", is_flag=True, help="Do not print what is awaited.")
@click.pass_obj
def wait(
    app: App,
    paths: tuple[str, ...],
    any_path: bool,
    exists_only: bool,
    socket_path: str | None,
    tcp: str | None,
    url: str | None,
    command: str | None,
    timeout: float,
    quiet: bool,
) -> None:
    """Wait until every condition given holds; exit 0, or fail naming what is missing.

    Paths and sockets are node paths (read under --root). Paths are watched with inotify, so the
    wait ends within milliseconds of the file appearing; sockets, ports, URLs and commands are
    retried every 15 ms (commands every 100 ms). Conditions are checked in the order of the options
    above, all within one --timeout.

    \b
    Example:
      noderole wait --path /etc/rancher/k3s/k3s.yaml --tcp 127.0.0.1:6443 --timeout 120
    """
    from noderole.waits import run_wait

    records = _records(
        paths=paths,
        require="any" if any_path else "all",
        readable=not exists_only,
        socket_path=socket_path,
        tcp=tcp,
        url=url,
        command=command,
    )
    clock = app.clock
    start = clock.monotonic()

    given = seconds_text(timeout)

    def report(text: str) -> None:
        # Each condition gets what is left of --timeout; show the bound the user gave instead.
        text = re.sub(r" \(up to [^)]*\)$", "", text)
        if not quiet:
            click.echo(f"noderole wait: {text} (up to {given}s)", err=True)

    for build in records:
        left = timeout - (clock.monotonic() - start)
        # A condition reached with no time left still gets one look, as the seed's last check.
        record = build(max(left, 1e-3))
        try:
            run_wait(record, root=app.root, clock=clock, progress=report)
        except WaitTimeout as error:
            raise WaitTimeout(f"still not ready after {given}s: {error}") from None


def _records(
    *,
    paths: tuple[str, ...],
    require: Literal["all", "any"],
    readable: bool,
    socket_path: str | None,
    tcp: str | None,
    url: str | None,
    command: str | None,
) -> list[_Builder]:
    """One builder per condition: ``timeout -> record`` (timeouts are known only when it runs)."""
    from noderole import records as r

    builders: list[_Builder] = []
    # "{missing}" alone: the command adds the total time spent, across conditions, to the message.
    only = "{missing}"
    try:
        if paths:
            for path in paths:
                _absolute("--path", path)
            r.WaitForPaths(paths=paths, timeout=1, require=require, readable=readable)
            builders.append(
                lambda t: r.WaitForPaths(
                    paths=paths, timeout=t, require=require, readable=readable, message=only
                )
            )
        if socket_path is not None:
            _absolute("--socket", socket_path)
            builders.append(lambda t: r.WaitForSocket(path=socket_path, timeout=t, message=only))
        if tcp is not None:
            host, port = _host_port(tcp)
            r.WaitForTcp(host=host, port=port, timeout=1)
            builders.append(lambda t: r.WaitForTcp(host=host, port=port, timeout=t, message=only))
        if url is not None:
            r.WaitForHttp(url=url, timeout=1)
            _probeable(url)
            builders.append(lambda t: r.WaitForHttp(url=url, timeout=t, message=only))
        if command is not None:
            argv = _argv(command)
            builders.append(lambda t: r.WaitForCommand(argv=argv, timeout=t, message=only))
    except DefinitionError as error:
        raise UsageError(f"noderole wait: {error}") from None
    if not builders:
        raise UsageError(
            "noderole wait: name at least one condition (--path, --socket, --tcp, --http or "
            "--command)"
        )
    return builders


def _absolute(option: str, path: str) -> None:
    if not path.startswith("/"):
        raise UsageError(f"noderole wait: {option} takes an absolute node path, got {path!r}")
    if climbs_out(path):
        raise UsageError(
            f"noderole wait: {option} {path!r} climbs above / with '..' and would leave the "
            f"root; write it without '..'"
        )


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    if bracketed:
        host = host[1:-1]
    elif any(mark in host for mark in ":[]"):
        host = ""  # an IPv6 address needs its brackets, both of them: [::1]:6443
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise UsageError(
            f"noderole wait: --tcp takes HOST:PORT with a port 1-65535 (e.g. 127.0.0.1:6443 or "
            f"[::1]:6443), got {text!r}"
        )
    return host, int(port)


def _probeable(url: str) -> None:
    """A URL typed on the command line is held to what a probe can connect to, port included
    (the record leaves a port's range to its plugin)."""
    from noderole.supervisor.probes import http_address

    try:
        http_address(url)
    except ValueError as error:
        raise UsageError(
            f"noderole wait: --http takes an http:// or https:// URL with a port 1-65535, got "
            f"{url!r} ({error})"
        ) from None


def _argv(command: str) -> tuple[str, ...]:
    try:
        argv = shlex.split(command)
    except ValueError as error:
        raise UsageError(f"noderole wait: --command {command!r}: {error}") from None
    if not argv:
        raise UsageError("noderole wait: --command is empty")
    if not argv[0].startswith("/"):
        found = shutil.which(argv[0])
        if found is None:
            raise UsageError(
                f"noderole wait: --command: {argv[0]!r} is not on PATH; give its absolute path"
            )
        argv[0] = found
    return tuple(argv)
