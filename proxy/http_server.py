"""The client's HTTP/1.1 connection: uvicorn's httptools protocol with bounds
on what a client may hold.

uvicorn with httptools bounds none of a request's head: not its time (a
connection that sends nothing, or half a head, stays open for ever), not
its size (a header line is buffered until it ends, and 20,000 headers of
1 KB each are 20 MB in the scope), and the body has no time bound either.
A declared Content-Length is only compared with `limits.max_body_bytes` as
the body arrives. Per connection, here:

    awaiting a head --head complete--> body due --message complete--> answering
          ^                                                              |
          +------------------------ response complete -------------------+

- awaiting a head: a connection's first head must be complete within
  `server.request_header_timeout` of its opening, and a later head within
  that time of the read that began it (armed only when a read ends with a
  head unfinished, so a whole head in one read costs no timer), else a 408
  when some of it came, or the connection is closed when none did (after a
  response, uvicorn's own keep-alive timeout closes a connection that sends
  nothing).
  More than `limits.max_header_count` headers, or more than
  `limits.max_head_bytes` of request target, header names and values, is a
  431; so is twice that many bytes received with the head unfinished
  (one endless header line, which httptools buffers whole).
- head complete: a Content-Length over `limits.max_body_bytes` is a 413 at
  once; the app never runs, so no `100 Continue` goes out.
- body due: a gap of `server.request_body_timeout` without a body byte
  (while uvicorn's own flow control is not what stopped the reading) is a
  408 when the app has not started its answer (the app's `receive` then
  sees a disconnect), else the connection is closed.
- answering: a client that reads nothing of its answer fills the socket's
  buffers, and uvicorn then holds the app's next `send` (and with it the
  upstream request) until the client reads again. Once no byte could go
  to the client for `server.response_send_timeout` while writing is
  paused, the connection is closed, and the app sees the client leave. A
  client that reads slowly but keeps reading is never cut, and a request
  whose answer fits the buffers costs no timer.

Every refusal closes the connection (`Connection: close`, then a short
linger that drops what the client still sends) and comes in the
door's error shape: Anthropic's on the Messages paths and to clients that
send `anthropic-version`, OpenAI's elsewhere, and gets the access line and
request metrics of any request (`Trace`). So does a request that is not
HTTP/1.1 (httptools refuses it: a 400, where uvicorn answers in text). One due while an earlier
pipelined request is still being answered waits for that answer's end.
The bounds are read from the config of the app uvicorn loaded, so each
`--workers` process applies its own.

A response the app ends short of its end on purpose (a pass-through body
its upstream cut: `proxy.api.asgi.cut_response`) is cut through the scope
extension `CUT_EXTENSION`: the connection closes without the body's end,
with the app's warning and without uvicorn's error for an app that forgot
to end its response.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import sys
import termios
from asyncio import TimerHandle
from dataclasses import dataclass
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from proxy.api.asgi import CUT_EXTENSION
from proxy.api.trace import REFUSED, Trace
from proxy.app import ProxyApp, api_endpoint, door_path
from proxy.config import Config, LimitsModel, ServerModel
from proxy.doors.messages.shapes import anthropic_error, wants_anthropic
from proxy.errors import BadRequest, HeadersTooLarge, PayloadTooLarge, ProxyError, RequestTimeout
from proxy.runtime import Runtime

log = logging.getLogger("proxy")

# seconds a refused request's connection still reads (and drops) before it closes
LINGER_SECONDS = 2.0
# ioctl for the bytes in a socket's send queue (Linux: SIOCOUTQ, the same number)
OUTQ: int | None = getattr(termios, "TIOCOUTQ", None)


@dataclass(frozen=True, slots=True)
class ClientBounds:
    header_timeout: float
    body_timeout: float
    send_timeout: float
    max_header_count: int
    max_head_bytes: int
    max_body_bytes: int

    @classmethod
    def of(cls, server: ServerModel, limits: LimitsModel) -> ClientBounds:
        return cls(
            server.request_header_timeout,
            server.request_body_timeout,
            server.response_send_timeout,
            limits.max_header_count,
            limits.max_head_bytes,
            limits.max_body_bytes,
        )


def runtime_of(app: Any) -> Runtime | None:
    """The Runtime behind uvicorn's loaded app (uvicorn's own middleware,
    when its options ask for one, wraps the app as `.app`)."""
    for _ in range(4):
        if isinstance(app, ProxyApp):
            return app.runtime
        app = getattr(app, "app", None)
    return None


@functools.lru_cache(maxsize=8)
def bounds_of(app: Any) -> ClientBounds:
    """The bounds the app's config sets (the defaults for another app)."""
    runtime = runtime_of(app)
    config: Config | None = runtime.config if runtime is not None else None
    if config is None:
        return ClientBounds.of(ServerModel(), LimitsModel())
    return ClientBounds.of(config.server, config.limits)


