"""Records validate on construction and compare by value."""

from __future__ import annotations

import difflib
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import noderole
from noderole import recordclass
from noderole.errors import DefinitionError
from noderole.records import (
    LEAF_LIFETIME_DAYS,
    Call,
    Fail,
    MakeDirectories,
    MintCertificate,
    RecordBase,
    Secret,
    Service,
    Setting,
    SettingsTable,
    Supervision,
    WaitForCommand,
    WaitForHttp,
    WaitForPaths,
    WaitForSocket,
    WaitForTcp,
    did_you_mean,
    unknown_names,
)
from noderole.root import NodeRoot, climbs_out


class TestService:
    def test_lists_become_tuples_and_compare_equal(self) -> None:
        """Records built from lists and from tuples are equal and hashable."""
        a = Service(name="x", need=["net"], command=["/bin/x", "-v"])
        b = Service(name="x", need=("net",), command=("/bin/x", "-v"))
        assert a == b
        assert hash(a) == hash(b)

    @pytest.mark.parametrize(
        "field", ["need", "use", "want", "after", "before", "provide", "roles", "command"]
    )
    def test_a_string_where_a_list_is_expected_is_refused(self, field: str) -> None:
        """need='net' or command='/bin/x -a' is refused naming the field, never split."""
        with pytest.raises(DefinitionError) as excinfo:
            Service(name="x", **{field: "/usr/local/bin/x -a"})  # type: ignore[arg-type]
        message = str(excinfo.value)
        assert f"Service 'x': field {field!r} must be a list" in message
        assert "['/usr/local/bin/x -a']" in message

    @pytest.mark.parametrize(
        ("build", "field"),
        [
            (lambda: WaitForPaths(paths="/etc/x", timeout=1), "paths"),
            (lambda: WaitForCommand(argv="/bin/true", timeout=1), "argv"),
            (lambda: MakeDirectories(paths="/var/x"), "paths"),
            (
                lambda: MintCertificate(
                    directory="/d", ca_cert="/c", ca_key="/k", common_name="x", sans="a.example"
                ),
                "sans",
            ),
            (lambda: SettingsTable(table="t", settings="x"), "settings"),
            (lambda: Setting(name="s", type=str, default="a", choices="abc"), "choices"),
        ],
    )
    def test_strings_are_refused_in_every_list_field(
        self, build: Callable[[], object], field: str
    ) -> None:
        """Every list-valued field of every record refuses a lone string."""
        with pytest.raises(DefinitionError, match=f"field {field!r} must be a list"):
            build()

    def test_misspelled_keyword_is_a_definition_error_with_a_suggestion(self) -> None:
        """Service(comand=...) names the record, the keyword and the field it meant."""
        with pytest.raises(DefinitionError) as excinfo:
            Service(name="x", comand=["/bin/x"])  # type: ignore[call-arg]
        assert "Service 'x': unknown field 'comand' (did you mean 'command'?)" in str(excinfo.value)

    def test_missing_and_positional_arguments_are_definition_errors(self) -> None:
        """A missing required field and a positional argument are DefinitionErrors too."""
        with pytest.raises(DefinitionError, match="WaitForTcp: field 'port' is required"):
            WaitForTcp(host="h", timeout=1)  # type: ignore[call-arg]
        with pytest.raises(DefinitionError, match="keyword arguments only"):
            Fail("boom")  # type: ignore[call-arg]

    def test_evolve_still_works(self) -> None:
        """attrs.evolve (how the plugin manager stamps origin) goes through the checks."""
        service = attrs.evolve(Service(name="x"), origin="p")
        assert service.origin == "p"
        with pytest.raises(DefinitionError, match="field 'need'"):
            attrs.evolve(service, need="net")

    @pytest.mark.parametrize("field", ["pidfile", "output_log", "error_log", "working_directory"])
    def test_a_path_climbing_out_of_the_root_is_refused(self, field: str) -> None:
        """/../../../tmp/x.pid would leave --root: a definition error naming the field."""
        with pytest.raises(DefinitionError, match=f"field {field!r} .*climbs above the root"):
            Service(name="x", **{field: "/../../../tmp/x.pid"})  # type: ignore[arg-type]

    def test_dotdot_that_stays_inside_the_root_is_fine(self) -> None:
        """/run/a/../x.pid stays under /, so it is accepted as written."""
        assert Service(name="x", pidfile="/run/a/../x.pid").pidfile == "/run/a/../x.pid"

    @pytest.mark.parametrize(
        ("kwargs", "field", "why"),
        [
            ({"name": ""}, "name", "non-empty"),
            ({"name": "has space"}, "name", "non-empty"),
            ({"name": "x", "command": ["bin/x"]}, "command", "absolute path"),
            ({"name": "x", "command": []}, "command", "empty"),
            ({"name": "x", "command": ["/bin/x", "a\0b"]}, "command", "NUL"),
            ({"name": "x", "command": ["/bin/x", "\ud800"]}, "command", "not UTF-8"),
            ({"name": "x", "pidfile": "run/x.pid"}, "pidfile", "absolute path"),
            ({"name": "x", "need": ["bad name"]}, "need", "not a service name"),
            # The file names made from it (a unit, a runscript, its temporaries) must fit in a
            # file system's 255 bytes: a 250-character name failed at render, blaming the
            # directory, and its native pidfile was silently not written.
            ({"name": "a" * 129}, "name", "at most 128 characters"),
            ({"name": "x", "after": ["b" * 129]}, "after", "at most 128 characters"),
            # A file path ending in "/" names a directory: a pidfile "/run/" was accepted, and
            # the supervisor logged "Is a directory" while status said running.
            ({"name": "x", "pidfile": "/run/"}, "pidfile", "ends in '/'"),
            ({"name": "x", "output_log": "/var/log/"}, "output_log", "ends in '/'"),
            ({"name": "x", "error_log": "/var/log/x/"}, "error_log", "ends in '/'"),
            ({"name": "x", "environment": {"1X": "v"}}, "environment", "not a variable name"),
            ({"name": "x", "environment": {"X": 1}}, "environment", "str or Secret"),
            ({"name": "x", "environment": {"X": "a\0b"}}, "environment", "NUL"),
            ({"name": "x", "environment": {"X": "\ud800"}}, "environment", "not UTF-8"),
            ({"name": "x", "pre_start": ["mkdir"]}, "pre_start", "not a step record"),
        ],
    )
    def test_invalid_fields_name_the_field(
        self, kwargs: dict[str, object], field: str, why: str
    ) -> None:
        """Each invalid field raises DefinitionError naming the field and the reason."""
        with pytest.raises(DefinitionError) as excinfo:
            Service(**kwargs)  # type: ignore[arg-type]
        assert f"field {field!r}" in str(excinfo.value)
        assert why in str(excinfo.value)

    def test_environment_is_read_only_and_sorted(self) -> None:
        """The environment mapping cannot be mutated after construction."""
        service = Service(name="x", environment={"B": "2", "A": "1"})
        assert list(service.environment) == ["A", "B"]
        with pytest.raises(TypeError):
            service.environment["C"] = "3"  # type: ignore[index]

    def test_services_without_environment_or_supervision_share_the_empty_ones(self) -> None:
        """A node of 100,000 services spent 232 of each record's 718 bytes on an empty
        environment (a dict and its read-only view) and a default Supervision of its own. Both
        are immutable: every service without them shares one of each, equal to what it gave."""
        first, second = Service(name="a"), Service(name="b", environment={})
        assert first.environment is second.environment
        assert dict(first.environment) == {}
        with pytest.raises(TypeError):
            first.environment["C"] = "3"  # type: ignore[index]
        assert first.supervision is second.supervision
        assert first.supervision == Supervision()
        evolved = recordclass.evolve(first, environment={"A": "1"})
        assert dict(evolved.environment) == {"A": "1"}
        assert dict(first.environment) == {}  # the shared one was not written through

    def test_a_secret_that_cannot_be_passed_is_refused_without_showing_it(self) -> None:
        """A Secret with a NUL would fail only when the supervisor starts the process, as an
        internal error naming nothing: refused here, naming the variable, never its value."""
        with pytest.raises(DefinitionError) as excinfo:
            Service(name="x", environment={"K3S_TOKEN": Secret("s3cr\0t")})
        message = str(excinfo.value)
        assert "K3S_TOKEN=*** (a Secret)" in message
        assert "s3cr" not in message

    def test_secret_never_prints(self) -> None:
        """A Secret shows *** in str and repr, including inside the record's repr."""
        service = Service(name="x", environment={"K3S_TOKEN": Secret("s3cr3t")})
        assert "s3cr3t" not in repr(service)
        assert str(service.environment["K3S_TOKEN"]) == "***"
        assert service.revealed_environment() == {"K3S_TOKEN": "s3cr3t"}

    def test_call_steps_compare_by_description_and_key(self) -> None:
        """Two Call steps with different functions but the same description and key are equal."""

        def one(ctx: object) -> None:
            return None

        def other(ctx: object) -> None:
            return None

        assert Call(function=one, description="d", key="k") == Call(
            function=other, description="d", key="k"
        )


