"""The Messages door to an upstream that speaks Messages itself (`api: messages`).

The request was planned like every other (route, tenant, conversation,
settings) and its body prepared by `proxy.messages.native.native_request`;
here it goes to the upstream's `/messages` and the answer comes back read
by read through a `NativeReader`: signatures sealed, the turn stored before
the stream's last bytes, a client that leaves cancels the upstream request
(the cut turn is stored as incomplete). Upstream errors keep their status
and (Anthropic) body.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import orjson

from proxy.api.asgi import encode_headers, send_bytes
from proxy.api.failures import error_kind, read_failure, read_failure_error
from proxy.api.relay import Progress
from proxy.api.trace import Trace
from proxy.config import Route
from proxy.errors import ProxyError, UpstreamError
from proxy.exchange import OWN_HEADERS, Exchange
from proxy.messages.native import NativeReader, Seal
from proxy.messages.shapes import error_body
from proxy.upstream import (
    Response,
    Upstream,
    UpstreamReadError,
    response_headers,
    strip_hop_by_hop,
    upstream_read_errors,
)

if TYPE_CHECKING:
    from proxy.api.messages import MessagesEndpoint

ANTHROPIC_VERSION = "2023-06-01"  # sent when the client names none


def native_headers(headers: list[tuple[str, str]], route: Route) -> list[tuple[str, str]]:
    """The client's headers for a Messages upstream: its credential as it
    came (`x-api-key` or `Authorization`) unless the route has its own key
    (then `x-api-key: <route key>` alone), `anthropic-*` headers kept."""
    out = [
        (k, v)
        for k, v in strip_hop_by_hop(headers)
        if not k.startswith(OWN_HEADERS) and k != "content-type"
    ]
    out.append(("content-type", "application/json"))
    if route.api_key is not None:
        out = [(k, v) for k, v in out if k not in ("authorization", "x-api-key")]
        out.append(("x-api-key", route.api_key.get()))
    if not any(k == "anthropic-version" for k, _ in out):
        out.append(("anthropic-version", ANTHROPIC_VERSION))
    out.extend(route.headers)
    return out


async def forward_native(
    door: MessagesEndpoint, ex: Exchange, trace: Trace, state: Progress, seal: Seal
) -> None:
    rt = door.rt
    reader = NativeReader(seal, rt.config.limits.max_sse_line_bytes)
    body = orjson.dumps(ex.payload)
    trace.upstream_started()
    try:
        async with rt.upstream.request(
            ex.route, "POST", "/messages", ex.upstream_headers, body
        ) as response:
            if 300 <= response.status < 400:
                raise UpstreamError(
                    "The upstream answered with a redirect; redirects are not followed.",
                    code="upstream_redirect",
                )
            if response.status >= 400:
                trace.upstream_error = "status"
            content_type = response.header("content-type") or ""
            if response.status < 300 and content_type.startswith("text/event-stream"):
                await _stream(door, ex, trace, state, response, reader)
            else:
                await _whole(door, ex, trace, state, response, reader)
    except ProxyError as exc:
        trace.upstream_error = trace.upstream_error or error_kind(exc)
        trace.fields["error"] = exc.code
        state.complete = True
        if not state.started:
            await door.send_error(trace.send, exc)
        else:
            await trace.send({"type": "http.response.body", "body": b"", "more_body": False})
    except asyncio.CancelledError:
        # the client left, or a shutdown cut the stream: the turn so far is kept
        await door._remember(ex, reader.turn())
        raise


async def _stream(
    door: MessagesEndpoint,
    ex: Exchange,
    trace: Trace,
    state: Progress,
    response: Response,
    reader: NativeReader,
) -> None:
    mask = door.rt.key_mask
    headers = [
        (k, v)
        for k, v in response_headers(response)
        if k.lower() not in ("cache-control", "x-accel-buffering")
    ]
    if mask is not None:
        headers = mask.headers(headers)
    headers += [("cache-control", "no-cache"), ("x-accel-buffering", "no"), *ex.extra_headers]
    await trace.send(
        {
            "type": "http.response.start",
            "status": response.status,
            "headers": encode_headers(headers),
        }
    )
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
                    break
                out = reader.feed(data)
                if reader.state != "open":
                    break
                if out:
                    if masking is not None:
                        out = masking.feed(out)
                    await trace.send({"type": "http.response.body", "body": out, "more_body": True})
    except UpstreamReadError as exc:
        failure = read_failure(exc)
        out = reader.abort(failure.code, failure.message)
    trace.outcome = "complete" if reader.state == "done" else "failed"
    await door._remember(ex, reader.turn())
    state.complete = True
    if masking is not None:
        out = masking.feed(out) + masking.flush()
    await trace.send({"type": "http.response.body", "body": out, "more_body": False})
    if reader.state == "done":
        await Upstream.drain(response, 1.0)


async def _whole(
    door: MessagesEndpoint,
    ex: Exchange,
    trace: Trace,
    state: Progress,
    response: Response,
    reader: NativeReader,
) -> None:
    trace.upstream_first_byte()
    try:
        body = await Upstream.read_all(response, door.rt.config.limits.max_response_bytes)
    except UpstreamReadError as exc:
        raise read_failure_error(exc) from None
    headers = [(k, v) for k, v in response_headers(response) if k.lower() != "content-type"]
    if response.status < 300:
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError:
            message = None
        if isinstance(message, dict):
            body = orjson.dumps(reader.whole(message))
            await door._remember(ex, reader.turn())
        else:
            trace.upstream_error = "malformed"
            body = error_body(502, b"The upstream sent a response that is not a JSON object.")
            response_status = 502
            await _send(door, trace, state, response_status, body, headers)
            return
    else:
        body = error_body(response.status, body)
    await _send(door, trace, state, response.status, body, [*headers, *ex.extra_headers])


async def _send(
    door: MessagesEndpoint,
    trace: Trace,
    state: Progress,
    status: int,
    body: bytes,
    headers: list[tuple[str, str]],
) -> None:
    headers = [("content-type", "application/json"), *headers]
    mask = door.rt.key_mask
    if mask is not None:
        headers, body = mask.headers(headers), mask.data(body)
    state.complete = True
    state.started = True
    await send_bytes(trace.send, status, body, encode_headers(headers))
