"""The plugin-author kit (noderole.testing): each helper reports what really happened."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import subprocess
import sys
import textwrap
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

import noderole
from noderole.backends.native import BASE_ENVIRONMENT
from noderole.certs import load_ca
from noderole.config import load_config
from noderole.envfile import read_env_file
from noderole.errors import ConfigError, PlanError, PluginError, StepError
from noderole.records import (
    Call,
    Fail,
    MakeDirectories,
    MintCertificate,
    Secret,
    Service,
    SettingsTable,
    WaitForPaths,
    WaitForTcp,
    WriteFile,
)
from noderole.rehearsal_records import StandIn
from noderole.stepcontext import StepContext
from noderole.testing import (
    RecordingBackend,
    ScratchRoot,
    StandInRunner,
    apply_recorded,
    assert_in_plan,
    assert_not_in_plan,
    assert_starts_before,
    call_hook,
    load_certificate,
    make_cluster_ca,
    new_fake_clock,
    node_context,
    plan_from_plugins,
    process_environ,
    run_prestart,
    serial_number,
    services_from_plugins,
    stage_standins,
    standins_from_plugins,
)
from noderole_k3s.testing import K3S_CA_CERT, K3S_CA_KEY, make_k3s_ca


def _plugin(name: str, **hooks: Callable[..., Any]) -> types.ModuleType:
    """A plugin module built in the test, with the given hook implementations."""
    module = types.ModuleType(name)
    for hook_name, function in hooks.items():
        setattr(module, hook_name, noderole.hookimpl(function))
    return module


def _services_plugin(name: str, *services: Service) -> types.ModuleType:
    return _plugin(name, noderole_services=lambda: list(services))


@pytest.fixture
def scratch(tmp_path: Path) -> ScratchRoot:
    return ScratchRoot(tmp_path / "root")


class TestScratchRoot:
    def test_write_creates_parents_and_sets_the_exact_mode(self, scratch: ScratchRoot) -> None:
        """write() puts a file at the node path under the root, with the mode asked for."""
        local = scratch.write("/usr/local/bin/tool", "#!/bin/sh\n", mode=0o755)
        assert local == scratch.path / "usr/local/bin/tool"
        assert scratch.read("/usr/local/bin/tool") == "#!/bin/sh\n"
        assert scratch.mode("/usr/local/bin/tool") == 0o755
        assert scratch.exists("/usr/local/bin")
        assert not scratch.exists("/etc")

    def test_write_env_round_trips_through_noderoles_parser(self, scratch: ScratchRoot) -> None:
        """Values with '=', spaces, quotes, '#', '$', backslashes and newlines read back exactly."""
        values = {
            "PLAIN": "a.example,10.0.0.1",
            "EQUALS": "k=v=w",
            "SPACES": "  two words ",
            "QUOTES": 'it\'s "quoted"',
            "COMMENT": "a #b",
            "DOLLAR": "$HOME ${X} $(id)",
            "BACKSLASH": "C:\\path\\n",
            "NEWLINE": "one\ntwo",
            "EMPTY": "",
        }
        scratch.write_env("/etc/spinifex-eks/first-boot.env", values)
        parsed = read_env_file(scratch.resolve("/etc/spinifex-eks/first-boot.env"))
        assert dict(parsed.values) == values
        assert parsed.warnings == ()
        assert scratch.mode("/etc/spinifex-eks/first-boot.env") == 0o600

    def test_write_env_refuses_a_key_that_is_not_a_variable_name(
        self, scratch: ScratchRoot
    ) -> None:
        """A bad key is refused, naming it, and no file is written."""
        with pytest.raises(ValueError, match="'1BAD'"):
            scratch.write_env("/etc/x.env", {"GOOD": "1", "1BAD": "2"})
        assert not scratch.exists("/etc/x.env")

    def test_write_config_is_what_load_config_reads(self, scratch: ScratchRoot) -> None:
        """write_config() writes /etc/noderole/config.toml under the root."""
        scratch.write_config("[demo]\nport = 9200\n")
        table = SettingsTable(
            table="demo", settings=[noderole.Setting(name="port", type=int, default=1)]
        )
        assert load_config(scratch.root, [table]).table("demo")["port"] == 9200


class TestClusterCA:
    def test_k3s_shaped_ca_at_k3s_paths(self, scratch: ScratchRoot) -> None:
        """Serial 0, P-256, CA:TRUE, SEC1 key with mode 0600, CN k3s-server-ca@<time>."""
        ca = make_k3s_ca(scratch)
        assert (ca.cert_path, ca.key_path) == (K3S_CA_CERT, K3S_CA_KEY)
        cert = ca.certificate()
        assert ca.serial_number == 0
        assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
        assert cert.public_key().curve.name == "secp256r1"  # type: ignore[union-attr]
        assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        assert ca.common_name.startswith("k3s-server-ca@")
        assert scratch.read(K3S_CA_KEY).startswith("-----BEGIN EC PRIVATE KEY-----")
        assert scratch.mode(K3S_CA_KEY) == 0o600

    def test_noderole_accepts_it_as_a_signing_ca(self, scratch: ScratchRoot) -> None:
        """noderole.certs.load_ca loads the pair: the key matches, the CA is valid now."""
        ca = make_k3s_ca(scratch)
        clock = new_fake_clock()
        now = dt.datetime.fromtimestamp(clock.time(), tz=dt.UTC)
        loaded = load_ca(ca.cert_file, ca.key_file, now=now)
        assert loaded.cert.subject == ca.certificate().subject

    def test_random_serial_and_other_paths_on_request(self, scratch: ScratchRoot) -> None:
        """The core kit's CA has a positive serial by default; the files go where asked."""
        ca = make_cluster_ca(scratch, cert_path="/etc/pki/ca.pem", key_path="/etc/pki/ca-key.pem")
        assert ca.serial_number > 0
        assert scratch.exists("/etc/pki/ca.pem")
        assert scratch.exists("/etc/pki/ca-key.pem")

    def test_signed_tells_this_cas_leaves_from_others(self, scratch: ScratchRoot) -> None:
        """signed() is True for a leaf this CA minted and False for one another CA minted."""
        ours = make_k3s_ca(scratch)
        theirs = make_cluster_ca(scratch, cert_path="/other/ca.crt", key_path="/other/ca.key")
        mint = MintCertificate(
            directory="/var/lib/x",
            ca_cert=K3S_CA_CERT,
            ca_key=K3S_CA_KEY,
            common_name="x",
            sans=["x.example"],
        )
        assert run_prestart(Service(name="x", pre_start=[mint]), scratch).ok
        leaf = scratch.resolve("/var/lib/x/tls.crt")
        assert ours.signed(leaf)
        assert not theirs.signed(leaf)

    def test_serial_zero_reads_raise_no_warning(self, scratch: ScratchRoot) -> None:
        """load_certificate and serial_number silence the serial-0 warning (suite runs -W error)."""
        ca = make_k3s_ca(scratch)
        assert serial_number(load_certificate(ca.cert_file)) == 0


