"""Fixtures for the k3s plugin's tests: a node context over a scratch root, and a CLI runner."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from noderole.clock import FakeClock
from noderole.config import load_config
from noderole.context import NodeContext
from noderole.plugins import PluginSet, load_plugins
from noderole.root import NodeRoot
from noderole_k3s import plugin as k3s_plugin

NodeFactory = Callable[..., tuple[PluginSet, NodeContext]]


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
def make_node(tmp_path: Path) -> NodeFactory:
    """Build (plugins, node) over ``tmp_path`` with the k3s plugin plus the given plugins."""

    def build(*extra: tuple[str, object], k3s: bool = True) -> tuple[PluginSet, NodeContext]:
        chosen = ([("k3s", k3s_plugin)] if k3s else []) + list(extra)
        plugins = load_plugins(plugins=chosen, autoload=False)
        root = NodeRoot(tmp_path)
        config = load_config(root, plugins.settings_tables())
        node = NodeContext(
            root=root, config=config, pluginmanager=plugins.manager, clock=FakeClock()
        )
        return plugins, node

    return build
