"""konnectivity-server's definition and pre-start steps, hook by hook, without processes.

Covers the behaviours the OpenRC script's own prestart test checked: the default and honoured
server count, empty SANs, the CA wait timing out, a failed mint leaving nothing behind, and the
SANs reaching the certificate exactly. Tested with noderole's plugin-author kit: the service
comes from the plugin object alone, its steps run against a scratch root on a fake clock
(``run_prestart``), and the k3s CA is the k3s plugin's serial-0 ``k3s_ca``.
"""

from __future__ import annotations

import ipaddress
import re
import subprocess

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import given
from hypothesis import strategies as st

import noderole
from noderole.clock import FakeClock
from noderole.records import Service
from noderole.testing import (
    ClusterCA,
    PrestartOutcome,
    ScratchRoot,
    apply_recorded,
    load_certificate,
    plan_from_plugins,
    run_prestart,
    services_from_plugins,
)
from noderole_k3s.testing import K3S_CA_CERT, K3S_CA_KEY
from noderole_konnectivity import plugin as konnectivity_plugin
from noderole_konnectivity import wiring

FIRST_BOOT = "/etc/spinifex-eks/first-boot.env"
KUBECONFIG = "/etc/rancher/k3s/k3s.yaml"
CERT_DIR = "/var/lib/spinifex-eks/konnectivity"
SANS = "konnectivity.example.com,nlb-1.elb.example.com,10.0.0.7,fd00::7"
CA_WAIT = "k3s server CA / admin kubeconfig not present after 120s"
MINT_FAILED = "failed to mint konnectivity serving cert: "
NO_NET_CHECK = "[noderole]\nnet_check = false\n"

# The command line of konnectivity-server.initd, flag for flag.
SEED_COMMAND = [
    "/usr/local/bin/konnectivity-server",
    "--logtostderr=true",
    "--uds-name=/run/konnectivity/konnectivity-server.socket",
    "--delete-existing-uds-file",
    "--cluster-cert=/var/lib/spinifex-eks/konnectivity/tls.crt",
    "--cluster-key=/var/lib/spinifex-eks/konnectivity/tls.key",
    "--server-count=1",
    "--mode=grpc",
    "--server-port=0",
    "--agent-port=8132",
    "--admin-port=8093",
    "--health-port=8092",
    "--kubeconfig=/etc/rancher/k3s/k3s.yaml",
    "--authentication-audience=system:konnectivity-server",
    "--agent-namespace=kube-system",
    "--agent-service-account=konnectivity-agent",
    "--proxy-strategies=destHost,default",
]


def konnectivity(node_root: ScratchRoot) -> Service:
    """The service as the konnectivity plugin alone defines it over node_root."""
    found = services_from_plugins(("konnectivity", konnectivity_plugin), node_root=node_root)
    (service,) = [s for s in found if s.name == "konnectivity-server"]
    return service


def prestart(node_root: ScratchRoot, clock: FakeClock | None = None) -> PrestartOutcome:
    """Define the service now, then run its pre-start steps under node_root."""
    return run_prestart(konnectivity(node_root), node_root, clock=clock)


def sans(node_root: ScratchRoot, value: str) -> None:
    node_root.write_env(FIRST_BOOT, {"EKS_KONNECTIVITY_SANS": value})


def cert_dir_entries(node_root: ScratchRoot) -> list[str]:
    return sorted(p.name for p in node_root.resolve(CERT_DIR).iterdir())


def config_error(node_root: ScratchRoot, table_text: str) -> str:
    """The ConfigError the plugin raises for ``[konnectivity]`` set to ``table_text``."""
    node_root.write_config(f"[konnectivity]\n{table_text}")
    with pytest.raises(noderole.ConfigError) as raised:
        konnectivity(node_root)
    return str(raised.value)


def count_flag(service: Service) -> str:
    assert service.command is not None
    (flag,) = [arg for arg in service.command if arg.startswith("--server-count=")]
    return flag


