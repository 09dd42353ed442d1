"""The konnectivity-agent manifest for an HA control plane, validated against the real schemas.

Every document the plugin stages is checked against the Kubernetes OpenAPI schemas
(``kubernetes-validate``, strict: an unknown field is an error), and the apiserver's
``EgressSelectorConfiguration`` field by field against its published ``apiserver.k8s.io/v1beta1``
definition. The hooks are called one at a time with the kit's ``call_hook``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kubernetes_validate
import pytest

import noderole
from noderole.testing import ScratchRoot, call_hook, services_from_plugins
from noderole_k3s import ConfigFile, Manifest
from noderole_k3s import plugin as k3s_plugin
from noderole_konnectivity import plugin as konnectivity_plugin

FIRST_BOOT = "/etc/spinifex-eks/first-boot.env"
K3S = ("k3s", k3s_plugin)
KONNECTIVITY = ("konnectivity", konnectivity_plugin)
# Kubernetes releases k3s ships around the seed's apiserver-network-proxy release.
KUBERNETES_VERSIONS = ["1.29.0", "1.31.0"]


def hook(node_root: ScratchRoot, name: str, config_text: str | None = None) -> list[Any]:
    """The konnectivity plugin's ``name`` hook alone, with the k3s plugin's hookspecs loaded."""
    return call_hook(
        KONNECTIVITY, name, with_plugins=(K3S,), node_root=node_root, config_text=config_text
    )


def documents(node_root: ScratchRoot, config_text: str | None = None) -> list[Mapping[str, Any]]:
    (manifest,) = hook(node_root, "noderole_k3s_manifests", config_text)
    assert isinstance(manifest, Manifest)
    assert manifest.origin == "konnectivity"
    return [_plain(document) for document in manifest.documents]


def daemonset(node_root: ScratchRoot, config_text: str | None = None) -> Mapping[str, Any]:
    (found,) = [d for d in documents(node_root, config_text) if d["kind"] == "DaemonSet"]
    return found


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def warnings(node_root: ScratchRoot) -> list[str]:
    (server,) = [
        s
        for s in services_from_plugins(KONNECTIVITY, node_root=node_root)
        if s.name == "konnectivity-server"
    ]
    return [step.message for step in server.pre_start if isinstance(step, noderole.Warn)]


@pytest.fixture(autouse=True)
def first_boot(node_root: ScratchRoot) -> None:
    node_root.write_env(
        FIRST_BOOT,
        {
            "EKS_KONNECTIVITY_SANS": "k.example,nlb.example.com",
            "EKS_KONNECTIVITY_HOST": "nlb.example.com",
        },
    )


class TestSchemas:
    @pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
    def test_every_staged_document_is_valid(self, node_root: ScratchRoot, version: str) -> None:
        """ServiceAccount, DaemonSet (and any RBAC added later) pass the strict schema check."""
        staged = documents(node_root)
        assert {d["kind"] for d in staged} >= {"ServiceAccount", "DaemonSet"}
        for document in staged:
            kubernetes_validate.validate(dict(document), version, strict=True)

    def test_the_check_catches_a_wrong_field(self, node_root: ScratchRoot) -> None:
        """The schema check is strict: a misspelt pod field fails it (so the test can fail)."""
        broken = dict(daemonset(node_root))
        broken["spec"] = {**broken["spec"], "tolerationz": []}
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[-1], strict=True)


class TestHighAvailability:
    def test_agent_identifies_itself_by_the_host_address(self, node_root: ScratchRoot) -> None:
        """--agent-identifiers=ipv4=$(HOST_IP), HOST_IP from the downward API's status.hostIP."""
        (container,) = daemonset(node_root)["spec"]["template"]["spec"]["containers"]
        assert "--agent-identifiers=ipv4=$(HOST_IP)" in container["args"]
        assert container["env"] == [
            {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}
        ]

    def test_keeps_dialling_servers_added_later(self, node_root: ScratchRoot) -> None:
        """--sync-forever=true: a 1 -> 3 scale-up of the control plane is reached."""
        (container,) = daemonset(node_root)["spec"]["template"]["spec"]["containers"]
        assert "--sync-forever=true" in container["args"]

    def test_host_network_with_cluster_dns(self, node_root: ScratchRoot) -> None:
        """hostNetwork with ClusterFirstWithHostNet; the liveness probe asks 127.0.0.1."""
        pod = daemonset(node_root)["spec"]["template"]["spec"]
        assert pod["hostNetwork"] is True
        assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
        (container,) = pod["containers"]
        assert container["livenessProbe"]["httpGet"] == {
            "host": "127.0.0.1",
            "port": 8134,
            "path": "/healthz",
        }

    def test_tolerates_control_plane_only_and_gpu_nodes_only(self, node_root: ScratchRoot) -> None:
        """CriticalAddonsOnly and nvidia.com/gpu:NoSchedule, and no blanket toleration."""
        pod = daemonset(node_root)["spec"]["template"]["spec"]
        assert pod["tolerations"] == [
            {"key": "CriticalAddonsOnly", "operator": "Exists"},
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        ]
        assert all("key" in toleration for toleration in pod["tolerations"])


