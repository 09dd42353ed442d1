"""Load noderole's plugin-author kit (node_root, fake_clock, cluster_ca, recording_backend)."""

pytest_plugins = ["noderole.testing"]
