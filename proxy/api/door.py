"""The driver every front door shares: one exchange path, as a raw ASGI endpoint.

request -> the door's `plan()` (its wire parsed; the planner,
`proxy.exchange`: settings, route, history, upstream body) -> upstream ->
normalizer -> the door's `Encoder` (none for chat completions, whose wire is
the path's own) -> client, then one `history.remember()`. Everything that
can be refused is refused before a byte goes upstream, in the door's own
error shape. A stream is relayed read by read (`proxy.api.relay`); a whole
response is normalized at once. A client that leaves cancels the upstream
request at once, and the cut turn is stored as incomplete.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from proxy.api.asgi import (
    ClientGone,
    Receive,
    Scope,
    Send,
    absorb_cut,
    encode_headers,
    request_headers,
    send_bytes,
    send_error,
)
from proxy.api.encoder import Encoder
from proxy.api.failures import error_kind, read_failure_error, upstream_status
from proxy.api.ownership import kept_upstream, record
from proxy.api.relay import Progress, StreamRelay
from proxy.api.trace import Trace, TracedEndpoint
from proxy.config import CREDENTIAL_HEADERS
from proxy.dialects import thinking_off
from proxy.errors import (
    ProxyError,
    ServerShuttingDown,
    UpstreamError,
    non_json_error_body,
    upstream_error_body,
)
from proxy.exchange import Exchange, Planner
from proxy.history.egress import PLACE
from proxy.history.explain import stored_notes
from proxy.keymask import MIN_KEY_CHARS, KeyMask, credential_values, header_credentials
from proxy.live import TurnWatcher
from proxy.observability import truncate
from proxy.reasoning.blocks import TextPart, ThinkingBlock, Turn, map_texts
from proxy.reasoning.modes import asks_usage, completion_as_stream, stream_as_completion
from proxy.reasoning.normalizer import (
    NormalizeOptions,
    StreamFailure,
    StreamNormalizer,
    answer_error,
    normalize_completion,
)
from proxy.reasoning.sse import SSELineTooLong
from proxy.runtime import Runtime
from proxy.upstream import (
    BufferedResponse,
    Response,
    Upstream,
    UpstreamReadError,
    response_headers,
)

log = logging.getLogger("proxy.chat")


class Door(TracedEndpoint):
    """A front door: `plan()` turns its request into an Exchange (and the
    Encoder of its wire), `send_error()` renders the proxy's errors in its
    shape; the rest is the one path."""

    endpoint = "door"  # the trace's endpoint label

    def __init__(self, runtime: Runtime, planner: Planner | None = None) -> None:
        self.rt = runtime
        self.metrics = runtime.metrics
        self.planner = planner or Planner(runtime)

    async def plan(
        self, headers: list[tuple[str, str]], receive: Receive
    ) -> tuple[Exchange, Encoder | None]:
        raise NotImplementedError

    async def send_error(self, send: Send, exc: ProxyError) -> None:
        await send_error(send, exc)

    async def _handle(self, scope: Scope, receive: Receive, trace: Trace) -> None:
        limits = self.rt.config.limits
        try:
            headers = request_headers(scope, limits.max_header_bytes)
            ex, encoder = await self.plan(headers, receive)
        except ProxyError as exc:
            trace.fields["error"] = exc.code
            await self.send_error(trace.send, exc)
            return
        except ClientGone:
            return
        # the caller's own key, where a logged body quotes it (an upstream
        # that echoes the key it was sent, a client that pasted it)
        own_key = client_key_mask(headers) if self.rt.config.server.log_bodies else None
        if self.rt.config.server.log_bodies:
            log.info("request", extra={"body": truncate(_masked(own_key, ex.payload))})
        trace.route = ex.route.name
        trace.tenant = ex.key.tenant
        trace.stream = ex.stream
        trace.fields.update(
            model=ex.payload.get("model"),
            conversation=ex.key.conversation,
            stream=ex.stream,
            tokens_effective=ex.plan.effective,
            tokens_raw=ex.plan.raw,
        )
        # the watch cancels this task when the client leaves (which closes
        # the upstream request at once)
        state = Progress(receive, encoder)
        try:
            await self.forward(ex, trace, state)
        except asyncio.CancelledError:
            if not (state.absorb() or absorb_cut(self.rt.cut)):
                raise
            # the client left, or a shutdown's grace period ended: the work
            # below (storing the cut turn) goes on
            if state.gone:
                trace.outcome = "client_gone"
            else:
                await self._cut_short(trace, state)
        finally:
            state.stop()
        await self._remember(ex, state.turn())
        if ex.turn is not None:
            trace.fields.update(
                reasoning_blocks=len(ex.turn.thinking),
                complete=ex.turn.complete,
                persisted=ex.turn.persisted,
                finish_reason=ex.turn.finish_reason,
            )
            if self.rt.config.server.log_bodies:
                summary = _masked(own_key, _turn_summary(ex.turn))
                log.info("response", extra={"body": truncate(summary)})

    def normalize_options(self, ex: Exchange, state: Progress) -> NormalizeOptions:
        """How this exchange's answer is separated into reasoning and text."""
        limits = self.rt.config.limits
        # X-Reasoning-Output shapes the chat wire; a door with an encoder
        # reads the default shape (and writes reasoning in its own wire)
        output = ex.settings.output
        if state.encoder is not None and output != "none":
            output = "reasoning_content"
        return NormalizeOptions(
            tags=ex.route.tags,
            # the reply starts inside the reasoning while reasoning is enabled
            # for the request: the setting, and no off switch in the body going
            # upstream (the client's own: its reply then has no `</think>`)
            implicit_open_tag=ex.route.implicit_open_tag
            and ex.settings.enabled
            and not thinking_off(ex.payload),
            include_in_response=ex.settings.include_in_response,
            max_line_bytes=limits.max_sse_line_bytes,
            max_reasoning_bytes=limits.max_reasoning_bytes,
            output=output,
        )

    async def forward(self, ex: Exchange, trace: Trace, state: Progress) -> None:
        options = self.normalize_options(ex, state)

        # (the two closures do not call each other: a reference cycle per
        # request would leave its objects to the cyclic collector)
        async def stream(response: Response) -> None:
            if not ex.stream:  # the upstream streamed what was asked whole
                response = await self._as_whole(response)
                await self._whole(ex, response, options, trace, state)
                return
            await self._relay(ex, response, options, trace, state)

        async def whole(response: Response) -> None:
            if ex.stream and response.status < 300:  # answered whole what was asked streamed
                response, converted = await self._as_stream(response, asks_usage(ex.payload))
                if converted:
                    await self._relay(ex, response, options, trace, state)
                    return
            await self._whole(ex, response, options, trace, state)

        await self.call_upstream(ex, trace, state, "/chat/completions", stream, whole)

    async def _relay(
        self,
        ex: Exchange,
        response: Response,
        options: NormalizeOptions,
        trace: Trace,
        state: Progress,
    ) -> None:
        rt = self.rt
        normalizer = state.reader = StreamNormalizer(options)
        if rt.key_mask is not None:
            state.holding = rt.key_mask.deltas()
        if rt.live.active:
            normalizer.watch()
            self._watch(ex)

        async def remember(turn: Turn | None) -> None:
            await self._remember(ex, turn)

        relay = StreamRelay(ex, response, normalizer, trace, state, rt.key_mask, remember)
        await relay.run()

    async def _read(self, response: Response) -> bytes:
        try:
            return await Upstream.read_all(response, self.rt.config.limits.max_response_bytes)
        except UpstreamReadError as exc:
            raise read_failure_error(exc) from None

    async def _as_whole(self, response: Response) -> BufferedResponse:
        """An event stream, read to its end, as the completion it adds up to
        (an error object when it failed or stopped short, for `_whole` to give
        its status; a 502 when it holds no chunk)."""
        body = await self._read(response)
        try:
            completion = stream_as_completion(body, self.rt.config.limits.max_sse_line_bytes)
        except SSELineTooLong as exc:
            raise UpstreamError(str(exc), code="upstream_line_too_long") from None
        if completion is None:
            raise UpstreamError(
                "The upstream sent an event stream without a chunk.",
                code="malformed_upstream_response",
            )
        return BufferedResponse(200, _passed_on(response), orjson.dumps(completion))

    async def _as_stream(
        self, response: Response, usage_chunk: bool
    ) -> tuple[BufferedResponse, bool]:
        """A whole 2xx completion as its event stream (True), its usage in a
        chunk of its own when `usage_chunk`; a body that is no completion
        comes back as it was (False), for `_whole` to judge."""
        body = await self._read(response)
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            payload = None
        if (
            type(payload) is not dict
            or payload.get("choices") is None
            or answer_error(payload) is not None  # judged as an error by `_whole`
        ):
            kind = response.header("content-type")
            headers = [*_passed_on(response), *([("content-type", kind)] if kind else [])]
            return BufferedResponse(response.status, headers, body), False
        headers = [("content-type", "text/event-stream"), *_passed_on(response)]
        stream = completion_as_stream(payload, usage_chunk=usage_chunk)
        return BufferedResponse(200, headers, stream), True

    async def call_upstream(
        self,
        ex: Exchange,
        trace: Trace,
        state: Progress,
        path: str,
        stream: Callable[[Response], Awaitable[None]],
        whole: Callable[[Response], Awaitable[None]],
    ) -> None:
        """POST the exchange's body to the route's upstream at `path`; a 2xx
        event stream goes to `stream`, anything else to `whole`. Redirects are
        refused; a ProxyError becomes the door's error (or ends a started
        response)."""
        body = orjson.dumps(ex.payload)
        trace.upstream_started()
        try:
            async with self.rt.upstream.request(
                ex.route, "POST", path, ex.upstream_headers, body
            ) as response:
                trace.upstream_error = upstream_status(response.status)
                content_type = response.header("content-type") or ""
                if response.status < 300 and content_type.startswith("text/event-stream"):
                    await stream(response)
                else:
                    await whole(response)
        except ProxyError as exc:
            trace.upstream_error = trace.upstream_error or error_kind(exc)
            trace.fields["error"] = exc.code
            state.complete = True
            if not state.started:
                await self.send_error(trace.send, exc)
            else:
                await trace.send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _whole(
        self,
        ex: Exchange,
        response: Response,
        options: NormalizeOptions,
        trace: Trace,
        state: Progress,
    ) -> None:
        trace.upstream_first_byte()
        body = await self._read(response)
        headers = response_headers(response)
        status = response.status
        if status < 300:
            try:
                payload = orjson.loads(body)
            except orjson.JSONDecodeError:
                payload = None
            if not isinstance(payload, dict):
                trace.upstream_error = "malformed"
                raise UpstreamError(
                    "The upstream sent a response that is not a JSON object.",
                    code="malformed_upstream_response",
                )
            error = answer_error(payload)
            choices = payload.get("choices")
            if error is None and (type(choices) is not list or not choices):
                # no answer at all, as a stream of only [DONE] is
                trace.upstream_error = "malformed"
                raise UpstreamError(
                    "The upstream's answer has no choices.", code="upstream_empty_response"
                )
            if error is not None:
                # an error object with a 2xx: a real status, as for a stream's first event
                trace.upstream_error = "status"
                trace.fields["error"] = "upstream_error_event"
                status, body = upstream_error_body(error)
                # its headers go on with it (`X-Request-Id`, `Retry-After`),
                # as with a stream's first error event
                headers = [(k, v) for k, v in headers if k.lower() != "content-type"]
                headers.insert(0, ("content-type", "application/json"))
            else:
                changed, turn = normalize_completion(payload, options)
                if turn is not None:
                    if self.rt.live.active:
                        watcher = self._watch(ex)
                        shown = options.include
                        watcher.whole(
                            [b.thought for b in turn.thinking if shown and not b.is_hidden],
                            turn.content,
                        )
                    await self._remember(ex, turn)
                if changed:
                    body = orjson.dumps(payload)
                headers = [(k, v) for k, v in headers if k.lower() != "content-type"]
                headers.insert(0, ("content-type", "application/json"))
        elif status >= 400 and (shaped := non_json_error_body(body)) is not None:
            body = shaped  # an HTML or text error page: the error in the door's shape
            headers = [(k, v) for k, v in headers if k.lower() != "content-type"]
            headers.insert(0, ("content-type", "application/json"))
        # the exchange's own headers go with an upstream's refusal too (what
        # was ignored, the dialect, the context tokens), as on a stream's
        # first error event and on the pass-through doors
        headers += ex.extra_headers
        if state.encoder is not None:
            headers = state.encoder.start_headers(headers)
            body = state.encoder.whole(status, body)
        mask = self.rt.key_mask
        if mask is not None:  # an upstream may quote the route's key back (a 401)
            headers, body = mask.headers(headers), mask.data(body)
        state.complete = True
        state.started = True
        await send_bytes(trace.send, status, body, encode_headers(headers))

    async def _cut_short(self, trace: Trace, state: Progress) -> None:
        """The server's shutdown grace period ended before the response did: a
        started stream ends with an error event (no [DONE]), a response not yet
        started is a 503. The reader's turn then says `complete: false`."""
        trace.outcome = "shutdown"
        if state.complete:
            return  # the response had ended; only the work after it was cut
        state.complete = True  # the disconnect watch must not cancel what follows
        error = ServerShuttingDown("The server is shutting down; the response was cut short.")
        trace.fields["error"] = "server_shutting_down"
        out = b""
        if state.reader is not None:
            failure = StreamFailure("server_shutting_down", error.message, error.type)
            out = state.reader.abort(failure)
            if state.holding is not None:
                out = state.holding.feed(out) + state.holding.flush()
            if state.encoder is not None:
                out = state.encoder.feed(out) + state.encoder.flush()
        if state.started:
            await trace.send({"type": "http.response.body", "body": out, "more_body": False})
        else:
            await self.send_error(trace.send, error)

    async def _remember(self, ex: Exchange, turn: Turn | None) -> None:
        """Store the turn, once."""
        if ex.stored or turn is None:
            return
        ex.stored = True
        mask = self.rt.key_mask
        if mask is not None:  # a route key the upstream quoted is never stored
            turn = map_texts(turn, mask.text)
        own = quoted_credentials(ex.upstream_headers, turn)
        if own is not None:  # nor the client's own key, forwarded and quoted back
            turn = map_texts(turn, own.text)
        extra = {**turn.extra, "context": ex.context, "egress": stored_notes(ex.plan.notes)}
        if ex.plan.result.place is not None:  # where it sits in its history
            extra[PLACE] = ex.plan.result.place
        if ex.request_input is not None:  # ui.show_prompts
            extra["input"] = ex.request_input
        stored = await self.rt.history.remember(ex.key, turn, ex.route, extra=extra)
        ex.turn = stored
        if kept_upstream(ex.route, ex.payload):
            # stored upstream behind a route key: who made it (see ownership)
            await record(self.rt, ex.key.tenant, turn.response_id)
        if ex.watcher is not None:
            ex.watcher.end(
                stored.complete,
                stored.finish_reason,
                stored.persisted,
                stored.reasoning_truncated,
                stored.refusal,
            )

    def _watch(self, ex: Exchange) -> TurnWatcher:
        """Announce the turn on the live feed (only while someone watches)."""
        watcher = ex.watcher = TurnWatcher(
            self.rt.live, ex.key.tenant, ex.key.conversation, mask=self.rt.key_mask
        )
        watcher.start(ex.payload.get("model"), ex.route.name, ex.context)
        return watcher


