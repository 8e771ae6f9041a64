"""Relaying one upstream SSE stream to the client, normalized, read by read.

The events of one upstream read go to the client in one write, as soon as
they are normalized. Until the stream's first data event the HTTP status is
still open: comments before it are held with it (for at most the route's
idle timeout), so an error as the first event, or a failure before any
event, is answered with a real status rather than a 200 and an error event.
Configured route keys that the upstream quotes are masked. The turn is
stored before the client gets the stream's last bytes, so a client that
sends its next request right away finds it.

The relay reads through a `StreamReader`: the chat normalizer on the one
path, or a door's own reader when the upstream speaks the door's API
(`proxy.api.native`); the early error is then written in the door's shape.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from proxy.api.asgi import DisconnectWatch, Receive, Send, encode_headers, send_bytes
from proxy.api.encoder import Encoder
from proxy.api.failures import FAILURE_KIND, read_failure
from proxy.api.trace import Trace
from proxy.errors import upstream_error_body
from proxy.exchange import Exchange
from proxy.keymask import DeltaMask, KeyMask
from proxy.reasoning.blocks import Turn
from proxy.reasoning.normalizer import DONE, OPEN, StreamFailure, error_body
from proxy.reasoning.tap import Tap
from proxy.upstream import (
    Response,
    Upstream,
    UpstreamReadError,
    response_headers,
    upstream_read_errors,
)

Remember = Callable[[Turn | None], Awaitable[None]]
ErrorShape = Callable[[int, bytes], bytes]  # an OpenAI-shaped error body -> the door's


class StreamReader(Protocol):
    """Reads one upstream stream, sans-IO: `feed()` per read, `finish()` at its
    end, `abort()` when the proxy stops it, each returning the bytes for the
    client. `state` is "open", then "done" or "failed". `seen_data`: a data
    event (not only keep-alives) came; `first_error`: the error object of a
    first event that is an error; `failure`: why the proxy ended the stream
    (None while open, at a clean end, or when the upstream ended it itself);
    `failed_after_data`: the proxy ended it after the client was given a data
    event (in the same read, too), so the stream has begun; `finished`: the
    answer is whole before the stream's own end (a finish_reason came)."""

    @property
    def state(self) -> str: ...

    @property
    def seen_data(self) -> bool: ...

    @property
    def first_error(self) -> Any: ...

    @property
    def failure(self) -> StreamFailure | None: ...

    @property
    def failed_after_data(self) -> bool: ...

    @property
    def finished(self) -> bool: ...

    @property
    def tap(self) -> Tap | None: ...

    def feed(self, data: bytes) -> bytes: ...

    def finish(self) -> bytes: ...

    def abort(self, failure: StreamFailure) -> bytes: ...

    def turn(self) -> Turn: ...


def stream_headers(ex: Exchange, response: Response, mask: KeyMask | None) -> list[tuple[str, str]]:
    """A relayed stream's response headers: the upstream's (keys masked),
    never cached or buffered on the way, and the exchange's own."""
    headers = [
        (k, v)
        for k, v in response_headers(response)
        if k.lower() not in ("cache-control", "x-accel-buffering")
    ]
    if mask is not None:
        headers = mask.headers(headers)
    return [*headers, ("cache-control", "no-cache"), ("x-accel-buffering", "no"), *ex.extra_headers]


class Progress(DisconnectWatch):
    """How far a response got, shared with the watch on the client: once
    `complete`, a disconnect no longer cancels the work after it."""

    __slots__ = ("encoder", "holding", "reader", "started")

    def __init__(self, receive: Receive, encoder: Encoder | None = None) -> None:
        super().__init__(receive)
        self.started = False
        self.reader: StreamReader | None = None
        self.encoder = encoder  # the door's wire, when it is not chat completions
        # the reader's text deltas, holding a tail that could begin a route key
        # (a chat-completion stream's, when route keys are configured)
        self.holding: DeltaMask | None = None

    def turn(self) -> Turn | None:
        return self.reader.turn() if self.reader is not None else None


