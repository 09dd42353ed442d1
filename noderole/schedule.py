"""When ``noderole renew`` runs without a reboot: the schedule of each backend.

- native backend: the built-in plugin adds :func:`renew_service`, ``noderole-renew``, a service
  the supervisor keeps running like any other: a ``/bin/sh`` loop that runs ``noderole renew``
  every ``renew_interval`` seconds, first after a per-node offset within ``renew_jitter``. The
  supervisor stays a plain supervisor (no timers of its own), the loop shows in ``status``, and
  ``sh`` + ``sleep`` cost about 1 MB where a resident Python process would cost 20.
- OpenRC and systemd: :func:`periodic_files`, a job the distribution runs
  (``/etc/periodic/daily/noderole-renew``) or a ``noderole-renew.timer``; ``render`` writes them
  and ``enable`` installs them.

The offset is derived from the node's machine id, so it is stable (a re-apply does not restart
the loop) yet differs between nodes: servers whose certificates were minted together do not all
restart konnectivity-server, dropping every agent's tunnels, in the same minute.

Internal module (the built-in plugin, ``render`` and ``enable`` use it); what renew does is
:mod:`noderole.renewal`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from noderole.records import Service
from noderole.root import NodeRoot

if TYPE_CHECKING:
    from noderole.context import NodeContext
    from noderole.render import Rendered

__all__ = [
    "OPENRC_PERIODIC",
    "RENEW_LOG",
    "RENEW_SERVICE",
    "SYSTEMD_SERVICE",
    "SYSTEMD_TIMER",
    "jitter_offset",
    "periodic_files",
    "renew_service",
]

RENEW_SERVICE = "noderole-renew"
"""The built-in service that runs ``noderole renew`` on an interval (native backend)."""
RENEW_LOG = "/var/log/noderole-renew.log"
OPENRC_PERIODIC = "/etc/periodic/daily/noderole-renew"
"""Alpine's crond runs ``run-parts /etc/periodic/daily`` once a day."""
SYSTEMD_SERVICE = "/etc/systemd/system/noderole-renew.service"
SYSTEMD_TIMER = "/etc/systemd/system/noderole-renew.timer"


def jitter_offset(root: NodeRoot, jitter: float) -> int:
    """Whole seconds in ``[0, jitter)``, the same on every call on one node, different between
    nodes (from ``/etc/machine-id``, else the host name)."""
    if jitter < 1:
        return 0
    import socket

    from noderole.reading import read_regular
    from noderole.supervisor import sha256  # here: `plan` loads this module, never needs a digest

    try:
        # A regular file of text, or no seed: a FIFO there must not hang `enable`, nor bytes
        # that are not UTF-8 end it in a traceback.
        seed = read_regular(root.local("/etc/machine-id"), limit=4096).decode().strip()
    except (OSError, ValueError):
        seed = ""
    seed = seed or socket.gethostname()
    number = int.from_bytes(sha256(seed.encode()).digest()[:8], "big")
    return number % int(jitter)


def _native(node: NodeContext, backend: str) -> bool:
    """Whether the services of this node run under the native supervisor.

    ``auto`` counts only on a real root: under ``--root`` (rehearsals, image builds) the loop
    would run against a scratch directory; set ``backend = "native"`` to have it there.
    """
    if backend == "native":
        return True
    if backend != "auto" or not node.root.is_real:
        return False
    from noderole.backends.detect import detect_init

    return detect_init(node.root) == "native"


def renew_service(node: NodeContext, settings: Any) -> Service | None:
    """The ``noderole-renew`` service for ``node.role`` (None when renewal is off, no role is in
    question, or the node's backend is not native: OpenRC and systemd run
    :func:`periodic_files`)."""
    interval = float(settings["renew_interval"])
    if interval <= 0 or node.role is None or not _native(node, str(settings["backend"])):
        return None
    offset = jitter_offset(node.root, float(settings["renew_jitter"]))
    loop = 'sleep "$1"; while :; do "$3" renew --backend native; sleep "$2"; done'
    return Service(
        name=RENEW_SERVICE,
        description="Renew serving certificates while the node runs (noderole renew)",
        roles=[node.role],
        command=[
            "/bin/sh",
            "-c",
            loop,
            RENEW_SERVICE,
            str(offset),
            f"{interval:g}",
            str(settings["noderole_path"]),
        ],
        output_log=RENEW_LOG,
        error_log=RENEW_LOG,
    )


