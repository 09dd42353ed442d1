"""Records validate on construction and compare by value."""

from __future__ import annotations

import pytest

from noderole.errors import DefinitionError
from noderole.records import (
    Call,
    MintCertificate,
    Secret,
    Service,
    Setting,
    Supervision,
    WaitForPaths,
    WaitForTcp,
)


class TestService:
    def test_lists_become_tuples_and_compare_equal(self) -> None:
        """Records built from lists and from tuples are equal and hashable."""
        a = Service(name="x", need=["net"], command=["/bin/x", "-v"])
        b = Service(name="x", need=("net",), command=("/bin/x", "-v"))
        assert a == b
        assert hash(a) == hash(b)

    def test_single_string_dependency_is_one_name(self) -> None:
        """need='net' means one dependency, not three letters."""
        assert Service(name="x", need="net").need == ("net",)

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
            ({"name": "x", "environment": {"1X": "v"}}, "environment", "not a variable name"),
            ({"name": "x", "environment": {"X": 1}}, "environment", "str or Secret"),
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
            ({"respawn_period": 0}, "respawn_period"),
            ({"stop_signal": "SIGNOPE"}, "stop_signal"),
            ({"stop_timeout": -0.5}, "stop_timeout"),
        ],
    )
    def test_invalid_values_are_refused(self, kwargs: dict[str, object], field: str) -> None:
        """Negative delays, zero periods and unknown signals are refused, naming the field."""
        with pytest.raises(DefinitionError, match=f"field {field!r}"):
            Supervision(**kwargs)  # type: ignore[arg-type]

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

    def test_tcp_port_range(self) -> None:
        """Ports outside 1..65535 are refused."""
        with pytest.raises(ValueError, match="port"):
            WaitForTcp(host="127.0.0.1", port=70000, timeout=1)

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

    def test_int_is_accepted_for_float(self) -> None:
        """An int default is fine for a float setting (120 seconds)."""
        assert Setting(name="t", type=float, default=120).default == 120
