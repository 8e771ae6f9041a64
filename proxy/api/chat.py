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
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp
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
from proxy.config import Route
from proxy.errors import (
    BadRequest,
    NotFound,
    ProxyError,
    Unauthorized,
    UnknownProfile,
    UpstreamError,
    UpstreamTimeout,
)
from proxy.history.context import EgressPlan, plan_egress
from proxy.history.dialects import apply_params, request_params
from proxy.history.egress import find_stored, known_reasoning, read_assistants
from proxy.history.keys import ConversationKey, auto_conversation_id
from proxy.reasoning.blocks import Turn
from proxy.reasoning.normalizer import (
    DONE,
    NormalizeOptions,
    StreamFailure,
    StreamNormalizer,
    normalize_completion,
)
from proxy.runtime import Runtime
from proxy.settings import (
    CONVERSATION_HEADER,
    PROFILE_HEADER,
    ReasoningSettings,
    config_overrides,
    header_overrides,
    parse_conversation_id,
    resolve,
)
from proxy.stores.base import StoreFailure
from proxy.upstream import Upstream, UpstreamReadError, response_headers, strip_hop_by_hop

log = logging.getLogger("proxy.chat")

# request headers that are the proxy's own and never go upstream
_OWN_HEADERS = ("x-reasoning-", "x-conversation-id")


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
    live_id: str | None = None  # set when the live feed announced this turn