class TestSupervision:
    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"respawn_delay": -1}, "respawn_delay"),
            ({"respawn_max": -2}, "respawn_max"),
            # The supervisor takes counts below 2**31: a larger one passed plan, then failed
            # apply with a bare ValueError.
            ({"respawn_max": 2**31}, "respawn_max"),
            ({"respawn_period": 0}, "respawn_period"),
            ({"stop_signal": "SIGNOPE"}, "stop_signal"),
            ({"stop_timeout": -0.5}, "stop_timeout"),
            ({"stop_scope": "cgroup"}, "stop_scope"),
            ({"stop_scope": None}, "stop_scope"),
            ({"delegate": "yes"}, "delegate"),
            ({"delegate": 1}, "delegate"),
            ({"open_files": 2}, "open_files"),
            ({"open_files": 2**30}, "open_files"),
            ({"open_files": 1048576.0}, "open_files"),
            ({"open_files": True}, "open_files"),
            ({"tasks": 0}, "tasks"),
            ({"tasks": "unlimited"}, "tasks"),
            ({"tasks": float("inf")}, "tasks"),
            ({"notify": "yes"}, "notify"),
            ({"notify": 1}, "notify"),
        ],
    )
    def test_invalid_values_are_refused(self, kwargs: dict[str, object], field: str) -> None:
        """Negative delays, zero periods, unknown signals and scopes, and a delegate that is not
        a bool are refused, naming the field."""
        with pytest.raises(DefinitionError, match=f"field {field!r}"):
            Supervision(**kwargs)  # type: ignore[arg-type]

    def test_every_signal_name_of_the_platform_is_a_stop_signal(self) -> None:
        """The names checked without the signal module are real ones; every other name the
        platform has (SIGRTMIN, SIGWINCH) is accepted too, and only those."""
        import signal

        names = {s.name for s in signal.Signals}
        assert {"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGKILL"} <= names
        for name in sorted(names):
            assert Supervision(stop_signal=name).stop_signal == name
        for name in ("sigterm", "SIGTERM ", "SIG", "TERM", "15"):
            with pytest.raises(DefinitionError, match="signal name"):
                Supervision(stop_signal=name)

    def test_seed_defaults(self) -> None:
        """Defaults are the seed's: respawn_delay 5, respawn_max 0 (unlimited)."""
        assert (Supervision().respawn_delay, Supervision().respawn_max) == (5, 0)


