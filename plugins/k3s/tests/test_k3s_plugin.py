"""The k3s plugin's hooks in isolation: configuration, contributions, roles, agent environment.

Tested with noderole's plugin-author kit: services come from the plugin objects alone
(``services_from_plugins``), pre-start steps run against a scratch root (``run_prestart``), and
the agent's process is recorded, not started (``apply_recorded``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

import noderole
from noderole.clock import FakeClock
from noderole.context import NodeContext
from noderole.records import Service
from noderole.testing import (
    PrestartOutcome,
    ScratchRoot,
    apply_recorded,
    assert_not_in_plan,
    assert_starts_before,
    call_hook,
    plan_from_plugins,
    run_prestart,
    services_from_plugins,
    standins_from_plugins,
)
from noderole_k3s import ConfigFile, ConfigKeys, Manifest
from noderole_k3s import plugin as k3s_plugin

CONFIG = "/etc/rancher/k3s/config.yaml"
SKEL = "/etc/rancher/k3s/config.yaml.skel"
ROLE_DROPIN = "/etc/rancher/k3s/config.yaml.d/40-noderole-role.yaml"
DROPIN = "/etc/rancher/k3s/config.yaml.d/50-noderole.yaml"
MANIFESTS = "/var/lib/rancher/k3s/server/manifests"
FIRST_BOOT = "/etc/spinifex-eks/first-boot.env"
AGENT_ENV = "/etc/spinifex-eks/agent.env"
TOKEN = "K10-very-secret-token::server:abc123"
# The built-in `net` check looks at this machine's interfaces: off, so an apply does not depend
# on the network of the machine the tests run on.
NO_NET_CHECK = "[noderole]\nnet_check = false\n"


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
        # A mapping is the server's keys; anything else (records, wrong types) as given.
        return ConfigKeys(keys=self.config) if isinstance(self.config, dict) else self.config

    @noderole.hookimpl(optionalhook=True)
    def noderole_k3s_manifests(self, node: NodeContext) -> Any:
        return self.manifests

    @noderole.hookimpl(optionalhook=True)
    def noderole_k3s_files(self, node: NodeContext) -> Any:
        return self.files


def services(node_root: ScratchRoot, *extra: tuple[str, object]) -> dict[str, Service]:
    """The services of the k3s plugin and the ``extra`` (name, plugin) pairs, over node_root."""
    found = services_from_plugins(("k3s", k3s_plugin), *extra, node_root=node_root)
    return {service.name: service for service in found}


def prestart(
    node_root: ScratchRoot, name: str = "k3s", *extra: tuple[str, object]
) -> PrestartOutcome:
    """Define the services now, then run ``name``'s pre-start steps under node_root."""
    return run_prestart(services(node_root, *extra)[name], node_root)


def succeeded(outcome: PrestartOutcome) -> list[str]:
    """The node paths the steps wrote, after checking they all succeeded."""
    assert outcome.ok, outcome.reason
    return outcome.written


def failed(outcome: PrestartOutcome) -> str:
    """The failure reason, after checking the steps failed."""
    assert not outcome.ok, f"expected {outcome.service} to fail; it wrote {outcome.written}"
    return outcome.reason


def read_yaml(node_root: ScratchRoot, node_path: str) -> Any:
    return yaml.safe_load(node_root.read(node_path))


def manifest(name: str = "extra.yaml", value: str = "a") -> Manifest:
    return Manifest(
        name=name,
        documents=[{"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": value}}],
    )


class TestBaseConfig:
    def test_derived_from_skel(self, node_root: ScratchRoot) -> None:
        """Without config.yaml, the skeleton's text becomes config.yaml, private to root."""
        node_root.write(SKEL, "# image default\nwrite-kubeconfig-mode: '0600'\n")
        assert CONFIG in succeeded(prestart(node_root))
        assert node_root.read(CONFIG) == "# image default\nwrite-kubeconfig-mode: '0600'\n"
        assert node_root.mode(CONFIG) == 0o600

    def test_existing_config_kept(self, node_root: ScratchRoot) -> None:
        """An existing config.yaml is never rewritten, even when a skeleton exists."""
        node_root.write(SKEL, "node-label: [from-skel]\n")
        node_root.write(CONFIG, "node-label: [operator]\n")
        assert CONFIG not in succeeded(prestart(node_root))
        assert read_yaml(node_root, CONFIG) == {"node-label": ["operator"]}

    def test_neither_refuses(self, node_root: ScratchRoot) -> None:
        """With neither config.yaml nor its skeleton, k3s fails naming both, writing nothing."""
        outcome = prestart(node_root)
        assert f"neither {CONFIG} nor {SKEL} exists" in failed(outcome)
        assert outcome.written == []
        assert not node_root.exists("/etc/rancher/k3s/config.yaml.d")

    @pytest.mark.parametrize(
        ("text", "why"),
        [
            ("key: [unclosed\n", "not valid YAML (line 2, column 1)"),
            ("- a\n- b\n", "must be a YAML mapping"),
        ],
    )
    def test_bad_base_refused(self, node_root: ScratchRoot, text: str, why: str) -> None:
        """A config.yaml that is not a YAML mapping fails k3s with the file named."""
        node_root.write(CONFIG, text)
        message = failed(prestart(node_root))
        assert CONFIG in message
        assert why in message

    @pytest.mark.parametrize(
        ("text", "why"),
        [
            (
                "write-kubeconfig-mode: '0600'\n\tnode-label: [a]\n",
                "is not valid YAML (line 2, column 1): while scanning for the next token, found "
                "character '\\t' that cannot start any token; fix or remove it",
            ),
            (
                "node-label: [a, b\n",
                "is not valid YAML (line 2, column 1): while parsing a flow sequence, expected ',' "
                "or ']', but got '<stream end>'; fix or remove it",
            ),
            (
                "token: a\x00b\n",
                "is not valid YAML (character 9): unacceptable character #x0000: special "
                "characters are not allowed; fix or remove it",
            ),
        ],
    )
    def test_a_yaml_error_says_what_and_where(
        self, node_root: ScratchRoot, text: str, why: str
    ) -> None:
        """What PyYAML found, and where: before, only "not valid YAML (line 2)", or no place at
        all for a character YAML refuses (found by fuzzing config.yaml)."""
        node_root.write(CONFIG, text)
        assert failed(prestart(node_root)) == f"{CONFIG} {why}"

    def test_a_config_nested_thousands_deep_is_named_as_such(self, node_root: ScratchRoot) -> None:
        """Thousands of nested brackets (a generator gone wrong, a fuzzer): the file is named and
        said to be too deep, where PyYAML's recursion made it the plugin's fault (exit 3,
        "fix the plugin") in every plan and apply."""
        node_root.write(CONFIG, "node-label: " + "[" * 5000 + "]" * 5000 + "\n")
        assert failed(prestart(node_root)) == (
            f"{CONFIG} is not valid YAML: collections nested thousands deep, past what noderole "
            "reads; fix or remove it"
        )

    @pytest.mark.parametrize(
        ("text", "why"),
        [
            (
                "write-kubeconfig-mode: '0600'\nnode-label: 2001-13-45\n",
                "is not valid YAML (line 2, column 13): '2001-13-45' cannot be read as a YAML "
                "timestamp (month must be in 1..12); quote it if it is text; fix or remove it",
            ),
            (
                "node-label:\n  - 2001-02-30 10:00:00\n",
                "is not valid YAML (line 2, column 5): '2001-02-30 10:00:00' cannot be read as a "
                "YAML timestamp (day is out of range for month); quote it if it is text; fix or "
                "remove it",
            ),
            (
                "node-label: !!int x\n",
                "is not valid YAML (line 1, column 13): 'x' cannot be read as a YAML int (invalid "
                "literal for int() with base 10: 'x'); quote it if it is text; fix or remove it",
            ),
            (
                "node-label: [a, !!float abc]\n",
                "is not valid YAML (line 1, column 17): 'abc' cannot be read as a YAML float "
                "(could not convert string to float: 'abc'); quote it if it is text; fix or "
                "remove it",
            ),
            (
                # the flat shapes noderole reads without PyYAML, then PyYAML's path
                "cluster-cidr: 10.42.0.0/16\nnode-label: " + "9" * 5000 + "\n",
                "is not valid YAML (line 2, column 13): an integer of 5000 digits, more than "
                "Python reads (4300); quote it if it is text; fix or remove it",
            ),
            (
                "node-label: [" + "9" * 5000 + "]\n",
                "is not valid YAML (line 1, column 14): an integer of 5000 digits, more than "
                "Python reads (4300); quote it if it is text; fix or remove it",
            ),
        ],
        ids=["month 13", "february 30", "int tag", "float tag", "long int, flat", "long int"],
    )
    def test_a_value_yaml_cannot_convert_is_named_with_its_place(
        self, node_root: ScratchRoot, text: str, why: str
    ) -> None:
        """Valid YAML whose value its type cannot hold (a date with month 13, an integer of
        thousands of digits): the file, the place and the value are named. Before, only
        Python's words reached the operator ("month must be in 1..12"), or, for the integer
        in a flat file, an error noderole raised from the plugin itself."""
        node_root.write(CONFIG, text)
        assert failed(prestart(node_root)) == f"{CONFIG} {why}"

    def test_a_config_that_is_not_utf8_is_named_as_such(self, node_root: ScratchRoot) -> None:
        """Latin-1 bytes in config.yaml: said as the environment files say it, not as Python's
        codec error ("'utf-8' codec can't decode byte 0xe9 in position 14: ...")."""
        node_root.write(CONFIG, "").write_bytes(b"node-label: [caf\xe9]\n")
        assert failed(prestart(node_root)) == (
            f"{CONFIG} is not UTF-8 text (invalid byte at 16); k3s reads it as UTF-8: convert "
            "it (e.g. iconv -f LATIN1 -t UTF-8) or rewrite it"
        )


