"""The per-invocation object every command receives as ``ctx.obj``: the node's operations plus
what only the command line has (``--debug``).

The operations and their wiring live in :mod:`noderole.operations`; commands parse, call one and
print the result.
"""

from __future__ import annotations

from noderole.clock import Clock
from noderole.operations import Operations
from noderole.root import NodeRoot

__all__ = ["App"]


class App(Operations):
    """:class:`~noderole.operations.Operations` with the command line's own options."""

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
        super().__init__(
            root=root,
            disabled_plugins=disabled_plugins,
            clock=clock,
            plugin_objects=plugin_objects,
            autoload=autoload,
        )
        self.debug = debug
        """``--debug``: show tracebacks."""
