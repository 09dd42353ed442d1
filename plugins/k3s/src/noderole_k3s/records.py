"""The records other plugins return from the k3s hooks: configuration keys, manifests, files.

All hold their YAML as *data* (keys, or a list of documents), not text: the k3s plugin renders
them with PyYAML, so a contributing plugin needs no YAML library, and tests compare plain
dictionaries. ``ConfigKeys`` and ``ConfigFile`` say which k3s they are for (``applies_to``): the
server (roles ``server`` and ``server-join``), the agent, or both (a ``kubelet-arg`` every node
needs).
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping
from typing import Any

from noderole import DefinitionError, recordclass
from noderole.records import RecordBase

__all__ = ["APPLIES_TO", "ConfigFile", "ConfigKeys", "Manifest"]

APPLIES_TO = ("server", "agent", "all")
"""Which k3s a contribution is for: ``k3s`` (server), ``k3s-agent``, or both."""

_SCALARS = (str, int, float, bool, type(None))

_NAME_EDGE = "abcdefghijklmnopqrstuvwxyz0123456789"


def _is_manifest_name(text: str) -> bool:
    """``[a-z0-9]([a-z0-9.-]*[a-z0-9])?\\.ya?ml``, the whole text, checked without compiling a
    regular expression on every start-up."""
    for suffix in (".yaml", ".yml"):
        if text.endswith(suffix):
            stem = text[: -len(suffix)]
            return (
                stem[:1] != ""
                and stem[0] in _NAME_EDGE
                and stem[-1] in _NAME_EDGE
                and not stem.strip(_NAME_EDGE + ".-")
            )
    return False


def _documents(value: Iterable[Mapping[str, Any]] | Mapping[str, Any]) -> tuple[Any, ...]:
    """One mapping is one document; documents are frozen so a record cannot change after plan."""
    items = [value] if isinstance(value, Mapping) else list(value)
    return tuple(
        types.MappingProxyType(dict(item)) if isinstance(item, Mapping) else item for item in items
    )


def _check_documents(
    inst: Any, attribute: recordclass.Attribute[Any], value: tuple[Any, ...]
) -> None:
    kind = type(inst).__name__
    if not value:
        raise DefinitionError(f"{kind}: field 'documents' must hold at least one YAML document")
    for document in value:
        if not isinstance(document, Mapping):
            raise DefinitionError(
                f"{kind}: field 'documents' has {document!r}; each document is a mapping"
            )


def _check_applies_to(inst: Any, attribute: recordclass.Attribute[Any], value: str) -> None:
    if value not in APPLIES_TO:
        raise DefinitionError(
            f"{type(inst).__name__}: field 'applies_to' must be one of "
            f"{', '.join(repr(v) for v in APPLIES_TO)}, got {value!r}"
        )


def _keys(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only copy; list values become tuples so the record compares and hashes."""
    if not isinstance(value, Mapping):
        raise DefinitionError(
            f"ConfigKeys: field 'keys' must be a mapping of k3s flags to values, got "
            f"{type(value).__name__} {value!r}"
        )
    return types.MappingProxyType(
        {k: tuple(v) if isinstance(v, list | tuple) else v for k, v in value.items()}
    )


def _check_keys(inst: Any, attribute: recordclass.Attribute[Any], value: Mapping[str, Any]) -> None:
    for key, item in value.items():
        if not isinstance(key, str) or not key:
            raise DefinitionError(f"ConfigKeys: field 'keys' has key {key!r}; keys are strings")
        items = item if isinstance(item, tuple) else (item,)
        if not all(isinstance(one, _SCALARS) for one in items):
            raise DefinitionError(
                f"ConfigKeys: k3s key {key!r} is set to {item!r}: values are strings, numbers, "
                "booleans or lists of them"
            )


@recordclass.frozen(kw_only=True, repr=False, eq=False)
class ConfigKeys(RecordBase):
    """Keys to merge into k3s's configuration (``config.yaml`` syntax), for server or agent.

    Scalars must agree across plugins; lists are concatenated (duplicates dropped) after the
    list ``config.yaml`` holds. The merged keys are written to the drop-in
    ``config.yaml.d/50-noderole.yaml`` before the k3s concerned starts.

    Example::

        ConfigKeys(keys={"egress-selector-mode": "disabled"})
        ConfigKeys(keys={"kubelet-arg": ["max-pods=200"]}, applies_to="all")
    """

    keys: Mapping[str, Any] = recordclass.field(converter=_keys, validator=_check_keys, hash=False)
    """Flag names (without ``--``) and their values: scalars, or lists of scalars."""
    applies_to: str = recordclass.field(default="server", validator=_check_applies_to)
    """``server`` (the ``k3s`` service), ``agent`` (``k3s-agent``) or ``all``."""
    origin: str = recordclass.field(default="", eq=False, repr=False)
    """The plugin that returned it (stamped by noderole)."""


@recordclass.frozen(kw_only=True, repr=False, eq=False)
class Manifest(RecordBase):
    """A Kubernetes manifest staged into k3s's auto-deploy directory.

    k3s applies every file in ``/var/lib/rancher/k3s/server/manifests`` on start and whenever it
    changes; the file's base name becomes the AddOn name, so it must be unique and a valid
    Kubernetes name.

    Example::

        Manifest(name="my-agent.yaml", documents=[{"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": "my-agent", "namespace": "kube-system"}}])
    """

    name: str = recordclass.field()
    """File name in the manifests directory (lower case, ends in ``.yaml`` or ``.yml``)."""
    documents: tuple[Mapping[str, Any], ...] = recordclass.field(
        converter=_documents, validator=_check_documents, hash=False
    )
    """The YAML documents, in order (one file, separated by ``---``)."""
    origin: str = recordclass.field(default="", eq=False, repr=False)
    """The plugin that returned it (stamped by noderole)."""

    @name.validator
    def _check_name(self, attribute: recordclass.Attribute[Any], value: str) -> None:
        if not isinstance(value, str) or not _is_manifest_name(value):
            raise DefinitionError(
                f"Manifest: field 'name' must be a file name such as 'konnectivity-agent.yaml' "
                f"(lower case letters, digits, '.' and '-', ending in .yaml), got {value!r}",
                field="name",
                value=value,
            )


@recordclass.frozen(kw_only=True, repr=False, eq=False)
class ConfigFile(RecordBase):
    """A file the k3s server reads at start (an egress selector or audit policy configuration).

    Written before k3s starts; reference it from the configuration you contribute
    (``kube-apiserver-arg: ["egress-selector-config-file=PATH"]``).
    """

    path: str = recordclass.field()
    """Absolute node path."""
    documents: tuple[Mapping[str, Any], ...] = recordclass.field(
        converter=_documents, validator=_check_documents, hash=False
    )
    """The YAML documents."""
    mode: int = 0o600
    """File mode (k3s's own configuration files are private to root)."""
    applies_to: str = recordclass.field(default="server", validator=_check_applies_to)
    """``server`` (written before ``k3s``), ``agent`` (before ``k3s-agent``) or ``all``."""
    origin: str = recordclass.field(default="", eq=False, repr=False)
    """The plugin that returned it (stamped by noderole)."""

    @path.validator
    def _check_path(self, attribute: recordclass.Attribute[Any], value: str) -> None:
        if not isinstance(value, str) or not value.startswith("/"):
            raise DefinitionError(
                f"ConfigFile: field 'path' must be an absolute path, got {value!r}",
                field="path",
                value=value,
            )