class TestServerCount:
    def test_default_is_one(self, node_root: ScratchRoot) -> None:
        """Without EKS_KONNECTIVITY_SERVER_COUNT (or without the file) the count is 1."""
        assert count_flag(konnectivity(node_root)) == "--server-count=1"
        node_root.write_env(
            FIRST_BOOT, {"EKS_KONNECTIVITY_SANS": SANS, "EKS_KONNECTIVITY_SERVER_COUNT": ""}
        )
        assert count_flag(konnectivity(node_root)) == "--server-count=1"

    def test_count_honoured(self, node_root: ScratchRoot) -> None:
        """The count in first-boot.env reaches the command line."""
        node_root.write_env(FIRST_BOOT, {"EKS_KONNECTIVITY_SERVER_COUNT": "3"})
        assert count_flag(konnectivity(node_root)) == "--server-count=3"

    @pytest.mark.parametrize("raw", ["0", "000", "-1", "two", "1.5", "3 # replicas=3", "0x3", "٣"])
    def test_bad_count_fails_before_waiting(
        self, node_root: ScratchRoot, fake_clock: FakeClock, raw: str
    ) -> None:
        """Anything but a positive integer fails at once, naming the key, value and file."""
        node_root.write_env(
            FIRST_BOOT, {"EKS_KONNECTIVITY_SERVER_COUNT": raw, "EKS_KONNECTIVITY_SANS": SANS}
        )
        outcome = prestart(node_root, fake_clock)
        assert outcome.reason.startswith(
            f"EKS_KONNECTIVITY_SERVER_COUNT={raw!r} in {FIRST_BOOT} is not a positive integer"
        )
        assert isinstance(outcome.failed_step, noderole.Fail)
        assert outcome.waited == []  # no wait was entered
        assert outcome.seconds == 0

    @pytest.mark.parametrize(
        "raw",
        # 5,000 digits: past what int() converts (4,300), which raised from the hook
        ["4294967296", "99999999999999999999", "1" + "0" * 400, "9" * 5000],
        ids=["2**32", "20 digits", "401 digits", "5000 digits"],
    )
    def test_count_konnectivity_would_refuse_fails_before_waiting(
        self, node_root: ScratchRoot, fake_clock: FakeClock, raw: str
    ) -> None:
        """A count past what konnectivity-server's --server-count takes (an unsigned int, 32
        bits on some of its builds) fails here, naming the limit: passed on, the server would
        refuse its flag at every start and crash-loop with the reason only in its log."""
        node_root.write_env(
            FIRST_BOOT, {"EKS_KONNECTIVITY_SERVER_COUNT": raw, "EKS_KONNECTIVITY_SANS": SANS}
        )
        outcome = prestart(node_root, fake_clock)
        shown = (
            repr(raw) if len(raw) <= 40 else f"{raw[:16]!r}...{raw[-8:]!r} ({len(raw)} characters)"
        )
        assert outcome.reason == (
            f"EKS_KONNECTIVITY_SERVER_COUNT={shown} in {FIRST_BOOT} is more than "
            "konnectivity-server's --server-count takes (at most 4294967295): set it to the "
            "number of apiserver replicas (each agent holds a tunnel to every one)"
        )
        assert isinstance(outcome.failed_step, noderole.Fail)
        assert outcome.waited == []
        assert count_flag(konnectivity(node_root)) == "--server-count=1"

    def test_largest_count_konnectivity_takes_is_honoured(self, node_root: ScratchRoot) -> None:
        node_root.write_env(FIRST_BOOT, {"EKS_KONNECTIVITY_SERVER_COUNT": "4294967295"})
        assert count_flag(konnectivity(node_root)) == "--server-count=4294967295"


