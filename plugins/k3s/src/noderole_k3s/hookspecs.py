"""Hooks the k3s plugin calls so other plugins can configure the k3s server and agent.

Registered through ``noderole_addhooks``. Implement them with
``@noderole.hookimpl(optionalhook=True)``: your plugin then still loads when the k3s plugin is
disabled or not installed. Each hook returns records (one, a list, or None) and is called through
``node.collect``, like noderole's own hooks: one plugin at a time, under the hook timeout, every
record type-checked and stamped with your plugin's name. What you return is written by the
pre-start steps of ``k3s`` (``applies_to="server"``, the default), of ``k3s-agent``
(``applies_to="agent"``) or of both (``"all"``), before that k3s starts: a plugin never needs a
service of its own ordered before k3s to write a drop-in. ``node.role`` says which role is being
planned when you need it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from noderole import hookspec

if TYPE_CHECKING:
    from noderole import NodeContext
    from noderole_k3s.records import ConfigFile, ConfigKeys, Manifest

__all__ = ["noderole_k3s_config", "noderole_k3s_files", "noderole_k3s_manifests"]


@hookspec
def noderole_k3s_config(node: NodeContext) -> ConfigKeys | Iterable[ConfigKeys] | None:
    """Keys to merge into k3s's configuration (``config.yaml`` syntax), as ``ConfigKeys``.

    Scalar values must agree across plugins: two plugins setting the same key to different values
    is an error naming both, and that k3s is not started. List values are concatenated
    (duplicates dropped), after the list ``config.yaml`` itself holds. The merged keys are written
    to a drop-in, ``/etc/rancher/k3s/config.yaml.d/50-noderole.yaml``, which k3s reads after
    ``config.yaml``: by the server's pre-start for ``applies_to="server"`` (the default), by the
    agent's for ``"agent"``, by both for ``"all"`` (kubelet arguments every node needs).

    Example::

        import noderole

        @noderole.hookimpl(optionalhook=True)
        def noderole_k3s_config(node):
            from noderole_k3s import ConfigKeys

            return [
                ConfigKeys(keys={
                    "egress-selector-mode": "disabled",
                    "kube-apiserver-arg": [
                        "egress-selector-config-file=/etc/rancher/k3s/egress.yaml"],
                }),
                ConfigKeys(keys={"kubelet-arg": ["max-pods=200"]}, applies_to="all"),
            ]
    """


@hookspec
def noderole_k3s_files(node: NodeContext) -> ConfigFile | Iterable[ConfigFile] | None:
    """Files k3s reads at start, as :class:`noderole_k3s.ConfigFile` records.

    Written by the pre-start of the k3s the record ``applies_to`` (the server by default).

    Example::

        import noderole

        @noderole.hookimpl(optionalhook=True)
        def noderole_k3s_files(node):
            from noderole_k3s import ConfigFile

            return ConfigFile(path="/etc/rancher/k3s/audit-policy.yaml", documents=[
                {"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
                 "rules": [{"level": "Metadata"}]}])
    """


@hookspec
def noderole_k3s_manifests(node: NodeContext) -> Manifest | Iterable[Manifest] | None:
    """Manifests to stage into k3s's auto-deploy directory, as :class:`noderole_k3s.Manifest`.

    Staged by the server's pre-start (agents have no auto-deploy directory). Two plugins
    returning the same file name is an error naming both.

    Example::

        import noderole

        @noderole.hookimpl(optionalhook=True)
        def noderole_k3s_manifests(node):
            from noderole_k3s import Manifest

            return Manifest(name="my-agent.yaml", documents=[
                {"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": "my-agent", "namespace": "kube-system"}}])
    """
