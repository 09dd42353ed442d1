"""Load noderole's plugin-author kit (node_root, fake_clock, recording_backend, ...)."""

pytest_plugins = ["noderole.testing"]
