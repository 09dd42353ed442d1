"""Fleet metrics: the Prometheus exposition, its atomic textfile, a real node_exporter scrape."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
import types
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

import noderole
from noderole.cli import cli
from noderole.cli._app import App
from noderole.metrics import (
    TEXTFILE,
    ApplyOutcome,
    CertificateExpiry,
    ServiceSample,
    read_last_apply,
    render_metrics,
    write_textfile,
)
from noderole.root import NodeRoot
from noderole.supervisor import _textfile
from tests.harness.node_exporter import node_exporter, promtool

SAMPLE = render_metrics(
    role="server",
    apply=ApplyOutcome(role="server", ok=False, seconds=2.5, timestamp=1_700_000_000.0),
    services=[
        ServiceSample(name="k3s", state="ready", restarts=3),
        ServiceSample(name='odd"name\\x', state="crashed"),
    ],
    certificates=[
        CertificateExpiry(service="k3s", path="/var/lib/tls.crt", not_after=1_800_000_000.0)
    ],
)


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


class TestExposition:
    def test_reference_parser_reads_names_types_and_help(self) -> None:
        """prometheus_client's parser reads every family with its type and HELP text."""
        families = {f.name: f for f in text_string_to_metric_families(SAMPLE)}
        assert families["noderole_apply_success"].type == "gauge"
        assert families["noderole_apply_duration_seconds"].type == "gauge"
        assert families["noderole_apply_timestamp_seconds"].type == "gauge"
        assert families["noderole_service_up"].type == "gauge"
        assert families["noderole_service_state"].type == "gauge"
        # the parser strips a counter's _total suffix from the family name
        assert families["noderole_service_restarts"].type == "counter"
        assert families["noderole_certificate_expiry_timestamp_seconds"].type == "gauge"
        assert all(f.documentation for f in families.values())

    def test_values_and_escaped_labels(self) -> None:
        """Values per series; quotes and backslashes in label values survive the round trip."""
        got = samples(SAMPLE)
        assert got[("noderole_apply_success", frozenset({("role", "server")}))] == 0
        assert got[("noderole_apply_duration_seconds", frozenset({("role", "server")}))] == 2.5
        up = frozenset({("role", "server"), ("service", "k3s")})
        assert got[("noderole_service_up", up)] == 1
        odd = frozenset({("role", "server"), ("service", 'odd"name\\x')})
        assert got[("noderole_service_up", odd)] == 0
        states = {
            dict(labels)["state"]: value
            for (name, labels), value in got.items()
            if name == "noderole_service_state" and dict(labels)["service"] == "k3s"
        }
        assert states == {
            "starting": 0,
            "running": 0,
            "ready": 1,
            "backoff": 0,
            "crashed": 0,
            "stopped": 0,
        }
        restarts = frozenset({("service", "k3s")})
        assert got[("noderole_service_restarts_total", restarts)] == 3
        cert = frozenset({("service", "k3s"), ("path", "/var/lib/tls.crt")})
        assert got[("noderole_certificate_expiry_timestamp_seconds", cert)] == 1_800_000_000

    def test_backoff_has_its_series(self) -> None:
        """A native service waiting to respawn (backoff) is down with state backoff 1."""
        got = samples(
            render_metrics(
                role="r", apply=None, services=[ServiceSample(name="a", state="backoff")]
            )
        )
        assert (
            got[("noderole_service_state", frozenset({("service", "a"), ("state", "backoff")}))]
            == 1
        )
        assert got[("noderole_service_up", frozenset({("role", "r"), ("service", "a")}))] == 0

    def test_nothing_known_renders_nothing(self) -> None:
        """No apply, no service, no certificate: an empty exposition, not empty families."""
        assert render_metrics(role="server", apply=None, services=[]) == ""


