"""noderole-konnectivity: konnectivity-server, the apiserver egress proxy, and its k3s wiring.

The hook implementations live in :mod:`noderole_konnectivity.plugin` (the entry point).
"""

__all__: list[str] = []