class TestSteps:
    def test_wait_requires_absolute_paths(self) -> None:
        """A wait on a relative path is refused."""
        with pytest.raises(DefinitionError, match="absolute path"):
            WaitForPaths(paths=["etc/x"], timeout=1)

    def test_wait_requires_a_positive_timeout(self) -> None:
        """A wait without a positive timeout would not be bounded."""
        with pytest.raises(DefinitionError, match="timeout"):
            WaitForPaths(paths=["/etc/x"], timeout=0)

    @pytest.mark.parametrize("port", [0, 70000, -1, True, 80.0])
    def test_tcp_port_range(self, port: object) -> None:
        """Ports outside 1..65535 (or not whole numbers) are a DefinitionError naming the field."""
        with pytest.raises(
            DefinitionError, match="WaitForTcp: field 'port' must be a port 1-65535"
        ):
            WaitForTcp(host="127.0.0.1", port=port, timeout=1)  # type: ignore[arg-type]

    @pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 1e300, -1, 0])
    @pytest.mark.parametrize(
        "build",
        [
            lambda t: WaitForPaths(paths=["/x"], timeout=t),
            lambda t: WaitForSocket(path="/x", timeout=t),
            lambda t: WaitForTcp(host="h", port=1, timeout=t),
            lambda t: WaitForHttp(url="http://h", timeout=t),
            lambda t: WaitForCommand(argv=["/bin/true"], timeout=t),
            lambda t: Call(function=print, description="d", timeout=t),
            lambda t: Supervision(respawn_period=t),
            lambda t: Supervision(backoff_max=t),
        ],
    )
    def test_timeouts_refuse_nan_infinity_and_out_of_range(
        self, build: Callable[[float], object], bad: float
    ) -> None:
        """nan passes `> 0` checks; every duration refuses it, infinities and absurd values."""
        with pytest.raises(DefinitionError, match="finite number of seconds"):
            build(bad)

    @pytest.mark.parametrize("bad", [math.nan, math.inf, -1, 1e300])
    @pytest.mark.parametrize("field", ["respawn_delay", "stop_timeout"])
    def test_delays_refuse_nan_and_infinity(self, field: str, bad: float) -> None:
        """respawn_delay = nan would respawn in a tight loop; it is refused."""
        with pytest.raises(DefinitionError, match=f"field {field!r}"):
            Supervision(**{field: bad})  # type: ignore[arg-type]

    @pytest.mark.parametrize("bad", [1.5, math.nan, -1, True])
    def test_respawn_max_is_a_whole_count(self, bad: object) -> None:
        """respawn_max counts respawns: a whole number >= 0."""
        with pytest.raises(DefinitionError, match="field 'respawn_max' must be a whole number"):
            Supervision(respawn_max=bad)  # type: ignore[arg-type]

    @pytest.mark.parametrize("days", [365, 400, -1, 2.5])
    def test_renewal_window_beyond_validity_is_refused(self, days: object) -> None:
        """renew_before_days=400 would re-mint on every boot: refused at construction."""
        with pytest.raises(DefinitionError, match="field 'renew_before_days'"):
            MintCertificate(
                directory="/d",
                ca_cert="/c",
                ca_key="/k",
                common_name="x",
                sans=["a.example"],
                renew_before_days=days,  # type: ignore[arg-type]
            )

    def test_leaf_lifetime_matches_the_certificate_module(self) -> None:
        """The figure records repeat (to avoid importing cryptography) is the minted one."""
        from noderole.certs import LEAF_LIFETIME

        assert LEAF_LIFETIME.days == LEAF_LIFETIME_DAYS

    @pytest.mark.parametrize("san", ["10.0.0.1:53", "https://a.example", "10.0.0.0/8"])
    def test_bad_san_is_refused_at_construction(self, san: str) -> None:
        """A SAN that could never match is a definition error at plan time, not at apply."""
        with pytest.raises(DefinitionError, match=r"MintCertificate: field 'sans' is invalid"):
            MintCertificate(directory="/d", ca_cert="/c", ca_key="/k", common_name="x", sans=[san])

    def test_certificate_paths(self) -> None:
        """The serving pair lives at DIR/tls.crt and DIR/tls.key."""
        step = MintCertificate(
            directory="/var/lib/x/",
            ca_cert="/ca.crt",
            ca_key="/ca.key",
            common_name="x",
            sans=["a"],
        )
        assert (step.cert_path, step.key_path) == ("/var/lib/x/tls.crt", "/var/lib/x/tls.key")


