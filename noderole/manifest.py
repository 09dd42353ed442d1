"""What noderole wrote on the node, so ``noderole reset`` removes exactly that and nothing else.

Every writer records the node paths it wrote (:func:`record`) in
``/var/lib/noderole/written.jsonl``: one JSON line per record (``{"path", "kind", "digest"}``),
appended under an exclusive ``flock`` with one ``write``, so concurrent writers (the engine's
per-service threads, an init system's ``noderole hook``) never interleave, and a crash can at
worst lose or tear the last lines, which are skipped (reset then keeps those files). The last
line for a path wins. A line identical to the path's current entry is not appended again, so the
file grows only when something changed (a file every run rewrites, the last apply's record, is
recorded as ``any``: a new content adds no line). Once the file holds more than 64 lines, most of
them superseded (certificates re-minted, drop-ins changed), it is rewritten with one line per
path (atomically and durably, under the same lock).

The digest is what the path held when noderole wrote it (``sha256:...`` of a file, ``link:TARGET``
of a link, ``dir`` for a directory it created, ``any`` for files a process rewrites on its own:
pidfiles, logs, the supervisor's run files). :func:`plan_reset` removes a recorded file only while
it still holds that: a file changed since is kept and named.

Kinds, and what ``reset`` does with them:

==============  ============================================================  ===============
kind            written by                                                    reset
==============  ============================================================  ===============
``rendered``    runscripts, units, links, periodic jobs (``render``, init      removed
                backends)
``boot``        noderole's boot entry and its periodic job (``enable``;        removed
                ``disable`` removes only these)
``file``        ``WriteFile`` steps (drop-ins, configuration)                 removed
``state``       the role, definition digests, render manifests, fingerprints  removed
``runtime``     pidfiles, the node lock, the native supervisor's run files    removed
``certificate`` minted certificates                                           ``--purge``
``key``         minted keys                                                   ``--purge``
``log``         services' logs                                                ``--purge``
``directory``   directories ``MakeDirectories`` created (removed when empty)  ``--purge``
==============  ============================================================  ===============
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal

from noderole import recordclass
from noderole.errors import NoderoleError
from noderole.paths import (
    APPLIED_FILE,
    LAST_APPLY_FILE,
    LOCK_FILE,
    ROLE_FILE,
    RUN_DIR,
    STATE_DIR,
)
from noderole.reading import RECORD_LIMIT, loads_json, read_regular
from noderole.root import NodeRoot
from noderole.supervisor import _jsontext as jsontext
from noderole.supervisor import sha256  # the interpreter's own: no OpenSSL loaded
from noderole.supervisor._safeopen import UnsafePathError, open_dir

if TYPE_CHECKING:
    from noderole.plan import Plan

__all__ = [
    "KINDS",
    "MANIFEST",
    "PURGE_ONLY",
    "Entry",
    "ManifestError",
    "Removal",
    "apply_reset",
    "digest_at",
    "entries",
    "forget",
    "plan_reset",
    "record",
    "record_processes",
    "remember",
]

MANIFEST = "/var/lib/noderole/written.jsonl"
"""The manifest (node path)."""

Kind = Literal[
    "rendered", "boot", "file", "state", "runtime", "certificate", "key", "log", "directory"
]
KINDS: tuple[Kind, ...] = (
    "rendered",
    "boot",
    "file",
    "state",
    "runtime",
    "certificate",
    "key",
    "log",
    "directory",
)
PURGE_ONLY = frozenset({"certificate", "key", "log", "directory"})
"""Kinds ``reset`` keeps unless ``--purge``: minted keys and what services filled."""

_ANY = "any"
_DIR = "dir"
_VOLATILE: frozenset[str] = frozenset({"runtime", "log"})
"""Kinds whose content changes without noderole (a pid, log lines): recorded as ``any``."""

_STAMPS = "/var/lib/noderole/certs"
"""Certificate stamps (:mod:`noderole.certstamp`): a cache of verified checks, all noderole's."""