class TestVersionPairing:
    def image(self, node_root: ScratchRoot, config_text: str | None = None) -> str:
        (container,) = daemonset(node_root, config_text)["spec"]["template"]["spec"]["containers"]
        image: str = container["image"]
        return image

    def test_default_pair_is_one_release(self, node_root: ScratchRoot) -> None:
        """By default the agent image is proxy-agent at the server's release, v0.30.3."""
        assert self.image(node_root) == "registry.k8s.io/kas-network-proxy/proxy-agent:v0.30.3"
        assert warnings(node_root) == []

    def test_agent_follows_server_version(self, node_root: ScratchRoot) -> None:
        """Setting server_version moves the agent image with it, without a warning."""
        config = '[konnectivity]\nserver_version = "v0.31.1"\n'
        image = self.image(node_root, config)
        assert image == "registry.k8s.io/kas-network-proxy/proxy-agent:v0.31.1"
        assert warnings(node_root) == []

    def test_different_release_warns_at_plan_time(self, node_root: ScratchRoot) -> None:
        """An agent image of another release is used as asked, with a Warn step naming both."""
        image = "registry.k8s.io/kas-network-proxy/proxy-agent:v0.31.0"
        node_root.write_config(f'[konnectivity]\nagent_image = "{image}"\n')
        assert self.image(node_root).endswith(":v0.31.0")
        (message,) = warnings(node_root)
        assert "release v0.31.0" in message
        assert "konnectivity-server is v0.30.3" in message
        assert "clear agent_image" in message

    def test_a_digest_is_not_compared(self, node_root: ScratchRoot) -> None:
        """An image pinned by digest says nothing comparable: no warning."""
        node_root.write_config(
            '[konnectivity]\nagent_image = "mirror.example/proxy-agent@sha256:' + "a" * 64 + '"\n'
        )
        assert warnings(node_root) == []


# apiserver.k8s.io/v1beta1, as the apiserver publishes it (k8s.io/apiserver
# pkg/apis/apiserver/v1beta1/types.go): each type's JSON fields, their kind, whether required,
# and the values an enumerated string may take.
STRING, LIST, OBJECT = "string", "list", "object"
EGRESS_V1BETA1: dict[str, dict[str, tuple[str, bool, Any]]] = {
    "EgressSelectorConfiguration": {
        "apiVersion": (STRING, True, {"apiserver.k8s.io/v1beta1"}),
        "kind": (STRING, True, {"EgressSelectorConfiguration"}),
        "egressSelections": (LIST, True, "EgressSelection"),
    },
    "EgressSelection": {
        # "master" is the deprecated spelling of controlplane.
        "name": (STRING, True, {"controlplane", "etcd", "cluster", "master"}),
        "connection": (OBJECT, True, "Connection"),
    },
    "Connection": {
        "proxyProtocol": (STRING, True, {"HTTPConnect", "GRPC", "Direct"}),
        "transport": (OBJECT, False, "Transport"),
    },
    "Transport": {
        "tcp": (OBJECT, False, "TCPTransport"),
        "uds": (OBJECT, False, "UDSTransport"),
    },
    "UDSTransport": {"udsName": (STRING, True, None)},
    "TCPTransport": {
        "url": (STRING, True, None),
        "tlsConfig": (OBJECT, False, "TLSConfig"),
    },
    "TLSConfig": {
        "caBundle": (STRING, False, None),
        "clientKey": (STRING, False, None),
        "clientCert": (STRING, False, None),
    },
}


