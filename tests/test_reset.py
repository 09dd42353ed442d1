"""`noderole reset` and the manifest of what noderole wrote.

Apply (pre-start steps for real under a scratch root, a recording backend) and render write
files; reset --dry-run lists them, reset removes exactly those, a file planted beside them
survives, a second reset changes nothing, --purge takes the minted key and certificate too.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import types
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import noderole
from noderole.backends import Backend
from noderole.cli import cli
from noderole.cli._app import App
from noderole.clock import FakeClock
from noderole.manifest import MANIFEST, entries, record, record_processes
from noderole.root import NodeRoot
from noderole.stepcontext import StepContext
from noderole.testing import (
    ClusterCA,
    RecordingBackend,
    ScratchRoot,
)
from noderole_k3s.testing import K3S_CA_CERT, K3S_CA_KEY

DROP_IN = "/etc/proxy/conf.d/10-noderole.yaml"
CERT = "/var/lib/proxy/tls.crt"
KEY = "/var/lib/proxy/tls.key"
EXTRA = "/etc/proxy/extra.conf"


def _write_extra(ctx: StepContext) -> None:
    """A plugin's own function that writes a file and says so (``ctx.written``)."""
    ctx.resolve("/etc/proxy").mkdir(parents=True, exist_ok=True)
    ctx.resolve(EXTRA).write_text("extra\n")
    ctx.written.append(EXTRA)


def _plugin() -> types.ModuleType:
    """``proxy`` writes a drop-in, makes its directory and mints a certificate; has a pidfile."""
    module = types.ModuleType("resetplugin")

    def noderole_services() -> list[noderole.Service]:
        return [
            noderole.Service(
                name="proxy",
                roles=["r"],
                command=["/bin/proxy"],
                pidfile="/run/proxy.pid",
                output_log="/var/log/proxy.log",
                pre_start=[
                    noderole.MakeDirectories(paths=["/var/lib/proxy"], mode=0o700),
                    noderole.WriteFile(path=DROP_IN, content="listen: 1\n"),
                    noderole.Call(function=_write_extra, description="write extra.conf"),
                    noderole.MintCertificate(
                        directory="/var/lib/proxy",
                        ca_cert=K3S_CA_CERT,
                        ca_key=K3S_CA_KEY,
                        common_name="proxy",
                        sans=["proxy.example.com"],
                    ),
                ],
            )
        ]

    module.noderole_services = noderole.hookimpl(noderole_services)  # type: ignore[attr-defined]
    return module


class _App(App):
    recorder: RecordingBackend

    def backend(self, requested: str = "auto") -> Backend:
        return self.recorder


def _tree(root: Path) -> dict[str, str]:
    """Every path under ``root`` -> what it is (content digest of files, link target, dir)."""
    found = {}
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(base, name)
            key = str(path.relative_to(root))
            if path.is_symlink():
                found[key] = f"link:{os.readlink(path)}"
            elif path.is_dir():
                found[key] = "dir"
            else:
                found[key] = path.read_bytes().hex()
    return found


@pytest.fixture
def app(node_root: ScratchRoot, k3s_ca: ClusterCA, fake_clock: FakeClock) -> _App:
    """Role ``r`` applied (recording backend) and rendered for OpenRC, on a scratch root."""
    made = _App(
        root=NodeRoot(node_root.path),
        clock=fake_clock,
        plugin_objects=(("resetplugin", _plugin()),),
        autoload=False,
    )
    made.recorder = RecordingBackend(node_root)
    assert made.apply(made.plan("r"), made.recorder).ok
    made.render("r", "openrc")
    return made


WRITTEN = {
    "/etc/init.d/proxy",
    "/etc/runlevels/default/proxy",
    "/etc/periodic/daily/noderole-renew",
    "/etc/logrotate.d/noderole",
    DROP_IN,
    EXTRA,
    "/var/lib/noderole/role",
    "/var/lib/noderole/applied.json",
    "/var/lib/noderole/last-apply.json",
    "/var/lib/noderole/plan.json",
    "/var/lib/noderole/rendered-openrc.json",
    "/run/noderole/apply.lock",
    "/run/noderole",
    "/var/lib/noderole",
}
"""What apply and render wrote that reset removes by default."""


