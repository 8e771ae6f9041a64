"""The one error map, end to end: each cause of an upstream failure produced
for real (a closed port, an unresolvable name, an untrusted certificate, a
silent server, a blackholed port, a reset, garbage), through the real
proxy on each transport. The client gets the right status, code and cause
class, never the upstream's address or the route's key; the log gets one
warning on "proxy.upstream" naming host:port and the cause, never the key
or the path."""

from __future__ import annotations

import logging
import socket
import ssl
import struct
from typing import Any

import httpx
import pytest

from tests.casefiles import chunk, read_stream
from tests.harness import running_proxy, sse
from tests.transport.servers import Conn, ServerThread, blackhole, chunked_head
from tests.transport.servers import chunk as http_chunk

ROUTE_KEY = "sk-route-key-never-shown-0123456789"
CLIENT_KEY = {"Authorization": "Bearer sk-client"}
REFUSED = "The upstream could not be reached (connection refused)."


def config(client: str, upstream: str, **timeouts: float) -> dict[str, Any]:
    route = {"name": "bad", "models": ["*"], "upstream": upstream, "api_key": ROUTE_KEY}
    if timeouts:
        route["timeouts"] = timeouts
    return {"routes": [route], "server": {"upstream_client": client}}


def chat(proxy_url: str, stream: bool = False) -> httpx.Response:
    payload = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    return httpx.post(f"{proxy_url}/chat/completions", json=payload, headers=CLIENT_KEY, timeout=30)


def upstream_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "proxy.upstream"]


def check(
    r: httpx.Response,
    caplog: pytest.LogCaptureFixture,
    *,
    status: int,
    code: str,
    address: str,
    cause: str,
    said: str,
) -> None:
    """The client's error and the one log line, with nothing they must not hold."""
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert (error["code"], error["message"]) == (code, said)
    host = address.rsplit(":", 1)[0]
    assert host not in r.text
    assert ROUTE_KEY not in r.text
    lines = upstream_lines(caplog)
    assert lines == [f"upstream {address} failed before a response: {cause}"]
    record = next(r for r in caplog.records if r.name == "proxy.upstream")
    assert record.levelno == logging.WARNING
    assert (record.__dict__["upstream"], record.__dict__["cause"]) == (address, cause)
    text = caplog.text
    assert ROUTE_KEY not in text
    assert "chat/completions" not in lines[0]


@pytest.fixture
def warnings(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING, logger="proxy.upstream")
    return caplog


