"""What this test process may do as root: its effective capabilities (capabilities(7))."""

from __future__ import annotations

__all__ = ["CAP_SYS_RESOURCE", "capable"]

CAP_SYS_RESOURCE = 24
"""The capability a process needs to raise a hard resource limit. A sandboxed runner's root may
lack it (an unprivileged container, gVisor): there, nothing may raise a limit above its own."""


def capable(capability: int) -> bool:
    """True when this process has ``capability`` in its effective set."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("CapEff:"))
    return bool(int(line.split()[1], 16) >> capability & 1)
