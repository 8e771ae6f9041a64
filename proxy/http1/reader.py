"""Reading one HTTP/1.1 response: bytes in, events out (sans-IO).

`ResponseReader.feed(data)` takes the bytes of one socket read and returns
the events they complete; `end_of_input()` says that the connection closed.
Nothing here does I/O, waits, logs or reads settings: the asyncio protocol
(`connection.py`) moves bytes from the socket to a reader and its events to
the response.

The framing is llhttp's (through httptools, in C). A streamed body is many
small chunks, and a chunk parser in Python costs about three times as much
per chunk (measured on an SSE event of 190 bytes: 450 ns against 140 ns).
The body pieces of one `feed()` become one `Body` event, so a read of 200
chunks costs one event, not 200.

States, one reader per response:

    HEAD   reading a status line and headers; an informational response
           (1xx) is reported and the reader stays here
    BODY   the final head is read; body bytes until the framing ends the
           body (Content-Length, the last chunk) or the connection closes
    DONE   `End` was returned. A byte other than CR or LF after it is one
           nobody asked for: the connection is no longer `reusable`
    ERROR  BadResponse or Disconnected was raised; every later call raises
           it again

A response to HEAD or CONNECT ends with its head (`head_only`). llhttp
cannot be told that the body its headers announce will not come, so the
bytes after such a head are never read as anything, and the connection is
not reused after one.
"""

from __future__ import annotations

from dataclasses import dataclass

import httptools

from proxy.http1.errors import BadResponse, Disconnected, HTTPClientError

MAX_HEAD_BYTES = 64 * 1024  # status line and headers of one response

Headers = tuple[tuple[str, str], ...]  # names and values as sent, latin-1


@dataclass(frozen=True, slots=True)
class Informational:
    """A 1xx response (100 Continue, 103 Early Hints): the real one follows."""

    status: int
    headers: Headers


@dataclass(frozen=True, slots=True, init=False)
class Head:
    """The final response's status and headers. `keep_alive`: the connection
    can carry another request once this response has ended."""

    status: int
    headers: Headers
    keep_alive: bool

    # written out, as proxy/reasoning/blocks.py says why
    def __init__(self, status: int, headers: Headers, keep_alive: bool) -> None:
        object.__setattr__(self, "status", status)
        object.__setattr__(self, "headers", headers)
        object.__setattr__(self, "keep_alive", keep_alive)


@dataclass(frozen=True, slots=True, init=False)
class Body:
    """Body bytes, without their framing (chunk sizes), not decoded."""

    data: bytes

    # written out, as proxy/reasoning/blocks.py says why
    def __init__(self, data: bytes) -> None:
        object.__setattr__(self, "data", data)


@dataclass(frozen=True, slots=True)
class End:
    """The response is complete."""


Event = Informational | Head | Body | End

_HEAD, _BODY, _DONE, _ERROR = "HEAD", "BODY", "DONE", "ERROR"


class _AfterEnd(Exception):
    """Stops llhttp at a byte after the end of the response."""


