"""Whether paths are there: what a path wait and a path readiness check both mean by it.

:class:`~noderole.supervisor.probes.PathProbe` looks through :func:`lacking`, and so does a
pre-start wait for paths at its first look (:func:`noderole.waits.run_wait`): a re-apply finds
every awaited path there and answers without importing the probes and their record classes.

Standard library only (the daemon imports it through the probes).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing is not imported at run time: the daemon stays small
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["lacking"]


def lacking(
    paths: Sequence[str], labels: Sequence[str], *, require: str, readable: bool
) -> tuple[list[str], list[str]]:
    """What ``paths`` (on this machine) lack, as the labels of the missing or unreadable ones
    (``/x (not readable)``) and the paths whose appearance inotify can report; both empty when
    the condition holds: every path there (``require="all"``) or one (``"any"``), and readable
    by this process (``os.access(R_OK)``, as ``[ -r ]``) if ``readable``."""
    missing: list[str] = []
    watch: list[str] = []
    for local, label in zip(paths, labels, strict=True):
        if not os.path.exists(local):
            reason = ""
        elif readable and not os.access(local, os.R_OK):
            reason = "not readable"
        else:
            if require == "any":
                return [], []
            continue
        missing.append(f"{label} ({reason})" if reason else label)
        watch.append(local)
    return missing, watch
