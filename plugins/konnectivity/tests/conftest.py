"""Fixtures for the konnectivity plugin's tests, on top of noderole's plugin-author kit.

The kit's fixtures (``node_root``, ``fake_clock``, ``recording_backend``, ``standin_runner``)
and the k3s plugin's ``k3s_ca`` come
from the repository's top-level ``conftest.py`` (``pytest_plugins = ["noderole.testing"]``):
pytest honours ``pytest_plugins`` only in the rootdir's top-level conftest, and that one is
loaded however these tests are run (``pytest`` at the top, ``pytest plugins``, or
``cd plugins/konnectivity && pytest tests``: the rootdir stays the repository). By the time this
file is imported the kit is registered, so importing from it here raises no warning.
"""

from __future__ import annotations

import pytest

from noderole.testing import ClusterCA, ScratchRoot

KUBECONFIG = "/etc/rancher/k3s/k3s.yaml"
"""The admin kubeconfig k3s writes; konnectivity-server waits for it with the CA."""


@pytest.fixture
def k3s_server(node_root: ScratchRoot, k3s_ca: ClusterCA) -> ClusterCA:
    """What a running k3s server leaves for konnectivity: its CA (the kit's serial-0 k3s-style
    CA, at k3s's paths) and the admin kubeconfig."""
    node_root.write(KUBECONFIG, "apiVersion: v1\nkind: Config\n", mode=0o600)
    return k3s_ca
