"""What noderole records on the node: the applied role, what each service was started with, and
the lock that keeps two ``apply`` runs from interleaving.

Files (node paths, under ``--root``):

- ``/var/lib/noderole/role``: the applied role, one line (like the prior art's role file), so
  ``status``, ``stop`` and a later ``apply`` know it.
- ``/var/lib/noderole/applied.json``: per service, a digest of each part of its definition, so a
  restart can say *what* changed. Secrets are never written: the environment is a digest.
- ``/var/lib/noderole/last-apply.json``: what the last apply did to each service (outcome,
  reason, time), the backend, and the settings it ran with (secret settings left out), so
  ``status`` can say why a service is down, and ``status``, ``stop`` and ``restart`` still work
  while ``config.toml`` is broken.
- ``/run/noderole/apply.lock``: ``flock``-ed by ``apply`` and ``stop`` for their whole run.

``/run/noderole`` and ``/var/lib/noderole`` are private: made 0700 by whoever comes first (a
looser existing one is tightened, one owned by another user refused), and the files in them are
0600, so no local user can take the lock or read what is recorded. A refused or failed write
(a link planted there, a full disk) raises :class:`StateError` naming the file and the fix.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from noderole.clock import Clock
from noderole.errors import LockedError, NoderoleError
from noderole.paths import (
    APPLIED_FILE,
    LAST_APPLY_FILE,
    LOCK_FILE,
    ROLE_FILE,
)
from noderole.root import NodeRoot
from noderole.supervisor import _jsontext as jsontext
from noderole.supervisor import _safeopen

__all__ = [
    "StateError",
    "lock_holders",
    "node_lock",
    "read_applied",
    "read_last_apply",
    "read_role",
    "role_record",
    "write_applied",
    "write_last_apply",
    "write_role",
    "write_state_file",
]


def read_last_apply(root: NodeRoot) -> dict[str, Any]:
    """The record of the last apply (empty when none or unreadable): ``role``, ``backend``,
    ``at``, ``ok``, ``seconds``, ``services`` (name -> ``outcome``, ``reason``, ``at``),
    ``settings`` (table -> key -> value).

    Only what is sound is returned: a record that is JSON of another shape (an editor's slip, a
    block of another file after a disk fault, another version's record) loses each part that is
    not, down to one service's entry. It reports the past, and every apply writes it whole again:
    a damaged one must never fail a command (an apply failed after its services had started,
    and every apply after it).
    """
    from noderole.reading import RECORD_LIMIT, read_json

    try:
        data = read_json(
            root.local(LAST_APPLY_FILE), limit=RECORD_LIMIT
        )  # not through pathlib: `status` imports none
    except (OSError, ValueError):  # a FIFO, a device, too deep or not JSON: no record
        return {}
    return _sound_last_apply(data) if isinstance(data, dict) else {}


def _sound_last_apply(data: dict[str, Any]) -> dict[str, Any]:
    record: dict[str, Any] = {
        key: data[key] for key in ("role", "backend") if isinstance(data.get(key), str)
    }
    record.update({key: float(data[key]) for key in ("at", "seconds") if _moment(data.get(key))})
    if isinstance(data.get("ok"), bool):
        record["ok"] = data["ok"]
    services = data.get("services")
    if isinstance(services, dict):
        record["services"] = {
            name: {"outcome": entry["outcome"], "reason": entry["reason"], "at": entry["at"]}
            for name, entry in services.items()
            if isinstance(entry, dict)
            and isinstance(entry.get("outcome"), str)
            and isinstance(entry.get("reason"), str)
            and _moment(entry.get("at"))
        }
    settings = data.get("settings")
    if isinstance(settings, dict):
        # Each value is checked where it is used, as config.toml's are (config_from_values).
        record["settings"] = {t: v for t, v in settings.items() if isinstance(v, dict)}
    return record


def _moment(value: object) -> bool:
    """A time in seconds since the epoch (or a duration) a date can be made of: finite, not
    negative, before the year 10000 (NaN fails the comparison)."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and 0 <= value < _LAST_MOMENT
    )


_LAST_MOMENT = 253_402_300_800.0
"""10000-01-01T00:00:00Z: ``datetime.fromtimestamp`` goes no further."""


