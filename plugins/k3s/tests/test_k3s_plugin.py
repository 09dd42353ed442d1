"""The k3s plugin's hooks in isolation: configuration, contributions, roles, agent environment."""

from __future__ import annotations

import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

import noderole
from noderole.clock import FakeClock
from noderole.context import NodeContext
from noderole.plugins import PluginSet
from noderole.records import Service
from noderole.root import NodeRoot
from noderole.steps import StepContext, run_steps
from noderole_k3s import ConfigFile, Manifest

CONFIG = "/etc/rancher/k3s/config.yaml"
SKEL = "/etc/rancher/k3s/config.yaml.skel"
ROLE_DROPIN = "/etc/rancher/k3s/config.yaml.d/40-noderole-role.yaml"
DROPIN = "/etc/rancher/k3s/config.yaml.d/50-noderole.yaml"
MANIFESTS = "/var/lib/rancher/k3s/server/manifests"
FIRST_BOOT = "/etc/spinifex-eks/first-boot.env"
AGENT_ENV = "/etc/spinifex-eks/agent.env"
TOKEN = "K10-very-secret-token::server:abc123"

Put = Callable[[str, str], Path]
MakeNode = Callable[..., tuple[PluginSet, NodeContext]]


class Contributor:
    """A test plugin contributing to k3s through its hooks."""

    def __init__(
        self,
        config: Any = None,
        manifests: Any = None,
        files: Any = None,
        raises: Exception | None = None,
    ) -> None:
        self.config, self.manifests, self.files, self.raises = config, manifests, files, raises

    @noderole.hookimpl(optionalhook=True)
    def noderole_k3s_config(self, node: NodeContext) -> Any:
        if self.raises is not None:
            raise self.raises
        return self.config

    @noderole.hookimpl(optionalhook=True)
    def noderole_k3s_manifests(self, node: NodeContext) -> Any:
        return self.manifests

    @noderole.hookimpl(optionalhook=True)
    def noderole_k3s_files(self, node: NodeContext) -> Any:
        return self.files


def services(plugins: PluginSet, node: NodeContext) -> dict[str, Service]:
    return {service.name: service for service in plugins.services(node)}


def run(service: Service, root: Path) -> list[str]:
    """Run the service's pre-start steps under ``root``; the node paths written."""
    ctx = StepContext(service=service.name, root=NodeRoot(root), clock=FakeClock())
    run_steps(service.pre_start, ctx)
    return ctx.written


def fails(service: Service, root: Path) -> str:
    """Run the steps, expecting a failure; its message."""
    with pytest.raises(noderole.StepError) as caught:
        run(service, root)
    return str(caught.value)


def read_yaml(root: Path, node_path: str) -> Any:
    return yaml.safe_load((root / node_path.lstrip("/")).read_text())


def manifest(name: str = "extra.yaml", value: str = "a") -> Manifest:
    return Manifest(
        name=name,
        documents=[{"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": value}}],
    )


class TestBaseConfig:
    def test_derived_from_skel(self, tmp_path: Path, put: Put, make_node: MakeNode) -> None:
        """Without config.yaml, the skeleton's text becomes config.yaml, private to root."""
        put(SKEL, "# image default\nwrite-kubeconfig-mode: '0600'\n")
        plugins, node = make_node()
        written = run(services(plugins, node)["k3s"], tmp_path)
        local = tmp_path / CONFIG.lstrip("/")
        assert CONFIG in written
        assert local.read_text() == "# image default\nwrite-kubeconfig-mode: '0600'\n"
        assert stat.S_IMODE(local.stat().st_mode) == 0o600

    def test_existing_config_kept(self, tmp_path: Path, put: Put, make_node: MakeNode) -> None:
        """An existing config.yaml is never rewritten, even when a skeleton exists."""
        put(SKEL, "node-label: [from-skel]\n")
        put(CONFIG, "node-label: [operator]\n")
        plugins, node = make_node()
        written = run(services(plugins, node)["k3s"], tmp_path)
        assert CONFIG not in written
        assert read_yaml(tmp_path, CONFIG) == {"node-label": ["operator"]}

    def test_neither_refuses(self, tmp_path: Path, make_node: MakeNode) -> None:
        """With neither config.yaml nor its skeleton, k3s fails naming both, writing nothing."""
        plugins, node = make_node()
        message = fails(services(plugins, node)["k3s"], tmp_path)
        assert f"neither {CONFIG} nor {SKEL} exists" in message
        assert not (tmp_path / "etc/rancher/k3s/config.yaml.d").exists()

    @pytest.mark.parametrize(
        ("text", "why"),
        [("key: [unclosed\n", "not valid YAML (line 2)"), ("- a\n- b\n", "must be a YAML mapping")],
    )
    def test_bad_base_refused(
        self, tmp_path: Path, put: Put, make_node: MakeNode, text: str, why: str
    ) -> None:
        """A config.yaml that is not a YAML mapping fails k3s with the file named."""
        put(CONFIG, text)
        plugins, node = make_node()
        message = fails(services(plugins, node)["k3s"], tmp_path)
        assert CONFIG in message
        assert why in message