class TestContributions:
    def test_merged_into_dropin(self, node_root: ScratchRoot) -> None:
        """Lists from several plugins concatenate after config.yaml's own; equal scalars agree."""
        node_root.write(CONFIG, "kube-apiserver-arg: [audit-log-maxage=30]\ntls-san: [a]\n")
        one = Contributor({"kube-apiserver-arg": ["x=1", "audit-log-maxage=30"], "mode": "off"})
        two = Contributor({"kube-apiserver-arg": ["y=2", "x=1"], "mode": "off", "n": 3})
        succeeded(prestart(node_root, "k3s", ("one", one), ("two", two)))
        assert read_yaml(node_root, DROPIN) == {
            "kube-apiserver-arg": ["audit-log-maxage=30", "x=1", "y=2"],
            "mode": "off",
            "n": 3,
        }
        assert read_yaml(node_root, CONFIG) == {
            "kube-apiserver-arg": ["audit-log-maxage=30"],
            "tls-san": ["a"],
        }

    def test_no_contributions_empty_dropin(self, node_root: ScratchRoot) -> None:
        """With nothing contributed the drop-in is an empty mapping, so stale keys vanish."""
        node_root.write(CONFIG, "")
        node_root.write(DROPIN, "egress-selector-mode: disabled\n")
        succeeded(prestart(node_root))
        assert read_yaml(node_root, DROPIN) == {}

    def test_conflicting_scalar_names_both(self, node_root: ScratchRoot) -> None:
        """Two plugins setting one scalar differently fail k3s, naming the key and both plugins."""
        node_root.write(CONFIG, "")
        alpha = Contributor({"egress-selector-mode": "disabled"})
        beta = Contributor({"egress-selector-mode": "agent"})
        service = services(node_root, ("alpha", alpha), ("beta", beta))["k3s"]
        assert isinstance(service.pre_start[0], noderole.Fail)
        outcome = run_prestart(service, node_root)
        message = failed(outcome)
        assert "'egress-selector-mode'" in message
        assert "plugin 'alpha'" in message
        assert "plugin 'beta'" in message
        assert outcome.written == []
        assert not node_root.exists(DROPIN)

    def test_bool_and_string_conflict(self, node_root: ScratchRoot) -> None:
        """true and "true" are different values to k3s, so they conflict."""
        node_root.write(CONFIG, "")
        alpha, beta = Contributor({"flag": True}), Contributor({"flag": "true"})
        assert "'flag'" in failed(prestart(node_root, "k3s", ("alpha", alpha), ("beta", beta)))

    def test_list_against_scalar_conflict(self, node_root: ScratchRoot) -> None:
        """One plugin's list and another's scalar for the same key conflict."""
        node_root.write(CONFIG, "")
        alpha, beta = Contributor({"k": ["a"]}), Contributor({"k": "a"})
        message = failed(prestart(node_root, "k3s", ("alpha", alpha), ("beta", beta)))
        assert "plugin 'alpha'" in message
        assert "plugin 'beta'" in message

    def test_raising_hook_named(self, node_root: ScratchRoot) -> None:
        """A contributing hook that raises fails k3s (not the whole plan), naming the plugin."""
        node_root.write(CONFIG, "")
        broken = Contributor(raises=RuntimeError("boom"))
        message = failed(prestart(node_root, "k3s", ("broken", broken)))
        assert "plugin 'broken' hook noderole_k3s_config raised RuntimeError: boom" in message

    @pytest.mark.parametrize(
        ("contributor", "hook"),
        [
            (Contributor(config=["not", "a", "mapping"]), "noderole_k3s_config"),
            (Contributor(config={"k": {"nested": 1}}), "k3s key 'k' is set to"),
            (Contributor(manifests=["text"]), "noderole_k3s_manifests"),
            (Contributor(files=[manifest()]), "noderole_k3s_files"),
        ],
    )
    def test_wrong_types_named(
        self, node_root: ScratchRoot, contributor: Contributor, hook: str
    ) -> None:
        """A hook returning the wrong kind of value fails k3s naming the plugin."""
        node_root.write(CONFIG, "")
        message = failed(prestart(node_root, "k3s", ("odd", contributor)))
        assert "plugin 'odd'" in message
        assert hook in message

    def test_manifests_staged(self, node_root: ScratchRoot) -> None:
        """Contributed manifests land in the auto-deploy directory as multi-document YAML."""
        node_root.write(CONFIG, "")
        two_docs = Manifest(
            name="agent.yaml", documents=[{"kind": "ServiceAccount"}, {"kind": "DaemonSet"}]
        )
        succeeded(prestart(node_root, "k3s", ("m", Contributor(manifests=[two_docs, manifest()]))))
        staged = node_root.read(f"{MANIFESTS}/agent.yaml")
        assert list(yaml.safe_load_all(staged)) == [
            {"kind": "ServiceAccount"},
            {"kind": "DaemonSet"},
        ]
        assert staged.startswith("# Staged by noderole from plugin m.\n")
        assert read_yaml(node_root, f"{MANIFESTS}/extra.yaml")["data"] == {"k": "a"}

    def test_same_manifest_twice_is_fine(self, node_root: ScratchRoot) -> None:
        """Two plugins staging an identical manifest is not a conflict."""
        node_root.write(CONFIG, "")
        a, b = Contributor(manifests=manifest()), Contributor(manifests=manifest())
        assert f"{MANIFESTS}/extra.yaml" in succeeded(
            prestart(node_root, "k3s", ("a", a), ("b", b))
        )
        assert node_root.resolve(f"{MANIFESTS}/extra.yaml").is_file()

    def test_different_manifest_same_name_names_both(self, node_root: ScratchRoot) -> None:
        """Two plugins staging different content under one name fail k3s naming both."""
        node_root.write(CONFIG, "")
        a, b = (
            Contributor(manifests=manifest(value="1")),
            Contributor(manifests=manifest(value="2")),
        )
        message = failed(prestart(node_root, "k3s", ("a", a), ("b", b)))
        assert "manifest extra.yaml" in message
        assert "plugin 'a'" in message
        assert "plugin 'b'" in message

    def test_files_written_before_dropin(self, node_root: ScratchRoot) -> None:
        """Contributed files are written (mode kept) before the drop-in that references them."""
        node_root.write(CONFIG, "")
        extra = ConfigFile(path="/etc/rancher/k3s/audit.yaml", documents={"kind": "Policy"})
        written = succeeded(prestart(node_root, "k3s", ("f", Contributor(files=extra))))
        assert written.index("/etc/rancher/k3s/audit.yaml") < written.index(DROPIN)
        assert read_yaml(node_root, "/etc/rancher/k3s/audit.yaml") == {"kind": "Policy"}
        assert node_root.mode("/etc/rancher/k3s/audit.yaml") == 0o600

    def test_second_run_writes_nothing(self, node_root: ScratchRoot) -> None:
        """Applying again with the same inputs rewrites no file."""
        node_root.write(SKEL, "a: 1\n")

        def contributor() -> tuple[str, object]:
            return ("m", Contributor(config={"b": [1]}, manifests=manifest()))

        assert succeeded(prestart(node_root, "k3s", contributor())) != []
        assert succeeded(prestart(node_root, "k3s", contributor())) == []


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

    def test_records_compare_hash_and_show_by_their_fields(self) -> None:
        """Equal fields make equal records with one hash, whatever plugin stamped them; the
        repr names every shown field (not the origin), as attrs' own methods did."""
        a = ConfigKeys(keys={"kubelet-arg": ["max-pods=200"]}, applies_to="all")
        b = ConfigKeys(keys={"kubelet-arg": ("max-pods=200",)}, applies_to="all", origin="x")
        assert a == b
        assert hash(a) == hash(b)
        assert a != ConfigKeys(keys={"kubelet-arg": ["max-pods=100"]}, applies_to="all")
        assert a != ConfigFile(path="/etc/a.yaml", documents={"a": 1})
        assert repr(a) == (
            "ConfigKeys(keys=mappingproxy({'kubelet-arg': ('max-pods=200',)}), applies_to='all')"
        )
        m = Manifest(name="a.yaml", documents={"kind": "x"}, origin="p")
        assert m == Manifest(name="a.yaml", documents=[{"kind": "x"}])
        assert len({m, Manifest(name="a.yaml", documents={"kind": "x"})}) == 1
        assert repr(m) == "Manifest(name='a.yaml', documents=(mappingproxy({'kind': 'x'}),))"
        f = ConfigFile(path="/etc/a.yaml", documents={"a": 1}, mode=0o644)
        assert repr(f) == (
            "ConfigFile(path='/etc/a.yaml', documents=(mappingproxy({'a': 1}),), mode=420, "
            "applies_to='server')"
        )
        assert f != ConfigFile(path="/etc/a.yaml", documents={"a": 1})


