"""`noderole renew`, `cert check --role` and the renewal schedules, on a fake clock.

The certificate steps run for real under a scratch root (a k3s-style CA, real minting); services
are started by a recording backend, so what restarts is exactly what the backend was asked.
"""

from __future__ import annotations

import json
import os
import subprocess
import types
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import noderole
from noderole.backends import Backend
from noderole.cli import cli
from noderole.cli._app import App
from noderole.clock import FakeClock
from noderole.errors import UsageError
from noderole.operations import Operations
from noderole.root import NodeRoot
from noderole.schedule import (
    OPENRC_PERIODIC,
    RENEW_SERVICE,
    SYSTEMD_TIMER,
    jitter_offset,
    periodic_files,
)
from noderole.testing import (
    ClusterCA,
    RecordingBackend,
    ScratchRoot,
    load_certificate,
)
from noderole_k3s.testing import K3S_CA_CERT, K3S_CA_KEY, make_k3s_ca

DAY = 86400.0
CERT = "/var/lib/proxy/tls.crt"


def _plugin(sans: list[str]) -> types.ModuleType:
    """``proxy`` mints a serving certificate (SANs read from ``sans`` at each call; none at all,
    as the konnectivity plugin does when its input file is gone: a Fail step instead); ``db``
    mints nothing; both in role ``r``."""
    module = types.ModuleType("certplugin")

    def noderole_services() -> list[noderole.Service]:
        db_steps = [noderole.MakeDirectories(paths=["/var/lib/db"])]
        last: noderole.Step = noderole.Fail(message="/etc/proxy.env is missing: restore it")
        if sans:
            last = noderole.MintCertificate(
                directory="/var/lib/proxy",
                ca_cert=K3S_CA_CERT,
                ca_key=K3S_CA_KEY,
                common_name="proxy",
                sans=list(sans),
            )
        return [
            noderole.Service(
                name="proxy",
                roles=["r"],
                command=["/bin/proxy"],
                pre_start=[noderole.MakeDirectories(paths=["/var/lib/proxy"], mode=0o700), last],
            ),
            # A check that fails in front of its other steps (node-exporter's port): no sign
            # of a certificate left out; renew leaves it alone.
            noderole.Service(
                name="db",
                roles=["r"],
                command=["/bin/db"],
                pre_start=[] if sans else [noderole.Fail(message="bad port"), *db_steps],
            ),
        ]

    module.noderole_services = noderole.hookimpl(noderole_services)  # type: ignore[attr-defined]
    return module


class _App(App):
    """The command line's App with the recording backend whatever --backend says."""

    recorder: RecordingBackend

    def backend(self, requested: str = "auto") -> Backend:
        return self.recorder


@pytest.fixture
def sans() -> list[str]:
    return ["proxy.example.com", "10.0.0.1"]


@pytest.fixture
def app(node_root: ScratchRoot, k3s_ca: ClusterCA, fake_clock: FakeClock, sans: list[str]) -> _App:
    """Role ``r`` applied once through a recording backend, on the fake clock."""
    made = _App(
        root=NodeRoot(node_root.path),
        clock=fake_clock,
        plugin_objects=(("certplugin", _plugin(sans)),),
        autoload=False,
    )
    made.recorder = RecordingBackend(node_root)
    report = made.apply(made.plan("r"), made.recorder)
    assert report.ok, report
    assert sorted(made.recorder.names()) == ["db", "proxy"]
    return made


def _renew(app: _App) -> dict[str, Any]:
    report = app.renew(app.plan("r"), app.recorder)
    return {s.name: s for s in report.services}


