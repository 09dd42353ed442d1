"""Rendered files and links, and writing them onto a node root atomically and idempotently."""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from noderole import recordclass
from noderole.atomic import remedy, write_atomic
from noderole.errors import BackendError
from noderole.manifest import record
from noderole.reading import read_json
from noderole.root import NodeRoot
from noderole.supervisor import _safeopen

__all__ = [
    "Rendered",
    "RenderedFile",
    "RenderedLink",
    "remove_rendered",
    "sync_rendered",
    "write_rendered",
]


def _node_path(inst: object, attribute: recordclass.Attribute[str], value: str) -> None:
    pure = PurePosixPath(value)
    if not value.startswith("/") or ".." in pure.parts or str(pure) != value:
        raise ValueError(f"{attribute.name} must be a normalised absolute node path, got {value!r}")


@recordclass.frozen(kw_only=True)
class RenderedFile:
    """A file a backend renders: where it goes on the node, what it holds, its permission bits."""

    path: str = recordclass.field(validator=_node_path)
    """Node path (``/etc/init.d/NAME``), never a path under ``--root``."""
    content: str = recordclass.field(repr=lambda s: f"<{len(s)} chars>")
    """The complete text (UTF-8)."""
    mode: int
    """Permission bits, exactly (``0o755`` for a runscript, ``0o600`` for a secrets file)."""
    replaces: tuple[str, ...] = ()
    """Node paths of files this one would take the place of (systemd: the unit of the same
    name a package installed): writing is refused while one exists."""


@recordclass.frozen(kw_only=True)
class RenderedLink:
    """A symbolic link a backend renders (runlevel enablement, a ``.wants`` entry, an alias)."""

    path: str = recordclass.field(validator=_node_path)
    """Node path of the link itself."""
    target: str
    """What the link points to, written as is (absolute, or relative to the link's directory)."""
    replaces: tuple[str, ...] = ()
    """As :attr:`RenderedFile.replaces`."""


Rendered = RenderedFile | RenderedLink


def write_rendered(files: Iterable[Rendered], *, root: NodeRoot) -> list[Path]:
    """Put rendered files and links under ``root``; return the local paths that changed.

    Files are written with :func:`noderole.atomic.write_atomic` (temporary file, fsync, rename):
    a reader, or a boot after a power cut, sees the old file or the new one, never half of one.
    A file whose content and mode already match is left alone (its mtime too); one whose content
    matches but mode differs only gets a ``chmod``. A link is made under a temporary name and
    renamed over the old one, so it never dangles or vanishes; an identical link is left alone.
    Missing parent directories are created (mode 0755). Raises :class:`BackendError` naming the
    path when the file system refuses.
    """
    changed: list[Path] = []
    files = list(files)
    # Every file is looked at before any is written: a refusal leaves the node as it was.
    recorded: list[set[str]] = []  # the manifest's paths, read only when a file needs it
    for item in files:
        refusal = _refusal(root, item, recorded)
        if refusal:
            raise BackendError(refusal)
    _sweep(root, files)
    done: list[Rendered] = []
    for item in sorted(files, key=lambda f: f.path):
        local = root.resolve(item.path)
        try:
            local.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(item, RenderedFile):
                did = _write_file(local, item)
            else:
                did = _write_link(local, item.target)
        except OSError as error:
            # What was written before the refusal is recorded, so that reset and the next
            # render know it (a boot may enable a unit written here).
            record(root, "rendered", [f.path for f in done])
            raise BackendError(
                f"cannot write {item.path} (at {local}): {error.strerror or error}"
                f"{remedy(error, refused_link=isinstance(error, _safeopen.UnsafePathError))}"
            ) from error
        done.append(item)
        if did:
            changed.append(local)
    record(root, "rendered", [item.path for item in files])
    return changed


def _sweep(root: NodeRoot, files: Iterable[Rendered]) -> None:
    """Remove what an earlier render killed between writing a temporary file (or link) and
    renaming it left beside the files about to be written: an executable ``.NAME.<hex>.tmp`` in
    ``/etc/init.d`` otherwise stays for good. Only temporaries of the names rendered here, and
    only those older than :data:`~noderole.atomic.STALE_TEMP_AGE` (render takes no lock: a
    render at work keeps its own); one directory is listed once."""
    from noderole.atomic import STALE_TEMP_AGE, remove_stale_temps

    names: dict[str, list[str]] = {}
    for item in files:
        parent, _, name = item.path.rpartition("/")
        names.setdefault(parent or "/", []).append(name)
    for parent, here in names.items():
        try:
            dfd = _safeopen.open_dir(str(root.resolve(parent)))
        except OSError:  # none yet, or not reached safely: the write says why
            continue
        try:
            remove_stale_temps(dfd, here, older_than=STALE_TEMP_AGE)
        except OSError:  # a sweep that fails loses nothing; the write reports a real fault
            pass
        finally:
            os.close(dfd)


_OURS = re.compile(rb"^#.*\bby `?noderole\b", re.IGNORECASE | re.MULTILINE)
"""A line of every file noderole renders near its top: "# Generated by noderole from plugin
k3s", "# Written by noderole", "# Secrets of x, written by noderole"."""


