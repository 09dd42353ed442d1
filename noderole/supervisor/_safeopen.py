"""Opening files where someone less privileged may have planted something.

The supervisor and ``apply`` run as root, and write into directories a service's user may own
(its log directory, its pidfile's directory). Every such write goes through here:

- a directory is resolved one component at a time from ``/`` with ``openat``; a symbolic link is
  followed only when it sits in a directory that nobody but us can write (``/var/run -> /run``),
  and is refused otherwise (:func:`open_dir`);
- a file is opened ``O_NOFOLLOW`` relative to that directory's descriptor: a link planted at the
  file itself is never written through; ``O_NONBLOCK`` on open, so a planted FIFO cannot hang
  the daemon; what was opened must be a regular file (:func:`open_append`, :func:`read_small`,
  :func:`read_tail`, which ``status`` reads a failing service's log with);
- a log in a directory the service's user can write is opened *with that user's rights*, in a
  short-lived forked child that has dropped to the user's uid and gid and hands the descriptor
  back over a socketpair (``SCM_RIGHTS``): the kernel then refuses whatever the user could not
  open himself (:func:`open_append`);
- a file that has more than one hard link is refused unless the service's (non-root) user owns
  it: with ``fs.protected_hardlinks=0`` a user can link a root-owned file into his directory;
- a replacement is written to a temporary created ``O_EXCL|O_NOFOLLOW`` under an unpredictable
  name and renamed over the target, inside one directory descriptor (:func:`replace_file`);
- a private directory (the run, state and log directories) is ``0700`` whoever makes it first;
  one with looser bits is tightened, one owned by someone else is refused (:func:`private_dir`).

Errors are :class:`UnsafePathError` (an ``OSError``) whose message names the path and the fix.
Standard library only (the daemon imports it).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

__all__ = [
    "UnsafePathError",
    "fix_for",
    "open_append",
    "open_dir",
    "private_dir",
    "read_small",
    "read_tail",
    "rename_in",
    "replace_file",
]


def fix_for(error: OSError) -> str:
    """What to do when the machine refuses a write, by the refusal's reason (the first words of
    a sentence, lower case): ``free space on its file system`` for a full disk, a remount for a
    read-only one. Empty when the reason says nothing a person can act on."""
    code = error.errno
    if code in (errno.ENOSPC, errno.EDQUOT):
        return "free space on its file system"
    if code == errno.EROFS:
        return "its file system is mounted read-only: remount it read-write"
    if code in (errno.EACCES, errno.EPERM):
        return "check the directory's owner, mode and attributes (lsattr)"
    if code == errno.EMFILE:
        return "this process's limit of open files is reached: raise it (ulimit -n, LimitNOFILE=)"
    if code == errno.ENFILE:
        return "the machine's limit of open files is reached (fs.file-max): close some, or raise it"
    if code == errno.ENAMETOOLONG:
        return "the path or a name in it is too long for the file system: give a shorter name"
    return ""


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW
_APPEND_FLAGS = (
    os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
)
_MAX_LINKS = 40


class UnsafePathError(OSError):
    """A path that could redirect a privileged write (or read) elsewhere; ``str()`` says which."""

    def __init__(self, message: str, code: int = errno.ELOOP) -> None:
        super().__init__(message)
        self.errno = code
        self.message = message

    def __str__(self) -> str:
        return self.message


def _trusted(info: os.stat_result) -> bool:
    """Only we (or root) can change what this directory holds."""
    return info.st_uid in (0, os.geteuid()) and not info.st_mode & 0o022


def open_dir(path: str, *, create: bool = False, mode: int = 0o755) -> int:
    """A descriptor of directory ``path`` (absolute), resolved without untrusted links.

    With ``create``, missing components are made with ``mode`` (subject to the umask). The
    caller closes the descriptor.
    """
    if not path.startswith("/"):
        raise UnsafePathError(f"{path}: not an absolute path", errno.EINVAL)
    hops = 0
    while True:
        parts = [p for p in os.path.normpath(path).split("/") if p]
        fd = os.open("/", _DIR_FLAGS)
        here = "/"
        try:
            for i, part in enumerate(parts):
                try:
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, mode, dir_fd=fd)
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as e:
                    if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    where = os.path.join(here, part)
                    if not stat.S_ISLNK(os.lstat(part, dir_fd=fd).st_mode):
                        raise UnsafePathError(
                            f"{where} is not a directory", errno.ENOTDIR
                        ) from None
                    target = os.readlink(part, dir_fd=fd)
                    if not _trusted(os.fstat(fd)):
                        raise UnsafePathError(
                            f"refusing to follow the symbolic link {where} (to {target}): it sits "
                            f"in {here}, which other users can write; make it a real directory"
                        ) from None
                    hops += 1
                    if hops > _MAX_LINKS:
                        raise UnsafePathError(
                            f"{path}: too many levels of symbolic links"
                        ) from None
                    path = os.path.join(here, target, *parts[i + 1 :])
                    break
                os.close(fd)
                fd = nfd
                here = os.path.join(here, part)
            else:
                out, fd = fd, -1
                return out
        finally:
            if fd >= 0:
                os.close(fd)


def _split(path: str) -> tuple[str, str]:
    parent, name = os.path.split(path)
    if not name or name in (".", ".."):
        raise UnsafePathError(f"{path}: not a file path", errno.EINVAL)
    return parent or "/", name


def _check_opened(fd: int, path: str, owner: int | None, *, verb: str = "write") -> None:
    """Refuse what is not a plain file of ours (closing ``fd``)."""
    info = os.fstat(fd)
    problem = ""
    if not stat.S_ISREG(info.st_mode):
        problem = "it is not a regular file"
    elif info.st_nlink > 1 and (owner in (None, 0) or info.st_uid != owner):
        problem = (
            f"it has {info.st_nlink} hard links and belongs to uid {info.st_uid}, not to the "
            "service's user (a planted link to another file)"
        )
    if problem:
        os.close(fd)
        raise UnsafePathError(f"refusing to {verb} {path}: {problem}; remove it")


def _open_here(dfd: int, name: str, path: str, mode: int) -> int:
    try:
        return os.open(name, _APPEND_FLAGS, mode, dir_fd=dfd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafePathError(
                f"refusing to write {path}: it is a symbolic link; remove it"
            ) from None
        if e.errno == errno.ENXIO:  # a FIFO (or socket) nobody reads: O_NONBLOCK said so
            raise UnsafePathError(
                f"refusing to write {path}: it is not a regular file; remove it"
            ) from None
        raise


def _open_as(uid: int, gid: int, dfd: int, name: str, path: str, mode: int) -> int:
    """Open in a forked child running as ``uid``/``gid``; the fd comes back by SCM_RIGHTS."""
    import socket  # here: a reader (``status``) opens nothing as another user

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - measured in the child
            code = 0
            try:
                os.setgroups([])
                os.setgid(gid)
                os.setuid(uid)
                try:
                    fd = _open_here(dfd, name, path, mode)
                except OSError as e:
                    theirs.sendall(b"E" + str(e).encode(errors="replace"))
                else:
                    socket.send_fds(theirs, [b"F"], [fd])
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        theirs.close()
        try:
            data, fds, _, _ = socket.recv_fds(ours, 4096, 1)
        finally:
            os.waitpid(pid, 0)
    finally:
        ours.close()
        theirs.close()
    if fds:
        return fds[0]
    message = data[1:].decode(errors="replace") or "the opener died"
    raise UnsafePathError(f"cannot open {path} as uid {uid}: {message}", errno.EACCES)


def open_append(
    path: str, *, uid: int | None = None, gid: int | None = None, mode: int = 0o640
) -> int:
    """A blocking, close-on-exec descriptor appending to the log ``path`` (created if missing).

    ``uid``/``gid`` are the service's: when the log's directory is one others can write and we
    are root, the file is opened with those rights. Missing directories are created (0755).
    """
    parent, name = _split(path)
    dfd = open_dir(parent, create=True)
    try:
        as_user = (
            uid is not None
            and uid != os.geteuid()
            and os.geteuid() == 0
            and not _trusted(os.fstat(dfd))
        )
        if as_user:
            assert uid is not None
            fd = _open_as(uid, uid if gid is None else gid, dfd, name, path, mode)
        else:
            fd = _open_here(dfd, name, path, mode)
    finally:
        os.close(dfd)
    _check_opened(fd, path, uid)
    os.set_blocking(fd, True)
    return fd


def _open_reading(path: str) -> int:
    """A descriptor reading ``path``: its directories resolved as :func:`open_dir` does, the
    file itself opened without following a link or waiting for a FIFO's writer."""
    parent, name = _split(path)
    dfd = open_dir(parent)
    try:
        return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafePathError(
                f"refusing to read {path}: it is a symbolic link; remove it"
            ) from None
        raise
    finally:
        os.close(dfd)