@pytest.fixture(params=["builtin", "aiohttp"])
def client(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_refused(
    client: str, warnings: pytest.LogCaptureFixture, stream: bool, refusing_port: int
) -> None:
    port = refusing_port
    with running_proxy(config(client, f"http://127.0.0.1:{port}/v1")) as proxy:
        r = chat(proxy.url, stream)
    check(
        r,
        warnings,
        status=502,
        code="upstream_unreachable",
        address=f"127.0.0.1:{port}",
        cause="refused",
        said=REFUSED,
    )


def test_refused_on_a_passthrough_path(
    client: str, warnings: pytest.LogCaptureFixture, refusing_port: int
) -> None:
    port = refusing_port
    with running_proxy(config(client, f"http://127.0.0.1:{port}/v1")) as proxy:
        r = httpx.get(f"{proxy.url}/models?secret-query=1", headers=CLIENT_KEY, timeout=30)
    check(
        r,
        warnings,
        status=502,
        code="upstream_unreachable",
        address=f"127.0.0.1:{port}",
        cause="refused",
        said=REFUSED,
    )
    assert "secret-query" not in warnings.text


def test_dns(client: str, warnings: pytest.LogCaptureFixture) -> None:
    # .invalid never resolves (RFC 6761)
    with running_proxy(config(client, "http://nonexistent.invalid:8080/v1")) as proxy:
        r = chat(proxy.url)
    check(
        r,
        warnings,
        status=502,
        code="upstream_dns_failure",
        address="nonexistent.invalid:8080",
        cause="dns",
        said="The upstream could not be reached (DNS lookup failed).",
    )


def test_tls(client: str, warnings: pytest.LogCaptureFixture, server_tls: ssl.SSLContext) -> None:
    async def handler(conn: Conn) -> None:
        await conn.request()

    with ServerThread(handler, server_tls) as up:
        with running_proxy(config(client, up.url)) as proxy:
            r = chat(proxy.url)
        assert up.requests == []
    check(
        r,
        warnings,
        status=502,
        code="upstream_tls_failure",
        address=f"127.0.0.1:{up.port}",
        cause="tls",
        said="The upstream could not be reached (TLS handshake failed).",
    )


def test_idle_timeout(client: str, warnings: pytest.LogCaptureFixture) -> None:
    async def handler(conn: Conn) -> None:
        await conn.request()
        await conn.until_closed()  # accepts, reads the request, never answers

    with ServerThread(handler) as up:
        with running_proxy(config(client, up.url, idle=0.5)) as proxy:
            r = chat(proxy.url)
        assert up.closed.wait(5), "the proxy closes the connection"
    check(
        r,
        warnings,
        status=504,
        code="upstream_timeout",
        address=f"127.0.0.1:{up.port}",
        cause="idle_timeout",
        said="The upstream did not answer within the route's idle timeout (timeouts.idle).",
    )


def test_connect_timeout(client: str, warnings: pytest.LogCaptureFixture) -> None:
    with blackhole() as port:
        upstream = f"http://127.0.0.1:{port}/v1"
        with running_proxy(config(client, upstream, connect=0.5)) as proxy:
            r = chat(proxy.url)
    check(
        r,
        warnings,
        status=504,
        code="upstream_connect_timeout",
        address=f"127.0.0.1:{port}",
        cause="connect_timeout",
        said="The upstream did not accept a connection within the route's connect timeout "
        "(timeouts.connect).",
    )


def reset(conn: Conn) -> None:
    """Close with a reset: SO_LINGER 0 makes the close an RST, not a FIN."""
    sock = conn.writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.writer.transport.abort()


async def reset_after_the_request(conn: Conn) -> None:
    await conn.request()
    reset(conn)


def test_reset(client: str, warnings: pytest.LogCaptureFixture) -> None:
    with ServerThread(reset_after_the_request) as up:
        with running_proxy(config(client, up.url)) as proxy:
            r = chat(proxy.url)
        assert len(up.requests) == 1
    check(
        r,
        warnings,
        status=502,
        code="upstream_unreachable",
        address=f"127.0.0.1:{up.port}",
        cause="reset",
        said="The upstream could not be reached (connection reset or closed before a response).",
    )


@pytest.mark.parametrize(
    "answer",
    [
        b"garbage\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n",
    ],
    ids=["garbage", "protocol-switch"],
)
def test_bad_response(client: str, warnings: pytest.LogCaptureFixture, answer: bytes) -> None:
    async def handler(conn: Conn) -> None:
        await conn.request()
        await conn.send(answer)
        await conn.until_closed()

    with ServerThread(handler) as up, running_proxy(config(client, up.url)) as proxy:
        r = chat(proxy.url)
    check(
        r,
        warnings,
        status=502,
        code="upstream_bad_response",
        address=f"127.0.0.1:{up.port}",
        cause="bad_response",
        said="The upstream's response is not valid HTTP/1.1 (or switches protocols).",
    )


@pytest.mark.parametrize(
    ("cut", "cause", "code"),
    [("reset", "reset", "upstream_disconnected"), ("silence", "idle_timeout", "upstream_timeout")],
)
def test_a_failure_mid_stream(
    client: str, warnings: pytest.LogCaptureFixture, cut: str, cause: str, code: str
) -> None:
    first = sse(chunk({"content": "partial"}))

    async def handler(conn: Conn) -> None:
        await conn.request()
        await conn.send(chunked_head("Content-Type: text/event-stream") + http_chunk(first))
        if cut == "reset":
            reset(conn)
        else:
            await conn.until_closed()

    with ServerThread(handler) as up, running_proxy(config(client, up.url, idle=0.5)) as proxy:
        r = chat(proxy.url, stream=True)
    assert r.status_code == 200
    stream = read_stream(r.content)
    assert stream["content"] == "partial"
    assert [e["code"] for e in stream["errors"]] == [code]
    assert not stream["done"]
    assert upstream_lines(warnings) == [
        f"upstream 127.0.0.1:{up.port} failed mid-response: {cause}"
    ]
    assert ROUTE_KEY not in warnings.text
