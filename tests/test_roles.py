"""`noderole apply` with no role: the role from the record or the plugins, recorded before starts.

Through the CLI against the native supervisor and real processes (the ``node`` fixture of
tests/test_engine.py ends every process it started). A resolver plugin here reads its answer
from a file under the root, as the k3s plugin reads first-boot.env.
"""

from __future__ import annotations

import json
import os
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner, Result

import noderole
from noderole.cli import cli
from noderole.cli._app import App
from noderole.errors import EnvFileError, ExitCode
from noderole.root import NodeRoot
from tests.test_engine import Node, node, sleeper

__all__ = ["node"]  # the fixture, imported for pytest

ROLE_INPUT = "/etc/image/role"
"""Where the test's resolver reads the role (a first-boot input)."""
STATE = ("var/lib/noderole/role", "var/lib/noderole/applied.json", "var/lib/noderole/plan.json")


def resolver(name: str = "resolver", *, answer: Callable[[Any], Any] | None = None) -> Any:
    """A plugin answering noderole_resolve_role from ROLE_INPUT (None when absent)."""
    module = types.ModuleType(name)

    def from_file(node: Any) -> Any:
        path = node.resolve(ROLE_INPUT)
        if not path.exists():
            return None
        text = path.read_text().strip()
        if text == "raise":
            raise EnvFileError(f"{ROLE_INPUT} names no role: write one of demo, other")
        return text

    module.noderole_resolve_role = noderole.hookimpl(answer or from_file)  # type: ignore[attr-defined]
    return module


def run(node: Node, *args: str, plugins: tuple[tuple[str, object], ...] = ()) -> Result:
    app = App(
        root=NodeRoot(node.root),
        plugin_objects=(("test", node.plugin()), *plugins),
        autoload=False,
    )
    return CliRunner().invoke(cli, list(args), obj=app, catch_exceptions=False)


