"""The lean HTTP/1.1 client (proxy.http1) against real servers: scripted
upstreams (tests/http1_servers.py) that read the client's requests and write
raw response bytes, so the framing, the splitting into socket writes and the
closing of connections are exactly what each test says."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gzip
import itertools
import socket
import ssl
import struct
import threading
import tracemalloc
import zlib

import pytest
import trustme

from proxy import http1
from proxy.config import build_config
from proxy.errors import ConfigError
from tests.http1_servers import (
    BOTH_LOOPS,
    HANG,
    WAIT,
    Conn,
    Handler,
    Upstream,
    answering,
    chunk,
    chunked,
    chunked_head,
    fetch,
    get,
    opened_pool,
    read_all,
    response,
    serving,
    unused_port,
    wait_until,
)
from tests.transport.servers import blackhole

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# -- Origin and the request's bytes ------------------------------------------------------


def test_origin_host_header_and_key() -> None:
    assert http1.Origin("http", "example.com", None).host_header == "example.com"
    assert http1.Origin("http", "example.com", None).key == ("http", "example.com", 80)
    assert http1.Origin("https", "example.com", None).port == 443
    assert http1.Origin("https", "example.com", 443).host_header == "example.com"
    assert http1.Origin("https", "example.com", 80).host_header == "example.com:80"
    assert http1.Origin("http", "127.0.0.1", 8080).host_header == "127.0.0.1:8080"
    assert http1.Origin("http", "::1", 8080).host_header == "[::1]:8080"
    assert http1.Origin("https", "::1", None).host_header == "[::1]"
    with pytest.raises(ValueError, match="scheme"):
        http1.Origin("ftp", "example.com", None)


def test_encode_request_bytes() -> None:
    origin = http1.Origin("http", "up.example", 8000)
    got = http1.encode_request(
        "POST", "/v1/x?a=1", origin, [("X-One", "1"), ("x-two", "zwei")], b"{}"
    )
    assert got == (
        b"POST /v1/x?a=1 HTTP/1.1\r\nhost: up.example:8000\r\nX-One: 1\r\nx-two: zwei\r\n"
        b"content-length: 2\r\n\r\n{}"
    )
    # no body: no content-length for GET, content-length 0 for POST
    assert http1.encode_request("GET", "/", origin, [], None) == (
        b"GET / HTTP/1.1\r\nhost: up.example:8000\r\n\r\n"
    )
    assert http1.encode_request("POST", "/", origin, [], None) == (
        b"POST / HTTP/1.1\r\nhost: up.example:8000\r\ncontent-length: 0\r\n\r\n"
    )


def test_header_bytes_go_unchanged() -> None:
    """A client's header bytes are read as latin-1 (one character a byte):
    encoded as latin-1 again, each byte goes upstream as it came, not
    re-encoded as UTF-8."""
    origin = http1.Origin("http", "up.example", 8000)
    every_byte = bytes(range(0x20, 0x7F)) + bytes(range(0x80, 0x100))
    value = every_byte.decode("latin-1")  # what the ASGI layer makes of them
    got = http1.encode_request("GET", "/caf\xe9", origin, [("x-name", value)], None)
    assert b"\r\nx-name: " + every_byte + b"\r\n" in got
    assert got.startswith(b"GET /caf\xe9 HTTP/1.1\r\n")


@pytest.mark.parametrize("value", ["\u20ac", "\u0100", "emoji \U0001f600"])
def test_a_header_character_above_one_byte_is_refused(value: str) -> None:
    origin = http1.Origin("http", "up.example", 8000)
    with pytest.raises(ValueError, match="latin-1"):
        http1.encode_request("GET", "/", origin, [("x-name", value)], None)


def test_a_routes_header_beyond_latin_1_is_a_config_error() -> None:
    def route(headers: dict[str, str]) -> dict[str, object]:
        return {"routes": [{"name": "r", "upstream": "http://up/v1", "headers": headers}]}

    assert build_config(route({"X-Name": "caf\xe9"}), env={}).routes[0].headers == (
        ("X-Name", "caf\xe9"),
    )
    with pytest.raises(ConfigError, match="latin-1"):
        build_config(route({"X-Price": "5 \u20ac"}), env={})


@pytest.mark.parametrize(
    "header",
    [
        ("x-evil", "a\r\nInjected: yes"),
        ("x-evil", "a\nInjected: yes"),
        ("x-evil", "a\rInjected: yes"),
        ("x-evil", "trailing\r\n"),
        ("x-evil\r\nInjected", "yes"),
        ("x-evil\n", "yes"),
        ("x-evil", "nul\0byte"),
        ("x-evil\0", "yes"),
        ("x-evil\r", "yes"),
    ],
)
def test_encode_request_rejects_line_breaks(header: tuple[str, str]) -> None:
    origin = http1.Origin("http", "127.0.0.1", 8000)
    with pytest.raises(ValueError, match="line break or NUL"):
        http1.encode_request("GET", "/", origin, [("x-ok", "fine"), header], None)


@pytest.mark.parametrize("name", ["", "x:y", ":authority", "x y"])
def test_encode_request_rejects_bad_header_names(name: str) -> None:
    origin = http1.Origin("http", "127.0.0.1", 8000)
    with pytest.raises(ValueError, match="header name"):
        http1.encode_request("GET", "/", origin, [(name, "v")], None)


async def test_a_bad_header_fails_before_anything_is_sent() -> None:
    async with serving(answering(response())) as up, opened_pool() as pool:
        with pytest.raises(ValueError, match="line break"):
            await fetch(pool, up, headers=[("x-evil", "a\r\nb: c")])
        assert await get(pool, up) == (200, b"ok")  # no slot was taken
        assert up.requests == [b"GET / HTTP/1.1\r\nhost: 127.0.0.1:%d\r\n\r\n" % up.port]


async def test_the_request_bytes_the_server_receives() -> None:
    async with serving(answering(response())) as up, opened_pool() as pool:
        resp = await fetch(
            pool,
            up,
            "POST",
            "/v1/chat/completions?stream=true&x=%20y",
            [("Content-Type", "application/json"), ("x-first", "1"), ("X-Second", "two")],
            b'{"a": 1}',
        )
        assert await read_all(resp) == b"ok"
        resp.release()
        assert up.requests == [
            b"POST /v1/chat/completions?stream=true&x=%20y HTTP/1.1\r\n"
            + b"host: 127.0.0.1:%d\r\n" % up.port
            + b"Content-Type: application/json\r\n"
            b"x-first: 1\r\n"
            b"X-Second: two\r\n"
            b"content-length: 8\r\n"
            b"\r\n"
            b'{"a": 1}'
        ]


# -- body framing ---------------------------------------------------------------------------


async def test_content_length_body() -> None:
    body = b"0123456789" * 1000
    answer = response(body, headers=["Content-Type: text/plain", "X-Multi: a", "x-multi: b"])
    async with serving(answering(answer)) as up, opened_pool() as pool:
        resp = await fetch(pool, up)
        assert resp.status == 200
        assert resp.header("content-type") == "text/plain"
        assert resp.header("x-multi") == "a"  # the first value
        assert ("x-multi", "b") in resp.headers
        assert resp.header("x-absent") is None
        assert not resp.decoded
        assert await read_all(resp) == body
        assert resp.complete
        assert await resp.read() == b""  # stays at the end
        resp.release()


async def test_status_and_reason_other_than_200() -> None:
    answer = response(b'{"error": "nope"}', status="429 Too Many Requests")
    async with serving(answering(answer)) as up, opened_pool() as pool:
        assert await get(pool, up) == (429, b'{"error": "nope"}')


async def test_chunked_body_many_chunks_in_one_write() -> None:
    events = [b'data: {"i": %d}\n\n' % i for i in range(200)]
    async with serving(answering(chunked(*events))) as up, opened_pool() as pool:
        resp = await fetch(pool, up)
        pieces: list[bytes] = []
        assert await read_all(resp, pieces) == b"".join(events)
        assert len(pieces) < 200  # many chunks come out of one read
        resp.release()


async def test_chunked_body_with_extensions_and_trailers() -> None:
    answer = (
        chunked_head()
        + b"5;name=value\r\nhello\r\n"
        + b"1A\r\n"
        + b"abcdefghijklmnopqrstuvwxyz\r\n"
        + b"0\r\nx-trailer: t\r\n\r\n"
    )
    async with serving(answering(answer, response(b"next"))) as up, opened_pool() as pool:
        assert await get(pool, up) == (200, b"helloabcdefghijklmnopqrstuvwxyz")
        assert await get(pool, up) == (200, b"next")  # the trailer ended the message
        assert up.connections == 1


async def test_chunked_body_split_into_one_byte_writes() -> None:
    """Every byte of the response in its own socket write: splits in the middle
    of the status line, the headers, a chunk-size line, between CR and LF, in
    a chunk's data and in the terminating chunk."""
    answer = chunked_head("X-Head: 1") + chunk(b"first") + chunk(b"x" * 0x1F) + chunk(b"last")
    answer += b"0\r\n\r\n"

    async def handler(conn: Conn) -> None:
        while await conn.request() is not None:
            await conn.send_pieces([answer[i : i + 1] for i in range(len(answer))], 0.001)

    async with serving(handler) as up, opened_pool() as pool:
        resp = await fetch(pool, up)
        assert resp.header("x-head") == "1"
        pieces: list[bytes] = []
        assert await read_all(resp, pieces) == b"first" + b"x" * 0x1F + b"last"
        assert len(pieces) > 3  # the body did come in several reads
        resp.release()
        assert await get(pool, up) == (200, b"first" + b"x" * 0x1F + b"last")
        assert up.connections == 1