class TestRoles:
    def test_server_initialises(self, node_root: ScratchRoot) -> None:
        """Role server's milestone writes cluster-init: true to the role drop-in."""
        init = services(node_root)["k3s-cluster-init"]
        assert init.roles == ("server",)
        assert init.provide == ("k3s-cluster",)
        assert succeeded(run_prestart(init, node_root)) == [ROLE_DROPIN]
        assert read_yaml(node_root, ROLE_DROPIN) == {"cluster-init": True}

    def test_join_writes_url_and_token_privately(self, node_root: ScratchRoot) -> None:
        """Role server-join's milestone writes server and token to a mode-0600 drop-in."""
        node_root.write(FIRST_BOOT, f"K3S_URL=https://10.0.0.1:6443\nK3S_TOKEN='{TOKEN}'\n")
        join = services(node_root)["k3s-cluster-join"]
        assert join.roles == ("server-join",)
        assert succeeded(run_prestart(join, node_root)) == [ROLE_DROPIN]
        assert read_yaml(node_root, ROLE_DROPIN) == {
            "server": "https://10.0.0.1:6443",
            "token": TOKEN,
        }
        assert node_root.mode(ROLE_DROPIN) == 0o600
        assert TOKEN not in repr(join)
        assert all(TOKEN not in step.describe() for step in join.pre_start)

    @pytest.mark.parametrize(
        ("env", "missing"),
        [
            ({}, "K3S_URL and K3S_TOKEN missing"),
            ({"K3S_URL": "https://a:6443"}, "K3S_TOKEN missing"),
            ({"K3S_TOKEN": "t", "K3S_URL": ""}, "K3S_URL missing"),
        ],
    )
    def test_join_without_inputs_fails(
        self, node_root: ScratchRoot, env: dict[str, str], missing: str
    ) -> None:
        """A join without URL or token fails with the missing keys and file named."""
        node_root.write_env(FIRST_BOOT, env)
        outcome = prestart(node_root, "k3s-cluster-join")
        assert failed(outcome).startswith(f"{missing} from {FIRST_BOOT}")
        assert outcome.written == []
        assert not node_root.exists(ROLE_DROPIN)

    def test_join_with_a_token_file_writes_it_for_k3s(self, node_root: ScratchRoot) -> None:
        """K3S_TOKEN_FILE instead of K3S_TOKEN, as k3s's install script takes it: the drop-in
        names the file (token-file), which k3s reads; the token is not copied anywhere."""
        node_root.write("/etc/spinifex-eks/join-token", TOKEN + "\n", mode=0o600)
        node_root.write_env(
            FIRST_BOOT,
            {"K3S_URL": "https://b:6443", "K3S_TOKEN_FILE": "/etc/spinifex-eks/join-token"},
        )
        succeeded(prestart(node_root, "k3s-cluster-join"))
        assert read_yaml(node_root, ROLE_DROPIN) == {
            "server": "https://b:6443",
            "token-file": "/etc/spinifex-eks/join-token",
        }

    def test_join_with_a_token_file_k3s_could_not_read_fails(self, node_root: ScratchRoot) -> None:
        """Named by the settings' key names, as the other join keys are; nothing written."""
        node_root.write_config('[k3s]\njoin_token_file_key = "EKS_TOKEN_FILE"\n')
        node_root.write_env(
            FIRST_BOOT, {"K3S_URL": "https://b:6443", "EKS_TOKEN_FILE": "/etc/nothing"}
        )
        outcome = prestart(node_root, "k3s-cluster-join")
        assert failed(outcome) == (
            f"EKS_TOKEN_FILE=/etc/nothing in {FIRST_BOOT} names no file: write the token there "
            "(or set K3S_TOKEN instead) and apply again"
        )
        assert not node_root.exists(ROLE_DROPIN)

    @pytest.mark.parametrize(
        "url", ["10.0.0.1:6443", "http://10.0.0.1:6443", "https://", "“https://a:6443”"]
    )
    def test_join_url_that_is_not_https_fails(self, node_root: ScratchRoot, url: str) -> None:
        """k3s's install script refuses such a K3S_URL ("Only https:// URLs are supported");
        written to the drop-in, k3s started, failed to reach the server, and respawned."""
        node_root.write_env(FIRST_BOOT, {"K3S_URL": url, "K3S_TOKEN": "t"})
        outcome = prestart(node_root, "k3s-cluster-join")
        assert failed(outcome) == (
            f"Only https:// URLs are supported for K3S_URL (have {url}) in {FIRST_BOOT}: set it "
            "to the address of an existing server, as in K3S_URL=https://HOST:6443"
        )
        assert not node_root.exists(ROLE_DROPIN)

    @pytest.mark.parametrize("setting", ["join_url_key", "join_token_key", "role_key"])
    @pytest.mark.parametrize("value", ["", "K3S URL", "K3S_URL=", "3URL", "K3S-URL"])
    def test_a_key_no_environment_file_can_hold_is_a_config_error(
        self, node_root: ScratchRoot, setting: str, value: str
    ) -> None:
        """Such a key is never found: the join failed with " missing from first-boot.env"
        (an empty name), the role was never read, and config check said ok."""
        node_root.write_config(f'[k3s]\n{setting} = "{value}"\n')
        with pytest.raises(noderole.ConfigError) as raised:
            services(node_root)
        assert (
            f"/etc/noderole/config.toml:k3s.{setting}: {value!r} is not a name an environment "
            "file's KEY=VALUE line can hold (letters, digits and '_', not starting with a "
            "digit): set the key the first-boot file uses"
        ) in str(raised.value)

    def test_join_keys_are_settings(self, node_root: ScratchRoot) -> None:
        """The first-boot keys for URL and token come from settings."""
        node_root.write_config('[k3s]\njoin_url_key = "EKS_URL"\njoin_token_key = "EKS_TOKEN"\n')
        node_root.write_env(FIRST_BOOT, {"EKS_URL": "https://b:6443", "EKS_TOKEN": "tok"})
        succeeded(prestart(node_root, "k3s-cluster-join"))
        assert read_yaml(node_root, ROLE_DROPIN) == {"server": "https://b:6443", "token": "tok"}

    def test_server_service(self, node_root: ScratchRoot) -> None:
        """The k3s service: command, dependencies, pidfile, log and supervision as specified."""
        k3s = services(node_root)["k3s"]
        assert k3s.command == (
            "/usr/local/bin/k3s",
            "server",
            "--config",
            "/etc/rancher/k3s/config.yaml",
        )
        assert k3s.roles == ("server", "server-join")
        assert k3s.need == ("k3s-cluster",)
        assert k3s.want == ("net", "cgroups")
        assert k3s.after == ("firewall",)
        assert k3s.pidfile == "/run/k3s.pid"
        assert k3s.output_log == k3s.error_log == "/var/log/k3s.log"
        assert k3s.supervision.respawn_delay == 5
        assert k3s.supervision.respawn_max == 0

    def test_the_stop_timeout_is_a_setting(self, node_root: ScratchRoot) -> None:
        """A node whose k3s takes longer (or should be killed sooner) says so in config.toml."""
        node_root.write_config("[k3s]\nstop_timeout = 30\n")
        node_root.write_env(AGENT_ENV, {"K3S_URL": "https://s:6443", "K3S_TOKEN": TOKEN})
        found = services(node_root)
        assert found["k3s"].supervision.stop_timeout == 30
        assert found["k3s-agent"].supervision.stop_timeout == 30

    @pytest.mark.parametrize("name", ["k3s", "k3s-agent"])
    def test_a_restart_of_k3s_leaves_its_containers_running(
        self, node_root: ScratchRoot, name: str
    ) -> None:
        """As k3s's install script renders its unit (KillMode=process, Delegate=yes,
        LimitNOFILE=1048576, TasksMax=infinity, systemd's default TimeoutStopSec of 90 s): a
        stop ends k3s alone, after giving it time to shut down, k3s manages the control groups
        below its own, and its containers inherit its limit of open files."""
        node_root.write_env(AGENT_ENV, {"K3S_URL": "https://s:6443", "K3S_TOKEN": TOKEN})
        supervision = services(node_root)[name].supervision
        assert supervision.stop_scope == "process"
        assert supervision.stop_timeout == 90  # systemd's default, which k3s's unit keeps
        assert supervision.delegate is True
        assert supervision.open_files == 1048576
        assert supervision.tasks == "infinity"

    @pytest.mark.parametrize("name", ["k3s", "k3s-agent"])
    def test_k3s_tells_systemd_when_it_is_up(self, node_root: ScratchRoot, name: str) -> None:
        """k3s's install script renders both units Type=notify (TimeoutStartSec=0): k3s sends
        READY=1 once it is up, so what is ordered after it starts then, and `systemctl start
        k3s` returns then."""
        node_root.write_env(AGENT_ENV, {"K3S_URL": "https://s:6443", "K3S_TOKEN": TOKEN})
        assert services(node_root)[name].supervision.notify is True


