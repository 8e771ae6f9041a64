"""Scripted servers and helpers for the tests of the HTTP/1.1 client
(proxy.http1): the transport suite's raw server (`tests.transport.servers`:
an `asyncio.start_server` on an ephemeral port that reads the client's
requests and writes scripted raw response bytes, so the framing, the
splitting into socket writes and the closing of connections are exactly
what each test says), with the pool's origin, and an egress proxy."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import pytest

from proxy import http1

# the scripted server and its answers, shared with the transport suite
from tests.transport.servers import (  # noqa: F401
    HANG,
    Conn,
    Handler,
    RawServer,
    answering,
    chunk,
    chunked,
    chunked_head,
    response,
)

WAIT = 5.0  # the longest any test waits for something that should happen soon

# for tests that depend on the event loop's transports: the proxy runs on uvloop
BOTH_LOOPS = pytest.mark.parametrize(
    "anyio_backend",
    [
        pytest.param("asyncio", id="asyncio"),
        pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
    ],
)


# -- the scripted upstream ------------------------------------------------------------


class Upstream(RawServer):
    """The transport suite's RawServer, as the http1 tests count closes: a
    connection the client reset does not count in `closed_by_client` (the
    pool tests assert exact counts of clean closes)."""

    def __init__(
        self, handler: Handler, ssl_context: ssl.SSLContext | None = None, host: str = "127.0.0.1"
    ) -> None:
        super().__init__(handler, ssl_context, host, count_resets=False)

    @property
    def origin(self) -> http1.Origin:
        return http1.Origin(self.scheme, self.host, self.port)


@contextlib.asynccontextmanager
async def serving(
    handler: Handler, ssl_context: ssl.SSLContext | None = None, *, host: str = "127.0.0.1"
) -> AsyncIterator[Upstream]:
    upstream = Upstream(handler, ssl_context, host)
    await upstream.start()
    try:
        yield upstream
    finally:
        await upstream.stop()


@contextlib.asynccontextmanager
async def opened_pool(
    *,
    limit: int = 16,
    keepalive: float = 30.0,
    queue_timeout: float = WAIT,
    on_change: Callable[[int, int], None] | None = None,
    **options: Any,
) -> AsyncIterator[http1.Pool]:
    pool = http1.Pool(
        limit=limit,
        keepalive=keepalive,
        queue_timeout=queue_timeout,
        on_change=on_change,
        **options,
    )
    try:
        yield pool
    finally:
        await pool.close()
        await asyncio.sleep(0.05)  # the closed transports' connection_lost callbacks run


async def fetch(
    pool: http1.Pool,
    upstream: Upstream,
    method: str = "GET",
    target: str = "/",
    headers: list[tuple[str, str]] | None = None,
    body: bytes | None = None,
    *,
    idle: float = WAIT,
    connect: float = WAIT,
) -> http1.Response:
    return await pool.request(
        upstream.origin,
        method,
        target,
        headers or [],
        body,
        connect_timeout=connect,
        idle_timeout=idle,
    )


async def read_all(resp: http1.Response, pieces: list[bytes] | None = None) -> bytes:
    parts = [] if pieces is None else pieces
    while data := await resp.read():
        parts.append(data)
    return b"".join(parts)


async def get(pool: http1.Pool, upstream: Upstream, target: str = "/") -> tuple[int, bytes]:
    """A GET whose body is read to its end and released."""
    resp = await fetch(pool, upstream, target=target)
    try:
        return resp.status, await read_all(resp)
    finally:
        resp.release()


async def wait_until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(int(WAIT / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not within {WAIT} s: {what}")


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- an egress proxy ----------------------------------------------------------------------


class ForwardProxy:
    """A small HTTP proxy on 127.0.0.1: CONNECT tunnels, and requests in
    absolute form (the first one of a connection rewritten to origin form,
    the rest of the connection relayed as it is). The names it is asked for
    are looked up in `hosts` ("name:port" -> the address to use), never
    resolved. With `credentials`, a request without that Proxy-Authorization
    value gets a 407; `refuse` answers every request with that status."""

    def __init__(
        self,
        hosts: dict[str, tuple[str, int]],
        *,
        credentials: str | None = None,
        refuse: int | None = None,
    ) -> None:
        self.hosts = hosts
        self.credentials = credentials
        self.refuse = refuse
        self.heads: list[bytes] = []  # the first request head of each connection
        self.tunneled = bytearray()  # what the client sent into tunnels
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        try:
            await self._relay(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self._tasks.discard(task)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        method, target, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        lines = head.decode("latin-1").split("\r\n")[1:]
        given = [
            v.strip()
            for n, _, v in (h.partition(":") for h in lines)
            if n.lower() == "proxy-authorization"
        ]
        if self.refuse is not None or (self.credentials and given != [self.credentials]):
            status = self.refuse or 407
            writer.write(
                b"HTTP/1.1 %d No\r\nContent-Length: 0\r\nConnection: close\r\n\r\n" % status
            )
            await writer.drain()
            return
        if method == "CONNECT":
            address = self.hosts.get(target)
        else:
            url = urlsplit(target)
            address = self.hosts.get(f"{url.hostname}:{url.port or 80}")
        if address is None:
            writer.write(b"HTTP/1.1 502 Unknown Host\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            return
        up_reader, up_writer = await asyncio.open_connection(*address)
        if method == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            record: bytearray | None = self.tunneled
        else:  # the first request in origin form, without the proxy's credentials
            kept = [h for h in lines if not h.lower().startswith("proxy-authorization:")]
            path = urlsplit(target).path or "/"
            up_writer.write(
                f"{method} {path} HTTP/1.1\r\n".encode() + "\r\n".join(kept).encode("latin-1")
            )
            record = None
        await asyncio.gather(pipe(reader, up_writer, record), pipe(up_reader, writer, None))


async def pipe(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: bytearray | None
) -> None:
    """Bytes from `reader` to `writer` until either side closes."""
    try:
        while data := await reader.read(65536):
            if record is not None:
                record += data
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


@contextlib.asynccontextmanager
async def forward_proxy(
    hosts: dict[str, tuple[str, int]], **options: Any
) -> AsyncIterator[ForwardProxy]:
    proxy = ForwardProxy(hosts, **options)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()
