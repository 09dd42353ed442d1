"""Subject alternative names: from a SAN list as people write it to the names a certificate holds.

A SAN list is the comma-separated text of ``EKS_KONNECTIVITY_SANS`` (or any iterable of such
items). Each entry becomes either an IP address SAN or a DNS name SAN, normalised so that two ways
of writing the same name compare equal (``[::1]`` and ``0:0::1``; ``API.Example.`` and
``api.example``). Anything a TLS client could never match (a port, a URL, a CIDR, an underscore, a
misplaced wildcard) is rejected here, with the entry named, instead of producing a certificate that
fails at the first handshake.

Internationalised names are converted to their ASCII ``xn--`` form with Python's standard library
codec (:mod:`encodings.idna`, IDNA 2003 with nameprep); the third-party ``idna`` package is not a
dependency of cryptography 50 and is not needed.

This module must stay cheap to import: it never imports :mod:`cryptography`, and imports
:mod:`ipaddress` (about 6M instructions, 3% of ``import click``; every ``plan`` and ``apply`` of a
certificate step checks its SANs) only for an entry with a ``:`` in it, which may be IPv6: an IPv4
address is read here, exactly as :class:`ipaddress.IPv4Address` reads one.

Internal module: SANs reach it through ``noderole.MintCertificate`` and ``noderole cert``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

from noderole import recordclass
from noderole.errors import CertificateError
from noderole.names import is_dns_label

__all__ = ["SubjectAltName", "covers", "parse_host", "parse_sans"]

_HOST_PORT = r"^[^:\[\]]+:\d*\Z"
_BRACKETED = r"^\[(?P<inner>[^\]]*)\](?P<rest>.*)\Z"
"""Patterns compiled only for an entry with ``[`` or ``:`` in it (``re`` caches them)."""
# IDNA 2003 treats these as label separators too (ideographic and full-width full stops).
_UNICODE_DOTS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})
_MAX_NAME = 253
_MAX_LABEL = 63


@recordclass.frozen
class SubjectAltName:
    """One normalised subject alternative name."""

    kind: Literal["dns", "ip"]
    """``dns`` for a DNS name, ``ip`` for an IPv4 or IPv6 address."""
    value: str
    """The normalised text: lower-case ASCII DNS name, or the canonical address text."""

    def __str__(self) -> str:
        return self.value


def parse_sans(text: str | Iterable[str]) -> tuple[SubjectAltName, ...]:
    """The SANs in ``text``, normalised, duplicates dropped, first occurrence order kept.

    ``text`` is a comma-separated list, or an iterable of such lists. Spaces around entries are
    trimmed and empty entries skipped. Raises :class:`CertificateError` naming the first offending
    entry and why, or saying that no SAN was given.
    """
    items = [text] if isinstance(text, str) else list(text)
    seen: set[SubjectAltName] = set()
    result: list[SubjectAltName] = []
    for item in items:
        if not isinstance(item, str):
            raise CertificateError(f"SAN list items must be strings, got {item!r}")
        for raw in item.split(","):
            entry = raw.strip()
            if not entry:
                continue
            try:
                san = _parse_entry(entry)
            except _Refused as refused:
                raise CertificateError(
                    f"invalid SAN {entry!r}: {refused.why}; fix this entry in the SAN list "
                    "(comma-separated DNS names and IP addresses)"
                ) from None
            if san not in seen:
                seen.add(san)
                result.append(san)
    if not result:
        raise CertificateError(
            "no SANs given: the SAN list is empty; give at least one DNS name or IP address "
            "(comma-separated, e.g. 'konnectivity.example.com,10.0.0.10')"
        )
    return tuple(result)


def parse_host(text: str) -> SubjectAltName:
    """The one DNS name or IP address a client dials (``text``, trimmed), normalised as a SAN
    is; a :class:`CertificateError` naming it and why otherwise: a list, a URL, a port, a path,
    a wildcard, or text that is neither a name nor an address."""
    entry = text.strip()
    why = ""
    if not entry:
        why = "it is empty"
    elif "," in entry:
        why = "a list is not one address; give the one address clients dial"
    elif entry.startswith("*"):
        why = "a wildcard names no host to dial"
    else:
        try:
            return _parse_entry(entry)
        except _Refused as refused:
            why = refused.why
    raise CertificateError(f"{entry!r} is not a host name or IP address: {why}")


def covers(sans: Iterable[SubjectAltName], host: SubjectAltName) -> bool:
    """Whether a certificate for ``sans`` is valid for ``host`` (RFC 6125: the same address or
    name, or a wildcard ``*.`` standing for exactly the host's first label)."""
    for san in sans:
        if san.kind != host.kind:
            continue
        if san.value == host.value:
            return True
        if san.kind == "dns" and san.value.startswith("*."):
            first, dot, rest = host.value.partition(".")
            if first and dot and rest == san.value[2:]:
                return True
    return False


class _Refused(Exception):
    """Why an entry is no name: never leaves this module (:func:`parse_sans` and
    :func:`parse_host` each word it as a :class:`CertificateError`)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _parse_entry(entry: str) -> SubjectAltName:
    """One trimmed, non-empty entry as a SAN; :class:`_Refused` saying why not."""
    if "://" in entry:
        raise _Refused("a URL is not a name; give only the host part")
    if "/" in entry:
        head = entry.split("/", 1)[0].strip("[]")
        if _as_ip(head) is not None:
            raise _Refused("a network (CIDR) is not an address; give a single IP address")
        raise _Refused("'/' is not allowed in a name (a URL or path?)")
    if "%" in entry and ":" in entry:
        raise _Refused("IPv6 zone ids ('%eth0') cannot appear in a certificate")
    bracketed = re.match(_BRACKETED, entry) if entry.startswith("[") else None
    if bracketed:
        inner, rest = bracketed.group("inner"), bracketed.group("rest")
        if rest:
            if re.fullmatch(r":\d*", rest):
                raise _Refused("a port is not part of a name; drop ':PORT'")
            raise _Refused("unexpected text after ']'")
        address = _as_ip(inner)
        if address is None or ":" not in address:
            raise _Refused("brackets may only enclose an IPv6 address")
        return SubjectAltName("ip", address)
    address = _as_ip(entry)
    if address is not None:
        return SubjectAltName("ip", address)
    if ":" in entry:
        if re.match(_HOST_PORT, entry):
            raise _Refused("a port is not part of a name; drop ':PORT'")
        raise _Refused("not a valid IP address, and ':' is not allowed in a DNS name")
    return SubjectAltName("dns", _dns_name(entry))


def _as_ip(text: str) -> str | None:
    """The canonical text of the IP address ``text`` is (IPv6: with a ``:``), or None."""
    if ":" not in text:
        # ipaddress.ip_address reads a text without ':' as IPv4 or not at all.
        return text if _is_ipv4(text) else None
    import ipaddress

    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def _is_ipv4(text: str) -> bool:
    """Whether ``ipaddress.IPv4Address(text)`` accepts ``text``: four ASCII decimal octets of
    at most three digits, none above 255, without leading zeros. Such a text is its own canonical
    form (``str`` of the address)."""
    octets = text.split(".")
    return len(octets) == 4 and all(
        octet.isascii()
        and octet.isdigit()
        and len(octet) <= 3
        and (octet == "0" or not octet.startswith("0"))
        and int(octet) <= 255
        for octet in octets
    )


def _dns_name(entry: str) -> str:
    """The normalised ASCII form of a DNS name entry; :class:`_Refused` saying why not."""
    name = entry.translate(_UNICODE_DOTS)
    # One trailing dot marks a fully qualified name; certificates hold names without it.
    name = name.removesuffix(".")
    if not name:
        raise _Refused("empty name")
    labels = name.split(".")
    converted = [_label(label) for label in labels]
    if "*" in converted[1:]:
        raise _Refused("a wildcard may only be the whole left-most label ('*.example.com')")
    if converted[0] == "*" and len(converted) < 3:
        raise _Refused("a wildcard needs at least two labels after it ('*.example.com')")
    if converted[-1].isdigit():
        raise _Refused(f"the last label {converted[-1]!r} is all digits (not a valid IP address?)")
    result = ".".join(converted)
    if len(result) > _MAX_NAME:
        raise _Refused(f"name is {len(result)} characters long (at most {_MAX_NAME})")
    return result


def _label(label: str) -> str:
    """One label, IDNA-converted and lower-cased; :class:`_Refused` saying why not."""
    if not label:
        raise _Refused("empty label (two dots in a row, or a leading dot)")
    if label == "*":
        return label
    if "*" in label:
        raise _Refused("a wildcard may only be the whole left-most label ('*.example.com')")
    if any(ch.isspace() for ch in label):
        raise _Refused("whitespace is not allowed inside a name")
    if not label.isascii():
        from encodings import idna as _idna  # here: almost every name is ASCII already

        try:
            label = _idna.ToASCII(label).decode("ascii")
        except UnicodeError as error:
            raise _Refused(
                f"label {label!r} cannot be converted to IDNA ASCII form ({error})"
            ) from None
    label = label.lower()
    if len(label) > _MAX_LABEL:
        raise _Refused(f"label {label[:20]!r}... is {len(label)} characters (at most 63)")
    if "_" in label:
        raise _Refused(f"label {label!r} contains '_' (not allowed in a DNS name)")
    if not is_dns_label(label):
        raise _Refused(
            f"label {label!r} may hold only letters, digits and hyphens, "
            f"and may not start or end with a hyphen",
        )
    return label