class TestPlans:
    def test_server(self) -> None:
        """Role server: net, cgroups and the cluster-init milestone start before k3s."""
        plan = plan_from_plugins("server", ("k3s", k3s_plugin))
        assert_starts_before(plan, "net", "k3s")
        assert_starts_before(plan, "cgroups", "k3s")
        assert_starts_before(plan, "k3s-cluster-init", "k3s")
        assert_not_in_plan(plan, "k3s-cluster-join", "k3s-agent")

    def test_server_join(self) -> None:
        """Role server-join: the join milestone stands in for cluster-init, before k3s."""
        plan = plan_from_plugins("server-join", ("k3s", k3s_plugin))
        assert_starts_before(plan, "k3s-cluster-join", "k3s")
        assert_starts_before(plan, "net", "k3s")
        assert_not_in_plan(plan, "k3s-cluster-init", "k3s-agent")

    def test_agent(self) -> None:
        """Role agent: k3s-agent after net and cgroups, and no server service."""
        plan = plan_from_plugins("agent", ("k3s", k3s_plugin))
        assert_starts_before(plan, "net", "k3s-agent")
        assert_starts_before(plan, "cgroups", "k3s-agent")
        assert_not_in_plan(plan, "k3s", "k3s-cluster-init", "k3s-cluster-join")


class TestAgent:
    def test_environment_with_secret_token(self, node_root: ScratchRoot) -> None:
        """URL, token (as a Secret) and node name go to the environment, never to argv."""
        node_root.write_env(
            AGENT_ENV, {"K3S_URL": "https://s:6443", "K3S_TOKEN": TOKEN, "K3S_NODE_NAME": "w1"}
        )
        agent = services(node_root)["k3s-agent"]
        assert agent.command == ("/usr/local/bin/k3s", "agent")
        env: dict[str, Any] = dict(agent.environment)
        assert env["K3S_URL"] == "https://s:6443"
        assert isinstance(env["K3S_TOKEN"], noderole.Secret)
        assert env["K3S_TOKEN"].reveal() == TOKEN
        assert env["K3S_NODE_NAME"] == "w1"
        assert TOKEN not in repr(agent)
        # The (empty) drop-in of what other plugins contribute to agents, and nothing else.
        (dropin,) = agent.pre_start
        assert dropin.path == DROPIN  # type: ignore[union-attr]
        assert agent.pidfile == "/run/k3s-agent.pid"
        assert agent.output_log == agent.error_log == "/var/log/k3s-agent.log"

    def test_started_with_the_token_in_its_environment_only(
        self, node_root: ScratchRoot, fake_clock: FakeClock
    ) -> None:
        """Applied (recorded, not started): the child's environment has the token, argv not."""
        node_root.write_env(AGENT_ENV, {"K3S_URL": "https://s:6443", "K3S_TOKEN": TOKEN})
        plan = plan_from_plugins(
            "agent", ("k3s", k3s_plugin), config_text=NO_NET_CHECK, node_root=node_root
        )
        report, backend = apply_recorded(plan, node_root, clock=fake_clock)
        assert report.ok, report.failed
        assert backend.names() == ["k3s-agent"]
        assert backend.node_argv("k3s-agent") == ["/usr/local/bin/k3s", "agent"]
        environment = backend.environment("k3s-agent")
        assert environment["K3S_TOKEN"] == TOKEN
        assert environment["K3S_URL"] == "https://s:6443"
        assert not any(TOKEN in arg for arg in backend.argv("k3s-agent"))

    @pytest.mark.parametrize(
        ("name", "hint"),
        [
            ("worker_1", ", as in K3S_NODE_NAME=worker-1"),
            ("node 7", ", as in K3S_NODE_NAME=node-7"),
            ("-edge", ", as in K3S_NODE_NAME=edge"),
            ("rack..3", ", as in K3S_NODE_NAME=rack.3"),
            ("nœud", ", as in K3S_NODE_NAME=n-ud"),
            ("x" * 254, ""),
        ],
    )
    def test_a_node_name_kubernetes_refuses_fails_the_start(
        self, node_root: ScratchRoot, name: str, hint: str
    ) -> None:
        """A K3S_NODE_NAME that is no DNS-1123 subdomain once lowered: the kubelet cannot
        register the node, and k3s-agent ran and respawned with the reason only in its log.
        The pre-start fails naming the key, the file and the fix; the token is not shown."""
        node_root.write_env(
            AGENT_ENV, {"K3S_URL": "https://s:6443", "K3S_TOKEN": TOKEN, "K3S_NODE_NAME": name}
        )
        message = failed(prestart(node_root, "k3s-agent"))
        shown = name if len(name) <= 80 else f"{name[:40]}...{name[-20:]} (254 characters)"
        assert message == (
            f"K3S_NODE_NAME={shown} in {AGENT_ENV} cannot name a Kubernetes node, and k3s would "
            "fail to register it: a node name is letters, digits, '-' and '.', each "
            "dot-separated part starting and ending with a letter or digit, at most 253 "
            f"characters (k3s lowers the case itself); set it to such a name{hint}, or remove "
            "it to use the host name"
        )
        assert TOKEN not in message

    @pytest.mark.parametrize("name", ["Worker-1", "w1.rack-2.example", "x" * 253])
    def test_a_node_name_k3s_lowers_is_kept_as_written(
        self, node_root: ScratchRoot, name: str
    ) -> None:
        """Upper case is fine: k3s lowers the name itself, as it does the host name."""
        node_root.write_env(
            AGENT_ENV, {"K3S_URL": "https://s:6443", "K3S_TOKEN": TOKEN, "K3S_NODE_NAME": name}
        )
        succeeded(prestart(node_root, "k3s-agent"))
        assert services(node_root)["k3s-agent"].environment["K3S_NODE_NAME"] == name

    def test_node_name_optional(self, node_root: ScratchRoot) -> None:
        """Without K3S_NODE_NAME the environment holds only URL and token."""
        node_root.write_env(AGENT_ENV, {"K3S_URL": "https://s:6443", "K3S_TOKEN": "t"})
        assert set(services(node_root)["k3s-agent"].environment) == {"K3S_URL", "K3S_TOKEN"}

    @pytest.mark.parametrize(
        ("env", "missing"),
        [(None, "K3S_URL and K3S_TOKEN"), ({"K3S_URL": "https://s:6443"}, "K3S_TOKEN")],
    )
    def test_missing_inputs_fail(
        self, node_root: ScratchRoot, env: dict[str, str] | None, missing: str
    ) -> None:
        """Missing URL or token (or a missing agent.env) fails the agent naming keys and file."""
        if env is not None:
            node_root.write_env(AGENT_ENV, env)
        message = failed(prestart(node_root, "k3s-agent"))
        assert message.startswith(f"{missing} missing from {AGENT_ENV}")

    def test_missing_token_names_the_token_file_too(self, node_root: ScratchRoot) -> None:
        """The fix names both ways k3s's install script takes the token."""
        node_root.write_env(AGENT_ENV, {"K3S_URL": "https://s:6443"})
        assert failed(prestart(node_root, "k3s-agent")) == (
            f"K3S_TOKEN missing from {AGENT_ENV}: an agent needs the server URL "
            "(K3S_URL=https://HOST:6443) and the node token (K3S_TOKEN=..., or "
            "K3S_TOKEN_FILE=PATH of a file holding it); add them and apply again"
        )

    def test_a_token_file_is_passed_to_k3s(self, node_root: ScratchRoot) -> None:
        """K3S_TOKEN_FILE instead of K3S_TOKEN, as k3s's install script takes it: k3s reads
        the file (the token never enters noderole's plan or the agent's environment). Before,
        the agent failed with "K3S_TOKEN missing"."""
        node_root.write("/etc/spinifex-eks/agent-token", TOKEN + "\n", mode=0o600)
        node_root.write_env(
            AGENT_ENV,
            {"K3S_URL": "https://s:6443", "K3S_TOKEN_FILE": "/etc/spinifex-eks/agent-token"},
        )
        succeeded(prestart(node_root, "k3s-agent"))
        agent = services(node_root)["k3s-agent"]
        assert dict(agent.environment) == {
            "K3S_URL": "https://s:6443",
            "K3S_TOKEN_FILE": "/etc/spinifex-eks/agent-token",
        }
        assert TOKEN not in repr(agent)

    @pytest.mark.parametrize(
        ("path", "make", "problem"),
        [
            (
                "agent-token",
                None,
                "is not an absolute path (k3s would look for it from its working directory): "
                "write the file's path in full",
            ),
            (
                "/etc/spinifex-eks/agent-token",
                None,
                "names no file: write the token there (or set K3S_TOKEN instead) and apply again",
            ),
            (
                "/etc/spinifex-eks/agent-token",
                "empty",
                "is empty: write the token there and apply again",
            ),
            (
                "/etc/spinifex-eks/agent-token",
                "fifo",
                "cannot read /etc/spinifex-eks/agent-token:",
            ),
        ],
    )
    def test_a_token_file_k3s_could_not_read_fails_the_start(
        self, node_root: ScratchRoot, path: str, make: str | None, problem: str
    ) -> None:
        """A token file k3s could not read its token from: k3s-agent ran and failed to join,
        the reason in its log. The pre-start fails naming the key, the file and the fix; a
        FIFO is refused at once, never waited on."""
        if make == "empty":
            node_root.write(path, "\n")
        elif make == "fifo":
            node_root.resolve(path).parent.mkdir(parents=True, exist_ok=True)
            os.mkfifo(node_root.resolve(path))
        node_root.write_env(AGENT_ENV, {"K3S_URL": "https://s:6443", "K3S_TOKEN_FILE": path})
        message = failed(prestart(node_root, "k3s-agent"))
        assert message.startswith(f"K3S_TOKEN_FILE={path} in {AGENT_ENV}")
        assert problem in message

    @pytest.mark.parametrize("url", ["s:6443", "http://s:6443", "https://"])
    def test_url_that_is_not_https_fails(self, node_root: ScratchRoot, url: str) -> None:
        """As k3s's install script refuses it; the agent's environment is not given it."""
        node_root.write_env(AGENT_ENV, {"K3S_URL": url, "K3S_TOKEN": "t"})
        service = services(node_root)["k3s-agent"]
        assert failed(run_prestart(service, node_root)) == (
            f"Only https:// URLs are supported for K3S_URL (have {url}) in {AGENT_ENV}: set it "
            "to the address of an existing server, as in K3S_URL=https://HOST:6443"
        )
        assert "K3S_URL" not in service.environment

    def test_binary_env_file_fails_agent_only(self, node_root: ScratchRoot) -> None:
        """An unreadable agent.env fails the agent's steps instead of the whole definition."""
        node_root.write(AGENT_ENV, "K3S_URL=a\0b\n")
        assert "NUL byte" in failed(prestart(node_root, "k3s-agent"))


