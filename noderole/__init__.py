"""noderole: apply a Kubernetes node role at boot.

The public API, for plugin authors and for programs that embed noderole: ``import noderole`` then
``noderole.Service``, ``noderole.hookimpl``... Everything a plugin or a test of one touches is
here or in :mod:`noderole.testing`; every other module (``noderole.records``, ``noderole.plan``,
...) is internal and may change without notice.

The public names are listed once, in the ``TYPE_CHECKING`` block below: type checkers read those
imports, and at run time the lazy table is read from the same lines on the first lookup. Names are
imported on first use (PEP 562), because ``noderole --help`` and the supervisor run at boot and
must not pay for record classes or pluggy they do not need.
"""

from __future__ import annotations

import functools
import importlib

from noderole.__about__ import __version__ as __version__

TYPE_CHECKING = False  # not typing's: the console script sets the collector's pace before typing
if TYPE_CHECKING:
    from typing import Any

    # The one list of public names. Write each on its own line as ``from noderole.x import Name
    # as Name`` (an explicit re-export, which is also the line _public() reads at run time).
    from noderole.certstamp import CertOutcome as CertOutcome
    from noderole.clock import Clock as Clock
    from noderole.clock import FakeClock as FakeClock
    from noderole.clock import SystemClock as SystemClock
    from noderole.config import CONFIG_PATH as CONFIG_PATH
    from noderole.context import NodeContext as NodeContext
    from noderole.engine import ApplyReport as ApplyReport
    from noderole.engine import ServiceReport as ServiceReport
    from noderole.envfile import EnvFile as EnvFile
    from noderole.envfile import parse_env_text as parse_env_text
    from noderole.envfile import read_env_file as read_env_file
    from noderole.errors import BackendError as BackendError
    from noderole.errors import CertificateError as CertificateError
    from noderole.errors import ConfigError as ConfigError
    from noderole.errors import DefinitionError as DefinitionError
    from noderole.errors import EnvFileError as EnvFileError
    from noderole.errors import ExitCode as ExitCode
    from noderole.errors import LockedError as LockedError
    from noderole.errors import NoderoleError as NoderoleError
    from noderole.errors import PlanError as PlanError
    from noderole.errors import PluginError as PluginError
    from noderole.errors import StepError as StepError
    from noderole.errors import UsageError as UsageError
    from noderole.errors import WaitTimeout as WaitTimeout
    from noderole.hookspecs import hookimpl as hookimpl
    from noderole.hookspecs import hookspec as hookspec
    from noderole.plan import Plan as Plan
    from noderole.plan import PlannedService as PlannedService
    from noderole.records import Call as Call
    from noderole.records import Fail as Fail
    from noderole.records import MakeDirectories as MakeDirectories
    from noderole.records import MintCertificate as MintCertificate
    from noderole.records import Readiness as Readiness
    from noderole.records import Secret as Secret
    from noderole.records import Service as Service
    from noderole.records import Setting as Setting
    from noderole.records import SettingsTable as SettingsTable
    from noderole.records import Step as Step
    from noderole.records import Supervision as Supervision
    from noderole.records import Wait as Wait
    from noderole.records import WaitForCommand as WaitForCommand
    from noderole.records import WaitForHttp as WaitForHttp
    from noderole.records import WaitForPaths as WaitForPaths
    from noderole.records import WaitForSocket as WaitForSocket
    from noderole.records import WaitForTcp as WaitForTcp
    from noderole.records import Warn as Warn
    from noderole.records import WriteFile as WriteFile
    from noderole.rehearsal_records import FreePort as FreePort
    from noderole.rehearsal_records import RehearsalFile as RehearsalFile
    from noderole.rehearsal_records import RehearsalSetting as RehearsalSetting
    from noderole.rehearsal_records import StandIn as StandIn
    from noderole.render import render_openrc as render_openrc
    from noderole.render import render_systemd as render_systemd
    from noderole.render import write_rendered as write_rendered
    from noderole.root import NodeRoot as NodeRoot
    from noderole.stepcontext import StepContext as StepContext
    from noderole.steps import StepResult as StepResult
    from noderole.waits import missing as missing
    from noderole.waits import run_wait as run_wait


@functools.cache
def _public() -> dict[str, str]:
    """Public name -> the module that defines it, read from the ``TYPE_CHECKING`` block above.

    Read once, on the first lookup of a public name, from the lines of this file of the form
    ``from noderole.MODULE import NAME as NAME`` (no regular expression to compile: a plugin's
    first ``from noderole import Service`` is on every command's path).
    """
    with open(__file__, encoding="utf-8") as source:
        lines = source.read().splitlines()
    table = {}
    for line in lines:
        if not line.startswith("    from noderole"):
            continue
        words = line.split()
        if len(words) == 6 and words[2::2] == ["import", "as"] and words[3] == words[5]:
            table[words[5]] = words[1]
    return table


def __getattr__(name: str) -> Any:
    if name == "__all__":
        return ["__version__", *sorted(_public())]
    module = _public().get(name)
    if module is None:
        raise AttributeError(f"module 'noderole' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return ["__version__", *sorted(_public())]
