"""The ``noderole`` command's first module: the process is made sound, and the import path and
the collector's pace are set, before anything else loads.

A root tool at boot meets whatever its caller left: closed standard descriptors, ``umask 000``,
a SIGTERM or SIGHUP while a wait's command try runs in a session of its own.
:func:`open_standard_streams`, :func:`restrict_umask` and :func:`end_attempts_when_terminated`
deal with each, with a few system calls and no import.

Python puts a script's own directory first on ``sys.path`` (``python -P`` would not): for the
``noderole`` console script that is the directory it was installed in, where a stray ``json.py``
or ``click.py`` would be imported by root in place of the real one, and which every top-level
import searches first (48 ``stat`` calls a re-apply, 1% of its instructions). :func:`run` drops
it: noderole imports nothing from there (this module, imported before, is found already).

A command's start-up allocates tens of thousands of long-lived objects (modules, classes,
functions, records) and makes almost no garbage in reference cycles, yet the cyclic collector,
counting allocations, walks the young generations about fifty times while they are made: about 5%
of ``noderole plan``'s instructions (callgrind, 271M -> 258M). This module imports nothing but
:mod:`gc` (and :mod:`os`, :mod:`sys` and ``_signal``, loaded with the interpreter) and raises
the first generation's threshold before click or any noderole module loads, as mypy does;
collection still happens, once every 100,000 net allocations, so a long ``apply`` (waits of
minutes, a thousand services) keeps its memory bounded.
"""

from __future__ import annotations

import gc
import os
import sys

TYPE_CHECKING = False  # typing is not imported before the collector's pace is set
if TYPE_CHECKING:
    from typing import NoReturn

__all__ = [
    "GC_THRESHOLD",
    "drop_script_directory",
    "end_attempts_when_terminated",
    "end_wait_attempts",
    "open_standard_streams",
    "restrict_umask",
    "run",
]

GC_THRESHOLD = (100_000, 50, 100)
"""Allocations before a first-generation collection, and the two older generations' counts."""


def run() -> NoReturn:
    """The ``noderole`` console script: make the process sound (descriptors, umask, what a
    SIGTERM or SIGHUP leaves), drop the script's directory from the import path, set the
    collector's pace, then :func:`noderole.cli.run`."""
    open_standard_streams()
    restrict_umask()
    end_attempts_when_terminated()
    drop_script_directory()
    gc.set_threshold(*GC_THRESHOLD)
    try:
        from noderole.cli import run as cli_run
    except KeyboardInterrupt:  # Ctrl-C while click and the command still load: as later on
        from noderole.errors import ExitCode

        sys.stderr.write("noderole: interrupted\n")
        sys.exit(ExitCode.INTERRUPTED)
    cli_run()


def open_standard_streams() -> None:
    """Open ``/dev/null`` in each of descriptors 0, 1 and 2 that the caller closed, and give
    Python a stream on it (a boot script's ``noderole apply >&-``).

    Python starts with ``sys.stdout`` None when descriptor 1 is closed, so the first line
    printed raises; and the next file the command opens takes the lowest free descriptor, 1,
    where a child that inherits its stdout would write into it (a certificate, the state). With
    every slot held, nothing else can land there. One ``fstat`` each when all are open.
    """
    for number, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(number)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)  # the lowest free slot: this one
            if opened != number:  # pragma: no cover - the slots below are held by now
                os.dup2(opened, number)
                os.close(opened)
            if getattr(sys, name) is None:
                setattr(sys, name, open(number, mode, closefd=False))  # noqa: SIM115


def restrict_umask() -> None:
    """Add group and other write to the caller's umask (``umask 000`` becomes ``022``; a
    stricter one, ``077``, stays).

    Every file noderole writes gets its mode exactly, but directories made on the way (``mkdir
    -p``: the parents of a certificate, of a k3s drop-in, the entry-point cache) take theirs from
    the umask: under ``umask 000`` they were world-writable, and any local user could swap
    what root reads next in them. The supervisor daemon sets ``022`` for itself.
    """
    os.umask(os.umask(0o022) | 0o022)


def end_attempts_when_terminated() -> None:
    """On SIGTERM or SIGHUP, kill the command attempts of this process's waits, then die of the
    signal as before (a caller ignoring either keeps it ignored).

    Each attempt runs in a session of its own, so a timed-out one is killed with its children;
    that also keeps it out of reach of a signal sent to noderole's group, and dying of the signal
    would leave it running, reparented to init (``timeout 60 noderole wait --command ...``, an
    init system stopping an apply, an SSH session gone). Installed through ``_signal``, the C
    module the interpreter loaded at start: ``signal`` would build its enums (1 ms)."""
    import _signal  # type: ignore[import-not-found]  # typeshed has no stub for the C half

    for number in (_signal.SIGTERM, _signal.SIGHUP):
        if _signal.getsignal(number) == _signal.SIG_DFL:
            _signal.signal(number, _end_attempts_and_die)


def end_wait_attempts(dying_of: int | None = None) -> bool:
    """Kill the command tries of this process's waits (the process is leaving, by ``os._exit``
    or the signal ``dying_of``: its threads will not end them). Imports nothing: a command that
    ran no wait has no tries, and no probe module to ask.

    False when the signal came while this thread was starting a try: the try, once started,
    is killed and the process with it (see :func:`noderole.supervisor.probes.end_attempts`)."""
    # Absent while the module is still being imported (Python lists it first): no try yet.
    end = getattr(sys.modules.get("noderole.supervisor.probes"), "end_attempts", None)
    return end is None or bool(end(dying_of=dying_of))


def _end_attempts_and_die(number: int, frame: object) -> None:
    # _signal, loaded by the interpreter at start: importing `signal` here, a second signal
    # (`timeout` signals the command, then its group) ran this again on a half-imported module.
    import _signal

    leave_now = end_wait_attempts(number)  # a second signal meanwhile runs this again: harmless
    _signal.signal(number, _signal.SIG_DFL)
    if leave_now:
        os.kill(os.getpid(), number)


def drop_script_directory() -> None:
    """Remove ``sys.path[0]`` when it is the running script's own directory (as Python put it
    there, symbolic links resolved). Under ``python -P`` there is none; under ``-c`` and ``-m``
    it is the working directory, which stays (unless it is ``noderole/`` itself)."""
    if sys.flags.safe_path or not sys.path or not sys.argv or not sys.argv[0]:
        return
    script = os.path.realpath(sys.argv[0])
    if os.path.isfile(script) and os.path.realpath(sys.path[0] or os.curdir) == os.path.dirname(
        script
    ):
        del sys.path[0]