class TestTextfile:
    def test_replaces_atomically(self, tmp_path: Path) -> None:
        """write_textfile replaces noderole.prom and leaves no temporary file behind."""
        write_textfile(tmp_path, "old 1\n")
        path = write_textfile(tmp_path, SAMPLE)
        assert path == tmp_path / TEXTFILE
        assert path.read_text() == SAMPLE
        assert sorted(os.listdir(tmp_path)) == [TEXTFILE]

    def test_refuses_a_symlink(self, tmp_path: Path) -> None:
        """A link planted at noderole.prom is refused, its target untouched."""
        target = tmp_path / "elsewhere"
        target.write_text("keep")
        (tmp_path / TEXTFILE).symlink_to(target)
        with pytest.raises(OSError, match=TEXTFILE):
            write_textfile(tmp_path, SAMPLE)
        assert target.read_text() == "keep"

    def test_refuses_a_directory_link_others_could_plant(self, tmp_path: Path) -> None:
        """textfile_dir a link in a directory others can write: refused, as the supervisor does."""
        shared = tmp_path / "shared"
        shared.mkdir()
        shared.chmod(0o777)  # like node_exporter's own state directory: not root's alone
        victim = tmp_path / "victim"
        victim.mkdir()
        (victim / TEXTFILE).write_text("keep")
        (shared / "textfile").symlink_to(victim)
        with pytest.raises(OSError, match="refusing to follow the symbolic link"):
            write_textfile(shared / "textfile", SAMPLE)
        assert (victim / TEXTFILE).read_text() == "keep"
        assert sorted(os.listdir(victim)) == [TEXTFILE]

    def test_follows_a_directory_link_only_root_could_make(self, tmp_path: Path) -> None:
        """A link in a directory only its owner can write is followed (a relocated collector)."""
        real = tmp_path / "real"
        real.mkdir()
        (tmp_path / "textfile").symlink_to(real)
        write_textfile(tmp_path / "textfile", SAMPLE)
        assert (real / TEXTFILE).read_text() == SAMPLE

    def test_a_file_at_the_directory_names_the_setting(self, tmp_path: Path) -> None:
        """textfile_dir naming a regular file: the error names the setting and the fix."""
        (tmp_path / "prom").write_text("not a directory\n")
        with pytest.raises(FileNotFoundError, match=r"textfile_dir .* is not a directory"):
            write_textfile(tmp_path / "prom", SAMPLE)

    def test_missing_directory_names_the_setting(self, tmp_path: Path) -> None:
        """A missing directory is an error naming textfile_dir and the fix."""
        with pytest.raises(FileNotFoundError, match="textfile_dir"):
            write_textfile(tmp_path / "absent", SAMPLE)


def _plugin() -> types.ModuleType:
    module = types.ModuleType("metrics_plugin")

    @noderole.hookimpl
    def noderole_services(node: object) -> list[noderole.Service]:
        return [
            noderole.Service(name="prep", roles=["demo"]),
            noderole.Service(name="idle", roles=["quiet"], command=["/bin/true"]),
        ]

    module.noderole_services = noderole_services  # type: ignore[attr-defined]
    return module


def run(root: Path, *args: str) -> object:
    app = App(root=NodeRoot(root), plugin_objects=(("metrics", _plugin()),), autoload=False)
    return CliRunner().invoke(cli, list(args), obj=app)