class TestRunPrestart:
    def test_reports_waits_files_and_minted_certificate(self, scratch: ScratchRoot) -> None:
        """A passing run lists what it waited for, what it wrote and the certificate minted."""
        make_k3s_ca(scratch)
        service = Service(
            name="demo",
            pre_start=[
                MakeDirectories(paths=["/var/lib/demo"]),
                WaitForPaths(paths=[K3S_CA_CERT, K3S_CA_KEY], timeout=120),
                WriteFile(path="/etc/demo/demo.conf", content="x=1\n"),
                MintCertificate(
                    directory="/var/lib/demo",
                    ca_cert=K3S_CA_CERT,
                    ca_key=K3S_CA_KEY,
                    common_name="demo",
                    sans=["demo.example"],
                ),
            ],
        )
        outcome = run_prestart(service, scratch)
        assert outcome.ok
        assert outcome.error is None
        assert outcome.reason == ""
        assert outcome.waited == [K3S_CA_CERT, K3S_CA_KEY]
        assert outcome.written == [
            "/etc/demo/demo.conf",
            "/var/lib/demo/tls.crt",
            "/var/lib/demo/tls.key",
        ]
        assert [c.action for c in outcome.minted] == ["minted"]
        assert [r.kind for r in outcome.results] == ["directories", "wait", "file", "certificate"]
        again = run_prestart(service, scratch)
        assert again.minted == []
        assert [c.action for c in again.certificates] == ["reused"]

    def test_timeout_resolves_instantly_on_the_fake_clock(self, scratch: ScratchRoot) -> None:
        """A 120 s wait for a missing file fails after exactly 120 fake seconds, with the reason."""
        clock = new_fake_clock()
        wait = WaitForPaths(paths=["/etc/rancher/k3s/k3s.yaml"], timeout=120)
        service = Service(name="demo", pre_start=[MakeDirectories(paths=["/run/demo"]), wait])
        outcome = run_prestart(service, scratch, clock=clock)
        assert not outcome.ok
        assert isinstance(outcome.error, StepError)
        assert outcome.failed_step == wait
        assert outcome.waited == ["/etc/rancher/k3s/k3s.yaml"]
        assert outcome.seconds == 120
        assert "/etc/rancher/k3s/k3s.yaml" in outcome.reason
        assert outcome.progress == ["waiting for /etc/rancher/k3s/k3s.yaml (up to 120s)"]
        assert [r.kind for r in outcome.results] == ["directories"]

    def test_a_fail_step_stops_before_later_steps(self, scratch: ScratchRoot) -> None:
        """A Fail step's message is the reason; steps after it do not run."""
        service = Service(
            name="demo",
            pre_start=[
                Fail(message="EKS_KONNECTIVITY_SANS empty"),
                WriteFile(path="/etc/x", content="x"),
            ],
        )
        outcome = run_prestart(service, scratch)
        assert outcome.reason == "EKS_KONNECTIVITY_SANS empty"
        assert outcome.written == []
        assert not scratch.exists("/etc/x")

    def test_wait_targets_name_endpoints(self, scratch: ScratchRoot) -> None:
        """A TCP wait is reported as host:port."""
        service = Service(
            name="demo", pre_start=[WaitForTcp(host="127.0.0.1", port=1, timeout=0.05)]
        )
        assert run_prestart(service, scratch).waited == ["127.0.0.1:1"]

    def test_a_bug_in_a_call_step_propagates(self, scratch: ScratchRoot) -> None:
        """An exception that is not a StepError reaches the test with its traceback."""

        def broken(ctx: StepContext) -> None:
            raise KeyError("oops")

        service = Service(name="demo", pre_start=[Call(function=broken, description="broken")])
        with pytest.raises(KeyError, match="oops"):
            run_prestart(service, scratch)


