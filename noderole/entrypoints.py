"""Entry-point discovery for the ``noderole`` group, cached by what is installed.

``importlib.metadata.entry_points()`` reads every installed distribution's metadata on every call
(tens of milliseconds at boot, more under load, plus the import of ``importlib.metadata`` itself).
The answer changes only when a distribution is installed, removed or rewritten, so it is stored
with a key made of what decides it: ``sys.path``, each directory's listing of ``*.dist-info`` and
``*.egg-info`` entries, and the inode, size and modification time of each ``entry_points.txt``
(a zip on the path by its own inode, size and time), stored as one string. Computing the key
costs one ``stat`` per distribution and, for each directory on the path, a listing; a different
key means a full scan and a new cache.

The listings are most of that cost (the standard library's directory alone holds some two
hundred entries), so each entry also stores the listings it was made from, with each directory's
inode and modification time taken before it was listed. A directory whose inode and time are
unchanged has the same entries (creating, removing or renaming one sets its time), so its stored
listing stands in for a new one; the ``entry_points.txt`` files are still each looked at, since
rewriting one in place leaves its directory's time alone.

A file changed within the file system's timestamp granularity of the scan could keep its time, so
a key holding a time less than :data:`SETTLE_SECONDS` old is used but never stored, and a
directory whose time is that young is listed again next time (git's "racy clean" rule). The
cache is an optimisation: a cache that cannot be read or written is ignored.

Every entry point is kept, two distributions declaring one name included: which of them to load
is no choice to make here (the plugin loader refuses the pair, naming both). One distribution
found twice on the path (an editable install beside a ``.pth``, a directory reachable twice) is
one distribution: its entry points are kept once, from where the path finds it first.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from collections.abc import Sequence
from typing import Any

from noderole.supervisor import _jsontext as jsontext

__all__ = ["CACHE_FILE", "SETTLE_SECONDS", "FoundEntryPoint", "discover", "load_target"]

CACHE_FILE = "/var/cache/noderole/entry-points.json"
"""Where the cache lives, as a node path (under ``--root``)."""
SETTLE_SECONDS = 2.0
"""A key with a time younger than this is not stored: it might change without its time changing."""
_FORMAT = 5
"""5: every distribution's entry points (4 kept the first of a name alone), with the path."""
_KEEP = 8
"""Keys kept: ``noderole`` and ``python -m noderole`` (from any directory) see different paths."""


class FoundEntryPoint:
    """One entry point of the group, as read from its distribution's ``entry_points.txt``."""

    __slots__ = ("distribution", "name", "path", "value", "version")

    def __init__(
        self,
        name: str,
        value: str,
        distribution: str | None,
        version: str | None,
        path: str | None = None,
    ):
        self.name = name
        """Entry-point name (the plugin's name)."""
        self.value = value
        """``module`` or ``module:attribute``."""
        self.distribution = distribution
        """The distribution that declared it."""
        self.version = version
        """That distribution's version."""
        self.path = path
        """Where that distribution's metadata is (its ``.dist-info``), when known."""

    def load(self) -> Any:
        """Import the module and return the object named by :attr:`value`."""
        return load_target(self.value)

    def as_list(self) -> list[str | None]:
        return [self.name, self.value, self.distribution, self.version, self.path]

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


def _stat(entry: str) -> os.stat_result | None:
    try:
        return os.stat(entry or ".")
    except OSError:
        return None


def _directories(stats: Sequence[os.stat_result | None]) -> str:
    """Each path entry's directory identity (inode and modification time), as one string."""
    return repr(
        [
            [st.st_ino, st.st_mtime_ns] if st is not None and stat.S_ISDIR(st.st_mode) else None
            for st in stats
        ]
    )


def _listing(entry: str) -> list[str] | None:
    """The distributions' metadata directories in ``entry``, sorted; None when unreadable."""
    try:
        return sorted(
            n for n in os.listdir(entry or ".") if n.endswith((".dist-info", ".egg-info"))
        )
    except OSError:
        return None


def _key(
    paths: Sequence[str],
    stats: Sequence[os.stat_result | None],
    now: float,
    listings: Sequence[list[str] | None] | None = None,
) -> tuple[list[Any], bool, list[list[str] | None]]:
    """The installation key for ``paths`` (``stats``: each entry's ``os.stat``, taken before
    any listing), whether it is settled (safe to store), and the listing of each directory.
    ``listings`` gives the directories' listings (no directory is listed again)."""
    key: list[Any] = [sys.version, list(paths)]
    settled = True
    listed: list[list[str] | None] = []
    for index, (entry, st) in enumerate(zip(paths, stats, strict=True)):
        if st is None:
            key.append(None)
            listed.append(None)
            continue
        if not stat.S_ISDIR(st.st_mode):  # a zip or egg file on the path
            key.append([st.st_ino, st.st_size, st.st_mtime_ns])
            listed.append(None)
            settled = settled and now - st.st_mtime_ns / 1e9 >= SETTLE_SECONDS
            continue
        names = listings[index] if listings is not None else _listing(entry)
        listed.append(names)
        if names is None:
            key.append(None)
            continue
        listing: list[Any] = []
        for name in names:
            try:
                found = os.stat(os.path.join(entry or ".", name, "entry_points.txt"))
            except OSError:
                listing.append([name])
                continue
            listing.append([name, found.st_ino, found.st_size, found.st_mtime_ns])
            settled = settled and now - found.st_mtime_ns / 1e9 >= SETTLE_SECONDS
        key.append(listing)
    return key, settled, listed


