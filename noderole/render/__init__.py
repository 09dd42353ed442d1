"""Rendering: text made from definitions, written to files; nothing here starts or stops anything.

* :mod:`.openrc` turns :class:`~noderole.records.Service` records into OpenRC runscripts (and the
  runlevel links that enable them), :mod:`.systemd` into systemd units (and their ``.wants``
  links); both quote through :mod:`._quote` and put a static-mode service's secrets in the env
  file :mod:`._envfile` renders.
* :mod:`._files` holds the rendered records and writes them onto a node root (atomically, only
  what changed; :func:`sync_rendered` also removes what an earlier render left behind, and
  :func:`remove_rendered` what was written for services an apply left out of the role).
* :mod:`.graph` draws a :class:`~noderole.plan.Plan` as text, Graphviz dot or Mermaid.

Driving the init system that runs those files is :mod:`noderole.backends`' job.
docs/backends.md holds the mapping tables and the reasons behind them.
"""

from noderole.render._files import (
    Rendered,
    RenderedFile,
    RenderedLink,
    remove_rendered,
    sync_rendered,
    write_rendered,
)
from noderole.render.openrc import render_openrc, render_runscript
from noderole.render.systemd import render_systemd, render_unit

__all__ = [
    "Rendered",
    "RenderedFile",
    "RenderedLink",
    "render_openrc",
    "render_runscript",
    "render_systemd",
    "remove_rendered",
    "render_unit",
    "sync_rendered",
    "write_rendered",
]
