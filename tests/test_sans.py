"""SAN list parsing: what is accepted, how it is normalised, what is rejected and in which words."""

from __future__ import annotations

import ipaddress
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from noderole.errors import CertificateError
from noderole.sans import SubjectAltName, _as_ip, covers, parse_host, parse_sans
from tests.modules_probe import run_snippet


def dns(value: str) -> SubjectAltName:
    return SubjectAltName("dns", value)


def ip(value: str) -> SubjectAltName:
    return SubjectAltName("ip", value)


class TestAccepted:
    def test_comma_list_trimmed_and_empty_items_skipped(self) -> None:
        """Spaces around entries are trimmed and empty entries between commas are skipped."""
        assert parse_sans(" a.example , ,10.0.0.1,, ") == (dns("a.example"), ip("10.0.0.1"))

    def test_iterable_of_lists(self) -> None:
        """An iterable of items is accepted and each item may itself be a comma-separated list."""
        assert parse_sans(["a.example,b.example", "c.example"]) == (
            dns("a.example"),
            dns("b.example"),
            dns("c.example"),
        )

    @pytest.mark.parametrize(
        ("text", "value"),
        [
            ("10.0.0.1", "10.0.0.1"),
            ("::1", "::1"),
            ("0:0:0:0:0:0:0:1", "::1"),
            ("[::1]", "::1"),
            ("[2001:DB8::0001]", "2001:db8::1"),
            ("::ffff:10.0.0.1", "::ffff:a00:1"),
        ],
    )
    def test_ip_addresses_normalised(self, text: str, value: str) -> None:
        """IPv4, IPv6 and bracketed IPv6 become IP SANs in canonical text form."""
        assert parse_sans(text) == (ip(value),)

    @pytest.mark.parametrize(
        ("text", "value"),
        [
            ("API.Example.COM", "api.example.com"),
            ("api.example.com.", "api.example.com"),
            ("localhost", "localhost"),
            ("*.nlb.example.com", "*.nlb.example.com"),
            ("a-b.x1.example", "a-b.x1.example"),
            ("bücher.example", "xn--bcher-kva.example"),
            ("例え.テスト", "xn--r8jz45g.xn--zckzah"),
            ("bücher\u3002example", "xn--bcher-kva.example"),
            ("10.0.0.1.nip.io", "10.0.0.1.nip.io"),
            ("x" * 63 + ".example", "x" * 63 + ".example"),
        ],
    )
    def test_dns_names_normalised(self, text: str, value: str) -> None:
        """DNS names are lower-cased, lose one trailing dot, and IDNs become xn-- form."""
        assert parse_sans(text) == (dns(value),)

    def test_name_of_253_characters_accepted(self) -> None:
        """A name of exactly 253 characters is the longest accepted."""
        name = ".".join(["a" * 63] * 3 + ["b" * 61])
        assert len(name) == 253
        assert parse_sans(name) == (dns(name),)

    def test_duplicates_dropped_first_order_kept(self) -> None:
        """Duplicates (after normalisation) are dropped; the first occurrence keeps its place."""
        assert parse_sans("b.example,10.0.0.1,B.example.,::1,[::1],a.example") == (
            dns("b.example"),
            ip("10.0.0.1"),
            ip("::1"),
            dns("a.example"),
        )

    def test_str_is_value(self) -> None:
        """str() of a SAN is its normalised value."""
        assert str(ip("::1")) == "::1"


class TestRejected:
    @pytest.mark.parametrize("text", ["", " ", ",", " , ,", []])
    def test_no_sans(self, text: str | list[str]) -> None:
        """An empty list (after trimming) is refused with a 'no SANs given' message."""
        with pytest.raises(CertificateError, match="no SANs given"):
            parse_sans(text)

    @pytest.mark.parametrize(
        ("entry", "why"),
        [
            ("a.example:443", "port"),
            ("10.0.0.1:6443", "port"),
            ("[::1]:443", "port"),
            ("https://a.example", "URL"),
            ("a.example/path", "'/'"),
            ("10.0.0.0/8", "CIDR"),
            ("fd00::/64", "CIDR"),
            ("fe80::1%eth0", "zone id"),
            ("a..example", "empty label"),
            (".a.example", "empty label"),
            ("a.example..", "empty label"),
            ("x" * 64 + ".example", "64 characters"),
            ("foo_bar.example", "'_'"),
            ("foo bar.example", "whitespace"),
            ("-a.example", "hyphen"),
            ("a-.example", "hyphen"),
            ("a!.example", "letters, digits"),
            ("a.*.example", "wildcard"),
            ("f*.a.example", "wildcard"),
            ("*.*.example.com", "wildcard"),
            ("*.com", "two labels"),
            ("10.0.0.256", "all digits"),
            ("1.2.3", "all digits"),
            ("010.0.0.1", "all digits"),
            ("a.123", "all digits"),
            ("1::2::3", "':'"),
            ("[a.example]", "brackets"),
            ("[10.0.0.1]", "brackets"),
            ("[::1]x", "after ']'"),
        ],
    )
    def test_each_rule_names_the_entry(self, entry: str, why: str) -> None:
        """Each rejection names the offending entry and says why."""
        with pytest.raises(CertificateError) as info:
            parse_sans(f"ok.example, {entry} ,10.0.0.1")
        message = str(info.value)
        assert repr(entry) in message
        assert why in message

    def test_name_over_253_characters(self) -> None:
        """A name longer than 253 characters is refused."""
        name = ".".join(["a" * 63] * 3 + ["b" * 62])
        with pytest.raises(CertificateError, match="254 characters"):
            parse_sans(name)

    def test_non_string_item(self) -> None:
        """A non-string item in an iterable is refused with a CertificateError."""
        with pytest.raises(CertificateError, match="must be strings"):
            parse_sans(["a.example", 5])  # type: ignore[list-item]

    def test_unconvertible_idn(self) -> None:
        """A label that IDNA cannot convert is refused naming the entry."""
        with pytest.raises(CertificateError, match="IDNA"):
            parse_sans("\u200b.example")


