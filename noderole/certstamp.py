"""The certificate reuse check without cryptography, when nothing changed since the last one.

A full reuse check (:func:`noderole.certs.ensure_certificate`) parses the pair and the CA, which
costs the import of ``cryptography.x509`` (about 80 ms) on every ``apply``. Its verdict depends
only on the request, the four files and the time, so after each full check that leaves a good
pair in place (reused or minted) a *stamp* is recorded: the request, the user who checked, each
file's device, inode, size, modification time, mode, owner and link count, one SHA-256 digest of
the four files' contents, and the time window
in which the verdict stays "reuse" (from the check to the start of the renewal window, never past
the CA's own expiry).

The next check reads the four files, and when every part of the stamp still matches and the time
is inside the window, answers "reused" without parsing anything. Any change to the certificate,
the key or the CA (content, inode, size, time, mode, owner or links), to the request, or a clock
outside the window forces the full check. Stamps live in :data:`STAMP_DIR` on the node, one file per
certificate directory; a stamp that cannot be read or written only costs a full check.

Standard library and record classes only: importing this module must not import cryptography.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import stat
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from noderole import recordclass
from noderole.supervisor import _jsontext as jsontext
from noderole.supervisor import sha256  # the interpreter's own: no OpenSSL loaded

if TYPE_CHECKING:
    from pathlib import Path

    from noderole.records import MintCertificate
    from noderole.root import NodeRoot

__all__ = ["STAMP_DIR", "CertOutcome", "file_parts", "record_stamp", "stamped_outcome"]

STAMP_DIR = "/var/lib/noderole/certs"
"""Node directory of the stamps of verified certificates."""
CERT_NAME = "tls.crt"  # noderole.certs.CERT_NAME, repeated so this module need not import it
KEY_NAME = "tls.key"
_FORMAT = 2
"""The stamp's format: 2 records each file's device, owner and link count besides format 1's
inode, size, mtime and mode. A stamp of another format is no shortcut (a full check)."""


def _text(path: str | os.PathLike[str]) -> str:
    # os.fspath itself as the converter: its overloads (str or bytes) leave the field's type to
    # mypy's attrs plugin as a guess it then refuses.
    return os.fspath(path)


@recordclass.frozen(kw_only=True)
class CertOutcome:
    """What :func:`noderole.certs.ensure_certificate` did.

    The two paths are kept as strings and handed out as :class:`~pathlib.Path` objects made
    when asked for: a re-apply answers "reused" from the stamp on every boot, and pathlib (with
    urllib.parse and ipaddress) would be imported for nothing else.
    """

    action: Literal["minted", "reused"]
    """``minted`` when a new certificate was written, ``reused`` when the existing pair stays."""
    reason: str
    """Why: the re-mint reason (``SANs changed: +a -b``), or why the existing pair is good."""
    _cert_path: str = recordclass.field(alias="cert_path", converter=_text)
    """The certificate on this machine (given as ``cert_path=``, a Path or a string)."""
    _key_path: str = recordclass.field(alias="key_path", converter=_text)
    """The key on this machine (given as ``key_path=``, a Path or a string)."""
    not_after: dt.datetime
    """When the certificate in place expires (UTC)."""
    fingerprint: str
    """SHA-256 fingerprint of the certificate in place, lower-case hex."""
    key_kept: bool
    """True when the key file was left as it was (always on reuse; on renewal when sound)."""

    @property
    def cert_path(self) -> Path:
        """The certificate on this machine."""
        from pathlib import Path

        return Path(self._cert_path)

    @property
    def key_path(self) -> Path:
        """The key on this machine."""
        from pathlib import Path

        return Path(self._key_path)


def _paths(request: MintCertificate, root: NodeRoot) -> list[str]:
    directory = root.local(request.directory)
    return [
        os.path.join(directory, CERT_NAME),
        os.path.join(directory, KEY_NAME),
        root.local(request.ca_cert),
        root.local(request.ca_key),
    ]


def _stamp_path(request: MintCertificate, root: NodeRoot) -> str:
    name = sha256(request.directory.encode()).hexdigest()[:32]
    return root.local(f"{STAMP_DIR}/{name}.json")


def _request_key(request: MintCertificate) -> list[Any]:
    return [
        request.directory,
        request.ca_cert,
        request.ca_key,
        request.common_name,
        list(request.sans),
        request.renew_before_days,
    ]


def file_parts(paths: Sequence[str | os.PathLike[str]]) -> list[Any] | None:
    """Each file's [device, inode, size, mtime_ns, mode, owner uid, link count] and one digest
    of all their contents; None when one is missing, unreadable, a symbolic link, not a regular
    file (a FIFO is not waited on, a directory not read) or too large (then check in full).

    The owner and the link count are what the full check judges a key by besides its mode (a
    key of another user's, or with a second name, is replaced): a change to either must fall to
    the full check, as a change of its bytes does."""
    from noderole.reading import read_regular_file  # already imported by the stamp's reading

    digest = sha256()
    parts: list[Any] = []
    for path in paths:
        try:
            data, info = read_regular_file(path, follow_symlinks=False)
        except OSError:
            return None
        parts.append(
            [
                info.st_dev,
                info.st_ino,
                info.st_size,
                info.st_mtime_ns,
                info.st_mode,
                info.st_uid,
                info.st_nlink,
            ]
        )
        digest.update(len(data).to_bytes(8, "big") + data)
    parts.append(digest.hexdigest())
    return parts


def _directory_is_real(request: MintCertificate, root: NodeRoot) -> bool:
    try:
        info = os.lstat(root.local(request.directory))
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode)


def stamped_outcome(request: MintCertificate, *, root: NodeRoot, now: float) -> CertOutcome | None:
    """ "reused", when the stamp of the last full check still holds at ``now`` (epoch seconds);
    None when a full check is needed."""
    from noderole.reading import read_json

    try:
        stamp = read_json(_stamp_path(request, root))
    except (OSError, ValueError):  # no stamp, or a damaged one: a full check
        return None
    if not isinstance(stamp, dict) or stamp.get("format") != _FORMAT:
        return None
    try:
        valid_from, reuse_until = float(stamp["valid_from"]), float(stamp["reuse_until"])
        # A time past what datetime (or time_t) holds raises OverflowError (or OSError).
        not_after = dt.datetime.fromtimestamp(float(stamp["not_after"]), tz=dt.UTC)
        fingerprint = stamp["fingerprint"]
    except (KeyError, TypeError, ValueError, OverflowError, OSError):
        return None
    if not isinstance(fingerprint, str):
        return None
    if not valid_from <= now < reuse_until or stamp.get("request") != _request_key(request):
        return None
    if stamp.get("uid") != os.geteuid():  # the key's owner was judged against who checked
        return None
    if not _directory_is_real(request, root):
        return None
    paths = _paths(request, root)
    if stamp.get("files") != file_parts(paths):
        return None
    days = (not_after - dt.datetime.fromtimestamp(now, tz=dt.UTC)).days
    return CertOutcome(
        action="reused",
        reason=(
            f"valid until {not_after.strftime('%Y-%m-%d %H:%M:%S UTC')} ({days} days left); "
            "unchanged since the last full check"
        ),
        cert_path=paths[0],
        key_path=paths[1],
        not_after=not_after,
        fingerprint=fingerprint,
        key_kept=True,
    )


def record_stamp(
    request: MintCertificate,
    outcome: CertOutcome,
    *,
    root: NodeRoot,
    now: float,
    ca_not_after: dt.datetime,
) -> None:
    """Record that a full check at ``now`` left a good pair: reuse holds until the renewal
    window opens (or the CA expires, if sooner). Best effort: a stamp not written costs only a
    full check next time."""
    reuse_until = min(
        (outcome.not_after - dt.timedelta(days=request.renew_before_days)).timestamp(),
        ca_not_after.timestamp(),
    )
    files = file_parts(_paths(request, root))
    if files is None or reuse_until <= now:
        return
    document = {
        "format": _FORMAT,
        "request": _request_key(request),
        "uid": os.geteuid(),
        "files": files,
        "valid_from": now,
        "reuse_until": reuse_until,
        "not_after": outcome.not_after.timestamp(),
        "fingerprint": outcome.fingerprint,
    }
    path = _stamp_path(request, root)
    directory, name = os.path.split(path)
    scratch = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        # Not fsync-ed, on purpose: this runs between the mint and the start on the boot's
        # critical path, and a stamp lost or torn by a power cut only costs a full check (a torn
        # one does not parse, and a whole one must still match every file's digest).
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(jsontext.dumps(document))
        os.replace(scratch, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(scratch)