class TestEnvironmentFile:
    """KEY=VALUE lines for k3s's environment, as k3s's systemd unit reads
    EnvironmentFile=-/etc/default/k3s: how a node behind a proxy gets HTTP_PROXY to k3s and its
    containerd. Before, nothing but K3S_URL, the token and the node name reached them, and a
    node behind a proxy pulled no image."""

    @pytest.fixture(autouse=True)
    def _config(self, node_root: ScratchRoot) -> None:
        node_root.write("/etc/rancher/k3s/config.yaml", "write-kubeconfig-mode: '0600'\n")

    def test_the_server_gets_the_files_variables(self, node_root: ScratchRoot) -> None:
        """Every variable, a token's and a proxy with a password as a Secret (*** in plan and
        status); an absent file gives none."""
        assert dict(services(node_root)["k3s"].environment) == {}
        node_root.write(
            "/etc/default/k3s",
            "HTTP_PROXY=http://proxy:3128\n"
            "NO_PROXY=127.0.0.0/8,10.0.0.0/8,.svc,.cluster.local\n"
            "HTTPS_PROXY=http://me:hunter2@proxy:3128\n"
            "K3S_AGENT_TOKEN=agent-secret\n"
            "CONTAINERD_LOG_LEVEL=debug\n",
        )
        k3s = services(node_root)["k3s"]
        shown = {
            key: "***" if isinstance(value, noderole.Secret) else value
            for key, value in k3s.environment.items()
        }
        assert shown == {
            "HTTP_PROXY": "http://proxy:3128",
            "NO_PROXY": "127.0.0.0/8,10.0.0.0/8,.svc,.cluster.local",
            "HTTPS_PROXY": "***",
            "K3S_AGENT_TOKEN": "***",
            "CONTAINERD_LOG_LEVEL": "debug",
        }
        assert k3s.revealed_environment()["HTTPS_PROXY"] == "http://me:hunter2@proxy:3128"
        assert "hunter2" not in repr(k3s)

    def test_the_agent_gets_its_files_variables_and_agent_env_wins(
        self, node_root: ScratchRoot
    ) -> None:
        node_root.write(
            "/etc/default/k3s-agent", "HTTPS_PROXY=http://proxy:3128\nK3S_URL=https://old:6443\n"
        )
        node_root.write_env(AGENT_ENV, {"K3S_URL": "https://s:6443", "K3S_TOKEN": TOKEN})
        succeeded(prestart(node_root, "k3s-agent"))
        environment = services(node_root)["k3s-agent"].revealed_environment()
        assert environment == {
            "HTTPS_PROXY": "http://proxy:3128",
            "K3S_URL": "https://s:6443",
            "K3S_TOKEN": TOKEN,
        }

    @pytest.mark.parametrize(
        ("key", "service"), [("environment_file", "k3s"), ("agent_environment_file", "k3s-agent")]
    )
    def test_a_file_named_in_config_toml_that_is_absent_is_a_warning(
        self, node_root: ScratchRoot, key: str, service: str
    ) -> None:
        """The default file may be absent (systemd's EnvironmentFile=-); a file config.toml
        names is meant to be there: absent, a typo would leave the node without its proxy in
        silence. The service still starts."""
        node_root.write_env(AGENT_ENV, {"K3S_URL": "https://s:6443", "K3S_TOKEN": TOKEN})
        defaults = services(node_root)
        assert not [s for s in defaults[service].pre_start if isinstance(s, noderole.Warn)]
        node_root.write_config(f'[k3s]\n{key} = "/etc/default/k3s.env"\n')
        (warning,) = [
            step
            for step in services(node_root)[service].pre_start
            if isinstance(step, noderole.Warn)
        ]
        assert warning.message == (
            f"/etc/noderole/config.toml:k3s.{key} names /etc/default/k3s.env, which does not "
            "exist: k3s starts without the variables it would hold (a proxy, say); fix the "
            'path, or set it to "" if there is no such file'
        )

    def test_an_empty_setting_reads_no_file(self, node_root: ScratchRoot) -> None:
        node_root.write("/etc/default/k3s", "HTTP_PROXY=http://proxy:3128\n")
        node_root.write_config('[k3s]\nenvironment_file = ""\n')
        assert dict(services(node_root)["k3s"].environment) == {}

    def test_a_malformed_line_is_a_warning_and_left_out(self, node_root: ScratchRoot) -> None:
        node_root.write("/etc/default/k3s", "HTTP_PROXY=http://proxy:3128\nexport = 3\n")
        k3s = services(node_root)["k3s"]
        assert dict(k3s.environment) == {"HTTP_PROXY": "http://proxy:3128"}
        (warning,) = [step for step in k3s.pre_start if isinstance(step, noderole.Warn)]
        assert warning.message.startswith("/etc/default/k3s:2: ")
        assert warning.message.endswith(": the line is not passed to k3s")

    @pytest.mark.parametrize("path", ["/etc/default/k3s", "/etc/sysconfig/k3s"])
    def test_a_file_that_cannot_be_read_fails_the_start(
        self, node_root: ScratchRoot, path: str
    ) -> None:
        """Not UTF-8: k3s would start without its proxy; the pre-start fails naming it."""
        node_root.resolve(path).parent.mkdir(parents=True)
        node_root.resolve(path).write_bytes(b"HTTP_PROXY=http://pr\xf6xy:3128\n")
        message = failed(prestart(node_root))
        assert path in message
        assert "UTF-8" in message

    def test_a_machine_environment_that_does_not_parse_is_a_warning(
        self, node_root: ScratchRoot
    ) -> None:
        """/etc/environment is the whole machine's, and k3s's systemd unit never reads it: one
        in Latin-1 kept k3s from starting on every backend once it was read. k3s starts, with a
        warning naming the file and the setting to leave it out of; its own files still fail."""
        node_root.resolve("/etc").mkdir(parents=True, exist_ok=True)
        node_root.resolve("/etc/environment").write_bytes(b'ORG="M\xfcller GmbH"\n')
        node_root.write("/etc/default/k3s", "HTTP_PROXY=http://proxy:3128\n")
        k3s = services(node_root)["k3s"]
        assert dict(k3s.environment) == {"HTTP_PROXY": "http://proxy:3128"}
        (warning,) = [step for step in k3s.pre_start if isinstance(step, noderole.Warn)]
        assert "/etc/environment" in warning.message
        assert "UTF-8" in warning.message
        assert warning.message.endswith("k3s.environment_files")
        assert not [step for step in k3s.pre_start if isinstance(step, noderole.Fail)]


