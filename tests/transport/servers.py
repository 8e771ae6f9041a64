"""Small raw upstreams for the transport tests: an `asyncio.start_server` on
127.0.0.1 (an ephemeral port) that reads the client's requests and writes
scripted response bytes, so framing, socket writes and closes are exactly
what each test says. `serving()` runs one in the test's event loop;
`ServerThread` runs one in a thread of its own, for a proxy under test to
reach."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import ssl
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

WAIT = 5.0  # the longest any test waits for something that should happen soon


class Conn:
    """One accepted connection, as the handler sees it."""

    def __init__(
        self, server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.index = server.connections  # 1 for the first accepted connection
        peer = writer.get_extra_info("peername")
        self.peer_port: int = peer[1] if peer else 0

    async def request(self) -> bytes | None:
        """The next request's head and body; None when the client closed."""
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"(?im)^content-length:[ \t]*(\d+)", head)
            body = await self.reader.readexactly(int(length.group(1))) if length else b""
        except (asyncio.IncompleteReadError, ConnectionError):
            self.server.client_closed()
            return None
        self.server.requests.append(head + body)
        self.server.peers.append(self.peer_port)
        return head + body

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()
        self.server.sent += len(data)

    async def send_pieces(self, pieces: Sequence[bytes], pause: float = 0.01) -> None:
        """Each piece in its own socket write, with a pause between them."""
        for piece in pieces:
            await self.send(piece)
            await asyncio.sleep(pause)

    async def until_closed(self) -> None:
        """Keep the connection open (sending nothing) until the client closes it."""
        try:
            while await self.reader.read(65536):
                pass
        except ConnectionError:
            pass
        self.server.client_closed()


Handler = Callable[[Conn], Awaitable[None]]


class RawServer:
    """`count_resets`: a connection the client reset (the handler's read or
    write failed) counts in `closed_by_client`, like one it closed."""

    def __init__(
        self,
        handler: Handler,
        ssl_context: ssl.SSLContext | None = None,
        host: str = "127.0.0.1",
        *,
        count_resets: bool = True,
    ) -> None:
        self.handler = handler
        self.ssl_context = ssl_context
        self.host = host
        self.count_resets = count_resets
        self.connections = 0  # accepted
        self.closed_by_client = 0  # connections whose reader saw the client close
        self.closed = threading.Event()  # set at each close seen (tests clear it)
        self.requests: list[bytes] = []
        self.peers: list[int] = []  # the client's port, per request
        self.sent = 0  # response bytes the socket took (written and drained)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context else "http"

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}/v1"

    def client_closed(self) -> None:
        self.closed_by_client += 1
        self.closed.set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, 0, ssl=self.ssl_context)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.append(writer)
        self.connections += 1
        try:
            await self.handler(Conn(self, reader, writer))
        except (ConnectionError, ssl.SSLError):
            if self.count_resets:
                self.client_closed()
        except asyncio.CancelledError:
            pass  # by stop(); ended quietly (asyncio logs a handler task that was cancelled)
        finally:
            writer.close()
            self._tasks.discard(task)

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for writer in self._writers:
            writer.close()
        for writer in self._writers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), WAIT)
        await self._server.wait_closed()


@contextlib.asynccontextmanager
async def serving(
    handler: Handler, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[RawServer]:
    server = RawServer(handler, ssl_context)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


class ServerThread:
    """A RawServer in a thread with its own event loop."""

    def __init__(self, handler: Handler, ssl_context: ssl.SSLContext | None = None) -> None:
        self.server = RawServer(handler, ssl_context)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> RawServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result(WAIT)
        return self.server

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(WAIT * 2)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(WAIT)
        self._loop.close()


# -- answers -----------------------------------------------------------------------------------


def response(body: bytes = b"ok", *, status: str = "200 OK", headers: Sequence[str] = ()) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def chunked_head(*headers: str) -> bytes:
    lines = ["HTTP/1.1 200 OK", "Transfer-Encoding: chunked", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def chunked(*pieces: bytes, headers: Sequence[str] = ()) -> bytes:
    return chunked_head(*headers) + b"".join(chunk(p) for p in pieces) + b"0\r\n\r\n"


HANG = None  # an answer: read the request, send nothing, wait for the client to close


def answering(*answers: bytes | None) -> Handler:
    """Answer the requests, over all connections, with `answers` in turn (the
    last one again once they run out), keeping the connection open."""
    queue = list(answers)

    async def handler(conn: Conn) -> None:
        while await conn.request() is not None:
            answer = queue.pop(0) if len(queue) > 1 else queue[0]
            if answer is None:
                await conn.until_closed()
                return
            await conn.send(answer)

    return handler


@contextlib.contextmanager
def blackhole() -> Iterator[int]:
    """A port whose connects hang: a listener with a full accept queue
    (backlog 0, never accepted), so Linux drops further SYNs."""
    listener = socket.socket()
    fillers: list[socket.socket] = []
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            fillers.append(filler)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
        yield port
    finally:
        for s in fillers:
            s.close()
        listener.close()