class TestReset:
    def test_dry_run_lists_and_changes_nothing(self, app: _App, node_root: ScratchRoot) -> None:
        """--dry-run names the services to stop and every path to remove; nothing changes."""
        before = _tree(node_root.path)
        report = app.reset(None, None, dry_run=True)
        assert report.stopped == ("proxy",)
        stamps = {p for p in report.to_remove if p.startswith("/var/lib/noderole/certs")}
        assert stamps, "the certificate stamp and its directory are noderole's to remove"
        assert set(report.to_remove) - stamps == WRITTEN
        kept = {k.path: k.reason for k in report.kept}
        assert set(kept) == {CERT, KEY, "/var/lib/proxy"}
        assert "reset --purge removes it" in kept[KEY]
        assert _tree(node_root.path) == before
        assert app.recorder.stopped == []

    def test_dry_run_names_only_the_services_the_reset_would_stop(
        self, app: _App, node_root: ScratchRoot
    ) -> None:
        """Given the backend, --dry-run asks it (changing nothing) and names what the reset
        itself would report stopped: a service already stopped is not listed. Before, it
        listed every service of the role, where the reset then stopped none."""
        app.recorder.stop(["proxy"])
        dry = app.reset(None, app.recorder, dry_run=True)
        assert dry.stopped == ()
        output = CliRunner().invoke(cli, ["reset", "--dry-run"], obj=app).stdout
        assert "would stop" not in output
        assert f"would remove {DROP_IN}" in output
        assert app.recorder.stopped == ["proxy"]  # the stop above, nothing more
        assert app.reset(None, app.recorder).stopped == ()

    def test_removes_exactly_what_it_wrote(self, app: _App, node_root: ScratchRoot) -> None:
        """Reset stops the role and removes the listed paths; planted files and keys stay."""
        planted = ["/etc/init.d/users-own", "/etc/proxy/conf.d/20-user.yaml", "/var/lib/noderole/x"]
        for path in planted:
            node_root.write(path, "mine\n")
        listed = set(app.reset(None, None, dry_run=True).to_remove)
        before = _tree(node_root.path)
        report = app.reset(None, app.recorder)
        assert app.recorder.stopped == ["proxy"]
        # /var/lib/noderole holds a planted file: it stays (listed "when empty").
        assert set(report.removed) == listed - {"/var/lib/noderole"}
        after = _tree(node_root.path)
        gone = {"/" + p for p in set(before) - set(after)}
        assert gone == listed - {"/var/lib/noderole"}
        for path in planted:
            assert node_root.read(path) == "mine\n"
        assert node_root.exists(CERT)
        assert node_root.exists(KEY)

    def test_noderoles_own_records_go_though_an_older_noderole_wrote_them(
        self, app: _App, node_root: ScratchRoot
    ) -> None:
        """A node first applied by a noderole older than the record of what it writes: its
        role, plan and fingerprints are rewritten only when they change, so they never entered
        the record, and reset left them: the node still had a role, and the next apply with
        none applied it instead of asking the first-boot inputs. noderole's own records are
        removed whatever the record says."""
        from noderole import manifest
        from noderole.backends._initsystem import FINGERPRINTS
        from noderole.manifest import forget
        from noderole.paths import APPLIED_FILE, LAST_APPLY_FILE, ROLE_FILE
        from noderole.recorded import PLAN_FILE

        assert {PLAN_FILE, FINGERPRINTS} <= set(manifest._OWN_RECORDS)  # the same paths
        own = [ROLE_FILE, APPLIED_FILE, LAST_APPLY_FILE, PLAN_FILE]
        assert all(node_root.exists(path) for path in own)
        forget(NodeRoot(node_root.path), own)
        report = app.reset(None, app.recorder)
        assert set(own) <= set(report.removed)
        assert not any(node_root.exists(path) for path in own)

    def test_second_reset_is_a_no_op(self, app: _App, node_root: ScratchRoot) -> None:
        """After a reset, another one removes nothing and leaves the tree as it was."""
        first = app.reset(None, app.recorder)
        assert first.stopped == ("proxy",)
        before = _tree(node_root.path)
        again = app.reset("r", app.recorder)
        assert again.removed == ()
        assert _tree(node_root.path) == before
        # Nothing ran any more: before, it said "stopped proxy" all the same, as `stop` does
        # not ("Not running: proxy").
        assert again.stopped == ()

    def test_purge_removes_keys_and_empty_directories(
        self, app: _App, node_root: ScratchRoot
    ) -> None:
        """--purge removes the minted key and certificate and the directory made for them."""
        report = app.reset(None, app.recorder, purge=True)
        assert {CERT, KEY, "/var/lib/proxy"} <= set(report.removed)
        assert not node_root.exists("/var/lib/proxy")
        assert not node_root.exists("/var/lib/noderole")
        assert entries(app.root) == {}

    def test_purge_keeps_a_directory_with_data(self, app: _App, node_root: ScratchRoot) -> None:
        """A directory noderole made but a service filled stays, and stays recorded."""
        node_root.write("/var/lib/proxy/data.db", "rows\n")
        report = app.reset(None, app.recorder, purge=True)
        assert "/var/lib/proxy" not in report.removed
        assert node_root.read("/var/lib/proxy/data.db") == "rows\n"
        assert "/var/lib/proxy" in entries(app.root)
        # Said, not silent: before, the report listed neither a removal nor a kept path, and a
        # purged node kept the directory and /var/lib/noderole/written.jsonl without a word.
        kept = {k.path: k.reason for k in report.kept}
        assert kept["/var/lib/proxy"] == (
            "kept: not empty (data.db is not noderole's): empty it and reset again, "
            "or remove it yourself"
        )

    def test_purge_names_what_a_kept_directory_holds(
        self, app: _App, node_root: ScratchRoot
    ) -> None:
        """The command says which directory stayed and why, naming a few of its entries."""
        for name in ("a.sock", "b.db", "c.log", "d.tmp"):
            node_root.write(f"/var/lib/proxy/{name}", "x\n")
        done = CliRunner().invoke(cli, ["reset", "--purge"], obj=app)
        assert done.exit_code == 0, done.output
        assert (
            "kept /var/lib/proxy: not empty (a.sock, b.db, c.log and 1 more are not "
            "noderole's): empty it and reset again, or remove it yourself"
        ) in done.stdout.splitlines()

    def test_a_kept_directorys_names_reach_the_terminal_inert(
        self, app: _App, node_root: ScratchRoot
    ) -> None:
        """A service's user names a file in his directory with a terminal sequence (a window
        title) or bytes that are not UTF-8: `reset` printed them raw on root's terminal, as
        `status` once did log lines. Now written out, as `status` writes them."""
        node_root.write("/var/lib/proxy/\x1b]0;owned\x07", "x\n")
        (node_root.path / "var/lib/proxy").joinpath(os.fsdecode(b"caf\xe9")).write_text("x\n")
        done = CliRunner().invoke(cli, ["reset", "--purge"], obj=app)
        assert done.exit_code == 0, done.output
        (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("kept /var/lib/proxy")]
        assert line == (
            "kept /var/lib/proxy: not empty (\\x1b]0;owned\\x07 and caf\\xe9 are not "
            "noderole's): empty it and reset again, or remove it yourself"
        )

    def test_changed_file_is_kept(self, app: _App, node_root: ScratchRoot) -> None:
        """A runscript edited since render is not removed; the reason says why."""
        node_root.write("/etc/init.d/proxy", "#!/sbin/openrc-run\n# edited by hand\n", mode=0o755)
        report = app.reset(None, app.recorder)
        assert "/etc/init.d/proxy" not in report.removed
        (kept,) = [k for k in report.kept if k.path == "/etc/init.d/proxy"]
        assert "changed since noderole wrote it" in kept.reason
        assert "edited by hand" in node_root.read("/etc/init.d/proxy")

    def test_cli(self, app: _App, node_root: ScratchRoot) -> None:
        """`reset --dry-run` prints what it would do; `reset --json` what it did."""
        runner = CliRunner()
        dry = runner.invoke(cli, ["reset", "--dry-run"], obj=app)
        assert dry.exit_code == 0, dry.output
        assert "would stop proxy" in dry.stdout
        assert f"would remove {DROP_IN}" in dry.stdout
        assert f"kept {KEY}:" in dry.stdout
        done = runner.invoke(cli, ["reset", "--json"], obj=app)
        assert done.exit_code == 0, done.output
        document = json.loads(done.stdout)
        assert document["stopped"] == ["proxy"]
        # The manifest stays in /var/lib/noderole: it still records the kept key.
        removed = {p for p in document["removed"] if not p.startswith("/var/lib/noderole/certs")}
        assert removed == WRITTEN - {"/var/lib/noderole"}
        again = runner.invoke(cli, ["reset"], obj=app)
        assert "kept" in again.stdout
        assert "removed" not in again.stdout


