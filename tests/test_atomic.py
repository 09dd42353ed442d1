"""Atomic, crash-safe file writing: exact modes, no symlink following, nothing half-written."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from noderole.atomic import (
    FileSpec,
    open_directory,
    remedy,
    remove_stale_temps,
    write_atomic,
    write_files,
)


class Boom(Exception):
    """Raised by the fault hook."""


@pytest.fixture
def umask() -> Iterator[None]:
    """Run with a strict umask, restoring the old one after."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def steps_of(action: object) -> list[str]:
    names: list[str] = []
    assert callable(action)
    action(names.append)
    return names


class TestWriteAtomic:
    def test_writes_new_file_with_exact_mode(self, tmp_path: Path, umask: None) -> None:
        """The file gets exactly the requested mode, whatever the umask."""
        target = tmp_path / "f"
        write_atomic(target, b"hello", mode=0o644)
        assert target.read_bytes() == b"hello"
        assert target.stat().st_mode & 0o777 == 0o644

    def test_replaces_by_rename(self, tmp_path: Path) -> None:
        """Replacing swaps in a new inode: a reader holding the old file still sees it whole."""
        target = tmp_path / "f"
        target.write_bytes(b"old")
        with target.open("rb") as reader:
            write_atomic(target, b"new", mode=0o600)
            assert reader.read() == b"old"
        assert target.read_bytes() == b"new"
        assert leftovers(tmp_path) == []

    def test_owner_set(self, tmp_path: Path) -> None:
        """uid and gid set the new file's owner."""
        if os.geteuid() != 0:
            pytest.skip("changing a file's owner needs root")
        target = tmp_path / "f"
        write_atomic(target, b"x", mode=0o600, uid=1234, gid=4321)
        info = target.stat()
        assert (info.st_uid, info.st_gid) == (1234, 4321)

    def test_refuses_symlink_target(self, tmp_path: Path) -> None:
        """A symbolic link at the target is refused (ELOOP); the file it points to is untouched."""
        victim = tmp_path / "victim"
        victim.write_bytes(b"precious")
        link = tmp_path / "f"
        link.symlink_to(victim)
        with pytest.raises(OSError, match="symbolic link") as info:
            write_atomic(link, b"evil", mode=0o644)
        assert info.value.errno == errno.ELOOP
        assert victim.read_bytes() == b"precious"
        assert link.is_symlink()
        assert leftovers(tmp_path) == []

    def test_large_data(self, tmp_path: Path) -> None:
        """Data larger than one write is written completely."""
        data = os.urandom(3 * 1024 * 1024)
        write_atomic(tmp_path / "big", data, mode=0o600)
        assert (tmp_path / "big").read_bytes() == data

    def test_steps_named_in_order(self, tmp_path: Path) -> None:
        """The fault hook sees every system-call boundary, in order."""
        names = steps_of(lambda hook: write_atomic(tmp_path / "f", b"x", mode=0o600, step=hook))
        assert names == ["f:create", "f:chmod", "f:write", "f:fsync", "f:close", "f:rename",
                         "f:fsync-dir"]  # fmt: skip

    def test_not_durable_leaves_out_both_syncs(self, tmp_path: Path) -> None:
        """durable=False: the same atomic replacement, without the file's and directory's fsync."""
        target = tmp_path / "f"
        target.write_bytes(b"old")
        names = steps_of(
            lambda hook: write_atomic(target, b"new", mode=0o600, step=hook, durable=False)
        )
        assert names == ["f:create", "f:chmod", "f:write", "f:close", "f:rename"]
        assert target.read_bytes() == b"new"
        assert leftovers(tmp_path) == []

    @pytest.mark.parametrize(
        "fail_at", ["f:create", "f:chmod", "f:write", "f:fsync", "f:close", "f:rename"]
    )
    def test_failure_before_rename_keeps_old(self, tmp_path: Path, fail_at: str) -> None:
        """A failure at any step before the rename leaves the old content and no temporary file."""
        target = tmp_path / "f"
        target.write_bytes(b"old")

        def hook(name: str) -> None:
            if name == fail_at:
                raise Boom(name)

        with pytest.raises(Boom):
            write_atomic(target, b"new", mode=0o600, step=hook)
        assert target.read_bytes() == b"old"
        assert leftovers(tmp_path) == []

    def test_enospc_during_write_keeps_old(self, tmp_path: Path) -> None:
        """An OSError (ENOSPC) while writing propagates; the old file stays, the temp file goes."""
        target = tmp_path / "f"
        target.write_bytes(b"old")

        def hook(name: str) -> None:
            if name == "f:write":
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        with pytest.raises(OSError, match="No space left") as info:
            write_atomic(target, b"new", mode=0o600, step=hook)
        assert info.value.errno == errno.ENOSPC
        assert target.read_bytes() == b"old"
        assert leftovers(tmp_path) == []

    def test_string_path_written_as_a_path_is(self, tmp_path: Path, umask: None) -> None:
        """A path given as a string (as an apply gives it) is written the same way: exact mode,
        same steps, no leftovers; a link there is refused, naming the path."""
        target = tmp_path / "f"
        names = steps_of(lambda hook: write_atomic(str(target), b"x", mode=0o640, step=hook))
        assert names == ["f:create", "f:chmod", "f:write", "f:fsync", "f:close", "f:rename",
                         "f:fsync-dir"]  # fmt: skip
        assert (target.read_bytes(), target.stat().st_mode & 0o777) == (b"x", 0o640)
        (tmp_path / "link").symlink_to(target)
        with pytest.raises(OSError, match="symbolic link") as info:
            write_atomic(str(tmp_path / "link"), b"evil", mode=0o644)
        assert (info.value.errno, info.value.filename) == (errno.ELOOP, str(tmp_path / "link"))
        assert target.read_bytes() == b"x"
        assert sorted(os.listdir(tmp_path)) == ["f", "link"]

    @pytest.mark.parametrize("name", [".", "..", ""])
    def test_string_without_a_file_name_refused(self, tmp_path: Path, name: str) -> None:
        """A string naming no file (``dir/.``, ``dir/..``, ``dir/``) is refused with EINVAL
        before anything is written."""
        with pytest.raises(OSError, match="not a file name") as info:
            write_atomic(f"{tmp_path}/{name}", b"x", mode=0o600)
        assert info.value.errno == errno.EINVAL
        assert os.listdir(tmp_path) == []


