"""POST /v1/chat/completions, as a raw ASGI endpoint (the hot path).

request -> settings -> egress -> upstream -> normalizer -> client, with the
finished Turn going to the store. Everything that can be refused is checked
before a byte goes upstream. A stream is forwarded read by read: the events
of one upstream read go to the client in one write, as soon as they are
normalized. The turn is stored before the client gets the stream's last
bytes, so a client that sends its next request right away finds it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.api.asgi import (
    ClientGone,
    Receive,
    Scope,
    Send,
    encode_headers,
    header,
    parse_json_object,
    read_body,
    request_headers,
    send_bytes,
    send_error,
)
from proxy.api.trace import Trace
from proxy.config import Route
from proxy.dialects import apply_params, request_params
from proxy.errors import (
    BadRequest,
    NotFound,
    ProxyError,
    ServerShuttingDown,
    Unauthorized,
    UnknownProfile,
    UpstreamError,
    UpstreamTimeout,
    upstream_error_body,
)
from proxy.history.context import EgressPlan, plan_egress
from proxy.history.egress import find_stored, known_reasoning, read_assistants
from proxy.history.keys import ConversationKey, auto_conversation_id
from proxy.live import TurnWatcher
from proxy.observability import truncate
from proxy.reasoning.blocks import Turn
from proxy.reasoning.normalizer import (
    DONE,
    OPEN,
    NormalizeOptions,
    StreamFailure,
    StreamNormalizer,
    error_body,
    normalize_completion,
)
from proxy.runtime import Runtime
from proxy.settings import (
    PROFILE_HEADER,
    ReasoningSettings,
    config_overrides,
    header_overrides,
    request_conversation_id,
    request_profile,
    resolve,
)
from proxy.stores.base import StoreFailure
from proxy.upstream import (
    Response,
    Upstream,
    UpstreamReadError,
    response_headers,
    strip_hop_by_hop,
    upstream_read_errors,
)

log = logging.getLogger("proxy.chat")

# request headers that are the proxy's own and never go upstream
_OWN_HEADERS = ("x-reasoning-", "x-conversation-id")
# stream failure code -> upstream error kind (metrics)
_FAILURE_KIND = {
    "malformed_upstream_event": "malformed",
    "upstream_line_too_long": "malformed",
    "upstream_timeout": "timeout",
    "upstream_disconnected": "disconnected",
    "upstream_closed": "disconnected",
}


@dataclass(slots=True)
class Exchange:
    """Everything decided about one request before it goes upstream."""

    route: Route
    settings: ReasoningSettings
    key: ConversationKey
    payload: dict[str, Any]
    plan: EgressPlan
    stream: bool
    upstream_headers: list[tuple[str, str]]
    extra_headers: list[tuple[str, str]] = field(default_factory=list)
    turn: Turn | None = None
    stored: bool = False
    watcher: TurnWatcher | None = None  # set while someone watches the live feed


class ChatEndpoint:
    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self._routes: dict[str | None, Route | None] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        trace = Trace(send, self.rt.metrics, "chat.completions")
        try:
            await self._handle(scope, receive, trace)
        finally:
            trace.finish()

    async def _handle(self, scope: Scope, receive: Receive, trace: Trace) -> None:
        try:
            ex = await self.prepare(scope, receive)
        except ProxyError as exc:
            trace.fields["error"] = exc.code
            await send_error(trace.send, exc)
            return
        except ClientGone:
            return
        trace.route = ex.route.name
        trace.fields.update(
            model=ex.payload.get("model"),
            conversation=ex.key.conversation,
            stream=ex.stream,
            tokens_effective=ex.plan.effective,
            tokens_raw=ex.plan.raw,
        )
        state = _Progress()
        task = asyncio.current_task()
        assert task is not None
        # One helper task per request watches for the client leaving; it
        # cancels this task (which closes the upstream request at once).
        watch = asyncio.ensure_future(_watch_disconnect(receive, task, state))
        try:
            await self.forward(ex, trace, state)
        except asyncio.CancelledError:
            if not (state.client_gone or self.rt.cut):
                raise
            # the client left, or a shutdown's grace period ended: the work
            # below (storing the cut turn) goes on
            task.uncancel()
            if state.client_gone:
                trace.outcome = "client_gone"
            else:
                await _cut_short(trace, state)
        finally:
            watch.cancel()
        if not ex.stored:
            await self._store(ex, state.turn())
        if ex.turn is not None:
            trace.fields.update(
                reasoning_blocks=len(ex.turn.thinking),
                complete=ex.turn.complete,
                persisted=ex.turn.persisted,
                finish_reason=ex.turn.finish_reason,
            )
            if self.rt.config.server.log_bodies:
                log.info("response", extra={"body": truncate(_turn_summary(ex.turn))})

    # -- before the upstream -------------------------------------------------------

    async def prepare(self, scope: Scope, receive: Receive) -> Exchange:
        rt = self.rt
        config = rt.config
        headers = request_headers(scope, config.limits.max_header_bytes)
        authorization = header(headers, "authorization")
        if config.server.require_auth and not authorization:
            raise Unauthorized("This proxy requires an API key (Authorization: Bearer ...).")
        from_headers = header_overrides(headers)
        conversation = request_conversation_id(headers)
        profile = await self._profile(request_profile(headers))
        payload = parse_json_object(await read_body(receive, config.limits.max_body_bytes))
        messages = payload.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest(
                "messages must be a non-empty array.", param="messages", code="invalid_messages"
            )
        model = payload.get("model")
        route = self._route_for(model if isinstance(model, str) else None)
        if route is None:
            raise NotFound(
                "No route of this proxy serves that model.", param="model", code="model_not_found"
            )
        settings = resolve(config.defaults, route.reasoning, profile, from_headers)
        key = ConversationKey(
            rt.tenant(authorization), conversation or auto_conversation_id(messages)
        )
        assistants = read_assistants(messages, route.tags)
        try:
            stored = await find_stored(rt.store, key, conversation is not None, assistants)
        except StoreFailure as exc:
            rt.store_call_failed("lookup", exc)
            stored = {}
        plan = plan_egress(
            messages,
            payload.get("tools"),
            assistants,
            known_reasoning(assistants, stored),
            dialect=route.dialect,
            include=settings.include_in_context,
            strip=settings.strip_from_context,
            native_format=settings.format == "native",
            context_limit=route.context_limit,
            threshold=route.compression_threshold,
            count=rt.count,
        )
        self._count_egress(route, plan)
        payload["messages"] = plan.result.messages
        apply_params(payload, request_params(route.dialect, settings), frozenset(from_headers))
        if config.server.log_bodies:
            log.info("request", extra={"body": truncate(payload)})
        extra = [
            ("x-context-tokens-effective", str(plan.effective)),
            ("x-context-tokens-raw", str(plan.raw)),
            ("x-conversation-id", key.conversation),
        ]
        if route.context_limit:
            extra.append(("x-context-limit", str(route.context_limit)))
        if plan.compressed:
            extra.append(("x-reasoning-compressed", plan.compressed))
        return Exchange(
            route=route,
            settings=settings,
            key=key,
            payload=payload,
            plan=plan,
            stream=payload.get("stream") is True,
            upstream_headers=_upstream_headers(headers, route, authorization),
            extra_headers=extra,
        )

    def _route_for(self, model: str | None) -> Route | None:
        """Routes by model name, remembered (the globs are matched once per name)."""
        try:
            return self._routes[model]
        except KeyError:
            route = self.rt.config.route_for(model)
            if len(self._routes) < 4096:
                self._routes[model] = route
            return route

    def _count_egress(self, route: Route, plan: EgressPlan) -> None:
        metrics = self.rt.metrics
        if plan.result.reinjected:
            metrics.child(metrics.reinjected, route.dialect.name).inc(plan.result.reinjected)
        if plan.result.stripped:
            metrics.child(metrics.stripped, route.dialect.name).inc(plan.result.stripped)
        if plan.compressed:
            metrics.child(metrics.compressions, plan.compressed).inc()

    async def _profile(self, name: str | None) -> dict[str, Any] | None:
        if name is None:
            return None
        profiles = self.rt.config.profiles
        if name in profiles:
            return dict(profiles[name])
        try:
            stored = await self.rt.store.get_profile(name)
        except StoreFailure as exc:
            self.rt.store_call_failed("profile", exc)
            stored = None
        if stored is None:
            raise UnknownProfile(
                f"{PROFILE_HEADER} names no profile of this proxy.", param=PROFILE_HEADER
            )
        return config_overrides(stored, "profile")

    # -- to the upstream and back ----------------------------------------------------

    async def forward(self, ex: Exchange, trace: Trace, state: _Progress) -> None:
        rt = self.rt
        options = NormalizeOptions(
            tags=ex.route.tags,
            implicit_open_tag=ex.route.implicit_open_tag and ex.settings.enabled,
            include_in_response=ex.settings.include_in_response,
            max_line_bytes=rt.config.limits.max_sse_line_bytes,
            max_reasoning_chars=rt.config.limits.max_reasoning_bytes,
        )
        body = orjson.dumps(ex.payload)
        trace.upstream_started()
        try:
            async with rt.upstream.request(
                ex.route, "POST", "/chat/completions", ex.upstream_headers, body
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
                    await self._stream(ex, response, options, trace, state)
                else:
                    await self._whole(ex, response, options, trace, state)
        except ProxyError as exc:
            trace.upstream_error = trace.upstream_error or _error_kind(exc)
            trace.fields["error"] = exc.code
            state.complete = True
            if not state.started:
                await send_error(trace.send, exc)
            else:
                await trace.send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _stream(
        self,
        ex: Exchange,
        response: Response,
        options: NormalizeOptions,
        trace: Trace,
        state: _Progress,
    ) -> None:
        send: Send = trace.send
        normalizer = state.normalizer = StreamNormalizer(options)
        if self.rt.live.active:
            normalizer.tap = []
            self._watch(ex)
        mask = self.rt.key_mask
        masking = mask.stream() if mask is not None else None
        read = response.read
        feed = normalizer.feed
        watcher = ex.watcher
        first = True
        # Until the first data event the status is still open: comments before
        # it are held with it (for at most the idle timeout), so that an error
        # as the first event can still be answered with a real status.
        held: list[bytes] | None = []
        hold_until = time.monotonic() + ex.route.idle_timeout
        try:
            with upstream_read_errors():
                while True:
                    data = await read()
                    if first:
                        trace.upstream_first_byte()
                        first = False
                    if not data:
                        out = normalizer.finish()
                        break
                    out = feed(data)
                    if watcher is not None and normalizer.tap:
                        watcher.deltas(normalizer.tap)
                    if normalizer.state != OPEN:
                        break  # [DONE], or a failure: `out` ends the stream
                    if held is not None:
                        if normalizer.first_error is not None:
                            break
                        if not normalizer.seen_data and time.monotonic() < hold_until:
                            held.append(out)
                            continue
                        out = b"".join(held) + out
                        held = None
                        await self._start_stream(ex, response, trace, state)
                    if out:
                        if masking is not None:
                            out = masking.feed(out)
                        await send({"type": "http.response.body", "body": out, "more_body": True})
                        send = trace.inner  # the trace has seen the first byte
        except UpstreamReadError as exc:
            out = normalizer.abort(_read_failure(exc))
        if normalizer.tap and ex.watcher is not None:
            ex.watcher.deltas(normalizer.tap)
        failure = normalizer.failure
        trace.outcome = "complete" if normalizer.state == DONE else "failed"
        if failure is not None:
            trace.upstream_error = _FAILURE_KIND.get(failure.code, "malformed")
        if held is not None and normalizer.state != DONE:
            # nothing was sent yet: a real status, not a 200 and an error event
            await self._early_failure(ex, response, trace, state)
            return
        await self._store(ex, normalizer.turn())
        state.complete = True
        if held is not None:
            out = b"".join(held) + out
            await self._start_stream(ex, response, trace, state)
        if masking is not None:
            out = masking.feed(out) + masking.flush()
        await send({"type": "http.response.body", "body": out, "more_body": False})
        if normalizer.state == DONE:
            await Upstream.drain(response, 1.0)

    async def _start_stream(
        self, ex: Exchange, response: Response, trace: Trace, state: _Progress
    ) -> None:
        headers = [
            (k, v)
            for k, v in response_headers(response)
            if k.lower() not in ("cache-control", "x-accel-buffering")
        ]
        if self.rt.key_mask is not None:
            headers = self.rt.key_mask.headers(headers)
        headers += [("cache-control", "no-cache"), ("x-accel-buffering", "no"), *ex.extra_headers]
        await trace.send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": encode_headers(headers),
            }
        )
        state.started = True

    async def _early_failure(
        self, ex: Exchange, response: Response, trace: Trace, state: _Progress
    ) -> None:
        """A stream that failed before its first data event: its first event
        was an error object (its own status, else 502), or the upstream broke,
        went quiet or closed (502, 504 for the idle timeout)."""
        normalizer = state.normalizer
        assert normalizer is not None
        if normalizer.first_error is not None:
            trace.upstream_error = "status"
            status, body = upstream_error_body(normalizer.first_error)
            ex.stored = True  # an error answer, as for a non-streamed one: no turn
            trace.fields["error"] = "upstream_error_event"
            headers = [
                (k, v)
                for k, v in response_headers(response)
                if k.lower() not in ("content-type", "cache-control", "x-accel-buffering")
            ]
        else:
            failure = normalizer.failure
            assert failure is not None
            status = 504 if failure.code == "upstream_timeout" else 502
            body = error_body(failure)
            headers = []
            await self._store(ex, normalizer.turn())
            trace.fields["error"] = failure.code
        mask = self.rt.key_mask
        if mask is not None:
            headers, body = mask.headers(headers), mask.data(body)
        state.complete = True
        state.started = True
        headers = [("content-type", "application/json"), *headers, *ex.extra_headers]
        await send_bytes(trace.send, status, body, encode_headers(headers))

    async def _whole(
        self,
        ex: Exchange,
        response: Response,
        options: NormalizeOptions,
        trace: Trace,
        state: _Progress,
    ) -> None:
        trace.upstream_first_byte()
        try:
            body = await Upstream.read_all(response, self.rt.config.limits.max_response_bytes)
        except UpstreamReadError as exc:
            raise _read_failure_error(exc) from None
        headers = response_headers(response)
        if response.status < 300:
            try:
                payload = orjson.loads(body)
            except orjson.JSONDecodeError:
                payload = None
                trace.upstream_error = "malformed"
            if isinstance(payload, dict):
                changed, turn = normalize_completion(payload, options)
                if turn is not None:
                    if self.rt.live.active:
                        self._watch(ex)
                        self._announce_whole(ex, turn)
                    await self._store(ex, turn)
                if changed:
                    body = orjson.dumps(payload)
                headers = [(k, v) for k, v in headers if k.lower() != "content-type"]
                headers.insert(0, ("content-type", "application/json"))
            headers += ex.extra_headers
        mask = self.rt.key_mask
        if mask is not None:  # an upstream may quote the route's key back (a 401)
            headers, body = mask.headers(headers), mask.data(body)
        state.complete = True
        state.started = True
        await send_bytes(trace.send, response.status, body, encode_headers(headers))

    async def _store(self, ex: Exchange, turn: Turn | None) -> None:
        """Store the turn once. Shielded: a client leaving while the store
        writes does not cut the write short."""
        if ex.stored or turn is None:
            return
        ex.stored = True
        context = {"effective": ex.plan.effective, "raw": ex.plan.raw}
        record = self.rt.record(ex.key, turn, ex.route, extra={**turn.extra, "context": context})
        # shielded where the store does I/O: a client leaving mid-write does not cut it
        stored = await (record if self.rt.store_in_process else asyncio.shield(record))
        ex.turn = stored
        if ex.watcher is not None:
            ex.watcher.end(stored.complete, stored.finish_reason, stored.persisted)

    # -- the live feed (only while someone watches) -------------------------------------

    def _watch(self, ex: Exchange) -> None:
        ex.watcher = TurnWatcher(self.rt.live, ex.key.tenant, ex.key.conversation)
        ex.watcher.start(
            ex.payload.get("model"),
            ex.route.name,
            {"effective": ex.plan.effective, "raw": ex.plan.raw},
        )

    def _announce_whole(self, ex: Exchange, turn: Turn) -> None:
        assert ex.watcher is not None
        tap: list[tuple[str, str]] = []
        if ex.settings.include_in_response:
            tap += [("reasoning", b.thought) for b in turn.thinking if not b.is_hidden]
        if turn.content:
            tap.append(("content", turn.content))
        ex.watcher.deltas(tap)


class _Progress:
    """How far the response got (shared between the work and the watcher)."""

    __slots__ = ("client_gone", "complete", "normalizer", "started")

    def __init__(self) -> None:
        self.started = False
        self.complete = False
        self.client_gone = False
        self.normalizer: StreamNormalizer | None = None

    def turn(self) -> Turn | None:
        return self.normalizer.turn() if self.normalizer is not None else None


async def _cut_short(trace: Trace, state: _Progress) -> None:
    """The server's shutdown grace period ended before the response did: a
    started stream ends with an error event (no [DONE]), a response not yet
    started is a 503. The normalizer's turn then says `complete: false`."""
    trace.outcome = "shutdown"
    if state.complete:
        return  # the response had ended; only the work after it was cut
    state.complete = True  # the disconnect watch must not cancel what follows
    error = ServerShuttingDown("The server is shutting down; the response was cut short.")
    trace.fields["error"] = "server_shutting_down"
    out = b""
    if state.normalizer is not None:
        failure = StreamFailure("server_shutting_down", error.message, error.type)
        out = state.normalizer.abort(failure)
    if state.started:
        await trace.send({"type": "http.response.body", "body": out, "more_body": False})
    else:
        await send_error(trace.send, error)