class TestFuzz:
    @given(st.text(max_size=80))
    def test_any_text_parses_or_raises_certificate_error(self, text: str) -> None:
        """Arbitrary text never crashes the parser with anything but CertificateError."""
        try:
            result = parse_sans(text)
        except CertificateError:
            return
        assert result
        # Normalised output is a fixed point: parsing it again gives the same SANs.
        assert parse_sans(",".join(s.value for s in result)) == result

    @given(
        st.lists(st.text(alphabet="abcXYZ019-_.*:[]/%, üß", min_size=0, max_size=20), max_size=5)
    )
    def test_name_like_lists(self, items: list[str]) -> None:
        """Name-like fragments only ever yield SANs or a CertificateError."""
        try:
            result = parse_sans(items)
        except CertificateError:
            return
        assert len(set(result)) == len(result)


class TestHost:
    """One address a client dials, read by the SAN rules, and whether SANs cover it."""

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("API.Example.", dns("api.example")),
            ("[FD00:0::7]", ip("fd00::7")),
            (" 10.0.0.7 ", ip("10.0.0.7")),
        ],
    )
    def test_a_host_is_normalised_as_a_san(self, text: str, expected: SubjectAltName) -> None:
        assert parse_host(text) == expected

    @pytest.mark.parametrize(
        ("text", "why"),
        [
            ("", "it is empty"),
            ("a.example,b.example", "a list is not one address"),
            ("*.example", "a wildcard names no host to dial"),
            ("https://a.example", "a URL is not a name"),
            ("a.example:8132", "a port is not part of a name"),
        ],
    )
    def test_what_is_no_host_says_why(self, text: str, why: str) -> None:
        with pytest.raises(CertificateError, match=f"is not a host name or IP address: {why}"):
            parse_host(text)

    @given(st.text(max_size=40))
    def test_any_text_is_a_host_or_a_certificate_error(self, text: str) -> None:
        try:
            host = parse_host(text)
        except CertificateError:
            return
        assert parse_host(host.value) == host

    @pytest.mark.parametrize(
        ("sans", "host", "covered"),
        [
            ("a.example,10.0.0.7", "a.example", True),
            ("a.example,10.0.0.7", "10.0.0.7", True),
            ("a.example,fd00::7", "[FD00:0::7]", True),
            ("*.corp.example", "a.corp.example", True),
            ("*.corp.example", "a.b.corp.example", False),  # one label only (RFC 6125)
            ("*.corp.example", "corp.example", False),
            ("a.example", "b.example", False),
            ("10.0.0.7", "10.0.0.8", False),
            ("*.corp.example", "10.0.0.7", False),
        ],
    )
    def test_covers(self, sans: str, host: str, covered: bool) -> None:
        assert covers(parse_sans(sans), parse_host(host)) is covered


class TestImportCost:
    def test_no_cryptography_import(self) -> None:
        """Importing noderole.sans and the cert CLI module does not import cryptography."""
        code = (
            "import sys, noderole.sans, noderole.cli._cert; "
            "print(any(m.startswith('cryptography') for m in sys.modules))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == "False"


def _reference_ip(text: str) -> str | None:
    """What the parser answered before it read IPv4 itself: ``ipaddress`` for every entry."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


_OCTETS = st.one_of(
    st.integers(min_value=0, max_value=999).map(str),
    st.text(alphabet="0123456789", max_size=5),  # leading zeros, empty, too long
    st.sampled_from(["\u0661", "1\u0662", " 1", "+1", "0x1", "1_0"]),  # non-ASCII digits, signs
)


class TestAddressesWithoutIpaddress:
    @given(st.lists(_OCTETS, min_size=1, max_size=6).map(".".join))
    def test_dotted_texts_read_as_ipaddress_reads_them(self, text: str) -> None:
        """A dotted text is an IPv4 address, in the same canonical form, exactly when
        ``ipaddress.ip_address`` says so."""
        assert _as_ip(text) == _reference_ip(text)

    @given(st.text(alphabet="0123456789abcdefABCDEF.:%/[] x", max_size=24))
    def test_any_address_like_text_read_as_ipaddress_reads_it(self, text: str) -> None:
        """IPv4, IPv6 and neither: the same answer as ``ipaddress.ip_address``."""
        assert _as_ip(text) == _reference_ip(text)

    def test_ipv4_and_names_import_no_ipaddress(self) -> None:
        """DNS names and IPv4 addresses are checked without importing ipaddress; an IPv6
        address imports it."""
        code = (
            "import sys; from noderole.sans import parse_sans; "
            "parse_sans('localhost,127.0.0.1,10.0.0.10,api.example.com'); "
            "print('ipaddress' in sys.modules); parse_sans('::1'); "
            "print('ipaddress' in sys.modules)"
        )
        assert run_snippet(code) == ["False", "True"]