class TestOpenDirectory:
    def test_creates_with_mode(self, tmp_path: Path) -> None:
        """A missing directory (and its parents) is created; the directory itself gets mode 0700."""
        target = tmp_path / "a" / "b"
        os.close(open_directory(target, mode=0o700))
        assert target.stat().st_mode & 0o777 == 0o700

    @pytest.mark.parametrize("spelling", ["a/b", "a/b/", "a//b//"])
    def test_string_paths_get_the_mode_too(self, tmp_path: Path, spelling: str) -> None:
        """A string path (what a mint passes), with or without trailing slashes: the parents are
        made, and the directory itself, not a parent, gets exactly the mode asked for."""
        os.close(open_directory(f"{tmp_path}/{spelling}", mode=0o750))
        assert (tmp_path / "a" / "b").stat().st_mode & 0o777 == 0o750

    def test_existing_mode_kept(self, tmp_path: Path) -> None:
        """An existing directory keeps the mode an administrator gave it."""
        target = tmp_path / "d"
        target.mkdir()
        target.chmod(0o755)
        os.close(open_directory(target, mode=0o700))
        assert target.stat().st_mode & 0o777 == 0o755

    def test_refuses_symlinked_directory(self, tmp_path: Path) -> None:
        """A directory that is a symbolic link is refused with ELOOP."""
        real = tmp_path / "real"
        real.mkdir()
        link = tmp_path / "link"
        link.symlink_to(real)
        with pytest.raises(OSError, match="symbolic link") as info:
            open_directory(link)
        assert info.value.errno == errno.ELOOP

    def test_refuses_file(self, tmp_path: Path) -> None:
        """A regular file where the directory should be is refused with ENOTDIR."""
        (tmp_path / "f").write_bytes(b"")
        with pytest.raises(OSError, match="not a directory") as info:
            open_directory(tmp_path / "f")
        assert info.value.errno == errno.ENOTDIR


