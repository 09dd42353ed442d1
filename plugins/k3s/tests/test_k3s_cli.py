"""`noderole plan` and `graph` with the installed k3s and konnectivity plugins, under --root.

These go through the CLI and the installed entry points on purpose (the kit's plan helpers
load plugin objects only); the scratch root is the kit's ``node_root``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from noderole.cli import cli
from noderole.errors import ExitCode
from noderole.testing import ScratchRoot

TOKEN = "K10-cli-secret-token::server:0ddba11"


LIMITS = {
    "stop_scope": "process",
    "delegate": True,
    "open_files": 1048576,
    "tasks": "infinity",
    "notify": True,
}


def invoke(root: ScratchRoot, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--root", str(root.path), *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture
def root(node_root: ScratchRoot) -> ScratchRoot:
    """A node root with a k3s config, first-boot and agent environment files."""
    join = {"K3S_URL": "https://s:6443", "K3S_TOKEN": TOKEN}
    node_root.write("/etc/rancher/k3s/config.yaml", "write-kubeconfig-mode: '0600'\n")
    node_root.write_env(
        "/etc/spinifex-eks/first-boot.env", {"EKS_KONNECTIVITY_SANS": "k.example", **join}
    )
    node_root.write_env("/etc/spinifex-eks/agent.env", join)
    # The example node-exporter plugin waits for it; missing, `plan` would say it fails (exit 12).
    node_root.resolve("/var/lib/node-exporter/textfile").mkdir(parents=True)
    return node_root


def plan(root: ScratchRoot, role: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(invoke(root, "plan", role, "--json"))
    return data


def wave_of(data: dict[str, Any]) -> dict[str, int]:
    return {service["name"]: service["wave"] for service in data["services"]}


class TestPlan:
    def test_server_order(self, root: ScratchRoot) -> None:
        """plan server: net, cgroups and cluster-init first, then k3s, then konnectivity-server."""
        waves = wave_of(plan(root, "server"))
        assert waves["net"] < waves["k3s"]
        assert waves["cgroups"] < waves["k3s"]
        assert waves["k3s-cluster-init"] < waves["k3s"]
        assert waves["k3s"] < waves["konnectivity-server"]
        assert "k3s-cluster-join" not in waves
        assert "k3s-agent" not in waves

    def test_server_join_order(self, root: ScratchRoot) -> None:
        """plan server-join: the join milestone replaces cluster-init, same order otherwise."""
        waves = wave_of(plan(root, "server-join"))
        assert waves["k3s-cluster-join"] < waves["k3s"] < waves["konnectivity-server"]
        assert waves["net"] < waves["k3s"]
        assert "k3s-cluster-init" not in waves

    def test_agent(self, root: ScratchRoot) -> None:
        """plan agent: k3s-agent after net and cgroups; no server services."""
        waves = wave_of(plan(root, "agent"))
        assert waves["net"] < waves["k3s-agent"]
        assert waves["cgroups"] < waves["k3s-agent"]
        assert not {"k3s", "konnectivity-server", "k3s-cluster-init"} & set(waves)

    @pytest.mark.parametrize("role", ["agent", "server-join"])
    def test_token_never_printed(self, root: ScratchRoot, role: str) -> None:
        """Neither the text nor the JSON plan shows the token; the agent's shows ***."""
        text = invoke(root, "plan", role)
        as_json = invoke(root, "plan", role, "--json")
        assert TOKEN not in text
        assert TOKEN not in as_json
        if role == "agent":
            assert "env: K3S_TOKEN=***" in text
            agent = next(s for s in json.loads(as_json)["services"] if s["name"] == "k3s-agent")
            assert agent["environment"]["K3S_TOKEN"] == "***"
            assert agent["command"] == ["/usr/local/bin/k3s", "agent"]

    @pytest.mark.parametrize(("role", "name"), [("server", "k3s"), ("agent", "k3s-agent")])
    def test_plan_says_how_k3s_is_stopped_and_limited(
        self, root: ScratchRoot, role: str, name: str
    ) -> None:
        """plan shows k3s's stop scope and limits, which its install script's unit sets and
        the plan's reader would otherwise not see: that a restart leaves its containers, and
        its limits; the JSON plan carries them as fields."""
        text = invoke(root, "plan", role)
        section = text[text.index(f"\n{name}  [k3s]") :].split("\n\n")[0]
        assert "  stop: the process alone (what it started runs on)\n" in section
        assert (
            "  limits: 1048576 open files, no task limit, cgroup delegated (systemd)\n" in section
        )
        assert "  says when it is ready (sd_notify; under systemd, Type=notify)\n" in section
        (service,) = [s for s in plan(root, role)["services"] if s["name"] == name]
        shown = {key: service["supervision"][key] for key in LIMITS}
        assert shown == LIMITS


class TestGraph:
    def test_server_graph(self, root: ScratchRoot) -> None:
        """graph server draws k3s's needs and wants and konnectivity-server's order after k3s."""
        text = invoke(root, "graph", "server")
        lines = {line.split(":")[0].split(" [")[0]: line for line in text.splitlines()}
        assert "konnectivity-server" in lines
        assert "after k3s" in lines["konnectivity-server"]
        assert "need k3s-cluster-init (for k3s-cluster); want net, cgroups" in lines["k3s"]
        assert "pulled in by k3s" in lines["net"]
        assert "pulled in by k3s" in lines["cgroups"]


def tree(root: ScratchRoot) -> dict[str, tuple[int, int, int]]:
    """Every path under the root with its mode, size and modification time (ns); noderole's
    entry-point cache aside (a cache of the installed plugins, not the node's state)."""
    found = {}
    for path in sorted(root.path.rglob("*")):
        if path.is_relative_to(root.path / "var/cache") or path == root.path / "var":
            continue
        st = path.lstat()
        found[str(path.relative_to(root.path))] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return found


class TestApplyWithoutRole:
    """`noderole apply` with no role: k3s resolves it from first-boot.env (docs/plugins/k3s.md)."""

    @pytest.mark.parametrize("role", ["server", "server-join", "agent"])
    def test_the_first_boot_role_is_the_one_applied(self, root: ScratchRoot, role: str) -> None:
        """SPINIFEX_K3S_ROLE decides the role of `apply` (seen through --dry-run: no change)."""
        root.write_env(
            "/etc/spinifex-eks/first-boot.env",
            {
                "SPINIFEX_K3S_ROLE": role,
                "EKS_KONNECTIVITY_SANS": "k.example",
                "K3S_URL": "https://s:6443",
                "K3S_TOKEN": TOKEN,
            },
        )
        data = json.loads(invoke(root, "apply", "--dry-run", "--json"))
        assert data["role"] == role

    @pytest.mark.parametrize(
        ("values", "words"),
        [
            ({"SPINIFEX_K3S_ROLE": "master"}, "SPINIFEX_K3S_ROLE='master' in "),
            ({"OTHER": "x"}, "SPINIFEX_K3S_ROLE missing from "),
        ],
    )
    def test_an_invalid_or_missing_role_changes_nothing(
        self, node_root: ScratchRoot, values: dict[str, str], words: str
    ) -> None:
        """A role k3s cannot read from first-boot.env: exit 8, nothing written or started."""
        node_root.write_env("/etc/spinifex-eks/first-boot.env", values)
        before = tree(node_root)
        result = CliRunner().invoke(
            cli, ["--root", str(node_root.path), "apply"], catch_exceptions=False
        )
        assert result.exit_code == ExitCode.ENVFILE, result.output
        assert words in " ".join(result.output.split())
        assert tree(node_root) == before
