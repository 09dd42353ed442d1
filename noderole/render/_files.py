"""Rendered files and links, and writing them onto a node root atomically and idempotently."""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from noderole import recordclass
from noderole.atomic import write_atomic
from noderole.errors import BackendError
from noderole.manifest import record
from noderole.root import NodeRoot
from noderole.supervisor import _safeopen

__all__ = ["Rendered", "RenderedFile", "RenderedLink", "sync_rendered", "write_rendered"]


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


@recordclass.frozen(kw_only=True)
class RenderedLink:
    """A symbolic link a backend renders (runlevel enablement, a ``.wants`` entry, an alias)."""

    path: str = recordclass.field(validator=_node_path)
    """Node path of the link itself."""
    target: str
    """What the link points to, written as is (absolute, or relative to the link's directory)."""


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
    for item in sorted(files, key=lambda f: f.path):
        local = root.resolve(item.path)
        try:
            local.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(item, RenderedFile):
                did = _write_file(local, item)
            else:
                did = _write_link(local, item.target)
        except OSError as error:
            raise BackendError(
                f"cannot write {item.path} (at {local}): {error.strerror or error}; "
                "check that the directory is writable and not a link, then render again"
            ) from error
        if did:
            changed.append(local)
    record(root, "rendered", [item.path for item in files])
    return changed


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
        previous = json.loads(local_manifest.read_text())
    except (FileNotFoundError, ValueError):
        previous = []
    current = sorted(item.path for item in items)
    removed: list[str] = []
    for path in sorted(set(previous) - set(current)) if isinstance(previous, list) else []:
        if not isinstance(path, str) or not path.startswith("/"):
            continue
        local = root.resolve(path)
        try:
            local.unlink()
        except FileNotFoundError:
            continue
        except OSError as error:
            raise BackendError(
                f"cannot remove {path}, rendered earlier for a service no longer in the role: "
                f"{error.strerror or error}"
            ) from error
        removed.append(path)
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