class TestAgentHost:
    """EKS_KONNECTIVITY_HOST is the address every konnectivity-agent dials, and the name it
    checks the server's certificate against (``--proxy-server-host``, with ``--ca-cert``)."""

    @pytest.mark.parametrize(
        ("host", "why"),
        [
            ("https://10.0.0.7:8132", "a URL is not a name; give only the host part"),
            ("10.0.0.7:8132", "a port is not part of a name; drop ':PORT'"),
            (
                "nlb-1.elb.example.com,10.0.0.7",
                "a list is not one address; give the one address clients dial",
            ),
            ("*.elb.example.com", "a wildcard names no host to dial"),
            ("nlb 1", "whitespace is not allowed inside a name"),
        ],
    )
    def test_a_host_agents_cannot_dial_fails_before_waiting(
        self, node_root: ScratchRoot, fake_clock: FakeClock, host: str, why: str
    ) -> None:
        """Passed on, every agent in the cluster would dial nothing (the manifest stages
        whatever it is given) while this node's apply said ok."""
        node_root.write_env(
            FIRST_BOOT, {"EKS_KONNECTIVITY_SANS": SANS, "EKS_KONNECTIVITY_HOST": host}
        )
        outcome = prestart(node_root, fake_clock)
        assert outcome.reason == (
            f"EKS_KONNECTIVITY_HOST in {FIRST_BOOT}: {host!r} is not a host name or IP address: "
            f"{why}"
        )
        assert isinstance(outcome.failed_step, noderole.Fail)
        assert outcome.waited == []

    def test_a_host_the_certificate_does_not_name_fails_before_waiting(
        self, node_root: ScratchRoot, fake_clock: FakeClock
    ) -> None:
        """The agents would refuse the server's certificate (x509: certificate is valid for
        ..., not nlb.example), every one of them, and no tunnel would ever come up."""
        node_root.write_env(
            FIRST_BOOT, {"EKS_KONNECTIVITY_SANS": SANS, "EKS_KONNECTIVITY_HOST": "nlb.example"}
        )
        outcome = prestart(node_root, fake_clock)
        assert outcome.reason == (
            f"EKS_KONNECTIVITY_HOST=nlb.example in {FIRST_BOOT} is not among "
            "EKS_KONNECTIVITY_SANS (konnectivity.example.com, nlb-1.elb.example.com, 10.0.0.7, "
            "fd00::7): every konnectivity-agent dials it and would refuse this server's "
            "certificate; add it to EKS_KONNECTIVITY_SANS"
        )
        assert isinstance(outcome.failed_step, noderole.Fail)
        assert outcome.waited == []

    @pytest.mark.parametrize(
        ("host", "sans"),
        [
            ("NLB-1.elb.Example.com.", SANS),  # a name as people write it
            ("[FD00:0::7]", SANS),  # the same address, written another way
            ("nlb-2.elb.example.com", "*.elb.example.com"),  # a wildcard's one label
        ],
    )
    def test_a_host_the_certificate_names_passes(
        self, node_root: ScratchRoot, host: str, sans: str
    ) -> None:
        node_root.write_env(
            FIRST_BOOT, {"EKS_KONNECTIVITY_SANS": sans, "EKS_KONNECTIVITY_HOST": host}
        )
        steps = konnectivity(node_root).pre_start
        assert not any(isinstance(step, (noderole.Fail, noderole.Warn)) for step in steps)

    def test_a_wildcard_covers_one_label_only(self, node_root: ScratchRoot) -> None:
        node_root.write_env(
            FIRST_BOOT,
            {"EKS_KONNECTIVITY_SANS": "*.example.com", "EKS_KONNECTIVITY_HOST": "a.b.example.com"},
        )
        (fail,) = [s for s in konnectivity(node_root).pre_start if isinstance(s, noderole.Fail)]
        assert "is not among EKS_KONNECTIVITY_SANS (*.example.com)" in fail.message


