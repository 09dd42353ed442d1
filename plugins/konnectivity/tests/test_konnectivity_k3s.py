"""What konnectivity contributes to k3s through the k3s plugin's hooks, and life without k3s.

Tested with noderole's plugin-author kit: services and plans come from the two plugin objects
alone, and k3s's pre-start steps run against a scratch root (``run_prestart``).
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

import noderole
from noderole.clock import FakeClock
from noderole.records import Service
from noderole.testing import (
    ClusterCA,
    ScratchRoot,
    apply_recorded,
    assert_in_plan,
    assert_not_in_plan,
    assert_starts_before,
    load_test_plugins,
    plan_from_plugins,
    run_prestart,
    services_from_plugins,
)
from noderole_k3s import plugin as k3s_plugin
from noderole_konnectivity import plugin as konnectivity_plugin

FIRST_BOOT = "/etc/spinifex-eks/first-boot.env"
EGRESS = "/etc/rancher/k3s/egress-selector-config.yaml"
DROPIN = "/etc/rancher/k3s/config.yaml.d/50-noderole.yaml"
AGENT = "/var/lib/rancher/k3s/server/manifests/konnectivity-agent.yaml"
NO_NET_CHECK = "[noderole]\nnet_check = false\n"
K3S = ("k3s", k3s_plugin)
KONNECTIVITY = ("konnectivity", konnectivity_plugin)


def both_services(node_root: ScratchRoot) -> dict[str, Service]:
    """The services of the k3s and konnectivity plugins together, over node_root."""
    found = services_from_plugins(K3S, KONNECTIVITY, node_root=node_root)
    return {service.name: service for service in found}


def apply_k3s_steps(service: Service, node_root: ScratchRoot) -> list[str]:
    """Run k3s's pre-start steps, which must succeed; the node paths written."""
    outcome = run_prestart(service, node_root)
    assert outcome.ok, outcome.reason
    return outcome.written


def read(node_root: ScratchRoot, node_path: str) -> Any:
    return list(yaml.safe_load_all(node_root.read(node_path)))


@pytest.fixture
def node_files(node_root: ScratchRoot) -> None:
    """A k3s config and a first-boot.env with SANs and the agents' host."""
    node_root.write("/etc/rancher/k3s/config.yaml", "kube-apiserver-arg: [audit-log-maxage=30]\n")
    node_root.write_env(
        FIRST_BOOT,
        {
            "EKS_KONNECTIVITY_SANS": "k.example,nlb.example.com",
            "EKS_KONNECTIVITY_HOST": "nlb.example.com",
        },
    )