class TestNothingToReset:
    def test_fresh_node(self, node_root: ScratchRoot, fake_clock: FakeClock) -> None:
        """A node noderole never touched: nothing to stop, nothing removed, nothing created."""
        app = _App(root=NodeRoot(node_root.path), clock=fake_clock, autoload=False)
        app.recorder = RecordingBackend(node_root)
        result = CliRunner().invoke(cli, ["reset"], obj=app)
        assert result.exit_code == 0, result.output
        assert result.stdout == "nothing to reset\n"
        assert list(node_root.path.iterdir()) == []

    def test_lock_left_by_renew_on_a_node_never_applied(
        self, node_root: ScratchRoot, fake_clock: FakeClock
    ) -> None:
        """Only the node lock left (a renew before any apply): dry run and reset both remove it."""
        from noderole.paths import LOCK_FILE
        from noderole.state import node_lock

        app = _App(root=NodeRoot(node_root.path), clock=fake_clock, autoload=False)
        app.recorder = RecordingBackend(node_root)
        with node_lock(app.root, timeout=1, clock=fake_clock, what="renew"):
            pass
        runner = CliRunner()
        dry = runner.invoke(cli, ["reset", "--dry-run"], obj=app)
        assert dry.exit_code == 0, dry.output
        assert dry.stdout == f"would remove {LOCK_FILE}\nwould remove /run/noderole (when empty)\n"
        done = runner.invoke(cli, ["reset"], obj=app)
        assert done.exit_code == 0, done.output
        assert done.stdout == f"removed {LOCK_FILE}\nremoved /run/noderole\n"
        assert list(node_root.path.iterdir()) == [node_root.path / "run"]
        again = runner.invoke(cli, ["reset"], obj=app)
        assert again.stdout == "nothing to reset\n"


