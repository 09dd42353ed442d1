"""The node-exporter plugin, tested with noderole's plugin-author kit (noderole.testing)."""

from __future__ import annotations

from noderole_node_exporter import plugin

from noderole.testing import (
    FakeClock,
    RecordingBackend,
    ScratchRoot,
    apply_recorded,
    assert_in_plan,
    assert_starts_before,
    call_hook,
    plan_from_plugins,
    run_prestart,
)

TEXTFILES = "/var/lib/node-exporter/textfile"
# The built-in `net` check looks at the real machine's interfaces: off, so tests do not depend
# on the network of the machine they run on.
NO_NET_CHECK = "[noderole]\nnet_check = false\n"


# --8<-- [start:hook]
class TestHook:
    def test_the_port_setting_reaches_the_command(self, node_root: ScratchRoot) -> None:
        """[node-exporter] port is the port the exporter listens on."""
        (service,) = call_hook(
            ("node-exporter", plugin),
            "noderole_services",
            node_root=node_root,
            config_text="[node-exporter]\nport = 9200\n",
            role="agent",
        )
        assert service.origin == "node-exporter"
        assert "--web.listen-address=127.0.0.1:9200" in (service.command or ())


# --8<-- [end:hook]


# --8<-- [start:plan]
class TestPlan:
    def test_every_role_runs_the_exporter_after_the_network(self) -> None:
        """server, server-join and agent each plan node-exporter after `net`."""
        for role in ("server", "server-join", "agent"):
            plan = plan_from_plugins(role, plugin)
            assert_in_plan(plan, "node-exporter")
            assert_starts_before(plan, "net", "node-exporter")

    def test_settings_reach_the_command_line(self, node_root: ScratchRoot) -> None:
        """The port from config.toml is in the listen address and in the readiness URL."""
        config = "[node-exporter]\nport = 9200\n"
        plan = plan_from_plugins("agent", plugin, config_text=config, node_root=node_root)
        service = plan["node-exporter"].service
        assert "--web.listen-address=127.0.0.1:9200" in (service.command or ())
        assert service.readiness is not None
        assert service.readiness.describe().endswith("http://127.0.0.1:9200/metrics")


# --8<-- [end:plan]


# --8<-- [start:prestart]
class TestPrestart:
    def test_waits_for_the_textfile_directory_then_writes_the_metric(
        self, node_root: ScratchRoot, fake_clock: FakeClock
    ) -> None:
        """With the directory present, the wait passes at once and noderole.prom is written."""
        node_root.resolve(TEXTFILES).mkdir(parents=True)
        service = plan_from_plugins("agent", plugin)["node-exporter"].service
        outcome = run_prestart(service, node_root, clock=fake_clock)
        assert outcome.ok, outcome.reason
        assert outcome.waited == [TEXTFILES]
        assert outcome.written == [f"{TEXTFILES}/noderole.prom"]
        assert node_root.read(f"{TEXTFILES}/noderole.prom").startswith("noderole_info{")

    def test_gives_up_after_the_configured_timeout(
        self, node_root: ScratchRoot, fake_clock: FakeClock
    ) -> None:
        """Without the directory the service fails after textfile_timeout (fake) seconds."""
        config = "[node-exporter]\ntextfile_timeout = 5\n"
        plan = plan_from_plugins("agent", plugin, config_text=config, node_root=node_root)
        outcome = run_prestart(plan["node-exporter"].service, node_root, clock=fake_clock)
        assert not outcome.ok
        assert outcome.reason == f"textfile directory {TEXTFILES} not mounted after 5s"
        assert outcome.seconds == 5
        assert outcome.written == []

    def test_a_bad_port_fails_the_service_with_a_message(self, node_root: ScratchRoot) -> None:
        """port = 0 fails node-exporter at start, before it waits for anything."""
        config = "[node-exporter]\nport = 0\n"
        plan = plan_from_plugins("agent", plugin, config_text=config, node_root=node_root)
        outcome = run_prestart(plan["node-exporter"].service, node_root)
        assert outcome.reason == "[node-exporter] port 0 is not 1-65535"
        assert outcome.waited == []


# --8<-- [end:prestart]


# --8<-- [start:apply]
class TestApply:
    def test_apply_starts_the_exporter_with_the_exact_argv(
        self, node_root: ScratchRoot, fake_clock: FakeClock
    ) -> None:
        """A whole apply in-process: the recorded argv and environment, no process started."""
        node_root.resolve(TEXTFILES).mkdir(parents=True)
        plan = plan_from_plugins("agent", plugin, config_text=NO_NET_CHECK, node_root=node_root)
        report, backend = apply_recorded(plan, node_root, clock=fake_clock)
        assert report.ok, report.failed
        assert backend.node_argv("node-exporter") == [
            "/usr/local/bin/node_exporter",
            "--web.listen-address=127.0.0.1:9100",
            f"--collector.textfile.directory={TEXTFILES}",
        ]
        assert backend.spec("node-exporter").pidfile == str(
            node_root.resolve("/run/node-exporter.pid")
        )
        assert "NODEROLE_ROOT" in backend.environment("node-exporter")

    def test_a_refused_start_is_reported(
        self, node_root: ScratchRoot, fake_clock: FakeClock
    ) -> None:
        """When the backend refuses the start, apply reports node-exporter as failed."""
        node_root.resolve(TEXTFILES).mkdir(parents=True)
        plan = plan_from_plugins("agent", plugin, config_text=NO_NET_CHECK, node_root=node_root)
        refusing = RecordingBackend(node_root, fail={"node-exporter": "no such file"})
        report, _ = apply_recorded(plan, node_root, clock=fake_clock, backend=refusing)
        assert [(r.name, r.reason) for r in report.failed] == [
            ("node-exporter", "could not start: no such file")
        ]


# --8<-- [end:apply]
