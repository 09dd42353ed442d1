"""Running plugins' rehearsal stand-ins for real, and staging them as a rehearsal would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence

import pytest

from noderole.plugins import PluginSet
from noderole.rehearsal import Staging, free_port, stage_rehearsal
from noderole.testing._hooks import node_context
from noderole.testing._plan import PluginArg
from noderole.testing._processes import end_node_processes
from noderole.testing._root import ScratchRoot

__all__ = ["StandInRunner", "stage_standins", "standin_runner"]


class StandInRunner:
    """Starts stand-in programs written under a node root, and ends every one of them.

    Each runs as ``python3 ROOT/PATH ARGS`` with ``NODEROLE_ROOT`` set to the root (so it writes
    only there), stdout and stderr piped.
    """

    def __init__(self, node_root: ScratchRoot, *, env: Mapping[str, str] | None = None) -> None:
        self.node_root = node_root
        self.env = dict(env or {})
        """Extra environment for every stand-in started."""
        self.started: list[subprocess.Popen[bytes]] = []
        """Every process started, in order."""

    def start(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start the stand-in at node path ``argv[0]`` with ``argv[1:]``."""
        proc = subprocess.Popen(
            [sys.executable, str(self.node_root.resolve(argv[0])), *argv[1:]],
            env={
                **os.environ,
                "NODEROLE_ROOT": str(self.node_root.path),
                **self.env,
                **(env or {}),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.started.append(proc)
        return proc

    def close(self) -> list[int]:
        """Kill and reap every stand-in started; end and return the pids of any process still
        running under the root (a stand-in that left one behind has a bug)."""
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        return end_node_processes(self.node_root)


@pytest.fixture
def standin_runner(node_root: ScratchRoot) -> Iterator[StandInRunner]:
    """A :class:`StandInRunner` over ``node_root``; afterwards every process it started is
    ended, pass or fail, and the test fails if one left a process behind under the root."""
    runner = StandInRunner(node_root)
    yield runner
    assert runner.close() == [], "a stand-in left a process running under the root"


def stage_standins(
    *plugins: PluginArg,
    node_root: ScratchRoot,
    config_text: str | None = None,
    pick_port: Callable[[], int] = free_port,
) -> Staging:
    """Write what ``noderole rehearse`` writes for ``plugins`` into ``node_root``: programs,
    input files and ``config.toml`` (ports chosen by ``pick_port``). Returns what was staged.

    ``config_text`` is the configuration the plugins' hooks see while staging; the rehearsal's
    own ``config.toml`` replaces it.
    """
    node = node_context(*plugins, node_root=node_root, config_text=config_text)
    plugin_set = PluginSet.over(node.pluginmanager)
    return stage_rehearsal(node_root.root, plugin_set, node, pick_port=pick_port)
