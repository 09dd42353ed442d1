"""The plugin-author kit: test a noderole plugin without a node, a network or a real clock.

Opt in with ``pytest_plugins = ["noderole.testing"]`` in your top-level ``conftest.py`` (or
``pytest -p noderole.testing``); it is never loaded into a pytest run that did not ask.

Fixtures: ``node_root`` (:class:`ScratchRoot`), ``fake_clock`` (:class:`FakeClock`),
``recording_backend`` (:class:`RecordingBackend`), ``standin_runner`` (:class:`StandInRunner`).
Helpers: :func:`call_hook` and :func:`node_context` (one hook of one plugin, with a node built
for the test), :func:`run_prestart`, :func:`plan_from_plugins`, :func:`services_from_plugins`,
:func:`standins_from_plugins`, :func:`stage_standins`, :func:`apply_recorded`,
:func:`make_cluster_ca` and the ``assert_*`` functions, and :func:`end_node_processes` for
end-to-end tests that start real processes under a root. docs/tutorial.md walks through a
plugin tested with them. (k3s's CA paths and a k3s-like CA are the k3s plugin's:
``noderole_k3s.testing``.)
"""

from noderole.clock import FakeClock
from noderole.testing._backend import RecordingBackend, apply_recorded
from noderole.testing._ca import ClusterCA, load_certificate, make_cluster_ca, serial_number
from noderole.testing._fixtures import fake_clock, node_root, recording_backend
from noderole.testing._hooks import call_hook, node_context
from noderole.testing._plan import (
    assert_in_plan,
    assert_not_in_plan,
    assert_starts_before,
    load_test_plugins,
    plan_from_plugins,
    services_from_plugins,
    standins_from_plugins,
)
from noderole.testing._prestart import PrestartOutcome, new_fake_clock, run_prestart, wait_targets
from noderole.testing._processes import (
    end_node_processes,
    eventually,
    node_processes,
    process_cmdline,
    process_environ,
    process_parent,
    supervisor_processes,
)
from noderole.testing._root import RootLike, ScratchRoot, env_file_text
from noderole.testing._standins import StandInRunner, stage_standins, standin_runner

__all__ = [
    # processes started under a root
    "node_processes",
    "end_node_processes",
    "process_environ",
    "process_cmdline",
    "process_parent",
    "eventually",
    "supervisor_processes",
    # fixtures
    "FakeClock",
    "node_root",
    "fake_clock",
    "recording_backend",
    "standin_runner",
    # node root
    "RootLike",
    "ScratchRoot",
    "env_file_text",
    # one hook in isolation
    "call_hook",
    "node_context",
    # stand-ins
    "StandInRunner",
    "stage_standins",
    # cluster CA
    "ClusterCA",
    "make_cluster_ca",
    "load_certificate",
    "serial_number",
    # pre-start steps
    "PrestartOutcome",
    "run_prestart",
    "wait_targets",
    "new_fake_clock",
    # plans
    "load_test_plugins",
    "services_from_plugins",
    "standins_from_plugins",
    "plan_from_plugins",
    "assert_in_plan",
    "assert_not_in_plan",
    "assert_starts_before",
    # apply without processes
    "RecordingBackend",
    "apply_recorded",
]