@pytest.mark.parametrize(
    "cuts",
    [
        (1,),  # "1" | "0\r\n...": the middle of a chunk-size line
        (2,),  # "10" | "\r\n...": the size line before its CRLF
        (3,),  # "10\r" | "\n...": between CR and LF of the size line
        (4, 12),  # after the size line; in the middle of the data
        (20,),  # between the data and its CRLF
        (21, 23),  # between that CR and LF; in the next size line
        (44, 45, 46),  # in the terminating chunk "0\r\n\r\n"
    ],
)
async def test_chunked_body_split_at_awkward_positions(cuts: tuple[int, ...]) -> None:
    body = chunk(b"a" * 16) + chunk(b"b" * 16) + b"0\r\n\r\n"  # 4 + 16 + 2 + 4 + 16 + 2 + 5
    assert len(body) == 49
    bounds = [0, *cuts, len(body)]
    pieces = [body[a:b] for a, b in itertools.pairwise(bounds)]

    async def handler(conn: Conn) -> None:
        while await conn.request() is not None:
            await conn.send(chunked_head())
            await conn.send_pieces(pieces, 0.02)

    async with serving(handler) as up, opened_pool() as pool:
        for _ in range(2):  # and the connection is good for the next one
            assert await get(pool, up) == (200, b"a" * 16 + b"b" * 16)
        assert up.connections == 1


@pytest.mark.parametrize("version", ["HTTP/1.1", "HTTP/1.0"])
async def test_body_delimited_by_the_connection_closing(version: str) -> None:
    async def handler(conn: Conn) -> None:
        if await conn.request() is not None:
            await conn.send_pieces([f"{version} 200 OK\r\nX-A: b\r\n\r\nhello ".encode(), b"world"])

    async with serving(handler) as up, opened_pool() as pool:
        assert await get(pool, up) == (200, b"hello world")
        assert await get(pool, up) == (200, b"hello world")
        assert up.connections == 2


async def test_a_response_without_a_body_is_complete_at_once() -> None:
    answers = [
        b"HTTP/1.1 204 No Content\r\nX-A: b\r\n\r\n",
        b"HTTP/1.1 304 Not Modified\r\nETag: x\r\n\r\n",
        response(b""),
    ]
    async with serving(answering(*answers, response(b"end"))) as up, opened_pool() as pool:
        assert await get(pool, up) == (204, b"")
        assert await get(pool, up) == (304, b"")
        assert await get(pool, up) == (200, b"")
        assert await get(pool, up) == (200, b"end")
        assert up.connections == 1


# -- keep-alive and the pool ------------------------------------------------------------------


async def test_keep_alive_reuses_one_connection() -> None:
    answers = [response(b"one"), chunked(b"t", b"wo"), response(b"three")]
    async with serving(answering(*answers)) as up, opened_pool() as pool:
        assert await get(pool, up, "/1") == (200, b"one")
        assert await get(pool, up, "/2") == (200, b"two")
        assert await get(pool, up, "/3") == (200, b"three")
        assert up.connections == 1
        assert [r.split(b" ")[1] for r in up.requests] == [b"/1", b"/2", b"/3"]


@pytest.mark.parametrize(
    "answer",
    [
        response(b"bye", headers=["Connection: close"]),
        response(b"bye", headers=["connection: Close"]),
        b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nbye",
    ],
    ids=["connection-close", "connection-close-lower", "http-1.0"],
)
async def test_no_reuse_when_the_server_says_close(answer: bytes) -> None:
    # the server keeps the connection open: the client must not use it again
    async with serving(answering(answer)) as up, opened_pool() as pool:
        assert await get(pool, up) == (200, b"bye")
        await wait_until(lambda: up.closed_by_client == 1, "the client closes the connection")
        assert await get(pool, up) == (200, b"bye")
        assert up.connections == 2


async def test_no_reuse_when_the_body_was_not_read_to_its_end() -> None:
    partial = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"p" * 10

    async def handler(conn: Conn) -> None:
        if conn.index == 1:
            await conn.request()
            await conn.send(partial)  # and the other 90 bytes never come
            await conn.until_closed()
        else:
            await answering(response(b"fresh"))(conn)

    async with serving(handler) as up, opened_pool() as pool:
        resp = await fetch(pool, up)
        assert await resp.read() == b"p" * 10
        resp.release()
        await wait_until(lambda: up.closed_by_client == 1, "the client closes the connection")
        assert await get(pool, up) == (200, b"fresh")
        assert up.connections == 2


async def test_release_without_reading_a_body_that_had_fully_arrived() -> None:
    # whether the connection is reused or not, the next response is its own
    handler = answering(response(b"old body"), response(b"new"))
    async with serving(handler) as up, opened_pool() as pool:
        resp = await fetch(pool, up)
        await asyncio.sleep(0.1)  # all of it arrives
        resp.release()
        assert await get(pool, up) == (200, b"new")
        resp.release()  # a second release is a no-op
        assert await get(pool, up) == (200, b"new")


