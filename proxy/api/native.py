"""A door's request to an upstream that speaks the door's own API (`api:
responses` to a Responses upstream, `api: messages` to a Messages one).

The request was planned like every other (route, tenant, conversation,
settings) and its body prepared by the door; here it goes to the upstream's
own path, and the answer comes back read by read through the door's
`StreamReader` (sans-IO: the door's wire in, the door's wire out, the turn
read on the way), relayed as on the one path (`proxy.api.relay`): an error
as the first event, or a failure before any, gets a real status; the turn is
stored before the stream's last bytes; a client that leaves cancels the
upstream request (the cut turn is stored as incomplete); route keys the
upstream quotes are masked. Upstream errors keep their status; `error_body`
turns an OpenAI-shaped error body into the door's error shape. What such a
request sends is counted by the door on a chat payload of it (`count_chat`),
and its restored reasoning under the API's name (`count_restored`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from proxy.api.asgi import encode_headers, send_bytes
from proxy.api.failures import read_failure_error, upstream_status
from proxy.api.relay import ErrorShape, Progress, StreamReader, StreamRelay
from proxy.api.trace import Trace
from proxy.errors import UpstreamError, non_json_error_body, upstream_error_body
from proxy.exchange import Exchange
from proxy.history.context import request_texts, request_tokens_of, tools_text
from proxy.history.explain import NativeTurn
from proxy.observability import Metrics
from proxy.reasoning.blocks import Turn
from proxy.upstream import Response, Upstream, UpstreamReadError, response_headers

if TYPE_CHECKING:
    from proxy.api.door import Door
    from proxy.config import Route
    from proxy.runtime import Runtime


class NativeReader(StreamReader, Protocol):
    def whole(self, body: dict[str, Any]) -> dict[str, Any]:
        """A whole answer, normalized; its turn is read."""
        ...


# a count endpoint (count_tokens, input_tokens) that an upstream does not
# have: these statuses, and then the proxy counts for NO_COUNT_MEMO seconds
NO_COUNT_ENDPOINT = frozenset((404, 405, 501))
NO_COUNT_MEMO = 300.0
Answer = tuple[int, bytes, list[tuple[str, str]]]  # status, body, headers


async def upstream_count(
    rt: Runtime,
    trace: Trace,
    route: Route,
    path: str,
    headers: list[tuple[str, str]],
    body: bytes,
) -> Answer | None:
    """An upstream's own token count (`POST path`): its answer, an error
    with its status and body as they came; None when it has no such
    endpoint (NO_COUNT_ENDPOINT, or a 2xx without a non-negative integer
    `input_tokens`: a server that answers the path without counting)."""
    trace.upstream_started()
    async with rt.upstream.request(route, "POST", path, headers, body) as response:
        status = response.status
        if status in NO_COUNT_ENDPOINT:
            return None
        trace.upstream_first_byte()
        trace.upstream_error = upstream_status(status)
        try:
            data = await Upstream.read_all(response, rt.config.limits.max_response_bytes)
        except UpstreamReadError as exc:
            raise read_failure_error(exc) from None
        kept = response_headers(response)
    if status < 300:
        try:
            answer = orjson.loads(data)
        except orjson.JSONDecodeError:
            answer = None
        count = answer.get("input_tokens") if isinstance(answer, dict) else None
        if type(count) is not int or count < 0:
            return None
        trace.fields["counted_by"] = "upstream"
    return status, data, kept


async def count_chat(rt: Runtime, payload: dict[str, Any]) -> int:
    """A chat payload's tokens, every reasoning it holds included."""
    messages, tools = payload["messages"], tools_text(payload.get("tools"))
    await rt.count.warm(request_texts(messages, tools))  # long texts off the event loop
    return request_tokens_of(messages, tools, rt.count)


def count_restored(metrics: Metrics, api: str, turns: Iterable[NativeTurn]) -> None:
    """The reasoning counters of a request that goes as it is (its chat plan's
    do not apply): under dialect `api`, `reinjected` the turns that got their
    reasoning back from the store, `stripped` those whose stored turn gave
    none to send."""
    reinjected = stripped = 0
    for turn in turns:
        if turn.restored:
            reinjected += 1
        elif turn.stored:
            stripped += 1
    if reinjected:
        metrics.child(metrics.reinjected, api).inc(reinjected)
    if stripped:
        metrics.child(metrics.stripped, api).inc(stripped)


def whole_error(answer: dict[str, Any]) -> Any:
    """The error a whole 2xx answer carries instead of one, else None: an
    OpenAI-shaped `{"error": {...}}` or Anthropic's `{"type": "error",
    "error": {...}}` (gateways answer so with a 200). A Response or a
    Message is an answer, a failed Response too (its `error` is its own)."""
    if answer.get("object") == "response" or answer.get("type") == "message":
        return None
    error = answer.get("error")
    if answer.get("type") == "error":
        return error if error is not None else "The upstream returned an error."
    return error if isinstance(error, dict) else None


async def forward_native(
    door: Door,
    ex: Exchange,
    trace: Trace,
    state: Progress,
    reader: NativeReader,
    path: str,
    error_body: ErrorShape | None = None,
) -> None:
    async def stream(response: Response) -> None:
        state.reader = reader  # the turn of a stream cut short, and its failure event
        if door.rt.live.active:
            # the turn's start and end go on the live feed (its deltas do not:
            # the live view reads the chat path's), so the inspector shows it
            # streaming and then reads it from the store
            door._watch(ex)

        async def remember(turn: Turn | None) -> None:
            await door._remember(ex, turn)

        mask = door.rt.key_mask
        await StreamRelay(ex, response, reader, trace, state, mask, remember, error_body).run()

    async def whole(response: Response) -> None:
        await _whole(door, ex, trace, state, response, reader, error_body)

    await door.call_upstream(ex, trace, state, path, stream, whole)


async def _whole(
    door: Door,
    ex: Exchange,
    trace: Trace,
    state: Progress,
    response: Response,
    reader: NativeReader,
    error_body: ErrorShape | None,
) -> None:
    trace.upstream_first_byte()
    body = await door._read(response)
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
        error = whole_error(answer)
        if error is not None:
            # an error object with a 2xx: a real status and no turn, as for a
            # stream's first error event
            trace.upstream_error = "status"
            trace.fields["error"] = "upstream_error_event"
            status, body = upstream_error_body(error)
            if error_body is not None:
                body = error_body(status, body)
        else:
            body = orjson.dumps(reader.whole(answer))
            if door.rt.live.active:
                door._watch(ex)  # start and end: the inspector reads the turn from the store
            await door._remember(ex, reader.turn())
    elif error_body is not None:
        body = error_body(status, body)
    elif (shaped := non_json_error_body(body)) is not None:
        body = shaped  # an HTML or text error page, sent as JSON: in the door's shape
    headers = [("content-type", "application/json"), *headers, *ex.extra_headers]
    mask = door.rt.key_mask
    if mask is not None:
        headers, body = mask.headers(headers), mask.data(body)
    state.complete = True
    state.started = True
    await send_bytes(trace.send, status, body, encode_headers(headers))
