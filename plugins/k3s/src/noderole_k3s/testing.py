"""Test helpers for plugins that work with k3s: its CA paths, a k3s-like CA, a pytest fixture.

Load the fixture with ``pytest_plugins = ["noderole.testing", "noderole_k3s.testing"]`` in your
top-level ``conftest.py``. Importing this module imports pytest; import it only from tests.
"""

from __future__ import annotations

import time

import pytest

from noderole.testing import ClusterCA, RootLike, ScratchRoot, make_cluster_ca

__all__ = ["K3S_CA_CERT", "K3S_CA_KEY", "K3S_KUBECONFIG", "k3s_ca", "make_k3s_ca"]

K3S_CA_CERT = "/var/lib/rancher/k3s/server/tls/server-ca.crt"
"""Node path of k3s's server CA certificate."""
K3S_CA_KEY = "/var/lib/rancher/k3s/server/tls/server-ca.key"
"""Node path of k3s's server CA key (only servers have it)."""
K3S_KUBECONFIG = "/etc/rancher/k3s/k3s.yaml"
"""The admin kubeconfig a k3s server writes once its apiserver is up."""


def make_k3s_ca(node_root: RootLike, *, days: int = 3650) -> ClusterCA:
    """A CA shaped like k3s's server CA at k3s's paths: ECDSA P-256 stored as ``EC PRIVATE
    KEY``, serial number 0, common name ``k3s-server-ca@<unix time>``."""
    return make_cluster_ca(
        node_root,
        cert_path=K3S_CA_CERT,
        key_path=K3S_CA_KEY,
        serial_zero=True,
        common_name=f"k3s-server-ca@{int(time.time())}",
        days=days,
    )


@pytest.fixture
def k3s_ca(node_root: ScratchRoot) -> ClusterCA:
    """A k3s-style server CA (ECDSA P-256, serial 0) at k3s's paths in ``node_root``."""
    return make_k3s_ca(node_root)
