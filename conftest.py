"""Load noderole's plugin-author kit into this repository's test runs.

The shipped plugins' tests (plugins/*/tests) use the kit's fixtures (node_root, fake_clock,
recording_backend, standin_runner) and the k3s plugin's test helpers (k3s_ca). pytest honours
``pytest_plugins`` only in the rootdir's top-level conftest, and this is it: it is loaded
however the tests are run, whether ``pytest`` here, ``pytest plugins`` or
``cd plugins/k3s && pytest tests`` (the rootdir is still this directory). Keep this file to the
declaration: importing noderole.testing before it would make pytest warn that the module cannot
be assertion-rewritten.
"""

pytest_plugins = ["noderole.testing", "noderole_k3s.testing"]
