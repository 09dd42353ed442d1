"""The failure path (issue 16): a node that will not boot says why, at once.

Every test goes through the ``noderole`` command against real processes under a scratch root
(the ``node`` fixture of tests/test_engine.py ends every process it started, by pid).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import threading
import time
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner

import noderole
from noderole.cli import cli
from noderole.cli._app import App
from noderole.clock import FakeClock, SystemClock
from noderole.errors import WaitCancelled, WaitTimeout
from noderole.root import NodeRoot
from noderole.stepcontext import Cancel
from noderole.waits import run_wait
from tests.test_engine import Node, node, report, sleeper
from tests.test_fault_matrix import _install

__all__ = ["node"]  # the fixture, imported for pytest

NEVER = "/var/lib/rancher/k3s/server/tls/server-ca.crt"


def run_with(node: Node, clock: Any, *args: str) -> Any:
    """The CLI with ``node``'s plugin and the given clock."""
    app = App(
        root=NodeRoot(node.root),
        plugin_objects=(("test", node.plugin()),),
        autoload=False,
        clock=clock,
    )
    return CliRunner().invoke(cli, list(args), obj=app, catch_exceptions=False)


class TestCancellableWait:
    def test_cancelled_token_ends_the_wait_with_its_reason(self, tmp_path: Path) -> None:
        """A wait whose token is cancelled raises WaitCancelled naming the root cause."""
        cancel = Cancel()
        cancel.cancel("k3s failed: no config")
        cancel.cancel("a later reason is ignored")
        wait = noderole.WaitForPaths(paths=["/never"], timeout=120)
        with pytest.raises(WaitCancelled, match=r"^k3s failed: no config$"):
            run_wait(wait, root=NodeRoot(tmp_path), clock=FakeClock(), cancel=cancel)

    def test_cancel_from_another_thread_ends_a_real_wait(self, tmp_path: Path) -> None:
        """Cancelled while blocked on inotify, a 600 s wait ends with WaitCancelled."""
        cancel = Cancel()
        seen = threading.Event()
        wait = noderole.WaitForPaths(paths=["/never"], timeout=600)

        def cancel_once_waiting() -> None:
            seen.wait(60)
            cancel.cancel("gone")

        timer = threading.Thread(target=cancel_once_waiting)
        timer.start()
        try:
            with pytest.raises(WaitCancelled):
                run_wait(
                    wait,
                    root=NodeRoot(tmp_path),
                    clock=SystemClock(),
                    progress=lambda text: seen.set(),
                    cancel=cancel,
                )
        finally:
            cancel.cancel("test over")
            seen.set()
            timer.join()

    def test_a_real_timeout_keeps_the_seed_message(self, tmp_path: Path) -> None:
        """An uncancelled wait that runs out still says what the plugin wrote."""
        wait = noderole.WaitForPaths(paths=["/never"], timeout=2, message="CA not present")
        with pytest.raises(WaitTimeout, match=r"^CA not present$"):
            run_wait(wait, root=NodeRoot(tmp_path), clock=FakeClock(), cancel=Cancel())

    def test_long_waits_report_at_the_interval(self, tmp_path: Path) -> None:
        """A 25 s wait with a 10 s interval prints the first line, then at 10 s and 20 s."""
        lines: list[str] = []
        wait = noderole.WaitForPaths(paths=["/never"], timeout=25)
        with pytest.raises(WaitTimeout):
            run_wait(
                wait,
                root=NodeRoot(tmp_path),
                clock=FakeClock(),
                progress=lines.append,
                progress_every=10,
            )
        assert lines == [
            "waiting for /never (up to 25s)",
            "still waiting for /never (10s of 25s)",
            "still waiting for /never (20s of 25s)",
        ]


class TestFailFast:
    def test_failure_ends_the_wait_of_what_comes_after(self, node: Node) -> None:
        """k3s fails: konnectivity (after k3s) stops its 600 s wait and names k3s's reason."""
        node.services += [
            sleeper("k3s", pre_start=[noderole.Fail(message="neither config.yaml exists")]),
            sleeper(
                "konnectivity",
                after=["k3s"],
                pre_start=[
                    noderole.WaitForPaths(paths=[NEVER], timeout=600, message="CA not present")
                ],
            ),
            sleeper("other"),
        ]
        result = node.run("apply", "demo", "--json")
        assert result.exit_code == 1
        data = report(result)
        assert data["konnectivity"]["status"] == "skipped"
        assert data["konnectivity"]["reason"] == (
            "not started: k3s failed: neither config.yaml exists"
        )
        assert data["other"]["status"] == "started"
        waited = [s for s in data["konnectivity"]["steps"] if s["kind"] == "wait"]
        assert waited
        assert waited[0]["seconds"] < 600

    def test_root_cause_travels_down_a_chain(self, node: Node) -> None:
        """c after b after a: a's failure is the reason c names, not b's skip."""
        wait = noderole.WaitForPaths(paths=[NEVER], timeout=600)
        node.services += [
            sleeper("a", pre_start=[noderole.Fail(message="boom")]),
            sleeper("b", after=["a"], pre_start=[wait]),
            sleeper("c", after=["b"], pre_start=[wait]),
        ]
        data = report(node.run("apply", "demo", "--json"))
        assert data["b"]["reason"] == "not started: a failed: boom"
        assert data["c"]["reason"] == "not started: a failed: boom"

    def test_a_service_without_waits_still_starts_after_a_failure(self, node: Node) -> None:
        """after orders the start only: a dependent that waits for nothing starts (OpenRC)."""
        node.services += [
            sleeper("a", pre_start=[noderole.Fail(message="boom")]),
            sleeper("b", after=["a"]),
        ]
        data = report(node.run("apply", "demo", "--json"))
        assert data["b"]["status"] == "started"

    def test_crash_loop_past_the_limit_fails_what_waits(self, node: Node, tmp_path: Path) -> None:
        """A started service that gives up respawning ends its dependents' waits."""
        _install(node.root, "crasher", "#!/bin/sh\nsleep 0.3\nexit 3\n")
        node.services += [
            noderole.Service(
                name="k3s",
                roles=["demo"],
                command=["/usr/local/bin/crasher"],
                supervision=noderole.Supervision(respawn_delay=0.05, respawn_max=1),
            ),
            sleeper(
                "konnectivity",
                after=["k3s"],
                pre_start=[noderole.WaitForPaths(paths=[NEVER], timeout=600)],
            ),
        ]
        data = report(node.run("apply", "demo", "--json"))
        assert data["k3s"]["status"] == "failed"
        assert data["k3s"]["reason"].startswith("crashed after start: gave up after 1 respawn")
        assert data["konnectivity"]["reason"].startswith("not started: k3s crashed after start")