class TestSetting:
    def test_default_must_match_type(self) -> None:
        """A setting whose default is not of its type is refused."""
        with pytest.raises(DefinitionError, match="default"):
            Setting(name="port", type=int, default="8132")

    def test_unknown_type_is_a_definition_error(self) -> None:
        """Setting(type=list) names the field and the types allowed."""
        with pytest.raises(DefinitionError, match="Setting 's': field 'type' must be str, int"):
            Setting(name="s", type=list, default=[])  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        ("kwargs", "why"),
        [
            ({"type": float, "default": 5.0, "min": 10}, "below the minimum 10"),
            ({"type": int, "default": 5, "max": 1}, "above the maximum 1"),
            ({"type": str, "default": "x", "choices": ["a", "b"]}, "not one of 'a', 'b'"),
            ({"type": float, "default": math.nan}, "not a finite number"),
        ],
    )
    def test_default_must_satisfy_the_declared_bounds(
        self, kwargs: dict[str, object], why: str
    ) -> None:
        """A default outside min/max/choices is refused when the plugin declares it."""
        with pytest.raises(DefinitionError, match=why):
            Setting(name="s", **kwargs)  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"type": str, "default": "a", "min": 1},
            {"type": int, "default": 1, "min": 2, "max": 1},
            {"type": int, "default": 1, "min": math.nan},
            {"type": int, "default": 1, "choices": ["1"]},
            {"type": int, "default": 1, "choices": []},
        ],
    )
    def test_inconsistent_bounds_are_refused(self, kwargs: dict[str, object]) -> None:
        """Bounds on a string, min above max, a nan bound, mistyped or empty choices."""
        with pytest.raises(DefinitionError, match="Setting 's'"):
            Setting(name="s", **kwargs)  # type: ignore[arg-type]

    def test_invalid_explains_each_value(self) -> None:
        """Setting.invalid says why a value is refused, or None when it is fine."""
        setting = Setting(name="s", type=float, default=5.0, min=0, max=60)
        assert setting.invalid(5) is None
        assert setting.invalid(-5) == "is below the minimum 0"
        assert setting.invalid(math.inf) == "is not a finite number"
        assert setting.invalid("5") == "is not a number"
        assert Setting(name="n", type=int, default=1).invalid(1.5) == "is not an integer"
        assert Setting(name="t", type=str, default="").invalid(5) == "is not a string"
        assert Setting(name="b", type=bool, default=True).invalid(1) == "is not true or false"
        assert setting.bounds() == "0 to 60"

    def test_int_is_accepted_for_float(self) -> None:
        """An int default is fine for a float setting (120 seconds)."""
        assert Setting(name="t", type=float, default=120).default == 120


