"""Where noderole keeps its own files on a node (node paths: resolve them through a NodeRoot).

A leaf module: :mod:`noderole.state` writes these files and :mod:`noderole.manifest` records and
removes them, and neither needs the other to know where they are.
"""

from __future__ import annotations

__all__ = [
    "APPLIED_FILE",
    "LAST_APPLY_FILE",
    "LOCK_FILE",
    "ROLE_FILE",
    "RUN_DIR",
    "STATE_DIR",
]

RUN_DIR = "/run/noderole"
"""Runtime files: the node lock, the native supervisor's socket, pid and state (gone at reboot)."""
STATE_DIR = "/var/lib/noderole"
"""What survives a reboot: the recorded role, plan, applied fingerprints, the manifest."""
ROLE_FILE = f"{STATE_DIR}/role"
"""The recorded role (``apply`` and ``enable`` write it; a boot without a role applies it)."""
APPLIED_FILE = f"{STATE_DIR}/applied.json"
"""Each running service's fingerprint as last applied (what makes a re-apply a no-op)."""
LOCK_FILE = f"{RUN_DIR}/apply.lock"
"""The node lock: one apply, renew, stop or reset at a time."""
LAST_APPLY_FILE = f"{STATE_DIR}/last-apply.json"
"""The outcome of the last apply (``status`` and the fleet metrics read it)."""