_OWN_RECORDS = (
    ROLE_FILE,
    APPLIED_FILE,
    LAST_APPLY_FILE,
    f"{STATE_DIR}/plan.json",  # noderole.recorded.PLAN_FILE
    f"{STATE_DIR}/init-fingerprints.json",  # noderole.backends._initsystem.FINGERPRINTS
)
"""noderole's own records in its state directory, whatever the manifest says: an older
noderole wrote them before there was a manifest, and they are rewritten only when they change."""

_OWN_DIRECTORIES = (RUN_DIR, _STAMPS, STATE_DIR)
"""noderole's own directories: removed by a reset that leaves them empty (deepest first)."""

# The native supervisor's files in /run/noderole (noderole.supervisor keeps them there).
_SUPERVISOR_FILES = (
    "supervisor.sock",
    "supervisor.pid",
    "state.json",
    "supervisor.lock",
    "starter.lock",
    "supervisor.log",
    "supervisor.log.1",
)


@recordclass.frozen(kw_only=True)
class Entry:
    """One recorded path."""

    path: str
    """Node path."""
    kind: str
    """One of :data:`KINDS`."""
    digest: str
    """What it held when written (``sha256:...``, ``link:TARGET``, ``dir`` or ``any``)."""


@recordclass.frozen(kw_only=True)
class Removal:
    """What ``reset`` does with one recorded path."""

    path: str
    """Node path."""
    kind: str
    """The entry's kind (``own`` for noderole's own directories, removed when left empty)."""
    action: Literal["remove", "keep", "gone"]
    """``remove``; ``keep`` (see ``reason``); ``gone``: nothing is there any more."""
    reason: str = ""
    """Why it is kept (``kept: minted key (use --purge)``, ``changed since noderole wrote it``)."""


def digest_at(
    local: str | os.PathLike[str], kind: str = "file", *, any_content: bool = False
) -> str | None:
    """The digest of what is at ``local`` (a path on this machine) now (None: nothing there);
    ``any`` for a file of a volatile kind, or any file with ``any_content``."""
    try:
        info = os.lstat(local)
    except (FileNotFoundError, NotADirectoryError):  # a file where a directory on the way is
        return None
    if os.path.islink(local):
        return f"link:{os.readlink(local)}"
    if os.path.isdir(local):
        return _DIR
    if kind in _VOLATILE or any_content:
        return _ANY
    if not os.path.isfile(local) or info.st_size > 16 * 1024 * 1024:
        return _ANY
    try:
        with open(local, "rb") as file:
            return "sha256:" + sha256(file.read()).hexdigest()
    except OSError:
        return _ANY


_COMPACT_AFTER = 64
"""Lines the manifest may hold before superseded ones are dropped (when they are the most)."""


def _parse(data: bytes) -> dict[str, Entry]:
    return {
        path: Entry(path=path, kind=kind, digest=digest)
        for path, (kind, digest) in _lines(data).items()
    }


def _lines(data: bytes) -> dict[str, tuple[Any, Any]]:
    """Path -> (kind, digest) of its last line. Every apply reads the manifest (up to
    :data:`_COMPACT_AFTER` lines, about 60 on a server): one JSON array parse for all of them,
    and plain tuples, instead of a parse and a record per line."""
    lines = [line for line in data.split(b"\n") if line.strip()]
    try:
        items = loads_json(b"[" + b",".join(lines) + b"]")
    except ValueError:  # not JSON, or nested too deeply: line by line
        items = None
    if not isinstance(items, list) or len(items) != len(lines):
        items = [_item(line) for line in lines]  # a torn line (a crash), or one not an object
    found: dict[str, tuple[Any, Any]] = {}
    for item in items:
        try:
            path, kind, digest = item["path"], item["kind"], item["digest"]
        except (KeyError, TypeError):
            continue  # a torn last line after a crash, or a line from an unknown future
        # A kind or digest of another type (a disk fault, an editor) is no record: reset would
        # fail on it (an unhashable kind), or compare a digest that can match nothing.
        if (
            isinstance(path, str)
            and path.startswith("/")
            and "/../" not in f"{path}/"  # a path climbing above / is no path noderole wrote
            and "\0" not in path
            and isinstance(kind, str)
            and isinstance(digest, str)
        ):
            found[path] = (kind, digest)
    return found