class TestHelpers:
    @pytest.mark.parametrize(
        ("path", "out"),
        [
            ("/../x", True),
            ("/a/../../x", True),
            ("/a/../x", False),
            ("/a/./b", False),
            ("/", False),
        ],
    )
    def test_climbs_out(self, path: str, out: bool) -> None:
        """Only '..' that goes above / counts as leaving the root."""
        assert climbs_out(path) is out

    def test_root_never_maps_a_path_that_climbs_out(self, tmp_path: Path) -> None:
        """NodeRoot.resolve refuses /../x instead of returning a path outside the root."""
        root = NodeRoot(tmp_path / "node")
        assert root.resolve("/run/a/../x.pid") == tmp_path / "node" / "run" / "a" / ".." / "x.pid"
        with pytest.raises(ValueError, match=r"climbs above / with '\.\.'"):
            root.resolve("/../../../tmp/x.pid")

    def test_unknown_names_only_flags_names_nobody_has(self) -> None:
        """A name of another service or a provided virtual is fine; an unknown one is flagged."""
        services = [
            Service(name="k3s", provide=["kube-api"]),
            Service(name="a", after=["k3ss", "k3s"], use=["kube-api"], before=["nothing"]),
        ]
        assert unknown_names(services, services) == [
            "a: after 'k3ss': no service is called or provides 'k3ss' (did you mean 'k3s'?); "
            "the after is ignored",
            "a: before 'nothing': no service is called or provides 'nothing'; the before is "
            "ignored",
        ]

    def test_did_you_mean(self) -> None:
        """The closest name is suggested; nothing when nothing is close."""
        assert did_you_mean("k3ss", ["k3s", "net"]) == " (did you mean 'k3s'?)"
        assert did_you_mean("zzz", ["k3s", "net"]) == ""

    @settings(max_examples=300, deadline=None)
    @given(
        word=st.text(alphabet="abk3s-_.", max_size=10),
        choices=st.lists(st.text(alphabet="abk3s-_.", max_size=10), max_size=6),
    )
    def test_did_you_mean_answers_as_difflib_alone(self, word: str, choices: list[str]) -> None:
        """The cheap prefilter before difflib changes no suggestion (empty strings included)."""
        close = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=0.6)
        assert did_you_mean(word, choices) == (f" (did you mean {close[0]!r}?)" if close else "")

    def test_did_you_mean_skips_difflib_when_nothing_is_close(self) -> None:
        """A name far from every choice (another role's service) does not import difflib."""
        probe = (
            "import sys; from noderole.records import did_you_mean; "
            "assert did_you_mean('firewall', ['k3s', 'konnectivity-server']) == ''; "
            "print('difflib' in sys.modules); "
            "did_you_mean('k3ss', ['k3s']); print('difflib' in sys.modules)"
        )
        done = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True
        )
        assert done.stdout.split() == ["False", "True"]


