"""The transport contract: what every real transport (the built-in client
and aiohttp) does, each against the same raw upstreams on real sockets.
A failure is checked by its cause (`proxy.upstream.errors.cause_of`), the
word the error map turns into a proxy error."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import itertools
import ssl
import zlib
from collections.abc import AsyncIterator, Awaitable, Sequence
from pathlib import Path
from typing import Any

import pytest
import trustme

from proxy.config import ServerModel
from proxy.errors import UpstreamBusy
from proxy.upstream import (
    Cause,
    Origin,
    Request,
    Response,
    Transport,
    Upstream,
    cause_of,
    open_transport,
)
from tests.transport.servers import (
    WAIT,
    Conn,
    RawServer,
    answering,
    blackhole,
    chunk,
    chunked,
    chunked_head,
    response,
    serving,
)

pytestmark = pytest.mark.anyio


# -- the client side -------------------------------------------------------------------------------


def server_model(client: str, limit: int, queue_timeout: float) -> ServerModel:
    return ServerModel(
        upstream_client=client,  # type: ignore[arg-type]
        upstream_max_in_flight=limit,
        upstream_queue_timeout=queue_timeout,
    )


@contextlib.asynccontextmanager
async def opened(
    client: str, *, limit: int = 16, queue_timeout: float = WAIT
) -> AsyncIterator[Transport]:
    transport = open_transport(server_model(client, limit, queue_timeout))
    await transport.start()
    try:
        yield transport
    finally:
        await transport.close()
        await asyncio.sleep(0.05)  # the closed transports' callbacks run


@contextlib.asynccontextmanager
async def opened_upstream(
    client: str, *, limit: int = 16, queue_timeout: float = WAIT
) -> AsyncIterator[Upstream]:
    upstream = Upstream(
        open_transport(server_model(client, limit, queue_timeout)), queue_timeout=queue_timeout
    )
    await upstream.start()
    try:
        yield upstream
    finally:
        await upstream.close()
        await asyncio.sleep(0.05)


def request_to(
    server: RawServer,
    method: str = "GET",
    target: str = "/",
    headers: Sequence[tuple[str, str]] = (),
    body: bytes | None = None,
    *,
    idle: float = WAIT,
    connect: float = WAIT,
) -> Request:
    origin = Origin(server.scheme, "127.0.0.1", server.port)
    return Request(origin, method, target, list(headers), body, connect, idle)


async def read_all(resp: Response, pieces: list[bytes] | None = None) -> bytes:
    parts = [] if pieces is None else pieces
    while data := await resp.read():
        parts.append(data)
    return b"".join(parts)


async def get(
    transport: Transport, server: RawServer, target: str = "/", **options: Any
) -> tuple[int, bytes]:
    """A GET whose body is read to its end and released."""
    resp = await transport.send(request_to(server, target=target, **options))
    try:
        return resp.status, await read_all(resp)
    finally:
        resp.release()


async def failure(awaitable: Awaitable[Any]) -> Cause:
    """The cause `awaitable` fails with (within WAIT)."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait([task], timeout=WAIT)
    if not done:
        task.cancel()
        raise AssertionError(f"no failure within {WAIT} s")
    exc = task.exception()
    assert exc is not None, "it did not fail"
    cause = cause_of(exc)
    assert cause is not None, f"not a transport error: {exc!r}"
    return cause


