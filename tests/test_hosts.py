"""HostGuard: the Host names a request may be sent to (DNS rebinding)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.hosts import HostGuard, hostname, is_loopback


def guard(allowed: tuple[str, ...] = ()) -> HostGuard:
    built = HostGuard.build(list(allowed), ("Dev-Box",))
    assert built is not None
    return built


@pytest.mark.parametrize(
    "host",
    [
        b"127.0.0.1:8787",
        b"127.0.0.1",
        b"localhost:8787",
        b"LOCALHOST.",
        b"api.localhost:1",
        b"[::1]:8787",
        b"[::1]",
        b"10.0.0.7:8787",
        b"dev-box:8787",
        None,  # HTTP/1.0 without a Host: not a browser
    ],
)
def test_names_no_web_page_can_own_are_served(host: bytes | None) -> None:
    assert guard().allows(host)


@pytest.mark.parametrize(
    "host",
    [
        b"evil.example:8787",
        b"evil.example",
        b"localhost.evil.example",
        b"127.0.0.1.nip.io:8787",
        b"dev-box.evil.example",
        b"",
        b"evil.example:port",
        b"[::1",
        b"[::1]x",
        b"[evil.example]:80",
    ],
)
def test_other_names_are_refused_on_loopback(host: bytes) -> None:
    assert not guard().allows(host)
    # and still refused once remembered
    assert not guard().allows(host)


def test_listed_names_and_suffixes_are_served() -> None:
    listed = guard(allowed=("Proxy.Internal", "*.corp.example"))
    assert listed.allows(b"proxy.internal:8787")
    assert listed.allows(b"api.corp.example")
    assert not listed.allows(b"corp.example.evil.example")
    assert not listed.allows(b"other.example")


LOOPBACK = ("127.0.0.1", 8787)
LAN = ("192.168.1.2", 8787)


def test_browsers_on_loopback_are_checked_unless_names_are_listed() -> None:
    g = guard()
    assert not g.serves(LOOPBACK, b"evil.example", True)
    assert not g.serves(("::1", 8787), b"evil.example", True)
    assert not g.serves(("::ffff:127.0.0.1", 8787), b"evil.example", True)
    # no page can send a request that is not a browser's
    assert g.serves(LOOPBACK, b"evil.example", False)
    # arriving elsewhere (a container network, a LAN), any name
    assert g.serves(LAN, b"evil.example", True)
    assert g.serves(("::", 8787), b"proxy:8787", True)
    # in process (a test transport names no socket)
    assert g.serves(None, b"testserver", True)
    assert g.serves(("testserver", 80), b"testserver", True)
    assert HostGuard.build(["*"], ()) is None
    # names listed: every request, wherever it arrived
    named = guard(allowed=("proxy.example",))
    assert named.serves(LAN, b"proxy.example", False)
    assert not named.serves(LAN, b"evil.example", False)
    assert not named.serves(None, b"evil.example", False)


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.5", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.2", False),
        ("127example", False),
        ("testserver", False),
    ],
)
def test_loopback_addresses(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback


@given(st.binary(max_size=40))
def test_any_bytes_get_an_answer_and_the_same_one_twice(host: bytes) -> None:
    g = guard()
    first = g.allows(host)
    assert g.allows(host) is first
    if first:
        name = hostname(host.decode("latin-1"))
        assert name is not None


def test_remembered_answers_are_bounded() -> None:
    g = guard()
    for i in range(500):
        g.allows(f"h{i}.example".encode())
    assert len(g.seen) <= 64