def check_egress(value: Any, type_name: str, where: str = "") -> list[str]:
    """Every way ``value`` departs from the v1beta1 type ``type_name``, as ``path: problem``."""
    fields = EGRESS_V1BETA1[type_name]
    if not isinstance(value, Mapping):
        return [f"{where or '.'}: {type_name} must be an object"]
    problems = [f"{where}.{key}: unknown field" for key in value if key not in fields]
    for key, (kind, required, detail) in fields.items():
        path = f"{where}.{key}"
        if key not in value:
            if required:
                problems.append(f"{path}: required")
            continue
        item = value[key]
        if kind == STRING:
            if not isinstance(item, str) or not item:
                problems.append(f"{path}: must be a non-empty string")
            elif detail is not None and item not in detail:
                problems.append(f"{path}: {item!r} not one of {sorted(detail)}")
        elif kind == LIST:
            if not isinstance(item, list | tuple) or not item:
                problems.append(f"{path}: must be a non-empty list")
            else:
                for index, entry in enumerate(item):
                    problems += check_egress(entry, detail, f"{path}[{index}]")
        else:
            problems += check_egress(item, detail, path)
    return problems


class TestEgressSelector:
    def configuration(self, node_root: ScratchRoot) -> Any:
        (config_file,) = hook(node_root, "noderole_k3s_files")
        assert isinstance(config_file, ConfigFile)
        (document,) = config_file.documents
        return _plain(document)

    def test_matches_the_v1beta1_definition(self, node_root: ScratchRoot) -> None:
        """Every field is one v1beta1 defines, with the right kind and an allowed value."""
        assert check_egress(self.configuration(node_root), "EgressSelectorConfiguration") == []

    def test_cluster_over_grpc_to_the_uds(self, node_root: ScratchRoot) -> None:
        """The cluster egress is GRPC over the server's UDS (and only UDS: a GRPC proxy has no
        TCP transport here)."""
        (selection,) = self.configuration(node_root)["egressSelections"]
        assert selection["name"] == "cluster"
        assert selection["connection"]["proxyProtocol"] == "GRPC"
        assert selection["connection"]["transport"] == {
            "uds": {"udsName": "/run/konnectivity/konnectivity-server.socket"}
        }

    @pytest.mark.parametrize(
        ("mutate", "problem"),
        [
            (lambda c: c.update(egressSelection=c.pop("egressSelections")), "unknown field"),
            (
                lambda c: c["egressSelections"][0]["connection"].update(proxyProtocol="grpc"),
                "not one of",
            ),
            (lambda c: c["egressSelections"][0].update(name="pods"), "not one of"),
            (
                lambda c: c["egressSelections"][0]["connection"]["transport"]["uds"].pop("udsName"),
                "required",
            ),
        ],
    )
    def test_the_check_catches_mistakes(
        self, node_root: ScratchRoot, mutate: Any, problem: str
    ) -> None:
        """The field-by-field check fails on a misspelt field, a bad enum value, a missing one."""
        configuration = self.configuration(node_root)
        mutate(configuration)
        problems = check_egress(configuration, "EgressSelectorConfiguration")
        assert any(problem in line for line in problems), problems
