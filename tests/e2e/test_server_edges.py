"""Requests at the edges of what the server serves, through a real socket:
a trailing slash is a 404 in the error shape (never a redirect built from
the client's Host), HEAD is served where GET is (health checks use it), and
TRACE and CONNECT are not passed upstream."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest

from tests.harness import FakeUpstream, ProxyServer, route_config, running_proxy

ADMIN = "adm-edges-0123456789"


@pytest.fixture
def proxy(upstream: FakeUpstream) -> Iterator[ProxyServer]:
    with running_proxy(route_config(upstream, top={"server": {"admin_token": ADMIN}})) as server:
        yield server


@pytest.mark.parametrize(
    ("method", "path"),
    [("PUT", "/v1/reasoning/profiles/"), ("GET", "/v1/conversations/"), ("GET", "/healthz/")],
)
def test_a_trailing_slash_is_a_404_not_a_redirect(
    proxy: ProxyServer, upstream: FakeUpstream, method: str, path: str
) -> None:
    r = httpx.request(
        method,
        f"http://127.0.0.1:{proxy.port}{path}",
        headers={"Host": "evil.example", "Authorization": f"Bearer {ADMIN}"},
        json={"effort": "low"},
    )
    assert r.status_code == 404
    assert "location" not in r.headers
    assert r.json()["error"]["code"] == "not_found"
    assert upstream.requests == []


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/ui"])
def test_head_is_served_where_get_is(proxy: ProxyServer, path: str) -> None:
    got = httpx.get(f"http://127.0.0.1:{proxy.port}{path}")
    head = httpx.head(f"http://127.0.0.1:{proxy.port}{path}")
    assert (head.status_code, head.content) == (got.status_code, b"")
    assert head.headers["content-type"] == got.headers["content-type"]


def raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        out = b""
        while b"\r\n\r\n" not in out:
            piece = conn.recv(4096)
            if not piece:
                break
            out += piece
    return out


@pytest.mark.parametrize("method", [b"TRACE", b"CONNECT"])
def test_trace_and_connect_are_not_passed_upstream(
    proxy: ProxyServer, upstream: FakeUpstream, method: bytes
) -> None:
    answer = raw(
        proxy.port,
        method + b" /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
        b"Connection: close\r\n\r\n",
    )
    assert answer.startswith(b"HTTP/1.1 405 "), answer[:100]
    assert upstream.requests == []