UPSTREAM_FILES = {
    "k3s": (
        "/etc/environment",
        "/etc/default/k3s",
        "/etc/sysconfig/k3s",
        "/etc/systemd/system/k3s.service.env",
        "/etc/rancher/k3s/k3s.env",
    ),
    "k3s-agent": (
        "/etc/environment",
        "/etc/default/k3s-agent",
        "/etc/sysconfig/k3s-agent",
        "/etc/systemd/system/k3s-agent.service.env",
        "/etc/rancher/k3s/k3s-agent.env",
    ),
}
"""The files k3s's install script has each k3s read its environment from, in the order the
plugin reads them: /etc/environment (the OpenRC runscript's first), the systemd unit's three
EnvironmentFile= lines, then the OpenRC runscript's own file."""


class TestEnvironmentFiles:
    """Every file k3s's own unit and runscript read their environment from, not
    /etc/default/k3s alone: a proxy kept in /etc/sysconfig/k3s (RHEL's habit) or in the file
    k3s's install script wrote reached no k3s, and behind a proxy no image was pulled."""

    @pytest.fixture(autouse=True)
    def _inputs(self, node_root: ScratchRoot) -> None:
        node_root.write(CONFIG, "write-kubeconfig-mode: '0600'\n")
        node_root.write_env(AGENT_ENV, {"K3S_URL": "https://s:6443", "K3S_TOKEN": TOKEN})

    def _environment(self, node_root: ScratchRoot, name: str) -> dict[str, str]:
        return dict(services(node_root)[name].revealed_environment())

    @pytest.mark.parametrize("name", ["k3s", "k3s-agent"])
    @pytest.mark.parametrize("index", range(5))
    def test_each_file_k3s_reads_reaches_it(
        self, node_root: ScratchRoot, name: str, index: int
    ) -> None:
        path = UPSTREAM_FILES[name][index]
        node_root.write(path, "HTTPS_PROXY=http://proxy:3128\n")
        assert self._environment(node_root, name)["HTTPS_PROXY"] == "http://proxy:3128"

    @pytest.mark.parametrize("name", ["k3s", "k3s-agent"])
    def test_a_later_file_wins(self, node_root: ScratchRoot, name: str) -> None:
        """Each file sets ORDER and a key of its own: every key arrives, ORDER from the last."""
        for index, path in enumerate(UPSTREAM_FILES[name]):
            node_root.write(path, f"ORDER={index}\nONLY_{index}=x\n")
        environment = self._environment(node_root, name)
        assert environment["ORDER"] == "4"
        assert {f"ONLY_{index}" for index in range(5)} <= set(environment)
        for last in range(4, 0, -1):
            node_root.resolve(UPSTREAM_FILES[name][last]).unlink()
            assert self._environment(node_root, name)["ORDER"] == str(last - 1)

    def test_the_agent_reads_the_agents_files_only(self, node_root: ScratchRoot) -> None:
        node_root.write("/etc/sysconfig/k3s", "HTTPS_PROXY=http://server-only:3128\n")
        node_root.write("/etc/sysconfig/k3s-agent", "HTTP_PROXY=http://agent:3128\n")
        assert "HTTPS_PROXY" not in self._environment(node_root, "k3s-agent")
        assert "HTTP_PROXY" not in self._environment(node_root, "k3s")

    def test_secrets_stay_secrets_in_every_file(self, node_root: ScratchRoot) -> None:
        node_root.write("/etc/rancher/k3s/k3s.env", "K3S_TOKEN='t0ken'\n")
        node_root.write("/etc/sysconfig/k3s", "HTTPS_PROXY=http://me:hunter2@proxy:3128\n")
        k3s = services(node_root)["k3s"]
        assert isinstance(k3s.environment["K3S_TOKEN"], noderole.Secret)
        assert isinstance(k3s.environment["HTTPS_PROXY"], noderole.Secret)
        assert "hunter2" not in repr(k3s)
        assert "t0ken" not in repr(k3s)

    def test_absent_files_k3s_reads_are_no_warning(self, node_root: ScratchRoot) -> None:
        for name in ("k3s", "k3s-agent"):
            steps = services(node_root)[name].pre_start
            assert not [step for step in steps if isinstance(step, noderole.Warn)]

    def test_environment_files_names_the_files_read(self, node_root: ScratchRoot) -> None:
        """Set, it replaces the list: an upstream file left out is not read, and a file it names
        that is absent is a warning naming the key."""
        node_root.write("/etc/sysconfig/k3s", "HTTPS_PROXY=http://left-out:3128\n")
        node_root.write("/etc/k3s/proxy.env", "HTTP_PROXY=http://a:3128\n")
        node_root.write("/etc/k3s/more.env", "HTTP_PROXY=http://b:3128\n")
        node_root.write_config(
            '[k3s]\nenvironment_files = "/etc/k3s/proxy.env  /etc/k3s/gone.env\t'
            '/etc/k3s/more.env"\n'
        )
        k3s = services(node_root)["k3s"]
        assert dict(k3s.revealed_environment()) == {"HTTP_PROXY": "http://b:3128"}
        (warning,) = [step for step in k3s.pre_start if isinstance(step, noderole.Warn)]
        assert warning.message.startswith(
            "/etc/noderole/config.toml:k3s.environment_files names /etc/k3s/gone.env, which "
            "does not exist: "
        )

    def test_an_empty_environment_files_reads_none(self, node_root: ScratchRoot) -> None:
        node_root.write("/etc/default/k3s", "HTTP_PROXY=http://proxy:3128\n")
        node_root.write_config('[k3s]\nenvironment_files = ""\n')
        assert dict(services(node_root)["k3s"].environment) == {}

    @pytest.mark.parametrize(
        ("key", "name", "path"),
        [
            ("environment_file", "k3s", "/etc/default/k3s"),
            ("agent_environment_file", "k3s-agent", "/etc/default/k3s-agent"),
        ],
    )
    def test_environment_file_set_in_config_toml_is_still_the_one_file_read(
        self, node_root: ScratchRoot, key: str, name: str, path: str
    ) -> None:
        """A config.toml written before `environment_files` keeps what it meant: the one file
        it names is read, and no other."""
        for other in UPSTREAM_FILES[name]:
            node_root.write(other, f"FROM={other}\n")
        node_root.write("/etc/k3s-proxy", "HTTP_PROXY=http://proxy:3128\n")
        node_root.write_config(f'[k3s]\n{key} = "/etc/k3s-proxy"\n')
        assert self._environment(node_root, name) == {
            "HTTP_PROXY": "http://proxy:3128",
            **({"K3S_URL": "https://s:6443", "K3S_TOKEN": TOKEN} if name == "k3s-agent" else {}),
        }
        node_root.write_config(f'[k3s]\n{key} = "{path}"\n')
        assert self._environment(node_root, name)["FROM"] == path

    @pytest.mark.parametrize("prefix", ["", "agent_"])
    def test_both_settings_set_is_a_configuration_error(
        self, node_root: ScratchRoot, prefix: str
    ) -> None:
        node_root.write_config(
            f'[k3s]\n{prefix}environment_file = "/etc/default/k3s"\n'
            f'{prefix}environment_files = "/etc/default/k3s /etc/sysconfig/k3s"\n'
        )
        with pytest.raises(noderole.ConfigError) as excinfo:
            services(node_root)
        assert str(excinfo.value).startswith(
            f"/etc/noderole/config.toml:k3s.{prefix}environment_file and "
            f"k3s.{prefix}environment_files are both set"
        )

    def test_an_empty_environment_file_beside_environment_files_is_its_default(
        self, node_root: ScratchRoot
    ) -> None:
        """Every default written out, as the configuration reference prints them, is no error:
        the list is read."""
        node_root.write("/etc/sysconfig/k3s", "HTTP_PROXY=http://proxy:3128\n")
        node_root.write_config(
            '[k3s]\nenvironment_file = ""\n'
            'environment_files = "/etc/default/k3s /etc/sysconfig/k3s"\n'
        )
        assert self._environment(node_root, "k3s") == {"HTTP_PROXY": "http://proxy:3128"}

    def test_a_relative_path_in_environment_files_names_the_key(
        self, node_root: ScratchRoot
    ) -> None:
        node_root.write_config('[k3s]\nenvironment_files = "/etc/default/k3s default/k3s"\n')
        with pytest.raises(noderole.ConfigError) as excinfo:
            services(node_root)
        assert str(excinfo.value).startswith(
            "/etc/noderole/config.toml:k3s.environment_files: 'default/k3s' is not an absolute path"
        )