def _item(line: bytes) -> Any:
    try:
        return loads_json(line)
    except ValueError:
        return None


def _open_locked(root: NodeRoot) -> int:
    """The manifest, open for appending under an exclusive flock (created if missing).

    A reset replaces the file by rename: a writer that locked the old one retries on the new.
    """
    local = root.local(MANIFEST)  # a string: an apply imports no pathlib
    os.makedirs(os.path.dirname(local), exist_ok=True)
    while True:
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        fd = os.open(local, flags, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            same = os.stat(local).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def _read_fd(fd: int) -> bytes:
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, 1 << 16, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def record(root: NodeRoot, kind: Kind, paths: Iterable[str], *, any_content: bool = False) -> None:
    """Record that noderole wrote ``paths`` (node paths), with what they hold now; with
    ``any_content``, as files noderole rewrites on every run (``reset`` removes them whatever
    they hold, and a new content adds no line).

    Paths that hold nothing are skipped. Never raises for a manifest it cannot write: recording
    must not fail the write it follows (``reset`` then keeps what it does not know).
    """
    remember(root, _found(root, kind, paths, any_content=any_content))


def _found(
    root: NodeRoot, kind: Kind, paths: Iterable[str], *, any_content: bool = False
) -> list[Entry]:
    """The entries :func:`record` would append for ``paths`` (those that hold something)."""
    found = []
    for path in dict.fromkeys(paths):
        if path.startswith("/"):
            digest = digest_at(root.local(path), kind, any_content=any_content)
            if digest is not None:
                found.append(Entry(path=path, kind=kind, digest=digest))
    return found


def remember(root: NodeRoot, found: Iterable[Entry]) -> None:
    """Append ``found`` as they are (digests given by the caller: what a path held when written,
    as an older record says), skipping entries identical to the current ones. Never raises for a
    manifest it cannot write, like :func:`record`."""
    found = [e for e in found if e.path.startswith("/")]
    if not found:
        return
    try:
        fd = _open_locked(root)
    except OSError:
        return
    try:
        data = _read_fd(fd)
        known = _lines(data)
        new = [entry for entry in found if known.get(entry.path) != (entry.kind, entry.digest)]
        if not new:
            return
        lines = data.count(b"\n") + len(new)
        known.update((entry.path, (entry.kind, entry.digest)) for entry in new)
        if lines > _COMPACT_AFTER and lines > 2 * len(known):
            # Mostly superseded lines: replace the file by one line per path, under the lock;
            # writers waiting on the old file retry on the new one (see _open_locked). Durable,
            # unlike an append: a lost manifest would make reset keep everything.
            from noderole.atomic import write_atomic

            try:
                kept = [Entry(path=p, kind=k, digest=d) for p, (k, d) in known.items()]
                write_atomic(root.local(MANIFEST), _text(kept), mode=0o600)
                return
            except OSError:
                pass  # a full disk has no room for a second copy: append, as below
        # No fsync: a record lost to a power cut only makes reset keep that file (the safe
        # side), and it would cost ~6 ms per write at boot.
        os.write(fd, _text(new))
    except OSError:
        pass
    finally:
        os.close(fd)


def _text(entries: Iterable[Entry]) -> bytes:
    return "".join(
        jsontext.dumps(recordclass.asdict(e), separators=(",", ":")) + "\n" for e in entries
    ).encode()


def forget(root: NodeRoot, paths: Iterable[str]) -> None:
    """Drop the entries of ``paths`` (noderole removed them itself: ``disable``)."""
    gone = set(paths)
    if gone:
        _rewrite(root, lambda entry: entry.path not in gone)


def _rewrite(root: NodeRoot, keep: Callable[[Entry], bool]) -> None:
    """Replace the manifest by the entries ``keep`` accepts (removed when none is left)."""
    from noderole.atomic import write_atomic

    if not root.resolve(MANIFEST).exists():
        return  # nothing recorded: no manifest (nor its directory) to make
    fd = _open_locked(root)
    try:
        remaining = [e for e in _parse(_read_fd(fd)).values() if keep(e)]
        local = root.resolve(MANIFEST)
        if remaining:
            write_atomic(local, _text(remaining), mode=0o600)
        else:
            local.unlink(missing_ok=True)
    finally:
        os.close(fd)


def record_processes(root: NodeRoot, plan: Plan, backend: str) -> None:
    """After an apply: the pidfiles and logs of ``plan``'s processes, the node lock and, for the
    native backend, the supervisor's run files (written by the processes, not by a writer that
    could record them itself)."""
    services = [entry.service for entry in plan.services if entry.service.command is not None]
    runtime = [LOCK_FILE]
    if backend == "native":
        runtime += [f"{RUN_DIR}/{name}" for name in _SUPERVISOR_FILES]
    # One locked read and at most one append for all of them (this runs on every apply).
    remember(
        root,
        [
            *_found(root, "runtime", [s.pidfile for s in services if s.pidfile]),
            *_found(root, "log", [p for s in services for p in (s.output_log, s.error_log) if p]),
            *_found(root, "runtime", runtime),
        ],
    )


class ManifestError(NoderoleError):
    """The manifest exists but cannot be read: nothing is known of what noderole wrote."""


def entries(root: NodeRoot) -> dict[str, Entry]:
    """Every recorded path and its last entry (empty when nothing was recorded)."""
    try:
        return _parse(read_regular(root.local(MANIFEST), limit=RECORD_LIMIT))
    except FileNotFoundError:
        return {}
    except OSError as error:  # a FIFO, a device, a directory, too large: nothing to go by
        raise ManifestError(
            f"cannot read the record of what noderole wrote, {MANIFEST} (at "
            f"{root.local(MANIFEST)}): {error.strerror or error}; move it aside (noderole then "
            "knows of nothing it wrote, and removes nothing by it) and run again"
        ) from None


def plan_reset(root: NodeRoot, *, purge: bool) -> list[Removal]:
    """What ``reset`` would do with each recorded path, deepest paths first, changing nothing."""
    removals = []
    for entry in sorted(entries(root).values(), key=lambda e: (-e.path.count("/"), e.path)):
        local = root.resolve(entry.path)
        now = digest_at(local, entry.kind)
        if now is None:
            removals.append(Removal(path=entry.path, kind=entry.kind, action="gone"))
        elif entry.kind in PURGE_ONLY and not purge:
            what = {"certificate": "minted certificate", "key": "minted key"}.get(
                entry.kind, f"service {entry.kind}" if entry.kind == "log" else "service data"
            )
            removals.append(
                Removal(
                    path=entry.path,
                    kind=entry.kind,
                    action="keep",
                    reason=f"kept: {what} (reset --purge removes it)",
                )
            )
        elif entry.digest not in (_ANY, now) and not (entry.digest == _DIR and now == _DIR):
            removals.append(
                Removal(
                    path=entry.path,
                    kind=entry.kind,
                    action="keep",
                    reason="kept: changed since noderole wrote it (remove it yourself if unwanted)",
                )
            )
        else:
            removals.append(Removal(path=entry.path, kind=entry.kind, action="remove"))
    recorded = {removal.path for removal in removals}
    for path in _OWN_RECORDS:
        if path not in recorded and os.path.lexists(root.resolve(path)):
            removals.append(Removal(path=path, kind="state", action="remove"))
    # Certificate stamps are written on the boot's critical path without a manifest record (a
    # lost one costs only a full check): every file in their directory is noderole's.
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(root.resolve(_STAMPS))):
            if name.endswith(".json"):
                removals.append(Removal(path=f"{_STAMPS}/{name}", kind="state", action="remove"))
    for directory in _OWN_DIRECTORIES:
        if os.path.isdir(root.resolve(directory)) and directory not in entries(root):
            removals.append(
                Removal(path=directory, kind="own", action="remove", reason="when empty")
            )
    return removals


