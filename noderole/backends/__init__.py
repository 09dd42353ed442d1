"""Backends: who keeps the started services running.

The engine (:mod:`noderole.engine`) talks to one :class:`Backend`: it asks for each service's
state, starts a service with its fingerprint and stops services in order. Three implement it:

* :mod:`.native`: noderole's own supervisor daemon (any machine, a container, ``--root``);
* :mod:`.openrc`: the machine's OpenRC (``rc-service``), through rendered runscripts;
* :mod:`.systemd`: the machine's systemd (``systemctl``), through rendered units.

:mod:`.detect` picks one from the running init system. Writing runscripts and units is
:mod:`noderole.render`'s job; the init-system backends call it, then drive the init system.
This package's ``__init__`` imports only the protocol, so importing a backend stays cheap.
"""

from noderole.backends._protocol import Backend, BackendStatus

__all__ = ["Backend", "BackendStatus"]
