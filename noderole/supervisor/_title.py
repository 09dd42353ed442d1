"""The supervisor's name in ``ps``: ``noderole-supervisor --root ROOT --run-dir RUN_DIR``.

The daemon is a Python interpreter started as ``python3 -I -S -c SOURCE ...``, which ``ps`` would
show in full (argv[0] must stay the interpreter's path: Python finds its standard library from
it). Once running, the daemon rewrites its own argument
area (``/proc/self/mem`` between ``arg_start`` and ``arg_end`` of ``/proc/self/stat``, as
``setproctitle`` does with a pointer) with a short title padded by NUL bytes; the kernel then
reports that as ``/proc/PID/cmdline``. The watchdog, a fork of the daemon, does the same with
its own name. Standard library only; if the kernel refuses, the original command line stays.
"""

from __future__ import annotations

import os

__all__ = ["NAME", "root_of", "set_title", "title_words"]

NAME = "noderole-supervisor"
"""The daemon's name in ``ps`` and in its log."""

_RUN_DIR_TAIL = "/run/noderole"


def root_of(run_dir: str) -> str:
    """The node root a run directory belongs to (``ROOT/run/noderole`` -> ``ROOT``)."""
    if run_dir.endswith(_RUN_DIR_TAIL):
        return run_dir[: -len(_RUN_DIR_TAIL)] or "/"
    return run_dir


def title_words(name: str, run_dir: str) -> list[str]:
    """The words of the title (``noderole-supervisor --root / --run-dir /run/noderole``)."""
    root = root_of(run_dir)
    if root == run_dir:
        return [name, "--run-dir", run_dir]
    return [name, "--root", root, "--run-dir", run_dir]


def set_title(words: list[str]) -> bool:
    """Replace this process's command line with ``words``; False if it does not fit or fails."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        arg_start, arg_end = int(fields[45]), int(fields[46])  # fields 48 and 49 of stat(5)
        title = b"\0".join(os.fsencode(w) for w in words) + b"\0"
        size = arg_end - arg_start
        if len(title) > size:
            return False
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(arg_start)
            mem.write(title.ljust(size, b"\0"))
        return True
    except (OSError, IndexError, ValueError):
        return False