class ChatEndpoint:
    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            exchange = await self.prepare(scope, receive)
        except ProxyError as exc:
            await send_error(send, exc)
            return
        except ClientGone:
            return
        state = _Progress()
        work = asyncio.ensure_future(self.forward(exchange, send, state))
        watch = asyncio.ensure_future(_wait_disconnect(receive))
        try:
            await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
            if not work.done() and not state.complete:
                # the client left: stop reading the upstream now (closes its connection)
                work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
        finally:
            watch.cancel()
            if not work.done():
                work.cancel()
        if not exchange.stored:
            await self._store(exchange, state.turn())

    # -- before the upstream -------------------------------------------------------

    async def prepare(self, scope: Scope, receive: Receive) -> Exchange:
        rt = self.rt
        config = rt.config
        headers = request_headers(scope, config.limits.max_header_bytes)
        authorization = header(headers, "authorization")
        if config.server.require_auth and not authorization:
            raise Unauthorized("This proxy requires an API key (Authorization: Bearer ...).")
        from_headers = header_overrides(headers)
        conversation = parse_conversation_id(header(headers, CONVERSATION_HEADER.lower()))
        profile = await self._profile(header(headers, PROFILE_HEADER.lower()))
        payload = parse_json_object(await read_body(receive, config.limits.max_body_bytes))
        messages = payload.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest(
                "messages must be a non-empty array.", param="messages", code="invalid_messages"
            )
        model = payload.get("model")
        route = config.route_for(model if isinstance(model, str) else None)
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
        payload["messages"] = plan.result.messages
        apply_params(payload, request_params(route.dialect, settings), frozenset(from_headers))
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

    async def forward(self, ex: Exchange, send: Send, state: _Progress) -> None:
        rt = self.rt
        options = NormalizeOptions(
            tags=ex.route.tags,
            implicit_open_tag=ex.route.implicit_open_tag and ex.settings.enabled,
            include_in_response=ex.settings.include_in_response,
            max_line_bytes=rt.config.limits.max_sse_line_bytes,
            max_reasoning_chars=rt.config.limits.max_reasoning_bytes,
        )
        body = orjson.dumps(ex.payload)
        try:
            async with rt.upstream.request(
                ex.route, "POST", "/chat/completions", ex.upstream_headers, body
            ) as response:
                if 300 <= response.status < 400:
                    raise UpstreamError(
                        "The upstream answered with a redirect; redirects are not followed.",
                        code="upstream_redirect",
                    )
                content_type = response.headers.get("content-type", "")
                if response.status < 300 and content_type.startswith("text/event-stream"):
                    await self._stream(ex, response, options, send, state)
                else:
                    await self._whole(ex, response, options, send, state)
        except ProxyError as exc:
            if not state.started:
                state.complete = True
                await send_error(send, exc)
            else:
                state.complete = True
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _stream(
        self,
        ex: Exchange,
        response: aiohttp.ClientResponse,
        options: NormalizeOptions,
        send: Send,
        state: _Progress,
    ) -> None:
        normalizer = state.normalizer = StreamNormalizer(options)
        watched = self.rt.live.active
        if watched:
            normalizer.tap = []
            self._publish_start(ex)
        headers = [
            (k, v)
            for k, v in response_headers(response)
            if k.lower() not in ("cache-control", "x-accel-buffering")
        ]
        headers += [("cache-control", "no-cache"), ("x-accel-buffering", "no"), *ex.extra_headers]
        await send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": encode_headers(headers),
            }
        )
        state.started = True
        try:
            async for data in Upstream.chunks(response):
                out = normalizer.feed(data)
                if normalizer.tap:
                    self._publish_tap(ex, normalizer.tap)
                if normalizer.state == DONE:
                    await self._finish_stream(ex, normalizer, out, send, state)
                    return
                if out:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
                if normalizer.state != "open":
                    break
            out = normalizer.finish()
        except UpstreamReadError as exc:
            out = normalizer.abort(_read_failure(exc))
        await self._finish_stream(ex, normalizer, out, send, state)

    async def _finish_stream(
        self,
        ex: Exchange,
        normalizer: StreamNormalizer,
        out: bytes,
        send: Send,
        state: _Progress,
    ) -> None:
        if normalizer.tap:
            self._publish_tap(ex, normalizer.tap)
        await self._store(ex, normalizer.turn())
        state.complete = True
        await send({"type": "http.response.body", "body": out, "more_body": False})

    async def _whole(
        self,
        ex: Exchange,
        response: aiohttp.ClientResponse,
        options: NormalizeOptions,
        send: Send,
        state: _Progress,
    ) -> None:
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
            if isinstance(payload, dict):
                changed, turn = normalize_completion(payload, options)
                if turn is not None:
                    if self.rt.live.active:
                        self._publish_whole(ex, turn)
                    await self._store(ex, turn)
                if changed:
                    body = orjson.dumps(payload)
                headers = [(k, v) for k, v in headers if k.lower() != "content-type"]
                headers.insert(0, ("content-type", "application/json"))
            headers += ex.extra_headers
        state.complete = True
        state.started = True
        await send_bytes(send, response.status, body, encode_headers(headers))

    async def _store(self, ex: Exchange, turn: Turn | None) -> None:
        """Store the turn once. Shielded: a client leaving while the store
        writes does not cut the write short."""
        if ex.stored or turn is None:
            return
        ex.stored = True
        context = {"effective": ex.plan.effective, "raw": ex.plan.raw}
        turn = replace(turn, extra={**turn.extra, "context": context})
        ex.turn = await asyncio.shield(self.rt.record(ex.key, turn, ex.route))
        if ex.live_id is not None:
            self.rt.live.publish(
                ex.key.tenant,
                {
                    "type": "turn_end",
                    "conversation": ex.key.conversation,
                    "turnId": ex.live_id,
                    "complete": ex.turn.complete,
                    "finishReason": ex.turn.finish_reason,
                    "persisted": ex.turn.persisted,
                },
            )

    # -- the live feed (only while someone watches) -------------------------------------

    def _publish_start(self, ex: Exchange) -> None:
        ex.live_id = uuid.uuid4().hex[:12]
        self.rt.live.publish(
            ex.key.tenant,
            {
                "type": "turn_start",
                "conversation": ex.key.conversation,
                "turnId": ex.live_id,
                "model": ex.payload.get("model"),
                "route": ex.route.name,
                "created": time.time(),
                "context": {"effective": ex.plan.effective, "raw": ex.plan.raw},
            },
        )

    def _publish_tap(self, ex: Exchange, tap: list[tuple[str, str]]) -> None:
        if ex.live_id is not None:
            runs: list[list[str]] = []
            for kind, text in tap:
                if runs and runs[-1][0] == kind:
                    runs[-1][1] += text
                else:
                    runs.append([kind, text])
            for kind, text in runs:
                self.rt.live.publish(
                    ex.key.tenant,
                    {
                        "type": "delta",
                        "conversation": ex.key.conversation,
                        "turnId": ex.live_id,
                        "kind": kind,
                        "text": text,
                    },
                )
        tap.clear()

    def _publish_whole(self, ex: Exchange, turn: Turn) -> None:
        self._publish_start(ex)
        tap: list[tuple[str, str]] = []
        if ex.settings.include_in_response:
            tap += [("reasoning", b.thought) for b in turn.thinking if not b.is_hidden]
        if turn.content:
            tap.append(("content", turn.content))
        self._publish_tap(ex, tap)


class _Progress:
    """How far the response got (shared between the work and the watcher)."""

    __slots__ = ("complete", "normalizer", "started")

    def __init__(self) -> None:
        self.started = False
        self.complete = False
        self.normalizer: StreamNormalizer | None = None

    def turn(self) -> Turn | None:
        return self.normalizer.turn() if self.normalizer is not None else None


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


async def _wait_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