class TestBoundsDoNotStack:
    def test_after_does_not_wait_for_readiness(self, node: Node) -> None:
        """With a k3s that never gets ready, konnectivity's own 2 s bound is the whole wait."""
        node.services += [
            sleeper("k3s", readiness=noderole.WaitForPaths(paths=[NEVER], timeout=60)),
            sleeper(
                "konnectivity",
                after=["k3s"],
                pre_start=[
                    noderole.WaitForPaths(paths=[NEVER], timeout=2, message="CA not present")
                ],
            ),
        ]
        clock = FakeClock()
        data = report(run_with(node, clock, "apply", "demo", "--json"))
        konn = data["konnectivity"]
        assert (konn["status"], konn["reason"]) == ("failed", "CA not present")
        assert [s["kind"] for s in konn["steps"]] == ["wait"]
        assert konn["seconds"] == pytest.approx(2, abs=0.2)

    def test_need_waits_for_readiness_and_reports_it(self, node: Node) -> None:
        """need gates on the needed service's readiness; --json carries the gate's duration."""
        node.services += [
            sleeper("k3s", readiness=noderole.WaitForPaths(paths=[NEVER], timeout=5)),
            sleeper("konnectivity", need=["k3s"]),
        ]
        data = report(run_with(node, FakeClock(), "apply", "demo", "--json"))
        konn = data["konnectivity"]
        assert konn["reason"] == "not started: it needs k3s, which is not ready after 5s"
        assert konn["steps"][0]["kind"] == "readiness"
        assert konn["steps"][0]["seconds"] == pytest.approx(5, abs=0.2)


class TestProgress:
    def test_apply_prints_still_waiting_lines(self, node: Node) -> None:
        """The console shows the wait, then a line per interval with the time spent."""
        (node.root / "etc/noderole/config.toml").write_text(
            "[noderole]\nnet_check = false\nprogress_interval = 10\n"
        )
        node.services.append(
            sleeper("a", pre_start=[noderole.WaitForPaths(paths=[NEVER], timeout=25)])
        )
        result = run_with(node, FakeClock(), "apply", "demo")
        assert f" * a: waiting for {NEVER} (up to 25s)" in result.stdout
        assert f" * a: still waiting for {NEVER} (20s of 25s)" in result.stdout

    def test_reapply_says_already_running_and_nothing_else(self, node: Node) -> None:
        """A second apply prints no Starting line and no readiness line for what it leaves."""
        (node.root / "run").mkdir(exist_ok=True)
        (node.root / "run/flag").write_text("")
        node.services += [
            sleeper("a", readiness=noderole.WaitForPaths(paths=["/run/flag"], timeout=5)),
            sleeper("b", need=["a"]),
        ]
        node.run("apply", "demo")
        again = node.run("apply", "demo")
        assert "Starting" not in again.stdout
        assert "readiness" not in again.stdout
        assert " * a: already running" in again.stdout
        assert json.loads(node.run("apply", "demo", "--json").stdout)["ok"] is True


class TestCliSlips:
    def test_global_options_after_the_command(self, node: Node, tmp_path: Path) -> None:
        """`noderole plan demo --root X` reads X, as `noderole --root X plan demo` does."""
        result = CliRunner().invoke(
            cli, ["list", "--root", str(tmp_path), "--debug"], catch_exceptions=False
        )
        assert result.exit_code == 0, result.output
        from noderole.cli import hoist_global_options

        assert hoist_global_options(
            ["apply", "server", "--root=/x", "--disable-plugin", "k3s", "--json"], ["apply"]
        ) == ["--root=/x", "--disable-plugin", "k3s", "apply", "server", "--json"]
        assert hoist_global_options(["exec", "a", "--", "--root", "/y"], ["exec"]) == [
            "exec",
            "a",
            "--",
            "--root",
            "/y",
        ]

    def test_mistyped_command_gets_did_you_mean(self) -> None:
        """`noderole aply` suggests apply and exits 2."""
        result = CliRunner().invoke(cli, ["aply", "server"])
        assert result.exit_code == 2
        assert "Did you mean apply?" in result.output

    def test_disabling_a_plugin_that_is_not_installed_is_an_error(self, node: Node) -> None:
        """--disable-plugin with an unknown name lists the installed plugins; exit 2."""
        result = node.run("--disable-plugin", "k3z", "plan", "demo")
        assert result.exit_code == 2
        assert "--disable-plugin k3z: no such plugin is installed" in result.output
        assert "installed: builtin, test" in result.output

    def test_stop_names_only_what_was_running(self, node: Node) -> None:
        """stop after a failed apply claims nothing for the service that never ran."""
        node.services += [sleeper("a"), sleeper("b", pre_start=[noderole.Fail(message="x")])]
        node.run("apply", "demo")
        result = node.run("stop", "demo")
        assert result.stdout.splitlines() == [" * Stopped a", " * Not running: b"]

    def test_restart_reason_diffs_settings_and_hides_secrets(self, node: Node) -> None:
        """A changed supervision value and a changed secret are named; the secret is not shown."""
        node.services.append(
            sleeper("a", environment={"TOKEN": noderole.Secret("old-token"), "MODE": "x"})
        )
        node.run("apply", "demo")
        node.services[0] = sleeper(
            "a",
            environment={"TOKEN": noderole.Secret("new-token"), "MODE": "y"},
            supervision=noderole.Supervision(respawn_delay=0.07, stop_timeout=2),
        )
        data = report(node.run("apply", "demo", "--json"))
        reason = data["a"]["reason"]
        assert "environment MODE: 'x' -> 'y'" in reason
        assert "environment TOKEN changed (secret, not shown)" in reason
        assert "respawn_delay: 0.05 -> 0.07" in reason
        state = (node.root / "var/lib/noderole/applied.json").read_text()
        assert "token" not in state

    def test_a_changed_stop_scope_is_named_as_the_restart_reason(self, node: Node) -> None:
        """stop_scope and delegate, absent from what an earlier apply recorded when at their
        defaults, are named with their values when they change."""
        node.services.append(sleeper("a"))
        node.run("apply", "demo")
        node.services[0] = sleeper(
            "a",
            supervision=noderole.Supervision(
                respawn_delay=0.05, stop_timeout=2, stop_scope="process", delegate=True
            ),
        )
        reason = report(node.run("apply", "demo", "--json"))["a"]["reason"]
        assert "delegate: False -> True" in reason
        assert "stop_scope: group -> process" in reason

    def test_supervision_fields_added_since_keep_the_fingerprint(self) -> None:
        """A definition at the defaults of the fields added after the first release digests as
        it did before them: an upgrade of noderole restarts no service of a re-apply."""
        from noderole.engine import definition_digests

        service = sleeper("a")
        sup = service.supervision
        before = {  # the supervision settings an earlier release digested, every one of them
            "respawn_delay": sup.respawn_delay,
            "respawn_max": sup.respawn_max,
            "respawn_period": sup.respawn_period,
            "backoff_max": sup.backoff_max,
            "stop_signal": sup.stop_signal,
            "stop_timeout": sup.stop_timeout,
        }
        digest = hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()[:16]
        assert definition_digests(service)["supervision"] == digest
        process = sleeper("a", supervision=attrs.evolve(sup, stop_scope="process"))
        assert definition_digests(process)["supervision"] != digest