class StreamRelay:
    """One stream's relay: `run()` once."""

    __slots__ = (
        "error_shape",
        "ex",
        "mask",
        "reader",
        "remember",
        "response",
        "state",
        "trace",
    )

    def __init__(
        self,
        ex: Exchange,
        response: Response,
        reader: StreamReader,
        trace: Trace,
        state: Progress,
        mask: KeyMask | None,
        remember: Remember,
        error_shape: ErrorShape | None = None,
    ) -> None:
        self.ex = ex
        self.response = response
        self.reader = reader
        self.trace = trace
        self.state = state
        self.mask = mask
        self.remember = remember
        self.error_shape = error_shape  # for a door without an encoder

    async def run(self) -> None:
        ex, response, reader, trace, state = (
            self.ex,
            self.response,
            self.reader,
            self.trace,
            self.state,
        )
        send: Send = trace.send
        masking = self.mask.stream() if self.mask is not None else None
        encoder = state.encoder
        holding = state.holding
        read = response.read
        feed = reader.feed
        watcher = ex.watcher
        tap = reader.tap
        first = True
        held: list[bytes] | None = []  # what came before the first data event
        hold_until = time.monotonic() + ex.route.idle_timeout
        try:
            with upstream_read_errors():
                while True:
                    data = await read()
                    if first:
                        trace.upstream_first_byte()
                        first = False
                    if not data:
                        out = reader.finish()
                        break
                    out = feed(data)
                    if tap is not None and tap.pairs and watcher is not None:
                        watcher.deltas(tap.pairs)
                    if reader.state != OPEN:
                        break  # [DONE], or a failure: `out` ends the stream
                    if held is not None:
                        if reader.first_error is not None:
                            break
                        if not reader.seen_data and time.monotonic() < hold_until:
                            held.append(out)
                            continue
                        if held:
                            out = b"".join(held) + out
                        held = None
                        await self._start()
                    if holding is not None:
                        out = holding.feed(out)
                    if encoder is not None:
                        out = encoder.feed(out)
                    if out:
                        if masking is not None:
                            out = masking.feed(out)
                        await send({"type": "http.response.body", "body": out, "more_body": True})
                        send = trace.inner  # the trace has seen the first byte
        except UpstreamReadError as exc:
            # after a finish_reason the answer is whole: a connection that
            # breaks then ends it as a close without [DONE] does
            out = reader.finish() if reader.finished else reader.abort(read_failure(exc))
        if tap is not None and tap.pairs and watcher is not None:
            watcher.deltas(tap.pairs)
        failure = reader.failure
        turn = reader.turn()
        # an error event the upstream sent (first, or after data and before
        # its [DONE]) ends the stream as a failure too: the turn is incomplete
        trace.outcome = "complete" if turn.complete else "failed"
        if failure is not None:
            trace.upstream_error = FAILURE_KIND.get(failure.code, "malformed")
        elif not turn.complete and reader.first_error is None:
            # the upstream ended it with an error event after data: its own
            # error, as a first event's is (`_early_failure`)
            trace.upstream_error = "status"
        if held is not None and (
            reader.first_error is not None or (failure is not None and not reader.failed_after_data)
        ):
            # nothing was sent yet: a real status, not a 200 and an error event
            # (a failure the upstream announced itself after its first data
            # event, in the same read, is relayed as it came, and so is one
            # the proxy found there: the data before it goes out first)
            await self._early_failure(turn)
            return
        await self.remember(turn)
        state.complete = True
        if held is not None:
            if held:
                out = b"".join(held) + out
            await self._start()
        if holding is not None:
            out = holding.feed(out) + holding.flush()
        if encoder is not None:
            out = encoder.feed(out) + encoder.flush()
        if masking is not None:
            out = masking.feed(out) + masking.flush()
        await send({"type": "http.response.body", "body": out, "more_body": False})
        if reader.state == DONE:
            await Upstream.drain(response, 1.0)

    async def _start(self) -> None:
        response = self.response
        headers = stream_headers(self.ex, response, self.mask)
        if self.state.encoder is not None:
            headers = self.state.encoder.start_headers(headers)
        await self.trace.send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": encode_headers(headers),
            }
        )
        self.state.started = True

    async def _early_failure(self, turn: Turn) -> None:
        """A stream that failed before its first data event: its first event was
        an error object (its own status, else 502; no turn is stored, as for an
        error status), or the upstream broke, went quiet or closed (502, 504 for
        the idle timeout; the empty turn is stored as incomplete)."""
        ex, response, reader, trace, mask = (
            self.ex,
            self.response,
            self.reader,
            self.trace,
            self.mask,
        )
        headers: list[tuple[str, str]] = []
        if reader.first_error is not None:
            trace.upstream_error = "status"
            trace.fields["error"] = "upstream_error_event"
            status, body = upstream_error_body(reader.first_error)
            ex.stored = True
            headers = [
                (k, v)
                for k, v in response_headers(response)
                if k.lower() not in ("content-type", "cache-control", "x-accel-buffering")
            ]
        else:
            failure = reader.failure
            assert failure is not None
            trace.fields["error"] = failure.code
            status = 504 if failure.code == "upstream_timeout" else 502
            body = error_body(failure)
            await self.remember(turn)
        headers = [("content-type", "application/json"), *headers, *ex.extra_headers]
        encoder = self.state.encoder
        if encoder is not None:
            headers, body = encoder.start_headers(headers), encoder.whole(status, body)
        elif self.error_shape is not None:
            body = self.error_shape(status, body)
        if mask is not None:
            headers, body = mask.headers(headers), mask.data(body)
        self.state.complete = True
        self.state.started = True
        await send_bytes(trace.send, status, body, encode_headers(headers))