class TestSans:
    def test_empty_sans_fail_without_mint(
        self, node_root: ScratchRoot, k3s_server: ClusterCA
    ) -> None:
        """Empty SANs fail with the script's message after the wait, and nothing is minted."""
        sans(node_root, " , ")
        service = konnectivity(node_root)
        assert not any(isinstance(s, noderole.MintCertificate) for s in service.pre_start)
        outcome = run_prestart(service, node_root)
        assert outcome.reason == (
            "EKS_KONNECTIVITY_SANS empty; agents would fail server cert validation"
        )
        assert outcome.waited == [K3S_CA_CERT, K3S_CA_KEY, KUBECONFIG]
        assert outcome.minted == []
        assert outcome.written == []
        assert cert_dir_entries(node_root) == []

    def test_sans_reach_certificate_exactly(
        self, node_root: ScratchRoot, k3s_server: ClusterCA
    ) -> None:
        """The leaf carries CN konnectivity-server and exactly the listed SANs; openssl verifies
        it against the k3s CA for every one of them."""
        sans(node_root, SANS)
        outcome = prestart(node_root)
        assert outcome.ok, outcome.reason
        (minted,) = outcome.minted
        assert outcome.written == [f"{CERT_DIR}/tls.crt", f"{CERT_DIR}/tls.key"]
        assert minted.cert_path == node_root.resolve(f"{CERT_DIR}/tls.crt")
        leaf = load_certificate(minted.cert_path)
        assert k3s_server.signed(leaf)
        assert leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == (
            "konnectivity-server"
        )
        names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert set(names.get_values_for_type(x509.DNSName)) == {
            "konnectivity.example.com",
            "nlb-1.elb.example.com",
        }
        assert set(names.get_values_for_type(x509.IPAddress)) == {
            ipaddress.ip_address("10.0.0.7"),
            ipaddress.ip_address("fd00::7"),
        }
        for san in SANS.split(","):
            check = "-verify_ip" if ":" in san or san[0].isdigit() else "-verify_hostname"
            verdict = subprocess.run(
                ["openssl", "verify", "-CAfile", str(k3s_server.cert_file), check, san,
                 str(minted.cert_path)],
                capture_output=True, text=True,
            )  # fmt: skip
            assert verdict.returncode == 0, verdict.stdout + verdict.stderr

    def test_second_run_reuses(self, node_root: ScratchRoot, k3s_server: ClusterCA) -> None:
        """A second run reuses the pair; a changed SAN list re-mints it."""
        sans(node_root, SANS)
        assert len(prestart(node_root).minted) == 1
        again = prestart(node_root)
        assert [c.action for c in again.certificates] == ["reused"]
        assert again.written == []
        sans(node_root, "other.example")
        (reminted,) = prestart(node_root).minted
        assert reminted.reason.startswith("SANs changed")