class TestVerdict:
    def test_dry_run_and_plan_give_a_verdict_and_exit_12(self, node: Node) -> None:
        """A Fail step: the summary names it, its dependent is skipped, exit code WOULD_FAIL."""
        node.services += [
            sleeper("a"),
            sleeper("konn", pre_start=[noderole.Fail(message="SANS empty")]),
            sleeper("c", need=["konn"]),
        ]
        dry = node.run("apply", "demo", "--dry-run")
        assert dry.exit_code == 12
        last = dry.stdout.splitlines()[-1]
        assert last == (
            "3 services: 1 would start, 1 would fail (konn: SANS empty), 1 skipped (backend native)"
        )
        plan = node.run("plan", "demo")
        assert plan.exit_code == 12
        assert "1 would fail (konn: SANS empty), 1 skipped (backend native)" in plan.stdout
        node.services[1] = sleeper("konn")
        assert node.run("plan", "demo").exit_code == 0


CRASHER = "#!/bin/sh\necho \"token is $TOKEN\"\necho 'boom: no config'\nexit 3\n"


def _crash(node: Node, script: str, **service: Any) -> None:
    """Apply a service ``k3s`` running ``script`` (logging to /var/log/k3s.log) that exits at
    once and gives up after one respawn; return once status says it crashed."""
    _install(node.root, "crasher", script)
    node.services.append(
        noderole.Service(
            name="k3s",
            roles=["demo"],
            command=["/usr/local/bin/crasher"],
            output_log="/var/log/k3s.log",
            supervision=noderole.Supervision(respawn_delay=0.01, respawn_max=1),
            **service,
        )
    )
    node.run("apply", "demo")
    from tests.test_engine import wait_until

    wait_until(
        lambda: (
            json.loads(node.run("status", "--json").stdout)["services"][0]["state"] == "crashed"
        ),
        "k3s gives up",
    )


class TestStatusRemembers:
    def test_status_after_a_failed_apply(self, node: Node) -> None:
        """Each service's last outcome and reason; no log path for a log that does not exist."""
        node.services += [
            sleeper("a"),
            sleeper("b", pre_start=[noderole.Fail(message="EKS_X empty")]),
        ]
        node.run("apply", "demo")
        result = node.run("status")
        assert result.exit_code == 1
        lines = result.stdout.splitlines()
        b_row = next(line for line in lines if line.startswith("b "))
        assert "/var/log/b.log" not in b_row
        assert "  last apply (" in result.stdout
        assert "): failed: EKS_X empty" in result.stdout
        rows = {r["name"]: r for r in json.loads(node.run("status", "--json").stdout)["services"]}
        assert rows["b"]["last_apply"]["outcome"] == "failed"
        assert rows["b"]["last_apply"]["reason"] == "EKS_X empty"
        assert rows["b"]["log"] is None
        assert rows["b"]["reason"] == ""
        assert rows["a"]["last_apply"]["outcome"] == "started"

    def test_crashed_service_shows_its_log_tail_redacted(self, node: Node) -> None:
        """A service that gave up shows the end of its log, its secret replaced by ***."""
        _crash(node, CRASHER, environment={"TOKEN": noderole.Secret("s3cret-value")})
        detail = node.run("status", "k3s")
        assert detail.exit_code == 1
        assert "last lines of /var/log/k3s.log:" in detail.stdout
        assert "    boom: no config" in detail.stdout
        assert "token is ***" in detail.stdout
        assert "s3cret-value" not in detail.stdout
        assert "gave up after 1 respawn" in detail.stdout


ESCAPING = (
    "#!/bin/sh\nprintf 'plain line\\n'\n"
    "printf 'title \\033]0;owned\\007 clear \\033[2J csi \\302\\233 bell \\007 tab\\tend\\n'\n"
    "exit 3\n"
)


class TestStatusShowsLogLinesInert:
    def test_control_characters_in_a_log_are_shown_escaped(self, node: Node) -> None:
        """A service's log is written by the service (its user, maybe hostile): the lines
        status prints to root's terminal show escape sequences as text (a title change, a
        screen clear, a one-byte CSI), never as what they would do; --json keeps the bytes,
        which JSON escapes."""
        _crash(node, ESCAPING)
        detail = node.run("status", "k3s")
        assert "    plain line" in detail.stdout
        assert (
            "    title \\x1b]0;owned\\x07 clear \\x1b[2J csi \\x9b bell \\x07 tab\tend"
            in detail.stdout
        )
        assert not any(ch in detail.stdout for ch in "\x1b\x07\x9b")
        raw = json.loads(node.run("status", "k3s", "--json").stdout)["services"][0]["log_tail"]
        assert "title \x1b]0;owned\x07 clear \x1b[2J csi \x9b bell \x07 tab\tend" in raw


class TestBrokenConfig:
    def test_status_and_stop_work_with_a_duplicated_table(self, node: Node) -> None:
        """A broken config.toml: status and stop use the recorded state and warn; apply refuses."""
        node.services.append(sleeper("a"))
        assert node.run("apply", "demo").exit_code == 0
        (node.root / "etc/noderole/config.toml").write_text(
            "[noderole]\nnet_check = false\n[noderole]\nnet_check = false\n"
        )
        assert node.run("apply", "demo").exit_code == 4
        status = node.run("status")
        assert status.exit_code == 0
        # status works from the recorded plan (no settings read) and still says the file is bad
        assert "warning: /etc/noderole/config.toml: not valid TOML" in status.stderr
        assert status.stderr.count("not valid TOML") == 1, status.stderr  # said once
        restart = node.run("restart", "a")
        assert restart.exit_code == 0
        assert "warning: /etc/noderole/config.toml: not valid TOML" in restart.stderr
        assert "settings recorded by the last apply" in restart.stderr
        stop = node.run("stop")
        assert stop.stdout.splitlines() == [" * Stopped a"]
        rows = json.loads(node.run("status", "--json").stdout)["services"]
        assert [(r["name"], r["state"]) for r in rows] == [("a", "stopped")]


