"""The node root: where the node's absolute paths live on this machine.

At boot the root is ``/``. With ``--root DIR`` (or ``NODEROLE_ROOT``) every absolute path noderole
or a plugin reads, writes or executes resolves under DIR, so a whole boot can be rehearsed in a
scratch directory without privileges. Kernel interfaces (``/proc``, ``/sys``, ``/dev``) are never
re-rooted: they describe the real machine, and the ``net`` and ``cgroups`` checks must see it.

Internal module: the public name is ``noderole.NodeRoot``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["KERNEL_PREFIXES", "ROOT_ENV", "NodeRoot", "climbs_out"]

ROOT_ENV = "NODEROLE_ROOT"
"""Environment variable that sets the root, and that children see."""

KERNEL_PREFIXES = ("/proc", "/sys", "/dev")
"""Paths that always mean the real machine."""


def climbs_out(path: str) -> bool:
    """True when the absolute node path's ``..`` components climb above ``/``.

    ``/a/../b`` stays inside the root; ``/../tmp/x`` does not: under ``--root`` it would resolve
    outside the scratch directory. Records refuse such paths and :meth:`NodeRoot.resolve` never
    maps one.
    """
    depth = 0
    for part in path.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False


class NodeRoot:
    """Maps node paths (as the booted machine sees them) to paths on this machine.

    A plain class rather than an attrs record: it is built by ``noderole --help``'s code path,
    which must stay cheap at boot. It imports pathlib only when a :class:`~pathlib.Path` is asked
    for (:attr:`path`, :meth:`resolve`): ``status`` reads its files through :meth:`local`, and
    pathlib (with urllib.parse and ipaddress) is about a tenth of its start-up.
    """

    __slots__ = ("_path", "text")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.text: str = os.path.abspath(os.fspath(path))
        """The directory that stands for ``/``, absolute and normalized, as a string."""
        self._path: Path | None = None

    @property
    def path(self) -> Path:
        """The directory that stands for ``/``."""
        if self._path is None:
            from pathlib import Path

            self._path = Path(self.text)
        return self._path

    def __repr__(self) -> str:
        return f"NodeRoot({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NodeRoot) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    @classmethod
    def from_environment(cls, value: str | os.PathLike[str] | None = None) -> NodeRoot:
        """The root named by ``value``, else by ``NODEROLE_ROOT``, else ``/``."""
        chosen = value if value is not None else os.environ.get(ROOT_ENV) or "/"
        return cls(chosen)

    @property
    def is_real(self) -> bool:
        """True when the root is ``/``: paths are used as they are."""
        return self.text == "/"

    def resolve(self, node_path: str | os.PathLike[str]) -> Path:
        """The path on this machine for an absolute node path."""
        from pathlib import Path

        return Path(self.local(node_path))

    def local(self, node_path: str | os.PathLike[str]) -> str:
        """:meth:`resolve`'s path as a string, without importing pathlib."""
        text = os.fspath(node_path)
        if not text.startswith("/"):
            raise ValueError(f"node paths are absolute, got {text!r}")
        if climbs_out(text):
            raise ValueError(
                f"node path {text!r} climbs above / with '..', so it would leave the root; "
                f"write it without '..'"
            )
        # The components as PurePosixPath parts them: empty and "." ones dropped, ".." kept.
        parts = [part for part in text.split("/") if part not in ("", ".")]
        # POSIX keeps exactly two leading slashes as they are (implementation-defined): such a
        # path is no kernel interface's.
        lead = "//" if text.startswith("//") and not text.startswith("///") else "/"
        if self.is_real or (lead == "/" and parts and "/" + parts[0] in KERNEL_PREFIXES):
            return lead + "/".join(parts)
        return os.path.join(self.text, *parts)

    def to_node(self, local: str | os.PathLike[str]) -> str:
        """The node path for a path on this machine (inverse of :meth:`resolve`)."""
        from pathlib import Path

        path = Path(os.path.abspath(os.fspath(local)))
        if self.is_real:
            return str(path)
        try:
            return "/" + str(path.relative_to(self.path)).removeprefix(".")
        except ValueError:
            return str(path)

    def environment(self) -> dict[str, str]:
        """Variables a child process needs to see the same root."""
        return {} if self.is_real else {ROOT_ENV: self.text}