class TestPlanFromPlugins:
    def test_installed_entry_points_are_not_loaded(self, install_dist: Callable[..., Path]) -> None:
        """Only the plugins passed in (and the built-in one) contribute services."""
        install_dist(
            "intruder",
            "1.0",
            {"intruder": "nr_kit_intruder"},
            {
                "nr_kit_intruder": """
                    import noderole
                    @noderole.hookimpl
                    def noderole_services():
                        return noderole.Service(name="intruder", roles=["agent"])
                """
            },
        )
        mine = _services_plugin("mine", Service(name="mine", roles=["agent"], need=["net"]))
        plan = plan_from_plugins("agent", mine)
        assert plan.names() == ("net", "mine")
        assert plan["mine"].service.origin == "mine"

    def test_named_plugin_and_config_text(self, scratch: ScratchRoot) -> None:
        """A (name, plugin) pair names the origin; config_text is the settings file."""
        table = SettingsTable(
            table="demo", settings=[noderole.Setting(name="flag", type=str, default="-a")]
        )

        def services(node: Any) -> Service:
            flag = node.settings("demo")["flag"]
            return Service(name="demo", roles=["agent"], command=["/bin/demo", flag])

        plugin = _plugin("x", noderole_settings=lambda: table, noderole_services=services)
        plan = plan_from_plugins(
            "agent", ("demo-plugin", plugin), config_text='[demo]\nflag = "-b"\n', node_root=scratch
        )
        assert plan["demo"].service.command == ("/bin/demo", "-b")
        assert plan["demo"].service.origin == "demo-plugin"
        assert scratch.exists("/etc/noderole/config.toml")

    def test_bad_config_text_is_the_real_config_error(self) -> None:
        """A key no plugin declares is refused as `noderole plan` would refuse it."""
        plugin = _services_plugin("p", Service(name="a", roles=["agent"]))
        with pytest.raises(ConfigError, match=r"\[nope\]"):
            plan_from_plugins("agent", plugin, config_text="[nope]\nx = 1\n")

    def test_plan_errors_are_raised(self) -> None:
        """An unknown role is a PlanError naming the known roles."""
        plugin = _services_plugin("p", Service(name="a", roles=["agent"]))
        with pytest.raises(PlanError, match="known roles: agent"):
            plan_from_plugins("server", plugin)

    def test_services_from_plugins_includes_services_outside_any_role(self) -> None:
        """Every contributed service is returned, in a role or not."""
        plugin = _services_plugin("p", Service(name="helper"))
        names = {s.name for s in services_from_plugins(plugin)}
        assert names == {"net", "cgroups", "helper"}

    def test_hooks_see_the_node_root(self, scratch: ScratchRoot) -> None:
        """A hook reading an env file through `node` reads it from node_root."""
        scratch.write_env("/etc/demo.env", {"SANS": "a.example"})

        def services(node: Any) -> Service:
            sans = node.read_env("/etc/demo.env").get("SANS", "")
            return Service(name="demo", roles=["agent"], description=sans)

        plan = plan_from_plugins(
            "agent", _plugin("p", noderole_services=services), node_root=scratch
        )
        assert plan["demo"].service.description == "a.example"

    def test_standins_from_plugins_see_the_config_and_are_stamped(
        self, scratch: ScratchRoot
    ) -> None:
        """Stand-ins come from the given plugins only, read settings, and carry their origin."""
        table = SettingsTable(
            table="demo",
            settings=[noderole.Setting(name="binary", type=str, default="/usr/bin/demo")],
        )

        def standins(node: Any) -> StandIn:
            return StandIn(path=node.settings("demo")["binary"], content="#!/bin/sh\n")

        plugin = _plugin("x", noderole_settings=lambda: table, noderole_standins=standins)
        (standin,) = standins_from_plugins(
            ("demo-plugin", plugin), config_text='[demo]\nbinary = "/opt/demo"\n', node_root=scratch
        )
        assert (standin.path, standin.mode, standin.origin) == ("/opt/demo", 0o755, "demo-plugin")