def _error_kind(exc: ProxyError) -> str:
    if isinstance(exc, UpstreamTimeout):
        return "timeout"
    if exc.code == "upstream_unreachable":
        return "connect"
    if exc.code in ("upstream_redirect",):
        return "status"
    if exc.code == "upstream_busy":
        return "busy"
    if exc.code == "upstream_disconnected":
        return "disconnected"
    return "malformed"


def _read_failure(exc: UpstreamReadError) -> StreamFailure:
    if exc.kind == "timeout":
        return StreamFailure(
            "upstream_timeout",
            "The upstream sent nothing within the idle timeout.",
            "timeout_error",
        )
    return StreamFailure("upstream_disconnected", "The upstream connection broke mid-stream.")


def _read_failure_error(exc: UpstreamReadError) -> ProxyError:
    if exc.kind == "timeout":
        return UpstreamTimeout("The upstream sent nothing within the idle timeout.")
    return UpstreamError(
        "The upstream connection broke before the response was complete.",
        code="upstream_disconnected",
    )


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


def _upstream_headers(
    headers: list[tuple[str, str]], route: Route, authorization: str | None
) -> list[tuple[str, str]]:
    """The client's headers minus hop-by-hop ones and the proxy's own; the
    route's key replaces the client's credential when the route has one."""
    out = [
        (k, v)
        for k, v in strip_hop_by_hop(headers)
        if not k.startswith(_OWN_HEADERS) and k not in ("authorization", "content-type")
    ]
    out.append(("content-type", "application/json"))
    if route.api_key is not None:
        out.append(("authorization", f"Bearer {route.api_key.get()}"))
    elif authorization:
        out.append(("authorization", authorization))
    out.extend(route.headers)
    return out


async def _watch_disconnect(receive: Receive, task: asyncio.Task[Any], state: _Progress) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
    if not state.complete:
        state.client_gone = True
        task.cancel()