class ResponseReader:
    """One response, read from the bytes the connection receives."""

    __slots__ = (
        "_clean",
        "_error",
        "_events",
        "_head_bytes",
        "_head_only",
        "_headers",
        "_keep_alive",
        "_parser",
        "_pieces",
        "_raw",
        "_until_close",
        "state",
    )

    def __init__(self, *, head_only: bool = False) -> None:
        # the parser calls back into the reader: a cycle, broken at the end
        # (DONE, ERROR) so that a response's reader goes with its last reference
        self._parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        self._head_only = head_only
        self.state = _HEAD
        self._events: list[Event] = []
        self._pieces: list[bytes] = []  # body bytes of the feed() under way
        self._headers: list[tuple[str, str]] = []
        self._head_bytes = 0  # header bytes of the head being read
        self._raw = 0  # bytes fed before the final head was read
        self._until_close = False  # the body ends when the connection closes
        self._keep_alive = False
        self._clean = True  # nothing came after the end
        self._error: HTTPClientError | None = None

    @property
    def reusable(self) -> bool:
        """The response ended, the upstream keeps the connection alive, and
        nothing came after the response."""
        return self.state is _DONE and self._keep_alive and self._clean

    def feed(self, data: bytes) -> list[Event]:
        """The events that `data`, the next bytes received, complete.
        BadResponse when they are not a response we can read (the events
        before the fault in `data` are not returned)."""
        state = self.state
        if state is _DONE:
            if data.strip(b"\r\n"):
                self._clean = False
            return []
        if self._error is not None:
            raise self._error
        events = self._events = []
        error: BadResponse | None = None
        parser = self._parser
        assert parser is not None  # (None only when DONE or ERROR)
        try:
            parser.feed_data(data)
        except httptools.HttpParserCallbackError as failed:
            # (each handler's name is its own: compiled, a name has one type)
            cause = failed.__context__
            if isinstance(cause, _AfterEnd):
                self._clean = False
            else:
                error = cause if isinstance(cause, BadResponse) else BadResponse(str(failed))
        except httptools.HttpParserUpgrade:
            error = BadResponse("the upstream switched protocols")
        except httptools.HttpParserError as exc:
            if self.state is _DONE:  # bytes after a response that closes the connection
                self._clean = False
            else:
                error = BadResponse(f"malformed response: {exc}")
        if error is None and self.state is _HEAD:
            self._raw += len(data)  # a head that never ends is bounded too
            if self._raw > 2 * MAX_HEAD_BYTES:
                error = BadResponse("the upstream's response headers are too large")
        if error is not None:
            raise self._fail(error)
        pieces = self._pieces
        if pieces:
            events.append(Body(pieces[0] if len(pieces) == 1 else b"".join(pieces)))
            pieces.clear()
        return events

    def end_of_input(self) -> list[Event]:
        """The events that the connection's closing completes: the end of a
        body delimited by the close. Disconnected when the response was not
        complete."""
        if self.state is _DONE:
            return []
        if self._error is not None:
            raise self._error
        if self.state is _BODY and self._until_close:
            self._done()
            self._keep_alive = False
            return [End()]
        where = "without a response" if self.state is _HEAD else "mid-response"
        raise self._fail(Disconnected(f"the upstream closed the connection {where}"))

    def _fail(self, error: HTTPClientError) -> HTTPClientError:
        self.state = _ERROR
        self._parser = None
        self._error = error
        self._pieces.clear()
        return error

    def _done(self) -> None:
        # (from a callback, the running feed_data() holds the parser)
        self.state = _DONE
        self._parser = None

    def _end_body_piece(self) -> None:
        pieces = self._pieces
        self._events.append(Body(pieces[0] if len(pieces) == 1 else b"".join(pieces)))
        pieces.clear()

    # -- llhttp's callbacks ----------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.state is _DONE:
            raise _AfterEnd

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value) + 4
        if self._head_bytes > MAX_HEAD_BYTES:
            raise BadResponse("the upstream's response headers are too large")
        self._headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        parser = self._parser
        assert parser is not None
        status = parser.get_status_code()
        headers = tuple(self._headers)
        self._headers = []
        self._head_bytes = 0
        if status == 101:
            raise BadResponse("the upstream switched protocols")
        if status < 100:
            raise BadResponse(f"status {status} is not an HTTP status")
        if status < 200:
            self._events.append(Informational(status, headers))
            return
        if self._head_only:
            self._done()
            self._events += (Head(status, headers, False), End())
            return
        self.state = _BODY
        self._keep_alive = parser.should_keep_alive()
        self._until_close = not _framed(headers)
        self._events.append(Head(status, headers, self._keep_alive))

    def on_body(self, body: bytes) -> None:
        if self.state is _BODY:  # (after a head-only response: not read)
            self._pieces.append(body)

    def on_message_complete(self) -> None:
        # also called at the end of an informational response (state HEAD),
        # and after a head-only one (DONE): nothing ends then
        if self.state is _BODY:
            if self._pieces:
                self._end_body_piece()
            self._done()
            self._events.append(End())


def _framed(headers: Headers) -> bool:
    """The body has a length, or chunked framing (else the close ends it)."""
    chunked = False
    for name, value in headers:
        lowered = name.lower()
        if lowered == "content-length":
            return True
        if lowered == "transfer-encoding":
            chunked = value.rsplit(",", 1)[-1].strip().lower() == "chunked"
    return chunked