class TestWiring:
    def test_apply_records_outcome_and_writes_textfile(self, tmp_path: Path) -> None:
        """apply keeps its outcome and, with textfile_dir set, rewrites noderole.prom."""
        (tmp_path / "etc/noderole").mkdir(parents=True)
        (tmp_path / "collector").mkdir()
        (tmp_path / "etc/noderole/config.toml").write_text(
            '[noderole]\nnet_check = false\ntextfile_dir = "/collector"\n'
        )
        result = run(tmp_path, "apply", "demo", "--backend", "native")
        assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
        outcome = read_last_apply(NodeRoot(tmp_path), "demo")
        assert outcome is not None
        assert outcome.ok is True
        got = samples((tmp_path / "collector" / TEXTFILE).read_text())
        assert got[("noderole_apply_success", frozenset({("role", "demo")}))] == 1

    def test_status_format_prometheus(self, tmp_path: Path) -> None:
        """status --format prometheus prints the role's series (here: a stopped service)."""
        result = run(tmp_path, "status", "quiet", "--backend", "native", "--format", "prometheus")
        assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
        got = samples(result.output)  # type: ignore[attr-defined]
        stopped = frozenset({("service", "idle"), ("state", "stopped")})
        assert got[("noderole_service_state", stopped)] == 1
        assert (
            got[("noderole_service_up", frozenset({("role", "quiet"), ("service", "idle")}))] == 0
        )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    try:
        binary = node_exporter()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    directory = tmp_path / "textfiles"
    directory.mkdir()
    port = _free_port()
    proc = subprocess.Popen(
        [
            str(binary),
            f"--web.listen-address=127.0.0.1:{port}",
            f"--collector.textfile.directory={directory}",
            "--collector.disable-defaults",
            "--collector.textfile",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        yield f"http://127.0.0.1:{port}/metrics", directory
    finally:
        proc.kill()
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def scrape(url: str, bound: float = 30) -> str:
    """Fetch /metrics once node_exporter listens (bounded; no timing is asserted)."""
    deadline = time.monotonic() + bound
    while True:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5) as answer:
            return str(answer.read().decode())
        assert time.monotonic() < deadline, f"node_exporter did not answer on {url}"
        time.sleep(0.05)


class TestNodeExporter:
    def test_textfile_collector_serves_the_series(self, exporter: tuple[str, Path]) -> None:
        """A real node_exporter reads noderole.prom and serves every noderole series."""
        url, directory = exporter
        write_textfile(directory, SAMPLE)
        text = scrape(url)
        got = samples(text)
        assert got[("noderole_apply_success", frozenset({("role", "server")}))] == 0
        restarts = frozenset({("service", "k3s")})
        assert got[("noderole_service_restarts_total", restarts)] == 3
        # node_exporter reports a textfile it could not parse here; 0 means none
        assert got[("node_textfile_scrape_error", frozenset())] == 0


DOCS = Path(__file__).resolve().parent.parent / "docs" / "metrics.md"
DAY = 86400
KONNECTIVITY_CERT = "/var/lib/spinifex-eks/konnectivity/tls.crt"
SCRAPED = {"instance": "node-1:9100", "job": "node"}
"""The labels a Prometheus scrape of node_exporter adds to every series."""
OTHER = {"instance": "node-2:9100", "job": "node"}
"""A second node's, in the same test."""


def _docs_rules() -> str:
    """The alert rules docs/metrics.md shows (its one ``yaml`` block)."""
    text = DOCS.read_text()
    start = text.index("```yaml\n") + len("```yaml\n")
    return text[start : text.index("```", start)]


def _input_series(
    exposition: str, minutes: int, scraped: dict[str, str] = SCRAPED, step: float = 0
) -> list[dict[str, str]]:
    """promtool's input series: each sample of ``exposition``, as scraped (``scraped``: the
    labels the scrape adds), for ``minutes`` one-minute steps: held, or growing by ``step`` at
    each."""
    series = []
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            found = {**sample.labels, **scraped}
            inner = ",".join(f'{k}="{v}"' for k, v in sorted(found.items()))
            values = (
                f"{sample.value:g}+{step:g}x{minutes}" if step else f"{sample.value:g}x{minutes}"
            )
            series.append({"series": f"{sample.name}{{{inner}}}", "values": values})
    return series


def _daemon_heartbeat(role: str, timestamp: float) -> str:
    """The heartbeat family as the native supervisor's writer renders it (no services, no
    role-level families: those are in the rest of the input)."""
    target = _textfile.Target(path=f"/collector/{TEXTFILE}", role=role, names=[], head="")
    return _textfile.render(target, [], timestamp)


class TestAlertRules:
    def test_the_documented_rules_fire_on_noderole_series(self, tmp_path: Path) -> None:
        """docs/metrics.md's four rules, run by Prometheus' own promtool on noderole's own
        exposition: a failed apply, a down service, a certificate 10 days from expiry and a
        supervisor's heartbeat that stopped advancing (written at 1m, then the daemon froze)
        fire (after their `for`, or once the heartbeat is 5 minutes old), with their
        annotations; a running service, a certificate 60 days from expiry and another node's
        heartbeat that advances a minute every minute do not."""
        try:
            binary = promtool()
        except RuntimeError as exc:
            pytest.skip(str(exc))
        exposition = render_metrics(
            role="server",
            apply=ApplyOutcome(role="server", ok=False, seconds=2.5, timestamp=60.0),
            services=[
                ServiceSample(name="k3s", state="ready"),
                ServiceSample(name="konnectivity-server", state="crashed", restarts=4),
            ],
            certificates=[
                # promtool's clock starts at the epoch: expiry times are counted from there.
                CertificateExpiry(
                    service="konnectivity-server", path=KONNECTIVITY_CERT, not_after=10 * DAY
                ),
                CertificateExpiry(service="k3s", path="/var/lib/k3s/ok.crt", not_after=60 * DAY),
            ],
        )
        (tmp_path / "rules.yml").write_text(_docs_rules())
        firing = [
            {
                "alertname": "NoderoleApplyFailed",
                "exp_labels": {"role": "server", "severity": "critical", **SCRAPED},
                "exp_annotations": {
                    "summary": "noderole apply of role server failed on node-1:9100",
                    "description": (
                        "Run `noderole status` on the node; the failed service's reason is there."
                    ),
                },
            },
            {
                "alertname": "NoderoleServiceDown",
                "exp_labels": {
                    "role": "server",
                    "service": "konnectivity-server",
                    "severity": "critical",
                    **SCRAPED,
                },
                "exp_annotations": {"summary": "konnectivity-server is down on node-1:9100"},
            },
            {
                "alertname": "NoderoleSupervisorSilent",
                "exp_labels": {"role": "server", "severity": "critical", **SCRAPED},
                "exp_annotations": {
                    "summary": (
                        "The native supervisor of role server on node-1:9100 has not written "
                        "noderole.prom for 5 minutes: nothing supervises its services"
                    ),
                    "description": (
                        "Its service series show their last state, not the node's. Run "
                        "`noderole status` on the node: exit 10 names the supervisor (pid N) "
                        "that is not answering; `kill -CONT N` resumes it; or `kill -9 N` ends "
                        "it, its watchdog ends its services, and `noderole apply` starts them "
                        "again under a new supervisor. A supervisor killed with its watchdog "
                        "shows as `the supervisor is not running (it was killed)`: `noderole "
                        "apply`. One that answers cannot write the file: its log says why."
                    ),
                },
            },
            {
                "alertname": "NoderoleCertificateExpiring",
                "exp_labels": {
                    "service": "konnectivity-server",
                    "path": KONNECTIVITY_CERT,
                    "severity": "warning",
                    **SCRAPED,
                },
                "exp_annotations": {
                    "summary": (
                        f"{KONNECTIVITY_CERT} (konnectivity-server) expires in less than 30 days"
                    ),
                    "description": (
                        "Renewal is not keeping up on node-1:9100: run `noderole cert check "
                        "--role ROLE` there for the reason, then `noderole renew`."
                    ),
                },
            },
        ]
        unit = {
            "rule_files": ["rules.yml"],
            "evaluation_interval": "1m",
            "tests": [
                {
                    "interval": "1m",
                    "input_series": [
                        *_input_series(exposition, 180),
                        # Frozen: the heartbeat written at 1m stays while time moves on.
                        *_input_series(_daemon_heartbeat("server", 60.0), 180),
                        # Alive: each one-minute step's heartbeat is a minute later.
                        *_input_series(_daemon_heartbeat("agent", 0.0), 180, OTHER, step=60),
                    ],
                    "alert_rule_test": [
                        # Before their `for`: pending, not firing.
                        *(
                            {"eval_time": "3m", "alertname": a["alertname"], "exp_alerts": []}
                            for a in firing
                        ),
                        *(
                            {
                                "eval_time": "2h",
                                "alertname": a["alertname"],
                                "exp_alerts": [
                                    {
                                        "exp_labels": a["exp_labels"],
                                        "exp_annotations": a["exp_annotations"],
                                    }
                                ],
                            }
                            for a in firing
                        ),
                    ],
                }
            ],
        }
        (tmp_path / "test.yml").write_text(json.dumps(unit, indent=1))  # JSON is YAML

        def run_promtool(*args: str) -> str:
            done = subprocess.run(
                [str(binary), *args], cwd=tmp_path, capture_output=True, text=True, timeout=60
            )
            assert done.returncode == 0, done.stdout + done.stderr
            return done.stdout

        assert "SUCCESS: 4 rules found" in run_promtool("check", "rules", "rules.yml")
        run_promtool("test", "rules", "test.yml")  # every expected alert fires, at its time