class TestRenew:
    def test_nothing_due_touches_nothing(self, app: _App, node_root: ScratchRoot) -> None:
        """A fresh certificate: nothing re-minted, nothing restarted, the report says why."""
        before = node_root.read(CERT)
        services = _renew(app)
        assert list(services) == ["proxy"]
        assert services["proxy"].status == "running"
        assert "certificate good" in services["proxy"].reason
        assert "days left" in services["proxy"].reason
        assert len(app.recorder.started) == 2
        assert node_root.read(CERT) == before

    def test_window_reached_on_the_clock(
        self, app: _App, node_root: ScratchRoot, fake_clock: FakeClock
    ) -> None:
        """Past the 90-day window: proxy is re-minted and restarted with its reason; db is not."""
        before = node_root.read(CERT)
        fake_clock.advance(280 * DAY)
        services = _renew(app)
        proxy = services["proxy"]
        assert proxy.status == "restarted", proxy
        assert "re-minted" in proxy.reason
        assert "expires in 84 days" in proxy.reason
        assert proxy.minted == (CERT,)
        assert "db" not in services
        assert app.recorder.names()[2:] == ["proxy"]
        assert node_root.read(CERT) != before
        # Renewed: the next run finds nothing to do.
        assert _renew(app)["proxy"].status == "running"
        assert app.recorder.names()[2:] == ["proxy"]

    def test_renewal_refreshes_the_fleet_metrics(
        self, node_root: ScratchRoot, k3s_ca: ClusterCA, fake_clock: FakeClock, sans: list[str]
    ) -> None:
        """With textfile_dir set, renew rewrites noderole.prom: the expiry series moves on."""
        node_root.write_config('[noderole]\nnet_check = false\ntextfile_dir = "/collector"\n')
        node_root.resolve("/collector").mkdir()
        made = _App(
            root=NodeRoot(node_root.path),
            clock=fake_clock,
            plugin_objects=(("certplugin", _plugin(sans)),),
            autoload=False,
        )
        made.recorder = RecordingBackend(node_root)
        assert made.apply(made.plan("r"), made.recorder).ok

        def expiry() -> float:
            for line in node_root.read("/collector/noderole.prom").splitlines():
                if line.startswith("noderole_certificate_expiry_timestamp_seconds{"):
                    return float(line.rsplit(" ", 1)[1])
            raise AssertionError("no certificate expiry series in noderole.prom")

        before = expiry()
        fake_clock.advance(280 * DAY)
        assert _renew(made)["proxy"].status == "restarted"
        assert expiry() > before + 200 * DAY  # a new 365-day certificate from the later now

    def test_changed_ca(self, app: _App, node_root: ScratchRoot, fake_clock: FakeClock) -> None:
        """A rotated CA (same paths, new key) re-mints at once."""
        make_k3s_ca(node_root)
        # The new CA is valid from the real now, which the fake clock (set when the test began)
        # may not have reached.
        fake_clock.advance(120)
        proxy = _renew(app)["proxy"]
        assert proxy.status == "restarted", proxy.reason
        assert "issued by a different CA" in proxy.reason
        assert ClusterCA.signed(make_ca_view(node_root), load_certificate(node_root.resolve(CERT)))

    def test_changed_sans(self, app: _App, sans: list[str]) -> None:
        """SANs the service asks for changed: re-minted, restarted, the change named."""
        sans.append("new.example.com")
        proxy = _renew(app)["proxy"]
        assert proxy.status == "restarted"
        assert "SANs changed: +new.example.com" in proxy.reason

    def test_stopped_service_is_left_to_apply(
        self, app: _App, fake_clock: FakeClock, node_root: ScratchRoot
    ) -> None:
        """A stopped service is not started by renew, even with its certificate due."""
        app.recorder.stop(["proxy"])
        before = node_root.read(CERT)
        fake_clock.advance(300 * DAY)
        assert _renew(app) == {}
        assert node_root.read(CERT) == before
        assert len(app.recorder.started) == 2

    def test_a_certificate_replaced_since_the_start_restarts_its_service(
        self, app: _App, node_root: ScratchRoot
    ) -> None:
        """A renew killed between its re-mint and its restart (SIGTERM from a timeout, an OOM
        kill) left a new certificate on disk and the service on the old one; nothing is due
        any more. The next renew restarts it (as apply would), instead of reporting "good"
        every day until the running process's certificate expires."""
        from noderole.testing import run_prestart

        proxy = app.plan("r")["proxy"].service
        node_root.resolve(CERT).unlink()
        assert run_prestart(proxy, node_root.path).error is None  # a new pair, not yet served
        services = _renew(app)
        assert services["proxy"].status == "restarted", services["proxy"]
        assert "changed since it was started" in services["proxy"].reason
        assert len(app.recorder.started) == 3
        assert _renew(app)["proxy"].status == "running"  # and done: not again

    def test_dry_run_after_an_interrupted_renew_says_restart_as_apply_does(
        self, app: _App, node_root: ScratchRoot
    ) -> None:
        """A renew killed between its re-mint and its restart left a new certificate on disk
        and the process on the old one: `apply --dry-run` says restart, with the reason
        `apply` then gives. Before, the dry run compared the definition with the record
        alone, found it unchanged and the certificate good, and said "running, unchanged",
        while apply restarted the service."""
        from noderole.testing import run_prestart

        proxy = app.plan("r")["proxy"].service
        node_root.resolve(CERT).unlink()
        assert run_prestart(proxy, node_root.path).error is None  # a new pair, not yet served
        why = f"certificate {CERT} changed since it was started, not by this apply"
        rows = {row["name"]: row for row in app.dry_run(app.plan("r"), app.recorder)}
        assert (rows["proxy"]["action"], rows["proxy"]["why"]) == ("restart", why)
        assert (rows["db"]["action"], rows["db"]["why"]) == ("keep", "running, unchanged")
        applied = {s.name: s for s in app.apply(app.plan("r"), app.recorder).services}
        assert (applied["proxy"].status, applied["proxy"].reason) == (
            "restarted",
            f"restarted: {why}",
        )
        assert applied["db"].status == "running"

    def test_unusable_ca_fails_without_restart(self, app: _App, node_root: ScratchRoot) -> None:
        """A CA key that went missing fails the service's renewal; its process keeps running."""
        node_root.resolve(K3S_CA_KEY).unlink()
        proxy = _renew(app)["proxy"]
        assert proxy.status == "failed"
        assert "cannot renew" in proxy.reason
        assert "does not exist" in proxy.reason
        assert len(app.recorder.started) == 2

    def test_a_service_whose_inputs_are_gone_fails_its_renewal(
        self, app: _App, sans: list[str], fake_clock: FakeClock
    ) -> None:
        """The konnectivity plugin fails its pre-start when first-boot.env is gone, in place
        of the mint: renew said "0 of 0 services renewed", exit 0, every day, while the
        running process's certificate expired. It fails, with the plugin's words; the process
        runs on, untouched."""
        sans.clear()
        fake_clock.advance(400 * DAY)
        renewed = _renew(app)
        assert list(renewed) == ["proxy"]  # not db, whose failing step is not its last
        proxy = renewed["proxy"]
        assert proxy.status == "failed"
        assert proxy.reason == (
            "cannot renew: its pre-start fails: /etc/proxy.env is missing: restore it"
        )
        assert len(app.recorder.started) == 2
        result = CliRunner().invoke(cli, ["renew"], obj=app)
        assert result.exit_code == 1, result.output
        checked = CliRunner().invoke(cli, ["cert", "check", "--role", "r", "--json"], obj=app)
        assert checked.exit_code == 1, checked.output
        (check,) = json.loads(checked.stdout)
        assert (check["service"], check["due"]) == ("proxy", True)
        assert check["error"] == "its pre-start fails: /etc/proxy.env is missing: restore it"

    def test_cli_json_and_exit_status(self, app: _App, fake_clock: FakeClock) -> None:
        """`renew --json` prints apply's report shape; exit 0 when the renewed service is up."""
        fake_clock.advance(300 * DAY)
        result = CliRunner().invoke(cli, ["renew", "r", "--json"], obj=app)
        assert result.exit_code == 0, result.output
        document = json.loads(result.stdout)
        assert document["role"] == "r"
        assert document["ok"] is True
        assert [s["name"] for s in document["services"]] == ["proxy"]
        assert document["services"][0]["status"] == "restarted"

    def test_cli_failure_exits_1(self, app: _App, node_root: ScratchRoot) -> None:
        """A renewal that fails exits 1, as a failed apply does."""
        node_root.resolve(K3S_CA_KEY).unlink()
        result = CliRunner().invoke(cli, ["renew"], obj=app)
        assert result.exit_code == 1
        assert "proxy: failed: cannot renew" in result.stdout
        # A failed renewal is not counted as renewed, and its process runs on the old pair.
        assert "role r: 0 of 1 services with certificates renewed, 1 failed" in result.stdout
        assert "failed to start" not in result.stdout

    def test_cli_text_names_each_reason_once(self, app: _App, fake_clock: FakeClock) -> None:
        """The text report: one line per service, its status, then its reason."""
        fake_clock.advance(300 * DAY)
        result = CliRunner().invoke(cli, ["renew"], obj=app)
        assert result.exit_code == 0, result.output
        (line,) = [x for x in result.stdout.splitlines() if x.startswith("  proxy:")]
        assert line.startswith("  proxy: restarted: certificate /var/lib/proxy/tls.crt re-minted")
        assert "role r: 1 of 1 services with certificates renewed" in result.stdout

    def test_check_needs_paths_or_role(self, app: _App) -> None:
        """`cert check` with neither PATHs nor --role says what to give."""
        result = CliRunner().invoke(cli, ["cert", "check"], obj=app)
        assert result.exit_code == 2
        assert "name certificate PATHs, or --role ROLE" in result.output


