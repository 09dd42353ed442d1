"""The ``noderole`` command's first module: the collector's pace is set before anything loads.

A command's start-up allocates tens of thousands of long-lived objects (modules, classes,
functions, records) and makes almost no garbage in reference cycles, yet the cyclic collector,
counting allocations, walks the young generations about fifty times while they are made: about 5%
of ``noderole plan``'s instructions (callgrind, 271M -> 258M). This module imports nothing but
:mod:`gc` and raises the first generation's threshold before click or any noderole module loads,
as mypy does for its own runs; collection still happens, once every 100,000 net allocations, so a
long ``apply`` (waits of minutes, a thousand services) keeps its memory bounded.
"""

from __future__ import annotations

import gc

TYPE_CHECKING = False  # typing is not imported before the collector's pace is set
if TYPE_CHECKING:
    from typing import NoReturn

__all__ = ["GC_THRESHOLD", "run"]

GC_THRESHOLD = (100_000, 50, 100)
"""Allocations before a first-generation collection, and the two older generations' counts."""


def run() -> NoReturn:
    """The ``noderole`` console script: set the collector's pace, then :func:`noderole.cli.run`."""
    gc.set_threshold(*GC_THRESHOLD)
    from noderole.cli import run as cli_run

    cli_run()
