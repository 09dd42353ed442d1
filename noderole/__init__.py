"""noderole: apply a Kubernetes node role at boot.

The public API for plugin authors: ``import noderole`` then ``noderole.Service``,
``noderole.hookimpl``... Names are imported on first use (PEP 562), because ``noderole --help``
runs at boot and must not pay for attrs record classes or pluggy it does not need.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from noderole.__about__ import __version__

if TYPE_CHECKING:
    from noderole.context import NodeContext
    from noderole.errors import (
        BackendError,
        CertificateError,
        ConfigError,
        DefinitionError,
        EnvFileError,
        NoderoleError,
        PlanError,
        PluginError,
        StepError,
        WaitTimeout,
    )
    from noderole.hookspecs import hookimpl, hookspec
    from noderole.records import (
        Call,
        Fail,
        MakeDirectories,
        MintCertificate,
        Secret,
        Service,
        Setting,
        SettingsTable,
        StandIn,
        Supervision,
        WaitForCommand,
        WaitForHttp,
        WaitForPaths,
        WaitForSocket,
        WaitForTcp,
        Warn,
        WriteFile,
    )
    from noderole.steps import StepContext

_WHERE = {
    "hookimpl": "noderole.hookspecs",
    "hookspec": "noderole.hookspecs",
    **dict.fromkeys(
        [
            "Service",
            "Supervision",
            "Secret",
            "MakeDirectories",
            "WriteFile",
            "MintCertificate",
            "Fail",
            "Call",
            "WaitForPaths",
            "WaitForSocket",
            "WaitForTcp",
            "WaitForHttp",
            "WaitForCommand",
            "Warn",
            "Setting",
            "SettingsTable",
            "StandIn",
        ],
        "noderole.records",
    ),
    "StepContext": "noderole.steps",
    "NodeContext": "noderole.context",
    **dict.fromkeys(
        [
            "NoderoleError",
            "PluginError",
            "ConfigError",
            "DefinitionError",
            "PlanError",
            "StepError",
            "WaitTimeout",
            "CertificateError",
            "EnvFileError",
            "BackendError",
        ],
        "noderole.errors",
    ),
}

__all__ = [
    "__version__",
    "hookimpl",
    "hookspec",
    "StepContext",
    "NodeContext",
    "Service",
    "Supervision",
    "Secret",
    "MakeDirectories",
    "WriteFile",
    "MintCertificate",
    "Fail",
    "Call",
    "WaitForPaths",
    "WaitForSocket",
    "WaitForTcp",
    "WaitForHttp",
    "WaitForCommand",
    "Warn",
    "Setting",
    "SettingsTable",
    "StandIn",
    "NoderoleError",
    "PluginError",
    "ConfigError",
    "DefinitionError",
    "PlanError",
    "StepError",
    "WaitTimeout",
    "CertificateError",
    "EnvFileError",
    "BackendError",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'noderole' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
