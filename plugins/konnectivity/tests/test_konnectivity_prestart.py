"""konnectivity-server's definition and pre-start steps, hook by hook, without processes.

Covers the behaviours the OpenRC script's own prestart test checked: the default and honoured
server count, empty SANs, the CA wait timing out, a failed mint leaving nothing behind, and the
SANs reaching the certificate exactly.
"""

from __future__ import annotations

import ipaddress
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

import noderole
from noderole.clock import FakeClock
from noderole.context import NodeContext
from noderole.plugins import PluginSet
from noderole.records import Service
from noderole.root import NodeRoot
from noderole.steps import StepContext, StepResult, run_steps

FIRST_BOOT = "/etc/spinifex-eks/first-boot.env"
CERT_DIR = "var/lib/spinifex-eks/konnectivity"
SANS = "konnectivity.example.com,nlb-1.elb.example.com,10.0.0.7,fd00::7"
CA_WAIT = "k3s server CA / admin kubeconfig not present after 120s"

Put = Callable[[str, str], Path]
MakeNode = Callable[..., tuple[PluginSet, NodeContext]]
Install = Callable[..., None]

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


def konnectivity(make_node: MakeNode) -> Service:
    """The service as the konnectivity plugin alone defines it."""
    plugins, node = make_node(k3s=False)
    (service,) = [s for s in plugins.services(node) if s.name == "konnectivity-server"]
    return service


def run(service: Service, root: Path, clock: FakeClock | None = None) -> list[StepResult]:
    # Wall time is now: the CA is made now, so a fake "now" years away would fall outside it.
    clock = clock or FakeClock(wall=time.time())
    ctx = StepContext(service=service.name, root=NodeRoot(root), clock=clock)
    return run_steps(service.pre_start, ctx)


def failure(service: Service, root: Path) -> str:
    with pytest.raises(noderole.StepError) as caught:
        run(service, root)
    return str(caught.value)


def count_flag(service: Service) -> str:
    assert service.command is not None
    (flag,) = [arg for arg in service.command if arg.startswith("--server-count=")]
    return flag


class TestServerCount:
    def test_default_is_one(self, put: Put, make_node: MakeNode) -> None:
        """Without EKS_KONNECTIVITY_SERVER_COUNT (or without the file) the count is 1."""
        assert count_flag(konnectivity(make_node)) == "--server-count=1"
        put(FIRST_BOOT, f"EKS_KONNECTIVITY_SANS={SANS}\nEKS_KONNECTIVITY_SERVER_COUNT=\n")
        assert count_flag(konnectivity(make_node)) == "--server-count=1"

    def test_count_honoured(self, put: Put, make_node: MakeNode) -> None:
        """The count in first-boot.env reaches the command line."""
        put(FIRST_BOOT, "EKS_KONNECTIVITY_SERVER_COUNT=3\n")
        assert count_flag(konnectivity(make_node)) == "--server-count=3"

    @pytest.mark.parametrize("raw", ["0", "-1", "two", "1.5", "3 # replicas=3", "0x3"])
    def test_bad_count_fails_before_waiting(
        self, tmp_path: Path, put: Put, make_node: MakeNode, raw: str
    ) -> None:
        """Anything but a positive integer fails at once, naming the key, value and file."""
        put(FIRST_BOOT, f"EKS_KONNECTIVITY_SERVER_COUNT='{raw}'\nEKS_KONNECTIVITY_SANS={SANS}\n")
        service = konnectivity(make_node)
        clock = FakeClock()
        with pytest.raises(noderole.StepError) as caught:
            run(service, tmp_path, clock)
        assert str(caught.value).startswith(
            f"EKS_KONNECTIVITY_SERVER_COUNT={raw!r} in {FIRST_BOOT} is not a positive integer"
        )
        assert clock.monotonic() == FakeClock().monotonic()  # no wait was entered


