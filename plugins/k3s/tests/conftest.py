"""The k3s plugin's tests use noderole's plugin-author kit (noderole.testing).

Its fixtures (``node_root``, ``fake_clock``, ``recording_backend``, ``standin_runner``, and
``k3s_ca`` from ``noderole_k3s.testing``) come from the
repository's top-level ``conftest.py`` (``pytest_plugins = ["noderole.testing"]``): pytest
honours ``pytest_plugins`` only in the rootdir's top-level conftest, and that one is loaded
however these tests are run (``pytest`` at the top, ``pytest plugins``, or
``cd plugins/k3s && pytest tests``: the rootdir stays the repository, whose pyproject.toml holds
the pytest settings). Declaring it here instead would be an error whenever pytest reaches this
directory from above (``pytest plugins``).
"""
