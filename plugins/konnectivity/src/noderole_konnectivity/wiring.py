"""What konnectivity contributes to k3s, as plain data: the apiserver's egress selector
configuration, the k3s flags that load it, and the konnectivity-agent DaemonSet.

The apiserver's ``cluster`` egress (pods, kubelets, webhooks) goes over GRPC to the server's UDS;
agents on every node dial the server on the agent port and the egress rides back down their
tunnel. Agents authenticate with a projected service-account token for the audience the server
checks, and trust the server's certificate through the in-pod ``ca.crt``, the k3s server CA that
signs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "is_image_reference",
    "AGENT_IMAGE_REPOSITORY",
    "AUDIENCE",
    "agent_image",
    "agent_manifest",
    "egress_selector_configuration",
    "k3s_config",
    "version_mismatch",
]

AUDIENCE = "system:konnectivity-server"
"""Audience of the agents' service-account token, checked by the server."""
AGENT_NAMESPACE = "kube-system"
AGENT_SERVICE_ACCOUNT = "konnectivity-agent"
AGENT_IMAGE_REPOSITORY = "registry.k8s.io/kas-network-proxy/proxy-agent"
"""The apiserver-network-proxy project's agent image; tags are its releases (``v0.30.3``)."""
_TOKEN_DIR = "/var/run/secrets/tokens"
_TOKEN_FILE = "konnectivity-agent-token"


def egress_selector_configuration(uds_name: str) -> dict[str, Any]:
    """The ``EgressSelectorConfiguration`` sending ``cluster`` traffic over GRPC to ``uds_name``."""
    return {
        "apiVersion": "apiserver.k8s.io/v1beta1",
        "kind": "EgressSelectorConfiguration",
        "egressSelections": [
            {
                "name": "cluster",
                "connection": {
                    "proxyProtocol": "GRPC",
                    "transport": {"uds": {"udsName": uds_name}},
                },
            }
        ],
    }


def k3s_config(egress_config_path: str) -> dict[str, Any]:
    """k3s keys loading the egress configuration; any mode but ``disabled`` makes k3s inject its
    own egress configuration instead."""
    return {
        "egress-selector-mode": "disabled",
        "kube-apiserver-arg": [f"egress-selector-config-file={egress_config_path}"],
    }


def agent_image(cfg: Mapping[str, Any]) -> str:
    """``agent_image`` when set, else proxy-agent at the server's release (``server_version``)."""
    image: str = cfg["agent_image"].strip()
    return image or f"{AGENT_IMAGE_REPOSITORY}:{cfg['server_version']}"