class TestTrailingNewline:
    """A `$` anchor matches before a final newline: names must be checked to the very end."""

    @pytest.mark.parametrize(
        "fields",
        [
            {"name": "k3s\n", "command": ["/bin/true"]},
            {"name": "k3s", "command": ["/bin/true"], "environment": {"KEY\n": "v"}},
        ],
    )
    def test_a_trailing_newline_is_refused(self, fields: dict[str, object]) -> None:
        """`k3s\n` as a service name or `KEY\n` as a variable is a definition error."""
        with pytest.raises(noderole.DefinitionError):
            noderole.Service(**fields)  # type: ignore[arg-type]


class TestFieldMessages:
    """Fields checked against a fixed form say the form in noderole's words, naming the record."""

    @pytest.mark.parametrize(
        ("build", "message"),
        [
            (
                lambda: WaitForPaths(paths=["/a"], timeout=1, require="most"),  # type: ignore[arg-type]
                "WaitForPaths: field 'require' must be one of 'all', 'any', got 'most'",
            ),
            (lambda: Fail(message=""), "Fail: field 'message' must be a non-empty string, got ''"),
            (
                lambda: Call(function=print, description=""),
                "Call: field 'description' must be a non-empty string, got ''",
            ),
            (
                lambda: Setting(name="Bad", type=int, default=1),
                "Setting 'Bad': field 'name' must be lower case letters, digits and '_', "
                "starting with a letter, got 'Bad'",
            ),
            (
                lambda: SettingsTable(table="t\n", settings=[]),
                "SettingsTable: field 'table' must be lower case letters, digits, '_' and '-', "
                "starting with a letter, got 't\\n'",
            ),
            # Two settings of one name: the later one won silently, and a value was refused
            # naming the other's type and range.
            (
                lambda: SettingsTable(
                    table="t",
                    settings=[
                        Setting(name="port", type=int, default=9100),
                        Setting(name="port", type=str, default="oops"),
                    ],
                ),
                "SettingsTable: field 'settings' declares 'port' twice: one key of [t] is one "
                "setting; remove one of them",
            ),
        ],
    )
    def test_the_form_is_named(self, build: Callable[[], object], message: str) -> None:
        with pytest.raises(noderole.DefinitionError) as caught:
            build()
        assert str(caught.value) == message