def _passed_on(response: Response) -> list[tuple[str, str]]:
    """The headers a converted body goes on with: what `response_headers`
    passes (no Content-Encoding for a body the transport decoded), less its
    type and length, which the conversion sets."""
    return [
        (k, v)
        for k, v in response_headers(response)
        if k.lower() not in ("content-type", "content-length")
    ]


def client_key_mask(headers: list[tuple[str, str]]) -> KeyMask | None:
    """A mask of the credentials the client sent (its `Authorization`,
    `x-api-key` and the other credential headers), or None without any."""
    return KeyMask.of(
        credential_values((), [(k, v) for k, v in headers if k in CREDENTIAL_HEADERS])
    )


def quoted_credentials(headers: list[tuple[str, str]], turn: Turn) -> KeyMask | None:
    """A mask of the credentials among the headers that went upstream (the
    client's own, on a route that forwards them) when the turn quotes one,
    else None: most requests carry no key long enough to mask, and most
    turns quote none, so most requests build no mask."""
    values = [
        v
        for name, value in headers
        if name.lower() in CREDENTIAL_HEADERS
        for v in header_credentials(name, value)
        if len(v) >= MIN_KEY_CHARS
    ]
    if not values:
        return None
    for part in turn.parts:
        if isinstance(part, TextPart):
            text = part.text
        elif isinstance(part, ThinkingBlock):
            text = part.thought
        else:
            text = part.arguments
        if any(v in text for v in values):
            return KeyMask.of(values)
    return None


def _masked(mask: KeyMask | None, value: Any) -> Any:
    return value if mask is None else mask.json(value)


def _turn_summary(turn: Turn) -> dict[str, Any]:
    return {
        "content": turn.content,
        "reasoning": [b.thought for b in turn.thinking],
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in turn.tool_calls
        ],
        "finish_reason": turn.finish_reason,
        "complete": turn.complete,
    }