class TestContributions:
    def test_merged_into_dropin(self, tmp_path: Path, put: Put, make_node: MakeNode) -> None:
        """Lists from several plugins concatenate after config.yaml's own; equal scalars agree."""
        put(CONFIG, "kube-apiserver-arg: [audit-log-maxage=30]\ntls-san: [a]\n")
        one = Contributor({"kube-apiserver-arg": ["x=1", "audit-log-maxage=30"], "mode": "off"})
        two = Contributor({"kube-apiserver-arg": ["y=2", "x=1"], "mode": "off", "n": 3})
        plugins, node = make_node(("one", one), ("two", two))
        run(services(plugins, node)["k3s"], tmp_path)
        assert read_yaml(tmp_path, DROPIN) == {
            "kube-apiserver-arg": ["audit-log-maxage=30", "x=1", "y=2"],
            "mode": "off",
            "n": 3,
        }
        assert read_yaml(tmp_path, CONFIG) == {
            "kube-apiserver-arg": ["audit-log-maxage=30"],
            "tls-san": ["a"],
        }

    def test_no_contributions_empty_dropin(
        self, tmp_path: Path, put: Put, make_node: MakeNode
    ) -> None:
        """With nothing contributed the drop-in is an empty mapping, so stale keys vanish."""
        put(CONFIG, "")
        put(DROPIN, "egress-selector-mode: disabled\n")
        plugins, node = make_node()
        run(services(plugins, node)["k3s"], tmp_path)
        assert read_yaml(tmp_path, DROPIN) == {}

    def test_conflicting_scalar_names_both(
        self, tmp_path: Path, put: Put, make_node: MakeNode
    ) -> None:
        """Two plugins setting one scalar differently fail k3s, naming the key and both plugins."""
        put(CONFIG, "")
        alpha = Contributor({"egress-selector-mode": "disabled"})
        beta = Contributor({"egress-selector-mode": "agent"})
        plugins, node = make_node(("alpha", alpha), ("beta", beta))
        service = services(plugins, node)["k3s"]
        assert isinstance(service.pre_start[0], noderole.Fail)
        message = fails(service, tmp_path)
        assert "'egress-selector-mode'" in message
        assert "plugin 'alpha'" in message
        assert "plugin 'beta'" in message
        assert not (tmp_path / DROPIN.lstrip("/")).exists()

    def test_bool_and_string_conflict(self, tmp_path: Path, put: Put, make_node: MakeNode) -> None:
        """true and "true" are different values to k3s, so they conflict."""
        put(CONFIG, "")
        plugins, node = make_node(
            ("alpha", Contributor({"flag": True})), ("beta", Contributor({"flag": "true"}))
        )
        assert "'flag'" in fails(services(plugins, node)["k3s"], tmp_path)

    def test_list_against_scalar_conflict(
        self, tmp_path: Path, put: Put, make_node: MakeNode
    ) -> None:
        """One plugin's list and another's scalar for the same key conflict."""
        put(CONFIG, "")
        plugins, node = make_node(
            ("alpha", Contributor({"k": ["a"]})), ("beta", Contributor({"k": "a"}))
        )
        message = fails(services(plugins, node)["k3s"], tmp_path)
        assert "plugin 'alpha'" in message
        assert "plugin 'beta'" in message

    def test_raising_hook_named(self, tmp_path: Path, put: Put, make_node: MakeNode) -> None:
        """A contributing hook that raises fails k3s (not the whole plan), naming the plugin."""
        put(CONFIG, "")
        plugins, node = make_node(("broken", Contributor(raises=RuntimeError("boom"))))
        message = fails(services(plugins, node)["k3s"], tmp_path)
        assert "plugin 'broken' hook noderole_k3s_config raised RuntimeError: boom" in message

    @pytest.mark.parametrize(
        ("contributor", "hook"),
        [
            (Contributor(config=["not", "a", "mapping"]), "noderole_k3s_config"),
            (Contributor(config={"k": {"nested": 1}}), "sets k3s key 'k'"),
            (Contributor(manifests=["text"]), "noderole_k3s_manifests"),
            (Contributor(files=[manifest()]), "noderole_k3s_files"),
        ],
    )
    def test_wrong_types_named(
        self, tmp_path: Path, put: Put, make_node: MakeNode, contributor: Contributor, hook: str
    ) -> None:
        """A hook returning the wrong kind of value fails k3s naming the plugin."""
        put(CONFIG, "")
        plugins, node = make_node(("odd", contributor))
        message = fails(services(plugins, node)["k3s"], tmp_path)
        assert "plugin 'odd'" in message
        assert hook in message

    def test_manifests_staged(self, tmp_path: Path, put: Put, make_node: MakeNode) -> None:
        """Contributed manifests land in the auto-deploy directory as multi-document YAML."""
        put(CONFIG, "")
        two_docs = Manifest(
            name="agent.yaml", documents=[{"kind": "ServiceAccount"}, {"kind": "DaemonSet"}]
        )
        plugins, node = make_node(("m", Contributor(manifests=[two_docs, manifest()])))
        run(services(plugins, node)["k3s"], tmp_path)
        staged = tmp_path / MANIFESTS.lstrip("/") / "agent.yaml"
        assert list(yaml.safe_load_all(staged.read_text())) == [
            {"kind": "ServiceAccount"},
            {"kind": "DaemonSet"},
        ]
        assert staged.read_text().startswith("# Staged by noderole from plugin m.\n")
        assert read_yaml(tmp_path, f"{MANIFESTS}/extra.yaml")["data"] == {"k": "a"}

    def test_same_manifest_twice_is_fine(
        self, tmp_path: Path, put: Put, make_node: MakeNode
    ) -> None:
        """Two plugins staging an identical manifest is not a conflict."""
        put(CONFIG, "")
        plugins, node = make_node(
            ("a", Contributor(manifests=manifest())), ("b", Contributor(manifests=manifest()))
        )
        run(services(plugins, node)["k3s"], tmp_path)
        assert (tmp_path / MANIFESTS.lstrip("/") / "extra.yaml").is_file()

    def test_different_manifest_same_name_names_both(
        self, tmp_path: Path, put: Put, make_node: MakeNode
    ) -> None:
        """Two plugins staging different content under one name fail k3s naming both."""
        put(CONFIG, "")
        plugins, node = make_node(
            ("a", Contributor(manifests=manifest(value="1"))),
            ("b", Contributor(manifests=manifest(value="2"))),
        )
        message = fails(services(plugins, node)["k3s"], tmp_path)
        assert "manifest extra.yaml" in message
        assert "plugin 'a'" in message
        assert "plugin 'b'" in message

    def test_files_written_before_dropin(
        self, tmp_path: Path, put: Put, make_node: MakeNode
    ) -> None:
        """Contributed files are written (mode kept) before the drop-in that references them."""
        put(CONFIG, "")
        extra = ConfigFile(path="/etc/rancher/k3s/audit.yaml", documents={"kind": "Policy"})
        plugins, node = make_node(("f", Contributor(files=extra)))
        written = run(services(plugins, node)["k3s"], tmp_path)
        assert written.index("/etc/rancher/k3s/audit.yaml") < written.index(DROPIN)
        local = tmp_path / "etc/rancher/k3s/audit.yaml"
        assert yaml.safe_load(local.read_text()) == {"kind": "Policy"}
        assert stat.S_IMODE(local.stat().st_mode) == 0o600

    def test_second_run_writes_nothing(self, tmp_path: Path, put: Put, make_node: MakeNode) -> None:
        """Applying again with the same inputs rewrites no file."""
        put(SKEL, "a: 1\n")
        plugins, node = make_node(("m", Contributor(config={"b": [1]}, manifests=manifest())))
        run(services(plugins, node)["k3s"], tmp_path)
        plugins, node = make_node(("m", Contributor(config={"b": [1]}, manifests=manifest())))
        assert run(services(plugins, node)["k3s"], tmp_path) == []