def _samples() -> list[object]:
    """One record of each class, with repr-hidden, eq-excluded and unhashable fields set."""
    setting = Setting(name="x", type=int, default=1, description="d")
    return [
        Secret("token"),
        WaitForPaths(paths=["/a"], timeout=3),
        WaitForSocket(path="/s", timeout=1),
        WaitForTcp(host="h", port=1, timeout=1),
        WaitForHttp(url="http://x/", timeout=1),
        WaitForCommand(argv=["/bin/true"], timeout=1),
        MakeDirectories(paths=["/d"]),
        noderole.WriteFile(path="/f", content="abc"),
        MintCertificate(
            directory="/c", ca_cert="/ca.crt", ca_key="/ca.key", common_name="x", sans=["a.b"]
        ),
        Fail(message="m"),
        noderole.Warn(message="w"),
        Call(function=print, description="d", key="k"),
        Supervision(),
        Service(
            name="s",
            roles=["r"],
            command=["/x"],
            pre_start=[Fail(message="f")],
            environment={"A": "1", "B": Secret("t")},
            origin="plugin",
        ),
        setting,
        SettingsTable(table="t", description="d", settings=[setting]),
        noderole.StandIn(path="/usr/bin/x", content="#!/bin/sh\n"),
        noderole.RehearsalFile(path="/etc/x", content="y"),
        noderole.RehearsalSetting(table="t", key="k", value=1),
        noderole.FreePort(table="t", key="k"),
    ]


_TWINS: dict[type, type] = {}


def _twin(record: object) -> object:
    """The same values in a class whose repr, == and hash attrs generates itself."""
    cls = type(record)
    fields = attrs.fields(cls)  # type: ignore[arg-type]
    if cls not in _TWINS:
        _TWINS[cls] = attrs.make_class(
            cls.__name__,
            {f.name: attrs.field(repr=f.repr, eq=f.eq, hash=f.hash, alias=f.alias) for f in fields},
            frozen=True,
            kw_only=True,
            repr=cls.__repr__ is RecordBase.__repr__,
        )
    return _TWINS[cls](**{f.alias: getattr(record, f.name) for f in fields})


class TestRecordMethods:
    @pytest.mark.parametrize("record", _samples(), ids=lambda r: type(r).__name__)
    def test_repr_eq_and_hash_are_those_attrs_generates(self, record: object) -> None:
        """RecordBase's shared repr, == and hash give what attrs' generated methods give."""
        twin = _twin(record)
        if type(record).__repr__ is RecordBase.__repr__:
            assert repr(record) == repr(twin)
        changed = (
            attrs.evolve(record, origin="other")  # type: ignore[misc]
            if hasattr(record, "origin")
            else record
        )
        assert record == changed
        assert twin == _twin(changed)
        assert record != twin
        assert record != 1
        try:
            hash(twin)
        except TypeError:
            with pytest.raises(TypeError):
                hash(record)
        else:
            assert hash(record) == hash(changed)

    def test_a_field_that_differs_makes_records_unequal(self) -> None:
        """Records differing in one compared field are unequal, and usually hash apart."""
        assert Fail(message="a") != Fail(message="b")
        assert hash(Fail(message="a")) != hash(Fail(message="b"))
        # The function is not compared: the key stands for it.
        assert Call(function=print, description="d", key="k") == Call(
            function=lambda ctx: None, description="d", key="k"
        )

    def test_repr_of_a_record_inside_itself_is_cut(self) -> None:
        """A record shown inside itself is shown as ``...``, as attrs' repr does."""
        fail = Fail(message="x")
        object.__setattr__(fail, "message", fail)
        assert repr(fail) == "Fail(message=...)"