class TestSans:
    def test_empty_sans_fail_without_mint(
        self, tmp_path: Path, put: Put, make_node: MakeNode, install_k3s_files: Install
    ) -> None:
        """Empty SANs fail with the script's message after the wait, and nothing is minted."""
        put(FIRST_BOOT, "EKS_KONNECTIVITY_SANS= , \n")
        install_k3s_files()
        service = konnectivity(make_node)
        assert not any(isinstance(s, noderole.MintCertificate) for s in service.pre_start)
        assert failure(service, tmp_path) == (
            "EKS_KONNECTIVITY_SANS empty; agents would fail server cert validation"
        )
        assert list((tmp_path / CERT_DIR).iterdir()) == []

    def test_sans_reach_certificate_exactly(
        self,
        tmp_path: Path,
        put: Put,
        make_node: MakeNode,
        install_k3s_files: Install,
        k3s_ca: tuple[Path, Path],
    ) -> None:
        """The leaf carries CN konnectivity-server and exactly the listed SANs; openssl verifies
        it against the k3s CA for every one of them."""
        put(FIRST_BOOT, f"EKS_KONNECTIVITY_SANS={SANS}\n")
        install_k3s_files()
        results = run(konnectivity(make_node), tmp_path)
        assert results[-1].detail.startswith("minted")
        cert_file = tmp_path / CERT_DIR / "tls.crt"
        leaf = x509.load_pem_x509_certificate(cert_file.read_bytes())
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
                ["openssl", "verify", "-CAfile", str(k3s_ca[0]), check, san,
                 str(cert_file)],
                capture_output=True, text=True,
            )  # fmt: skip
            assert verdict.returncode == 0, verdict.stdout + verdict.stderr

    def test_second_run_reuses(
        self, tmp_path: Path, put: Put, make_node: MakeNode, install_k3s_files: Install
    ) -> None:
        """A second run reuses the pair; a changed SAN list re-mints it."""
        put(FIRST_BOOT, f"EKS_KONNECTIVITY_SANS={SANS}\n")
        install_k3s_files()
        run(konnectivity(make_node), tmp_path)
        assert run(konnectivity(make_node), tmp_path)[-1].detail.startswith("reused")
        put(FIRST_BOOT, "EKS_KONNECTIVITY_SANS=other.example\n")
        again = run(konnectivity(make_node), tmp_path)[-1].detail
        assert again.startswith("minted: SANs changed")


