"""Fixtures for the konnectivity plugin's tests: node contexts over a scratch root, a k3s CA."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from noderole.clock import FakeClock
from noderole.config import load_config
from noderole.context import NodeContext
from noderole.plugins import PluginSet, load_plugins
from noderole.root import NodeRoot
from noderole_k3s import plugin as k3s_plugin
from noderole_konnectivity import plugin as konnectivity_plugin

CA = "/var/lib/rancher/k3s/server/tls/server-ca.crt"
CA_KEY = "/var/lib/rancher/k3s/server/tls/server-ca.key"
KUBECONFIG = "/etc/rancher/k3s/k3s.yaml"


@pytest.fixture
def put(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write text at a node path under the scratch root (parents created); returns the file."""

    def write(node_path: str, text: str) -> Path:
        local = tmp_path / node_path.lstrip("/")
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(text)
        return local

    return write


@pytest.fixture
def make_node(tmp_path: Path) -> Callable[..., tuple[PluginSet, NodeContext]]:
    """Build (plugins, node) over ``tmp_path`` with konnectivity, and k3s unless ``k3s=False``."""

    def build(*, k3s: bool = True) -> tuple[PluginSet, NodeContext]:
        chosen: list[tuple[str, object]] = [("konnectivity", konnectivity_plugin)]
        if k3s:
            chosen.insert(0, ("k3s", k3s_plugin))
        plugins = load_plugins(plugins=chosen, autoload=False)
        root = NodeRoot(tmp_path)
        config = load_config(root, plugins.settings_tables())
        node = NodeContext(
            root=root, config=config, pluginmanager=plugins.manager, clock=FakeClock()
        )
        return plugins, node

    return build


@pytest.fixture(scope="session")
def k3s_ca(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A CA made the way k3s makes its server CA: P-256, serial 0, key as EC PRIVATE KEY."""
    where = tmp_path_factory.mktemp("k3s-ca")
    cert, raw_key, key = where / "server-ca.crt", where / "raw.key", where / "server-ca.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-set_serial", "0", "-newkey", "ec",
         "-pkeyopt", "ec_paramgen_curve:P-256", "-subj", "/CN=k3s-server-ca@1700000000",
         "-days", "3650", "-nodes", "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign",
         "-keyout", str(raw_key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(["openssl", "ec", "-in", str(raw_key), "-out", str(key)], check=True,
                   capture_output=True)  # fmt: skip
    return cert, key


@pytest.fixture
def install_k3s_files(tmp_path: Path, k3s_ca: tuple[Path, Path]) -> Callable[..., None]:
    """Put the k3s CA, its key and an admin kubeconfig under the root, as k3s would."""

    def install(*, kubeconfig: bool = True) -> None:
        for source, node_path in zip(k3s_ca, (CA, CA_KEY), strict=True):
            local = tmp_path / node_path.lstrip("/")
            local.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, local)
        if kubeconfig:
            local = tmp_path / KUBECONFIG.lstrip("/")
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text("apiVersion: v1\nkind: Config\n")

    return install
