"""A CA not valid yet by this node's clock: the mint waits for the clock, bounded; checks do not.

k3s makes its CA valid from the moment it makes it (no backdate). A node that comes up with its
clock behind (a board without a real-time clock starts at its image's build date, and NTP steps
the clock a little later), or a server joining a cluster whose clock trails the first server's by
a few seconds, found that CA "not valid until ...": the certificate step failed at once and
konnectivity-server stayed down until someone ran ``noderole apply`` by hand. The mint now looks
at the clock again about once a second, for ``CLOCK_WAIT`` seconds of the monotonic clock, and
mints at the time the clock reads then; the inspections (``cert check``, ``renew``'s check,
``apply --dry-run``) report at once. Everything runs on fake clocks: no test waits for real time
but the one through the command line, which waits a few seconds of it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography import x509

from noderole.certs import (
    BACKDATE,
    CLOCK_LOOK_AGAIN,
    CLOCK_WAIT,
    LEAF_LIFETIME,
    CANotYetValid,
    ensure_certificate,
)
from noderole.cli import cli
from noderole.clock import FakeClock
from noderole.dryrun import certificate_verdict
from noderole.errors import CertificateError, StepError, WaitCancelled
from noderole.records import CA_CLOCK_WAIT, MintCertificate
from noderole.root import NodeRoot
from noderole.stepcontext import Cancel, StepContext
from noderole.steps import run_step
from noderole.testing import ClusterCA, RecordingBackend, ScratchRoot, load_certificate
from noderole_k3s.testing import K3S_CA_CERT
from tests.test_certs import CA_CERT, CA_KEY, DAY, KONN_DIR, SANS, Node, make_ca, utc
from tests.test_renew import CERT, _App, _plugin
from tests.test_renew import app as app  # the fixture: role r applied once (a stamp recorded)
from tests.test_renew import sans as sans

AWAY = 200 * DAY
"""How far behind a node comes up: its image was built 200 days before it boots."""


class _NtpClock(FakeClock):
    """A fake clock whose wall clock NTP steps forward by ``step`` seconds once ``after`` seconds
    of the monotonic clock have passed (``after=None``: NTP never comes)."""

    def __init__(self, *, wall: float, step: float = 0.0, after: float | None = None) -> None:
        super().__init__(wall=wall)
        self.step = step
        self.step_at = None if after is None else self.monotonic() + after

    def time(self) -> float:
        stepped = self.step_at is not None and self.monotonic() >= self.step_at
        return super().time() + (self.step if stepped else 0.0)


class _InterruptedClock(FakeClock):
    """A fake clock whose first sleep is interrupted (Ctrl-C)."""

    def sleep(self, seconds: float) -> None:
        raise KeyboardInterrupt


def _tree(path: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``path``: its bytes and modification time."""
    return {
        str(p.relative_to(path)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def _age(node: Node) -> None:
    """Date the CA files a minute back: no CA still being written (``CA_SETTLE``), which is
    read again for a second whatever its fault."""
    old = node.clock.time() - 60
    for path in (CA_CERT, CA_KEY):
        os.utime(node.root.resolve(path), (old, old))


def _when(seconds: float | dt.datetime) -> str:
    moment = seconds if isinstance(seconds, dt.datetime) else utc(seconds)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _leaf(node: Node) -> x509.Certificate:
    return node.pair()[0]


class TestTheMintWaitsForTheClock:
    def test_a_ca_valid_in_20_seconds_is_waited_for_then_minted_from_then(
        self, tmp_path: Path
    ) -> None:
        """A server joining with its clock 20 s behind the first server's: the CA is valid 20 s
        from now by this clock. The mint waits (told once, naming the CA and both times), and
        mints once the clock passes the CA's notBefore, the leaf dated by the clock then (from
        the CA's notBefore, for a year). Before: `is not valid until ...`, at once, for good."""
        node = Node(tmp_path)
        start_wall, start = node.clock.time(), node.clock.monotonic()
        ca, key = make_ca(now=start_wall, days_before=-20 / DAY)
        node.install_ca(ca, key)
        told: list[str] = []
        outcome = ensure_certificate(
            node.request(), root=node.root, clock=node.clock, waiting=told.append
        )
        assert outcome.action == "minted"
        waited = node.clock.monotonic() - start
        assert 19.0 <= waited <= 20.0  # X.509 keeps whole seconds: 19 to 20 s ahead
        assert told == [
            f"waiting for this node's clock to reach {_when(ca.not_valid_before_utc)}, when CA "
            f"certificate {node.root.local(CA_CERT)} becomes valid (it reads {_when(start_wall)}; "
            f"up to {CLOCK_WAIT:g}s)"
        ]
        leaf = _leaf(node)
        leaf.verify_directly_issued_by(ca)
        assert leaf.not_valid_before_utc == ca.not_valid_before_utc
        assert leaf.not_valid_after_utc == ca.not_valid_before_utc + LEAF_LIFETIME
        assert leaf.not_valid_before_utc <= utc(node.clock.time()) < leaf.not_valid_after_utc

    def test_ntp_stepping_the_clock_mid_wait_ends_it_and_the_leaf_is_dated_by_it(
        self, tmp_path: Path
    ) -> None:
        """A board that boots at its image's build date, 200 days behind, and a CA made a day
        ago: NTP steps the clock 3 s into the wait (200 days forward, 3 s of monotonic time).
        The wait ends within a look of the step, and the leaf is dated by the corrected clock
        (now - 1 h), not by the clock the wait began with."""
        real = time.time()
        clock = _NtpClock(wall=real - AWAY, step=AWAY, after=3.0)
        node = Node(tmp_path, clock=clock)
        ca, key = make_ca(now=real, days_before=1)
        node.install_ca(ca, key)
        start = clock.monotonic()
        assert node.ensure().action == "minted"
        assert 3.0 <= clock.monotonic() - start <= 3.0 + CLOCK_LOOK_AGAIN
        leaf = _leaf(node)
        corrected = utc(clock.time()).replace(microsecond=0)
        assert corrected > utc(real)  # the clock the mint used is the stepped one
        assert leaf.not_valid_before_utc == corrected - BACKDATE
        assert leaf.not_valid_after_utc == corrected - BACKDATE + LEAF_LIFETIME

    def test_a_clock_never_set_fails_after_clock_wait_and_writes_nothing(
        self, tmp_path: Path
    ) -> None:
        """The pair was minted on an earlier boot; this boot's clock is 200 days behind and NTP
        never comes. After CLOCK_WAIT seconds of the monotonic clock: the error names the CA,
        its notBefore, this node's time, the wait and the fix; the pair, its stamp and the CA
        are left byte for byte."""
        node = Node(tmp_path)
        ca, key = make_ca(now=node.clock.time(), days_before=1)
        node.install_ca(ca, key)
        assert node.ensure().action == "minted"
        before = _tree(tmp_path)
        behind = _NtpClock(wall=node.clock.time() - AWAY)
        node.clock = behind
        start = behind.monotonic()
        with pytest.raises(CANotYetValid) as info:
            node.ensure()
        assert CLOCK_WAIT <= behind.monotonic() - start <= CLOCK_WAIT + CLOCK_LOOK_AGAIN
        assert str(info.value) == (
            f"CA certificate {node.root.local(CA_CERT)} is not valid until "
            f"{_when(ca.not_valid_before_utc)}, and this node's clock reads "
            f"{_when(behind.time())}: the clock is behind (waited 120 s for it to be set, by NTP "
            f"for instance); set the clock, then run `noderole apply`"
        )
        assert isinstance(info.value, CertificateError)  # exit 7, as before
        assert info.value.waited == CLOCK_WAIT
        assert _tree(tmp_path) == before

    def test_the_step_announces_the_wait_and_a_valid_ca_announces_nothing(
        self, tmp_path: Path
    ) -> None:
        """Through the pre-start step, as apply runs it: the wait is one progress line (which
        lets apply run the services ready meanwhile); a CA valid at the first look says nothing
        new and waits for nothing."""
        node = Node(tmp_path)
        ca, key = make_ca(now=node.clock.time(), days_before=-5 / DAY)
        node.install_ca(ca, key)
        told: list[str] = []
        ctx = StepContext(service="s", root=node.root, clock=node.clock, progress=told.append)
        result = run_step(node.request(), ctx)
        assert result.certificate is not None
        assert result.certificate.action == "minted"
        assert len(told) == 1
        assert told[0].startswith("waiting for this node's clock to reach ")
        told.clear()
        start = node.clock.monotonic()
        again = run_step(node.request(renew_before_days=89), ctx)  # past the stamp's shortcut
        assert again.certificate is not None
        assert again.certificate.action == "reused"
        assert (told, node.clock.monotonic()) == ([], start)

    def test_a_cancelled_apply_ends_the_wait(self, tmp_path: Path) -> None:
        """What the service needs failed (or the apply was interrupted): the step's wait for the
        clock ends as a wait does, WaitCancelled with the cause (the service is then skipped,
        not failed), long before CLOCK_WAIT, and nothing is written."""
        cancel = Cancel()

        class _Cancelling(FakeClock):
            def sleep(self, seconds: float) -> None:
                super().sleep(seconds)
                if self.monotonic() - start >= 2.0:
                    cancel.cancel("k3s failed: exit 1")

        node = Node(tmp_path, clock=_Cancelling(wall=time.time()))
        start = node.clock.monotonic()
        node.install_ca(*make_ca(now=node.clock.time(), days_before=-1))
        ctx = StepContext(service="s", root=node.root, clock=node.clock, cancel=cancel)
        with pytest.raises(WaitCancelled, match=r"^k3s failed: exit 1$"):
            run_step(node.request(), ctx)
        assert node.clock.monotonic() - start < 3.0
        assert not node.dir.exists()

    def test_an_interrupt_passes_through(self, tmp_path: Path) -> None:
        """Ctrl-C during the wait is a KeyboardInterrupt, never a certificate error."""
        node = Node(tmp_path, clock=_InterruptedClock(wall=time.time()))
        node.install_ca(*make_ca(now=node.clock.time(), days_before=-1))
        _age(node)
        with pytest.raises(KeyboardInterrupt):
            node.ensure()
        assert not node.dir.exists()

    def test_apply_after_a_reboot_behind_waits_then_reuses_the_pair(
        self, app: _App, sans: list[str], node_root: ScratchRoot
    ) -> None:
        """The tester's case: the node reboots 200 days behind, NTP steps the clock 3 s into
        the apply. The step waits for it, then reuses the pair minted at the earlier boot (it
        is good by the corrected clock), and the service starts. Before: `failed to mint
        serving cert: CA certificate ... is not valid until ...`, and nothing restarted it."""
        real = time.time()
        clock = _NtpClock(wall=real - AWAY, step=AWAY, after=3.0)
        rebooted = _App(
            root=NodeRoot(node_root.path),
            clock=clock,
            plugin_objects=(("certplugin", _plugin(sans)),),
            autoload=False,
        )
        rebooted.recorder = RecordingBackend(node_root)  # a fresh boot: nothing runs
        before = node_root.read(CERT)
        report = rebooted.apply(rebooted.plan("r"), rebooted.recorder)
        assert report.ok, report
        proxy = {s.name: s for s in report.services}["proxy"]
        assert proxy.status == "started", proxy
        assert node_root.read(CERT) == before
        (mint,) = [t for t in proxy.steps if t.kind == "certificate"]
        assert mint.detail.startswith("reused: valid until ")
        assert 3.0 <= mint.seconds <= 3.0 + CLOCK_LOOK_AGAIN


class TestOnlyTheClockIsWaitedFor:
    @pytest.mark.parametrize(
        ("fault", "message"),
        [
            ("expired", r"server-ca\.crt expired on "),
            ("not a CA", r"server-ca\.crt is not a CA "),
            ("key of another CA, not valid yet", r"server-ca\.key does not match CA certificate"),
        ],
    )
    def test_other_faults_of_the_ca_fail_at_once(
        self, tmp_path: Path, fault: str, message: str
    ) -> None:
        """Expiry, a certificate that is no CA, a key that does not match: time mends none of
        them, so none is waited for, even in a CA that is not valid yet either (the key is
        named, not the clock). Before, the key of a CA not valid yet was never looked at: the
        clock was named."""
        node = Node(tmp_path)
        now = node.clock.time()
        if fault == "expired":
            node.install_ca(*make_ca(now=now, days_before=400, days_after=-1))
        elif fault == "not a CA":
            node.install_ca(*make_ca(now=now, days_before=-1, ca=False))
        else:
            other = make_ca(now=now)[1]
            node.install_ca(make_ca(now=now, days_before=-1)[0], other)
        _age(node)
        told: list[str] = []
        start = node.clock.monotonic()
        with pytest.raises(CertificateError, match=message) as info:
            ensure_certificate(
                node.request(), root=node.root, clock=node.clock, waiting=told.append
            )
        assert not isinstance(info.value, CANotYetValid)
        assert (node.clock.monotonic(), told) == (start, [])


class TestTheChecksDoNotWait:
    """``cert check --role``, ``renew``'s check and ``apply --dry-run`` are inspections: they
    report a CA not valid yet at once, with this node's time, and never wait."""

    @staticmethod
    def _rebooted_behind(app: _App, sans: list[str], node_root: ScratchRoot) -> _App:
        """The same node, booted again with its clock 200 days behind."""
        behind = _App(
            root=NodeRoot(node_root.path),
            clock=FakeClock(wall=time.time() - AWAY),
            plugin_objects=(("certplugin", _plugin(sans)),),
            autoload=False,
        )
        behind.recorder = app.recorder
        return behind

    def _expected(self, node_root: ScratchRoot, k3s_ca: ClusterCA, clock: FakeClock) -> str:
        not_before = load_certificate(k3s_ca.cert_file).not_valid_before_utc
        return (
            f"CA certificate {node_root.resolve(K3S_CA_CERT)} is not valid until "
            f"{_when(not_before)}; check this node's clock (it reads {_when(clock.time())})"
        )

    def test_cert_check_role_reports_at_once(
        self, app: _App, sans: list[str], node_root: ScratchRoot, k3s_ca: ClusterCA
    ) -> None:
        behind = self._rebooted_behind(app, sans, node_root)
        clock = behind.clock
        assert isinstance(clock, FakeClock)
        start = clock.monotonic()
        checked = CliRunner().invoke(cli, ["cert", "check", "--role", "r", "--json"], obj=behind)
        assert checked.exit_code == 1, checked.output
        (check,) = json.loads(checked.stdout)
        assert check["error"] == self._expected(node_root, k3s_ca, clock)
        assert clock.monotonic() == start

    def test_the_dry_run_says_apply_would_wait(
        self, app: _App, sans: list[str], node_root: ScratchRoot, k3s_ca: ClusterCA
    ) -> None:
        behind = self._rebooted_behind(app, sans, node_root)
        clock = behind.clock
        assert isinstance(clock, FakeClock)
        start = clock.monotonic()
        rows = {row["name"]: row for row in behind.dry_run(behind.plan("r"), behind.recorder)}
        verdict = (
            f"would wait up to 120s for this node's clock: "
            f"{self._expected(node_root, k3s_ca, clock)}"
        )
        assert rows["proxy"]["certificates"] == [{"path": CERT, "verdict": verdict}]
        (step,) = [
            s for s in behind.plan("r")["proxy"].service.pre_start if isinstance(s, MintCertificate)
        ]
        assert certificate_verdict(step, root=behind.root, clock=clock) == verdict
        assert clock.monotonic() == start

    def test_renew_reports_at_once_and_leaves_the_service(
        self, app: _App, sans: list[str], node_root: ScratchRoot, k3s_ca: ClusterCA
    ) -> None:
        """renew checks before it re-mints: a CA not valid yet fails that service's renewal
        at once (its process untouched); its schedule runs it again."""
        behind = self._rebooted_behind(app, sans, node_root)
        clock = behind.clock
        assert isinstance(clock, FakeClock)
        before = node_root.read(CERT)
        start = clock.monotonic()
        report = behind.renew(behind.plan("r"), behind.recorder)
        (proxy,) = report.services
        assert proxy.status == "failed"
        expected = self._expected(node_root, k3s_ca, clock)
        assert proxy.reason == f"cannot renew: {CERT}: {expected}"
        assert clock.monotonic() - start < 1.0
        assert node_root.read(CERT) == before


class TestUnderSystemd:
    def test_the_start_timeout_leaves_room_for_the_clock(self) -> None:
        """systemd's TimeoutStartSec counts a certificate step's wait for the clock (120 s) with
        the waits: konnectivity-server's 120 s wait for k3s's CA, the mint's wait, and 90 s of
        headroom. Before, 210 s: systemd killed the pre-start (`start-pre timed out`) before the
        mint's own message could say what was wrong."""
        from noderole.records import Service, WaitForPaths
        from noderole.render.systemd import render_unit

        assert CA_CLOCK_WAIT == CLOCK_WAIT == 120.0
        mint = MintCertificate(
            directory=KONN_DIR,
            ca_cert=CA_CERT,
            ca_key=CA_KEY,
            common_name="konnectivity-server",
            sans=(SANS,),
        )
        wait = WaitForPaths(paths=[CA_CERT, CA_KEY], timeout=120)
        unit = render_unit(Service(name="s", command=["/bin/true"], pre_start=[wait, mint]))
        assert "TimeoutStartSec=330\n" in unit


class TestThroughTheCommandLine:
    def test_cert_mint_waits_for_a_ca_a_moment_ahead(self, tmp_path: Path) -> None:
        """`noderole --root R cert mint` as its own process, on the real clock, with a CA valid
        from a few seconds after the command starts (a server joining whose clock trails the
        first server's): it says it waits, then mints, exit 0. Before: exit 7 at once. The run
        is bounded by a timeout; nothing is timed."""
        node = Node(tmp_path)
        # Whole seconds, as X.509 keeps them: 3 to 4 s ahead, time enough for the command to
        # start on a loaded machine and find the CA not valid yet.
        ahead = int(time.time()) + 4
        ca, key = make_ca(now=ahead, days_before=0)
        node.install_ca(ca, key)
        argv = [sys.executable, "-m", "noderole", "--root", str(tmp_path), "cert", "mint",
                "--dir", KONN_DIR, "--ca-cert", CA_CERT, "--ca-key", CA_KEY,
                "--cn", "konnectivity-server", "--sans", SANS]  # fmt: skip
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=60,  # subprocess.run kills the command if it is not done by then
            env={**os.environ, "NODEROLE_ROOT": str(tmp_path)},
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout == f"{KONN_DIR}/tls.crt\t{KONN_DIR}/tls.key\n"
        waiting, minted = done.stderr.splitlines()
        assert waiting.startswith(
            f"waiting for this node's clock to reach {_when(ca.not_valid_before_utc)}, when CA "
            f"certificate {node.root.local(CA_CERT)} becomes valid (it reads "
        )
        assert minted == "minted: no existing certificate"
        leaf = _leaf(node)
        leaf.verify_directly_issued_by(ca)
        assert leaf.not_valid_before_utc == ca.not_valid_before_utc


def test_step_errors_keep_their_wording(tmp_path: Path) -> None:
    """Past the bound the step fails as any failed mint, with the plugin's words around the
    reason (konnectivity: `failed to mint konnectivity serving cert: CA certificate ...`)."""
    node = Node(tmp_path, clock=_NtpClock(wall=time.time() - AWAY))
    node.install_ca(*make_ca(now=time.time(), days_before=1))
    ctx = StepContext(service="s", root=node.root, clock=node.clock)
    step = node.request(failure_message="failed to mint konnectivity serving cert: {reason}")
    with pytest.raises(StepError) as info:
        run_step(step, ctx)
    assert not isinstance(info.value, WaitCancelled)
    text = str(info.value)
    assert text.startswith(
        f"failed to mint konnectivity serving cert: CA certificate {node.root.local(CA_CERT)} "
        "is not valid until "
    )
    assert text.endswith("set the clock, then run `noderole apply`")