class TestWriteFiles:
    def test_order_and_modes(self, tmp_path: Path) -> None:
        """Files are written in the order given, each with its own mode."""
        directory = tmp_path / "pki"
        names = steps_of(
            lambda hook: write_files(
                directory,
                [FileSpec(name="k", data=b"K", mode=0o600), FileSpec(name="c", data=b"C",
                                                                      mode=0o644)],
                step=hook,
            )
        )  # fmt: skip
        assert names.index("k:rename") < names.index("c:create")
        assert (directory / "k").stat().st_mode & 0o777 == 0o600
        assert (directory / "c").stat().st_mode & 0o777 == 0o644
        assert directory.stat().st_mode & 0o777 == 0o700

    def test_stale_temps_removed(self, tmp_path: Path) -> None:
        """Temporary files a crashed writer left behind are removed; other files are not."""
        (tmp_path / ".c.0123456789ab.tmp").write_bytes(b"half")
        (tmp_path / ".other.0123456789ab.tmp").write_bytes(b"not ours")
        (tmp_path / ".c.keep.tmp").write_bytes(b"not our pattern")
        write_files(tmp_path, [FileSpec(name="c", data=b"C", mode=0o644)])
        assert leftovers(tmp_path) == [".c.keep.tmp", ".other.0123456789ab.tmp"]

    def test_remove_stale_temps_reports(self, tmp_path: Path) -> None:
        """remove_stale_temps returns the names it removed."""
        (tmp_path / ".c.0123456789ab.tmp").write_bytes(b"half")
        fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            assert remove_stale_temps(fd, ["c"]) == [".c.0123456789ab.tmp"]
        finally:
            os.close(fd)


class TestLastApplyRecord:
    """The last apply's record is a report written without fsync: what a power loss can leave
    of it (nothing, an empty file, a torn one) reads as no record, never as an error."""

    @pytest.mark.parametrize("content", [None, b"", b'{"role": "ser', b"[1, 2]", b"\xff\xfe"])
    def test_whatever_a_power_loss_leaves_reads_as_no_record(
        self, tmp_path: Path, content: bytes | None
    ) -> None:
        from noderole.paths import LAST_APPLY_FILE
        from noderole.root import NodeRoot
        from noderole.state import read_last_apply, write_last_apply

        root = NodeRoot(tmp_path)
        if content is not None:
            path = root.resolve(LAST_APPLY_FILE)
            path.parent.mkdir(parents=True)
            path.write_bytes(content)
        assert read_last_apply(root) == {}
        write_last_apply(root, {"role": "server", "ok": True})
        assert read_last_apply(root) == {"role": "server", "ok": True}


class TestStateTemporaries:
    """A state file's temporary that a killed writer left (SIGTERM or SIGKILL between its
    creation and its rename: found by renewing with signals at random moments, where
    ``.applied.json.<random>.tmp`` stayed in /var/lib/noderole for good)."""

    def test_the_next_apply_removes_old_temporaries_and_spares_a_fresh_one(
        self, tmp_path: Path
    ) -> None:
        from noderole.atomic import STALE_TEMP_AGE
        from noderole.root import NodeRoot
        from noderole.state import write_last_apply

        root = NodeRoot(tmp_path)
        state = tmp_path / "var/lib/noderole"
        state.mkdir(parents=True, mode=0o700)
        old = state / ".applied.json.0123456789ab.tmp"
        fresh = state / ".applied.json.ba9876543210.tmp"  # a writer at work right now
        other = state / ".plan.json.0123456789ab.tmp"  # another state file's: written rarely
        look_alike = state / ".notes.tmp"  # not named as noderole names a temporary
        for path in (old, fresh, other, look_alike):
            path.write_bytes(b'{"half')
        long_ago = time.time() - STALE_TEMP_AGE - 5
        for path in (old, other, look_alike):
            os.utime(path, (long_ago, long_ago))
        write_last_apply(root, {"role": "server"})  # what every apply writes
        assert (state / "last-apply.json").exists()
        assert not old.exists()
        assert not other.exists()
        assert fresh.exists()
        assert look_alike.exists()


class TestRemedy:
    @pytest.mark.parametrize(
        ("number", "words"),
        [
            (errno.ENOSPC, "free space on its file system"),
            (errno.EROFS, "remount it read-write"),
            (errno.EACCES, "owner, mode and attributes"),
            (errno.EMFILE, "this process's limit of open files"),
            (errno.ENFILE, "the machine's limit of open files"),
            (errno.ENAMETOOLONG, "a shorter name"),
        ],
    )
    def test_the_fix_fits_the_reason(self, number: int, words: str) -> None:
        """A process out of descriptors was told to "fix the directory": the fix fits the
        reason, and only an unknown one falls back to the directory."""
        assert words in remedy(OSError(number, os.strerror(number)))
