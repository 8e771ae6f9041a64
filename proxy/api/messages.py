"""POST /v1/messages and /v1/messages/count_tokens: the Anthropic Messages
front door (Claude Code, Anthropic SDK agents).

To a Chat upstream (route `api: chat`, the default) the request is
translated (`proxy.doors.messages.request`): its `thinking` and
`output_config.effort` become the reasoning settings (as X-Reasoning-*
headers, unless the client sent those itself), thinking blocks coming back
are opened from their sealed signatures, and the chat payload is planned
like any chat completion (`Planner.chat`: route, tenant, history); `top_k`
goes upstream unless the dialect refuses it (`Dialect.top_k`: groq), where
it is dropped and named. The answer goes back through `MessagesEncoder`.
To a Messages upstream (`api: messages`) the request is planned the same
way, then its own body passes through with the settings applied and
signatures opened (`proxy.api.messages_native`). Any other upstream API is a 400
`unsupported_upstream_api`.

Credentials: `x-api-key` is the client's key exactly as `Authorization` is
(one key is one tenant, whichever header carries it); it reaches a Chat
upstream as `Authorization: Bearer`, never when the route has its own key.
`anthropic-*` headers never reach a Chat upstream. Errors are Anthropic's
shape, `{"type": "error", "error": {"type", "message"}}`, with the status.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import orjson

from proxy.api.asgi import (
    ClientGone,
    Receive,
    Scope,
    Send,
    encode_headers,
    header_list,
    read_plain_body,
    request_headers,
    send_bytes,
)
from proxy.api.door import Door
from proxy.api.encoder import Encoder
from proxy.api.messages_native import native_headers
from proxy.api.native import (
    NO_COUNT_MEMO,
    Answer,
    count_chat,
    count_restored,
    forward_native,
    upstream_count,
)
from proxy.api.relay import Progress
from proxy.api.trace import Trace, TracedEndpoint
from proxy.doors.messages.native import (
    NativeReader,
    counted_payload,
    native_params,
    native_request,
    stored_thinking,
    unsigned_tool_turns,
)
from proxy.doors.messages.request import Translation, translate
from proxy.doors.messages.shapes import (
    anthropic_error,
    error_body,
)
from proxy.doors.messages.stream import MessagesEncoder
from proxy.errors import BadRequest, ProxyError
from proxy.exchange import Exchange, Planner, parse_json_object
from proxy.history.context import EgressPlan
from proxy.history.egress import find_stored
from proxy.history.explain import NativeTurn, native_notes, turn_input
from proxy.runtime import Runtime
from proxy.sealing import Sealed
from proxy.settings import header_overrides, request_conversation_id
from proxy.stores.base import StoreFailure

log = logging.getLogger("proxy.messages")

# the planner's response headers that hold for a Messages upstream too (its
# context tokens are counted again, on the body sent)
NATIVE_EXTRA = frozenset(("x-conversation-id", "x-context-limit"))
# the name a Messages upstream's requests go under in X-Reasoning-Dialect,
# the metrics and the inspector's notes: their reasoning is written as
# Messages' own `thinking`, no chat dialect's
NATIVE_DIALECT = "messages"
DROPPED_FIELDS = "x-proxy-dropped-fields"
DROPPED_TOOLS = "x-proxy-dropped-tools"


async def send_anthropic_error(send: Send, exc: ProxyError) -> None:
    extra = [(k.lower().encode(), v.encode("latin-1")) for k, v in exc.headers.items()]
    json = (b"content-type", b"application/json")
    await send_bytes(send, exc.status, anthropic_error(exc), [json, *extra])


def client_credential(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The headers with `x-api-key` as `authorization: Bearer <key>` (when
    the client sent no Authorization), so one key is one tenant whichever
    header carries it."""
    key = next((v for k, v in headers if k == "x-api-key"), None)
    out = [(k, v) for k, v in headers if k != "x-api-key"]
    if key and not any(k == "authorization" for k, _ in out):
        out.append(("authorization", f"Bearer {key}"))
    return out


def unsupported_api(api: str) -> BadRequest:
    return BadRequest(
        f"This route's upstream speaks the {api} API; the Messages door can reach "
        "Chat Completions upstreams and Messages upstreams only.",
        param="model",
        code="unsupported_upstream_api",
    )


