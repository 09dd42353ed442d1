"""A Prometheus node exporter on every node: server, server-join and agent.

The exporter's textfile collector reads ``*.prom`` files from a directory that, on these nodes,
lives on a data volume mounted late in boot. So the service waits (bounded) for that directory,
writes a metric saying noderole manages the node, then starts the exporter; it is ready when
``/metrics`` answers.
"""

from __future__ import annotations

import noderole

TABLE = "node-exporter"
SERVICE = "node-exporter"
ROLES = ["server", "server-join", "agent"]


# --8<-- [start:settings]
@noderole.hookimpl
def noderole_settings() -> noderole.SettingsTable:
    """The [node-exporter] table of /etc/noderole/config.toml."""
    return noderole.SettingsTable(
        table=TABLE,
        description="The Prometheus node exporter every node runs.",
        settings=[
            noderole.Setting(
                name="binary",
                type=str,
                default="/usr/local/bin/node_exporter",
                description="The node_exporter executable.",
            ),
            noderole.Setting(
                name="listen_address",
                type=str,
                default="127.0.0.1",
                description="Address /metrics is served on.",
            ),
            noderole.Setting(
                name="port", type=int, default=9100, description="Port /metrics is served on."
            ),
            noderole.Setting(
                name="textfile_directory",
                type=str,
                default="/var/lib/node-exporter/textfile",
                description="Directory of *.prom files for the textfile collector.",
            ),
            noderole.Setting(
                name="textfile_timeout",
                type=float,
                default=60.0,
                description="Seconds to wait for the textfile directory before failing.",
            ),
            noderole.Setting(
                name="ready_timeout",
                type=float,
                default=30.0,
                description="Seconds /metrics may take to answer after a start.",
            ),
        ],
    )


# --8<-- [end:settings]


# --8<-- [start:services]
@noderole.hookimpl
def noderole_services(node: noderole.NodeContext) -> noderole.Service:
    """One service, in every role."""
    cfg = node.settings(TABLE)
    address = f"{cfg['listen_address']}:{cfg['port']}"
    textfiles = cfg["textfile_directory"]
    pre_start: list[noderole.Step] = []
    # A bad setting fails this service only, with a message, at start: not the whole plan.
    if not 1 <= cfg["port"] <= 65535:
        pre_start.append(noderole.Fail(message=f"[{TABLE}] port {cfg['port']} is not 1-65535"))
    pre_start += [
        noderole.WaitForPaths(
            paths=[textfiles],
            timeout=cfg["textfile_timeout"],
            message="textfile directory {missing} not mounted after {elapsed}s",
        ),
        noderole.WriteFile(
            path=f"{textfiles}/noderole.prom",
            content=f'noderole_info{{version="{noderole.__version__}"}} 1\n',
        ),
    ]
    return noderole.Service(
        name=SERVICE,
        description="Prometheus node exporter",
        roles=ROLES,
        need=["net"],
        command=[
            cfg["binary"],
            f"--web.listen-address={address}",
            f"--collector.textfile.directory={textfiles}",
        ],
        pidfile="/run/node-exporter.pid",
        output_log="/var/log/node-exporter.log",
        error_log="/var/log/node-exporter.log",
        supervision=noderole.Supervision(respawn_delay=2, respawn_max=0),
        pre_start=pre_start,
        readiness=noderole.WaitForHttp(
            url=f"http://{address}/metrics", timeout=cfg["ready_timeout"]
        ),
    )


# --8<-- [end:services]


# --8<-- [start:standins]
STANDIN = """\
#!/usr/bin/env python3
# Stand-in for node_exporter in `noderole rehearse`: answers /metrics on the configured address.
import http.server, sys

address = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--web.listen-address="))
host, port = address.rsplit(":", 1)

class Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/metrics" else 404)
        self.end_headers()
        self.wfile.write(b"node_exporter_build_info 1\\n")

    def log_message(self, *args):
        pass

http.server.HTTPServer((host, int(port)), Metrics).serve_forever()
"""


@noderole.hookimpl
def noderole_standins(node: noderole.NodeContext) -> list[noderole.StandIn]:
    """A stand-in exporter for rehearsals, and the textfile directory a real node mounts."""
    cfg = node.settings(TABLE)
    return [
        noderole.StandIn(
            path=cfg["binary"],
            content=STANDIN,
            description="answers /metrics on the configured address",
        ),
        # An input file, not a program: writing it creates the directory the service waits for.
        noderole.StandIn(
            path=f"{cfg['textfile_directory']}/rehearsal.prom",
            content="# written by noderole rehearse\n",
            mode=0o644,
            description="the textfile directory, as if it had been mounted",
        ),
    ]


# --8<-- [end:standins]