@pytest.mark.usefixtures("node_files")
class TestK3sWiring:
    def test_egress_selector_configuration(self, node_root: ScratchRoot) -> None:
        """The apiserver's cluster egress goes over GRPC to the server's UDS."""
        assert EGRESS in apply_k3s_steps(both_services(node_root)["k3s"], node_root)
        assert read(node_root, EGRESS) == [
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

    def test_k3s_flags(self, node_root: ScratchRoot) -> None:
        """k3s loads that file, with its own egress injection disabled; config.yaml's args stay."""
        written = apply_k3s_steps(both_services(node_root)["k3s"], node_root)
        assert written.index(EGRESS) < written.index(DROPIN)
        assert read(node_root, DROPIN) == [
            {
                "egress-selector-mode": "disabled",
                "kube-apiserver-arg": [
                    "audit-log-maxage=30",
                    f"egress-selector-config-file={EGRESS}",
                ],
            }
        ]

    def test_uds_setting_reaches_both_sides(self, node_root: ScratchRoot) -> None:
        """One uds_name setting feeds both --uds-name and the apiserver's udsName."""
        node_root.write_config("[konnectivity]\nuds_name = '/run/k/k.sock'\n")
        by_name = both_services(node_root)
        apply_k3s_steps(by_name["k3s"], node_root)
        (document,) = read(node_root, EGRESS)
        assert document["egressSelections"][0]["connection"]["transport"]["uds"] == {
            "udsName": "/run/k/k.sock"
        }
        assert "--uds-name=/run/k/k.sock" in (by_name["konnectivity-server"].command or ())

    def test_agent_manifest(self, node_root: ScratchRoot) -> None:
        """The agent DaemonSet dials EKS_KONNECTIVITY_HOST:8132 with an audience-bound token."""
        apply_k3s_steps(both_services(node_root)["k3s"], node_root)
        account, daemonset = read(node_root, AGENT)
        assert account["kind"] == "ServiceAccount"
        assert account["metadata"] == {"name": "konnectivity-agent", "namespace": "kube-system"}
        assert daemonset["kind"] == "DaemonSet"
        pod = daemonset["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == "konnectivity-agent"
        (container,) = pod["containers"]
        assert container["image"] == "registry.k8s.io/kas-network-proxy/proxy-agent:v0.30.3"
        assert "--proxy-server-host=nlb.example.com" in container["args"]
        assert "--proxy-server-port=8132" in container["args"]
        assert "--ca-cert=/var/run/secrets/kubernetes.io/serviceaccount/ca.crt" in container["args"]
        (volume,) = pod["volumes"]
        (source,) = volume["projected"]["sources"]
        token = source["serviceAccountToken"]
        assert token["audience"] == "system:konnectivity-server"
        token_arg = f"--service-account-token-path=/var/run/secrets/tokens/{token['path']}"
        assert token_arg in container["args"]

    def test_empty_host_skips_manifest_with_warning(self, node_root: ScratchRoot) -> None:
        """Without EKS_KONNECTIVITY_HOST no agent manifest is staged, and konnectivity-server's
        steps warn about it (only where that service is planned: not in `plan agent`)."""
        node_root.write_env(
            FIRST_BOOT, {"EKS_KONNECTIVITY_SANS": "k.example", "EKS_KONNECTIVITY_HOST": ""}
        )
        services = both_services(node_root)
        warnings = [
            step
            for step in services["konnectivity-server"].pre_start
            if isinstance(step, noderole.Warn)
        ]
        assert [w.message for w in warnings] == [
            "EKS_KONNECTIVITY_HOST empty in /etc/spinifex-eks/first-boot.env: the "
            "konnectivity-agent manifest is not staged, so no agent will connect and apiserver "
            "egress to pods and kubelets will fail"
        ]
        apply_k3s_steps(services["k3s"], node_root)
        assert not node_root.exists(AGENT)
        assert node_root.exists(EGRESS)

    @pytest.mark.parametrize("host", ["https://nlb.example.com", "nlb.example.org"])
    def test_a_host_agents_cannot_use_stages_no_manifest(
        self, node_root: ScratchRoot, host: str
    ) -> None:
        """A host that is not one address, or that the certificate does not name, fails
        konnectivity-server (its own tests say how) and stages no agent manifest: one would
        send every agent in the cluster to dial it."""
        node_root.write_env(
            FIRST_BOOT,
            {"EKS_KONNECTIVITY_SANS": "k.example,nlb.example.com", "EKS_KONNECTIVITY_HOST": host},
        )
        services = both_services(node_root)
        assert any(
            isinstance(step, noderole.Fail) for step in services["konnectivity-server"].pre_start
        )
        apply_k3s_steps(services["k3s"], node_root)
        assert not node_root.exists(AGENT)

    @pytest.mark.parametrize("host", ["fd00::7", "[FD00::7]"])
    def test_an_ipv6_host_is_dialled_in_brackets(self, node_root: ScratchRoot, host: str) -> None:
        """The agent joins host and port as "%s:%d": a bare IPv6 address would read as one
        with more groups."""
        node_root.write_env(
            FIRST_BOOT,
            {"EKS_KONNECTIVITY_SANS": "k.example,fd00::7", "EKS_KONNECTIVITY_HOST": host},
        )
        apply_k3s_steps(both_services(node_root)["k3s"], node_root)
        _, daemonset = read(node_root, AGENT)
        (container,) = daemonset["spec"]["template"]["spec"]["containers"]
        assert "--proxy-server-host=[fd00::7]" in container["args"]

    def test_host_given_means_no_warning(self, node_root: ScratchRoot) -> None:
        """With a host, konnectivity-server has no warning step."""
        node_root.write_env(
            FIRST_BOOT, {"EKS_KONNECTIVITY_SANS": "k.example,nlb", "EKS_KONNECTIVITY_HOST": "nlb"}
        )
        steps = both_services(node_root)["konnectivity-server"].pre_start
        assert not any(isinstance(step, noderole.Warn) for step in steps)


class TestPlans:
    @pytest.mark.parametrize("role", ["server", "server-join"])
    def test_server_after_k3s(self, role: str) -> None:
        """In both server roles konnectivity-server waits for k3s (and k3s for net, cgroups)."""
        plan = plan_from_plugins(role, K3S, KONNECTIVITY)
        assert_starts_before(plan, "k3s", "konnectivity-server")
        assert_starts_before(plan, "net", "k3s", "konnectivity-server")
        assert_starts_before(plan, "cgroups", "konnectivity-server")

    def test_not_on_agents(self) -> None:
        """Role agent has k3s-agent and no konnectivity-server."""
        plan = plan_from_plugins("agent", K3S, KONNECTIVITY)
        assert_in_plan(plan, "k3s-agent")
        assert_not_in_plan(plan, "konnectivity-server", "k3s")

    def test_apply_starts_k3s_then_the_server(
        self,
        node_root: ScratchRoot,
        node_files: None,
        k3s_server: ClusterCA,
        fake_clock: FakeClock,
    ) -> None:
        """Applied (recorded, not started): k3s first, then konnectivity-server, whose
        certificate the k3s CA signed."""
        plan = plan_from_plugins(
            "server", K3S, KONNECTIVITY, config_text=NO_NET_CHECK, node_root=node_root
        )
        report, backend = apply_recorded(plan, node_root, clock=fake_clock)
        assert report.ok, report.failed
        assert backend.names() == ["k3s", "konnectivity-server"]
        assert backend.node_argv("k3s") == [
            "/usr/local/bin/k3s",
            "server",
            "--config",
            "/etc/rancher/k3s/config.yaml",
        ]
        assert k3s_server.signed(node_root.resolve("/var/lib/spinifex-eks/konnectivity/tls.crt"))


class TestWithoutK3s:
    def test_loads_and_defines_server(self) -> None:
        """With the k3s plugin absent, konnectivity loads and still defines its service."""
        assert load_test_plugins(KONNECTIVITY).names() == ["builtin", "konnectivity"]
        names = {s.name for s in services_from_plugins(KONNECTIVITY)}
        assert "konnectivity-server" in names
        assert "k3s" not in names

    def test_plans_without_k3s(self) -> None:
        """Without k3s, role server still plans konnectivity-server, after net."""
        plan = plan_from_plugins("server", KONNECTIVITY)
        assert_starts_before(plan, "net", "konnectivity-server")
        assert_not_in_plan(plan, "k3s")