def write_last_apply(root: NodeRoot, record: Mapping[str, Any]) -> None:
    """Replace the record of the last apply (atomically, mode 0600, recorded for reset).

    Not synced to disk: it reports what the last apply did, every apply writes it anew, and
    :func:`read_last_apply` takes a file a power loss emptied as no record. The ``fsync`` would
    wait for every file the apply just wrote to reach the disk, on the boot's path.
    """
    text = jsontext.dumps(record, indent=1, sort_keys=True).encode()
    write_state_file(root, LAST_APPLY_FILE, text, durable=False, any_content=True)
    _sweep_temporaries(root.local(LAST_APPLY_FILE))  # once per apply: see the function


def read_role(root: NodeRoot) -> str | None:
    """The role last applied on this node; None when none is recorded, or when the record is
    damaged (:func:`role_record` says how, for the commands the record decides the role of)."""
    return role_record(root)[0]


def role_record(root: NodeRoot) -> tuple[str | None, str]:
    """The recorded role, and what is wrong with the record when it is damaged: ``(role, "")``;
    ``(None, "")`` when none is recorded; ``(None, why)`` for a record that is not one line
    naming a role (a power cut, a bad disk or an editor's slip): ``not UTF-8 text``,
    ``'../x' is not a role name``, ``not a regular file (a directory)``."""
    from noderole.names import is_service_name
    from noderole.reading import read_regular

    try:
        data = read_regular(root.local(ROLE_FILE), limit=_ROLE_LIMIT)
    except FileNotFoundError:
        return None, ""
    except OSError as error:  # a directory, a FIFO, a file of a megabyte, unreadable
        return None, error.strerror or str(error)
    try:
        text = data.decode().strip()
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    if not text:
        return None, ""  # emptied by a power cut before its first sync: nothing recorded
    if not is_service_name(text):  # a role is named as a service is (records.Service.roles)
        return None, f"{text[:60]!r} is not a role name"
    return text, ""


_ROLE_LIMIT = 4096
"""Bytes a role record may hold: one name, with room to say what else a damaged one holds."""


class StateError(NoderoleError):
    """What noderole records on the node could not be written (full disk, planted link)."""


def _sweep_temporaries(path: str) -> None:
    """Remove what a writer killed mid-write (SIGKILL; SIGTERM and SIGHUP end the command at
    once) left in ``path``'s directory, noderole's own: a temporary file, which nothing else
    would ever remove. Run once per apply, when it records its outcome; any state file's
    temporary (the file it was for may not be written again for long: ``applied.json`` changes
    only with a definition), and only one older than :data:`~noderole.atomic.STALE_TEMP_AGE`:
    state files are not all written under the node lock. Best effort."""
    from noderole.atomic import STALE_TEMP_AGE, remove_stale_temps

    with contextlib.suppress(OSError):
        directory = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            remove_stale_temps(directory, None, older_than=STALE_TEMP_AGE)
        finally:
            os.close(directory)


def write_state_file(
    root: NodeRoot, node_path: str, data: bytes, *, durable: bool = True, any_content: bool = False
) -> None:
    """Write one of noderole's state files: private directory, 0600, never through a link,
    recorded for ``reset``; synced to disk unless not ``durable`` (see
    :func:`noderole.atomic.write_atomic`); :class:`StateError` when the machine refuses.

    A file every run writes anew (``any_content``: the last apply's record) is recorded without
    its digest, so that the manifest does not gain a line on every run; reset removes it
    whatever it holds."""
    from noderole.atomic import write_atomic

    path = root.local(node_path)  # a string: an apply imports no pathlib
    try:
        _safeopen.private_dir(os.path.dirname(path))
        write_atomic(path, data, mode=0o600, durable=durable)
    except OSError as error:
        raise StateError(
            f"cannot record {node_path} (at {path}): {error.strerror or error}{_remedy(error)}"
        ) from error
    _record(root, node_path, any_content=any_content)


def _remedy(error: OSError) -> str:
    """What to do when the machine refuses to write a state file (see
    :func:`noderole.atomic.remedy`; imported here: ``status`` reads state and writes none)."""
    from noderole.atomic import remedy

    return remedy(error, refused_link=isinstance(error, _safeopen.UnsafePathError))


def write_role(root: NodeRoot, role: str) -> None:
    """Record the applied role (atomically, mode 0600)."""
    write_state_file(root, ROLE_FILE, f"{role}\n".encode())