class TestAssertions:
    def _plan(self) -> Any:
        plugin = _services_plugin(
            "p",
            Service(name="a", roles=["r"]),
            Service(name="b", roles=["r"], need=["a"]),
            Service(name="c", roles=["r"], after=["b"], want=["helper"]),
            Service(name="d", roles=["r"], after=["a"]),
            Service(name="e", roles=["r"], after=["d"]),
            Service(name="helper"),
        )
        return plan_from_plugins("r", plugin, builtin=False)

    def test_starts_before_follows_chains(self) -> None:
        """a starts before c through b; the assertion passes."""
        assert_starts_before(self._plan(), "a", "b", "c")

    def test_starts_before_rejects_independent_services_in_later_waves(self) -> None:
        """e is in a later wave than b but does not wait for it: the assertion fails, saying so."""
        plan = self._plan()
        assert plan["e"].wave > plan["b"].wave
        with pytest.raises(AssertionError, match="e does not wait for it"):
            assert_starts_before(plan, "b", "e")

    def test_in_and_not_in_plan(self) -> None:
        """Membership assertions name what is missing, and who pulled an unwanted one in."""
        plan = self._plan()
        assert_in_plan(plan, "a", "helper")
        with pytest.raises(AssertionError, match="zzz not in the plan"):
            assert_in_plan(plan, "zzz")
        with pytest.raises(AssertionError, match="helper \\(pulled in by c\\)"):
            assert_not_in_plan(plan, "helper")