class TestRecordedRoleGone:
    def test_reset_without_the_roles_plugin(
        self, node_root: ScratchRoot, fake_clock: FakeClock, k3s_ca: ClusterCA
    ) -> None:
        """The recorded role's plugin was uninstalled: reset still removes what noderole wrote;
        naming that role explicitly is an error."""
        app = _App(
            root=NodeRoot(node_root.path),
            clock=fake_clock,
            plugin_objects=(("resetplugin", _plugin()),),
            autoload=False,
        )
        app.recorder = RecordingBackend(node_root)
        assert app.apply(app.plan("r"), app.recorder).ok
        bare = _App(root=NodeRoot(node_root.path), clock=fake_clock, autoload=False)
        bare.recorder = app.recorder
        report = bare.reset(None, bare.recorder)
        assert report.stopped == ()
        assert DROP_IN in report.removed
        assert not node_root.exists(DROP_IN)
        with pytest.raises(noderole.errors.PlanError, match="unknown role 'r'"):
            bare.reset("r", bare.recorder)


_MANIFEST_LINES = [
    '{"path":"/etc/a","kind":"file","digest":"sha256:1"}',
    '{"path":"/etc/a","kind":"file","digest":"sha256:2"}',
    '{"path":"/etc/b","kind":"log","digest":"any"}',
    '{"path":"/etc/b","kind":"fi',
    '{"path":"relative","kind":"file","digest":"any"}',
    '{"path":"/etc/c","kind":"file"}',
    '{"path":"/etc/c","kind":"file","digest":"any","since":"future"}',
    '{"path":7,"kind":"file","digest":"any"}',
    '{"path":"/etc/g","kind":[],"digest":"any"}',
    '{"path":"/etc/g","kind":"file","digest":{"sha256":1}}',
    '{"path":"/etc/h","kind":null,"digest":null}',
    "1,2",
    '{"path":"/etc/d","kind":"dir","digest":"dir"},{"path":"/etc/e","kind":"dir","digest":"dir"}',
    "null",
    '["/etc/f"]',
    '"text"',
    "",
    "   ",
]
"""Manifest lines, good and bad, for the parse's differential test."""