class TestWaitAndMint:
    def test_missing_ca_times_out(self, node_root: ScratchRoot, fake_clock: FakeClock) -> None:
        """Without the CA the 120 s wait ends with the script's message (on a fake clock)."""
        sans(node_root, SANS)
        outcome = prestart(node_root, fake_clock)
        assert outcome.reason == CA_WAIT
        assert isinstance(outcome.failed_step, noderole.WaitForPaths)
        assert outcome.waited == [K3S_CA_CERT, K3S_CA_KEY, KUBECONFIG]
        assert outcome.seconds == pytest.approx(120, abs=1)
        assert outcome.minted == []

    def test_missing_kubeconfig_times_out(self, node_root: ScratchRoot, k3s_ca: ClusterCA) -> None:
        """CA and key alone are not enough: the admin kubeconfig is waited for too."""
        sans(node_root, SANS)
        assert prestart(node_root).reason == CA_WAIT

    def test_wait_timeout_setting(self, node_root: ScratchRoot, fake_clock: FakeClock) -> None:
        """[konnectivity] wait_timeout bounds the wait, and the message says so."""
        node_root.write_config("[konnectivity]\nwait_timeout = 7\n")
        sans(node_root, SANS)
        outcome = prestart(node_root, fake_clock)
        assert outcome.reason == "k3s server CA / admin kubeconfig not present after 7s"
        assert outcome.seconds == pytest.approx(7, abs=1)

    @pytest.mark.parametrize("bad_sans", ["good.example,bad_name!", "https://x.example/"])
    def test_mint_failure_leaves_nothing(
        self, node_root: ScratchRoot, k3s_server: ClusterCA, bad_sans: str
    ) -> None:
        """A failed mint fails with the script's prefix and the reason; no file is left over."""
        sans(node_root, bad_sans)
        outcome = prestart(node_root)
        assert outcome.reason.startswith(MINT_FAILED)
        assert len(outcome.reason) > len(MINT_FAILED)
        # The record refuses the SAN when built: the plugin puts a Fail where the mint was.
        assert isinstance(outcome.failed_step, noderole.Fail)
        assert "invalid SAN" in outcome.reason
        assert outcome.minted == []
        assert outcome.written == []
        assert cert_dir_entries(node_root) == []

    def test_mismatched_ca_key_fails(self, node_root: ScratchRoot, k3s_server: ClusterCA) -> None:
        """A CA key that does not match the CA fails the mint and writes nothing."""
        sans(node_root, SANS)
        other = ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
        node_root.write(K3S_CA_KEY, other.decode(), mode=0o600)
        outcome = prestart(node_root)
        assert outcome.reason.startswith(MINT_FAILED)
        assert outcome.written == []
        assert cert_dir_entries(node_root) == []

    def test_directories_created(self, node_root: ScratchRoot, k3s_server: ClusterCA) -> None:
        """The UDS directory and a root-only certificate directory are created first."""
        sans(node_root, SANS)
        assert prestart(node_root).ok
        assert node_root.resolve("/run/konnectivity").is_dir()
        assert node_root.mode(CERT_DIR) == 0o700

    def test_unreadable_env_file_fails_service_only(self, node_root: ScratchRoot) -> None:
        """A binary first-boot.env fails this service's steps, not the definition."""
        local = node_root.resolve(FIRST_BOOT)
        local.parent.mkdir(parents=True)
        local.write_bytes(b"EKS_KONNECTIVITY_SANS=\xff\xfe\n")
        outcome = prestart(node_root)
        assert "not UTF-8" in outcome.reason
        assert outcome.waited == []