def apply_reset(root: NodeRoot, removals: Iterable[Removal]) -> tuple[list[str], list[Removal]]:
    """Carry out :func:`plan_reset`'s answer; return the node paths removed, and the removals
    as they ended (one that met a link planted on its way is kept, with the refusal as reason).

    A directory is removed only when empty (what a service put there stays). The manifest keeps
    the entries of what was kept, and is removed once nothing is left; noderole's own directories
    go last, when empty.
    """
    removed: list[str] = []
    forgotten: set[str] = set()
    ended: list[Removal] = []
    for item in removals:
        ended.append(item)
        if item.kind == "own":
            continue  # after the manifest, which lives in one of them
        if item.action == "gone":
            forgotten.add(item.path)
            continue
        if item.action != "remove":
            continue
        try:
            _remove(str(root.resolve(item.path)))
        except FileNotFoundError:
            pass
        except UnsafePathError as error:  # recorded still: a reset after the link is gone
            ended[-1] = recordclass.evolve(item, action="keep", reason=f"kept: {error}")
            continue
        except OSError as error:
            if error.errno in (errno.ENOTEMPTY, errno.EEXIST):
                # A service's data is inside: the directory stays, and its entry (a reset
                # after it is emptied removes it), and the report says so.
                held = _held(str(root.resolve(item.path)))
                ended[-1] = recordclass.evolve(
                    item,
                    action="keep",
                    reason=f"kept: not empty ({held}): empty it and reset again, "
                    "or remove it yourself",
                )
                continue
            raise
        else:
            removed.append(item.path)
        forgotten.add(item.path)
    _rewrite(root, lambda entry: entry.path not in forgotten)
    for item in ended:
        if item.kind == "own" and item.action == "remove":
            # Not empty (a user's file, kept data) or already gone: it stays.
            with contextlib.suppress(OSError):
                os.rmdir(root.resolve(item.path))
                removed.append(item.path)
    return removed, ended