DAILY = 86400.0
"""The default ``renew_interval``: the systemd timer is then calendar-based (``OnCalendar=daily``,
``Persistent=true``: a node that was off at midnight renews when it boots)."""


def _span(seconds: float) -> str:
    """A systemd time span in whole milliseconds, never 0 (which would turn a setting off)."""
    return f"{max(1, round(seconds * 1000))}ms"


def _timer_schedule(interval: float, jitter: float) -> str:
    """The ``[Timer]`` lines for ``renew_interval`` and ``renew_jitter``."""
    if interval == DAILY:
        return f"OnCalendar=daily\nRandomizedDelaySec={int(jitter)}\nPersistent=true\n"
    # Any other interval counts from the timer's activation (boot, or enable's start), then from
    # each run's start. The accuracy follows the interval (systemd's default, a minute, would
    # stretch a short one); FixedRandomDelay keeps each node's offset stable between runs.
    accuracy = min(60.0, interval / 10)
    return (
        f"OnActiveSec={_span(interval)}\nOnUnitActiveSec={_span(interval)}\n"
        f"AccuracySec={_span(accuracy)}\nRandomizedDelaySec={int(jitter)}\n"
        "FixedRandomDelay=true\n"
    )


def periodic_files(
    backend: str,
    *,
    noderole_path: str,
    jitter: float = 3600.0,
    interval: float = DAILY,
    root: NodeRoot | None = None,
) -> list[Rendered]:
    """The files that run ``noderole renew`` periodically under ``backend`` (``openrc``: the
    daily job Alpine's crond runs; ``systemd``: ``noderole-renew.service`` and ``.timer``, every
    ``interval`` seconds, enabled through ``timers.target``). ``render`` writes them; ``enable``
    installs them. Empty for ``native`` (its schedule is the ``noderole-renew`` service) and when
    ``interval`` is 0 (renewal off)."""
    from noderole.errors import UsageError
    from noderole.render import RenderedFile, RenderedLink
    from noderole.render._quote import sh_quote, systemd_command_line

    if backend == "native" or (interval <= 0 and backend in ("openrc", "systemd")):
        return []
    if backend == "openrc":
        offset = jitter_offset(root or NodeRoot("/"), jitter)
        # In the background: run-parts runs the daily jobs one after another, and the node's
        # offset (up to the jitter) must not hold the others back.
        script = f"""\
#!/bin/sh
# Written by noderole (noderole reset removes it). Re-mints serving certificates inside their
# renewal window and restarts only the services that read them.
( sleep {offset}; exec {sh_quote(noderole_path)} renew --backend openrc ) \\
    >>{RENEW_LOG} 2>&1 </dev/null &
"""
        return [RenderedFile(path=OPENRC_PERIODIC, content=script, mode=0o755)]
    if backend == "systemd":
        unit = f"""\
# Written by noderole (noderole reset removes it); started by noderole-renew.timer.
[Unit]
Description=Renew noderole's serving certificates (noderole renew)
After=network-online.target

[Service]
Type=oneshot
ExecStart={systemd_command_line([noderole_path, "renew", "--backend", "systemd"])}
"""
        every = "daily" if interval == DAILY else f"every {interval:g} s"
        timer = f"""\
# Written by noderole (noderole reset removes it).
[Unit]
Description=Renew noderole's serving certificates {every}

[Timer]
{_timer_schedule(interval, jitter)}
[Install]
WantedBy=timers.target
"""
        return [
            RenderedFile(path=SYSTEMD_SERVICE, content=unit, mode=0o644),
            RenderedFile(path=SYSTEMD_TIMER, content=timer, mode=0o644),
            RenderedLink(
                path="/etc/systemd/system/timers.target.wants/noderole-renew.timer",
                target="../noderole-renew.timer",
            ),
        ]
    raise UsageError(f"no periodic renewal for backend {backend!r}: use openrc or systemd")
