"""Running a service's pre-start steps, in order, and saying what each one did.

The step records live in :mod:`noderole.records`; this module executes them against a node root:
directories and files through the root, waits through :mod:`noderole.waits`, certificates through
:mod:`noderole.certs` (imported only when a service has a certificate step: ``cryptography.x509``
costs ~80 ms at boot). The first failing step fails the service with a :class:`StepError` whose
text is the reason shown next to it.

Internal module: import ``StepContext`` and ``StepResult`` from :mod:`noderole`.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from noderole import recordclass
from noderole.bounded import Late, run_bounded
from noderole.errors import NoderoleError, StepError, WaitCancelled
from noderole.manifest import record
from noderole.records import (
    WAIT_TYPES,
    Call,
    Fail,
    MakeDirectories,
    MintCertificate,
    Step,
    Warn,
    WriteFile,
)
from noderole.root import NodeRoot
from noderole.stepcontext import StepContext

if TYPE_CHECKING:
    from noderole.certstamp import CertOutcome

__all__ = ["StepContext", "StepResult", "holds", "run_step", "run_steps", "warm_certificates"]


@recordclass.frozen(kw_only=True)
class StepResult:
    """What one step did."""

    step: Step
    """The step record."""
    seconds: float
    """How long it took (by the context's clock)."""
    detail: str = ""
    """What happened: ``reused: still valid``, ``minted: SANs changed ...``, ``created /run/x``."""
    certificate: CertOutcome | None = None
    """For certificate steps: the outcome (minted or reused, paths, fingerprint)."""

    @property
    def kind(self) -> str:
        """``wait``, ``certificate``, ``directories``, ``file``, ``call``, ``fail``, ``warning``."""
        if isinstance(self.step, WAIT_TYPES):
            return "wait"
        return {
            MintCertificate: "certificate",
            MakeDirectories: "directories",
            WriteFile: "file",
            Call: "call",
            Fail: "fail",
            Warn: "warning",
        }[type(self.step)]


def warm_certificates(
    steps: Iterable[Step], *, root: NodeRoot, now: float
) -> threading.Thread | None:
    """Start importing :mod:`noderole.certs` (cryptography's x509: ~80 ms), and what signing
    imports on first use, in a background thread when one of ``steps`` is a certificate that
    needs a full check, and return the thread.

    A certificate step usually comes after waits (konnectivity waits for k3s's CA): importing
    while they wait takes the import off the boot's critical path, between the CA appearing and
    the service starting. Nothing is started when every certificate is unchanged since its last
    check (:mod:`noderole.certstamp`): a re-apply never imports x509.
    """
    if "noderole.certs" in sys.modules:
        return None
    from noderole.certstamp import stamped_outcome

    for step in steps:
        if isinstance(step, MintCertificate) and stamped_outcome(step, root=root, now=now) is None:
            # Not a daemon: an interpreter exiting must not tear down a half-done import.
            thread = threading.Thread(target=_warm_certs, name="import:certs")
            try:
                thread.start()
            except RuntimeError:  # no thread to be had: the first mint imports, as without
                return None
            return thread
    return None


def _warm_certs() -> None:
    from noderole.certs import warm_signing

    warm_signing()


def run_steps(
    steps: Sequence[Step],
    ctx: StepContext,
    *,
    on_result: Callable[[StepResult], None] | None = None,
) -> list[StepResult]:
    """Run ``steps`` in order; the first failure raises :class:`StepError` (earlier results kept
    on the exception as ``error.results``)."""
    results: list[StepResult] = []
    for step in steps:
        try:
            result = run_step(step, ctx)
        except StepError as exc:
            exc.results = results  # type: ignore[attr-defined]
            raise
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def run_step(step: Step, ctx: StepContext) -> StepResult:
    """Run one step; any failure comes out as :class:`StepError` with a one-line reason."""
    start = ctx.clock.monotonic()
    detail = ""
    certificate = None
    try:
        if isinstance(step, WAIT_TYPES):
            from noderole.waits import run_wait

            waited = run_wait(
                step,
                root=ctx.root,
                clock=ctx.clock,
                progress=ctx.progress,
                cancel=ctx.cancel,
                progress_every=ctx.progress_every,
            )
            detail = f"waited {waited:.3f}s"
        elif isinstance(step, MakeDirectories):
            detail = _make_directories(step, ctx)
        elif isinstance(step, WriteFile):
            detail = _write_file(step, ctx)
        elif isinstance(step, MintCertificate):
            certificate = _certificate(step, ctx)
            detail = f"{certificate.action}: {certificate.reason}"
        elif isinstance(step, Fail):
            raise StepError(step.message)
        elif isinstance(step, Warn):
            ctx.progress(step.describe())
            detail = step.message
        elif isinstance(step, Call):
            before = len(ctx.written)
            _call(step, ctx)
            record(ctx.root, "file", ctx.written[before:])  # what the function says it wrote
            detail = "done"
        else:  # pragma: no cover - records.Service validates step types
            raise StepError(f"unknown step {step!r}")
    except StepError:
        raise
    except NoderoleError as exc:
        raise StepError(str(exc)) from exc
    except OSError as exc:
        raise StepError(f"{step.describe()}: {exc.strerror or exc}") from exc
    return StepResult(
        step=step, seconds=ctx.clock.monotonic() - start, detail=detail, certificate=certificate
    )


CALL_PATIENCE = 0.02
"""Seconds a :class:`Call` may run before its step counts as waiting (``ctx.blocking``): most
return well within it (a check of a file, a mount), and the services ready meanwhile then need
no thread of their own."""


def _call(step: Call, ctx: StepContext) -> None:
    """Run a plugin's function in a thread bounded by ``step.timeout``; re-raise what it raised."""
    outcome = run_bounded(
        lambda: step.function(ctx),
        name=f"{ctx.service}: {step.description}",
        timeout=step.timeout,
        patience=CALL_PATIENCE,
        impatient=ctx.blocking,
    )
    if isinstance(outcome, Late):
        raise StepError(
            f"{step.description}: did not finish within {step.timeout:g}s (a hung plugin step; "
            "the plugin that defines this service must fix it)"
        )
    error = outcome.error
    if error is not None:
        if not isinstance(error, Exception):
            # SystemExit and the like, raised by the plugin's function: a failure of this step,
            # never an exit of the thread that applies the service (its dependents would wait).
            raise StepError(
                f"{step.description}: raised {type(error).__name__}"
                + (f": {error}" if str(error) else "")
            ) from error
        raise error


def _make_directories(step: MakeDirectories, ctx: StepContext) -> str:
    from noderole.supervisor._safeopen import open_dir

    created = []
    for node_path in step.paths:
        # Strings, not ctx.resolve: an apply imports no pathlib. Each directory is reached
        # component by component, a link followed only inside a directory no other user can
        # write (a service's user may own the directories on the way), as the supervisor
        # reaches its logs; the last one is made with the step's mode, its parents as mkdir -p.
        local = ctx.root.local(node_path).rstrip("/") or "/"
        parent, name = os.path.split(local)
        if not name:
            continue
        parent_fd = open_dir(parent or "/", create=True)
        try:
            try:
                os.mkdir(name, step.mode, dir_fd=parent_fd)
                created.append(node_path)
            except FileExistsError:
                os.close(open_dir(local))  # there: a directory, reached without a planted link
        finally:
            os.close(parent_fd)
    record(ctx.root, "directory", created)
    return f"created {', '.join(created)}" if created else "already present"


def holds(step: WriteFile, root: NodeRoot) -> bool:
    """True when the file ``step`` writes holds its content and mode already (the step then
    writes nothing). Raises OSError for what the step cannot read (a FIFO, a device), but
    not for a missing or longer file."""
    from noderole.reading import read_regular

    local = root.local(step.path)
    data = step.content.encode()
    try:
        # What is there now, read only as far as the content goes: a longer file differs, and a
        # FIFO or a device at the path (mistyped in config.toml) fails the step, naming it,
        # instead of waiting for a writer or reading /dev/zero for ever.
        same = read_regular(local, limit=len(data)) == data
        return same and (os.stat(local).st_mode & 0o7777) == step.mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        if exc.errno != errno.EFBIG:
            raise
        return False


def _write_file(step: WriteFile, ctx: StepContext) -> str:
    from noderole.atomic import write_atomic

    local = ctx.root.local(step.path)
    data = step.content.encode()
    if holds(step, ctx.root):
        return "unchanged"
    from noderole.supervisor._safeopen import open_dir

    # Its directory made and reached as _make_directories does: never through a link a
    # service's user planted on the way.
    directory = open_dir(os.path.dirname(local), create=True)
    try:
        write_atomic(local, data, mode=step.mode, dir_fd=directory)
    finally:
        os.close(directory)
    ctx.written.append(step.path)
    record(ctx.root, "file", [step.path])
    return "written"


def _certificate(step: MintCertificate, ctx: StepContext) -> CertOutcome:
    from noderole.certstamp import stamped_outcome

    # Unchanged since the last full check: no parsing, no import of cryptography.
    stamped = stamped_outcome(step, root=ctx.root, now=ctx.clock.time())
    if stamped is not None:
        return stamped
    from noderole.certs import ensure_certificate

    try:
        # A CA not valid yet by this node's clock is waited for (noderole.certs.CLOCK_WAIT): the
        # wait is announced as a wait's is, and ends when what this service needs has failed.
        outcome = ensure_certificate(
            step, root=ctx.root, clock=ctx.clock, waiting=ctx.progress, cancel=ctx.cancel
        )
    except WaitCancelled:
        raise
    except NoderoleError as exc:
        raise StepError(step.failure_message.format(reason=exc)) from exc
    except OSError as exc:
        # Name the path: an error raised on a descriptor carries its number as the file name.
        where = exc.filename if isinstance(exc.filename, str) and exc.filename else step.directory
        reason = f"{where}: {exc.strerror or exc}"
        raise StepError(step.failure_message.format(reason=reason)) from exc
    if outcome.action == "minted":
        ctx.written.extend([step.cert_path] + ([] if outcome.key_kept else [step.key_path]))
        record(ctx.root, "certificate", [step.cert_path])
        record(ctx.root, "key", [] if outcome.key_kept else [step.key_path])
    return outcome