class TestRecords:
    @pytest.mark.parametrize("name", ["Agent.yaml", "a/b.yaml", "agent.json", ".yaml", ""])
    def test_bad_manifest_name(self, name: str) -> None:
        """A manifest name that is not a plain lower-case .yaml file name is refused."""
        with pytest.raises(noderole.DefinitionError, match="Manifest: field 'name'"):
            Manifest(name=name, documents=[{"kind": "x"}])

    def test_documents_must_be_mappings(self) -> None:
        """Documents are mappings, and there is at least one."""
        with pytest.raises(noderole.DefinitionError, match="each document is a mapping"):
            Manifest(name="a.yaml", documents=["kind: x"])  # type: ignore[list-item]
        with pytest.raises(noderole.DefinitionError, match="at least one"):
            ConfigFile(path="/etc/a.yaml", documents=[])

    def test_relative_file_path_refused(self) -> None:
        """A ConfigFile path must be absolute."""
        with pytest.raises(noderole.DefinitionError, match="absolute"):
            ConfigFile(path="etc/a.yaml", documents={"a": 1})


class TestRoles:
    def test_server_initialises(self, tmp_path: Path, make_node: MakeNode) -> None:
        """Role server's milestone writes cluster-init: true to the role drop-in."""
        plugins, node = make_node()
        init = services(plugins, node)["k3s-cluster-init"]
        assert init.roles == ("server",)
        assert init.provide == ("k3s-cluster",)
        run(init, tmp_path)
        assert read_yaml(tmp_path, ROLE_DROPIN) == {"cluster-init": True}

    def test_join_writes_url_and_token_privately(
        self, tmp_path: Path, put: Put, make_node: MakeNode
    ) -> None:
        """Role server-join's milestone writes server and token to a mode-0600 drop-in."""
        put(FIRST_BOOT, f"K3S_URL=https://10.0.0.1:6443\nK3S_TOKEN='{TOKEN}'\n")
        plugins, node = make_node()
        join = services(plugins, node)["k3s-cluster-join"]
        assert join.roles == ("server-join",)
        run(join, tmp_path)
        assert read_yaml(tmp_path, ROLE_DROPIN) == {
            "server": "https://10.0.0.1:6443",
            "token": TOKEN,
        }
        assert stat.S_IMODE((tmp_path / ROLE_DROPIN.lstrip("/")).stat().st_mode) == 0o600
        assert TOKEN not in repr(join)
        assert all(TOKEN not in step.describe() for step in join.pre_start)

    @pytest.mark.parametrize(
        ("env", "missing"),
        [
            ("", "K3S_URL and K3S_TOKEN missing"),
            ("K3S_URL=https://a:6443\n", "K3S_TOKEN missing"),
            ("K3S_TOKEN=t\nK3S_URL=\n", "K3S_URL missing"),
        ],
    )
    def test_join_without_inputs_fails(
        self, tmp_path: Path, put: Put, make_node: MakeNode, env: str, missing: str
    ) -> None:
        """A join without URL or token fails with the missing keys and file named."""
        put(FIRST_BOOT, env)
        plugins, node = make_node()
        message = fails(services(plugins, node)["k3s-cluster-join"], tmp_path)
        assert message.startswith(f"{missing} from {FIRST_BOOT}")
        assert not (tmp_path / ROLE_DROPIN.lstrip("/")).exists()

    def test_join_keys_are_settings(self, tmp_path: Path, put: Put, make_node: MakeNode) -> None:
        """The first-boot keys for URL and token come from settings."""
        put(
            "/etc/noderole/config.toml",
            '[k3s]\njoin_url_key = "EKS_URL"\njoin_token_key = "EKS_TOKEN"\n',
        )
        put(FIRST_BOOT, "EKS_URL=https://b:6443\nEKS_TOKEN=tok\n")
        plugins, node = make_node()
        run(services(plugins, node)["k3s-cluster-join"], tmp_path)
        assert read_yaml(tmp_path, ROLE_DROPIN) == {"server": "https://b:6443", "token": "tok"}

    def test_server_service(self, make_node: MakeNode) -> None:
        """The k3s service: command, dependencies, pidfile, log and supervision as specified."""
        plugins, node = make_node()
        k3s = services(plugins, node)["k3s"]
        assert k3s.command == (
            "/usr/local/bin/k3s",
            "server",
            "--config",
            "/etc/rancher/k3s/config.yaml",
        )
        assert k3s.roles == ("server", "server-join")
        assert k3s.need == ("net", "cgroups", "k3s-cluster")
        assert k3s.after == ("firewall",)
        assert k3s.pidfile == "/run/k3s.pid"
        assert k3s.output_log == k3s.error_log == "/var/log/k3s.log"
        assert k3s.supervision.respawn_delay == 5
        assert k3s.supervision.respawn_max == 0


