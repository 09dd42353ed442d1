"""`noderole rehearse ROLE` with the shipped plugins, for every shipped role."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from noderole.cli import cli
from noderole.cli._app import App
from noderole.root import NodeRoot
from noderole.testing import node_processes

pytest.importorskip("noderole_k3s")
pytest.importorskip("noderole_konnectivity")


@pytest.mark.slow
class TestRehearseShippedRoles:
    @pytest.mark.parametrize(
        ("role", "services"),
        [
            ("server", ["k3s", "konnectivity-server"]),
            ("server-join", ["k3s", "konnectivity-server"]),
            ("agent", ["k3s-agent"]),
        ],
    )
    def test_role_comes_up_and_leaves_nothing(self, role: str, services: list[str]) -> None:
        """Every service of the role starts with the stand-ins, and nothing is left afterwards."""
        from noderole.plugins import load_plugins

        # Only the shipped plugins: another installed plugin (docs/examples) is not under test.
        others = [n for n in load_plugins().names() if n not in ("builtin", "k3s", "konnectivity")]
        app = App(root=NodeRoot("/"), disabled_plugins=tuple(others))
        result = CliRunner().invoke(cli, ["rehearse", role], obj=app, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        scratch = Path(result.stdout.splitlines()[0].split(" in ", 1)[1])
        for name in services:
            assert f" * Started {name}" in result.stdout
            status_line = next(
                line for line in result.stdout.splitlines() if line.startswith(name + " ")
            )
            assert status_line.split()[1] in ("running", "ready")
        assert not scratch.exists()
        assert node_processes(scratch) == []
