"""Every hook noderole calls, each a documented stub with a complete example plugin.

Hooks that contribute something return records (or a list of them); noderole stamps each record
with the plugin that returned it, checks its type, and flattens the results. It never relies on
pluggy's call order: services are ordered by their declared dependencies (:mod:`noderole.plan`).

``noderole_resolve_role`` returns a role name rather than records; the first answer wins (see
:func:`noderole.plugins.resolve_role`).

Hooks are called once per invocation with keyword arguments; a hook implementation may declare
any subset of them. Record hooks do not support ``wrapper=True`` (or ``hookwrapper=True``)
implementations: they are called one plugin at a time so that any failure names its plugin, and
such an implementation is refused with a :class:`~noderole.errors.PluginError`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from noderole.context import NodeContext
    from noderole.records import Service, SettingsTable
    from noderole.rehearsal_records import FreePort, RehearsalFile, RehearsalSetting, StandIn

__all__ = ["PROJECT", "hookimpl", "hookspec"]

PROJECT = "noderole"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec(historic=True)
def noderole_addhooks(pluginmanager: pluggy.PluginManager) -> None:
    """Add hookspecs of your own, so that other plugins can extend yours.

    Called for every plugin as it is registered (historic), before any other hook. The k3s plugin
    uses it to let other plugins contribute k3s configuration and manifests.

    Example::

        # my_plugin/hookspecs.py
        import noderole

        @noderole.hookspec
        def my_plugin_extra_flags() -> list[str]:
            '''Flags other plugins add to my daemon.'''

        # my_plugin/plugin.py
        import noderole
        from my_plugin import hookspecs

        @noderole.hookimpl
        def noderole_addhooks(pluginmanager):
            pluginmanager.add_hookspecs(hookspecs)
    """


@hookspec
def noderole_settings() -> SettingsTable | Iterable[SettingsTable] | None:
    """Declare your plugin's settings: one table of ``/etc/noderole/config.toml``.

    Each setting has a type and a default; the file may override them. Unknown keys and wrong
    types in the file are errors naming the file, the table and the key. Read the effective values
    in other hooks with ``node.settings("my-table")``.

    Example::

        import noderole

        @noderole.hookimpl
        def noderole_settings():
            return noderole.SettingsTable(
                table="node-exporter",
                description="The node-exporter service.",
                settings=[
                    noderole.Setting(name="port", type=int, default=9100,
                                     description="Port the exporter listens on."),
                    noderole.Setting(name="wait_timeout", type=float, default=30.0,
                                     description="Seconds to wait for the textfile directory."),
                ],
            )
    """


@hookspec
def noderole_services(node: NodeContext) -> Service | Iterable[Service] | None:
    """Contribute services: each a :class:`noderole.Service` naming the roles it belongs to.

    Called every time noderole needs the definitions (``plan``, ``apply``, and at boot by
    ``noderole hook`` and ``noderole exec`` under OpenRC or systemd), so a hook may read inputs
    that exist on the node, such as a first-boot environment file, through ``node``. Return
    records; do not start anything here. Report a bad input as a :class:`noderole.Fail` step in
    ``pre_start`` so only your service fails, at the right moment, and a degraded one as a
    :class:`noderole.Warn` step (shown by ``plan``, printed by ``apply``, never fatal); do not
    print or log from the hook, which runs for every ``plan`` of every role.

    Example::

        import noderole

        @noderole.hookimpl
        def noderole_services(node):
            cfg = node.settings("node-exporter")
            return [
                noderole.Service(
                    name="node-exporter",
                    description="Prometheus node exporter",
                    roles=["server", "server-join", "agent"],
                    need=["net"],
                    command=["/usr/local/bin/node_exporter",
                             f"--web.listen-address=127.0.0.1:{cfg['port']}"],
                    pidfile="/run/node-exporter.pid",
                    output_log="/var/log/node-exporter.log",
                    error_log="/var/log/node-exporter.log",
                    pre_start=[
                        noderole.MakeDirectories(paths=["/var/lib/node-exporter"]),
                        noderole.WaitForPaths(paths=["/var/lib/node-exporter"],
                                              timeout=cfg["wait_timeout"]),
                    ],
                    readiness=noderole.WaitForHttp(
                        url=f"http://127.0.0.1:{cfg['port']}/metrics", timeout=30),
                )
            ]
    """


@hookspec
def noderole_standins(
    node: NodeContext,
) -> (
    StandIn
    | RehearsalFile
    | RehearsalSetting
    | FreePort
    | Iterable[StandIn | RehearsalFile | RehearsalSetting | FreePort]
    | None
):
    """Supply what ``noderole rehearse`` needs: stand-in programs, input files and settings.

    A :class:`noderole.StandIn` replaces one of your commands in a scratch root and behaves like
    the real program where it matters to the boot (writes the files your dependents wait for,
    answers your readiness check); the rehearsal writes it at ``root + path`` with mode 0755. A
    stand-in sees ``NODEROLE_ROOT`` in its environment and must write only under it.

    Inputs are data too: a :class:`noderole.RehearsalFile` is a file a boot would
    find (texts several plugins give for one path are joined), a ``RehearsalSetting`` one key of
    the rehearsal's ``config.toml`` (merged per table and key; plugins disagreeing is an error
    naming both), a ``FreePort`` a setting the rehearsal fills, once, with a free port. The path
    of a stand-in or an input file is an absolute node path whose ``..`` never climbs above
    ``/``: anything else is a :class:`noderole.DefinitionError` naming the record (exit 5).

    Example::

        import noderole

        STANDIN = '''#!/usr/bin/env python3
        import http.server, sys
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
        port = int(sys.argv[-1].rsplit(":", 1)[1])  # --web.listen-address=127.0.0.1:PORT
        http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
        '''

        @noderole.hookimpl
        def noderole_standins(node):
            return [
                noderole.StandIn(path="/usr/local/bin/node_exporter", content=STANDIN,
                                 description="answers /metrics on its port"),
                noderole.RehearsalFile(path="/etc/node-exporter.env", content="COLLECTORS=cpu\\n"),
                noderole.FreePort(table="node-exporter", key="port"),
            ]
    """


@hookspec
def noderole_resolve_role(node: NodeContext) -> str | None:
    """Say which role this node takes, from its first-boot inputs; None when you cannot tell.

    Used when ``apply`` is given no role and none is recorded yet (the first boot): an explicit
    role comes first, then the role the last apply recorded in ``/var/lib/noderole/role``, then
    this hook. Every plugin is asked; the first answer that is not None wins, and two plugins
    answering differently is an error naming both, so the role never depends on load order. The
    answer is then recorded before any service starts, so later boots apply the same role
    whatever the inputs say by then. Raise :class:`noderole.errors.EnvFileError` (or another
    :class:`noderole.errors.NoderoleError`) for an input that names no valid role: ``apply``
    then exits with that error's code, and nothing is written or started. ``node.role`` is None
    during this call.

    Example::

        import noderole

        @noderole.hookimpl
        def noderole_resolve_role(node):
            env = node.read_env("/etc/my-image/role.env")
            return env.values.get("NODE_ROLE") or None
    """
