"""What konnectivity contributes to k3s through the k3s plugin's hooks, and life without k3s."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from noderole.clock import FakeClock
from noderole.context import NodeContext
from noderole.plugins import PluginSet
from noderole.records import Service
from noderole.root import NodeRoot
from noderole.steps import StepContext, run_steps

FIRST_BOOT = "/etc/spinifex-eks/first-boot.env"
EGRESS = "/etc/rancher/k3s/egress-selector-config.yaml"
DROPIN = "/etc/rancher/k3s/config.yaml.d/50-noderole.yaml"
AGENT = "/var/lib/rancher/k3s/server/manifests/konnectivity-agent.yaml"

Put = Callable[[str, str], Path]
MakeNode = Callable[..., tuple[PluginSet, NodeContext]]


def k3s_service(make_node: MakeNode, **kwargs: Any) -> Service:
    plugins, node = make_node(**kwargs)
    (service,) = [s for s in plugins.services(node) if s.name == "k3s"]
    return service


def apply_k3s_steps(service: Service, root: Path) -> None:
    run_steps(service.pre_start, StepContext(service="k3s", root=NodeRoot(root), clock=FakeClock()))


def read(root: Path, node_path: str) -> Any:
    return list(yaml.safe_load_all((root / node_path.lstrip("/")).read_text()))


@pytest.fixture
def node_files(put: Put) -> None:
    """A k3s config and a first-boot.env with SANs and the agents' host."""
    put("/etc/rancher/k3s/config.yaml", "kube-apiserver-arg: [audit-log-maxage=30]\n")
    put(FIRST_BOOT, "EKS_KONNECTIVITY_SANS=k.example\nEKS_KONNECTIVITY_HOST=nlb.example.com\n")


@pytest.mark.usefixtures("node_files")
class TestK3sWiring:
    def test_egress_selector_configuration(self, tmp_path: Path, make_node: MakeNode) -> None:
        """The apiserver's cluster egress goes over GRPC to the server's UDS."""
        apply_k3s_steps(k3s_service(make_node), tmp_path)
        assert read(tmp_path, EGRESS) == [
            {
                "apiVersion": "apiserver.k8s.io/v1beta1",
                "kind": "EgressSelectorConfiguration",
                "egressSelections": [
                    {
                        "name": "cluster",
                        "connection": {
                            "proxyProtocol": "GRPC",
                            "transport": {
                                "uds": {"udsName": "/run/konnectivity/konnectivity-server.socket"}
                            },
                        },
                    }
                ],
            }
        ]

    def test_k3s_flags(self, tmp_path: Path, make_node: MakeNode) -> None:
        """k3s loads that file, with its own egress injection disabled; config.yaml's args stay."""
        apply_k3s_steps(k3s_service(make_node), tmp_path)
        assert read(tmp_path, DROPIN) == [
            {
                "egress-selector-mode": "disabled",
                "kube-apiserver-arg": [
                    "audit-log-maxage=30",
                    f"egress-selector-config-file={EGRESS}",
                ],
            }
        ]

    def test_uds_setting_reaches_both_sides(
        self, tmp_path: Path, put: Put, make_node: MakeNode
    ) -> None:
        """One uds_name setting feeds both --uds-name and the apiserver's udsName."""
        put("/etc/noderole/config.toml", "[konnectivity]\nuds_name = '/run/k/k.sock'\n")
        plugins, node = make_node()
        by_name = {s.name: s for s in plugins.services(node)}
        apply_k3s_steps(by_name["k3s"], tmp_path)
        (document,) = read(tmp_path, EGRESS)
        assert document["egressSelections"][0]["connection"]["transport"]["uds"] == {
            "udsName": "/run/k/k.sock"
        }
        assert "--uds-name=/run/k/k.sock" in (by_name["konnectivity-server"].command or ())

    def test_agent_manifest(self, tmp_path: Path, make_node: MakeNode) -> None:
        """The agent DaemonSet dials EKS_KONNECTIVITY_HOST:8132 with an audience-bound token."""
        apply_k3s_steps(k3s_service(make_node), tmp_path)
        account, daemonset = read(tmp_path, AGENT)
        assert account["kind"] == "ServiceAccount"
        assert account["metadata"] == {"name": "konnectivity-agent", "namespace": "kube-system"}
        assert daemonset["kind"] == "DaemonSet"
        pod = daemonset["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == "konnectivity-agent"
        (container,) = pod["containers"]
        assert container["image"] == "registry.k8s.io/kas-network-proxy/proxy-agent:v0.31.0"
        assert "--proxy-server-host=nlb.example.com" in container["args"]
        assert "--proxy-server-port=8132" in container["args"]
        assert "--ca-cert=/var/run/secrets/kubernetes.io/serviceaccount/ca.crt" in container["args"]
        (volume,) = pod["volumes"]
        (source,) = volume["projected"]["sources"]
        token = source["serviceAccountToken"]
        assert token["audience"] == "system:konnectivity-server"
        token_arg = f"--service-account-token-path=/var/run/secrets/tokens/{token['path']}"
        assert token_arg in container["args"]

    def test_empty_host_skips_manifest_with_warning(
        self, tmp_path: Path, put: Put, make_node: MakeNode, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Without EKS_KONNECTIVITY_HOST no agent manifest is staged, and a warning says so."""
        put(FIRST_BOOT, "EKS_KONNECTIVITY_SANS=k.example\nEKS_KONNECTIVITY_HOST=\n")
        with caplog.at_level(logging.WARNING, logger="noderole_konnectivity.plugin"):
            service = k3s_service(make_node)
        assert "EKS_KONNECTIVITY_HOST empty" in caplog.text
        apply_k3s_steps(service, tmp_path)
        assert not (tmp_path / AGENT.lstrip("/")).exists()
        assert (tmp_path / EGRESS.lstrip("/")).exists()


class TestWithoutK3s:
    def test_loads_and_defines_server(self, make_node: MakeNode) -> None:
        """With the k3s plugin absent, konnectivity loads and still defines its service."""
        plugins, node = make_node(k3s=False)
        assert plugins.names() == ["builtin", "konnectivity"]
        names = {s.name for s in plugins.services(node)}
        assert "konnectivity-server" in names
        assert "k3s" not in names
