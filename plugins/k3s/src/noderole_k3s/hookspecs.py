"""Hooks the k3s plugin calls so other plugins can configure the k3s server.

Registered through ``noderole_addhooks``. Implement them with
``@noderole.hookimpl(optionalhook=True)``: your plugin then still loads when the k3s plugin is
disabled or not installed. Each hook is called once per invocation, while noderole builds the
service definitions; what you return is written by the ``k3s`` service's pre-start steps, before
k3s starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from noderole import hookspec

if TYPE_CHECKING:
    from noderole.context import NodeContext
    from noderole_k3s.records import ConfigFile, Manifest

__all__ = ["noderole_k3s_config", "noderole_k3s_files", "noderole_k3s_manifests"]


@hookspec
def noderole_k3s_config(node: NodeContext) -> Mapping[str, Any] | None:
    """Keys to merge into the k3s server's configuration (``config.yaml`` syntax).

    Scalar values must agree across plugins: two plugins setting the same key to different values
    is an error naming both, and k3s is not started. List values are concatenated (duplicates
    dropped), after the list ``config.yaml`` itself holds. The merged keys are written to a
    drop-in, ``/etc/rancher/k3s/config.yaml.d/50-noderole.yaml``, which k3s reads after
    ``config.yaml``.

    Example::

        import noderole

        @noderole.hookimpl(optionalhook=True)
        def noderole_k3s_config(node):
            return {
                "egress-selector-mode": "disabled",
                "kube-apiserver-arg": ["egress-selector-config-file=/etc/rancher/k3s/egress.yaml"],
            }
    """


@hookspec
def noderole_k3s_files(node: NodeContext) -> ConfigFile | Iterable[ConfigFile] | None:
    """Files the k3s server reads at start, as :class:`noderole_k3s.ConfigFile` records.

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

    Two plugins returning the same file name is an error naming both.

    Example::

        import noderole

        @noderole.hookimpl(optionalhook=True)
        def noderole_k3s_manifests(node):
            from noderole_k3s import Manifest

            return Manifest(name="my-agent.yaml", documents=[
                {"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": "my-agent", "namespace": "kube-system"}}])
    """
