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
    """Why ``path`` could not be executed (``error``: what ``execve`` raised), in a few words."""
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
    return str(error.strerror or error)


def _head(path: str) -> bytes | None:
    try:
        with open(path, "rb") as file:
            return file.read(_HEAD)
    except OSError:
        return None


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
    try:
        with open(path, "rb") as file:
            for index in range(min(phnum, 64)):
                file.seek(phoff + index * phentsize)
                entry = file.read(phentsize)
                if len(entry) < smallest:
                    return None
                if struct.unpack_from(order + "I", entry, 0)[0] != _PT_INTERP:
                    continue
                (offset,) = struct.unpack_from(order + word, entry, offset_at)
                (size,) = struct.unpack_from(order + word, entry, size_at)
                file.seek(offset)
                name = file.read(min(size, 4096)).split(b"\0", 1)[0]
                return os.fsdecode(name) if name else None
    except (OSError, struct.error):
        return None
    return None


_LAYOUT = {
    True: ("Q", 0x20, 0x36, 8, 32, 56),
    False: ("I", 0x1C, 0x2A, 4, 16, 32),
}
"""64-bit ELF or not -> the size of an address, where e_phoff and e_phentsize (then e_phnum)
are in the header, where p_offset and p_filesz are in a program header, and its least size."""