def _length(value: bytes) -> int:
    try:
        return int(value)
    except ValueError:
        return 0  # llhttp refuses such a value before this


async def _nowhere(message: Any) -> None:
    """The send of a refusal's trace: the answer went out already."""


class _Stop(Exception):
    """Raised in a parser callback to stop parsing (the refusal is kept on
    the protocol: httptools wraps what a callback raises)."""


class ProxyHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the bounds above (`http=` of
    uvicorn's Config)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bounds = bounds_of(self.app)
        self.url = b""
        self._head_timer: TimerHandle | None = None
        self._body_timer: TimerHandle | None = None
        self._send_timer: TimerHandle | None = None
        self._unsent = 0  # bytes buffered for the client when the send timer was armed
        self._reading_head = True  # the next bytes belong to a head
        self._head_received = 0  # bytes of it received so far, framing included
        self._body_due = False
        self._body_at = 0.0  # loop time of the body's last bytes
        self._stopped_by: ProxyError | None = None  # what a callback stopped parsing for
        self._refusal: ProxyError | None = None  # due once the answer in progress ends
        self._refused = False
        self._app_traces = False  # the refused request's app writes its access line

    # -- connection ----------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._send_timer is None:
            self._unsent = self._unsent_bytes()
            self._send_timer = self.loop.call_later(self.bounds.send_timeout, self._send_late)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def data_received(self, data: bytes) -> None:
        # uvicorn's, with the refusals and the body timer
        if self._refused:
            return  # what follows a refused request is not read
        if self._reading_head:
            self._head_received += len(data)
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError:
            stopped_by = self._stopped_by
            if stopped_by is not None:
                self._refuse(stopped_by)
                return
            # not HTTP/1.1 (a header value with CR, LF or NUL, a bad request
            # line): refused in the door's shape, where uvicorn answers in text
            self._refuse(
                BadRequest(
                    "The request is not valid HTTP/1.1 (a malformed request line or "
                    "header, or a header value with a control character).",
                    code="invalid_http_request",
                )
            )
            return
        if self._reading_head:
            if self._head_received > 2 * self.bounds.max_head_bytes:
                self._refuse(self._too_large_head())
            elif self._head_received and self._head_timer is None:
                self._await_head()  # a head split across reads: it has the timeout to end
        elif self._body_due:
            self._body_at = self.loop.time()
            if self._body_timer is None:
                self._body_timer = self.loop.call_later(self.bounds.body_timeout, self._body_late)

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start a pipelined request
        if self.transport.is_closing() or not self.cycle.response_complete:
            return
        refusal = self._refusal
        if refusal is not None:
            self._answer(refusal)
        # else uvicorn's keep-alive timeout, armed now, closes a connection
        # that sends nothing more; a head that begins gets its timer once a
        # read ends without it whole (no timer per request: timers on every
        # request measured +3 ms at the 99th percentile of time to first byte)

    # -- parser callbacks ----------------------------------------------------------

    def on_headers_complete(self) -> None:
        # the head's bounds, checked once it is whole (no callback per header:
        # what a head may buffer before then is bounded in data_received)
        self._reading_head = False
        self._head_received = 0
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        bounds = self.bounds
        size = len(self.url)
        declared = 0
        for name, value in self.headers:
            size += len(name) + len(value)
            if name == b"content-length":
                declared = _length(value)
        if len(self.headers) > bounds.max_header_count or size > bounds.max_head_bytes:
            self._stop(self._too_large_head())
        limit = bounds.max_body_bytes
        if declared > limit:
            self._stop(
                PayloadTooLarge(
                    f"The request body is larger than limits.max_body_bytes ({limit} bytes)."
                )
            )
        existing = self.cycle
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle is not existing:
            extensions = self.scope.setdefault("extensions", {})
            extensions[CUT_EXTENSION] = {"cut": functools.partial(self._cut, cycle)}
        self._body_due = True
        self._body_at = self.loop.time()

    def _cut(self, cycle: RequestResponseCycle) -> bool:
        """`CUT_EXTENSION`: the app ends `cycle`'s started response short of its
        end, on purpose. The connection closes after what was written, without
        the body's end, and the cycle counts as disconnected (its later sends
        go nowhere): uvicorn's "ASGI callable returned without completing
        response." error, for an app that forgot to end its response, is not
        due. False when the response had ended (nothing is cut)."""
        if cycle.response_complete:
            return False
        if not cycle.disconnected:
            cycle.disconnected = True
            self.transport.close()
        return True

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._body_due = False
        self._reading_head = True
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    # -- bounds --------------------------------------------------------------------

    def _await_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_timer = self.loop.call_later(self.bounds.header_timeout, self._head_late)

    def _head_late(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._head_received:  # some of a head came
            self._refuse(
                RequestTimeout(
                    "The request's headers did not arrive within "
                    f"server.request_header_timeout ({self.bounds.header_timeout:g} s)."
                )
            )
        else:
            self.transport.close()  # nothing asked, nothing to answer

    def _body_late(self) -> None:
        self._body_timer = None
        if not self._body_due or self.transport.is_closing():
            return
        timeout = self.bounds.body_timeout
        now = self.loop.time()
        if self.flow.read_paused:
            # uvicorn stopped reading (the app has not read what came): not
            # the client's doing, so the gap starts again
            self._body_at = now
        idle = now - self._body_at
        if idle < timeout:
            self._body_timer = self.loop.call_later(timeout - idle, self._body_late)
            return
        cycle = self.cycle
        if cycle.response_started:
            self.transport.close()  # an answer begun cannot become a 408
            return
        # the app's `receive` now says the client left, and what it sends is
        # dropped; its access line gives the status sent here
        cycle.disconnected = True
        cycle.scope["state"][REFUSED] = 408
        self._app_traces = True
        cycle.message_event.set()
        self._refuse(
            RequestTimeout(
                "The request body stopped arriving for longer than "
                f"server.request_body_timeout ({timeout:g} s)."
            )
        )

    def _send_late(self) -> None:
        self._send_timer = None
        if not self.flow.write_paused:
            return
        unsent = self._unsent_bytes()
        if unsent < self._unsent:  # the client took some: the time starts again
            self._unsent = unsent
            self._send_timer = self.loop.call_later(self.bounds.send_timeout, self._send_late)
            return
        # what is still buffered for the client is dropped with the connection
        log.info(
            "client stopped reading its answer for server.response_send_timeout "
            "(%g s); connection closed",
            self.bounds.send_timeout,
            extra={"path": self.url.split(b"?", 1)[0].decode("latin-1")},
        )
        self.transport.abort()

    def _unsent_bytes(self) -> int:
        """Bytes written for the client that it has not taken yet: the
        transport's buffer, and the socket's send queue where the system
        tells it (with the kernel's buffers of a few MB, a client that reads
        steadily may leave the transport's buffer unchanged for seconds)."""
        unsent: int = self.transport.get_write_buffer_size()
        sock = self.transport.get_extra_info("socket")
        if sock is not None and OUTQ is not None:
            with contextlib.suppress(OSError, ValueError):
                queued = fcntl.ioctl(sock.fileno(), OUTQ, b"\0\0\0\0")
                unsent += int.from_bytes(queued, sys.byteorder, signed=True)
        return unsent

    def _too_large_head(self) -> HeadersTooLarge:
        bounds = self.bounds
        return HeadersTooLarge(
            f"The request has more than limits.max_header_count ({bounds.max_header_count}) "
            f"headers or more than limits.max_head_bytes ({bounds.max_head_bytes} bytes) "
            "of target, header names and values."
        )

    def _stop(self, error: ProxyError) -> None:
        self._stopped_by = error
        raise _Stop

    # -- refusing ------------------------------------------------------------------

    def _refuse(self, error: ProxyError) -> None:
        """Answer `error` and close the connection: now, or once the answer
        to an earlier request in progress has ended."""
        self._refused = True
        self._cancel_timers()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete and not cycle.disconnected:
            self._refusal = error
            return
        self._answer(error)

    def _answer(self, error: ProxyError) -> None:
        if self.transport.is_closing():
            return
        path = self.url.split(b"?", 1)[0].decode("latin-1")
        headers = self.headers or []
        body = anthropic_error(error) if wants_anthropic(path, headers) else error.render()
        head = [STATUS_LINE[error.status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        # Closed with the client's bytes still unread, the socket would send a
        # reset that can destroy the answer before the client reads it: end
        # the writing side, read and drop what still comes for a moment, then close.
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.flow.resume_reading()
            self.loop.call_later(LINGER_SECONDS, self.transport.close)
        else:
            self.transport.close()
        if not self._app_traces:
            self._trace_refusal(path, headers, error)

    def _trace_refusal(
        self, path: str, headers: list[tuple[bytes, bytes]], error: ProxyError
    ) -> None:
        """The refused request's access line and metrics, as the app gives
        every request it answers (its path without the query, which may
        carry a key, as far as it came)."""
        runtime = runtime_of(self.app)
        if runtime is None:
            return
        method = "-"
        with contextlib.suppress(Exception):  # the parser may have stopped before it
            method = self.parser.get_method().decode("ascii", "replace")
        scope = {"method": method, "path": path or "-", "headers": headers}
        trace = Trace(_nowhere, runtime.metrics, api_endpoint(door_path(path)), scope)
        trace.status = error.status
        trace.fields["error"] = error.code
        trace.fields["refused_by"] = "client_bounds"
        trace.finish()

    def _cancel_timers(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None