async def test_a_connection_released_while_reading_was_paused_is_usable() -> None:
    """The body is 10 bytes over HIGH_WATER and its last bytes arrive in a
    read of their own: that read pauses reading and completes the message.
    Released unread, the connection is complete and goes back to the pool;
    the next request on it must still be read."""
    big = b"b" * (http1.HIGH_WATER + 10)

    async def handler(conn: Conn) -> None:
        await conn.request()
        await conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(big))
        await conn.send(big[: http1.HIGH_WATER])
        await asyncio.sleep(0.3)  # the client has read all that (not over HIGH_WATER)
        await conn.send(big[http1.HIGH_WATER :])
        while await conn.request() is not None:
            await conn.send(response(b"second"))

    async with serving(handler) as up, opened_pool() as pool:
        resp = await fetch(pool, up)
        # white-box: wait until the whole body arrived (the message is complete)
        await wait_until(lambda: resp._conn.complete, "the whole body arrives")
        resp.release()  # unread: the client's choice, e.g. its caller went away
        resp2 = await fetch(pool, up, idle=2.0)
        try:
            assert (resp2.status, await read_all(resp2)) == (200, b"second")
        finally:
            resp2.release()


async def test_a_pooled_connection_the_server_closed_is_not_reused() -> None:
    async def handler(conn: Conn) -> None:
        if await conn.request() is not None:
            await conn.send(response(b"n%d" % conn.index))  # keep-alive, then closes

    async with serving(handler) as up, opened_pool() as pool:
        assert await get(pool, up) == (200, b"n1")
        await asyncio.sleep(0.2)  # the server's close reaches the client
        assert await get(pool, up) == (200, b"n2")
        assert up.connections == 2