class TestRehearsalInputs:
    def test_inputs_make_a_startable_definition(self, node_root: ScratchRoot) -> None:
        """The rehearsal's skeleton and agent.env stand-ins give k3s and k3s-agent no Fail step."""
        standins = {s.path: s for s in standins_from_plugins(("k3s", k3s_plugin))}
        assert standins["/usr/local/bin/k3s"].mode == 0o755
        for path in (SKEL, AGENT_ENV):
            assert standins[path].mode == 0o600
            node_root.write(path, standins[path].content, mode=standins[path].mode)
        by_name = services(node_root)
        for name in ("k3s", "k3s-agent"):
            assert not any(isinstance(s, noderole.Fail) for s in by_name[name].pre_start)


class TestAgentContributions:
    def test_agent_keys_and_files_reach_k3s_agent_only(self, node_root: ScratchRoot) -> None:
        """applies_to="agent" is written by k3s-agent's pre-start, not by the server's."""
        node_root.write(CONFIG, "")
        node_root.write_env(AGENT_ENV, {"K3S_URL": "https://s:6443", "K3S_TOKEN": "t"})
        contributor = Contributor(
            config=[
                ConfigKeys(keys={"kubelet-arg": ["max-pods=200"]}, applies_to="agent"),
                ConfigKeys(keys={"tls-san": ["k.example"]}),
            ],
            files=ConfigFile(
                path="/etc/rancher/k3s/registries.yaml",
                documents={"mirrors": {}},
                applies_to="agent",
            ),
        )
        written = succeeded(prestart(node_root, "k3s-agent", ("c", contributor)))
        assert written.index("/etc/rancher/k3s/registries.yaml") < written.index(DROPIN)
        assert read_yaml(node_root, DROPIN) == {"kubelet-arg": ["max-pods=200"]}
        server = services(node_root, ("c", contributor))["k3s"]
        assert not any(
            getattr(step, "path", "") == "/etc/rancher/k3s/registries.yaml"
            for step in server.pre_start
        )

    def test_all_reaches_both(self, node_root: ScratchRoot) -> None:
        """applies_to="all" keys reach the server's and the agent's drop-in alike."""
        node_root.write(CONFIG, "kubelet-arg: [v=2]\n")
        node_root.write_env(AGENT_ENV, {"K3S_URL": "https://s:6443", "K3S_TOKEN": "t"})
        both = Contributor(
            config=ConfigKeys(keys={"kubelet-arg": ["max-pods=200"]}, applies_to="all")
        )
        succeeded(prestart(node_root, "k3s-agent", ("c", both)))
        agent_dropin = read_yaml(node_root, DROPIN)
        succeeded(prestart(node_root, "k3s", ("c", both)))
        # config.yaml's own list comes first in both.
        assert (
            agent_dropin == read_yaml(node_root, DROPIN) == {"kubelet-arg": ["v=2", "max-pods=200"]}
        )

    def test_agent_conflict_fails_the_agent_naming_both(self, node_root: ScratchRoot) -> None:
        """Two plugins disagreeing on an agent key fail k3s-agent, naming both plugins."""
        node_root.write_env(AGENT_ENV, {"K3S_URL": "https://s:6443", "K3S_TOKEN": "t"})
        alpha = Contributor(config=ConfigKeys(keys={"node-ip": "10.0.0.1"}, applies_to="agent"))
        beta = Contributor(config=ConfigKeys(keys={"node-ip": "10.0.0.2"}, applies_to="agent"))
        outcome = prestart(node_root, "k3s-agent", ("alpha", alpha), ("beta", beta))
        message = failed(outcome)
        assert "plugin 'alpha'" in message
        assert "plugin 'beta'" in message
        assert outcome.written == []

    def test_each_hook_called_once_for_both_sides(self, node_root: ScratchRoot) -> None:
        """The server's and the agent's k3s are built from one call of each contributing hook:
        another plugin's hook runs once per apply, not once per k3s (it ran twice)."""
        node_root.write(CONFIG, "")
        node_root.write_env(AGENT_ENV, {"K3S_URL": "https://s:6443", "K3S_TOKEN": "t"})
        calls: list[str] = []

        class Counting(Contributor):
            @noderole.hookimpl(optionalhook=True)
            def noderole_k3s_config(self, node: NodeContext) -> Any:
                calls.append("config")
                return ConfigKeys(keys={"kubelet-arg": ["max-pods=200"]}, applies_to="all")

            @noderole.hookimpl(optionalhook=True)
            def noderole_k3s_files(self, node: NodeContext) -> Any:
                calls.append("files")
                return None

            @noderole.hookimpl(optionalhook=True)
            def noderole_k3s_manifests(self, node: NodeContext) -> Any:
                calls.append("manifests")
                return [manifest()]

        by_name = services(node_root, ("c", Counting()))
        assert sorted(calls) == ["config", "files", "manifests"]
        # Both sides still get what is theirs: the keys for all, the manifest for the server.
        for name in ("k3s", "k3s-agent"):
            assert not any(isinstance(s, noderole.Fail) for s in by_name[name].pre_start)
        succeeded(run_prestart(by_name["k3s-agent"], node_root))
        assert read_yaml(node_root, DROPIN) == {"kubelet-arg": ["max-pods=200"]}
        assert not node_root.exists(f"{MANIFESTS}/extra.yaml")
        succeeded(run_prestart(by_name["k3s"], node_root))
        assert read_yaml(node_root, f"{MANIFESTS}/extra.yaml")["data"] == {"k": "a"}

    def test_broken_manifests_hook_fails_the_server_only(self, node_root: ScratchRoot) -> None:
        """Manifests are the server's: a manifests hook returning the wrong type fails k3s,
        naming the plugin and the hook, and leaves k3s-agent alone."""
        node_root.write(CONFIG, "")
        node_root.write_env(AGENT_ENV, {"K3S_URL": "https://s:6443", "K3S_TOKEN": "t"})
        by_name = services(node_root, ("odd", Contributor(manifests=["text"])))
        message = failed(run_prestart(by_name["k3s"], node_root))
        assert "plugin 'odd'" in message
        assert "noderole_k3s_manifests" in message
        assert not any(isinstance(s, noderole.Fail) for s in by_name["k3s-agent"].pre_start)

    def test_bad_applies_to_is_refused(self) -> None:
        """applies_to is server, agent or all."""
        with pytest.raises(noderole.DefinitionError, match="applies_to"):
            ConfigKeys(keys={}, applies_to="workers")


RESTORE_BLOCK = "/run/spinifex-eks/k3s-restore-block"


class TestRestoreGuard:
    def _apply(self, node_root: ScratchRoot, fake_clock: FakeClock) -> Any:
        node_root.write(CONFIG, "")
        plan = plan_from_plugins(
            "server", ("k3s", k3s_plugin), config_text=NO_NET_CHECK, node_root=node_root
        )
        return apply_recorded(plan, node_root, clock=fake_clock)

    def test_marker_refuses_to_start_k3s(
        self, node_root: ScratchRoot, fake_clock: FakeClock
    ) -> None:
        """While the restore marker exists, apply fails k3s before it starts or writes a drop-in."""
        node_root.write(RESTORE_BLOCK, "")
        report, backend = self._apply(node_root, fake_clock)
        assert not report.ok
        assert "k3s" not in backend.names()
        (failure,) = [r for r in report.services if r.name == "k3s"]
        assert failure.reason.startswith("refusing to start k3s on an empty datastore")
        assert RESTORE_BLOCK in failure.reason
        assert not node_root.exists(DROPIN)

    def test_without_marker_k3s_starts(self, node_root: ScratchRoot, fake_clock: FakeClock) -> None:
        """Without the marker the same apply starts k3s."""
        report, backend = self._apply(node_root, fake_clock)
        assert report.ok, report.failed
        assert "k3s" in backend.names()

    def test_marker_path_is_a_setting(self, node_root: ScratchRoot, fake_clock: FakeClock) -> None:
        """[k3s] restore_block moves the marker; the default path then no longer blocks."""
        node_root.write(RESTORE_BLOCK, "")
        node_root.write("/var/lib/restore/blocked", "")
        config = NO_NET_CHECK + '[k3s]\nrestore_block = "/var/lib/restore/blocked"\n'
        node_root.write(CONFIG, "")
        plan = plan_from_plugins(
            "server", ("k3s", k3s_plugin), config_text=config, node_root=node_root
        )
        report, _ = apply_recorded(plan, node_root, clock=fake_clock)
        assert "/var/lib/restore/blocked exists" in str(report.failed)


