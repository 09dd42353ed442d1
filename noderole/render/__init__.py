"""Render services for the init system that owns the machine: OpenRC runscripts or systemd units.

One :class:`~noderole.records.Service` definition becomes a runscript (:mod:`.openrc`) or a unit
(:mod:`.systemd`) plus the links that enable it; :func:`write_rendered` puts them on a node root.
docs/backends.md holds the mapping tables and the reasons behind them.
"""

from noderole.backends._rendered import (
    Rendered,
    RenderedFile,
    RenderedLink,
    sync_rendered,
    write_rendered,
)
from noderole.backends.openrc import render_openrc, render_runscript
from noderole.backends.systemd import render_systemd, render_unit

__all__ = [
    "Rendered",
    "RenderedFile",
    "RenderedLink",
    "render_openrc",
    "render_runscript",
    "render_systemd",
    "render_unit",
    "sync_rendered",
    "write_rendered",
]