async def test_an_idle_connection_that_receives_bytes_is_not_reused() -> None:
    async def handler(conn: Conn) -> None:
        if await conn.request() is None:
            return
        await conn.send(response(b"n%d" % conn.index))
        if conn.index == 1:
            await asyncio.sleep(0.05)
            await conn.send(b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n")
            await conn.until_closed()
        else:
            await answering(response(b"more"))(conn)

    async with serving(handler) as up, opened_pool() as pool:
        assert await get(pool, up) == (200, b"n1")
        await wait_until(lambda: up.closed_by_client == 1, "the client drops the connection")
        assert await get(pool, up) == (200, b"n2")
        assert up.connections == 2


async def test_idle_connections_expire_after_keepalive() -> None:
    async with serving(answering(response())) as up, opened_pool(keepalive=0.1) as pool:
        assert await get(pool, up) == (200, b"ok")
        await asyncio.sleep(0.3)
        assert await get(pool, up) == (200, b"ok")
        assert up.connections == 2
        await wait_until(lambda: up.closed_by_client == 1, "the expired connection is closed")


async def test_the_sweep_closes_idle_connections_without_a_request() -> None:
    async with serving(answering(response())) as up, opened_pool(keepalive=0.3) as pool:
        assert await get(pool, up) == (200, b"ok")
        assert pool.idle == 1
        await wait_until(lambda: up.closed_by_client == 1, "the sweep closes the connection")
        assert pool.idle == 0
        assert pool._sweep_timer is None  # nothing idle: no timer


async def test_the_sweep_closes_each_connection_at_its_own_expiry() -> None:
    async with serving(answering(response())) as up, opened_pool(keepalive=0.6) as pool:
        first, second = await asyncio.gather(fetch(pool, up), fetch(pool, up))
        for resp in (first, second):
            assert await read_all(resp) == b"ok"
        first.release()
        await asyncio.sleep(0.4)
        second.release()
        assert pool.idle == 2
        await wait_until(lambda: up.closed_by_client == 1, "the first one expires")
        assert pool.idle == 1  # the second has 0.4 s to go
        await wait_until(lambda: up.closed_by_client == 2, "then the second")
        assert pool.idle == 0


async def test_a_connection_the_upstream_closed_leaves_the_pool_at_the_sweep() -> None:
    async def handler(conn: Conn) -> None:
        if await conn.request() is not None:
            await conn.send(response(b"n%d" % conn.index))  # keep-alive, then closes

    async with serving(handler) as up, opened_pool(keepalive=0.5) as pool:
        assert await get(pool, up) == (200, b"n1")
        await wait_until(lambda: pool.idle == 0, "the closed connection is dropped")


async def test_the_most_recently_used_idle_connection_is_taken() -> None:
    async def handler(conn: Conn) -> None:
        while await conn.request() is not None:
            await conn.send(response(b"c%d" % conn.index))

    async with serving(handler) as up, opened_pool() as pool:
        first, second = await fetch(pool, up), await fetch(pool, up)
        assert await read_all(first) == b"c1"
        assert await read_all(second) == b"c2"
        first.release()
        second.release()
        assert await get(pool, up) == (200, b"c2")
        assert up.connections == 2


async def test_pool_limit_makes_a_second_request_wait_for_the_release() -> None:
    handler = answering(response(b"one"), response(b"two"))
    async with serving(handler) as up, opened_pool(limit=1) as pool:
        first = await fetch(pool, up)
        second = asyncio.create_task(fetch(pool, up))
        try:
            await asyncio.sleep(0.2)
            assert not second.done()
            assert len(up.requests) == 1  # the second one was not even sent
            assert await read_all(first) == b"one"
            first.release()
            resp = await asyncio.wait_for(second, WAIT)
        finally:
            second.cancel()
        assert await read_all(resp) == b"two"
        resp.release()
        assert up.connections == 1


async def test_cancelling_a_request_waiting_for_headers_frees_its_slot() -> None:
    async with serving(answering(HANG, response(b"after"))) as up, opened_pool(limit=1) as pool:
        task = asyncio.create_task(fetch(pool, up, idle=60.0))
        await wait_until(lambda: len(up.requests) == 1, "the request reaches the server")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await wait_until(lambda: up.closed_by_client == 1, "the connection is closed")
        status, body = await asyncio.wait_for(get(pool, up), WAIT)
        assert (status, body) == (200, b"after")
        assert up.connections == 2


async def test_pool_close_closes_idle_and_busy_connections() -> None:
    async def handler(conn: Conn) -> None:
        await conn.request()
        if conn.index == 1:
            await conn.send(response(b"idle"))
        else:
            await conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nbusy")
        await conn.until_closed()

    async with serving(handler) as up, opened_pool() as pool:
        assert await get(pool, up) == (200, b"idle")
        other = http1.Origin("http", "localhost", up.port)  # another key in the pool
        busy = await pool.request(other, "GET", "/", [], None, connect_timeout=5, idle_timeout=5)
        assert await busy.read() == b"busy"
        assert up.closed_by_client == 0
        await pool.close()
        await wait_until(lambda: up.closed_by_client == 2, "both connections are closed")
        with pytest.raises(http1.HTTPClientError):
            await read_all(busy)
        busy.release()
        with pytest.raises(RuntimeError, match="closed"):
            await fetch(pool, up)


async def test_the_pool_knows_both_ends_of_each_open_connection() -> None:
    """What the loop check compares a request's two ends with."""

    async def handler(conn: Conn) -> None:
        while await conn.request() is not None:
            await conn.send(response(b"ok"))

    async with serving(handler) as up, opened_pool() as pool:
        assert pool.own_connections == {}
        first, second = await fetch(pool, up), await fetch(pool, up)  # two connections
        for resp in (first, second):
            assert await read_all(resp) == b"ok"
            resp.release()
        there = ("127.0.0.1", up.port)
        assert sorted(pool.own_connections) == sorted((("127.0.0.1", p), there) for p in up.peers)
        assert set(pool.own_connections.values()) == {1}
        await pool.close()
        await wait_until(lambda: pool.own_connections == {}, "the closed connections are forgotten")


# -- stale pooled connections and the one retry ---------------------------------------------


def closing_after_each_response(*, read_next: bool) -> Handler:
    """Answer a connection's first request (keep-alive), then close it when
    the next request comes: the upstream's idle close crossing that request
    on the wire. `read_next`: the close follows reading the request (a FIN),
    else it leaves the request unread in the socket (a reset)."""

    async def handler(conn: Conn) -> None:
        if await conn.request() is None:
            return
        await conn.send(response(b"n%d" % conn.index))
        if read_next:
            await conn.request()
        else:
            await conn.reader.read(1)  # the request's first byte has arrived

    return handler


@BOTH_LOOPS
@pytest.mark.parametrize("read_next", [True, False], ids=["fin", "reset"])
async def test_a_request_on_a_connection_closed_as_it_was_sent_is_retried_once(
    read_next: bool,
) -> None:
    handler = closing_after_each_response(read_next=read_next)
    async with serving(handler) as up, opened_pool() as pool:
        assert await get(pool, up) == (200, b"n1")
        assert await get(pool, up) == (200, b"n2")  # sent on 1, then again on 2
        assert (up.connections, pool.retried) == (2, 1)
        assert await get(pool, up) == (200, b"n3")
        assert (up.connections, pool.retried) == (3, 2)
        if read_next:
            assert up.requests[1] == up.requests[2]  # the same request, sent twice


async def test_a_post_is_sent_again_with_its_body() -> None:
    async with serving(closing_after_each_response(read_next=True)) as up, opened_pool() as pool:
        assert await get(pool, up) == (200, b"n1")
        resp = await fetch(pool, up, "POST", "/v1/chat/completions", body=b'{"a": 1}')
        assert (resp.status, await read_all(resp)) == (200, b"n2")
        resp.release()
        assert up.requests[1] == up.requests[2]
        assert up.requests[2].endswith(b'\r\n\r\n{"a": 1}')


class ThreadServer:
    """A blocking server in a thread, so that a test can have it act while the
    event loop is blocked: it answers the first connection's request, waits
    for `close_first` and closes that connection (setting `closed_first`),
    then answers a request on each later connection and closes it."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.close_first = threading.Event()
        self.closed_first = threading.Event()
        self.connections = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                sock, _ = self.listener.accept()
                self.connections += 1
                with sock:
                    sock.settimeout(WAIT)
                    request = b""
                    while b"\r\n\r\n" not in request:
                        request += sock.recv(65536)
                    sock.sendall(response(b"n%d" % self.connections))
                    if self.connections == 1:
                        self.close_first.wait(WAIT)
                if self.connections == 1:
                    self.closed_first.set()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept()
        self.listener.close()
        self.thread.join(WAIT)


@BOTH_LOOPS
async def test_a_close_that_arrived_while_the_loop_was_busy_is_seen_before_reuse() -> None:
    """The upstream's close reached the socket, but the event loop has not
    read it yet: the zero-timeout look finds it, and the request goes out on
    a new connection without needing the retry."""
    server = ThreadServer()
    origin = http1.Origin("http", "127.0.0.1", server.port)
    try:
        async with opened_pool() as pool:
            resp = await pool.request(
                origin, "GET", "/", [], None, connect_timeout=WAIT, idle_timeout=WAIT
            )
            assert await read_all(resp) == b"n1"
            resp.release()
            server.close_first.set()
            assert server.closed_first.wait(WAIT)  # blocks the loop: the FIN is not read
            resp = await pool.request(
                origin, "GET", "/", [], None, connect_timeout=WAIT, idle_timeout=WAIT
            )
            assert await read_all(resp) == b"n2"
            resp.release()
            assert (server.connections, pool.retried) == (2, 0)
    finally:
        server.stop()


@pytest.mark.parametrize(
    "sent",
    [
        b"HTTP/1.1 200 OK\r\nContent-Le",
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"H",
    ],
    ids=["half-a-head", "informational", "one-byte"],
)
async def test_no_retry_after_a_response_byte(sent: bytes) -> None:
    async def handler(conn: Conn) -> None:
        if await conn.request() is None:
            return
        await conn.send(response(b"n%d" % conn.index))
        if await conn.request() is not None:
            await conn.send(sent)  # then the close

    async with serving(handler) as up, opened_pool() as pool:
        assert await get(pool, up) == (200, b"n1")
        with pytest.raises(http1.Disconnected):
            await fetch(pool, up)
        assert (up.connections, pool.retried, len(up.requests)) == (1, 0, 2)


async def test_no_retry_after_the_head_when_the_body_is_cut() -> None:
    async def handler(conn: Conn) -> None:
        if await conn.request() is None:
            return
        await conn.send(response(b"n%d" % conn.index))
        if await conn.request() is not None:
            await conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\npart")

    async with serving(handler) as up, opened_pool() as pool:
        assert await get(pool, up) == (200, b"n1")
        resp = await fetch(pool, up)
        with pytest.raises(http1.Disconnected):
            await read_all(resp)
        resp.release()
        assert (up.connections, pool.retried) == (1, 0)


async def test_no_retry_on_a_new_connection() -> None:
    async def handler(conn: Conn) -> None:
        await conn.request()  # then the close, with no answer

    async with serving(handler) as up, opened_pool() as pool:
        with pytest.raises(http1.Disconnected):
            await fetch(pool, up)
        assert (up.connections, pool.retried) == (1, 0)


async def test_no_retry_after_a_timeout_on_a_reused_connection() -> None:
    async with serving(answering(response(b"one"), HANG)) as up, opened_pool() as pool:
        assert await get(pool, up) == (200, b"one")
        with pytest.raises(http1.ResponseTimeout):
            await fetch(pool, up, idle=0.2)
        assert (up.connections, pool.retried, len(up.requests)) == (1, 0, 2)


async def test_the_retry_happens_once() -> None:
    """The reused connection and the new one both close without a byte: the
    error surfaces after the second try."""

    async def handler(conn: Conn) -> None:
        if conn.index == 1 and await conn.request() is not None:
            await conn.send(response(b"n1"))
        await conn.request()  # then the close, with no answer

    async with serving(handler) as up, opened_pool() as pool:
        assert await get(pool, up) == (200, b"n1")
        with pytest.raises(http1.Disconnected):
            await fetch(pool, up)
        assert (up.connections, pool.retried, len(up.requests)) == (2, 1, 3)
        assert pool.in_flight == 0


# -- timeouts and failures ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "sent",
    [b"", b"HTTP/1.1 20", b"HTTP/1.1 200 OK\r\nContent-Le"],
    ids=["nothing", "part-of-the-status-line", "part-of-the-headers"],
)
async def test_idle_timeout_before_the_headers(sent: bytes) -> None:
    async def handler(conn: Conn) -> None:
        if conn.index == 1:
            await conn.request()
            if sent:
                await conn.send(sent)
            await conn.until_closed()
        else:
            await answering(response())(conn)

    async with serving(handler) as up, opened_pool(limit=1) as pool:
        with pytest.raises(http1.ResponseTimeout):
            await asyncio.wait_for(fetch(pool, up, idle=0.3), WAIT)
        await wait_until(lambda: up.closed_by_client == 1, "the client closes the connection")
        assert await get(pool, up) == (200, b"ok")  # and the slot is free again


@pytest.mark.parametrize("framing", ["content-length", "chunked", "close"])
async def test_idle_timeout_in_the_middle_of_the_body(framing: str) -> None:
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

    async with serving(handler) as up, opened_pool() as pool:
        resp = await fetch(pool, up, idle=0.3)
        assert await resp.read() == b"first"
        with pytest.raises(http1.ResponseTimeout):
            await asyncio.wait_for(resp.read(), WAIT)
        with pytest.raises(http1.ResponseTimeout):  # and stays failed
            await resp.read()
        resp.release()
        await wait_until(lambda: up.closed_by_client == 1, "the client closes the connection")


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_server_closing_mid_body_raises_disconnected(framing: str) -> None:
    if framing == "chunked":
        sent = chunked_head() + chunk(b"first") + b"10\r\nsecond"
    else:
        sent = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst" + b"second"

    async def handler(conn: Conn) -> None:
        if await conn.request() is not None:
            await conn.send(sent)  # and close

    async with serving(handler) as up, opened_pool() as pool:
        resp = await fetch(pool, up)
        with pytest.raises(http1.Disconnected):
            await read_all(resp)
        resp.release()


async def test_server_closing_mid_body_gives_the_bytes_before_the_error() -> None:
    async def handler(conn: Conn) -> None:
        if await conn.request() is not None:
            await conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")

    async with serving(handler) as up, opened_pool() as pool:
        resp = await fetch(pool, up)
        await asyncio.sleep(0.1)  # the close has arrived too
        assert await resp.read() == b"0123456789"
        with pytest.raises(http1.Disconnected):
            await resp.read()
        resp.release()


@pytest.mark.parametrize("sent", [b"", b"HTTP/1.1 200 OK\r\nContent-"])
async def test_server_closing_before_the_headers_raises_disconnected(sent: bytes) -> None:
    async def handler(conn: Conn) -> None:
        if await conn.request() is not None and sent:
            await conn.send(sent)

    async with serving(handler) as up, opened_pool() as pool:
        with pytest.raises(http1.Disconnected):
            await fetch(pool, up)


async def test_connect_refused_raises_connect_failed() -> None:
    origin = http1.Origin("http", "127.0.0.1", unused_port())
    async with opened_pool() as pool:
        with pytest.raises(http1.ConnectFailed):
            await pool.request(origin, "GET", "/", [], None, connect_timeout=5, idle_timeout=5)
        with pytest.raises(http1.ConnectFailed):  # the failure freed the slot
            await pool.request(origin, "GET", "/", [], None, connect_timeout=5, idle_timeout=5)


async def test_connect_timeout() -> None:
    with blackhole() as port:
        await asyncio.sleep(0.1)
        origin = http1.Origin("http", "127.0.0.1", port)
        async with opened_pool(limit=1) as pool:
            with pytest.raises(http1.ConnectTimeout):
                await pool.request(
                    origin, "GET", "/", [], None, connect_timeout=0.3, idle_timeout=5
                )


@pytest.mark.parametrize(
    "answer",
    [
        b"garbage\r\n\r\n",
        b"HTTP/1.1 abc OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n",
        chunked_head() + b"zz\r\nabc\r\n0\r\n\r\n",
        chunked_head() + b"3\r\nabcXX\r\n0\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ws\r\n\r\nxx",
    ],
    ids=[
        "not-http",
        "bad-status",
        "bad-content-length",
        "two-content-lengths",
        "header-without-colon",
        "bad-chunk-size",
        "chunk-longer-than-its-size",
        "protocol-switch",
    ],
)
async def test_malformed_responses_raise_bad_response(answer: bytes) -> None:
    async def handler(conn: Conn) -> None:
        if await conn.request() is not None:
            await conn.send(answer)
            await conn.until_closed()

    async with serving(handler) as up, opened_pool() as pool:
        with pytest.raises(http1.BadResponse):
            await get(pool, up)
        await wait_until(lambda: up.closed_by_client == 1, "the client closes the connection")


async def test_headers_larger_than_max_head_bytes_raise_bad_response() -> None:
    many = [f"X-Header-{i}: {'v' * 1000}" for i in range(http1.MAX_HEAD_BYTES // 1000 + 5)]
    one_huge = [f"X-Huge: {'v' * (http1.MAX_HEAD_BYTES + 10)}"]
    just_under = [f"X-Header-{i}: {'v' * 1000}" for i in range(http1.MAX_HEAD_BYTES // 2000)]
    answers = [response(headers=many), response(headers=one_huge), response(headers=just_under)]
    async with serving(answering(*answers)) as up, opened_pool() as pool:
        with pytest.raises(http1.BadResponse):
            await fetch(pool, up)
        with pytest.raises(http1.BadResponse):
            await fetch(pool, up)
        assert await get(pool, up) == (200, b"ok")


async def test_a_head_that_never_ends_is_bounded_by_max_head_bytes() -> None:
    """A header line that goes on past MAX_HEAD_BYTES without its end ("status
    line and headers of one response" are bounded) is a BadResponse, not held
    in memory until the idle timeout (a server sending forever would never
    meet one)."""

    async def handler(conn: Conn) -> None:
        if await conn.request() is None:
            return
        await conn.send(b"HTTP/1.1 200 OK\r\nX-Endless: ")
        for _ in range(2 * http1.MAX_HEAD_BYTES // 4096):
            await conn.send(b"v" * 4096)
        await conn.until_closed()

    async with serving(handler) as up, opened_pool() as pool:
        with pytest.raises(http1.BadResponse):
            await asyncio.wait_for(fetch(pool, up, idle=1.0), WAIT)


async def test_bytes_after_a_complete_response_are_not_part_of_it() -> None:
    """A second response in the same read as the first (the server answered a
    request that was never sent) must not be parsed into the first."""
    stray = b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\nX-Stray: 1\r\n\r\nextra"
    async with serving(answering(response(b"hello") + stray)) as up, opened_pool() as pool:
        resp = await fetch(pool, up)
        await asyncio.sleep(0.1)
        body = await read_all(resp)
        resp.release()
        assert (resp.status, body, resp.header("x-stray")) == (200, b"hello", None)


# -- content encodings ------------------------------------------------------------------------

TEXT = b"".join(b"line %d of a text that compresses well\n" % i for i in range(2000))


def deflate_raw(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


@pytest.mark.parametrize(
    ("encoding", "encoded"),
    [
        ("gzip", gzip.compress(TEXT)),
        ("x-gzip", gzip.compress(TEXT)),
        ("GZip", gzip.compress(TEXT)),
        ("deflate", zlib.compress(TEXT)),  # zlib-wrapped, as the standard says
        ("deflate", deflate_raw(TEXT)),  # raw, as some servers send it
    ],
    ids=["gzip", "x-gzip", "gzip-mixed-case", "deflate-zlib", "deflate-raw"],
)
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_compressed_bodies_are_decoded(encoding: str, encoded: bytes, framing: str) -> None:
    if framing == "chunked":
        pieces = [encoded[i : i + 100] for i in range(0, len(encoded), 100)]
        answer = chunked(*pieces, headers=[f"Content-Encoding: {encoding}"])
    else:
        answer = response(encoded, headers=[f"Content-Encoding: {encoding}"])
    async with serving(answering(answer)) as up, opened_pool() as pool:
        for _ in range(2):  # the second on the same connection, with a fresh decoder
            resp = await fetch(pool, up)
            assert resp.decoded
            assert resp.header("content-encoding") == encoding  # as it was sent
            assert await read_all(resp) == TEXT
            resp.release()
        assert up.connections == 1


@pytest.mark.parametrize(
    ("encoding", "encoded"),
    [("gzip", gzip.compress(TEXT)), ("deflate", zlib.compress(TEXT))],
    ids=["gzip", "deflate-zlib"],
)
async def test_compressed_body_split_after_its_first_byte(encoding: str, encoded: bytes) -> None:
    """The first read of the body holds one byte of the compressed stream."""

    async def handler(conn: Conn) -> None:
        if await conn.request() is not None:
            await conn.send(chunked_head(f"Content-Encoding: {encoding}"))
            await conn.send_pieces([chunk(encoded[:1]), chunk(encoded[1:]) + b"0\r\n\r\n"], 0.3)

    async with serving(handler) as up, opened_pool() as pool:
        resp = await fetch(pool, up)
        assert resp.decoded
        assert await read_all(resp) == TEXT
        resp.release()


async def test_a_compressed_body_read_in_many_small_pieces() -> None:
    encoded = gzip.compress(TEXT)
    pieces = [chunk(encoded[i : i + 50]) for i in range(0, len(encoded), 50)]

    async def handler(conn: Conn) -> None:
        if await conn.request() is not None:
            await conn.send(chunked_head("Content-Encoding: gzip"))
            await conn.send_pieces([*pieces, b"0\r\n\r\n"], 0.002)

    async with serving(handler) as up, opened_pool() as pool:
        resp = await fetch(pool, up)
        assert await read_all(resp) == TEXT
        resp.release()


@pytest.mark.parametrize("encoding", ["br", "zstd", "identity", "gzip, br"])
async def test_other_encodings_are_passed_through(encoding: str) -> None:
    body = b"\x8b\x00\x80not decodable here\x03"
    answer = response(body, headers=[f"Content-Encoding: {encoding}"])
    async with serving(answering(answer)) as up, opened_pool() as pool:
        resp = await fetch(pool, up)
        assert not resp.decoded
        assert resp.header("content-encoding") == encoding
        assert await read_all(resp) == body
        resp.release()


@pytest.mark.parametrize(
    ("encoding", "body"),
    [("gzip", b"\x1f\x8b\x08\x00 definitely not gzip"), ("deflate", b"x\x9c\xff\xff\xff\xff")],
)
async def test_a_corrupt_compressed_body_raises_bad_response(encoding: str, body: bytes) -> None:
    answer = response(body, headers=[f"Content-Encoding: {encoding}"])
    async with serving(answering(answer)) as up, opened_pool() as pool:
        resp = await fetch(pool, up)
        with pytest.raises(http1.BadResponse):
            await read_all(resp)
        resp.release()


async def test_an_empty_compressed_body() -> None:
    answer = response(b"", headers=["Content-Encoding: gzip"])
    async with serving(answering(answer)) as up, opened_pool() as pool:
        resp = await fetch(pool, up)
        assert resp.decoded
        assert await read_all(resp) == b""
        resp.release()


# -- informational responses, HEAD ---------------------------------------------------------------


@pytest.mark.parametrize("one_write", [True, False])
async def test_informational_responses_are_skipped(one_write: bool) -> None:
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

    async with serving(handler) as up, opened_pool() as pool:
        for _ in range(2):
            resp = await fetch(pool, up)
            assert resp.status == 200
            assert resp.header("x-real") == "1"
            assert resp.header("link") is None
            assert await read_all(resp) == b"real"
            resp.release()
        assert up.connections == 1


async def test_head_completes_without_waiting_for_a_body() -> None:
    async def handler(conn: Conn) -> None:
        while (request := await conn.request()) is not None:
            if request.startswith(b"HEAD "):
                await conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nX-A: b\r\n\r\n")
            else:
                await conn.send(response(b"got"))

    async with serving(handler) as up, opened_pool() as pool:
        resp = await fetch(pool, up, "HEAD", idle=60.0)
        assert resp.status == 200
        assert resp.header("content-length") == "1234"
        async with asyncio.timeout(WAIT):  # far less than the idle timeout
            assert await read_all(resp) == b""
        resp.release()
        assert up.requests[0].startswith(b"HEAD / HTTP/1.1\r\n")
        assert b"content-length" not in up.requests[0]
        assert await get(pool, up) == (200, b"got")


# -- flow control --------------------------------------------------------------------------------

BIG = bytes(range(256)) * (8 * 1024 * 4)  # 8 MiB


@pytest.mark.parametrize("framing", ["content-length", "chunked", "close"])
async def test_a_large_body_read_slowly_arrives_intact(framing: str) -> None:
    assert len(BIG) == 8 << 20

    async def handler(conn: Conn) -> None:
        if await conn.request() is None:
            return
        if framing == "content-length":
            await conn.send(response(BIG))
        elif framing == "chunked":
            pieces = [chunk(BIG[i : i + 65536]) for i in range(0, len(BIG), 65536)]
            await conn.send(chunked_head() + b"".join(pieces) + b"0\r\n\r\n")
        else:
            await conn.send(b"HTTP/1.1 200 OK\r\n\r\n" + BIG)
            return  # the close ends the body
        await conn.until_closed()

    async with serving(handler) as up, opened_pool() as pool:
        resp = await fetch(pool, up)
        pieces: list[bytes] = []
        while data := await resp.read():
            pieces.append(data)
            await asyncio.sleep(0.02)  # a slow reader: the server is far faster
        resp.release()
        assert b"".join(pieces) == BIG
        # reading paused near HIGH_WATER: never the whole body at once
        assert max(len(p) for p in pieces) <= 2 * http1.HIGH_WATER
        assert len(pieces) >= 4


# -- TLS -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def server_tls(tls_ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls_ca.issue_cert("127.0.0.1").configure_cert(context)
    return context


def trusting(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


async def test_tls_request_and_keep_alive(tls_ca: trustme.CA, server_tls: ssl.SSLContext) -> None:
    answers = [response(b"secure"), chunked(b"also ", b"secure")]
    # (the pool's default context is the system's trust store, without this CA)
    tls = trusting(tls_ca)
    async with serving(answering(*answers), server_tls) as up, opened_pool(tls=tls) as pool:
        assert up.origin.tls
        assert await get(pool, up, "/a?b=c") == (200, b"secure")
        assert await get(pool, up) == (200, b"also secure")
        assert up.connections == 1
        assert up.requests[0].startswith(b"GET /a?b=c HTTP/1.1\r\nhost: 127.0.0.1:")


async def test_tls_large_body_with_flow_control(
    tls_ca: trustme.CA, server_tls: ssl.SSLContext
) -> None:
    async with (
        serving(answering(response(BIG)), server_tls) as up,
        opened_pool(tls=trusting(tls_ca)) as pool,
    ):
        resp = await fetch(pool, up)
        pieces: list[bytes] = []
        while data := await resp.read():
            pieces.append(data)
            await asyncio.sleep(0.02)
        resp.release()
        assert b"".join(pieces) == BIG
        assert max(len(p) for p in pieces) <= 2 * http1.HIGH_WATER


async def test_tls_with_an_untrusted_certificate_fails_to_connect(
    server_tls: ssl.SSLContext,
) -> None:
    async with serving(answering(response()), server_tls) as up, opened_pool() as pool:
        with pytest.raises(http1.ConnectFailed):  # the system's store: no trustme CA
            await fetch(pool, up)


async def test_tls_to_a_plain_http_server_fails_to_connect() -> None:
    async def handler(conn: Conn) -> None:
        await conn.send(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    async with serving(handler) as up, opened_pool() as pool:
        origin = http1.Origin("https", "127.0.0.1", up.port)
        with pytest.raises(http1.ConnectFailed):
            await pool.request(origin, "GET", "/", [], None, connect_timeout=5, idle_timeout=5)


# -- the wait for a request slot -----------------------------------------------------------------


def holding_the_first(conn_answer: bytes) -> Handler:
    """The first connection gets half a response and is kept open; the others
    get `conn_answer` for each request."""

    async def handler(conn: Conn) -> None:
        while await conn.request() is not None:
            if conn.index == 1:
                await conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nheld")
                await conn.until_closed()
                return
            await conn.send(conn_answer)

    return handler


async def test_a_request_that_finds_no_slot_within_the_queue_timeout_is_not_sent() -> None:
    handler = holding_the_first(response(b"after"))
    async with serving(handler) as up, opened_pool(limit=1, queue_timeout=0.3) as pool:
        held = await fetch(pool, up)
        assert (pool.in_flight, pool.waiting) == (1, 0)
        with pytest.raises(http1.PoolTimeout):
            await asyncio.wait_for(fetch(pool, up), WAIT)
        assert len(up.requests) == 1  # the second one was never sent
        assert (pool.in_flight, pool.waiting) == (1, 0)
        held.release()  # its body unread: the connection is closed, the slot freed
        assert pool.in_flight == 0
        assert await get(pool, up) == (200, b"after")
        assert len(up.requests) == 2


async def test_a_queue_timeout_of_zero_refuses_at_once_only_when_every_slot_is_taken() -> None:
    async with (
        serving(answering(response(b"a"))) as up,
        opened_pool(limit=1, queue_timeout=0) as pool,
    ):
        assert await get(pool, up) == (200, b"a")  # a free slot: taken without a wait
        first = await fetch(pool, up)
        with pytest.raises(http1.PoolTimeout):
            await fetch(pool, up)
        assert await read_all(first) == b"a"
        first.release()
        assert await get(pool, up) == (200, b"a")
        assert len(up.requests) == 3


async def test_in_flight_and_waiting_are_counted_and_reported() -> None:
    changes: list[tuple[int, int]] = []

    def on_change(in_flight: int, waiting: int) -> None:
        changes.append((in_flight, waiting))

    handler = answering(response(b"one"), response(b"two"))
    async with serving(handler) as up, opened_pool(limit=1, on_change=on_change) as pool:
        first = await fetch(pool, up)
        second = asyncio.create_task(fetch(pool, up))
        try:
            await wait_until(lambda: pool.waiting == 1, "the second request waits for a slot")
            assert (pool.in_flight, pool.waiting) == (1, 1)
            assert await read_all(first) == b"one"
            first.release()
            resp = await asyncio.wait_for(second, WAIT)
        finally:
            second.cancel()
        assert (pool.in_flight, pool.waiting) == (1, 0)
        assert await read_all(resp) == b"two"
        resp.release()
        assert (pool.in_flight, pool.waiting) == (0, 0)
    # taken; one waits; released; the waiter leaves the line and takes it; released
    assert changes == [(1, 0), (1, 1), (0, 1), (0, 0), (1, 0), (0, 0)]


async def test_a_waiting_request_that_is_cancelled_leaves_the_line_and_takes_no_slot() -> None:
    async with serving(answering(response(b"x"))) as up, opened_pool(limit=1) as pool:
        first = await fetch(pool, up)
        waiter = asyncio.create_task(fetch(pool, up))
        await wait_until(lambda: pool.waiting == 1, "the second request waits for a slot")
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert (pool.in_flight, pool.waiting) == (1, 0)
        assert await read_all(first) == b"x"
        first.release()
        assert await get(pool, up) == (200, b"x")  # with limit 1: the slot came back
        assert (pool.in_flight, pool.waiting) == (0, 0)
        assert len(up.requests) == 2


# -- the per-origin limit ------------------------------------------------------------------------


def other_origin(up: Upstream) -> http1.Origin:
    """The same server under another name: another origin to the pool."""
    return http1.Origin("http", "localhost", up.port)


async def test_a_request_beyond_the_origins_limit_waits_for_a_release() -> None:
    async with (
        serving(answering(response(b"x"))) as up,
        opened_pool(limit=16, max_per_origin=1) as pool,
    ):
        first = await fetch(pool, up)
        second = asyncio.create_task(fetch(pool, up))
        try:
            await wait_until(lambda: pool.waiting == 1, "the second request waits")
            other = await pool.request(
                other_origin(up), "GET", "/", [], None, connect_timeout=WAIT, idle_timeout=WAIT
            )  # another origin: at once
            assert (pool.in_flight, pool.waiting, len(up.requests)) == (2, 1, 2)
            assert await read_all(first) == b"x"
            first.release()
            resp = await asyncio.wait_for(second, WAIT)
        finally:
            second.cancel()
        assert await read_all(resp) == b"x"
        resp.release()
        other.release()
        assert (pool.in_flight, pool.waiting, len(up.requests)) == (0, 0, 3)


async def test_the_wait_for_the_origin_is_bounded_by_the_queue_timeout() -> None:
    handler = holding_the_first(response(b"after"))
    async with (
        serving(handler) as up,
        opened_pool(limit=16, max_per_origin=1, queue_timeout=0.3) as pool,
    ):
        held = await fetch(pool, up)
        with pytest.raises(http1.PoolTimeout):
            await asyncio.wait_for(fetch(pool, up), WAIT)
        assert len(up.requests) == 1  # never sent
        assert (pool.in_flight, pool.waiting) == (1, 0)
        held.release()
        assert await get(pool, up) == (200, b"after")


async def test_a_request_waiting_for_its_origin_holds_no_slot_of_the_pool() -> None:
    """limit 2, one per origin: while a second request to the first origin
    waits, the second slot stays free for another origin."""
    async with (
        serving(answering(response(b"x"))) as up,
        opened_pool(limit=2, max_per_origin=1, queue_timeout=WAIT) as pool,
    ):
        first = await fetch(pool, up)
        second = asyncio.create_task(fetch(pool, up))
        try:
            await wait_until(lambda: pool.waiting == 1, "the second request waits")
            other = await asyncio.wait_for(
                pool.request(
                    other_origin(up), "GET", "/", [], None, connect_timeout=WAIT, idle_timeout=WAIT
                ),
                1.0,
            )
            assert await read_all(other) == b"x"
            other.release()
            assert await read_all(first) == b"x"
            first.release()
            resp = await asyncio.wait_for(second, WAIT)
        finally:
            second.cancel()
        assert await read_all(resp) == b"x"
        resp.release()
        assert (pool.in_flight, pool.waiting) == (0, 0)


async def test_a_cancelled_wait_for_the_origin_gives_back_what_it_took() -> None:
    async with serving(answering(response(b"x"))) as up, opened_pool(max_per_origin=1) as pool:
        first = await fetch(pool, up)
        waiter = asyncio.create_task(fetch(pool, up))
        await wait_until(lambda: pool.waiting == 1, "the second request waits")
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert await read_all(first) == b"x"
        first.release()
        assert await get(pool, up) == (200, b"x")  # the origin's one slot came back
        assert (pool.in_flight, pool.waiting) == (0, 0)


# -- compressed bodies that inflate far past their size ------------------------------------------


@functools.lru_cache
def bomb(mib: int, encoding: str = "gzip", *, fill: bytes = b"\0", prefix: bytes = b"") -> bytes:
    """`prefix` then `mib` MiB of `fill`, compressed to about 1 KiB per MiB
    (gzip, zlib-wrapped `deflate` or `deflate-raw`), with valid trailers.
    Each MiB is compressed after a full flush (no back-references across
    it), so one compressed MiB serves for all but the first."""
    block = fill * (1 << 20)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    first = deflate.compress(prefix + block) + deflate.flush(zlib.Z_FULL_FLUSH)
    again = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
    raw = first + again * (mib - 1) + deflate.flush()
    if encoding == "deflate-raw":
        return raw
    if encoding == "deflate":
        adler = zlib.adler32(prefix)
        for _ in range(mib):
            adler = zlib.adler32(block, adler)
        return b"\x78\xda" + raw + struct.pack(">I", adler)
    crc = zlib.crc32(prefix)
    for _ in range(mib):
        crc = zlib.crc32(block, crc)
    size = (len(prefix) + (mib << 20)) & 0xFFFFFFFF
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + raw + struct.pack("<II", crc, size)


def test_the_bombs_are_valid_compressed_data() -> None:
    assert gzip.decompress(bomb(3, fill=b"a", prefix=b"data: ")) == b"data: " + b"a" * (3 << 20)
    assert zlib.decompress(bomb(3, "deflate")) == bytes(3 << 20)
    assert zlib.decompress(bomb(3, "deflate-raw"), -zlib.MAX_WBITS) == bytes(3 << 20)
    assert len(bomb(1024)) < 1100 * 1024  # about 1 MB for 1 GiB


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_a_bomb_is_decoded_at_most_decode_limit_bytes_per_read(encoding: str) -> None:
    """About 1 MB that inflates to 1 GiB, sent at once in 64 KiB chunks: each
    read gives at most DECODE_LIMIT bytes, and reading a few, then leaving,
    keeps the memory in use small (decoding a whole read at once took
    hundreds of megabytes)."""
    encoded = bomb(1024, encoding)
    pieces = [chunk(encoded[i : i + 65536]) for i in range(0, len(encoded), 65536)]
    sent = asyncio.Event()

    async def handler(conn: Conn) -> None:
        if await conn.request() is not None:
            head = chunked_head(f"Content-Encoding: {encoding}")
            await conn.send(head + b"".join(pieces) + b"0\r\n\r\n")
            sent.set()
            await conn.until_closed()

    sizes: list[int] = []
    async with serving(handler) as up, opened_pool() as pool:
        tracemalloc.start()
        try:
            resp = await fetch(pool, up)
            await asyncio.wait_for(sent.wait(), WAIT)
            await asyncio.sleep(0.1)  # the body arrives: the first read finds it buffered
            tracemalloc.reset_peak()
            for _ in range(8):
                data = await resp.read()
                assert data == bytes(len(data))
                sizes.append(len(data))
            resp.release()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert all(0 < n <= http1.DECODE_LIMIT for n in sizes), sizes
    assert peak < 64 << 20, f"{peak / 2**20:.1f} MiB"


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "deflate-raw"])
async def test_a_bomb_read_to_its_end_arrives_whole_in_bounded_pieces(encoding: str) -> None:
    encoded = bomb(16, encoding)
    name = encoding.removesuffix("-raw")
    pieces = [encoded[i : i + 4096] for i in range(0, len(encoded), 4096)]
    answer = chunked(*pieces, headers=[f"Content-Encoding: {name}"])
    async with serving(answering(answer)) as up, opened_pool() as pool:
        for _ in range(2):  # read to its end: the connection is reused
            resp = await fetch(pool, up)
            total = 0
            while data := await resp.read():
                assert len(data) <= http1.DECODE_LIMIT
                assert data == bytes(len(data))
                total += len(data)
            assert total == 16 << 20
            assert resp.complete
            resp.release()
        assert up.connections == 1


async def test_a_response_is_not_complete_while_decoded_bytes_remain() -> None:
    answer = response(bomb(4), headers=["Content-Encoding: gzip"])  # one write
    async with serving(answering(answer)) as up, opened_pool() as pool:
        resp = await fetch(pool, up)
        assert len(await resp.read()) == http1.DECODE_LIMIT
        assert not resp.complete  # all of it arrived, not all of it was read
        rest = await read_all(resp)
        assert len(rest) == (4 << 20) - http1.DECODE_LIMIT
        assert resp.complete
        resp.release()
        # released with decoded bytes unread, the connection is still reusable
        resp = await fetch(pool, up)
        assert len(await resp.read()) == http1.DECODE_LIMIT
        resp.release()
        assert await get(pool, up) == (200, bytes(4 << 20))
        assert up.connections == 1


async def test_decoded_bytes_still_to_come_do_not_wait_for_the_socket() -> None:
    """The whole compressed body arrives, the response never ends (no last
    chunk): every decoded byte is read before the idle timeout ends it."""
    encoded = bomb(8)

    async def handler(conn: Conn) -> None:
        if await conn.request() is not None:
            await conn.send(chunked_head("Content-Encoding: gzip") + chunk(encoded))
            await conn.until_closed()

    async with serving(handler) as up, opened_pool() as pool:
        resp = await fetch(pool, up, idle=0.5)
        pieces: list[bytes] = []
        with pytest.raises(http1.ResponseTimeout):
            await read_all(resp, pieces)
        resp.release()
    assert sum(map(len, pieces)) == 8 << 20
    assert max(map(len, pieces)) <= http1.DECODE_LIMIT