async def wait_until(condition: Any, what: str, within: float = WAIT) -> None:
    for _ in range(int(within / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not within {within} s: {what}")


# -- requests and framing --------------------------------------------------------------------------


async def test_the_request_goes_as_given(client: str) -> None:
    headers = [("Content-Type", "application/json"), ("X-Two", "a"), ("X-Two", "b")]
    async with serving(answering(response())) as up, opened(client) as transport:
        target = "/v1/chat/completions?stream=true&x=%20y"
        resp = await transport.send(request_to(up, "POST", target, headers, b'{"a": 1}'))
        assert await read_all(resp) == b"ok"
        resp.release()
    head, _, body = up.requests[0].partition(b"\r\n\r\n")
    line, *fields = head.decode().split("\r\n")
    assert line == f"POST {target} HTTP/1.1"  # no re-quoting
    names = [f.split(":", 1)[0].lower() for f in fields]
    values = {(f.split(":", 1)[0].lower(), f.split(":", 1)[1].strip()) for f in fields}
    assert ("host", f"127.0.0.1:{up.port}") in values
    assert {("content-type", "application/json"), ("x-two", "a"), ("x-two", "b")} <= values
    assert ("content-length", "8") in values
    # nothing of the transport's own: no User-Agent, Accept or Accept-Encoding
    assert sorted(names) == ["content-length", "content-type", "host", "x-two", "x-two"]
    assert body == b'{"a": 1}'


async def test_keep_alive_two_requests_share_one_connection(client: str) -> None:
    answers = [response(b"one"), chunked(b"t", b"wo")]
    async with serving(answering(*answers)) as up, opened(client) as transport:
        assert await get(transport, up, "/1") == (200, b"one")
        assert await get(transport, up, "/2") == (200, b"two")
    assert up.connections == 1
    assert up.peers[0] == up.peers[1]  # the same client port: one connection


async def test_a_status_other_than_200_and_repeated_headers(client: str) -> None:
    answer = response(b"slow down", status="429 Too Many Requests", headers=["X-M: a", "x-m: b"])
    async with serving(answering(answer)) as up, opened(client) as transport:
        resp = await transport.send(request_to(up))
        assert resp.status == 429
        assert resp.header("x-m") == "a"
        assert [(k.lower(), v) for k, v in resp.headers if k.lower() == "x-m"] == [
            ("x-m", "a"),
            ("x-m", "b"),
        ]
        assert not resp.decoded
        assert await read_all(resp) == b"slow down"
        assert resp.complete
        resp.release()


@pytest.mark.parametrize("writes", ["one-write", "byte-by-byte"])
async def test_a_chunked_body(client: str, writes: str) -> None:
    events = [b'data: {"i": %d}\n\n' % i for i in range(50)]
    answer = chunked(*events, headers=["X-Head: 1"])

    async def handler(conn: Conn) -> None:
        while await conn.request() is not None:
            if writes == "one-write":
                await conn.send(answer)
            else:
                await conn.send_pieces([answer[i : i + 1] for i in range(len(answer))], 0)

    async with serving(handler) as up, opened(client) as transport:
        for _ in range(2):  # and the connection is good for the next one
            resp = await transport.send(request_to(up))
            assert resp.header("x-head") == "1"
            assert await read_all(resp) == b"".join(events)
            assert resp.complete
            resp.release()
    assert up.connections == 1


@pytest.mark.parametrize("cuts", [(1,), (3,), (4, 12), (21, 23), (44, 45, 46)])
async def test_a_chunked_body_split_at_awkward_positions(
    client: str, cuts: tuple[int, ...]
) -> None:
    body = chunk(b"a" * 16) + chunk(b"b" * 16) + b"0\r\n\r\n"
    bounds = [0, *cuts, len(body)]
    pieces = [body[a:b] for a, b in itertools.pairwise(bounds)]

    async def handler(conn: Conn) -> None:
        while await conn.request() is not None:
            await conn.send(chunked_head())
            await conn.send_pieces(pieces, 0.02)

    async with serving(handler) as up, opened(client) as transport:
        assert await get(transport, up) == (200, b"a" * 16 + b"b" * 16)


async def test_a_body_delimited_by_the_close(client: str) -> None:
    async def handler(conn: Conn) -> None:
        if await conn.request() is not None:
            await conn.send_pieces([b"HTTP/1.1 200 OK\r\nX-A: b\r\n\r\nhello ", b"world"])

    async with serving(handler) as up, opened(client) as transport:
        assert await get(transport, up) == (200, b"hello world")
        assert await get(transport, up) == (200, b"hello world")
    assert up.connections == 2  # such a connection is not reused


async def test_redirects_are_not_followed(client: str) -> None:
    answer = response(b"", status="307 Temporary Redirect", headers=["Location: /elsewhere"])
    async with serving(answering(answer, response(b"elsewhere"))) as up, opened(client) as t:
        resp = await t.send(request_to(up))
        assert (resp.status, resp.header("location")) == (307, "/elsewhere")
        assert await read_all(resp) == b""
        resp.release()
    assert len(up.requests) == 1


async def test_the_environment_proxies_are_not_used(
    client: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serving(answering(response(b"via proxy"))) as proxy:
        for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.port}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        async with serving(answering(response(b"direct"))) as up, opened(client) as transport:
            assert await get(transport, up) == (200, b"direct")
    assert proxy.requests == []


# -- content encodings -----------------------------------------------------------------------------

TEXT = b"".join(b"line %d of a text that compresses well\n" % i for i in range(2000))


def deflate_raw(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


@pytest.mark.parametrize(
    ("encoding", "encoded"),
    [
        ("gzip", gzip.compress(TEXT)),
        ("deflate", zlib.compress(TEXT)),
        ("deflate", deflate_raw(TEXT)),
    ],
    ids=["gzip", "deflate-zlib", "deflate-raw"],
)
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_gzip_and_deflate_bodies_are_decoded(
    client: str, encoding: str, encoded: bytes, framing: str
) -> None:
    if framing == "chunked":
        pieces = [encoded[i : i + 100] for i in range(0, len(encoded), 100)]
        answer = chunked(*pieces, headers=[f"Content-Encoding: {encoding}"])
    else:
        answer = response(encoded, headers=[f"Content-Encoding: {encoding}"])
    async with serving(answering(answer)) as up, opened(client) as transport:
        for _ in range(2):  # the second on the same connection, with a fresh decoder
            resp = await transport.send(request_to(up))
            assert resp.decoded
            assert resp.header("content-encoding") == encoding  # as it was sent
            assert await read_all(resp) == TEXT
            resp.release()
    assert up.connections == 1


def gzip_bomb(mib: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1 << 20)
    return b"".join(compressor.compress(zeros) for _ in range(mib)) + compressor.flush()


async def test_a_compressed_bomb_is_decoded_in_bounded_pieces(client: str) -> None:
    bomb = gzip_bomb(64)
    assert len(bomb) < 128 * 1024
    answer = response(bomb, headers=["Content-Encoding: gzip"])
    async with serving(answering(answer)) as up, opened(client) as transport:
        resp = await transport.send(request_to(up))
        size = largest = 0
        while data := await resp.read():
            size += len(data)
            largest = max(largest, len(data))
        resp.release()
    assert size == 64 << 20
    assert largest <= 1 << 20  # a read's worth of memory, not the inflated size


def cut_in_half(encoded: bytes, framing: str, encoding: str) -> bytes:
    """A response whose compressed body stops at its half: the close ends a
    close-delimited one, a chunked one in the middle of a chunk, and the
    framing of a Content-Length one is whole (the data still stops short)."""
    half = encoded[: len(encoded) // 2]
    head = f"Content-Encoding: {encoding}"
    if framing == "close-delimited":
        return f"HTTP/1.1 200 OK\r\nConnection: close\r\n{head}\r\n\r\n".encode() + half
    if framing == "chunked":
        return chunked_head(head) + chunk(half[:-10]) + b"100\r\n" + half[-10:]
    return response(half, headers=[head])


@pytest.mark.parametrize(
    ("encoding", "encoded"),
    [("gzip", gzip.compress(TEXT)), ("deflate", zlib.compress(TEXT))],
    ids=["gzip", "deflate"],
)
@pytest.mark.parametrize("framing", ["close-delimited", "chunked", "content-length"])
async def test_a_compressed_body_cut_short_is_a_cut_body(
    client: str, encoding: str, encoded: bytes, framing: str
) -> None:
    sent = cut_in_half(encoded, framing, encoding)

    async def handler(conn: Conn) -> None:
        if await conn.request() is not None:
            await conn.send(sent)  # and close

    async with serving(handler) as up, opened(client) as transport:
        resp = await transport.send(request_to(up))
        pieces: list[bytes] = []
        assert await failure(read_all(resp, pieces)) == "reset"  # as a plain body cut short
        assert TEXT.startswith(b"".join(pieces))
        assert not resp.complete
        resp.release()


@pytest.mark.parametrize(
    ("encoding", "body"),
    [("gzip", b"\x1f\x8b\x08\x00 definitely not gzip"), ("deflate", b"x\x9c\xff\xff\xff\xff")],
    ids=["gzip", "deflate"],
)
@pytest.mark.parametrize("framing", ["close-delimited", "content-length"])
async def test_a_corrupt_compressed_body_is_a_bad_response(
    client: str, encoding: str, body: bytes, framing: str
) -> None:
    head = f"Content-Encoding: {encoding}"
    if framing == "close-delimited":
        sent = f"HTTP/1.1 200 OK\r\nConnection: close\r\n{head}\r\n\r\n".encode() + body
    else:
        sent = response(body, headers=[head])

    async def handler(conn: Conn) -> None:
        if await conn.request() is not None:
            await conn.send(sent)  # and close

    async with serving(handler) as up, opened(client) as transport:
        resp = await transport.send(request_to(up))
        assert await failure(read_all(resp)) == "bad_response"
        assert not resp.complete
        resp.release()


# -- informational responses, HEAD -----------------------------------------------------------------


@pytest.mark.parametrize("one_write", [True, False], ids=["one-write", "pieces"])
async def test_informational_responses_are_skipped(client: str, one_write: bool) -> None:
    pieces = [
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n",
        response(b"real", headers=["X-Real: 1"]),
    ]

    async def handler(conn: Conn) -> None:
        while await conn.request() is not None:
            if one_write:
                await conn.send(b"".join(pieces))
            else:
                await conn.send_pieces(pieces, 0.05)

    async with serving(handler) as up, opened(client) as transport:
        resp = await transport.send(request_to(up))
        assert (resp.status, resp.header("x-real"), resp.header("link")) == (200, "1", None)
        assert await read_all(resp) == b"real"
        resp.release()


async def test_head_gets_no_body(client: str) -> None:
    async def handler(conn: Conn) -> None:
        while (request := await conn.request()) is not None:
            if request.startswith(b"HEAD "):
                await conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nX-A: b\r\n\r\n")
            else:
                await conn.send(response(b"got"))

    async with serving(handler) as up, opened(client) as transport:
        resp = await transport.send(request_to(up, "HEAD", idle=60.0))
        assert (resp.status, resp.header("content-length")) == (200, "1234")
        async with asyncio.timeout(WAIT):  # far less than the idle timeout
            assert await read_all(resp) == b""
        assert resp.complete
        resp.release()
        assert await get(transport, up) == (200, b"got")
    assert up.requests[0].startswith(b"HEAD / HTTP/1.1\r\n")


# -- timeouts --------------------------------------------------------------------------------------


async def test_connect_timeout(client: str) -> None:
    with blackhole() as port:
        await asyncio.sleep(0.1)
        origin = Origin("http", "127.0.0.1", port)
        request = Request(origin, "GET", "/", [], None, 0.3, WAIT)
        async with opened(client) as transport:
            assert await failure(transport.send(request)) == "connect_timeout"
            assert transport.in_flight == 0


@pytest.mark.parametrize(
    "sent",
    [b"", b"HTTP/1.1 20", b"HTTP/1.1 200 OK\r\nContent-Le"],
    ids=["nothing", "part-of-the-status-line", "part-of-the-headers"],
)
async def test_idle_timeout_before_the_head(client: str, sent: bytes) -> None:
    async def handler(conn: Conn) -> None:
        await conn.request()
        if sent:
            await conn.send(sent)
        await conn.until_closed()

    async with serving(handler) as up, opened(client, limit=1) as transport:
        assert await failure(transport.send(request_to(up, idle=0.3))) == "idle_timeout"
        await wait_until(lambda: up.closed_by_client == 1, "the client closes the connection")
        assert transport.in_flight == 0  # and the slot is free again


@pytest.mark.parametrize("framing", ["content-length", "chunked", "close"])
async def test_idle_timeout_between_reads(client: str, framing: str) -> None:
    head = {
        "content-length": b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n",
        "chunked": chunked_head(),
        "close": b"HTTP/1.1 200 OK\r\n\r\n",
    }[framing]
    first = chunk(b"first") if framing == "chunked" else b"first"

    async def handler(conn: Conn) -> None:
        await conn.request()
        await conn.send(head + first)
        await conn.until_closed()

    async with serving(handler) as up, opened(client) as transport:
        resp = await transport.send(request_to(up, idle=0.3))
        assert await resp.read() == b"first"
        assert await failure(resp.read()) == "idle_timeout"
        resp.release()
        await wait_until(lambda: up.closed_by_client == 1, "the client closes the connection")


async def test_a_slow_but_steady_body_is_not_cut_by_the_idle_timeout(client: str) -> None:
    async def handler(conn: Conn) -> None:
        await conn.request()
        await conn.send(chunked_head())
        await conn.send_pieces([chunk(b"%d" % i) for i in range(8)] + [b"0\r\n\r\n"], 0.1)

    async with serving(handler) as up, opened(client) as transport:
        assert await get(transport, up, idle=0.3) == (200, b"01234567")


# -- flow control ----------------------------------------------------------------------------------


async def test_a_paused_reader_stops_the_upstream(client: str) -> None:
    """An endless body that nobody reads: the server's writes block (the
    transport keeps a bounded buffer), and resume when reading resumes."""
    piece = chunk(b"x" * 65536)

    async def handler(conn: Conn) -> None:
        await conn.request()
        await conn.send(chunked_head())
        while True:
            await conn.send(piece)

    async with serving(handler) as up, opened(client) as transport:
        resp = await transport.send(request_to(up))
        assert await resp.read()
        last, still = -1, 0
        for _ in range(int(WAIT / 0.1)):
            await asyncio.sleep(0.1)
            still = still + 1 if up.sent == last else 0
            last = up.sent
            if still == 5:
                break
        assert still == 5, "the server's writes never blocked"
        stalled = up.sent
        assert stalled < 128 << 20
        for _ in range(200):  # reading resumes the writes
            assert await resp.read()
        await wait_until(lambda: up.sent > stalled, "the server writes again")
        resp.release()  # mid-body: the connection is closed
        await wait_until(lambda: up.closed_by_client == 1, "the server sees the close")


async def test_a_large_body_read_slowly_arrives_intact(client: str) -> None:
    big = bytes(range(256)) * (4 * 1024 * 8)  # 8 MiB
    async with serving(answering(response(big))) as up, opened(client) as transport:
        resp = await transport.send(request_to(up))
        pieces: list[bytes] = []
        while data := await resp.read():
            pieces.append(data)
            await asyncio.sleep(0.005)
        resp.release()
    assert b"".join(pieces) == big
    assert max(len(p) for p in pieces) <= 2 << 20


# -- TLS -------------------------------------------------------------------------------------------


async def test_tls_with_the_trust_store_of_ssl_cert_file(
    client: str,
    tls_ca: trustme.CA,
    server_tls: ssl.SSLContext,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tls_ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    answers = [response(b"secure"), chunked(b"also ", b"secure")]
    async with serving(answering(*answers), server_tls) as up, opened(client) as transport:
        transport.load_tls()
        assert await get(transport, up, "/a?b=c") == (200, b"secure")
        assert await get(transport, up) == (200, b"also secure")
    assert up.connections == 1
    assert up.requests[0].startswith(b"GET /a?b=c HTTP/1.1\r\n")


async def test_tls_with_an_untrusted_certificate_fails(
    client: str, server_tls: ssl.SSLContext
) -> None:
    async with serving(answering(response()), server_tls) as up, opened(client) as transport:
        assert await failure(transport.send(request_to(up))) == "tls"
        assert transport.in_flight == 0
    assert up.requests == []


# -- bad responses ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        b"garbage\r\n\r\n",
        b"HTTP/1.1 abc OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Huge: " + b"v" * (70 * 1024) + b"\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ws\r\n\r\nxx",
    ],
    ids=["garbage-status-line", "bad-status-code", "headers-too-large", "protocol-switch"],
)
async def test_bad_responses(client: str, answer: bytes) -> None:
    async def handler(conn: Conn) -> None:
        if await conn.request() is not None:
            await conn.send(answer)
            await conn.until_closed()

    async with serving(handler) as up, opened(client) as transport:
        assert await failure(transport.send(request_to(up))) == "bad_response"
        await wait_until(lambda: up.closed_by_client == 1, "the client closes the connection")
        assert transport.in_flight == 0


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_a_body_cut_short_by_the_close(client: str, framing: str) -> None:
    if framing == "chunked":
        sent = chunked_head() + chunk(b"first") + b"10\r\nsecond"
    else:
        sent = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst" + b"second"

    async def handler(conn: Conn) -> None:
        if await conn.request() is not None:
            await conn.send(sent)  # and close

    async with serving(handler) as up, opened(client) as transport:
        resp = await transport.send(request_to(up))
        assert await failure(read_all(resp)) == "reset"
        assert not resp.complete
        resp.release()


async def test_a_close_before_the_head(client: str) -> None:
    async def handler(conn: Conn) -> None:
        await conn.request()  # and close

    async with serving(handler) as up, opened(client) as transport:
        assert await failure(transport.send(request_to(up))) == "reset"


# -- cancelling, and the wait for a slot (through Upstream) ----------------------------------------


async def test_cancelling_a_read_closes_the_connection(client: str) -> None:
    async def handler(conn: Conn) -> None:
        await conn.request()
        await conn.send(chunked_head() + chunk(b"first"))
        await conn.until_closed()

    async with serving(handler) as up, opened_upstream(client) as upstream:
        read_once = asyncio.Event()

        async def reader() -> None:
            async with upstream.send(request_to(up, idle=60.0)) as resp:
                assert await resp.read() == b"first"
                read_once.set()
                await resp.read()  # nothing more comes

        task = asyncio.create_task(reader())
        await asyncio.wait_for(read_once.wait(), WAIT)
        await asyncio.sleep(0.05)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await wait_until(lambda: up.closed_by_client == 1, "the server sees EOF", within=1.0)
        assert upstream.in_flight == 0


async def test_cancelling_the_wait_for_the_head_closes_the_connection(client: str) -> None:
    async def handler(conn: Conn) -> None:
        await conn.request()
        await conn.until_closed()

    async with serving(handler) as up, opened_upstream(client) as upstream:

        async def request() -> None:
            async with upstream.send(request_to(up, idle=60.0)):
                raise AssertionError("no head was sent")

        task = asyncio.create_task(request())
        await wait_until(lambda: len(up.requests) == 1, "the request arrives")
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await wait_until(lambda: up.closed_by_client == 1, "the server sees EOF", within=1.0)
        assert upstream.in_flight == 0


def holding_the_first(answer: bytes) -> Any:
    """The first connection gets half a response and is kept open; the
    others get `answer`."""

    async def handler(conn: Conn) -> None:
        while await conn.request() is not None:
            if conn.index == 1:
                await conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nheld")
                await conn.until_closed()
                return
            await conn.send(answer)

    return handler


async def test_past_the_in_flight_limit_a_request_waits_then_gets_a_503(client: str) -> None:
    handler = holding_the_first(response(b"after"))
    async with (
        serving(handler) as up,
        opened_upstream(client, limit=1, queue_timeout=0.3) as upstream,
        contextlib.AsyncExitStack() as held,
    ):
        await held.enter_async_context(upstream.send(request_to(up)))
        assert (upstream.in_flight, upstream.waiting) == (1, 0)
        second = asyncio.ensure_future(held.enter_async_context(upstream.send(request_to(up))))
        await wait_until(lambda: upstream.waiting == 1, "the second request waits")
        with pytest.raises(UpstreamBusy) as info:
            await asyncio.wait_for(second, WAIT)
        error = info.value
        assert (error.status, error.code, error.headers) == (
            503,
            "upstream_busy",
            {"Retry-After": "1"},
        )
        assert len(up.requests) == 1  # the second one was never sent
        assert (upstream.in_flight, upstream.waiting) == (1, 0)
        await held.aclose()  # the first one's body unread: closed, its slot freed
        assert upstream.in_flight == 0
        async with upstream.send(request_to(up)) as resp:
            assert await read_all(resp) == b"after"
        assert len(up.requests) == 2


async def test_a_waiting_request_goes_when_a_slot_comes_free(client: str) -> None:
    async with (
        serving(answering(response(b"a"))) as up,
        opened_upstream(client, limit=1) as upstream,
    ):
        first = await upstream.transport.send(request_to(up))
        waiting = asyncio.ensure_future(get(upstream.transport, up))
        await wait_until(lambda: upstream.waiting == 1, "the second request waits")
        assert await read_all(first) == b"a"
        first.release()
        assert await asyncio.wait_for(waiting, WAIT) == (200, b"a")
        assert (upstream.in_flight, upstream.waiting) == (0, 0)


async def test_cookies_are_not_kept_between_requests(client: str) -> None:
    # by name, not by address: a cookie jar would keep a cookie for a host name
    answer = response(b"ok", headers=["Set-Cookie: session=upstream-secret; Path=/"])
    async with serving(answering(answer)) as up, opened(client) as transport:
        request = Request(Origin("http", "localhost", up.port), "GET", "/", [], None, WAIT, WAIT)
        for _ in range(2):
            resp = await transport.send(request)
            assert await read_all(resp) == b"ok"
            resp.release()
    assert len(up.requests) == 2
    assert all(b"cookie" not in r.lower() for r in up.requests)