class TestWaitAndMint:
    def test_missing_ca_times_out(self, tmp_path: Path, put: Put, make_node: MakeNode) -> None:
        """Without the CA the 120 s wait ends with the script's message (on a fake clock)."""
        put(FIRST_BOOT, f"EKS_KONNECTIVITY_SANS={SANS}\n")
        clock = FakeClock()
        with pytest.raises(noderole.StepError) as caught:
            run(konnectivity(make_node), tmp_path, clock)
        assert str(caught.value) == CA_WAIT
        assert clock.monotonic() - FakeClock().monotonic() == pytest.approx(120, abs=1)

    def test_missing_kubeconfig_times_out(
        self, tmp_path: Path, put: Put, make_node: MakeNode, install_k3s_files: Install
    ) -> None:
        """CA and key alone are not enough: the admin kubeconfig is waited for too."""
        put(FIRST_BOOT, f"EKS_KONNECTIVITY_SANS={SANS}\n")
        install_k3s_files(kubeconfig=False)
        assert failure(konnectivity(make_node), tmp_path) == CA_WAIT

    def test_wait_timeout_setting(self, tmp_path: Path, put: Put, make_node: MakeNode) -> None:
        """[konnectivity] wait_timeout bounds the wait, and the message says so."""
        put("/etc/noderole/config.toml", "[konnectivity]\nwait_timeout = 7\n")
        put(FIRST_BOOT, f"EKS_KONNECTIVITY_SANS={SANS}\n")
        message = failure(konnectivity(make_node), tmp_path)
        assert message == "k3s server CA / admin kubeconfig not present after 7s"

    @pytest.mark.parametrize("sans", ["good.example,bad_name!", "https://x.example/"])
    def test_mint_failure_leaves_nothing(
        self,
        tmp_path: Path,
        put: Put,
        make_node: MakeNode,
        install_k3s_files: Install,
        sans: str,
    ) -> None:
        """A failed mint fails with the script's prefix and the reason; no file is left over."""
        put(FIRST_BOOT, f"EKS_KONNECTIVITY_SANS={sans}\n")
        install_k3s_files()
        message = failure(konnectivity(make_node), tmp_path)
        assert message.startswith("failed to mint konnectivity serving cert: ")
        assert len(message) > len("failed to mint konnectivity serving cert: ")
        assert list((tmp_path / CERT_DIR).iterdir()) == []

    def test_mismatched_ca_key_fails(
        self, tmp_path: Path, put: Put, make_node: MakeNode, install_k3s_files: Install
    ) -> None:
        """A CA key that does not match the CA fails the mint and writes nothing."""
        put(FIRST_BOOT, f"EKS_KONNECTIVITY_SANS={SANS}\n")
        install_k3s_files()
        other = subprocess.run(
            ["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout"],
            check=True, capture_output=True,
        ).stdout  # fmt: skip
        (tmp_path / "var/lib/rancher/k3s/server/tls/server-ca.key").write_bytes(other)
        assert failure(konnectivity(make_node), tmp_path).startswith(
            "failed to mint konnectivity serving cert: "
        )
        assert list((tmp_path / CERT_DIR).iterdir()) == []

    def test_directories_created(
        self, tmp_path: Path, put: Put, make_node: MakeNode, install_k3s_files: Install
    ) -> None:
        """The UDS directory and a root-only certificate directory are created first."""
        put(FIRST_BOOT, f"EKS_KONNECTIVITY_SANS={SANS}\n")
        install_k3s_files()
        run(konnectivity(make_node), tmp_path)
        assert (tmp_path / "run/konnectivity").is_dir()
        assert (tmp_path / CERT_DIR).stat().st_mode & 0o777 == 0o700

    def test_unreadable_env_file_fails_service_only(
        self, tmp_path: Path, make_node: MakeNode
    ) -> None:
        """A binary first-boot.env fails this service's steps, not the definition."""
        (tmp_path / "etc/spinifex-eks").mkdir(parents=True)
        (tmp_path / FIRST_BOOT.lstrip("/")).write_bytes(b"EKS_KONNECTIVITY_SANS=\xff\xfe\n")
        assert "not UTF-8" in failure(konnectivity(make_node), tmp_path)


class TestDefinition:
    def test_command_is_the_scripts(self, make_node: MakeNode) -> None:
        """The argv is the OpenRC script's command line, one element per flag."""
        assert list(konnectivity(make_node).command or ()) == SEED_COMMAND

    def test_service_fields(self, make_node: MakeNode) -> None:
        """Roles, dependencies, pidfile, log, supervision and /healthz readiness as the script."""
        service = konnectivity(make_node)
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

    def test_step_order(self, put: Put, make_node: MakeNode) -> None:
        """Steps run in the script's order: directories, wait, certificate."""
        put(FIRST_BOOT, f"EKS_KONNECTIVITY_SANS={SANS}\n")
        kinds = [type(step).__name__ for step in konnectivity(make_node).pre_start]
        assert kinds == ["MakeDirectories", "MakeDirectories", "WaitForPaths", "MintCertificate"]

    def test_settings_change_paths_and_ports(self, put: Put, make_node: MakeNode) -> None:
        """Paths, ports and respawn settings come from [konnectivity]."""
        put(
            "/etc/noderole/config.toml",
            "[konnectivity]\ncert_dir = '/srv/konn'\nhealth_port = 18092\nagent_port = 9132\n"
            "respawn_delay = 1.5\nuds_name = '/run/k/s.sock'\n",
        )
        service = konnectivity(make_node)
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
