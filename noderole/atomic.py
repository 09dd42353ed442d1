"""Crash-safe file writing: a reader sees the old file or the new one, never half of either.

Every write goes to a fresh temporary file in the target's own directory (created with
``O_CREAT|O_EXCL|O_NOFOLLOW``, so nothing planted there can redirect it), is flushed with
``fsync``, renamed over the target, and the directory is ``fsync``-ed so the rename itself survives
a power cut. A failure at any point (``ENOSPC``, a read-only file system, an exception) removes the
temporary file and leaves the old target untouched.

Symbolic links are never followed at the target: a link planted where the file should be is
refused with ``ELOOP`` rather than written through (which could overwrite any file on the machine)
or silently replaced (which would hide whatever planted it). :func:`write_files` also refuses a
directory that is itself a link.

Every system call is preceded by a call to an optional ``step`` hook with a name such as
``"tls.key:rename"``. Production code passes nothing; tests raise (or ``os._exit``) at each step in
turn to prove that a crash anywhere leaves a state the next run repairs.

Errors are plain :class:`OSError` with ``errno``, ``strerror`` and ``filename`` set, so every caller
can translate them into its own domain error.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator, Sequence

from noderole import recordclass
from noderole.supervisor._safeopen import fix_for, open_dir

__all__ = [
    "STALE_TEMP_AGE",
    "FileSpec",
    "StepHook",
    "open_directory",
    "remedy",
    "remove_stale_temps",
    "write_atomic",
    "write_files",
]

StepHook = Callable[[str], None]
"""Called with the name of the next system call, before it happens (fault injection in tests)."""

_TEMP_SUFFIX = ".tmp"


def _no_step(name: str) -> None:
    """The default hook: do nothing."""


@recordclass.frozen(kw_only=True)
class FileSpec:
    """One file for :func:`write_files`."""

    name: str
    """File name inside the directory (no slash)."""
    data: bytes
    """The complete new content."""
    mode: int
    """Permission bits of the new file, exactly (not subject to the umask)."""


def _temp_name(name: str) -> str:
    # os.urandom, as secrets.token_hex does, without importing secrets (and hmac, random).
    return f".{name}.{os.urandom(6).hex()}{_TEMP_SUFFIX}"


def _temp_of(candidate: str) -> str | None:
    """The file ``candidate`` is a temporary of, named as :func:`_temp_name` names one; None
    when it is not named so."""
    if not (candidate.startswith(".") and candidate.endswith(_TEMP_SUFFIX)):
        return None
    name, _, token = candidate[1 : -len(_TEMP_SUFFIX)].rpartition(".")
    if name and len(token) == 12 and all(c in "0123456789abcdef" for c in token):
        return name
    return None


@contextlib.contextmanager
def _directory_fd(path: str) -> Iterator[int]:
    """The directory ``path``: an absolute one reached component by component, a symbolic link
    followed only inside a directory no other user can write (root writes where a service's
    user may own a directory on the way)."""
    if os.path.isabs(path):
        fd = open_dir(path)
    else:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def write_atomic(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    mode: int,
    dir_fd: int | None = None,
    uid: int | None = None,
    gid: int | None = None,
    step: StepHook | None = None,
    durable: bool = True,
) -> None:
    """Replace ``path`` with ``data`` atomically and durably, with permission bits ``mode``.

    ``durable=False`` leaves out the two ``fsync`` calls, for a record that is only a report and
    is made again by the next run: a reader still sees the old file or the new one, never a part,
    but after a power loss the file may hold either, or nothing (its reader must take an empty
    or unreadable file as no record). An ``fsync`` right after an apply wrote its files waits
    for the journal to commit all of them (tens of milliseconds at the end of a boot's apply).

    ``path`` is a :class:`~pathlib.Path` or a string (an apply writes through strings: it imports
    no pathlib). The directory must exist (it may be reached through symbolic links unless
    ``dir_fd`` is given: then the file name of ``path`` is taken relative to that open directory).
    A symbolic link at ``path`` itself is refused with ``OSError(ELOOP)``. ``uid``/``gid`` set the
    new file's owner. On any error the temporary file is removed and the old ``path`` is left as
    it was.
    """
    hook = step or _no_step
    text = os.fspath(path)
    if dir_fd is None:
        with _directory_fd(os.path.dirname(text) or ".") as fd:
            _write_in(fd, text, data, mode=mode, uid=uid, gid=gid, hook=hook, durable=durable)
    else:
        _write_in(dir_fd, text, data, mode=mode, uid=uid, gid=gid, hook=hook, durable=durable)


def _write_in(
    dfd: int,
    path: str,
    data: bytes,
    *,
    mode: int,
    uid: int | None,
    gid: int | None,
    hook: StepHook,
    durable: bool = True,
) -> None:
    name = os.path.basename(path)
    if not name or name in (".", ".."):
        raise OSError(errno.EINVAL, "not a file name", path)
    _refuse_symlink(dfd, path)
    temp = _temp_name(name)
    hook(f"{name}:create")
    # Created owner-only; the final mode is applied with fchmod below, so the umask cannot
    # loosen or tighten it, and a key is never readable by others even for an instant.
    fd = os.open(
        temp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
        dir_fd=dfd,
    )
    renamed = False
    try:
        try:
            if uid is not None or gid is not None:
                hook(f"{name}:chown")
                os.fchown(fd, -1 if uid is None else uid, -1 if gid is None else gid)
            hook(f"{name}:chmod")
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                hook(f"{name}:write")
                written = os.write(fd, view)
                view = view[written:]
            if durable:
                hook(f"{name}:fsync")
                os.fsync(fd)
            hook(f"{name}:close")
        finally:
            os.close(fd)
        _refuse_symlink(dfd, path)
        hook(f"{name}:rename")
        os.rename(temp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        renamed = True
        if durable:
            hook(f"{name}:fsync-dir")
            os.fsync(dfd)
    except BaseException:
        if not renamed:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dfd)
        raise


def _refuse_symlink(dfd: int, path: str) -> None:
    name = os.path.basename(path)
    try:
        info = os.lstat(name, dir_fd=dfd)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        target = os.readlink(name, dir_fd=dfd)
        raise OSError(
            errno.ELOOP,
            f"refusing to write through a symbolic link (it points to {target}); remove the link",
            path,
        )


def open_directory(
    path: str | os.PathLike[str],
    *,
    mode: int = 0o700,
    create: bool = True,
    step: StepHook | None = None,
) -> int:
    """An open file descriptor of directory ``path``, which must not be a symbolic link.

    With ``create``, missing parents are made with the default mode (like ``mkdir -p``) and
    ``path`` itself with ``mode`` exactly. An existing directory keeps its mode. A link at
    ``path`` raises ``OSError(ELOOP)``; the parents of an absolute ``path`` are reached
    component by component, a link followed only inside a directory no other user can write
    (:func:`noderole.supervisor._safeopen.open_dir`). The caller closes the descriptor.
    """
    hook = step or _no_step
    path = os.fspath(path).rstrip("/") or "/"  # a trailing slash names the directory itself
    parent, name = os.path.split(path)
    if not name:  # "/" itself
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    if os.path.isabs(path):
        parent_fd = open_dir(parent, create=create)
    else:
        if create and parent:
            os.makedirs(parent, exist_ok=True)
        parent_fd = os.open(parent or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            info = os.lstat(name, dir_fd=parent_fd)
        except FileNotFoundError:
            if not create:
                raise
            hook("mkdir")
            try:
                os.mkdir(name, mode, dir_fd=parent_fd)
                # mkdir's mode passes through the umask; say exactly what we mean.
                os.chmod(name, mode, dir_fd=parent_fd)
            except FileExistsError:
                pass
        else:
            _check_not_link(path, info, parent_fd)
        hook("open-dir")
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            return os.open(name, flags, dir_fd=parent_fd)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENOTDIR):
                _check_not_link(path, os.lstat(name, dir_fd=parent_fd), parent_fd)
            raise
    finally:
        os.close(parent_fd)


def _check_not_link(path: str, info: os.stat_result, parent_fd: int) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise OSError(
            errno.ELOOP,
            f"refusing to use a directory that is a symbolic link (it points to "
            f"{os.readlink(os.path.basename(path), dir_fd=parent_fd)}); make it a real directory",
            path,
        )
    if not stat.S_ISDIR(info.st_mode):
        raise OSError(errno.ENOTDIR, "not a directory", path)


STALE_TEMP_AGE = 60.0
"""Seconds after which :func:`remove_stale_temps` with ``older_than`` takes a temporary file for
a dead writer's: a write lasts milliseconds (a slow disk's ``fsync``, seconds)."""


def remove_stale_temps(
    dir_fd: int, names: Sequence[str] | None, *, older_than: float | None = None
) -> list[str]:
    """Remove temporary files a crashed writer left for ``names`` (None: for any file of the
    directory); return what was removed.

    Without ``older_than`` the caller vouches that no other writer of those names is at work
    (a certificate's, under its own lock); with it, only temporaries last modified at least
    that many seconds ago go, and a writer at work keeps its own."""
    import time

    removed = []
    now = time.time()
    for entry in os.listdir(dir_fd):
        of = _temp_of(entry)
        if of is not None and (names is None or of in names):
            with contextlib.suppress(FileNotFoundError):
                if older_than is not None:
                    info = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
                    if now - info.st_mtime < older_than:
                        continue
                os.unlink(entry, dir_fd=dir_fd)
                removed.append(entry)
    return removed


def write_files(
    directory: str | os.PathLike[str],
    files: Sequence[FileSpec],
    *,
    dir_mode: int = 0o700,
    step: StepHook | None = None,
) -> None:
    """Write ``files`` into ``directory``, each atomically and durably, in the order given.

    The directory is created with ``dir_mode`` if missing and must not be a symbolic link. Order
    matters to crash safety: write first what the others depend on being valid (a key before
    the certificate that holds its public half). Leftover temporary files of an earlier crashed
    writer are removed first.
    """
    dfd = open_directory(directory, mode=dir_mode, step=step)
    try:
        remove_stale_temps(dfd, [spec.name for spec in files])
        for spec in files:
            write_atomic(
                os.path.join(directory, spec.name), spec.data, mode=spec.mode, dir_fd=dfd, step=step
            )
    finally:
        os.close(dfd)


def remedy(error: OSError, *, refused_link: bool = False) -> str:
    """What to do when the machine refuses a write, by its reason: ``"; free space on its file
    system, then run again"``, a remount for a read-only one. Empty for a refused link (its own
    message says which, and to remove it)."""
    if refused_link or error.errno == errno.ELOOP:
        return ""
    fix = fix_for(error) or "fix the directory"
    return f"; {fix}, then run again"
