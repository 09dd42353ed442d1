"""The secrets file rendered next to a static-mode service: ``/etc/noderole/env/NAME.env``, 0600.

Runscripts and units are world-readable (``/etc/init.d`` is 0755, ``systemctl show`` prints a
unit's ``Environment=`` to any user), so a :class:`~noderole.records.Secret` value never goes in
them. In static mode the secret assignments go to this root-only file instead, which the runscript
sources in ``start_pre`` and the unit names in ``EnvironmentFile=``. One format serves both
readers: ``KEY="value"`` with sh's double-quote escapes (see :mod:`._quote`).

In exec mode nothing is rendered: ``noderole exec NAME`` re-evaluates the service at boot and
sets its whole environment itself, so no secret is ever written to disk by a backend.
"""

from __future__ import annotations

from noderole.records import Secret, Service
from noderole.render._files import RenderedFile
from noderole.render._quote import envfile_assignment

__all__ = ["ENV_DIR", "env_file_path", "secret_env_file", "secret_keys"]

ENV_DIR = "/etc/noderole/env"
"""Directory of the per-service secrets files."""


def env_file_path(name: str) -> str:
    """Node path of service ``name``'s secrets file."""
    return f"{ENV_DIR}/{name}.env"


def secret_keys(service: Service) -> list[str]:
    """Names of the service's secret variables, sorted (the names are not secret)."""
    return [key for key, value in service.environment.items() if isinstance(value, Secret)]


def secret_env_file(service: Service) -> RenderedFile | None:
    """The 0600 secrets file for ``service``, or None when it has no secret variable."""
    keys = secret_keys(service)
    if not keys:
        return None
    revealed = service.revealed_environment()
    lines = [
        f"# Secrets of {service.name}, written by noderole; readable by root only.",
        *(envfile_assignment(key, revealed[key]) for key in keys),
    ]
    return RenderedFile(
        path=env_file_path(service.name), content="\n".join(lines) + "\n", mode=0o600
    )