class MessagesEndpoint(Door):
    endpoint = "messages"

    def __init__(self, runtime: Runtime, planner: Planner | None = None) -> None:
        super().__init__(runtime, planner)

    async def send_error(self, send: Send, exc: ProxyError) -> None:
        await send_anthropic_error(send, exc)

    async def plan(
        self, headers: list[tuple[str, str]], receive: Receive
    ) -> tuple[Exchange, Encoder | None]:
        rt = self.rt
        original = headers
        headers = client_credential(headers)
        authorization = self.planner.authorize(headers)
        header_overrides(headers)  # a bad X-Reasoning-* header costs no upload
        body = parse_json_object(
            await read_plain_body(receive, headers, rt.config.limits.max_body_bytes)
        )
        model = body.get("model")
        route = self.planner.route(model if isinstance(model, str) else None)
        if route.api not in ("chat", "messages"):
            raise unsupported_api(route.api)
        tenant = rt.tenant(authorization)
        native = route.api == "messages"
        # a Messages upstream's request is opened again below, and counted there
        t = translate(body, self._opener(tenant, count=not native))
        payload = _bytes(orjson.dumps(t.payload))
        # (to a Messages upstream the chat plan is not what is sent: what is
        # sent is counted below, and the metrics of what is sent move there)
        ex = await self.planner.chat(chat_headers(headers, t), payload, counting=native)
        if native:
            if rt.config.ui.show_prompts:
                ex.request_input = turn_input(t.payload["messages"])
            return await self._native(ex, body, original, headers), None
        ex.name_output_limit()
        if "top_k" in ex.payload and not ex.dialect.top_k:
            del ex.payload["top_k"]  # no Chat parameter: a strict upstream refuses it
            t.dropped_fields.append("top_k")
        encoder = MessagesEncoder(
            model=t.payload["model"],
            seal=self._sealer(ex.key.tenant),
            input_tokens=ex.plan.effective,
            show_thinking=t.show_thinking,
            stop_sequences=t.stop_sequences,
            headers=dropped_headers(t, headers),
            max_line_bytes=rt.config.limits.max_sse_line_bytes,
        )
        return ex, encoder

    async def _native(
        self,
        ex: Exchange,
        body: dict[str, Any],
        original: list[tuple[str, str]],
        headers: list[tuple[str, str]],
        *,
        counting: bool = False,
    ) -> Exchange:
        """The exchange, planned like any other, turned to a Messages upstream:
        the client's own body (signatures opened, the reasoning settings
        written as Messages parameters) and headers; its context tokens are
        those of that body, and the turns whose stored thinking was restored
        or not are counted (`reinjected`, `stripped`, dialect `messages`).
        `counting`: for a token count (nothing is counted in the metrics)."""
        params = native_params(ex.settings, header_overrides(headers))
        opener = self._opener(ex.key.tenant, count=not counting)
        ex.payload, turns = native_request(body, opener, params)
        settings = ex.settings
        if settings.include_in_context is not False:
            scoped = request_conversation_id(headers) is not None
            await self._restore_dropped(ex, scoped, turns)
        # what went upstream of each earlier turn's thinking, and why (the
        # chat planning's notes speak of a chat dialect, which this is not)
        notes = native_notes(
            NATIVE_DIALECT,
            list(turns.values()),
            include=settings.include_in_context,
            strip=settings.strip_from_context,
        )
        plan = ex.plan
        effective = await count_chat(self.rt, counted_payload(ex.payload))
        # raw: with every known reasoning, the chat plan's (what the proxy
        # knows of the request's reasoning), never less than what is sent
        raw = max(plan.raw, effective)
        ex.plan = EgressPlan(plan.result, effective, raw, None, notes)
        if not counting:
            count_restored(self.rt.metrics, NATIVE_DIALECT, turns.values())
        ex.stream = ex.payload.get("stream") is True
        ex.upstream_headers = native_headers(original, ex.route, self.rt.config.admin_token)
        # what the chat planning said about a chat dialect does not apply
        kept = [(k, v) for k, v in ex.extra_headers if k in NATIVE_EXTRA]
        ex.extra_headers = [
            ("x-context-tokens-effective", str(effective)),
            ("x-context-tokens-raw", str(raw)),
            *kept,
            ("x-reasoning-dialect", NATIVE_DIALECT),
        ]
        return ex

    async def _restore_dropped(
        self, ex: Exchange, scoped: bool, turns: dict[int, NativeTurn]
    ) -> None:
        """Assistant tool-use turns the client sent without their thinking get
        it back from the store, with the upstream's signature (a Messages
        upstream wants the thinking of a tool-use turn), from turns made
        through a route to this same upstream (a signature is valid only
        where it was made); `turns` note it."""
        messages = ex.payload.get("messages")
        if not isinstance(messages, list):
            return
        wanted = unsigned_tool_turns(messages)
        if not wanted:
            return
        upstream = ex.route.upstream
        same = {
            r.name for r in self.rt.config.routes if r.api == "messages" and r.upstream == upstream
        }
        try:
            found = await find_stored(self.rt.store, ex.key, scoped, wanted)
        except StoreFailure as exc:
            self.rt.health.failed("lookup", exc)
            return
        for position, turn in found.items():
            # another upstream's signatures are no use here
            blocks = stored_thinking(turn) if turn.route in same else []
            note = turns.get(position)
            if note is not None:
                note.stored = True
                note.restored = len(blocks)
            if blocks:
                message = messages[position]
                messages[position] = {**message, "content": [*blocks, *message["content"]]}

    async def forward(self, ex: Exchange, trace: Trace, state: Progress) -> None:
        if ex.route.api == "messages":
            reader = NativeReader(
                self._sealer(ex.key.tenant),
                self.rt.config.limits.max_sse_line_bytes,
                mask=self.rt.key_mask,
                hidden=not ex.settings.include_in_response or ex.settings.output == "none",
            )
            await forward_native(self, ex, trace, state, reader, "/messages", error_body)
        else:
            if isinstance(state.encoder, MessagesEncoder):
                trace.dropped(state.encoder.headers)
            await super().forward(ex, trace, state)

    def _opener(self, tenant: str, *, count: bool = True) -> Callable[[Any], Sealed | None]:
        """Opens thinking signatures; one that does not open (forged, another
        tenant's or another secret's) is logged and counted, and its block
        left out. `count`: False for a second look at the same request."""
        sealer = self.rt.sealer
        metrics = self.rt.metrics
        # the counter the front doors share (reasoning_proxy_sealed_rejected)
        rejected = getattr(metrics, "sealed_rejected", None) if count else None

        def open_signature(token: Any) -> Sealed | None:
            sealed = sealer.open(tenant, token)
            if sealed is None and count:
                log.warning(
                    "a thinking block's signature is not this proxy's; the block was dropped"
                )
                if rejected is not None:
                    metrics.child(rejected, "messages").inc()
            return sealed

        return open_signature

    def _sealer(self, tenant: str) -> Callable[[str, dict[str, Any]], str]:
        sealer = self.rt.sealer

        def seal(text: str, artefacts: dict[str, Any]) -> str:
            return sealer.seal(tenant, Sealed(text, artefacts))

        return seal