def make_ca_view(node_root: ScratchRoot) -> ClusterCA:
    """The CA now at k3s's paths, as a ClusterCA (for its ``signed`` check)."""
    return ClusterCA(
        cert_path=K3S_CA_CERT,
        key_path=K3S_CA_KEY,
        cert_file=node_root.resolve(K3S_CA_CERT),
        key_file=node_root.resolve(K3S_CA_KEY),
        common_name="",
    )


def reissue_ca(node_root: ScratchRoot, *, days: float, now: float) -> None:
    """The CA at k3s's paths issued again with the same key and subject (so what it signed
    still verifies), to expire ``days`` after ``now``."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    old = load_certificate(node_root.resolve(K3S_CA_CERT))
    key = serialization.load_pem_private_key(
        node_root.resolve(K3S_CA_KEY).read_bytes(), password=None
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(old.subject)
        .issuer_name(old.subject)
        .public_key(key.public_key())  # type: ignore[arg-type]
        .serial_number(x509.random_serial_number())
        .not_valid_before(old.not_valid_before_utc)
        .not_valid_after(dt.datetime.fromtimestamp(now + days * DAY, tz=dt.UTC))
    )
    for extension in old.extensions:
        builder = builder.add_extension(extension.value, extension.critical)
    new = builder.sign(key, hashes.SHA256())  # type: ignore[arg-type]
    node_root.resolve(K3S_CA_CERT).write_bytes(new.public_bytes(serialization.Encoding.PEM))


class TestTheCaExpiresFirst:
    """A leaf cannot outlive its CA: the mint caps it at the CA's expiry. Inside the renewal
    window such a leaf is kept (a new one could not last longer), and whoever watches
    renewals hears it: only rotating the CA helps. Before, ``cert check`` said "REUSE yes"
    and ``renew`` "certificate good" until every client refused the chain."""

    ROTATE = "rotate the cluster CA (k3s certificate rotate-ca)"

    def test_a_ca_valid_for_20_days_fails_the_checks_naming_its_rotation(
        self, app: _App, node_root: ScratchRoot, fake_clock: FakeClock
    ) -> None:
        make_k3s_ca(node_root, days=20)
        fake_clock.advance(120)  # the new CA is valid from the real now
        assert app.apply(app.plan("r"), app.recorder).ok  # minted from it, capped at its expiry
        started = len(app.recorder.started)
        checked = CliRunner().invoke(cli, ["cert", "check", "--role", "r", "--json"], obj=app)
        assert checked.exit_code == 1, checked.output
        (check,) = json.loads(checked.stdout)
        assert check["days_left"] == 19
        assert check["error"].startswith("expires in 19 days, together with the CA (on ")
        assert self.ROTATE in check["error"]
        renewed = CliRunner().invoke(cli, ["renew"], obj=app)
        assert renewed.exit_code == 1, renewed.output
        assert f"proxy: failed: cannot renew: {CERT}: expires in 19 days" in renewed.stdout
        assert len(app.recorder.started) == started  # nothing restarted: it would change nothing
        by_path = CliRunner().invoke(
            cli, ["cert", "check", CERT, "--ca-cert", K3S_CA_CERT, "--json"], obj=app
        )
        assert by_path.exit_code == 1, by_path.output
        (report,) = json.loads(by_path.stdout)
        assert report["reusable"] is True  # the mint keeps it
        assert self.ROTATE in report["warning"]
        table = CliRunner().invoke(cli, ["cert", "check", CERT, "--ca-cert", K3S_CA_CERT], obj=app)
        assert table.exit_code == 1
        assert "yes, but cannot be renewed: expires in 19 days" in table.stdout

    def test_a_leaf_past_a_reissued_ca_is_reminted(
        self, app: _App, node_root: ScratchRoot, fake_clock: FakeClock
    ) -> None:
        """The CA issued again (same key and name) for 20 days, the 364-day leaf kept: its
        signature still verifies, and renew called it good for 364 days. It is due; renew
        re-mints it up to the CA's expiry, and from then on the checks ask for the CA's
        rotation."""
        reissue_ca(node_root, days=20, now=fake_clock.time())
        ca = load_certificate(node_root.resolve(K3S_CA_CERT))
        checked = CliRunner().invoke(cli, ["cert", "check", "--role", "r", "--json"], obj=app)
        assert checked.exit_code == 1, checked.output
        (check,) = json.loads(checked.stdout)
        assert (check["due"], check["error"]) == (True, "")
        assert "past its CA's expiry on" in check["reason"]
        assert "the CA itself expires in 19 days: " + self.ROTATE in check["reason"]
        by_path = CliRunner().invoke(
            cli, ["cert", "check", CERT, "--ca-cert", K3S_CA_CERT], obj=app
        )
        assert by_path.exit_code == 1
        assert "no: valid until" in by_path.stdout
        proxy = _renew(app)["proxy"]
        assert proxy.status == "restarted", proxy
        assert "past its CA's expiry" in proxy.reason
        leaf = load_certificate(node_root.resolve(CERT))
        assert leaf.not_valid_after_utc == ca.not_valid_after_utc
        again = CliRunner().invoke(cli, ["cert", "check", "--role", "r", "--json"], obj=app)
        assert again.exit_code == 1
        assert self.ROTATE in json.loads(again.stdout)[0]["error"]


class TestCertCheckRole:
    def test_lists_and_passes_when_good(self, app: _App) -> None:
        """Every certificate of the role with issuer, SANs and days left; exit 0 when none due."""
        result = CliRunner().invoke(cli, ["cert", "check", "--role", "r"], obj=app)
        assert result.exit_code == 0, result.output
        header, row = result.stdout.splitlines()
        assert header.split()[:4] == ["SERVICE", "CERTIFICATE", "ISSUER", "SANS"]
        assert row.startswith("proxy")
        assert CERT in row
        assert "k3s-server-ca@" in row
        assert "proxy.example.com,10.0.0.1" in row
        assert row.split()[-1] == "no"

    def test_exits_1_inside_the_window(self, app: _App, fake_clock: FakeClock) -> None:
        """Inside its window the certificate is due and the command exits 1."""
        fake_clock.advance(300 * DAY)
        result = CliRunner().invoke(cli, ["cert", "check", "--role", "r", "--json"], obj=app)
        assert result.exit_code == 1
        (check,) = json.loads(result.stdout)
        assert check["service"] == "proxy"
        assert check["due"] is True
        assert check["days_left"] == 64
        assert "renewal window 90 days" in check["reason"]

    def test_missing_certificate_is_due(self, app: _App, node_root: ScratchRoot) -> None:
        """A certificate not minted yet shows as due (no existing certificate)."""
        node_root.resolve(CERT).unlink()
        result = CliRunner().invoke(cli, ["cert", "check", "--role", "r"], obj=app)
        assert result.exit_code == 1
        assert "due: no existing certificate" in result.stdout

    def test_role_and_paths_together_refused(self, app: _App) -> None:
        """--role with PATHs is a usage error naming both."""
        result = CliRunner().invoke(cli, ["cert", "check", "--role", "r", "/x.crt"], obj=app)
        assert result.exit_code == 2
        assert "--role cannot be combined with PATHs: " in result.output


def _ops(root: Path, config: str, *, role_plugin: bool = True) -> Operations:
    node = ScratchRoot(root)
    node.write_config(config)
    plugins = (("certplugin", _plugin(["a.example"])),) if role_plugin else ()
    return Operations(root=NodeRoot(root), plugin_objects=plugins, autoload=False)


class TestSchedule:
    def test_native_service_in_every_role(self, tmp_path: Path) -> None:
        """With the native backend the role gets noderole-renew: a sh loop, stable offset."""
        ops = _ops(tmp_path, '[noderole]\nbackend = "native"\nrenew_interval = 3600\n')
        ScratchRoot(tmp_path).write("/etc/machine-id", "0123456789abcdef\n")
        service = ops.plan("r")[RENEW_SERVICE].service
        assert service.command is not None
        offset = jitter_offset(NodeRoot(tmp_path), 3600)
        assert service.command[0] == "/bin/sh"
        assert list(service.command[3:]) == [
            RENEW_SERVICE,
            str(offset),
            "3600",
            "/usr/local/bin/noderole",
        ]
        again = ops.at_root(NodeRoot(tmp_path)).plan("r")[RENEW_SERVICE].service
        assert again == service

    def test_offset_differs_between_nodes(self, tmp_path: Path) -> None:
        """Two machine ids give two offsets within the jitter; the same id the same one."""
        offsets = set()
        for number in range(8):
            node = ScratchRoot(tmp_path / str(number))
            node.write("/etc/machine-id", f"{number:032x}\n")
            offsets.add(jitter_offset(NodeRoot(node.path), 3600))
            assert jitter_offset(NodeRoot(node.path), 3600) in offsets
        assert len(offsets) > 1
        assert all(0 <= o < 3600 for o in offsets)

    @pytest.mark.parametrize(
        "config",
        [
            '[noderole]\nbackend = "native"\nrenew_interval = 0\n',
            "[noderole]\n",  # auto under --root: a scratch root gets no loop
            '[noderole]\nbackend = "openrc"\n',
        ],
    )
    def test_no_service(self, tmp_path: Path, config: str) -> None:
        """Off, under --root with auto, or with an init system: no noderole-renew service."""
        assert RENEW_SERVICE not in _ops(tmp_path, config).plan("r")

    def test_render_openrc_writes_the_periodic_job(self, tmp_path: Path) -> None:
        """render --backend openrc writes /etc/periodic/daily/noderole-renew, never the loop."""
        ops = _ops(tmp_path, '[noderole]\nbackend = "native"\n')
        result = ops.render("r", "openrc")
        paths = {item.path for item in result.items}
        assert OPENRC_PERIODIC in paths
        assert f"/etc/init.d/{RENEW_SERVICE}" not in paths
        job = ScratchRoot(tmp_path).resolve(OPENRC_PERIODIC)
        assert os.stat(job).st_mode & 0o777 == 0o755
        assert "renew --backend openrc" in job.read_text()

    def test_render_systemd_writes_the_timer(self, tmp_path: Path) -> None:
        """render --backend systemd writes noderole-renew.service and a daily, jittered timer."""
        ops = _ops(tmp_path, "[noderole]\nrenew_jitter = 600\n")
        ops.render("r", "systemd")
        timer = ScratchRoot(tmp_path).read(SYSTEMD_TIMER)
        assert "OnCalendar=daily" in timer
        assert "RandomizedDelaySec=600" in timer
        link = ScratchRoot(tmp_path).resolve(
            "/etc/systemd/system/timers.target.wants/noderole-renew.timer"
        )
        assert os.readlink(link) == "../noderole-renew.timer"

    def test_timer_follows_the_interval(self, tmp_path: Path) -> None:
        """A renew_interval other than a day makes the timer monotonic, every that many seconds,
        with an accuracy that does not stretch a short interval."""
        ops = _ops(tmp_path, "[noderole]\nrenew_interval = 2.5\nrenew_jitter = 0\n")
        ops.render("r", "systemd")
        timer = ScratchRoot(tmp_path).read(SYSTEMD_TIMER)
        assert "OnCalendar" not in timer
        assert "OnActiveSec=2500ms\nOnUnitActiveSec=2500ms\nAccuracySec=250ms\n" in timer
        assert "every 2.5 s" in timer
        hourly = periodic_files("systemd", noderole_path="/n", interval=3600, jitter=60)
        assert "AccuracySec=60000ms\nRandomizedDelaySec=60\n" in hourly[1].content  # type: ignore[union-attr]

    def test_enable_installs_the_timer_of_the_setting(self, tmp_path: Path) -> None:
        """enable writes the timer for renew_interval, and no periodic job when it is 0."""
        from noderole.bootentry import boot_entry

        paths = {b.path for b in boot_entry("systemd", noderole_path="/n", renew_interval=0)}
        assert SYSTEMD_TIMER not in paths
        (timer,) = [
            b
            for b in boot_entry("systemd", noderole_path="/n", renew_interval=60, renew_jitter=0)
            if b.path == SYSTEMD_TIMER
        ]
        assert timer.content is not None
        assert "OnUnitActiveSec=60000ms" in timer.content

    def test_render_without_renewal(self, tmp_path: Path) -> None:
        """renew_interval = 0: render writes no periodic job."""
        ops = _ops(tmp_path, "[noderole]\nrenew_interval = 0\n")
        paths = {item.path for item in ops.render("r", "openrc").items}
        assert OPENRC_PERIODIC not in paths

    def test_periodic_files_for_native_and_unknown(self) -> None:
        """Native has no periodic file (its loop is a service); an unknown backend is refused."""
        assert periodic_files("native", noderole_path="/n") == []
        with pytest.raises(UsageError, match="use openrc or systemd"):
            periodic_files("runit", noderole_path="/n")

    def test_openrc_job_is_valid_sh(self, tmp_path: Path) -> None:
        """The periodic job parses as POSIX sh (dash -n)."""
        (job,) = periodic_files("openrc", noderole_path="/usr/local/bin/noderole")
        script = tmp_path / "job"
        script.write_text(job.content)  # type: ignore[union-attr]
        assert subprocess.run(["sh", "-n", str(script)], check=False).returncode == 0

    def test_openrc_job_runs_renew_in_the_background(self, tmp_path: Path) -> None:
        """The daily job run as run-parts runs it: it returns at once, and in the background
        runs `noderole renew --backend openrc` with its output in /var/log/noderole-renew.log
        (a private /var/log, and a pid namespace that ends whatever is left)."""
        from tests.harness.openrc import unshare_problem

        problem = unshare_problem()
        if problem:
            pytest.skip(problem)
        calls = tmp_path / "calls"
        stand_in = tmp_path / "noderole"
        stand_in.write_text(f'#!/bin/sh\necho "renewed by the stand-in"\necho "$@" > {calls}\n')
        stand_in.chmod(0o755)
        (job,) = periodic_files("openrc", noderole_path=str(stand_in), jitter=0)
        script = tmp_path / "noderole-renew"
        script.write_text(job.content)  # type: ignore[union-attr]
        script.chmod(0o755)
        wrapper = (
            f'mount -t tmpfs tmpfs /var/log && {script}; echo "job exited $?"; '
            f"i=0; while [ ! -s {calls} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; "
            "cat /var/log/noderole-renew.log"
        )
        done = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "--pid", "--fork", "sh", "-c", wrapper],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("job exited 0\n"), done.stdout
        assert calls.read_text() == "renew --backend openrc\n"
        assert "renewed by the stand-in" in done.stdout

    def test_loop_runs_renew_repeatedly(self, tmp_path: Path) -> None:
        """The loop's command, run for real: it calls `noderole renew --backend native` again
        and again (a stand-in noderole counts the calls)."""
        ops = _ops(
            tmp_path,
            '[noderole]\nbackend = "native"\nrenew_interval = 0.01\nrenew_jitter = 0\n'
            f'noderole_path = "{tmp_path}/noderole"\n',
        )
        calls = tmp_path / "calls"
        stand_in = tmp_path / "noderole"
        stand_in.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
        stand_in.chmod(0o755)
        command = ops.plan("r")[RENEW_SERVICE].service.command
        assert command is not None
        process = subprocess.Popen(list(command), stdin=subprocess.DEVNULL)
        try:
            from noderole.testing import eventually

            eventually(
                lambda: calls.exists() and len(calls.read_text().splitlines()) >= 3,
                "three renew calls",
            )
        finally:
            process.kill()
            process.wait()
        assert set(calls.read_text().splitlines()) == {"renew --backend native"}