# Valid JSON of the wrong shape at /var/lib/noderole/last-apply.json: an editor's slip, a disk
# that returned another file's block, a record of an older or newer noderole.
DAMAGED_LAST_APPLY = [
    '{"role": "demo", "services": 1}',
    '{"role": "demo", "services": ["a", "b"]}',
    '{"role": "demo", "services": {"a": "started"}}',
    '{"role": "demo", "services": {"a": {"outcome": "failed", "reason": "x", "at": "yesterday"}}}',
    '{"role": "demo", "services": {"a": {"outcome": "failed", "reason": "x", "at": NaN}}}',
    '{"role": "demo", "services": {"a": {"outcome": "failed", "reason": "x", "at": 1e300}}}',
    '{"role": "demo", "services": {"a": {"outcome": 3, "reason": null, "at": true}}}',
    '{"role": "demo", "services": {"a": {"outcome": "failed"}}}',
    '{"role": ["demo"], "services": {}, "settings": 5}',
    '{"role": "demo", "settings": {"noderole": 1}, "ok": "yes", "seconds": "long", "at": []}',
]


class TestDamagedLastApply:
    @pytest.mark.parametrize("text", DAMAGED_LAST_APPLY)
    def test_status_and_apply_read_what_is_sound(self, node: Node, text: str) -> None:
        """status shows what is sound of the record and apply writes a whole one again: the
        record of the last apply is a report, and a damaged one must not stop a node's apply
        after its services started (it did: an AttributeError, and every later apply too)."""
        node.services += [sleeper("a"), sleeper("b")]
        assert node.run("apply", "demo").exit_code == 0
        record = node.root / "var/lib/noderole/last-apply.json"
        record.write_text(text)
        for args in (("status",), ("status", "a"), ("status", "--json")):
            shown = node.run(*args)
            assert shown.exit_code == 0, (args, shown.output)
        again = node.run("apply", "demo")
        assert again.exit_code == 0, again.output
        written = json.loads(record.read_text())
        assert written["role"] == "demo"
        assert sorted(written["services"]) == ["a", "b"]
        assert all(e["outcome"] == "running" for e in written["services"].values())

    @pytest.mark.parametrize(
        "settings", ['{"noderole": 1}', '{"noderole": {"net_check": "maybe"}}', "[]", "NaN"]
    )
    def test_broken_config_with_damaged_recorded_settings(self, node: Node, settings: str) -> None:
        """With config.toml broken, status and stop fall back to the settings the last apply
        recorded; damaged ones are left out (defaults instead), never a traceback."""
        node.services.append(sleeper("a"))
        assert node.run("apply", "demo").exit_code == 0
        record = node.root / "var/lib/noderole/last-apply.json"
        data = json.loads(record.read_text())
        record.write_text(json.dumps(data)[:-1] + f', "settings": {settings}}}')
        (node.root / "etc/noderole/config.toml").write_text("[noderole\n")
        status = node.run("status")
        assert status.exit_code == 0, status.output
        assert "warning: /etc/noderole/config.toml: not valid TOML" in status.stderr
        assert node.run("stop").exit_code == 0


@pytest.fixture
def server_root(tmp_path: Path) -> Path:
    """A scratch root for the shipped plugins' server role, net check off."""
    (tmp_path / "etc/noderole").mkdir(parents=True)
    (tmp_path / "etc/noderole/config.toml").write_text("[noderole]\nnet_check = false\n")
    return tmp_path


def dry_run_server(root: Path) -> dict[str, dict[str, Any]]:
    result = CliRunner().invoke(
        cli, ["apply", "server", "--root", str(root), "--dry-run", "--json"]
    )
    assert result.exit_code == 12, result.output
    return {row["name"]: row for row in json.loads(result.stdout)["services"]}


class TestInputsAsTheyAre:
    def test_missing_first_boot_file_is_reported_missing(self, server_root: Path) -> None:
        """The shipped plugin says the file is missing, which keys it must hold: not 'empty'."""
        row = dry_run_server(server_root)["konnectivity-server"]
        assert row["action"] == "fail"
        assert row["why"].startswith("/etc/spinifex-eks/first-boot.env is missing: ")
        assert "EKS_KONNECTIVITY_SANS" in row["why"]

    def test_parser_warnings_are_part_of_the_reason(self, server_root: Path) -> None:
        """An unterminated quote is named in the reason the SANs are empty."""
        env = server_root / "etc/spinifex-eks/first-boot.env"
        env.parent.mkdir(parents=True)
        env.write_text('EKS_KONNECTIVITY_SANS="a,b\nEKS_KONNECTIVITY_HOST=x\n')
        row = dry_run_server(server_root)["konnectivity-server"]
        assert row["why"].startswith("EKS_KONNECTIVITY_SANS empty in /etc/spinifex-eks/first-boot")
        assert "first-boot.env:1: unterminated double quote" in row["why"]


SILENT_K3S = """#!/bin/sh
# A k3s that starts and never writes its CA.
trap 'exit 0' TERM
while :; do sleep 1; done
"""


@pytest.mark.slow
class TestHeadline:
    def test_konnectivity_fails_within_its_own_bound(self, node: Node) -> None:
        """The issue's headline, as a real run of the shipped plugins: with
        `[konnectivity] wait_timeout = 2` and a k3s that never writes its CA, konnectivity fails
        on its own 2 s wait (the seed's message), with no 60 s readiness gate before it."""
        import subprocess
        import sys

        command = _shipped_node(node, wait_timeout=2)
        result = subprocess.run(
            [sys.executable, "-m", "noderole", *command, "--json"],
            capture_output=True, text=True, timeout=100,
            env={**os.environ, "NODEROLE_ROOT": str(node.root)},
        )  # fmt: skip
        assert result.returncode == 1, result.stdout + result.stderr
        services = {s["name"]: s for s in json.loads(result.stdout)["services"]}
        assert services["k3s"]["status"] == "started"
        konn = services["konnectivity-server"]
        assert konn["reason"] == "k3s server CA / admin kubeconfig not present after 2s"
        assert "readiness" not in [step["kind"] for step in konn["steps"]]
        (wait,) = [step for step in konn["steps"] if step["kind"] == "wait"]
        assert wait["seconds"] < 30  # 62 s before: the 60 s readiness gate, then the 2 s wait