class TestManifest:
    def test_concurrent_records_all_land(self, tmp_path: Path) -> None:
        """Records from many threads at once are all kept (one locked append each)."""
        root = NodeRoot(tmp_path)
        paths = [f"/etc/f{i}" for i in range(40)]
        for path in paths:
            ScratchRoot(tmp_path).write(path, path)
        threads = [threading.Thread(target=record, args=(root, "file", [p])) for p in paths]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert set(entries(root)) == set(paths)

    def test_torn_last_line_is_skipped(self, tmp_path: Path) -> None:
        """A line cut short by a crash is ignored; the ones before it count."""
        root = NodeRoot(tmp_path)
        ScratchRoot(tmp_path).write("/etc/a", "a")
        record(root, "file", ["/etc/a"])
        with open(root.resolve(MANIFEST), "a") as handle:
            handle.write('{"path":"/etc/b","kind":"fi')
        assert set(entries(root)) == {"/etc/a"}

    @settings(max_examples=150, deadline=None)
    @given(lines=st.lists(st.sampled_from(_MANIFEST_LINES), max_size=12))
    def test_read_as_line_by_line(
        self, tmp_path_factory: pytest.TempPathFactory, lines: list[str]
    ) -> None:
        """The manifest is parsed as one JSON array (one parse per apply, not one per line);
        whatever its lines hold (torn ones anywhere, lines that are not objects, two values on
        a line, lines from an unknown future), it reads as a parse of each line alone reads."""
        root = NodeRoot(tmp_path_factory.mktemp("node"))
        manifest = root.resolve(MANIFEST)
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.write_text("".join(line + "\n" for line in lines))
        expected: dict[str, tuple[object, object]] = {}
        for line in lines:
            try:
                item = json.loads(line)
                path, kind, digest = item["path"], item["kind"], item["digest"]
            except (ValueError, KeyError, TypeError):
                continue
            if (
                isinstance(path, str)
                and path.startswith("/")
                and isinstance(kind, str)
                and isinstance(digest, str)
            ):
                expected[path] = (kind, digest)
        assert {p: (e.kind, e.digest) for p, e in entries(root).items()} == expected

    @pytest.mark.parametrize(
        "line",
        [
            '{"path":"/etc/a","kind":[],"digest":"any"}',
            '{"path":"/etc/a","kind":{},"digest":"any"}',
            '{"path":"/etc/a","kind":"file","digest":7}',
        ],
    )
    def test_reset_passes_over_an_entry_of_another_shape(self, tmp_path: Path, line: str) -> None:
        """An entry whose kind or digest is not a string (a disk fault, an editor) is no record:
        reset keeps the file and removes the rest (it failed with 'unhashable type')."""
        root = NodeRoot(tmp_path)
        node = ScratchRoot(tmp_path)
        node.write("/etc/a", "a")
        node.write("/etc/b", "b")
        record(root, "file", ["/etc/b"])
        with open(root.resolve(MANIFEST), "a") as handle:
            handle.write(line + "\n")
        assert set(entries(root)) == {"/etc/b"}
        bare = _App(root=root, autoload=False)
        bare.recorder = RecordingBackend(node)
        report = bare.reset(None, bare.recorder)
        assert "/etc/b" in report.removed
        assert node.exists("/etc/a")

    def test_reset_sweeps_a_killed_writers_temporaries(self, tmp_path: Path) -> None:
        """A render or write killed before its rename left ``.a.<hex>.tmp`` beside the file it
        was replacing; reset removed the file and left the temporary (an executable one in
        /etc/init.d) for good. It now goes with the file, when older than a writer at work
        could leave it; a fresh one and other names stay."""
        from noderole.atomic import STALE_TEMP_AGE

        root = NodeRoot(tmp_path)
        node = ScratchRoot(tmp_path)
        node.write("/etc/init.d/a", "a")
        record(root, "file", ["/etc/init.d/a"])
        stale = tmp_path / "etc/init.d/.a.0123456789ab.tmp"
        fresh = tmp_path / "etc/init.d/.a.aaaaaaaaaaaa.tmp"
        other = tmp_path / "etc/init.d/.b.0123456789ab.tmp"
        for path in (stale, fresh, other):
            path.write_text("x")
        long_ago = time.time() - STALE_TEMP_AGE - 5
        for path in (stale, other):
            os.utime(path, (long_ago, long_ago))
        bare = _App(root=root, autoload=False)
        bare.recorder = RecordingBackend(node)
        report = bare.reset(None, bare.recorder)
        assert "/etc/init.d/a" in report.removed
        assert sorted(os.listdir(tmp_path / "etc/init.d")) == [
            ".a.aaaaaaaaaaaa.tmp",
            ".b.0123456789ab.tmp",
        ]

    def test_unchanged_record_not_appended(self, tmp_path: Path) -> None:
        """Recording the same content twice adds one line; a new content adds another."""
        root = NodeRoot(tmp_path)
        node = ScratchRoot(tmp_path)
        node.write("/etc/a", "one")
        record(root, "file", ["/etc/a"])
        record(root, "file", ["/etc/a"])
        assert len(node.read(MANIFEST).splitlines()) == 1
        node.write("/etc/a", "two")
        record(root, "file", ["/etc/a"])
        assert len(node.read(MANIFEST).splitlines()) == 2

    def test_a_record_changing_every_apply_does_not_grow_the_file(self, tmp_path: Path) -> None:
        """The last apply's record changes on every apply: the manifest stays a few lines per
        path (superseded lines are dropped once they are the most), never one line per apply,
        and it keeps every path's last entry, of every kind."""
        root = NodeRoot(tmp_path)
        node = ScratchRoot(tmp_path)
        for i in range(10):
            node.write(f"/etc/f{i}", f"file {i}")
        record(root, "file", [f"/etc/f{i}" for i in range(10)])
        node.write("/var/log/a.log", "log")
        record(root, "log", ["/var/log/a.log"])
        for i in range(1000):
            node.write("/var/lib/noderole/last-apply.json", f'{{"apply": {i}}}')
            record(root, "state", ["/var/lib/noderole/last-apply.json"])
            assert len(node.read(MANIFEST).splitlines()) <= 64
        found = entries(root)
        assert len(found) == 12
        assert found["/var/log/a.log"].kind == "log"
        assert found["/etc/f9"].kind == "file"
        last = found["/var/lib/noderole/last-apply.json"]
        assert last.kind == "state"
        content = b'{"apply": 999}'
        assert last.digest == "sha256:" + hashlib.sha256(content).hexdigest()
        assert (tmp_path / "var/lib/noderole/written.jsonl").stat().st_mode & 0o777 == 0o600
        assert [p.name for p in (tmp_path / "var/lib/noderole").iterdir() if ".tmp" in p.name] == []

    def test_the_last_apply_record_adds_no_line_per_apply(self, tmp_path: Path) -> None:
        """The last apply's record, rewritten by every apply, is recorded once, as a file whose
        content does not matter to reset."""
        from noderole.paths import LAST_APPLY_FILE
        from noderole.state import write_last_apply

        root = NodeRoot(tmp_path)
        for i in range(5):
            write_last_apply(root, {"apply": i})
        assert len(ScratchRoot(tmp_path).read(MANIFEST).splitlines()) == 1
        assert entries(root)[LAST_APPLY_FILE].digest == "any"

    def test_compaction_under_concurrent_writers_loses_nothing(self, tmp_path: Path) -> None:
        """Writers that wait on the lock while another one replaces the file retry on the new
        file: every path ends with its last record."""
        root = NodeRoot(tmp_path)
        node = ScratchRoot(tmp_path)

        def writer(n: int) -> None:
            for i in range(60):
                node.write(f"/etc/w{n}", f"{n}:{i}")
                record(root, "file", [f"/etc/w{n}"])

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        found = entries(root)
        assert sorted(found) == [f"/etc/w{n}" for n in range(6)]
        for n in range(6):
            expected = hashlib.sha256(f"{n}:59".encode()).hexdigest()
            assert found[f"/etc/w{n}"].digest == f"sha256:{expected}"
        assert len(node.read(MANIFEST).splitlines()) <= 64

    def test_missing_path_not_recorded(self, tmp_path: Path) -> None:
        """A path that holds nothing is not recorded (nothing was written there)."""
        root = NodeRoot(tmp_path)
        record(root, "file", ["/etc/none"])
        assert entries(root) == {}

    def test_processes_recorded_by_kind_once(self, app: _App, node_root: ScratchRoot) -> None:
        """After an apply: pidfile and lock as runtime, the log as log; a second look adds none."""
        node_root.write("/run/proxy.pid", "1\n")
        node_root.write("/var/log/proxy.log", "started\n")
        node_root.write("/run/noderole/state.json", "{}")
        plan = app.plan("r")
        record_processes(app.root, plan, "native")
        found = entries(app.root)
        assert found["/run/proxy.pid"].kind == "runtime"
        assert found["/var/log/proxy.log"].kind == "log"
        assert found["/run/noderole/apply.lock"].kind == "runtime"
        assert found["/run/noderole/state.json"].kind == "runtime"
        assert "/run/noderole/supervisor.pid" not in found  # holds nothing: not recorded
        lines = node_root.read(MANIFEST).splitlines()
        record_processes(app.root, plan, "native")
        assert node_root.read(MANIFEST).splitlines() == lines