class TestRecordingBackend:
    def _plan(self) -> Any:
        plugin = _services_plugin(
            "p",
            Service(
                name="db",
                roles=["r"],
                command=["/usr/bin/db", "--port=5"],
                environment={"TOKEN": Secret("s3cret"), "MODE": "fast"},
                pidfile="/run/db.pid",
                output_log="/var/log/db.log",
            ),
            Service(name="app", roles=["r"], need=["db"], command=["/usr/bin/app"]),
        )
        return plan_from_plugins("r", plugin, builtin=False)

    def test_records_the_exact_process_spec(self, scratch: ScratchRoot) -> None:
        """argv, environment (secrets revealed), pidfile and logs are resolved under the root."""
        report, backend = apply_recorded(self._plan(), scratch)
        assert report.ok
        assert backend.names() == ["db", "app"]
        assert backend.argv("db") == [str(scratch.resolve("/usr/bin/db")), "--port=5"]
        assert backend.node_argv("db") == ["/usr/bin/db", "--port=5"]
        assert backend.environment("db") == {
            **BASE_ENVIRONMENT,
            "NODEROLE_ROOT": str(scratch.path),
            "MODE": "fast",
            "TOKEN": "s3cret",
        }
        spec = backend.spec("db")
        assert spec.pidfile == str(scratch.resolve("/run/db.pid"))
        assert spec.stdout_log == str(scratch.resolve("/var/log/db.log"))

    def test_second_apply_leaves_running_services_alone(self, scratch: ScratchRoot) -> None:
        """Applying again with the same backend starts nothing: the fingerprints match."""
        plan = self._plan()
        _, backend = apply_recorded(plan, scratch)
        report, _ = apply_recorded(plan, scratch, backend=backend)
        assert [r.status for r in report.services] == ["running", "running"]
        assert backend.names() == ["db", "app"]

    def test_refused_start_fails_it_and_skips_dependents(self, scratch: ScratchRoot) -> None:
        """fail={name: reason} refuses that start; services needing it are skipped."""
        backend = RecordingBackend(scratch, fail={"db": "permission denied"})
        report, _ = apply_recorded(self._plan(), scratch, backend=backend)
        reasons = {r.name: (r.status, r.reason) for r in report.services}
        assert reasons["db"] == ("failed", "could not start: permission denied")
        assert reasons["app"][0] == "skipped"
        assert backend.started == []

    @pytest.mark.parametrize("ready", [True, False])
    def test_a_dependency_it_says_is_ready_is_not_checked_again(
        self, scratch: ScratchRoot, ready: bool
    ) -> None:
        """A service needing one with a readiness check: the backend says it is ready, and the
        apply took the check to the scratch root, where no socket is bound, so the dependent
        was `not started: it needs db, which is not ready after 20s`. A backend that says
        `running` still has its dependency checked."""
        socket = noderole.WaitForSocket(path="/run/db.sock", timeout=20)
        plugin = _services_plugin(
            "p",
            Service(name="db", roles=["r"], command=["/usr/bin/db"], readiness=socket),
            Service(name="app", roles=["r"], need=["db"], command=["/usr/bin/app"]),
        )
        plan = plan_from_plugins("r", plugin, builtin=False)
        backend = RecordingBackend(scratch, ready=ready)
        report, _ = apply_recorded(plan, scratch, backend=backend)
        app = next(r for r in report.services if r.name == "app")
        if ready:
            assert (app.status, backend.names()) == ("started", ["db", "app"])
        else:
            assert app.status == "skipped"
            assert "it needs db, which is not ready after 20s" in app.reason

    def test_stop_and_status(self, scratch: ScratchRoot) -> None:
        """stop() records the order and removes the services from status()."""
        _, backend = apply_recorded(self._plan(), scratch)
        assert set(backend.status(["db", "app", "zzz"])) == {"db", "app"}
        backend.stop(["app", "db"])
        assert backend.stopped == ["app", "db"]
        assert backend.status(None) == {}

    def test_spec_of_a_service_never_started_fails_clearly(self, scratch: ScratchRoot) -> None:
        """Asking for a service that was not started is an AssertionError naming what was."""
        backend = RecordingBackend(scratch)
        with pytest.raises(AssertionError, match=r"db was not started \(started: nothing\)"):
            backend.argv("db")


PROBE = """
from noderole.testing import RecordingBackend, ScratchRoot, StandInRunner


def test_fixtures(node_root, fake_clock, recording_backend, standin_runner):
    assert isinstance(node_root, ScratchRoot)
    assert isinstance(standin_runner, StandInRunner)
    assert isinstance(recording_backend, RecordingBackend)
    assert recording_backend.root == node_root.root
    before = fake_clock.monotonic()
    fake_clock.sleep(3600)
    assert fake_clock.monotonic() - before == 3600
"""