def _shipped_node(
    node: Node, *, wait_timeout: int, k3s: str | None = SILENT_K3S, konnectivity: str = ""
) -> list[str]:
    """Stage the shipped plugins' stand-ins in ``node``, with konnectivity's wait bounded at
    ``wait_timeout`` s (and the ``konnectivity`` lines added to its table), k3s replaced by the
    script ``k3s`` (None: the rehearsal's stand-in; by default one that never writes its CA);
    the arguments of ``apply server`` there."""
    import importlib.metadata

    from noderole.testing import ScratchRoot, stage_standins
    from noderole_k3s import plugin as k3s_plugin
    from noderole_konnectivity import plugin as konnectivity_plugin

    config = (
        f"[noderole]\nnet_check = false\n"
        f"[konnectivity]\nwait_timeout = {wait_timeout}\n{konnectivity}"
    )
    scratch = ScratchRoot(node.root)
    plugins = [("k3s", k3s_plugin), ("konnectivity", konnectivity_plugin)]
    stage_standins(*plugins, node_root=scratch, config_text=config)
    scratch.write_config(config)  # the test's settings replace the rehearsal's
    if k3s is not None:
        scratch.write("/usr/local/bin/k3s", k3s, mode=0o755)
    others = {ep.name for ep in importlib.metadata.entry_points(group="noderole")}
    disabled = [
        a for n in sorted(others - {"k3s", "konnectivity"}) for a in ("--disable-plugin", n)
    ]
    return ["apply", "server", "--root", str(node.root), *disabled]


