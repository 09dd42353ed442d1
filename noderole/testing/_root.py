"""A scratch node root for tests: write the files a plugin reads, read back what it wrote."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TypeAlias

from noderole.config import CONFIG_PATH
from noderole.root import NodeRoot

__all__ = ["RootLike", "ScratchRoot", "as_node_root", "env_file_text"]

RootLike: TypeAlias = "ScratchRoot | NodeRoot | str | os.PathLike[str]"
"""What the kit's helpers accept as a node root."""

_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Values made only of these characters are written bare; anything else is double-quoted.
_BARE = re.compile(r"[A-Za-z0-9_@%+=:,./-]*\Z")


class ScratchRoot:
    """A directory standing for a node's ``/``, with helpers that take node paths.

    Every path argument is a node path (``/etc/spinifex-eks/first-boot.env``); it is resolved
    under :attr:`path`, exactly as ``noderole --root`` resolves it.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.root = NodeRoot(path)
        """The :class:`~noderole.root.NodeRoot` to hand to noderole's own functions."""
        self.root.path.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"ScratchRoot({str(self.path)!r})"

    @property
    def path(self) -> Path:
        """The directory on this machine that stands for ``/``."""
        return self.root.path

    def resolve(self, node_path: str) -> Path:
        """Where ``node_path`` lives on this machine."""
        return self.root.resolve(node_path)

    def write(self, node_path: str, text: str, *, mode: int = 0o644) -> Path:
        """Write ``text`` (UTF-8) at ``node_path``, creating parent directories; return the path.

        ``mode`` is applied exactly (not filtered by the umask): ``0o755`` for a stand-in
        executable, ``0o600`` for a key.
        """
        local = self.resolve(node_path)
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(text, encoding="utf-8")
        local.chmod(mode)
        return local

    def write_env(self, node_path: str, values: Mapping[str, str], *, mode: int = 0o600) -> Path:
        """Write an environment file (``KEY=VALUE`` lines) that noderole parses back to ``values``.

        Plain values are written bare; values with spaces, quotes or other special characters
        are double-quoted and escaped, so the round trip is exact.
        """
        return self.write(node_path, env_file_text(values), mode=mode)

    def write_config(self, text: str) -> Path:
        """Write ``/etc/noderole/config.toml`` (the settings file every plugin table lives in)."""
        return self.write(CONFIG_PATH, text)

    def read(self, node_path: str) -> str:
        """The text of the file at ``node_path``."""
        return self.resolve(node_path).read_text(encoding="utf-8")

    def exists(self, node_path: str) -> bool:
        """True when something (file, directory, socket) is at ``node_path``."""
        return self.resolve(node_path).exists()

    def mode(self, node_path: str) -> int:
        """Permission bits of ``node_path`` (``0o600`` for a key)."""
        return self.resolve(node_path).stat().st_mode & 0o7777


def env_file_text(values: Mapping[str, str]) -> str:
    """The text of an environment file assigning ``values``, in order."""
    lines = []
    for key, value in values.items():
        if not _ENV_KEY.match(key):
            raise ValueError(
                f"environment file key {key!r} is not a variable name "
                "(letters, digits and '_', not starting with a digit)"
            )
        lines.append(f"{key}={_quote(value)}")
    return "".join(f"{line}\n" for line in lines)


def _quote(value: str) -> str:
    if _BARE.match(value):
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def as_node_root(root: RootLike) -> NodeRoot:
    """A :class:`NodeRoot` from any of the kit's ways of naming a root."""
    if isinstance(root, ScratchRoot):
        return root.root
    if isinstance(root, NodeRoot):
        return root
    return NodeRoot(root)