def chat_headers(headers: list[tuple[str, str]], t: Translation) -> list[tuple[str, str]]:
    """The headers a chat upstream's exchange is planned with: no `anthropic-*`
    ones, and the reasoning settings the body asks for unless the client
    set them itself."""
    out = [(k, v) for k, v in headers if not k.startswith("anthropic-")]
    given = {k for k, _ in out}
    out += [(k, v) for k, v in t.settings if k not in given]
    return out


def dropped_headers(t: Translation, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    fields = list(t.dropped_fields)
    if any(k == "anthropic-beta" for k, _ in headers):
        fields.append("anthropic-beta")
    out = []
    if fields:
        out.append((DROPPED_FIELDS, header_list(fields)))
    if t.dropped_tools:
        out.append((DROPPED_TOOLS, header_list(t.dropped_tools)))
    return out


# what count_tokens takes of a Messages request (its create-only fields, such
# as max_tokens and stream, are refused there)
COUNT_FIELDS = frozenset(
    (
        "model",
        "messages",
        "system",
        "thinking",
        "tools",
        "tool_choice",
        "output_config",
        "cache_control",
        "speed",
        "context_management",
        "mcp_servers",
    )
)
COUNT_PATH = "/messages/count_tokens"


def _counted(count: int) -> Answer:
    return 200, orjson.dumps({"input_tokens": count}), []


def _bytes(data: bytes) -> Callable[[], Any]:
    async def body() -> bytes:
        return data

    return body


class CountTokensEndpoint(TracedEndpoint):
    """POST /v1/messages/count_tokens: `{"input_tokens": N}`.

    To a chat upstream, counted with the proxy's tokenizer as the request
    would be sent: planned like a message (the route's dialect and the
    reasoning settings decide which reasoning goes back, stored reasoning
    included), the effective count of X-Context-Tokens-Effective; nothing
    goes upstream. To a Messages upstream, the upstream counts: the request
    goes to its `/messages/count_tokens` as the door would send it to
    `/messages` (signatures opened, stored thinking restored, the settings
    applied), with only the fields that endpoint takes; an upstream without
    that endpoint (404, 405, 501, or a 2xx without a count) gets the proxy's
    own count instead, and for NO_COUNT_MEMO seconds after that the route's
    requests are counted by the proxy without asking."""

    endpoint = "messages.count_tokens"

    def __init__(self, runtime: Runtime, door: MessagesEndpoint) -> None:
        self.rt = runtime
        self.metrics = runtime.metrics
        self.door = door
        self.planner = door.planner
        # route name -> until when (monotonic) its upstream is known to count nothing
        self._uncounted: dict[str, float] = {}

    async def _handle(self, scope: Scope, receive: Receive, trace: Trace) -> None:
        rt = self.rt
        try:
            original = request_headers(scope, rt.config.limits.max_header_bytes)
            headers = client_credential(original)
            authorization = self.planner.authorize(headers)
            body = parse_json_object(
                await read_plain_body(receive, headers, rt.config.limits.max_body_bytes)
            )
            model = body.get("model")
            route = self.planner.route(model if isinstance(model, str) else None)
            trace.route = route.name
            if route.api not in ("chat", "messages"):
                raise unsupported_api(route.api)
            tenant = trace.tenant = rt.tenant(authorization)
            t = translate(body, lambda token: rt.sealer.open(tenant, token), counting=True)
            payload = _bytes(orjson.dumps(t.payload))
            ex = await self.planner.chat(chat_headers(headers, t), payload, counting=True)
            answer: Answer | None
            if route.api == "chat":
                answer = _counted(ex.plan.effective)
            else:
                answer = None
                ex = await self.door._native(ex, body, original, headers, counting=True)
                if self._uncounted.get(route.name, 0.0) <= time.monotonic():
                    answer = await self._upstream_count(ex, trace)
                    if answer is None:
                        self._uncounted[route.name] = time.monotonic() + NO_COUNT_MEMO
                if answer is None:  # the upstream has no count_tokens: the proxy counts
                    trace.fields["counted_by"] = "proxy"
                    answer = _counted(ex.plan.effective)
        except ProxyError as exc:
            trace.fields["error"] = exc.code
            await send_anthropic_error(trace.send, exc)
            return
        except ClientGone:
            return
        status, data, extra = answer
        mask = rt.key_mask
        if mask is not None:  # an upstream may quote the route's key back (a 401)
            extra, data = mask.headers(extra), mask.data(data)
        headers = [("content-type", "application/json"), *extra]
        await send_bytes(trace.send, status, data, encode_headers(headers))

    async def _upstream_count(self, ex: Exchange, trace: Trace) -> Answer | None:
        """The Messages upstream's own count: its answer (an error keeps its
        status, in Anthropic's shape); None when it has no count_tokens (an
        Anthropic-compatible server often lacks it: `upstream_count`)."""
        payload = {k: v for k, v in ex.payload.items() if k in COUNT_FIELDS}
        body = orjson.dumps(payload)
        answer = await upstream_count(
            self.rt, trace, ex.route, COUNT_PATH, ex.upstream_headers, body
        )
        if answer is None:
            return None
        status, data, headers = answer
        headers = [(k, v) for k, v in headers if k.lower() != "content-type"]
        return status, error_body(status, data) if status >= 300 else data, headers