class TestHttpUrl:
    """A readiness or wait URL is checked when the record is built, as a probe will read it:
    a host, and a port 1-65535 if one is given (a mistyped address in config.toml)."""

    @pytest.mark.parametrize(
        "url",
        [
            "http://127.0.0.1:9100/metrics",
            "https://[::1]:6443/readyz",
            "http://[fe80::1%25eth0]/",
            "http://node-1.example/",
            "http://user:secret@h:80/x?y#z",
            "http://h:/",
            "https://h",
            "http://127.0.0.1:0/",  # a range is the plugin's to check (and the probe's to say)
            "http://127.0.0.1:99999/",
        ],
    )
    def test_good(self, url: str) -> None:
        assert WaitForHttp(url=url, timeout=1).url == url

    @pytest.mark.parametrize(
        ("url", "why"),
        [
            ("http://[::1/healthz", "an IPv6 address with no closing ]"),
            ("http://[]/", "no host"),
            ("http://[::1]x/", "text after the IPv6 address"),
            ("http://h:8o80/", "port '8o80', not a number"),
            ("http://h:\u0661\u0662/", ", not a number"),
            ("http://::1:80/", "an IPv6 address needs brackets"),
            ("http://user@:80/", "no host"),
            ("http://h]/", "a bracket"),
            ("http://[zzz]/", "'zzz' in brackets, which is not an IPv6 address"),
            ("http://[1.2.3.4]/", "not an IPv6 address"),
        ],
    )
    def test_bad(self, url: str, why: str) -> None:
        with pytest.raises(DefinitionError) as raised:
            WaitForHttp(url=url, timeout=1)
        message = str(raised.value)
        assert "field 'url'" in message
        assert why in message
        assert repr(url) in message

    @pytest.mark.parametrize(
        "url",
        [
            "http://[zzz]/", "http://[1.2.3.4]/", "http://[fe80::1%25eth0]/", "http://[v1.x]/",
            "http://h:+80/", "http://h: 80/", "http://a b/", "http://h:/", "http://[::1]:/",
            "http://[::1]x/", "http://h]/", "http://[::1/", "http://::1:80/", "http://h#x:99999",
            "http://h?x:1", "http://u@h:1@x/", "http://h:0/", "http://h:65535/", "http://@/",
            "https://[::ffff:1.2.3.4]:443/", "http://h:080/",
        ],
    )  # fmt: skip
    def test_a_url_the_record_takes_is_one_the_probe_can_read(self, url: str) -> None:
        """The record's own check (no urllib at start-up) is never looser than the parse the
        probe makes when it connects, but for a port's range, which the probe says."""
        from noderole.supervisor.probes import http_address

        try:
            WaitForHttp(url=url, timeout=1)
        except DefinitionError:
            return
        problem = ""
        try:
            http_address(url)
        except ValueError as error:
            problem = str(error)
        assert problem in ("", "Port out of range 0-65535", "port 0"), url

    @pytest.mark.parametrize(
        ("url", "said"),
        [
            ("http://127.0.0.1:99999/", "Port out of range 0-65535"),
            ("http://127.0.0.1:0/", "port 0"),
        ],
    )
    def test_a_port_out_of_range_is_said_by_the_probe(self, url: str, said: str) -> None:
        from noderole.supervisor import probes

        outcome = probes.attempt(probes.HttpProbe(url=url), left=0.1)
        assert outcome.missing == (f"{url} (cannot be probed: {said})",)
