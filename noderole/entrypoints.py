"""Entry-point discovery for the ``noderole`` group, cached by what is installed.

``importlib.metadata.entry_points()`` reads every installed distribution's metadata on every call
(tens of milliseconds at boot, more under load, plus the import of ``importlib.metadata`` itself).
The answer changes only when a distribution is installed, removed or rewritten, so it is stored
with a key made of what decides it: ``sys.path``, each directory's listing of ``*.dist-info`` and
``*.egg-info`` entries, and the inode, size and modification time of each ``entry_points.txt``
(a zip on the path by its own inode, size and time), stored as one string. Computing the key
costs a directory listing per path entry and one ``stat`` per distribution; a different key means
a full scan and a new cache.

A file changed within the file system's timestamp granularity of the scan could keep its time, so
a key holding a time less than :data:`SETTLE_SECONDS` old is used but never stored (git's "racy
clean" rule). The cache is an optimisation: a cache that cannot be read or written is ignored.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["CACHE_FILE", "SETTLE_SECONDS", "FoundEntryPoint", "discover", "load_target"]

CACHE_FILE = "/var/cache/noderole/entry-points.json"
"""Where the cache lives, as a node path (under ``--root``)."""
SETTLE_SECONDS = 2.0
"""A key with a time younger than this is not stored: it might change without its time changing."""
_FORMAT = 3
_KEEP = 8
"""Keys kept: ``noderole`` and ``python -m noderole`` (from any directory) see different paths."""


class FoundEntryPoint:
    """One entry point of the group, as read from its distribution's ``entry_points.txt``."""

    __slots__ = ("distribution", "name", "value", "version")

    def __init__(self, name: str, value: str, distribution: str | None, version: str | None):
        self.name = name
        """Entry-point name (the plugin's name)."""
        self.value = value
        """``module`` or ``module:attribute``."""
        self.distribution = distribution
        """The distribution that declared it."""
        self.version = version
        """That distribution's version."""

    def load(self) -> Any:
        """Import the module and return the object named by :attr:`value`."""
        return load_target(self.value)

    def as_list(self) -> list[str | None]:
        return [self.name, self.value, self.distribution, self.version]

    def __repr__(self) -> str:
        return f"FoundEntryPoint({self.name!r}, {self.value!r}, {self.distribution!r})"


def load_target(value: str) -> Any:
    """The object ``module[:attr.attr]`` names (an entry point's value; extras are ignored)."""
    import importlib

    target = value.split("[", 1)[0].strip()
    module_name, _, attribute = target.partition(":")
    obj = importlib.import_module(module_name.strip())
    for part in filter(None, attribute.strip().split(".")):
        obj = getattr(obj, part)
    return obj


def _key(paths: Sequence[str], now: float) -> tuple[list[Any], bool]:
    """The installation key for ``paths``, and whether it is settled (safe to store)."""
    key: list[Any] = [sys.version, list(paths)]
    settled = True
    for entry in paths:
        try:
            st = os.stat(entry or ".")
        except OSError:
            key.append(None)
            continue
        if not os.path.isdir(entry or "."):  # a zip or egg file on the path
            key.append([st.st_ino, st.st_size, st.st_mtime_ns])
            settled = settled and now - st.st_mtime_ns / 1e9 >= SETTLE_SECONDS
            continue
        try:
            names = sorted(
                n for n in os.listdir(entry or ".") if n.endswith((".dist-info", ".egg-info"))
            )
        except OSError:
            key.append(None)
            continue
        listing: list[Any] = []
        for name in names:
            try:
                st = os.stat(os.path.join(entry or ".", name, "entry_points.txt"))
            except OSError:
                listing.append([name])
                continue
            listing.append([name, st.st_ino, st.st_size, st.st_mtime_ns])
            settled = settled and now - st.st_mtime_ns / 1e9 >= SETTLE_SECONDS
        key.append(listing)
    return key, settled


def _scan(group: str) -> list[FoundEntryPoint]:
    """Every entry point of ``group``, first distribution on the path winning a name, by name."""
    import importlib.metadata

    seen: dict[str, FoundEntryPoint] = {}
    for ep in importlib.metadata.entry_points(group=group):
        if ep.name in seen:
            continue
        dist = ep.dist
        seen[ep.name] = FoundEntryPoint(
            ep.name, ep.value, dist.name if dist else None, dist.version if dist else None
        )
    return [seen[name] for name in sorted(seen)]


def _read(cache: str) -> list[dict[str, Any]]:
    try:
        with open(cache, encoding="utf-8") as file:  # not through pathlib: `plan` imports none
            document = json.loads(file.read())
    except (OSError, ValueError):
        return []
    if not isinstance(document, dict) or document.get("format") != _FORMAT:
        return []
    entries = document.get("entries")
    if not isinstance(entries, list):
        return []
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("groups"), dict)]


def _write(cache: str, entries: list[dict[str, Any]]) -> None:
    from noderole.atomic import write_atomic

    try:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        data = json.dumps({"format": _FORMAT, "entries": entries[:_KEEP]}).encode()
        write_atomic(cache, data, mode=0o644)
    except OSError:
        pass  # a read-only /var/cache, an unprivileged user: scan again next time


def discover(group: str, cache: str | os.PathLike[str] | None) -> list[FoundEntryPoint]:
    """The entry points of ``group`` sorted by name, from the file ``cache`` when the key still
    matches."""
    cache = None if cache is None else os.fspath(cache)
    paths = list(sys.path)
    parts, settled = _key(paths, time.time())
    # Stored as one string: the key lists every installed distribution, and reading back every
    # stored key as nested lists cost more than the rest of the lookup.
    key = repr(parts)
    entries = _read(cache) if cache is not None else []
    mine = next((e for e in entries if e.get("key") == key), None)
    if mine is not None:
        stored = mine["groups"].get(group)
        if isinstance(stored, list):
            try:
                return [FoundEntryPoint(*item) for item in stored]
            except TypeError:
                pass  # a damaged entry: scan
    found = _scan(group)
    if cache is not None and settled:
        groups = dict(mine["groups"]) if mine is not None else {}
        groups[group] = [item.as_list() for item in found]
        others = [e for e in entries if e is not mine]
        _write(cache, [{"key": key, "groups": groups}, *others])
    return found
