"""What a hook sees of the node: the root, the role, the settings, other plugins' hooks, a clock."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from noderole.clock import Clock, SystemClock
from noderole.root import NodeRoot

if TYPE_CHECKING:
    from pathlib import Path

    import pluggy

    from noderole.config import Config
    from noderole.envfile import EnvFile

__all__ = ["Collector", "NodeContext"]

R = TypeVar("R")


class Collector(Protocol):
    """Calls a hook on each plugin, one by one, and checks and stamps what each returns: the
    loaded plugins (:class:`noderole.plugins.PluginSet`), as :meth:`NodeContext.collect` uses
    them."""

    def collect(self, hook_name: str, kind: type[R], kwargs: Mapping[str, Any]) -> list[R]:
        """The ``kind`` records every plugin's ``hook_name`` returns for ``kwargs``, flattened."""
        ...


class NodeContext:
    """Passed to ``noderole_services`` and ``noderole_standins`` as ``node``.

    Built once per invocation. Environment files read through :meth:`read_env` are parsed once and
    cached, so several hooks reading ``first-boot.env`` cost one read.
    """

    def __init__(
        self,
        *,
        root: NodeRoot,
        config: Config,
        pluginmanager: pluggy.PluginManager,
        clock: Clock | None = None,
        role: str | None = None,
        plugins: Collector | None = None,
    ) -> None:
        self.root = root
        """The node root (``/`` at boot, a scratch directory under ``--root``)."""
        self.config = config
        """Effective configuration of every plugin."""
        self.pluginmanager = pluginmanager
        """The plugin manager of this invocation."""
        self.clock: Clock = clock or SystemClock()
        """The clock (fake in tests)."""
        self.role = role
        """The role being planned, applied, rendered or rehearsed (``server``, ``agent``...);
        under ``hook`` and ``exec``, the role last applied. None when no role is in question
        (``noderole list``, ``config``) or none was ever applied. A service whose definition
        differs between roles can read it instead of being defined twice."""
        self._plugins = plugins
        self._env_cache: dict[str, EnvFile] = {}

    @property
    def hook(self) -> Any:
        """Call other plugins' hooks, including hookspecs added by plugins (``node.hook.x()``)."""
        return self.pluginmanager.hook

    def collect(self, hook_name: str, kind: type[R], **kwargs: Any) -> list[R]:
        """Call every plugin's ``hook_name`` and return the ``kind`` records they give, flattened.

        The way a plugin calls hooks it added with ``noderole_addhooks``: each implementation is
        called on its own, bounded by the hook timeout, every item is checked to be a ``kind``
        and stamped with the plugin that returned it (its ``origin``), exactly as noderole calls
        its own hooks. ``node`` is passed as this context; pass the hook's other arguments by
        keyword. A failure raises :class:`noderole.errors.PluginError` (or the plugin's own
        :class:`noderole.errors.NoderoleError`) naming the plugin and the hook.

        Example (the k3s plugin)::

            keys = node.collect("noderole_k3s_config", ConfigKeys)
        """
        if self._plugins is None:
            from noderole.errors import PluginError

            raise PluginError(
                f"node.collect({hook_name!r}) needs the loaded plugins: build the NodeContext "
                "with plugins= (the PluginSet load_plugins returned), or use "
                "noderole.testing.node_context in a test"
            )
        return self._plugins.collect(hook_name, kind, {"node": self, **kwargs})

    def settings(self, table: str) -> Mapping[str, Any]:
        """Effective values of one settings table (defaults overridden by config.toml)."""
        return self.config.table(table)

    def _local(self, node_path: str) -> str:
        """``root.local(node_path)``; a path that is not absolute, or climbs above ``/``, is a
        :class:`~noderole.errors.DefinitionError` naming it, so that one from config.toml (a
        plugin's ``config = "rel/config.yaml"``) is reported as the file's, with its key."""
        try:
            return self.root.local(node_path)
        except ValueError as error:
            from noderole.errors import DefinitionError

            raise DefinitionError(str(error), field="path", value=node_path) from None

    def resolve(self, node_path: str) -> Path:
        """Where a node path lives on this machine (under ``--root`` when one is given)."""
        from pathlib import Path

        return Path(self._local(node_path))

    def exists(self, node_path: str) -> bool:
        """Whether the node path exists (``resolve(node_path).exists()``, without pathlib: hooks
        run on every ``plan`` and ``apply``, which otherwise import none)."""
        return os.path.exists(self._local(node_path))

    def read_text(self, node_path: str) -> str:
        """The node file's text, read as UTF-8 (``resolve(node_path).read_text("utf-8")``,
        without pathlib); raises ``OSError`` or ``UnicodeDecodeError`` as that does. The file
        must be a regular file of at most 1 MiB: a FIFO (which would wait for a writer) or a
        device is an ``OSError`` at once, naming what it is."""
        from noderole.reading import read_regular

        text = str(read_regular(self._local(node_path)), "utf-8")
        return text.replace("\r\n", "\n").replace("\r", "\n")  # universal newlines, as open()

    def read_env(self, node_path: str) -> EnvFile:
        """Parse a ``KEY=VALUE`` environment file; a missing file reads as empty.

        Nothing in the file is executed. Malformed lines are reported in ``EnvFile.warnings`` and
        skipped; an undecodable file raises :class:`noderole.errors.EnvFileError`.
        """
        cached = self._env_cache.get(node_path)
        if cached is None:
            from noderole.envfile import read_env_file

            cached = read_env_file(self._local(node_path), display_path=node_path)
            self._env_cache[node_path] = cached
        return cached
