"""Why the kernel would not run a program, in words that point at the cause.

``execve`` says "No such file or directory" for a file that exists when what is missing is the
interpreter its ``#!`` line names (a script written for ``/usr/bin/python3`` on an image without
it) or the program loader an ELF binary names (one built for glibc on a musl image, or for
another machine); and "Exec format error" for a binary of another architecture as for a text
file without a ``#!`` line. Each is a classic of a node that will not boot, and the kernel's
words name none. :func:`why_not` reads the head of the file to say which.

Standard library only (the daemon imports it), and only once an exec has failed.
"""

from __future__ import annotations

import errno
import os
import stat
import struct

__all__ = ["why_not"]

_MACHINES = {
    3: "i386",
    8: "mips",
    20: "ppc",
    21: "ppc64",
    22: "s390x",
    40: "arm",
    62: "x86_64",
    183: "aarch64",
    243: "riscv64",
}
"""ELF ``e_machine`` -> the name ``uname -m`` gives such a machine."""
_PT_INTERP = 3
_HEAD = 4096


def why_not(path: str, error: OSError) -> str:
    """Why ``path`` could not be executed (``error``: what ``execve`` raised), in a few words.

    The file is only looked at, never waited on: it may sit in a directory the service's user
    owns, who can put a FIFO there (an ``open`` would wait for a writer that never comes, and
    the daemon with it) or a file whose first line holds escape sequences (the reason is shown
    on root's terminal; ``status`` and ``apply`` write control characters out).
    """
    head = _head(path)
    if error.errno == errno.ENOENT:
        if head is None:
            return "no such file"
        interpreter = _script_interpreter(head)
        if interpreter is not None and not os.path.exists(interpreter):
            return (
                f"its interpreter {interpreter} (its #! line) does not exist: install it, or "
                "correct the #! line"
            )
        loader = _elf_loader(path, head)
        if loader is not None and not os.path.exists(loader):
            return (
                f"the program loader it names, {loader}, does not exist: it was built for "
                "another machine or C library (glibc or musl) than this one"
            )
    elif error.errno == errno.ENOEXEC and head is not None:
        machine = _elf_machine(head)
        ours = os.uname().machine
        if machine is not None and machine != ours:
            return f"it is a program for {machine}, and this machine is {ours}"
        if machine is None and not head.startswith(b"#!"):
            return (
                "it is not a program this machine runs: a script needs a #! line naming its "
                "interpreter"
            )
    elif error.errno == errno.EACCES:
        mode = _mode(path)
        if mode is not None and stat.S_ISREG(mode) and not mode & 0o111:
            return f"permission denied: it is not executable (mode {mode & 0o7777:04o})"
        if mode is not None and not stat.S_ISREG(mode):
            kind = _KINDS.get(stat.S_IFMT(mode), "special file")
            return f"permission denied: it is a {kind}, not a program file"
    return str(error.strerror or error)


_KINDS = {
    stat.S_IFDIR: "directory",
    stat.S_IFIFO: "FIFO",
    stat.S_IFSOCK: "socket",
    stat.S_IFCHR: "character device",
    stat.S_IFBLK: "block device",
}


def _open(path: str) -> int | None:
    """A descriptor reading the regular file ``path``, or None: opened without waiting (a FIFO
    planted at the path has no writer), and refused unless it is a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _head(path: str) -> bytes | None:
    fd = _open(path)
    if fd is None:
        return None
    try:
        return os.read(fd, _HEAD)
    except OSError:
        return None
    finally:
        os.close(fd)


def _mode(path: str) -> int | None:
    try:
        return os.stat(path).st_mode
    except OSError:
        return None


def _script_interpreter(head: bytes) -> str | None:
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].split()
    return os.fsdecode(words[0]) if words else None


def _elf_header(head: bytes) -> tuple[str, bool] | None:
    """The struct byte-order prefix and whether it is a 64-bit ELF, or None if not ELF."""
    if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
        return None
    return ("<" if head[5] == 1 else ">"), head[4] == 2


def _elf_machine(head: bytes) -> str | None:
    header = _elf_header(head)
    if header is None:
        return None
    (number,) = struct.unpack_from(header[0] + "H", head, 18)
    return _MACHINES.get(number, f"ELF machine {number}")


def _elf_loader(path: str, head: bytes) -> str | None:
    """The PT_INTERP path of an ELF file (its program loader), or None."""
    header = _elf_header(head)
    if header is None:
        return None
    order, wide = header
    word, phoff_at, phentsize_at, offset_at, size_at, smallest = _LAYOUT[wide]
    (phoff,) = struct.unpack_from(order + word, head, phoff_at)
    phentsize, phnum = struct.unpack_from(order + "HH", head, phentsize_at)
    fd = _open(path)
    if fd is None:
        return None
    try:
        for index in range(min(phnum, 64)):
            entry = os.pread(fd, phentsize, phoff + index * phentsize)
            if len(entry) < smallest:
                return None
            if struct.unpack_from(order + "I", entry, 0)[0] != _PT_INTERP:
                continue
            (offset,) = struct.unpack_from(order + word, entry, offset_at)
            (size,) = struct.unpack_from(order + word, entry, size_at)
            name = os.pread(fd, min(size, 4096), offset).split(b"\0", 1)[0]
            return os.fsdecode(name) if name else None
    except (OSError, struct.error, OverflowError):
        return None
    finally:
        os.close(fd)
    return None


_LAYOUT = {
    True: ("Q", 0x20, 0x36, 8, 32, 56),
    False: ("I", 0x1C, 0x2A, 4, 16, 32),
}
"""64-bit ELF or not -> the size of an address, where e_phoff and e_phentsize (then e_phnum)
are in the header, where p_offset and p_filesz are in a program header, and its least size."""