class TestAgent:
    def test_environment_with_secret_token(self, put: Put, make_node: MakeNode) -> None:
        """URL, token (as a Secret) and node name go to the environment, never to argv."""
        put(AGENT_ENV, f"K3S_URL=https://s:6443\nK3S_TOKEN={TOKEN}\nK3S_NODE_NAME=w1\n")
        plugins, node = make_node()
        agent = services(plugins, node)["k3s-agent"]
        assert agent.command == ("/usr/local/bin/k3s", "agent")
        env: Mapping[str, Any] = agent.environment
        assert env["K3S_URL"] == "https://s:6443"
        assert isinstance(env["K3S_TOKEN"], noderole.Secret)
        assert env["K3S_TOKEN"].reveal() == TOKEN
        assert env["K3S_NODE_NAME"] == "w1"
        assert TOKEN not in repr(agent)
        assert agent.pre_start == ()
        assert agent.pidfile == "/run/k3s-agent.pid"
        assert agent.output_log == agent.error_log == "/var/log/k3s-agent.log"

    def test_node_name_optional(self, put: Put, make_node: MakeNode) -> None:
        """Without K3S_NODE_NAME the environment holds only URL and token."""
        put(AGENT_ENV, "K3S_URL=https://s:6443\nK3S_TOKEN=t\n")
        plugins, node = make_node()
        assert set(services(plugins, node)["k3s-agent"].environment) == {"K3S_URL", "K3S_TOKEN"}

    @pytest.mark.parametrize(
        ("env", "missing"),
        [(None, "K3S_URL and K3S_TOKEN"), ("K3S_URL=https://s:6443\n", "K3S_TOKEN")],
    )
    def test_missing_inputs_fail(
        self, tmp_path: Path, put: Put, make_node: MakeNode, env: str | None, missing: str
    ) -> None:
        """Missing URL or token (or a missing agent.env) fails the agent naming keys and file."""
        if env is not None:
            put(AGENT_ENV, env)
        plugins, node = make_node()
        message = fails(services(plugins, node)["k3s-agent"], tmp_path)
        assert message.startswith(f"{missing} missing from {AGENT_ENV}")

    def test_binary_env_file_fails_agent_only(
        self, tmp_path: Path, put: Put, make_node: MakeNode
    ) -> None:
        """An unreadable agent.env fails the agent's steps instead of the whole definition."""
        (tmp_path / "etc/spinifex-eks").mkdir(parents=True)
        (tmp_path / AGENT_ENV.lstrip("/")).write_bytes(b"K3S_URL=a\0b\n")
        plugins, node = make_node()
        message = fails(services(plugins, node)["k3s-agent"], tmp_path)
        assert "NUL byte" in message


class TestRehearsalInputs:
    def test_inputs_make_a_startable_definition(self, tmp_path: Path, make_node: MakeNode) -> None:
        """The rehearsal's skeleton and agent.env stand-ins give k3s and k3s-agent no Fail step."""
        plugins, node = make_node()
        standins = {s.path: s for s in plugins.standins(node)}
        assert standins["/usr/local/bin/k3s"].mode == 0o755
        for path in (SKEL, AGENT_ENV):
            assert standins[path].mode == 0o600
            local = tmp_path / path.lstrip("/")
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text(standins[path].content)
        plugins, node = make_node()
        by_name = services(plugins, node)
        for name in ("k3s", "k3s-agent"):
            assert not any(isinstance(s, noderole.Fail) for s in by_name[name].pre_start)
