"""Reading a file that a configuration or a plugin names: a regular file, bounded in size.

A path in ``config.toml`` can be mistyped onto a FIFO (opening one for reading waits for a
writer: a boot that hangs), a device (``/dev/zero`` never ends: memory until the OOM killer) or
a disk image. Such a file is refused before anything is read, with an :class:`OSError` whose
``strerror`` says what it is, so each caller's message (an environment file, a CA) names the
path and the fix as it does for any unreadable file. Symbolic links are followed: these are the
node's own configuration files, not files another user could plant.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Any

__all__ = ["LIMIT", "RECORD_LIMIT", "loads_json", "read_json", "read_regular", "read_regular_file"]

LIMIT = 1 << 20
"""The most bytes such a file may hold: an environment file or a PEM bundle is a few KiB."""

RECORD_LIMIT = 64 << 20
"""The most bytes one of noderole's own records may hold (its plan, applied fingerprints, last
apply, manifest): about 2 KiB a service in the plan, so room for tens of thousands."""

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def read_regular(path: str | os.PathLike[str], *, limit: int = LIMIT) -> bytes:
    """The content of ``path``, which must be a regular file of at most ``limit`` bytes.

    Raises :class:`OSError` (``FileNotFoundError`` when absent) with ``filename`` set:
    ``EINVAL`` "not a regular file (a FIFO)" and the like (``IsADirectoryError`` for a
    directory), ``EFBIG`` when it is too large.
    """
    return read_regular_file(path, limit=limit)[0]


def read_regular_file(
    path: str | os.PathLike[str],
    *,
    dir_fd: int | None = None,
    follow_symlinks: bool = True,
    limit: int = LIMIT,
) -> tuple[bytes, os.stat_result]:
    """:func:`read_regular`, with the file's ``fstat`` (of the file read, not of a name that
    may have been replaced since); ``path`` relative to ``dir_fd`` when given. Without
    ``follow_symlinks`` a symbolic link at ``path`` is ``ELOOP`` (``O_NOFOLLOW``): what a
    serving pair and the stamp of its check read.
    """
    # O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a writer.
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    fd = os.open(path, flags, dir_fd=dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "an unknown kind")
            # A directory is IsADirectoryError, as open() says; the rest plain OSError.
            number = errno.EISDIR if stat.S_ISDIR(info.st_mode) else errno.EINVAL
            raise OSError(number, f"not a regular file ({kind})", os.fspath(path))
        if info.st_size > limit:
            raise OSError(errno.EFBIG, _too_large(info.st_size, limit), os.fspath(path))
        # One read of the size fstat gave (and one byte more): a file that grew since (or a
        # /proc file, whose size says 0), or a read cut short, is read on until its end or past
        # the limit.
        data = os.read(fd, info.st_size + 1)
        if len(data) != info.st_size:
            chunks = [data]
            total = len(data)
            while total <= limit:
                chunk = os.read(fd, limit + 1 - total)
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
            data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(errno.EFBIG, _too_large(len(data), limit), os.fspath(path))
    return data, info


def _too_large(size: int, limit: int) -> str:
    most = f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit} bytes"
    return f"{size} bytes, more than the {most} such a file may hold"


def read_json(path: str | os.PathLike[str], *, limit: int = LIMIT) -> Any:
    """The JSON document in the regular file ``path`` (at most ``limit`` bytes).

    For the files noderole writes and reads back (its state, records and caches): a FIFO, a
    device or a file too large is refused at once as by :func:`read_regular` (``OSError``), and
    text that is not JSON, or nested deeper than the parser can go, is a ``ValueError``: every
    caller takes either for a damaged file.
    """
    return loads_json(read_regular(path, limit=limit))


def loads_json(data: str | bytes) -> Any:
    """``json.loads(data)``, with JSON nested too deeply for the parser (which recurses) a
    ``ValueError`` like any other text that is not JSON, not a ``RecursionError``."""
    from noderole.supervisor._jsontext import loads

    try:
        return loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
