"""The per-invocation application object every command receives as ``ctx.obj``.

Built from the global options; builds the plugin manager, configuration and node context lazily and
at most once, so ``noderole --help`` loads no plugin and a command that needs none never
pays for it.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from noderole.clock import Clock, SystemClock
from noderole.root import NodeRoot

if TYPE_CHECKING:
    from noderole.config import Config
    from noderole.context import NodeContext
    from noderole.plugins import PluginSet

__all__ = ["App"]


class App:
    """Global options of one ``noderole`` invocation, and what they lead to.

    A plain class (not attrs): it is built on ``noderole --help``'s path, which must stay cheap.
    """

    def __init__(
        self,
        *,
        root: NodeRoot,
        debug: bool = False,
        disabled_plugins: tuple[str, ...] = (),
        clock: Clock | None = None,
        plugin_objects: tuple[tuple[str, object], ...] = (),
        autoload: bool | None = None,
    ) -> None:
        self.root = root
        """``--root`` / ``NODEROLE_ROOT`` (``/`` at boot)."""
        self.debug = debug
        """``--debug``: show tracebacks."""
        self.disabled_plugins = disabled_plugins
        """``--disable-plugin`` names (entry-point or plugin names)."""
        self.clock: Clock = clock or SystemClock()
        """The clock (fake in tests)."""
        self.plugin_objects = plugin_objects
        """Plugins given as objects, registered after the built-in one (tests, embedding)."""
        self.autoload = autoload
        """Load entry-point plugins (None: unless NODEROLE_DISABLE_PLUGIN_AUTOLOAD=1)."""

    @functools.cached_property
    def plugins(self) -> PluginSet:
        """The loaded plugins (built-in first, then entry points)."""
        from noderole.plugins import load_plugins

        return load_plugins(
            disabled=self.disabled_plugins, plugins=self.plugin_objects, autoload=self.autoload
        )

    @functools.cached_property
    def config(self) -> Config:
        """Effective configuration: plugin defaults overridden by ``/etc/noderole/config.toml``."""
        from noderole.config import load_config

        return load_config(self.root, self.plugins.settings_tables())

    @functools.cached_property
    def node(self) -> NodeContext:
        """The node context hooks receive."""
        from noderole.context import NodeContext

        return NodeContext(
            root=self.root, config=self.config, pluginmanager=self.plugins.manager, clock=self.clock
        )
