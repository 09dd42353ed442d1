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

__all__ = ["AUDIENCE", "agent_manifest", "egress_selector_configuration", "k3s_config"]

AUDIENCE = "system:konnectivity-server"
"""Audience of the agents' service-account token, checked by the server."""
AGENT_NAMESPACE = "kube-system"
AGENT_SERVICE_ACCOUNT = "konnectivity-agent"
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


def agent_manifest(cfg: Mapping[str, Any], host: str) -> list[dict[str, Any]]:
    """The ServiceAccount and DaemonSet of konnectivity-agent, dialling ``host``:agent port."""
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
                        # Every node carries a tunnel: egress to a node's pods rides its agent.
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [
                            {
                                "name": "konnectivity-agent",
                                "image": cfg["agent_image"],
                                "command": ["/proxy-agent"],
                                "args": [
                                    "--logtostderr=true",
                                    "--ca-cert=/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
                                    f"--proxy-server-host={host}",
                                    f"--proxy-server-port={cfg['agent_port']}",
                                    f"--admin-server-port={cfg['agent_admin_port']}",
                                    f"--health-server-port={health_port}",
                                    f"--service-account-token-path={_TOKEN_DIR}/{_TOKEN_FILE}",
                                ],
                                "volumeMounts": [
                                    {"name": _TOKEN_FILE, "mountPath": _TOKEN_DIR, "readOnly": True}
                                ],
                                "livenessProbe": {
                                    "httpGet": {"port": health_port, "path": "/healthz"},
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