class TestTheLockFileRemoved:
    def test_a_waiter_on_the_removed_lock_file_does_not_share_the_lock(
        self, tmp_path: Path
    ) -> None:
        """reset removes the node lock it holds; an apply already waiting on that file then
        gets a lock nobody else can see, while the next run locks the new file: both ran at
        once. The waiter must take the lock of the file at the path, not of the one it opened."""
        from noderole.clock import SystemClock
        from noderole.paths import LOCK_FILE
        from noderole.state import node_lock
        from noderole.testing import eventually

        root = NodeRoot(tmp_path)
        lock = root.local(LOCK_FILE)
        entered, leave = threading.Event(), threading.Event()

        def waiter() -> None:
            with node_lock(root, timeout=30, clock=SystemClock(), what="apply B"):
                entered.set()
                leave.wait(30)

        def fds_on(suffix: str) -> list[str]:
            found = []
            for fd in os.listdir("/proc/self/fd"):
                try:
                    target = os.readlink(f"/proc/self/fd/{fd}")
                except OSError:
                    continue
                if target == lock + suffix:
                    found.append(target)
            return found

        held = node_lock(root, timeout=1, clock=SystemClock(), what="reset")
        held.__enter__()
        thread = threading.Thread(target=waiter, daemon=True)
        thread.start()
        try:
            eventually(lambda: len(fds_on("")) == 2, "the waiter waiting on the lock file")
            os.unlink(lock)  # what reset does with the lock it holds
            with node_lock(root, timeout=1, clock=SystemClock(), what="apply C"):
                held.__exit__(None, None, None)  # reset ends: its (removed) file is free
                eventually(
                    lambda: entered.is_set() or not fds_on(" (deleted)"),
                    "the waiter locking the removed file, or turning to the new one",
                )
                assert not entered.is_set(), "two runs held the node lock at once"
            eventually(entered.is_set, "the waiter taking the lock once C is done")
        finally:
            leave.set()
            thread.join(30)


class TestADamagedManifestLine:
    def test_a_path_that_climbs_out_of_the_root_is_skipped(self, tmp_path: Path) -> None:
        """A manifest line whose path climbs above / (a disk fault, a hand edit): that line is
        no record, like a line of another shape. Before, reset and reset --dry-run ended in a
        ValueError and stopped and removed nothing, until the file was edited by hand."""
        root = NodeRoot(tmp_path)
        (tmp_path / "etc").mkdir()
        (tmp_path / "etc/written").write_text("x")
        record(root, "file", ["/etc/written"])
        with open(tmp_path / MANIFEST.lstrip("/"), "a") as manifest:
            manifest.write('{"path": "/../x", "kind": "state", "digest": "any"}\n')
            manifest.write('{"path": "/etc/../../y", "kind": "state", "digest": "any"}\n')
        assert set(entries(root)) == {"/etc/written"}
