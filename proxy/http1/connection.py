"""One upstream connection: an asyncio protocol between the socket and a
`ResponseReader`.

The protocol moves the bytes of each read into the reader and keeps what
its events say: the head, the body bytes not yet read (a list, joined once
per `read()`), whether the response is complete. It pauses the socket
while `HIGH_WATER` body bytes wait unread, and while compressed bytes wait
in the decoder. `read()` hands the body on, decoded when it is gzip or
deflate, at most `DECODE_LIMIT` decoded bytes at a time.
"""

from __future__ import annotations

import asyncio
import select
import zlib
from collections.abc import Hashable

from proxy.http1.decoder import Decoder, decoder_for
from proxy.http1.errors import (
    BadResponse,
    Disconnected,
    HTTPClientError,
    ResponseTimeout,
    Truncated,
)
from proxy.http1.reader import Body, End, Head, ResponseReader

HIGH_WATER = 1 << 20  # unread body bytes at which reading pauses


# the two ends of a connection: (host, port) here, (host, port) there
Ends = tuple[tuple[str, int], tuple[str, int]]


class Connection(asyncio.Protocol):
    """One upstream connection and the response being read on it."""

    __slots__ = (
        "_body",
        "_buffered",
        "_decoder",
        "_ends",
        "_loop",
        "_own",
        "_paused",
        "_poller",
        "_waiter",
        "closed",
        "complete",
        "decoded",
        "error",
        "headers",
        "headers_done",
        "idle_since",
        "keep_alive",
        "key",
        "lost",
        "reader",
        "received",
        "status",
        "transport",
        "tunnel",
    )

    def __init__(
        self,
        key: Hashable,
        loop: asyncio.AbstractEventLoop,
        own: dict[Ends, int] | None = None,
    ) -> None:
        self.key = key  # the pool's: where the connection goes, and through which proxy
        self._loop = loop
        # the two ends of the pool's open connections (with a count each),
        # so a request that comes back to this process is known
        self._own = own
        self._ends: Ends | None = None
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.lost = False  # connection_lost came
        self.idle_since = 0.0
        self.tunnel = False  # a CONNECT exchange: the connection stays open after it
        self._waiter: asyncio.Future[bool] | None = None
        self._poller: select.poll | None = None  # alive()'s, made on its first call
        self._reset(None)  # no request sent yet

    def _reset(self, reader: ResponseReader | None) -> None:
        self.reader = reader
        self.received = False  # a byte of the response arrived
        self.status = 0
        self.headers: list[tuple[str, str]] = []
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self.error: HTTPClientError | None = None
        self._body: list[bytes] = []
        self._buffered = 0
        self._paused = False
        self._decoder: Decoder | None = None
        self.decoded = False  # the body is decompressed here

    # -- asyncio callbacks --------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        own = self._own
        if own is not None:
            here = transport.get_extra_info("sockname")
            there = transport.get_extra_info("peername")
            if isinstance(here, tuple) and isinstance(there, tuple):
                ends = self._ends = ((here[0], here[1]), (there[0], there[1]))
                own[ends] = own.get(ends, 0) + 1

    def data_received(self, data: bytes) -> None:
        reader = self.reader
        if reader is None:  # bytes before any request: nothing to make of them
            self._close()
            return
        self.received = True
        try:
            events = reader.feed(data)
        except HTTPClientError as exc:
            self._fail(exc)
            self._wake()
            return
        for event in events:
            kind = type(event)
            if kind is Body:
                piece = event.data  # type: ignore[union-attr]
                self._body.append(piece)
                self._buffered += len(piece)
            elif kind is Head:
                self._head(event)  # type: ignore[arg-type]
            elif kind is End:
                self.complete = True
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        if self.complete and not reader.reusable and not self.tunnel:
            self._close()  # the upstream closes it, or sent bytes nobody asked for
        self._wake()

    def eof_received(self) -> bool | None:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.lost = True
        ends, own = self._ends, self._own
        if ends is not None and own is not None:
            self._ends = None
            left = own.pop(ends, 1) - 1
            if left:
                own[ends] = left
        reader = self.reader
        if reader is not None and not self.complete and self.error is None:
            try:
                if reader.end_of_input():  # a body delimited by the close
                    self.complete = True
            except HTTPClientError as error:
                self.error = error
        self._wake()

    def pause_writing(self) -> None:  # request bodies are written whole
        pass

    def resume_writing(self) -> None:
        pass

    def _head(self, head: Head) -> None:
        self.status = head.status
        self.headers = list(head.headers)
        self.keep_alive = head.keep_alive
        self.headers_done = True
        self._decoder = decoder_for(self.header("content-encoding"))
        self.decoded = self._decoder is not None

    # -- for the pool and the response ------------------------------------------------

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    def send(self, data: bytes, head_only: bool = False) -> None:
        assert self.transport is not None
        if self._paused:  # released with its last body unread
            self.transport.resume_reading()
        self._reset(ResponseReader(head_only=head_only or self.tunnel))
        if self.closed:  # connection_lost came and went: nothing would wake a wait
            self.error = Disconnected("the connection closed before the request was sent")
            return
        self.transport.write(data)

    async def wait_headers(self, idle: float) -> None:
        while not self.headers_done:
            if self.error is not None:
                raise self.error
            await self._wait(idle)

    async def read(self, idle: float) -> bytes:
        """The body bytes that arrived since the last call (of a compressed
        body, at most DECODE_LIMIT decoded bytes); b"" at the end."""
        if self._decoder is not None:
            return await self._read_decoded(self._decoder, idle)
        while not self._body:
            if self.complete:
                return b""
            if self.error is not None:
                raise self.error
            await self._wait(idle)
        return self._take()

    @property
    def unread(self) -> bool:
        """Body bytes wait to be read (or decoded)."""
        return bool(self._body) or self._decoder is not None

    def _take(self) -> bytes:
        """The body bytes waiting unread, all of them (reading resumes)."""
        body = self._body
        data = body[0] if len(body) == 1 else b"".join(body)
        body.clear()
        self._buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def _read_decoded(self, decoder: Decoder, idle: float) -> bytes:
        # Compressed bytes leave the buffer only when the decoder has given all
        # it can from the last ones: until then the buffer stays as full as it
        # is, reading stays paused past HIGH_WATER, and no read waits on the
        # socket while decoded output is still to come.
        try:
            while True:
                if decoder.ready():
                    data = decoder.decode()
                    if data:
                        return data
                elif self._body:
                    decoder.feed(self._take())
                elif self.complete:
                    data = decoder.flush()
                    self._decoder = None
                    return data
                elif self.error is not None:
                    raise self.error
                else:
                    await self._wait(idle)
        except zlib.error:
            self._fail(BadResponse("the upstream's compressed body is corrupt"))
            assert self.error is not None
            raise self.error from None
        except Truncated as cut:
            self._fail(cut)  # (the body's end came, but not the data's)
            raise

    async def _wait(self, idle: float) -> None:
        waiter = self._waiter = self._loop.create_future()
        timer = self._loop.call_later(idle, _expire, waiter)
        try:
            woken = await waiter
        finally:
            timer.cancel()
            self._waiter = None
        if not woken:
            self._fail(ResponseTimeout(f"nothing from the upstream in {idle:g} s"))

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    def _fail(self, error: HTTPClientError) -> None:
        if self.error is None:
            self.error = error
        self._close()

    def _close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def tunneled(self, transport: asyncio.Transport) -> None:
        """The CONNECT exchange is over: `transport` (TLS inside the tunnel)
        carries the requests from now on."""
        self.transport = transport
        self._poller = None
        self.tunnel = False
        self._reset(None)

    def reusable(self) -> bool:
        return self.complete and not self.closed and self.keep_alive

    def alive(self) -> bool:
        """Open, as far as can be told without waiting: not closed or closing,
        and no byte waiting on the socket. An idle connection has nothing to
        read, so a readable one holds the upstream's close (or bytes nobody
        asked for) that the event loop has not handled yet."""
        transport = self.transport
        if self.closed or transport is None or transport.is_closing():
            return False
        poller = self._poller
        if poller is None:
            sock = transport.get_extra_info("socket")
            if sock is None:
                return True
            poller = self._poller = select.poll()  # holds no descriptor of its own
            poller.register(sock.fileno(), select.POLLIN)
        return not poller.poll(0)

    def abandon(self) -> None:
        self._close()

    def abort(self) -> None:
        """Close at once, without TLS's closing handshake (the pool is closing)."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


def _expire(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)
