"""The records other plugins return from the k3s hooks: manifests and files k3s reads at start.

Both hold their YAML as *data* (a list of documents), not text: the k3s plugin renders them with
PyYAML, so a contributing plugin needs no YAML library, and tests compare plain dictionaries.
"""

from __future__ import annotations

import re
import types
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from noderole import DefinitionError

__all__ = ["ConfigFile", "Manifest"]

_MANIFEST_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?\.ya?ml$")


def _documents(value: Iterable[Mapping[str, Any]] | Mapping[str, Any]) -> tuple[Any, ...]:
    """One mapping is one document; documents are frozen so a record cannot change after plan."""
    items = [value] if isinstance(value, Mapping) else list(value)
    return tuple(
        types.MappingProxyType(dict(item)) if isinstance(item, Mapping) else item for item in items
    )


def _check_documents(inst: Any, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
    kind = type(inst).__name__
    if not value:
        raise DefinitionError(f"{kind}: field 'documents' must hold at least one YAML document")
    for document in value:
        if not isinstance(document, Mapping):
            raise DefinitionError(
                f"{kind}: field 'documents' has {document!r}; each document is a mapping"
            )


@attrs.frozen(kw_only=True)
class Manifest:
    """A Kubernetes manifest staged into k3s's auto-deploy directory.

    k3s applies every file in ``/var/lib/rancher/k3s/server/manifests`` on start and whenever it
    changes; the file's base name becomes the AddOn name, so it must be unique and a valid
    Kubernetes name.

    Example::

        Manifest(name="my-agent.yaml", documents=[{"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": "my-agent", "namespace": "kube-system"}}])
    """

    name: str = attrs.field()
    """File name in the manifests directory (lower case, ends in ``.yaml`` or ``.yml``)."""
    documents: tuple[Mapping[str, Any], ...] = attrs.field(
        converter=_documents, validator=_check_documents, hash=False
    )
    """The YAML documents, in order (one file, separated by ``---``)."""
    origin: str = attrs.field(default="", eq=False, repr=False)
    """The plugin that returned it (filled in by the k3s plugin)."""

    @name.validator
    def _check_name(self, attribute: attrs.Attribute[Any], value: str) -> None:
        if not isinstance(value, str) or not _MANIFEST_NAME.match(value):
            raise DefinitionError(
                f"Manifest: field 'name' must be a file name such as 'konnectivity-agent.yaml' "
                f"(lower case letters, digits, '.' and '-', ending in .yaml), got {value!r}"
            )


@attrs.frozen(kw_only=True)
class ConfigFile:
    """A file the k3s server reads at start (an egress selector or audit policy configuration).

    Written before k3s starts; reference it from the configuration you contribute
    (``kube-apiserver-arg: ["egress-selector-config-file=PATH"]``).
    """

    path: str = attrs.field()
    """Absolute node path."""
    documents: tuple[Mapping[str, Any], ...] = attrs.field(
        converter=_documents, validator=_check_documents, hash=False
    )
    """The YAML documents."""
    mode: int = 0o600
    """File mode (k3s's own configuration files are private to root)."""
    origin: str = attrs.field(default="", eq=False, repr=False)
    """The plugin that returned it (filled in by the k3s plugin)."""

    @path.validator
    def _check_path(self, attribute: attrs.Attribute[Any], value: str) -> None:
        if not isinstance(value, str) or not value.startswith("/"):
            raise DefinitionError(
                f"ConfigFile: field 'path' must be an absolute path, got {value!r}"
            )