NM_CLOUD_SETUP_UNIT = """\
[Unit]
Description=Automatically configure NetworkManager in cloud
After=NetworkManager.service

[Service]
Type=oneshot
ExecStart=/usr/libexec/nm-cloud-setup

[Install]
WantedBy=NetworkManager.service
"""
"""NetworkManager's nm-cloud-setup unit, as RHEL's cloud images install it."""


class TestNmCloudSetup:
    """An enabled nm-cloud-setup.service, as RHEL 8 and 9 cloud images ship it, is no obstacle:
    k3s's unit stopped refusing to start then (k3s-io/k3s#12889) once NetworkManager 1.32 had
    fixed the routing rules it rewrote, and k3s starts there as the stock k3s does."""

    @pytest.mark.parametrize(("role", "name"), [("server", "k3s"), ("agent", "k3s-agent")])
    def test_k3s_starts_with_nm_cloud_setup_enabled(
        self,
        node_root: ScratchRoot,
        fake_clock: FakeClock,
        monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path,
        role: str,
        name: str,
    ) -> None:
        """Installed and enabled, with a systemctl that says so: k3s starts, and nothing asks
        systemctl about the unit (before: the pre-start refused to start k3s)."""
        unit = "/usr/lib/systemd/system/nm-cloud-setup.service"
        node_root.write(unit, NM_CLOUD_SETUP_UNIT)
        wants = node_root.path / "etc/systemd/system/NetworkManager.service.wants"
        wants.mkdir(parents=True)
        (wants / "nm-cloud-setup.service").symlink_to(unit)
        node_root.write_env(AGENT_ENV, {"K3S_URL": "https://s:6443", "K3S_TOKEN": TOKEN})
        node_root.write(CONFIG, "")
        bin_dir, asked = tmp_path / "bin", tmp_path / "asked"
        bin_dir.mkdir()
        systemctl = bin_dir / "systemctl"
        systemctl.write_text(f'#!/bin/sh\necho "$*" >> {asked}\necho enabled\n')
        systemctl.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")

        plan = plan_from_plugins(
            role, ("k3s", k3s_plugin), config_text=NO_NET_CHECK, node_root=node_root
        )
        report, backend = apply_recorded(plan, node_root, clock=fake_clock)
        assert report.ok, report.failed
        assert name in backend.names()
        assert not asked.exists()


class TestALateNetwork:
    """k3s's unit and runscript order k3s after the network and do not require it
    (``Wants=``/``After=network-online.target``; OpenRC ``after network-online; want
    cgroups``): k3s starts and retries its connections itself. `need net` failed k3s when the
    network was late, and nothing started it again."""

    @pytest.mark.parametrize(("role", "name"), [("server", "k3s"), ("agent", "k3s-agent")])
    def test_k3s_wants_the_network_and_cgroups_and_needs_no_more(
        self, node_root: ScratchRoot, role: str, name: str
    ) -> None:
        node_root.write_env(AGENT_ENV, {"K3S_URL": "https://s:6443", "K3S_TOKEN": TOKEN})
        service = services(node_root)[name]
        assert service.want == ("net", "cgroups")
        assert service.need == (("k3s-cluster",) if name == "k3s" else ())
        plan = plan_from_plugins(role, ("k3s", k3s_plugin))
        assert_starts_before(plan, "net", name)
        assert_starts_before(plan, "cgroups", name)

    @pytest.mark.parametrize(("role", "name"), [("server", "k3s"), ("agent", "k3s-agent")])
    def test_k3s_starts_when_the_network_check_fails(
        self,
        node_root: ScratchRoot,
        fake_clock: FakeClock,
        monkeypatch: pytest.MonkeyPatch,
        role: str,
        name: str,
    ) -> None:
        """With [noderole] net_check on and no network within net_timeout, `net` fails and k3s
        starts all the same (before: "it needs net, which failed", and k3s never started)."""
        import noderole.builtin

        monkeypatch.setattr(noderole.builtin, "network_up", lambda: False)
        node_root.write_env(AGENT_ENV, {"K3S_URL": "https://s:6443", "K3S_TOKEN": TOKEN})
        node_root.write(CONFIG, "")
        config = "[noderole]\nnet_check = true\nnet_timeout = 1\n"
        plan = plan_from_plugins(role, ("k3s", k3s_plugin), config_text=config, node_root=node_root)
        report, backend = apply_recorded(plan, node_root, clock=fake_clock)
        outcomes = {service.name: service.status for service in report.services}
        assert outcomes["net"] == "failed"
        assert outcomes[name] == "started", report.failed
        assert name in backend.names()

    def test_k3s_still_needs_its_cluster_role(
        self, node_root: ScratchRoot, fake_clock: FakeClock
    ) -> None:
        """A server-join node without its join values: k3s-cluster-join fails, and k3s is not
        started as a new cluster."""
        node_root.write(CONFIG, "")
        plan = plan_from_plugins(
            "server-join", ("k3s", k3s_plugin), config_text=NO_NET_CHECK, node_root=node_root
        )
        report, backend = apply_recorded(plan, node_root, clock=fake_clock)
        outcomes = {service.name: service.status for service in report.services}
        assert outcomes["k3s-cluster-join"] == "failed"
        assert "k3s" not in backend.names()

    @pytest.mark.parametrize("name", ["k3s", "k3s-agent"])
    def test_rendered_as_k3s_renders_its_own(self, node_root: ScratchRoot, name: str) -> None:
        """The OpenRC runscript wants net and cgroups (needs only the cluster role); the
        systemd unit has Wants= and After=network-online.target, and no Requires= of it."""
        from noderole.render.openrc import render_runscript
        from noderole.render.systemd import render_unit

        node_root.write_env(AGENT_ENV, {"K3S_URL": "https://s:6443", "K3S_TOKEN": TOKEN})
        service = services(node_root)[name]
        runscript = render_runscript(service)
        assert "\twant net cgroups\n" in runscript
        assert "\tneed net" not in runscript
        if name == "k3s":
            assert "\tneed k3s-cluster\n" in runscript
        unit = render_unit(service).splitlines()
        assert "Wants=network-online.target" in unit
        requires = [line for line in unit if line.startswith("Requires=")]
        assert requires == (["Requires=k3s-cluster.service"] if name == "k3s" else [])
        (after,) = [line for line in unit if line.startswith("After=")]
        assert "network-online.target" in after.removeprefix("After=").split()


class TestResolveRole:
    def resolve(self, node_root: ScratchRoot) -> Any:
        (answer,) = call_hook(
            ("k3s", k3s_plugin), "noderole_resolve_role", node_root=node_root
        ) or [None]
        return answer

    @pytest.mark.parametrize("role", ["server", "server-join", "agent"])
    def test_role_from_first_boot(self, node_root: ScratchRoot, role: str) -> None:
        """SPINIFEX_K3S_ROLE in first-boot.env names the role."""
        node_root.write_env(FIRST_BOOT, {"SPINIFEX_K3S_ROLE": role, "OTHER": "x"})
        assert self.resolve(node_root) == role

    def test_agent_when_only_agent_env_exists(self, node_root: ScratchRoot) -> None:
        """Without first-boot.env, an agent.env means the node is an agent."""
        node_root.write_env(AGENT_ENV, {"K3S_URL": "https://s:6443"})
        assert self.resolve(node_root) == "agent"

    def test_no_inputs_no_answer(self, node_root: ScratchRoot) -> None:
        """With neither file the plugin cannot tell, and says nothing."""
        assert call_hook(("k3s", k3s_plugin), "noderole_resolve_role", node_root=node_root) == []

    def test_invalid_role_names_file_and_key(self, node_root: ScratchRoot) -> None:
        """An unknown role is an error naming the file, the key and the valid roles."""
        node_root.write_env(FIRST_BOOT, {"SPINIFEX_K3S_ROLE": "master"})
        with pytest.raises(noderole.EnvFileError) as excinfo:
            self.resolve(node_root)
        message = str(excinfo.value)
        assert "SPINIFEX_K3S_ROLE='master'" in message
        assert FIRST_BOOT in message
        assert "server, server-join, agent" in message

    def test_missing_key_names_file_and_key(self, node_root: ScratchRoot) -> None:
        """A first-boot.env without the key (and no agent.env) is an error, not a guess."""
        node_root.write_env(FIRST_BOOT, {"EKS_KONNECTIVITY_SANS": "a"})
        with pytest.raises(
            noderole.EnvFileError, match=f"SPINIFEX_K3S_ROLE missing from {FIRST_BOOT}"
        ):
            self.resolve(node_root)

    def test_key_is_a_setting(self, node_root: ScratchRoot) -> None:
        """[k3s] role_key names another key."""
        node_root.write_env(FIRST_BOOT, {"NODE_ROLE": "server-join"})
        (answer,) = call_hook(
            ("k3s", k3s_plugin),
            "noderole_resolve_role",
            node_root=node_root,
            config_text='[k3s]\nrole_key = "NODE_ROLE"\n',
        )
        assert answer == "server-join"
