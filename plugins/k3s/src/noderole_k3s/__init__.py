"""noderole-k3s: the k3s server and agent services, and hooks for plugins that configure k3s.

Plugins contribute to k3s through the hooks in :mod:`noderole_k3s.hookspecs`, returning
:class:`ConfigKeys`, :class:`ConfigFile` and :class:`Manifest` records.
"""

from noderole_k3s.records import ConfigFile, ConfigKeys, Manifest

__all__ = ["ConfigFile", "ConfigKeys", "Manifest"]