class TestDefinition:
    def test_command_is_the_scripts(self, node_root: ScratchRoot) -> None:
        """The argv is the OpenRC script's command line, one element per flag."""
        assert list(konnectivity(node_root).command or ()) == SEED_COMMAND

    def test_started_with_the_scripts_argv(
        self, node_root: ScratchRoot, k3s_server: ClusterCA, fake_clock: FakeClock
    ) -> None:
        """Applied (recorded, not started), the server is handed exactly the script's argv."""
        sans(node_root, SANS)
        plan = plan_from_plugins(
            "server",
            ("konnectivity", konnectivity_plugin),
            config_text=NO_NET_CHECK,
            node_root=node_root,
        )
        report, backend = apply_recorded(plan, node_root, clock=fake_clock)
        assert report.ok, report.failed
        assert backend.names() == ["konnectivity-server"]
        assert backend.node_argv("konnectivity-server") == SEED_COMMAND
        assert node_root.exists(f"{CERT_DIR}/tls.crt")

    def test_service_fields(self, node_root: ScratchRoot) -> None:
        """Roles, dependencies, pidfile, log, supervision and /healthz readiness as the script."""
        service = konnectivity(node_root)
        assert service.roles == ("server", "server-join")
        assert service.need == ("net",)
        assert service.after == ("k3s",)
        assert service.description == "Konnectivity server (Mulga EKS apiserver egress proxy)"
        assert service.user is None
        assert service.pidfile == "/run/konnectivity-server.pid"
        assert service.output_log == service.error_log == "/var/log/konnectivity-server.log"
        assert service.supervision.respawn_delay == 5
        assert service.supervision.respawn_max == 0
        assert isinstance(service.readiness, noderole.WaitForHttp)
        assert service.readiness.url == "http://127.0.0.1:8092/healthz"

    def test_step_order(self, node_root: ScratchRoot) -> None:
        """Steps run in the script's order: directories, wait, certificate."""
        node_root.write_env(
            FIRST_BOOT,
            {"EKS_KONNECTIVITY_SANS": SANS, "EKS_KONNECTIVITY_HOST": "nlb-1.elb.example.com"},
        )
        kinds = [type(step).__name__ for step in konnectivity(node_root).pre_start]
        assert kinds == ["MakeDirectories", "MakeDirectories", "WaitForPaths", "MintCertificate"]

    def test_missing_agent_host_warns_without_failing(self, node_root: ScratchRoot) -> None:
        """No EKS_KONNECTIVITY_HOST: a warning before the wait; the server still starts."""
        sans(node_root, SANS)
        kinds = [type(step).__name__ for step in konnectivity(node_root).pre_start]
        assert kinds == [
            "MakeDirectories",
            "MakeDirectories",
            "Warn",
            "WaitForPaths",
            "MintCertificate",
        ]

    @pytest.mark.parametrize(
        ("key", "port", "what"),
        [
            ("agent_port", 6443, "the Kubernetes API (k3s's supervisor)"),
            ("admin_port", 10250, "the kubelet's API"),
            ("health_port", 2379, "etcd's client port (a server with embedded etcd)"),
            # on agents too: k3s agent's load balancer to the API server
            (
                "agent_health_port",
                6444,
                "the API server behind k3s's supervisor, and every agent's load balancer to it",
            ),
            ("agent_admin_port", 10010, "containerd's streaming server"),
        ],
    )
    def test_a_port_k3s_binds_is_a_config_error(
        self, node_root: ScratchRoot, key: str, port: int, what: str
    ) -> None:
        """konnectivity-server and its agents run beside k3s on the node's network: a port k3s
        binds by default (the API's 6443, the kubelet's 10250, etcd's 2379...) failed to bind
        at every start, or took the port from k3s, a crash loop that config check and plan
        called fine."""
        assert config_error(node_root, f"{key} = {port}\n") == (
            f"/etc/noderole/config.toml:konnectivity.{key}: {port} is {what}, which k3s binds "
            "on every node it runs: konnectivity would fail to bind it at every start (or take "
            "it from k3s); choose a port k3s does not use"
        )

    def test_the_default_ports_are_none_of_k3s(self) -> None:
        """The shipped defaults stay clear of k3s's ports."""
        plugin = konnectivity_plugin
        defaults = {setting.name: setting.default for setting in plugin.SETTINGS.settings}
        assert {defaults[key] for key in plugin.PORTS}.isdisjoint(plugin.K3S_PORTS)

    @pytest.mark.parametrize(
        ("config", "first", "second", "port"),
        [
            ("agent_port = 8093\n", "agent_port", "admin_port", 8093),
            ("health_port = 8132\n", "agent_port", "health_port", 8132),
            # the agents run on the host network of every node, servers included
            ("agent_health_port = 8092\n", "health_port", "agent_health_port", 8092),
            (
                "agent_admin_port = 9000\nagent_health_port = 9000\n",
                "agent_admin_port",
                "agent_health_port",
                9000,
            ),
        ],
    )
    def test_two_settings_of_one_port_are_a_config_error(
        self, node_root: ScratchRoot, config: str, first: str, second: str, port: int
    ) -> None:
        """konnectivity-server binds its agent, admin and health ports apart, and each agent
        its admin and health ports on the node's network: one port set twice made the second
        bind fail at every start (address already in use), a crash loop that config check and
        plan called fine."""
        assert (
            f"/etc/noderole/config.toml:konnectivity.{second}: {port} is also [konnectivity] "
            f"{first}: konnectivity-server and its agents (on the host network of every node) "
            "bind each of these ports apart; give each its own"
        ) in config_error(node_root, config)

    @pytest.mark.parametrize(
        ("config", "key", "image"),
        [
            (
                "server_version = 'v0.30.3 beta'\n",
                "server_version",
                "registry.k8s.io/kas-network-proxy/proxy-agent:v0.30.3 beta",
            ),
            (
                "agent_image = 'Registry.io/Proxy-Agent:v1'\n",
                "agent_image",
                "Registry.io/Proxy-Agent:v1",
            ),
            ("agent_image = 'proxy-agent:'\n", "agent_image", "proxy-agent:"),
            (
                "agent_image = 'https://registry.k8s.io/a:v1'\n",
                "agent_image",
                "https://registry.k8s.io/a:v1",
            ),
            ("agent_image = 'a@sha256:12ab'\n", "agent_image", "a@sha256:12ab"),
        ],
    )
    def test_an_agent_image_no_node_could_pull_is_a_config_error(
        self, node_root: ScratchRoot, config: str, key: str, image: str
    ) -> None:
        """The agent DaemonSet was staged with it, and every agent pod in the cluster failed
        (InvalidImageName) while every apply said ok."""
        assert (
            f"/etc/noderole/config.toml:konnectivity.{key}: the konnectivity-agent image "
            f"{image!r} is not an image reference (REGISTRY/PATH:TAG or @DIGEST, the path in "
            "lower case)"
        ) in config_error(node_root, config)

    @pytest.mark.parametrize(
        "image",
        [
            "registry.k8s.io/kas-network-proxy/proxy-agent:v0.30.3",
            "proxy-agent",
            "my.Registry.example:5000/team/proxy_agent--x/a.b:v1.0-rc_1",
            "localhost/a/b@sha256:" + "ab" * 32,
            "[fd00::1]:5000/proxy-agent:v1",
        ],
    )
    def test_an_image_reference_passes(self, node_root: ScratchRoot, image: str) -> None:
        node_root.write_config(f"[konnectivity]\nagent_image = '{image}'\n")
        assert konnectivity(node_root).name == "konnectivity-server"

    @given(st.text(max_size=140))
    def test_the_default_image_tag_is_read_as_the_grammar_reads_it(self, tag: str) -> None:
        """The default image's tag is checked with str methods (no pattern compiled on every
        apply); both ways agree."""
        image = f"{wiring.AGENT_IMAGE_REPOSITORY}:{tag}"
        grammar = re.fullmatch(wiring._REFERENCE, image, re.ASCII) is not None
        assert wiring.is_image_reference(image) is grammar

    def test_settings_change_paths_and_ports(self, node_root: ScratchRoot) -> None:
        """Paths, ports and respawn settings come from [konnectivity]."""
        node_root.write_config(
            "[konnectivity]\ncert_dir = '/srv/konn'\nhealth_port = 18092\nagent_port = 9132\n"
            "respawn_delay = 1.5\nuds_name = '/run/k/s.sock'\n"
        )
        service = konnectivity(node_root)
        command = list(service.command or ())
        assert "--cluster-cert=/srv/konn/tls.crt" in command
        assert "--health-port=18092" in command
        assert "--agent-port=9132" in command
        assert "--uds-name=/run/k/s.sock" in command
        assert service.supervision.respawn_delay == 1.5
        assert isinstance(service.readiness, noderole.WaitForHttp)
        assert service.readiness.url == "http://127.0.0.1:18092/healthz"
        first = service.pre_start[0]
        assert isinstance(first, noderole.MakeDirectories)
        assert first.paths == ("/run/k",)