def _refusal(root: NodeRoot, item: Rendered, recorded: list[set[str]]) -> str:
    """Why ``item`` must not be written ("" when it may): it would take the place of a file
    a package installed, or replace a file noderole did not write (an administrator's own
    runscript, a distribution's), which would be lost."""
    for other in item.replaces:
        if os.path.lexists(root.resolve(other)):
            return (
                f"refusing to write {item.path}: {other} is installed (not by noderole) and "
                f"{item.path} would take its place; rename the service (the file is named "
                "after it)"
            )
    if not isinstance(item, RenderedFile):
        return ""
    try:
        fd = os.open(
            root.resolve(item.path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        )
    except OSError:  # none there (or a link, which the write itself refuses, naming it)
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        held = _read_all(fd)
    finally:
        os.close(fd)
    head = b"\n".join(held.split(b"\n", 3)[:3])
    if held == item.content.encode() or _OURS.search(head):
        return ""
    if not recorded:
        from noderole.manifest import entries

        recorded.append(set(entries(root)))
    if item.path in recorded[0]:
        return ""
    return (
        f"refusing to replace {item.path}: noderole did not write it (no 'by noderole' line at "
        "its top, and not in noderole's record of what it wrote); move it away, keeping what "
        "you need of it, then run again"
    )


def _write_file(local: Path, item: RenderedFile) -> bool:
    data = item.content.encode()
    # The directory is reached without following a link planted by someone else, and the file
    # is looked at through O_NOFOLLOW: a chmod or a write never lands on another file.
    dfd = _safeopen.open_dir(str(local.parent), create=True)
    try:
        try:
            fd = os.open(
                local.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd
            )
        except (FileNotFoundError, OSError) as error:
            if not isinstance(error, FileNotFoundError) and error.errno != errno.ELOOP:
                raise
        else:
            try:
                info = os.fstat(fd)
                if stat.S_ISREG(info.st_mode) and _read_all(fd) == data:
                    if info.st_mode & 0o7777 == item.mode:
                        return False
                    os.fchmod(fd, item.mode)
                    return True
            finally:
                os.close(fd)
        write_atomic(local, data, mode=item.mode, dir_fd=dfd)
    finally:
        os.close(dfd)
    return True


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _write_link(local: Path, target: str) -> bool:
    if os.path.islink(local) and os.readlink(local) == target:
        return False
    if local.is_dir() and not local.is_symlink():
        raise IsADirectoryError(21, "a directory is in the way of the link", str(local))
    temp = local.with_name(f".{local.name}.{secrets.token_hex(6)}.tmp")
    os.symlink(target, temp)
    try:
        os.rename(temp, local)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    # The rename is only durable once the directory itself is on disk.
    fd = os.open(local.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def _still_as_rendered(root: NodeRoot, path: str) -> bool:
    """True when ``path`` holds what noderole last recorded writing there (the manifest
    ``reset`` removes by): the list of rendered files alone, a record of noderole's own, is no
    proof that a file is still noderole's to remove."""
    from noderole import manifest
    from noderole.errors import NoderoleError

    try:
        entry = manifest.entries(root).get(path)
    except NoderoleError:  # the manifest cannot be read: nothing is known to be ours
        return False
    if entry is None:
        return False
    now = manifest.digest_at(root.local(path), entry.kind)
    return now is not None and (entry.digest in (now, "any"))


def remove_rendered(paths: Iterable[str], *, root: NodeRoot) -> list[str]:
    """Remove the rendered files and links at ``paths`` (node paths) that still hold what
    noderole recorded writing there, for services no longer in the role; return the node paths
    removed, sorted. One changed since, or not known to be noderole's, is left alone, as is
    one already gone. Raises :class:`BackendError` naming the path the file system refuses."""
    removed: list[str] = []
    for path in sorted(set(paths)):
        if not _still_as_rendered(root, path):
            continue  # changed since noderole wrote it, or not known to be its: left alone
        try:
            root.resolve(path).unlink()
        except FileNotFoundError:
            continue
        except OSError as error:
            raise BackendError(
                f"cannot remove {path}, rendered earlier for a service no longer in the role: "
                f"{error.strerror or error}"
            ) from error
        removed.append(path)
    return removed


def sync_rendered(
    files: Iterable[Rendered], *, root: NodeRoot, manifest: str
) -> tuple[list[Path], list[str]]:
    """Write ``files`` like :func:`write_rendered`, then remove what the previous run of the same
    manifest wrote and this one did not (a service that left the role must not start at the next
    boot). Returns (changed local paths, removed node paths).

    The manifest (a node path, JSON list of node paths) records what noderole wrote, so only
    noderole's own files are ever removed. It is written after the files, so a crash in between
    leaves the old manifest, and the next run removes what it still should.
    """
    from noderole.atomic import write_atomic

    items = list(files)
    changed = write_rendered(items, root=root)
    local_manifest = root.resolve(manifest)
    try:
        previous = read_json(local_manifest)
    except (OSError, ValueError):  # none, or a damaged one: nothing known to remove
        previous = []
    current = sorted(item.path for item in items)
    listed = previous if isinstance(previous, list) else []
    known = [
        p for p in listed if isinstance(p, str) and p.startswith("/") and "/../" not in p + "/"
    ]
    removed = remove_rendered(set(known) - set(current), root=root)
    try:
        # noderole's state directory: private (0700), its files 0600.
        _safeopen.private_dir(str(local_manifest.parent))
        write_atomic(local_manifest, (json.dumps(current, indent=1) + "\n").encode(), mode=0o600)
    except OSError as error:
        raise BackendError(
            f"cannot record what was rendered in {manifest} (at {local_manifest}): "
            f"{error.strerror or error}"
        ) from error
    record(root, "state", [manifest])
    return changed, removed