class TestCaWrittenInTwoGoes:
    def test_a_key_still_being_written_is_read_again(self, node: Node, tmp_path: Path) -> None:
        """A k3s that writes its CA key as client-go's cert.WriteCert does, create then write,
        here with 0.3 s between the halves, and a konnectivity that waits for the CA alone (its
        kubeconfig set to a file already there): the wait ends on the create, the certificate
        step finds half a key and reads it again until it is whole; konnectivity starts.
        Before, it failed: "CA key ... is not a readable PEM private key"."""
        import subprocess
        import sys

        from cryptography.hazmat.primitives import serialization

        from noderole.state import read_last_apply
        from tests.test_certs import cert_pem, key_pem, make_ca

        cert, key = make_ca(now=time.time())
        source = tmp_path / "ca"
        source.mkdir()
        (source / "ca.crt").write_bytes(cert_pem(cert))
        (source / "ca.key").write_bytes(key_pem(key, serialization.PrivateFormat.PKCS8))
        tls = node.root / "var/lib/rancher/k3s/server/tls"
        writer = f"""#!/bin/sh
trap 'exit 0' TERM
mkdir -p {tls}
cp {source}/ca.crt {tls}/server-ca.crt
head -c 100 {source}/ca.key > {tls}/server-ca.key
sleep 0.3
tail -c +101 {source}/ca.key >> {tls}/server-ca.key
while :; do sleep 1; done
"""
        command = _shipped_node(
            node, wait_timeout=30, k3s=writer, konnectivity='kubeconfig = "/etc/hostname"\n'
        )
        (node.root / "etc/hostname").write_text("node\n")
        done = subprocess.run(
            [sys.executable, "-m", "noderole", *command],
            capture_output=True, text=True, timeout=100,
            env={**os.environ, "NODEROLE_ROOT": str(node.root)},
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        record = read_last_apply(NodeRoot(node.root))
        assert record["services"]["konnectivity-server"]["outcome"] == "started", record


class TestInterruptedApply:
    def test_ctrl_c_while_waiting_ends_the_apply_and_keeps_what_runs(self, node: Node) -> None:
        """Ctrl-C (to the command's process group, as a terminal sends it) while konnectivity
        waits for a k3s that never writes its CA: the apply says it was interrupted and exits 130
        (not 1, a failed service); the supervisor this first apply started, and k3s under it,
        are in no group of the command's and keep running; the next apply is not locked out: it
        reaches the same wait."""
        from noderole.testing import node_processes, supervisor_processes
        from tests.test_cli_exit import interrupt_when

        command = _shipped_node(node, wait_timeout=600)
        env = {**os.environ, "NODEROLE_ROOT": str(node.root)}
        waiting = "konnectivity-server: waiting for /var/lib/rancher/k3s/server/tls/server-ca.crt"
        status, stdout, stderr = interrupt_when(node.root, waiting, *command, env=env)
        assert status == 130, stdout + stderr
        assert stderr.splitlines()[-1] == "noderole: interrupted"
        assert " * Started k3s" in stdout
        k3s = int((node.root / "run/k3s.pid").read_text())
        assert k3s in node_processes(node.root)
        daemons, watchdogs = supervisor_processes(node.root)
        assert len(daemons) == len(watchdogs) == 1
        again, stdout, stderr = interrupt_when(node.root, waiting, *command, env=env)
        assert again == 130, stdout + stderr
        assert int((node.root / "run/k3s.pid").read_text()) == k3s  # left alone: running


class TestLostConsole:
    def test_a_closed_stdout_fails_no_service(self, node: Node) -> None:
        """``noderole apply server | head -1``, or a boot console that went away: stdout is a
        pipe nobody reads. The console's lines are lost, the node is not: every service starts,
        the record of the apply says so, and the exit status is the apply's own (0)."""
        import subprocess
        import sys

        from noderole.state import read_last_apply
        from noderole.testing import node_processes

        def unread(*args: str) -> subprocess.CompletedProcess[str]:
            read, write = os.pipe()
            os.close(read)  # the reader is gone before the first line
            try:
                return subprocess.run(
                    [sys.executable, "-m", "noderole", *args],
                    stdout=write, stderr=subprocess.PIPE, text=True, timeout=100,
                    env={**os.environ, "NODEROLE_ROOT": str(node.root)},
                )  # fmt: skip
            finally:
                os.close(write)

        command = _shipped_node(node, wait_timeout=30, k3s=None)
        done = unread(*command)
        record = read_last_apply(NodeRoot(node.root))
        outcomes = {name: entry["outcome"] for name, entry in record["services"].items()}
        assert outcomes["k3s"] == outcomes["konnectivity-server"] == "started", (record, done)
        assert done.returncode == 0, done.stderr
        k3s = int((node.root / "run/k3s.pid").read_text())
        stopped = unread("--root", str(node.root), "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert k3s not in node_processes(node.root)

    @pytest.mark.parametrize("closing", [">&-", "2>&-", "<&- >&- 2>&-"])
    def test_a_closed_standard_descriptor_fails_nothing(self, node: Node, closing: str) -> None:
        """A boot script runs ``noderole apply server >&-`` (or with stderr, or all three,
        closed): Python then has no sys.stdout, and the next file noderole opened would take
        descriptor 1. The command opens /dev/null in each closed slot first, so every service
        starts, exit 0, and ``stop`` works the same way."""
        import subprocess
        import sys

        from noderole.state import read_last_apply
        from noderole.testing import node_processes

        def closed(*args: str) -> subprocess.CompletedProcess[str]:
            script = f'exec "$@" {closing}'
            return subprocess.run(
                ["sh", "-c", script, "sh", sys.executable, "-m", "noderole", *args],
                capture_output=True, text=True, timeout=100,
                env={**os.environ, "NODEROLE_ROOT": str(node.root)},
            )  # fmt: skip

        command = _shipped_node(node, wait_timeout=30, k3s=None)
        done = closed(*command)
        assert done.returncode == 0, done.stdout + done.stderr
        record = read_last_apply(NodeRoot(node.root))
        outcomes = {name: entry["outcome"] for name, entry in record["services"].items()}
        assert outcomes["k3s"] == outcomes["konnectivity-server"] == "started", record
        k3s = int((node.root / "run/k3s.pid").read_text())
        stopped = closed("--root", str(node.root), "stop")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert k3s not in node_processes(node.root)


class TestCallerUmask:
    def test_a_permissive_umask_makes_no_writable_directory(self, node: Node) -> None:
        """A caller with ``umask 000`` (a script that set it, a unit with ``UMask=0000``): the
        directories apply makes (the entry-point cache, the certificate's parents, the state)
        must not be writable by group or others, or any local user could swap what root reads
        next (a certificate directory, the cache of the plugins to import). Before, apply left
        /var/cache/noderole and /var/lib/spinifex-eks mode 0777."""
        import subprocess
        import sys

        command = _shipped_node(node, wait_timeout=30, k3s=None)

        def directories() -> dict[str, int]:
            found = {}
            for parent, names, _ in os.walk(node.root):
                for name in names:
                    path = os.path.join(parent, name)
                    found[path] = os.lstat(path).st_mode
            return found

        before = directories()
        done = subprocess.run(
            ["sh", "-c", 'umask 000; exec "$@"', "sh", sys.executable, "-m", "noderole", *command],
            capture_output=True, text=True, timeout=100,
            env={**os.environ, "NODEROLE_ROOT": str(node.root)},
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        made = {path: mode for path, mode in directories().items() if path not in before}
        assert any(path.endswith("/var/cache/noderole") for path in made), sorted(made)
        writable = sorted(
            f"{os.path.relpath(path, node.root)} {stat.filemode(mode)}"
            for path, mode in made.items()
            if mode & 0o022 and not stat.S_ISLNK(mode)
        )
        assert writable == [], writable


class TestBackendChoice:
    def test_systemd_without_systemd_is_refused_and_root_warns(
        self, node: Node, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Under --root, an init backend warns; systemd without a running systemd is an error
        naming the fix (exit 10), like openrc without rc-service."""
        import noderole.operations

        node.services.append(sleeper("a"))
        monkeypatch.setattr(noderole.operations, "SYSTEMD_RUNNING", str(node.root / "no-such"))
        result = node.run("apply", "demo", "--backend", "systemd", "--dry-run")
        assert "warning: --backend systemd under --root" in result.stderr
        assert result.exit_code == 10
        assert "backend systemd needs a running systemd" in result.stderr
        assert node.processes() == []

    @pytest.mark.parametrize("command", [["status", "demo"], ["stop", "demo"], ["status", "a"]])
    def test_status_and_stop_through_systemd_without_systemd_are_refused(
        self, node: Node, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: list[str]
    ) -> None:
        """`status` and `stop` with the systemd backend on a machine systemd does not run say
        so (exit 10), as `apply` does. Before,
        every `systemctl` call failed unseen and each service read `stopped` (exit 1), or
        `stop` reported them all stopped."""
        import noderole.operations

        node.services.append(sleeper("a"))
        assert node.run("apply", "demo").exit_code == 0  # recorded: status reads the record
        monkeypatch.setattr(noderole.operations, "SYSTEMD_RUNNING", str(tmp_path / "no-such"))
        result = node.run(*command, "--backend", "systemd")
        assert result.exit_code == 10, result.output
        assert "backend systemd needs a running systemd, and " in result.stderr
        assert "stopped" not in result.stdout


REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
class TestReadme:
    def test_the_readme_rehearse_command_works_from_a_bare_copy(self, tmp_path: Path) -> None:
        """`sh scripts/rehearse` in a copy of the checkout (no .venv) makes its venv and rehearses
        the server role to the end (pip's configured index and cache are reused)."""
        import shutil
        import subprocess

        listed = subprocess.run(
            ["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"],
            capture_output=True,
            check=True,
        ).stdout.decode()
        copy = tmp_path / "noderole"
        for name in filter(None, listed.split("\0")):
            source = REPO / name
            if source.is_file():
                (copy / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, copy / name)
        assert not (copy / ".venv").exists()
        readme = (REPO / "README.md").read_text()
        assert "sh scripts/rehearse" in readme
        assert "sh scripts/test" in readme
        done = subprocess.run(
            ["sh", "scripts/rehearse"],
            cwd=copy,
            capture_output=True,
            text=True,
            timeout=600,
            env={k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "NODEROLE_ROOT")},
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "rehearsing role server" in done.stdout
        assert "stopped every service of the rehearsal" in done.stdout
        # The venv runs the checkout itself, as `sh scripts/test` installs it: the two commands
        # share .venv, and the rehearsal's copies in site-packages hid every later edit from
        # .venv/bin/noderole until the tests ran again.
        imported = subprocess.run(
            [
                str(copy / ".venv/bin/python"),
                "-c",
                "import noderole, noderole_k3s, noderole_konnectivity as k; "
                "print(noderole.__file__, noderole_k3s.__file__, k.__file__)",
            ],
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp_path,
        ).stdout.split()
        assert imported == [
            str(copy / "noderole/__init__.py"),
            str(copy / "plugins/k3s/src/noderole_k3s/__init__.py"),
            str(copy / "plugins/konnectivity/src/noderole_konnectivity/__init__.py"),
        ]


class TestTranscripts:
    def _hook(self) -> Any:
        import importlib.util

        spec = importlib.util.spec_from_file_location(
            "noderole_docs_hook", REPO / "docs/hooks/noderole_docs.py"
        )
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    def test_transcript_is_a_real_run(self) -> None:
        """The docs' transcript of a missing first-boot file comes from running noderole."""
        text = self._hook().render_transcript("first-boot-missing")
        assert text.startswith("```console\n$ noderole apply server --dry-run\n")
        assert (
            "konnectivity-server          fail           /etc/spinifex-eks/first-boot.env" in text
        )
        assert "$ echo $?\n12\n```" in text
        assert "/tmp/" not in text

    def test_every_scenario_is_on_the_page(self) -> None:
        """troubleshooting.md shows every scenario; an unknown one fails the build."""
        hook = self._hook()
        page = (REPO / "docs/troubleshooting.md").read_text()
        for name in hook.SCENARIOS:
            assert f"<!-- noderole:transcript {name} -->" in page
        with pytest.raises(ValueError, match="unknown transcript"):
            hook.render_transcript("nope")


class TestStatusStates:
    def test_backoff_shows_the_next_attempt_not_a_pid(self, node: Node) -> None:
        """A process waiting to respawn has no pid in status; its next attempt is shown."""
        from tests.test_engine import wait_until

        _install(node.root, "crasher", "#!/bin/sh\nexit 3\n")
        node.services.append(
            noderole.Service(
                name="flaky",
                roles=["demo"],
                command=["/usr/local/bin/crasher"],
                supervision=noderole.Supervision(respawn_delay=600, stop_timeout=2),
            )
        )
        node.run("apply", "demo")

        def backoff() -> dict[str, Any] | None:
            rows = json.loads(node.run("status", "--json").stdout)["services"]
            return rows[0] if rows[0]["state"] == "backoff" else None

        row = wait_until(backoff, "flaky in backoff")
        assert row["pid"] is None
        assert row["next_attempt"] == "respawn in 600s"
        text = node.run("status").stdout
        assert "  no process: respawn in 600s" in text

    def test_survivors_of_a_killed_supervisor_are_shown(self, node: Node) -> None:
        """After kill -9 of the supervisor, status names the processes that outlived it."""
        import signal

        from noderole.supervisor import Supervisor
        from noderole.supervisor._proc import is_alive
        from noderole.testing import supervisor_processes

        def is_dead(pid: int) -> bool:
            return not is_alive(pid)

        from tests.test_engine import wait_until

        node.services.append(sleeper("a"))
        assert node.run("apply", "demo").exit_code == 0
        daemon = Supervisor(node.root / "run/noderole").daemon_pid()
        assert daemon is not None
        # Its watchdog would kill the orphans at once: kill it first, as a kill -9 of both
        # (an OOM kill of the cgroup, say) would leave them. The daemon is stopped meanwhile, or
        # it would fork a new watchdog in the instant between the two kills.
        os.kill(daemon, signal.SIGSTOP)
        _, watchdogs = supervisor_processes(node.root)
        for pid in [*watchdogs, daemon]:
            os.kill(pid, signal.SIGKILL)
            wait_until(functools.partial(is_dead, pid), f"process {pid} to die")
        assert supervisor_processes(node.root) == ([], [])
        text = node.run("status")
        assert "survived it" in text.stdout
        (row,) = json.loads(node.run("status", "--json").stdout)["services"]
        assert row["survivors"] is True, row
        assert "survived it" in row["reason"]


class TestVerdictOnInputs:
    def test_a_missing_input_nothing_produces_would_fail(self, node: Node) -> None:
        """A wait for a missing path that no step writes and no earlier process could write is a
        known failure; one after a process, or one a step writes, is not judged."""
        wait = noderole.WaitForPaths(paths=["/etc/never.conf"], timeout=30)
        node.services += [
            sleeper("lonely", pre_start=[wait]),
            sleeper("writer"),
            sleeper("after-writer", after=["writer"], pre_start=[wait]),
            sleeper(
                "made",
                pre_start=[
                    noderole.WriteFile(path="/etc/made.conf", content="x"),
                    noderole.WaitForPaths(paths=["/etc/made.conf"], timeout=30),
                ],
            ),
        ]
        result = node.run("apply", "demo", "--dry-run", "--json")
        assert result.exit_code == 12
        rows = {r["name"]: r for r in json.loads(result.stdout)["services"]}
        assert rows["lonely"]["action"] == "fail"
        assert rows["lonely"]["why"] == (
            "waits up to 30s for /etc/never.conf, which is missing and nothing in role demo "
            "produces"
        )
        assert [rows[n]["action"] for n in ("after-writer", "made")] == ["start", "start"]
        (node.root / "etc/never.conf").write_text("")
        assert node.run("plan", "demo").exit_code == 0

    def test_rehearsal_root_would_start(self, server_root: Path) -> None:
        """The shipped server role, staged as a rehearsal stages it, gets a clean verdict."""
        from noderole.operations import Operations
        from noderole.rehearsal import stage_rehearsal
        from noderole.root import NodeRoot

        ops = Operations(root=NodeRoot(server_root))
        stage_rehearsal(ops.root, ops.plugins, ops.node_for("server"))
        result = CliRunner().invoke(
            cli, ["apply", "server", "--root", str(server_root), "--dry-run"]
        )
        assert result.exit_code == 0, result.output
        assert "would fail" not in result.stdout


class TestPollProgress:
    def test_a_polled_call_wait_reports_at_the_interval(self, tmp_path: Path) -> None:
        """StepContext.poll (the net check) prints still-waiting lines like the other waits."""
        from noderole.stepcontext import StepContext

        lines: list[str] = []
        ctx = StepContext(
            service="net",
            root=NodeRoot(tmp_path),
            clock=FakeClock(),
            progress=lines.append,
            progress_every=10,
        )
        with pytest.raises(WaitTimeout):
            ctx.poll(lambda: False, timeout=25, what="an address")
        assert lines == [
            "waiting for an address",
            "still waiting for an address (10s of 25s)",
            "still waiting for an address (20s of 25s)",
        ]

    def test_a_cancelled_poll_ends_at_once(self, tmp_path: Path) -> None:
        """A cancelled token ends a poll with WaitCancelled."""
        from noderole.stepcontext import StepContext

        cancel = Cancel()
        cancel.cancel("k3s failed: x")
        ctx = StepContext(service="a", root=NodeRoot(tmp_path), clock=FakeClock(), cancel=cancel)
        with pytest.raises(WaitCancelled, match="k3s failed: x"):
            ctx.poll(lambda: False, timeout=600, what="x")


class Quiet:
    """Progress that prints nothing."""

    def starting(self, name: str, description: str) -> None:
        pass

    def waiting(self, name: str, what: str) -> None:
        pass

    def finished(self, report: Any) -> None:
        pass


class BrokenConsole(Quiet):
    """Progress whose output is gone (stdout piped into `head`, then closed)."""

    def finished(self, report: Any) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def _apply_or_hang(
    services: list[noderole.Service],
    tmp_path: Path,
    progress: Any,
    *,
    backend: Any = None,
    what: str,
) -> Any:
    """apply_plan of ``services`` (role ``r``) in a thread, failing the test if it has not
    returned within 60 s ("apply_plan hung after {what}"); its report."""
    from noderole.engine import apply_plan
    from noderole.plan import build_plan
    from noderole.testing import RecordingBackend

    outcome: list[Any] = []
    worker = threading.Thread(
        target=lambda: outcome.append(
            apply_plan(
                build_plan(services, "r"),
                root=NodeRoot(tmp_path),
                clock=FakeClock(),
                backend=backend or RecordingBackend(tmp_path),
                progress=progress,
            )
        ),
        daemon=True,
    )
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), f"apply_plan hung after {what}"
    return outcome[0]


def _chain(count: int, **first: Any) -> list[noderole.Service]:
    """``s0`` .. ``s{count-1}``, each after the one before; ``first`` goes to ``s0``."""
    return [noderole.Service(name="s0", roles=["r"], command=["/bin/s0"], **first)] + [
        noderole.Service(name=f"s{i}", roles=["r"], command=[f"/bin/s{i}"], after=[f"s{i - 1}"])
        for i in range(1, count)
    ]


class TestEngineRobustness:
    def test_a_failing_console_never_hangs_the_apply(self, tmp_path: Path) -> None:
        """A progress printer that raises leaves no dependent waiting: apply_plan returns."""
        applied = _apply_or_hang(_chain(2), tmp_path, BrokenConsole(), what="its console failed")
        assert [s.status for s in applied.services] == ["started", "started"]

    @pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
    def test_a_console_raising_a_bug_never_strands_what_comes_after(self, tmp_path: Path) -> None:
        """A printer that raises something other than a closed pipe (a bug of its own) ends the
        thread that printed, with a traceback; the services after it still run, each, and
        apply_plan returns."""

        class Buggy(Quiet):
            def finished(self, report: Any) -> None:
                raise ValueError("printer bug")

        applied = _apply_or_hang(_chain(4), tmp_path, Buggy(), what="its console raised a bug")
        for thread in threading.enumerate():  # their tracebacks land inside this test
            if thread.name.startswith("apply:"):
                thread.join(60)
        assert [s.status for s in applied.services] == ["started"] * 4

    @pytest.mark.parametrize(
        ("error", "reason"),
        [
            (SystemExit(3), "exit now: raised SystemExit: 3"),
            (KeyboardInterrupt(), "exit now: raised KeyboardInterrupt"),
        ],
        ids=["SystemExit", "KeyboardInterrupt"],
    )
    def test_a_call_step_raising_a_base_exception_fails_its_service_only(
        self, tmp_path: Path, error: BaseException, reason: str
    ) -> None:
        """A plugin's ``Call`` function raising SystemExit (not an Exception) fails its service
        with a reason; the service after it still starts and apply_plan returns. It used to end
        the service's thread silently, and everything after it waited forever."""

        def leave(ctx: Any) -> None:
            raise error

        step = noderole.Call(function=leave, description="exit now")
        applied = _apply_or_hang(
            _chain(2, pre_start=[step]), tmp_path, Quiet(), what=f"a Call step raised {error!r}"
        )
        first, second = applied.services
        assert (first.status, first.reason) == ("failed", reason)
        assert second.status == "started"

    def test_anything_a_service_raises_fails_that_service_only(self, tmp_path: Path) -> None:
        """Whatever escapes a service's apply (here a backend whose start raises SystemExit)
        is that service's failure; its dependents are told, and apply_plan returns."""
        from noderole.testing import RecordingBackend

        class Exiting(RecordingBackend):
            def start(self, service: Any, *, fingerprint: str) -> Any:
                if service.name == "a":
                    raise SystemExit(5)
                return super().start(service, fingerprint=fingerprint)

        services = [
            noderole.Service(name="a", roles=["r"], command=["/bin/a"]),
            noderole.Service(name="b", roles=["r"], command=["/bin/b"], need=["a"]),
        ]
        applied = _apply_or_hang(
            services,
            tmp_path,
            Quiet(),
            backend=Exiting(tmp_path),
            what="a service's apply raised SystemExit",
        )
        a, b = applied.services
        assert (a.status, a.reason) == ("failed", "SystemExit: 5")
        assert b.status == "skipped"


class TestReadinessGateCancelled:
    def test_a_gate_on_a_service_that_gives_up_ends_at_once(self, node: Node) -> None:
        """konnectivity needs a k3s that never gets ready and crash-loops past its limit: the
        readiness gate ends on the crash, not after its 600 s bound."""
        _install(node.root, "crasher", "#!/bin/sh\nsleep 0.3\nexit 3\n")
        (node.root / "etc/noderole/config.toml").write_text(
            "[noderole]\nnet_check = false\nreadiness_timeout = 600\n"
        )
        node.services += [
            noderole.Service(
                name="k3s",
                roles=["demo"],
                command=["/usr/local/bin/crasher"],
                readiness=noderole.WaitForPaths(paths=[NEVER], timeout=600),
                supervision=noderole.Supervision(respawn_delay=0.05, respawn_max=1),
            ),
            sleeper("konnectivity", need=["k3s"]),
        ]
        data = report(node.run("apply", "demo", "--json"))
        konn = data["konnectivity"]
        assert konn["status"] == "skipped"
        assert konn["reason"].startswith("not started: k3s crashed after start: gave up")
        assert [s["kind"] for s in konn["steps"]] == ["readiness"]