def _held(local: str, *, shown: int = 3) -> str:
    """What a directory that is not empty holds, for the reason it is kept: ``a.sock is not
    noderole's``, ``a, b, c and 2 more are not noderole's`` (its entries by name, reached as
    :func:`_remove` reaches it; ``what is inside is not noderole's`` when it cannot be read)."""
    try:
        directory = open_dir(local)
    except OSError:
        return "what is inside is not noderole's"
    try:
        # Names as bytes, a byte that is not UTF-8 written out (caf\xe9): the report is text.
        names = sorted(
            os.fsencode(name).decode("utf-8", "backslashreplace") for name in os.listdir(directory)
        )
    except OSError:
        return "what is inside is not noderole's"
    finally:
        os.close(directory)
    if not names:  # emptied meanwhile: the next reset removes it
        return "it was not empty when noderole looked"
    from noderole.records import in_words  # a reset's rare path: records load only here

    listed = names if len(names) <= shown else [*names[:shown], f"{len(names) - shown} more"]
    return f"{in_words(listed)} {'is' if len(names) == 1 else 'are'} not noderole's"


def _remove(local: str) -> None:
    """Remove the file, link or empty directory at ``local``, its directories reached as
    :func:`~noderole.supervisor._safeopen.open_dir` reaches them: a log or data directory may
    be a service user's, and a subdirectory he swaps for a link to another directory (after
    :func:`plan_reset` looked) would otherwise turn root's unlink onto the file of the same
    name there. Such a link raises :class:`UnsafePathError`; a link at ``local`` itself is
    removed, not followed. The temporary files a writer of that name killed before its rename
    left beside it go too (older ones only: a writer at work keeps its own)."""
    from noderole.atomic import STALE_TEMP_AGE, remove_stale_temps

    parent, name = os.path.split(local)
    directory = open_dir(parent)
    try:
        if stat.S_ISDIR(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode):
            os.rmdir(name, dir_fd=directory)
        else:
            os.unlink(name, dir_fd=directory)
            with contextlib.suppress(OSError):  # the file is gone; a leftover is no failure
                remove_stale_temps(directory, [name], older_than=STALE_TEMP_AGE)
    finally:
        os.close(directory)