def tree(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``root`` with its mode, size and modification time (ns)."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            st = path.lstat()
            found[str(path.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return found


def names(result: Result) -> dict[str, dict[str, Any]]:
    data = json.loads(result.stdout)
    return {s["name"]: s for s in data["services"]} | {"_": data}


def set_input(node: Node, text: str) -> None:
    path = node.root / ROLE_INPUT.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


class TestResolvedRole:
    def test_first_boot_applies_the_resolved_role_and_records_it_before_any_start(
        self, node: Node
    ) -> None:
        """No role, none recorded: the resolver's role is applied; services see it recorded."""
        seen: list[str] = []

        def look(ctx: noderole.StepContext) -> None:
            seen.append(ctx.resolve("/var/lib/noderole/role").read_text().strip())

        check = noderole.Call(function=look, description="read the recorded role", key="r")
        node.services += [sleeper("a", pre_start=[check]), sleeper("b", roles=["other"])]
        set_input(node, "demo")
        result = run(node, "apply", "--json", plugins=(("resolver", resolver()),))
        assert result.exit_code == 0, result.output
        assert names(result)["_"]["role"] == "demo"
        assert names(result)["a"]["status"] == "started"
        assert "b" not in names(result)
        assert seen == ["demo"]
        assert (node.root / STATE[0]).read_text() == "demo\n"

    def test_a_failed_service_keeps_the_role_for_the_next_boot(self, node: Node) -> None:
        """The role is recorded though a service failed; the next apply keeps it, whatever the
        first-boot input says by then."""
        node.services += [
            sleeper("a", pre_start=[noderole.Fail(message="no certificate yet")]),
            sleeper("b", roles=["other"]),
        ]
        set_input(node, "demo")
        first = run(node, "apply", "--json", plugins=(("resolver", resolver()),))
        assert first.exit_code == ExitCode.FAILED
        assert (node.root / STATE[0]).read_text() == "demo\n"
        set_input(node, "other")
        second = run(node, "apply", "--json", plugins=(("resolver", resolver()),))
        assert names(second)["_"]["role"] == "demo"
        assert "b" not in names(second)

    def test_an_explicit_role_wins_and_is_recorded(self, node: Node) -> None:
        """`apply ROLE` applies ROLE whatever is recorded or resolved, and records it."""
        node.services += [sleeper("a"), sleeper("b", roles=["other"])]
        set_input(node, "demo")
        (node.root / "var/lib/noderole").mkdir(parents=True)
        (node.root / STATE[0]).write_text("demo\n")
        result = run(node, "apply", "other", "--json", plugins=(("resolver", resolver()),))
        assert result.exit_code == 0, result.output
        assert set(names(result)) == {"b", "_"}
        assert (node.root / STATE[0]).read_text() == "other\n"

    def test_an_applied_node_with_nothing_changed_does_nothing(self, node: Node) -> None:
        """A second `apply` leaves every service, and every file noderole records, untouched."""
        node.services += [sleeper("a"), sleeper("b", after=["a"])]
        set_input(node, "demo")
        first = run(node, "apply", "--json", plugins=(("resolver", resolver()),))
        assert first.exit_code == 0, first.output
        before = {path: os.stat(node.root / path) for path in STATE}
        second = run(node, "apply", "--json", plugins=(("resolver", resolver()),))
        assert second.exit_code == 0, second.output
        assert {names(second)[n]["status"] for n in "ab"} == {"running"}
        assert [names(second)[n]["pid"] for n in "ab"] == [names(first)[n]["pid"] for n in "ab"]
        for path, stat in before.items():
            now = os.stat(node.root / path)
            assert (now.st_ino, now.st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns), path


class TestNoSideEffect:
    """A role that cannot be decided is an error with its exit status, and the root is as it
    was: nothing written, nothing started."""

    @pytest.mark.parametrize(
        ("given", "code", "words"),
        [
            ("bogus", ExitCode.PLAN, "unknown role 'bogus'"),
            ("raise", ExitCode.ENVFILE, f"{ROLE_INPUT} names no role"),
        ],
    )
    def test_invalid_or_missing_resolved_role(
        self, node: Node, given: str, code: ExitCode, words: str
    ) -> None:
        """A resolved role no service has, or a resolver refusing its input: nothing happens."""
        node.services.append(sleeper("a"))
        set_input(node, given)
        before = tree(node.root)
        result = run(node, "apply", plugins=(("resolver", resolver()),))
        assert result.exit_code == code, result.output
        assert words in result.output
        assert tree(node.root) == before
        assert node.processes() == []

    def test_no_role_no_resolver_no_record_says_what_to_pass(self, node: Node) -> None:
        """With nothing to decide from, the error says to pass the role and lists the roles."""
        node.services += [sleeper("a"), sleeper("b", roles=["other"])]
        before = tree(node.root)
        result = run(node, "apply")
        assert result.exit_code == ExitCode.USAGE
        message = " ".join(result.output.split())
        assert "no role given" in message
        assert "noderole apply ROLE" in message
        assert "roles of the installed plugins: demo, other" in message
        assert tree(node.root) == before
        assert node.processes() == []

    def test_resolvers_that_disagree_are_named(self, node: Node) -> None:
        """Two plugins resolving different roles: a plugin error naming both, nothing started."""
        node.services += [sleeper("a"), sleeper("b", roles=["other"])]
        set_input(node, "demo")
        other = resolver("second", answer=lambda node: "other")
        before = tree(node.root)
        result = run(node, "apply", plugins=(("resolver", resolver()), ("second", other)))
        assert result.exit_code == ExitCode.PLUGIN
        message = " ".join(result.output.split())
        assert "plugin 'resolver' resolves 'demo'" in message
        assert "plugin 'second' resolves 'other'" in message
        assert tree(node.root) == before
        assert node.processes() == []


class TestDamagedRecord:
    """The recorded role is a one-line file a power cut, a bad disk or a slip of an editor can
    damage. Where the record decides the role (``apply``, ``status``, ``stop`` without one),
    the error names the file, what is wrong with it and what to type; nothing is written or
    started. An explicit role needs no record: it is applied, and recorded anew."""

    DAMAGE = (
        pytest.param(b"de\xffmo\n", "not UTF-8 text", id="not-utf8"),
        pytest.param(b"../../etc\n", "'../../etc' is not a role name", id="not-a-name"),
        pytest.param(b"demo\nother\n", "is not a role name", id="two-lines"),
        pytest.param(b"demo\x00\n", "is not a role name", id="nul"),
    )

    def _damage(self, node: Node, data: bytes) -> Path:
        record = node.root / STATE[0]
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_bytes(data)
        return record

    @pytest.mark.parametrize(("data", "words"), DAMAGE)
    @pytest.mark.parametrize("command", ["apply", "status", "stop"])
    def test_without_a_role_the_error_names_the_file_and_the_fix(
        self, node: Node, data: bytes, words: str, command: str
    ) -> None:
        node.services += [sleeper("a"), sleeper("b", roles=["other"])]
        set_input(node, "other")  # a resolver's answer never overrides a record, even damaged
        self._damage(node, data)
        before = tree(node.root)
        result = run(node, command, plugins=(("resolver", resolver()),))
        assert result.exit_code == ExitCode.USAGE, result.output
        message = " ".join(result.output.split())
        assert "Traceback" not in message
        assert "/var/lib/noderole/role is damaged" in message
        assert words in message
        assert f"noderole {command} ROLE" in message
        assert tree(node.root) == before
        assert node.processes() == []

    @pytest.mark.parametrize(("data", "words"), DAMAGE)
    def test_an_explicit_role_is_applied_and_recorded_anew(
        self, node: Node, data: bytes, words: str
    ) -> None:
        node.services += [sleeper("a"), sleeper("b", roles=["other"])]
        record = self._damage(node, data)
        result = run(node, "apply", "demo", "--json")
        assert result.exit_code == 0, result.output
        assert names(result)["a"]["status"] == "started"
        assert record.read_bytes() == b"demo\n"
        status = run(node, "status", "--json")  # the record, read again, decides the role
        assert status.exit_code == 0, status.output
        assert {s["name"] for s in json.loads(status.output)["services"]} == {"a"}
        stop = run(node, "stop")
        assert stop.exit_code == 0, stop.output

    def test_a_directory_in_place_of_the_record(self, node: Node) -> None:
        """Not a file at all: the same error, saying what is there."""
        node.services.append(sleeper("a"))
        (node.root / STATE[0]).mkdir(parents=True)
        result = run(node, "apply")
        assert result.exit_code == ExitCode.USAGE, result.output
        message = " ".join(result.output.split())
        assert "/var/lib/noderole/role is damaged (not a regular file" in message
        assert node.processes() == []


class TestRecordedPlan:
    def test_the_record_rebuilds_the_applied_plan(self, node: Node) -> None:
        """plan.json gives back the same order, waves, readiness and logs, with no environment."""
        from noderole.recorded import PLAN_FILE, read_plan

        ready = noderole.WaitForPaths(paths=["/run/ready-flag"], timeout=30)
        writer = sleeper("a", readiness=ready, environment={"TOKEN": noderole.Secret("s3cret")})
        node.services += [
            attrs.evolve(writer, command=["/usr/local/bin/ready-writer"]),
            sleeper("b", need=["a"]),
        ]
        result = run(node, "apply", "demo")
        assert result.exit_code == 0, result.output
        applied = App(
            root=NodeRoot(node.root), plugin_objects=(("test", node.plugin()),), autoload=False
        ).plan("demo")
        recorded = read_plan(NodeRoot(node.root), "demo")
        assert recorded is not None
        assert recorded.backend == "native"
        assert recorded.plan.waves == applied.waves
        assert [p.service.readiness for p in recorded.plan] == [
            p.service.readiness for p in applied
        ]
        assert [p.service.output_log for p in recorded.plan] == ["/var/log/a.log", "/var/log/b.log"]
        assert "s3cret" not in (node.root / PLAN_FILE.lstrip("/")).read_text()
        # Only the names of secrets are kept (status asks the plugins for the values it hides).
        assert [dict(p.service.environment) for p in recorded.plan][1] == {}
        (token,) = recorded.plan["a"].service.environment.values()
        assert isinstance(token, noderole.Secret)
        assert token.reveal() == ""

    def test_an_unchanged_plan_is_not_written_again(self, tmp_path: Path) -> None:
        """Every re-apply records its plan: the same data (a readiness check's paths
        included, a tuple in the record and a list in JSON) is not written again, whatever the
        layout of the file that holds it; other data is."""
        from noderole.plan import build_plan
        from noderole.recorded import PLAN_FILE, plan_data, write_plan

        root = NodeRoot(tmp_path)
        ready = noderole.WaitForPaths(paths=["/run/a", "/run/b"], timeout=3)

        def data(*args: str) -> dict[str, object]:
            service = noderole.Service(
                name="a", roles=["demo"], command=["/x", *args], readiness=ready
            )
            return plan_data(build_plan([service], "demo"), backend="native", noderole_path="/n")

        assert write_plan(root, data()) is True
        path = tmp_path / PLAN_FILE.lstrip("/")
        path.write_text(json.dumps(json.loads(path.read_text())))  # another layout, same data
        held = path.read_text()
        assert write_plan(root, data()) is False
        assert path.read_text() == held
        assert write_plan(root, data("--v2")) is True
        assert "--v2" in path.read_text()

    def test_the_same_record_is_read_once(self, tmp_path: Path) -> None:
        """Reading an unchanged plan.json again gives the plan already built; a changed file,
        another role or a removed file are read afresh."""
        from noderole.plan import build_plan
        from noderole.recorded import PLAN_FILE, plan_data, read_plan, write_plan

        root = NodeRoot(tmp_path)

        def record(*names: str) -> None:
            services = [noderole.Service(name=n, roles=["demo"], command=["/x"]) for n in names]
            plan = build_plan(services, "demo")
            write_plan(root, plan_data(plan, backend="native", noderole_path="/usr/bin/noderole"))

        record("a")
        first = read_plan(root, "demo")
        assert first is not None
        assert read_plan(root, "demo") is first
        assert read_plan(root, "other") is None
        record("a", "b")
        second = read_plan(root, "demo")
        assert second is not None
        assert list(second.plan.names()) == ["a", "b"]
        (tmp_path / PLAN_FILE.lstrip("/")).unlink()
        assert read_plan(root, "demo") is None

    def test_status_reads_the_record_as_the_records_would(self, node: Node) -> None:
        """status of the applied role reads plan.json as it is (no records, no planning) and
        shows what the plan rebuilt from records shows, in the same order."""
        ready = noderole.WaitForPaths(paths=["/run/ready-flag"], timeout=30)
        node.services += [
            sleeper("z", need=["a"]),
            sleeper("a", readiness=ready, environment={"TOKEN": noderole.Secret("s3cret")}),
            sleeper("m"),
        ]
        (node.root / "run").mkdir(exist_ok=True)
        (node.root / "run/ready-flag").write_text("")  # a ready
        assert run(node, "apply", "demo").exit_code == 0
        app = App(root=NodeRoot(node.root), autoload=False)
        assert app.recorded_status(None) is not None

        def shown(*args: str) -> list[dict[str, Any]]:
            result = run(node, "status", "--json", *args)
            rows: list[dict[str, Any]] = json.loads(result.stdout)["services"]
            return [{k: v for k, v in row.items() if k != "uptime"} for row in rows]

        light, light_one = shown(), shown("z")
        plan_file = node.root / STATE[2]
        data = json.loads(plan_file.read_text())
        plan_file.write_text(json.dumps({**data, "in_order": False}))
        assert App(root=NodeRoot(node.root), autoload=False).recorded_status(None) is None
        assert shown() == light
        assert shown("z") == light_one
        assert [row["name"] for row in light] == ["a", "m", "z"]
        assert [row["name"] for row in light_one] == ["z"]

    def test_the_view_refuses_what_it_cannot_show_as_recorded(self, tmp_path: Path) -> None:
        """read_view gives the recorded services in order, or None for another role, a record
        out of start order (a kept service appended) or of the wrong shape."""
        from noderole.plan import build_plan
        from noderole.recorded import PLAN_FILE, keeping, plan_data, read_view, write_plan

        root = NodeRoot(tmp_path)
        services = [
            noderole.Service(name="b", roles=["demo"], command=["/b"], need=["a"], origin="p"),
            noderole.Service(name="a", roles=["demo"], command=["/a"], origin="p"),
        ]
        data = plan_data(build_plan(services, "demo"), backend="native", noderole_path="/n")
        write_plan(root, data)
        view = read_view(root, "demo")
        assert view is not None
        assert [entry.name for entry in view.services] == ["a", "b"]
        assert "b" in view
        assert "c" not in view
        assert read_view(root, "other") is None
        plan_file = tmp_path / PLAN_FILE.lstrip("/")
        kept = keeping(root, {**data, "services": data["services"][:1]}, origins=["p"], names=[])
        assert kept["in_order"] is False
        assert keeping(root, data, origins=["p"], names=[])["in_order"] is True
        for broken in (
            {**data, "in_order": False},
            {k: v for k, v in data.items() if k != "in_order"},
            {**data, "services": [{"name": "a"}]},
            {**data, "services": [data["services"][0], data["services"][0]]},
            {**data, "services": [{**data["services"][0], "command": "/a"}]},
            {**data, "backend": None},
        ):
            plan_file.write_text(json.dumps(broken))
            assert read_view(root, "demo") is None

    def test_an_unusable_record_falls_back_to_the_plugins(self, node: Node) -> None:
        """A plan.json of the wrong shape is ignored: status plans from the plugins instead."""
        node.services += [sleeper("a")]
        assert run(node, "apply", "demo").exit_code == 0
        (node.root / STATE[2]).write_text('{"version": 1, "role": "demo", "services": [{"x": 1}]}')
        result = run(node, "status", "--json")
        assert result.exit_code == 0, result.output
        assert [row["name"] for row in json.loads(result.stdout)["services"]] == ["a"]