def _settled_directories(stats: Sequence[os.stat_result | None], now: float) -> bool:
    """Whether every directory's time is old enough for its listing to be trusted later."""
    return all(
        now - st.st_mtime_ns / 1e9 >= SETTLE_SECONDS
        for st in stats
        if st is not None and stat.S_ISDIR(st.st_mode)
    )


def _scan(group: str) -> list[FoundEntryPoint]:
    """Every entry point of ``group``, sorted by name (stable: the path's order within a name).

    Two distributions declaring one name both stay (the loader refuses them); one distribution
    met twice on the path is kept once, the first met.
    """
    import importlib.metadata

    seen: set[tuple[str, str | None]] = set()
    found: list[FoundEntryPoint] = []
    for ep in importlib.metadata.entry_points(group=group):
        dist = ep.dist
        identity = _identity(dist.name) if dist is not None and dist.name else None
        if (ep.name, identity) in seen:
            continue
        seen.add((ep.name, identity))
        path = getattr(dist, "_path", None)  # a PathDistribution's metadata directory
        found.append(
            FoundEntryPoint(
                ep.name,
                ep.value,
                dist.name if dist else None,
                dist.version if dist else None,
                None if path is None else os.fspath(path),
            )
        )
    found.sort(key=lambda item: item.name)
    return found


def _identity(distribution: str) -> str:
    """A distribution's name as the packaging rules compare it (``Time_Keeper`` is
    ``time-keeper``): two metadata directories of one name are one distribution."""
    import re

    return re.sub(r"[-_.]+", "-", distribution).lower()


def _read(cache: str) -> list[dict[str, Any]]:
    from noderole.reading import read_json

    try:
        document = read_json(cache)  # not through pathlib: `plan` imports none
    except (OSError, ValueError):  # no cache, or a damaged one: discovered again
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
        data = jsontext.dumps({"format": _FORMAT, "entries": entries[:_KEEP]}).encode()
        write_atomic(cache, data, mode=0o644)
    except OSError:
        pass  # a read-only /var/cache, an unprivileged user: scan again next time


def discover(group: str, cache: str | os.PathLike[str] | None) -> list[FoundEntryPoint]:
    """The entry points of ``group`` sorted by name, from the file ``cache`` when the key still
    matches."""
    cache = None if cache is None else os.fspath(cache)
    paths = list(sys.path)
    now = time.time()
    stats = [_stat(entry) for entry in paths]
    directories = _directories(stats)
    entries = _read(cache) if cache is not None else []
    # A stored entry made from these very directories lends its listings: none is listed again.
    lent = next(
        (
            listings
            for e in entries
            if e.get("directories") == directories and (listings := _listings(e, paths)) is not None
        ),
        None,
    )
    parts, settled, listed = _key(paths, stats, now, lent)
    # Stored as one string: the key lists every installed distribution, and reading back every
    # stored key as nested lists cost more than the rest of the lookup.
    key = repr(parts)
    mine = next((e for e in entries if e.get("key") == key), None)
    if mine is not None:
        stored = _stored(mine["groups"].get(group))
        if stored is not None:
            return stored
    found = _scan(group)
    if cache is not None and settled:
        groups = dict(mine["groups"]) if mine is not None else {}
        groups[group] = [item.as_list() for item in found]
        others = [e for e in entries if e is not mine]
        entry: dict[str, Any] = {"key": key, "groups": groups}
        if _settled_directories(stats, now):
            entry["directories"] = directories
            entry["listings"] = listed
        _write(cache, [entry, *others])
    return found


def _stored(items: object) -> list[FoundEntryPoint] | None:
    """A stored group's entry points, when each is a name and a value (strings), a distribution
    and a version (strings or null) and, optionally, a path (a string or null); None (scan
    again) when any is not: a name of another type failed every command that loads plugins, far
    from here."""
    if not isinstance(items, list):
        return None
    found = []
    for item in items:
        if not (
            isinstance(item, list)
            and len(item) in (4, 5)
            and isinstance(item[0], str)
            and isinstance(item[1], str)
            and all(part is None or isinstance(part, str) for part in item[2:])
        ):
            return None
        found.append(FoundEntryPoint(*item))
    return found


def _listings(entry: dict[str, Any], paths: Sequence[str]) -> list[list[str] | None] | None:
    """The listings a stored entry keeps, one per path entry, when well formed; else None."""
    listings = entry.get("listings")
    if not isinstance(listings, list) or len(listings) != len(paths):
        return None
    for names in listings:
        if names is not None and not (
            isinstance(names, list) and all(isinstance(n, str) for n in names)
        ):
            return None
    return listings
