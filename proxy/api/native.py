"""A door's request to an upstream that speaks the door's own API (`api:
responses` to a Responses upstream, `api: messages` to a Messages one).

The request was planned like every other (route, tenant, conversation,
settings) and its body prepared by the door; here it goes to the upstream's
own path, and the answer comes back read by read through the door's
`NativeReader` (sans-IO: the door's wire in, the door's wire out, the turn
read on the way): the turn stored before the stream's last bytes, a client
that leaves cancels the upstream request (the cut turn is stored as
incomplete), route keys the upstream quotes masked. Upstream errors keep
their status; `error_body` turns their body into the door's error shape.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from proxy.api.asgi import encode_headers, send_bytes
from proxy.api.failures import FAILURE_KIND, read_failure, read_failure_error
from proxy.api.relay import Progress, stream_headers
from proxy.api.trace import Trace
from proxy.errors import UpstreamError
from proxy.exchange import Exchange
from proxy.reasoning.blocks import Turn
from proxy.reasoning.normalizer import StreamFailure
from proxy.upstream import (
    Response,
    Upstream,
    UpstreamReadError,
    response_headers,
    upstream_read_errors,
)

if TYPE_CHECKING:
    from proxy.api.door import Door

OPEN, DONE = "open", "done"


class NativeReader(Protocol):
    state: str  # "open", then "done" or "failed"

    def feed(self, data: bytes) -> bytes: ...

    def finish(self) -> bytes: ...

    def abort(self, failure: StreamFailure) -> bytes: ...

    def whole(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def turn(self) -> Turn: ...


async def forward_native(
    door: Door,
    ex: Exchange,
    trace: Trace,
    state: Progress,
    reader: NativeReader,
    path: str,
    error_body: Callable[[int, bytes], bytes] | None = None,
) -> None:
    async def stream(response: Response) -> None:
        await _stream(door, ex, trace, state, response, reader)

    async def whole(response: Response) -> None:
        await _whole(door, ex, trace, state, response, reader, error_body)

    try:
        await door.call_upstream(ex, trace, state, path, stream, whole)
    except asyncio.CancelledError:
        # the client left, or a shutdown cut the stream: the turn so far is kept
        # (once: a turn already stored is not stored again)
        await door._remember(ex, reader.turn())
        raise


async def _stream(
    door: Door,
    ex: Exchange,
    trace: Trace,
    state: Progress,
    response: Response,
    reader: NativeReader,
) -> None:
    mask = door.rt.key_mask
    headers = stream_headers(ex, response, mask)
    start = {"type": "http.response.start", "status": response.status}
    await trace.send({**start, "headers": encode_headers(headers)})
    state.started = True
    masking = mask.stream() if mask is not None else None
    first = True
    try:
        with upstream_read_errors():
            while True:
                data = await response.read()
                if first:
                    trace.upstream_first_byte()
                    first = False
                if not data:
                    out = reader.finish()
                    if reader.state != DONE:  # closed before its end event
                        trace.upstream_error = "disconnected"
                    break
                out = reader.feed(data)
                if reader.state != OPEN:
                    break
                if out:
                    if masking is not None:
                        out = masking.feed(out)
                    await trace.send({"type": "http.response.body", "body": out, "more_body": True})
    except UpstreamReadError as exc:
        failure = read_failure(exc)
        trace.upstream_error = FAILURE_KIND[failure.code]
        out = reader.abort(failure)
    trace.outcome = "complete" if reader.state == DONE else "failed"
    await door._remember(ex, reader.turn())
    state.complete = True
    if masking is not None:
        out = masking.feed(out) + masking.flush()
    await trace.send({"type": "http.response.body", "body": out, "more_body": False})
    if reader.state == DONE:
        await Upstream.drain(response, 1.0)


async def _whole(
    door: Door,
    ex: Exchange,
    trace: Trace,
    state: Progress,
    response: Response,
    reader: NativeReader,
    error_body: Callable[[int, bytes], bytes] | None,
) -> None:
    trace.upstream_first_byte()
    try:
        body = await Upstream.read_all(response, door.rt.config.limits.max_response_bytes)
    except UpstreamReadError as exc:
        raise read_failure_error(exc) from None
    headers = [(k, v) for k, v in response_headers(response) if k.lower() != "content-type"]
    status = response.status
    if status < 300:
        try:
            answer = orjson.loads(body)
        except orjson.JSONDecodeError:
            answer = None
        if not isinstance(answer, dict):
            trace.upstream_error = "malformed"
            raise UpstreamError(
                "The upstream sent a response that is not a JSON object.",
                code="malformed_upstream_response",
            )
        body = orjson.dumps(reader.whole(answer))
        await door._remember(ex, reader.turn())
    elif error_body is not None:
        body = error_body(status, body)
    headers = [("content-type", "application/json"), *headers, *ex.extra_headers]
    mask = door.rt.key_mask
    if mask is not None:
        headers, body = mask.headers(headers), mask.data(body)
    state.complete = True
    state.started = True
    await send_bytes(trace.send, status, body, encode_headers(headers))