class TestOptIn:
    def _pytest(self, directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
        (directory / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n")
        (directory / "test_probe.py").write_text(textwrap.dedent(PROBE))
        env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
            cwd=directory,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def test_fixtures_absent_unless_asked_for(self, tmp_path: Path) -> None:
        """A plain pytest run has no kit fixtures; `-p noderole.testing` provides all four."""
        plain = self._pytest(tmp_path)
        assert plain.returncode == 1, plain.stdout + plain.stderr
        assert "fixture 'node_root' not found" in plain.stdout
        opted = self._pytest(tmp_path, "-p", "noderole.testing")
        assert opted.returncode == 0, opted.stdout + opted.stderr
        assert "1 passed" in opted.stdout

    def test_no_pytest11_entry_point(self) -> None:
        """No installed distribution auto-loads the kit into every pytest run."""
        values = [ep.value for ep in importlib.metadata.entry_points(group="pytest11")]
        assert not [v for v in values if v.startswith("noderole")]


class TestCallHook:
    def _plugin(self) -> types.ModuleType:
        def noderole_services(node: Any) -> Any:
            port = node.settings("demo")["port"]
            yield Service(name=f"demo-{node.role}", roles=["agent"], command=["/bin/x", str(port)])

        def noderole_settings() -> Any:
            return SettingsTable(
                table="demo", settings=[noderole.Setting(name="port", type=int, default=1)]
            )

        return _plugin(
            "demo", noderole_services=noderole_services, noderole_settings=noderole_settings
        )

    def test_one_hook_with_a_node_built_for_the_test(self, scratch: ScratchRoot) -> None:
        """call_hook runs the plugin's hook alone, with config and role, origin stamped."""
        (service,) = call_hook(
            ("demo", self._plugin()),
            "noderole_services",
            node_root=scratch,
            config_text="[demo]\nport = 7\n",
            role="agent",
        )
        assert service.name == "demo-agent"
        assert service.command == ("/bin/x", "7")
        assert service.origin == "demo"

    def test_only_that_plugins_implementation_runs(self, scratch: ScratchRoot) -> None:
        """Other plugins' implementations of the same hook are not called."""
        plugin = self._plugin()
        other = _plugin("other", noderole_services=lambda node: 1 / 0)
        node = node_context(("demo", plugin), ("other", other), node_root=scratch)
        assert [s.name for s in call_hook("demo", "noderole_services", node=node)] == ["demo-None"]

    def test_failures_are_the_ones_plan_shows(self, scratch: ScratchRoot) -> None:
        """A raising hook gives the PluginError noderole would, naming plugin and hook."""
        broken = _plugin("broken", noderole_services=lambda node: 1 / 0)
        with pytest.raises(PluginError, match=r"plugin 'broken' hook noderole_services raised"):
            call_hook(("broken", broken), "noderole_services", node_root=scratch)

    @pytest.mark.parametrize("returned", ["oops", {"name": "x"}, [None]])
    def test_what_a_record_hook_returns_is_checked_as_plan_checks_it(
        self, scratch: ScratchRoot, returned: object
    ) -> None:
        """A services hook returning a string or a dict gave ['oops'] or ['name'] back, where
        `plan` fails with a PluginError: the kit said a broken plugin was fine."""
        wrong = _plugin("wrong", noderole_services=lambda node: returned)
        with pytest.raises(PluginError, match=r"plugin 'wrong' hook noderole_services returned"):
            call_hook(("wrong", wrong), "noderole_services", node_root=scratch)

    def test_a_hook_the_plugin_lacks_is_named(self, scratch: ScratchRoot) -> None:
        """Asking for a hook the plugin does not implement is a LookupError naming both."""
        with pytest.raises(
            LookupError, match=r"plugin 'demo' does not implement noderole_standins"
        ):
            call_hook(("demo", self._plugin()), "noderole_standins", node_root=scratch)


SLEEPER = "#!/usr/bin/env python3\nimport time\nprint('up', flush=True)\ntime.sleep(60)\n"


class TestStandInRunner:
    def test_runs_under_the_root_and_ends_everything(self, scratch: ScratchRoot) -> None:
        """A started stand-in sees NODEROLE_ROOT; close() kills it and finds nothing left."""
        scratch.write("/usr/bin/sleeper", SLEEPER, mode=0o755)
        runner = StandInRunner(scratch)
        try:
            proc = runner.start(["/usr/bin/sleeper"])
            assert proc.stdout is not None
            assert proc.stdout.readline() == b"up\n"
            assert f"NODEROLE_ROOT={scratch.path}".encode() in process_environ(proc.pid)
        finally:
            leftover = runner.close()
        assert leftover == []
        assert proc.returncode is not None

    def test_stage_standins_writes_what_a_rehearsal_writes(self, scratch: ScratchRoot) -> None:
        """stage_standins writes programs, input files and config.toml with the chosen port."""
        from noderole.rehearsal import FreePort, RehearsalFile

        def noderole_standins(node: Any) -> Any:
            return [
                StandIn(path="/usr/bin/demo", content=SLEEPER),
                RehearsalFile(path="/etc/demo.env", content="A=1\n"),
                FreePort(table="demo", key="port"),
            ]

        def noderole_settings() -> SettingsTable:  # the port the rehearsal fills is declared
            return SettingsTable(
                table="demo", settings=[noderole.Setting(name="port", type=int, default=1)]
            )

        plugin = _plugin(
            "demo", noderole_standins=noderole_standins, noderole_settings=noderole_settings
        )
        staged = stage_standins(("demo", plugin), node_root=scratch, pick_port=lambda: 4321)
        assert staged.settings["demo"] == {"port": 4321}
        assert scratch.mode("/usr/bin/demo") == 0o755
        assert scratch.read("/etc/demo.env") == "A=1\n"
        assert "port = 4321" in scratch.read("/etc/noderole/config.toml")