def read_small(path: str, limit: int = 1 << 20) -> bytes:
    """The content of the regular file ``path`` (no link, no FIFO at its last component)."""
    fd = _open_reading(path)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafePathError(f"{path} is not a regular file", errno.EINVAL)
        return os.read(fd, limit)
    finally:
        os.close(fd)


def read_tail(path: str, size: int) -> bytes:
    """The last ``size`` bytes of the log ``path``, read as root from a directory its service's
    user may own: the directories are resolved as :func:`open_dir` does, the file is opened
    without following a link or blocking on a FIFO, and must be a regular file without a second
    hard link (a planted link to a file of root's would show it to whoever reads the status).
    """
    fd = _open_reading(path)
    _check_opened(fd, path, None, verb="read")
    with os.fdopen(fd, "rb") as file:
        file.seek(max(0, os.fstat(fd).st_size - size))
        return file.read(size)


def replace_file(path: str, data: bytes, *, mode: int = 0o600, create_dirs: bool = True) -> None:
    """Write ``data`` to a fresh temporary beside ``path``, then rename it over ``path``.

    The temporary is created ``O_EXCL|O_NOFOLLOW`` under a random name; a link planted at
    ``path`` is replaced by the rename, never followed. On error the temporary is removed.
    """
    parent, name = _split(path)
    dfd = open_dir(parent, create=create_dirs)
    try:
        # os.urandom, as secrets.token_hex: secrets would load hmac and with it OpenSSL (~2 MB
        # in the daemon and its watchdog).
        temp = f".{name}.{os.urandom(6).hex()}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temp, flags, 0o600, dir_fd=dfd)
        try:
            try:
                os.fchmod(fd, mode)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.rename(temp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dfd)
            raise
    finally:
        os.close(dfd)


def rename_in(path: str, new_name: str) -> None:
    """Rename ``path`` to ``new_name`` in the same directory (a link is moved, not followed)."""
    parent, name = _split(path)
    dfd = open_dir(parent)
    try:
        os.rename(name, new_name, src_dir_fd=dfd, dst_dir_fd=dfd)
    finally:
        os.close(dfd)


def private_dir(path: str) -> None:
    """Make ``path`` a directory only we can enter (0700), whoever makes it first.

    Missing parents are created 0755. An existing directory with looser bits is tightened; one
    owned by another user, or a link, is refused.
    """
    parent, name = _split(path)
    dfd = open_dir(parent, create=True)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=dfd)
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=dfd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise UnsafePathError(
                    f"{path} is not a real directory (a link or a file): remove it and try again",
                    e.errno,
                ) from None
            raise
    finally:
        os.close(dfd)
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid():
            raise UnsafePathError(
                f"{path} belongs to uid {info.st_uid}, not to uid {os.geteuid()}: refusing to "
                "use it; remove it (or chown it) and try again",
                errno.EPERM,
            )
        if info.st_mode & 0o7777 != 0o700:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