def read_applied(root: NodeRoot) -> dict[str, dict[str, Any]]:
    """Per-service definition digests recorded by the last apply (empty when unknown or
    unreadable: a FIFO, a directory, JSON of another shape; each entry a mapping)."""
    from noderole.reading import RECORD_LIMIT, read_json

    try:
        data = read_json(root.local(APPLIED_FILE), limit=RECORD_LIMIT)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {name: entry for name, entry in data.items() if isinstance(entry, dict)}


def write_applied(root: NodeRoot, applied: Mapping[str, Mapping[str, Any]]) -> None:
    """Record per-service definition digests (atomically, mode 0600)."""
    write_state_file(root, APPLIED_FILE, jsontext.dumps(applied, indent=1, sort_keys=True).encode())


def lock_holders(fd: int) -> list[int]:
    """Pids holding a lock on the file open as ``fd``, read from ``/proc/locks`` by inode.

    The kernel's word, not a note in the file: it names whoever really holds the lock (for a
    ``flock``, the process that took it).
    """
    info = os.fstat(fd)
    key = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    pids = []
    try:
        with open("/proc/locks") as f:
            for line in f:
                fields = line.split()
                if "->" in fields or len(fields) < 6:
                    continue  # a waiter, not a holder
                if fields[5] == key and fields[4].isdigit():
                    pids.append(int(fields[4]))
    except OSError:
        return []
    return sorted(set(pids))


def _describe(pid: int, note: str) -> str:
    """``pid N: WHAT`` from the holder's own note if it is the holder's, else its command line."""
    if note.startswith(f"pid {pid}: "):
        return note
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().split(b"\0")
        command = " ".join(w.decode(errors="replace") for w in words if w)[:200]
    except OSError:
        command = ""
    return f"pid {pid}: {command or 'command unknown'}"


def _open_lock(path: str) -> int:
    """The lock file, 0600, in the private run directory; never through a link."""
    _safeopen.private_dir(os.path.dirname(path))
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _safeopen.UnsafePathError(f"{path} is not a regular file; remove it")
        if info.st_mode & 0o7777 != 0o600:
            os.fchmod(fd, 0o600)  # made by an older version, 0644
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_at(fd: int, path: str) -> bool:
    """True when ``fd`` is the file at ``path`` (not one removed or replaced since it opened)."""
    try:
        there = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino)


def _record(root: NodeRoot, node_path: str, *, any_content: bool = False) -> None:
    """Note the state file in the manifest ``noderole reset`` removes by."""
    from noderole.manifest import record

    record(root, "state", [node_path], any_content=any_content)


@contextmanager
def node_lock(root: NodeRoot, *, timeout: float, clock: Clock, what: str) -> Iterator[None]:
    """Hold the node lock for ``what``; wait up to ``timeout`` seconds for another holder.

    A refusal names the holder the kernel reports (:func:`lock_holders`). The holder's pid and
    purpose are also written into the lock file, best effort (a full ``/run`` must not fail
    the run), and quoted only when its pid is the real holder's.
    """
    import fcntl  # here: a reader (`status`) takes no lock

    path = root.local(LOCK_FILE)
    try:
        fd = _open_lock(path)
    except OSError as error:
        raise StateError(
            f"cannot open the node lock {LOCK_FILE} (at {path}): {error.strerror or error}; "
            "fix or free the run directory, then run again"
        ) from error
    try:
        start = clock.monotonic()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            else:
                if _is_at(fd, path):
                    break
                # The file was removed (by `reset`, which removes the lock it holds) or replaced
                # while this run waited on it: its lock is one nobody else can see, and the next
                # run locks the file at the path. Take that one instead.
                os.close(fd)
                fd = -1
                fd = _open_lock(path)
                continue
            if clock.monotonic() - start >= timeout:
                note = os.pread(fd, 200, 0).decode(errors="replace").strip()
                holders = lock_holders(fd)
                holder = "; ".join(_describe(pid, note) for pid in holders) or "holder unknown"
                raise LockedError(
                    f"another noderole run holds {LOCK_FILE} ({holder}); it did not finish "
                    f"within {timeout:g}s. Wait for it, or raise --lock-timeout"
                )
            clock.sleep(0.05)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}: {what}\n".encode(), 0)
        except OSError:
            pass  # only a courtesy for readers: the lock itself is held
        yield
    finally:
        if fd >= 0:
            os.close(fd)  # closing releases the flock