# The grammar of an image reference (the distribution project's, which the container runtimes
# parse): [DOMAIN[:PORT]/]PATH[:TAG][@DIGEST], the path in lower case. Compiled when first used.
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE = (
    rf"(?:{_DOMAIN}/)?{_PATH_PART}(?:/{_PATH_PART})*"
    r"(?::[\w][\w.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)


_TAG_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


def is_image_reference(image: str) -> bool:
    """Whether ``image`` is a reference a container runtime can pull (by its grammar)."""
    repository, colon, tag = image.rpartition(":")
    if colon and repository == AGENT_IMAGE_REPOSITORY:
        # The default image at a release (every apply of a server asks): the tag alone, without
        # compiling the grammar (4M instructions, 2% of `import click`).
        return _is_tag(tag)
    import re

    return re.fullmatch(_REFERENCE, image, re.ASCII) is not None


def _is_tag(text: str) -> bool:
    """``[\\w][\\w.-]{0,127}``, ASCII: an image tag."""
    return (
        0 < len(text) <= 128
        and text[0] not in ".-"
        and all(character in _TAG_CHARACTERS for character in text)
    )


def version_mismatch(cfg: Mapping[str, Any]) -> str | None:
    """Why the agent image and the server differ in release, or None when they agree.

    proxy-agent and konnectivity-server speak one protocol per apiserver-network-proxy release;
    a pair from different releases is a boot that works until the protocol changes under it.
    Only an image tagged like a release is compared (a digest or a private tag is the
    operator's choice, and says nothing comparable).
    """
    image = agent_image(cfg)
    last = image.rsplit("/", 1)[-1]
    if "@" in last or ":" not in last:
        return None
    tag = last.rsplit(":", 1)[1]
    server = cfg["server_version"]
    if tag == server:
        return None
    return (
        f"konnectivity agent image {image} is release {tag} but konnectivity-server is "
        f"{server} (server_version): agent and server should come from one "
        "apiserver-network-proxy release; clear agent_image to follow server_version, or set "
        "server_version to the binary's release"
    )


def agent_manifest(cfg: Mapping[str, Any], host: str) -> list[dict[str, Any]]:
    """The ServiceAccount and DaemonSet of konnectivity-agent, dialling ``host``:agent port.

    Shaped for an HA control plane: the agent runs on the host network and identifies itself by
    the node's address (``--agent-identifiers=ipv4=$(HOST_IP)``), so the server's ``destHost``
    strategy can pick the agent on the node the apiserver dials; ``--sync-forever`` keeps it
    dialling when servers are added after it learned the count.
    """
    labels = {"k8s-app": "konnectivity-agent"}
    health_port = cfg["agent_health_port"]
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": AGENT_SERVICE_ACCOUNT, "namespace": AGENT_NAMESPACE},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {
                "name": "konnectivity-agent",
                "namespace": AGENT_NAMESPACE,
                "labels": labels,
            },
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "priorityClassName": "system-node-critical",
                        "serviceAccountName": AGENT_SERVICE_ACCOUNT,
                        # The node's network: the agent dials the server as the node and is
                        # identified by the node's address. ClusterFirstWithHostNet keeps
                        # cluster DNS names resolvable from the host network.
                        "hostNetwork": True,
                        "dnsPolicy": "ClusterFirstWithHostNet",
                        # Control-plane-only and GPU-only clusters taint their nodes; the agent
                        # must still run there, but not on nodes tainted for other reasons.
                        "tolerations": [
                            {"key": "CriticalAddonsOnly", "operator": "Exists"},
                            {
                                "key": "nvidia.com/gpu",
                                "operator": "Exists",
                                "effect": "NoSchedule",
                            },
                        ],
                        "containers": [
                            {
                                "name": "konnectivity-agent",
                                "image": agent_image(cfg),
                                "command": ["/proxy-agent"],
                                "env": [
                                    {
                                        "name": "HOST_IP",
                                        "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}},
                                    }
                                ],
                                "args": [
                                    "--logtostderr=true",
                                    "--ca-cert=/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
                                    f"--proxy-server-host={host}",
                                    f"--proxy-server-port={cfg['agent_port']}",
                                    f"--admin-server-port={cfg['agent_admin_port']}",
                                    f"--health-server-port={health_port}",
                                    f"--service-account-token-path={_TOKEN_DIR}/{_TOKEN_FILE}",
                                    # destHost routing: the apiserver's dial to a node's
                                    # address reaches that node's agent.
                                    "--agent-identifiers=ipv4=$(HOST_IP)",
                                    # Keep dialling: servers added later (server-join, a 1 -> 3
                                    # scale-up) are reached too.
                                    "--sync-forever=true",
                                ],
                                "volumeMounts": [
                                    {"name": _TOKEN_FILE, "mountPath": _TOKEN_DIR, "readOnly": True}
                                ],
                                "livenessProbe": {
                                    "httpGet": {
                                        "host": "127.0.0.1",
                                        "port": health_port,
                                        "path": "/healthz",
                                    },
                                    "initialDelaySeconds": 15,
                                    "timeoutSeconds": 15,
                                },
                            }
                        ],
                        "volumes": [
                            {
                                "name": _TOKEN_FILE,
                                "projected": {
                                    "sources": [
                                        {
                                            "serviceAccountToken": {
                                                "path": _TOKEN_FILE,
                                                "audience": AUDIENCE,
                                            }
                                        }
                                    ]
                                },
                            }
                        ],
                    },
                },
            },
        },
    ]
