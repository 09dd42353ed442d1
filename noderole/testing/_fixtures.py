"""The pytest fixtures of the kit (registered by ``-p noderole.testing``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from noderole.clock import FakeClock
from noderole.testing._backend import RecordingBackend
from noderole.testing._prestart import new_fake_clock
from noderole.testing._root import ScratchRoot

__all__ = ["fake_clock", "node_root", "recording_backend"]


@pytest.fixture
def node_root(tmp_path: Path) -> ScratchRoot:
    """A scratch node root (an empty directory standing for ``/``) with file helpers."""
    return ScratchRoot(tmp_path / "root")


@pytest.fixture
def fake_clock() -> FakeClock:
    """A fake clock: sleeping advances it instantly; its wall time starts at the real time."""
    return new_fake_clock()


@pytest.fixture
def recording_backend(node_root: ScratchRoot) -> RecordingBackend:
    """A backend that records the process each service would be started as, in ``node_root``."""
    return RecordingBackend(node_root)
