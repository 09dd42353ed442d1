"""noderole's own plugin: the ``noderole`` settings table and the ``net`` and ``cgroups`` providers.

``net`` and ``cgroups`` are milestones (services without a process) that belong to no role: they
join a plan only when a service needs them, like OpenRC's ``net`` virtual and ``cgroups`` service.
They look at the real machine (``/sys``, ``/proc``), never under ``--root``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from noderole.context import NodeContext
from noderole.hookspecs import hookimpl
from noderole.records import Call, Service, Setting, SettingsTable
from noderole.schedule import renew_service

if TYPE_CHECKING:
    from noderole.stepcontext import StepContext

__all__ = ["cgroups_mounted", "network_up"]

TABLE = "noderole"

_IFF_UP = 0x1
_IFF_LOOPBACK = 0x8
_SIOCGIFADDR = 0x8915


@hookimpl
def noderole_settings() -> SettingsTable:
    return SettingsTable(
        table=TABLE,
        description="noderole itself: built-in providers, backend choice, boot-time limits.",
        settings=[
            Setting(
                name="net_check",
                type=bool,
                default=True,
                description=(
                    "Check that a non-loopback interface is up with an address before "
                    "starting services that need `net`. Turn off in containers."
                ),
            ),
            Setting(
                name="net_timeout",
                type=float,
                min=0.1,
                max=86400,
                default=120.0,
                description="Seconds to wait for the network before `net` fails.",
            ),
            Setting(
                name="cgroups_timeout",
                type=float,
                min=0.1,
                max=86400,
                default=30.0,
                description="Seconds to wait for a cgroup filesystem before `cgroups` fails.",
            ),
            Setting(
                name="backend",
                type=str,
                default="auto",
                choices=["auto", "native", "openrc", "systemd"],
                description=(
                    "Backend for `apply`: auto, native, openrc or systemd. auto picks systemd "
                    "when /run/systemd/system exists, OpenRC when /run/openrc exists, else native "
                    "(always native under --root)."
                ),
            ),
            Setting(
                name="readiness_timeout",
                type=float,
                min=0.1,
                max=86400,
                default=60.0,
                description=(
                    "Seconds `apply` waits for a service's readiness when a dependent needs it."
                ),
            ),
            Setting(
                name="progress_interval",
                type=float,
                min=0,
                max=86400,
                default=10.0,
                description=(
                    "Seconds between the `still waiting for ...` lines `apply` prints during a "
                    "long wait (0: only the first line; at least 1 otherwise)."
                ),
            ),
            Setting(
                name="noderole_path",
                type=str,
                default="/usr/local/bin/noderole",
                description=(
                    "Path of the noderole command that rendered OpenRC/systemd files call: "
                    "absolute, without spaces or quotes."
                ),
            ),
            Setting(
                name="textfile_dir",
                type=str,
                default="",
                description=(
                    "node_exporter's textfile collector directory: noderole rewrites "
                    "noderole.prom there after every apply, renew, stop and restart, and the "
                    "native supervisor after every state change it sees and, for its "
                    "heartbeat, at least once a minute (empty: off)."
                ),
            ),
            Setting(
                name="renew_interval",
                type=float,
                default=86400.0,
                min=0,
                max=31536000,
                description=(
                    "Seconds between two `noderole renew` runs: the native backend's "
                    "`noderole-renew` service and systemd's `noderole-renew.timer` (86400: "
                    "calendar-daily, catching up after downtime); OpenRC's periodic job runs "
                    "daily whatever the value; 0 turns scheduled renewal off."
                ),
            ),
            Setting(
                name="renew_jitter",
                type=float,
                default=3600.0,
                min=0,
                max=86400,
                description=(
                    "Scheduled renewal starts up to this many seconds late: a fixed offset per "
                    "node (from its machine id), so nodes do not restart services together."
                ),
            ),
            Setting(
                name="logrotate",
                type=bool,
                default=True,
                description=(
                    "Write /etc/logrotate.d/noderole, which rotates the log files of the role's "
                    "services (apply, and render for OpenRC/systemd); false writes none and "
                    "removes the one noderole wrote: for an image that ships its own."
                ),
            ),
            Setting(
                name="logrotate_keep",
                type=int,
                default=0,
                min=0,
                max=1000,
                description=(
                    "Old copies of each log /etc/logrotate.d/noderole keeps (logrotate's "
                    "`rotate`); 0: the system's default (/etc/logrotate.conf)."
                ),
            ),
            Setting(
                name="logrotate_max_megabytes",
                type=int,
                default=0,
                min=0,
                max=65536,
                description=(
                    "Rotate a log past this many MiB at logrotate's next run, before its "
                    "interval is up (`maxsize`); 0: no size bound. logrotate runs daily: run "
                    "it more often for a tighter bound."
                ),
            ),
        ],
    )


@hookimpl
def noderole_services(node: NodeContext) -> list[Service]:
    cfg = node.settings(TABLE)
    net_steps = []
    if cfg["net_check"]:
        net_steps.append(
            Call(
                function=lambda ctx: _wait_for(ctx, network_up, cfg, "net_timeout", _NET_WHAT),
                description=f"wait up to {cfg['net_timeout']:g}s for {_NET_WHAT}",
                key="net",
            )
        )
    renewal = renew_service(node, cfg)
    return [
        *([renewal] if renewal is not None else []),
        Service(
            name="net",
            description="Network: a non-loopback interface is up with an address",
            pre_start=net_steps,
        ),
        Service(
            name="cgroups",
            description="Control groups: a cgroup filesystem is mounted",
            pre_start=[
                Call(
                    function=lambda ctx: _wait_for(
                        ctx, cgroups_mounted, cfg, "cgroups_timeout", _CGROUPS_WHAT
                    ),
                    description=f"wait up to {cfg['cgroups_timeout']:g}s for {_CGROUPS_WHAT}",
                    key="cgroups",
                )
            ],
        ),
    ]


_NET_WHAT = "a non-loopback interface up with an address"
_CGROUPS_WHAT = "a cgroup filesystem mounted on /sys/fs/cgroup"


def _wait_for(
    ctx: StepContext, check: Any, cfg: Mapping[str, Any], timeout_key: str, what: str
) -> None:
    ctx.poll(check, timeout=float(cfg[timeout_key]), what=what, interval=0.1)


def network_up(
    sys_net: str | os.PathLike[str] = "/sys/class/net",
    inet6: str | os.PathLike[str] = "/proc/net/if_inet6",
) -> bool:
    """True when some interface other than loopback is up and has an IPv4 or global IPv6 address."""
    try:
        names = sorted(os.listdir(sys_net))
    except OSError:
        return False
    up = []
    for name in names:
        try:
            flags = int(_read_text(os.path.join(sys_net, name, "flags")).strip(), 16)
        except (OSError, ValueError):
            continue
        if flags & _IFF_UP and not flags & _IFF_LOOPBACK:
            up.append(name)
    if not up:
        return False
    if any(_has_ipv4(name) for name in up):
        return True
    return bool(set(up) & _global_ipv6_interfaces(inet6))


def _has_ipv4(interface: str) -> bool:
    # Imported here: plugins are loaded by every `plan`; only a start checks the network.
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, struct.pack("256s", interface.encode()[:15]))
        except OSError:  # EADDRNOTAVAIL: no IPv4 address
            return False
    return True


def _read_text(path: str | os.PathLike[str]) -> str:
    # Not through pathlib: the built-in plugin is loaded by every `plan`, which imports none.
    with open(path, encoding="utf-8") as file:
        return file.read()


def _global_ipv6_interfaces(inet6: str | os.PathLike[str]) -> set[str]:
    """Interfaces with a global-scope IPv6 address (scope 00 in /proc/net/if_inet6)."""
    found: set[str] = set()
    try:
        lines = _read_text(inet6).splitlines()
    except OSError:
        return found
    for line in lines:
        fields = line.split()
        if len(fields) == 6 and fields[3] == "00":
            found.add(fields[5])
    return found


def cgroups_mounted(mounts: str | os.PathLike[str] = "/proc/self/mounts") -> bool:
    """True when a cgroup or cgroup2 filesystem is mounted."""
    try:
        text = _read_text(mounts)
    except OSError:
        return False
    return any(line.split()[2:3] in (["cgroup"], ["cgroup2"]) for line in text.splitlines())
