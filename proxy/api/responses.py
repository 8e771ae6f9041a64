"""POST /v1/responses, GET and DELETE /v1/responses/{id}, and GET
/v1/responses/{id}/input_items: the Responses API's front door.

A request to a route whose upstream speaks chat completions (`api: chat`,
the default) is translated (`proxy.doors.responses`): its input items, with
those of the stored responses its `previous_response_id` names first,
become chat messages (an `item_reference` is the stored item it names; a
chain ends at its first link no longer stored, and a chain in use is
written again, so it expires after its last use);
reasoning a client sends back inside an `encrypted_content` envelope is
opened (another tenant's, a forged or an unknown one is ignored, counted
and logged) and goes back in the assistant message's `reasoning_content`,
with the upstream's own artefacts, so the usual egress writes it in the
route's dialect. `reasoning.effort` is the effort control, as
`X-Reasoning-Effort` (the header wins). The planned exchange then runs the
one path, and the door's encoder turns the normalized chat output into
Responses events or a Response object.

With `store` (the API's default), the Response is kept in the store, per
tenant, before the client gets its last byte (so a client that continues
at once finds it): the Response with every reasoning item's envelope, the
request's own input items, and the id it continued. `GET` returns it (its
envelopes only with `include[]=reasoning.encrypted_content`), `DELETE`
removes it; `GET .../input_items` lists what it was made from (its chain's
items, then its own input; `proxy.doors.responses.items`); unknown and
other tenants' ids are the same 404. The turn
itself is stored like any chat turn, whatever `store` says.

Routes with `api: responses` get the request as it came, with the
reasoning settings applied (`proxy.doors.responses.native`) and the
upstream's reasoning items of function-call turns the client sent without
them restored from the store (`_restore_dropped`); a route of another API
is a 400 `unsupported_upstream_api`.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response

from proxy.api import ownership
from proxy.api.asgi import (
    JSON_TYPE,
    ClientGone,
    Message,
    Receive,
    Scope,
    encode_headers,
    header_list,
    plain_request,
    read_plain_body,
    request_headers,
    send_bytes,
    send_error,
)
from proxy.api.conversations import caller_tenant
from proxy.api.door import Door
from proxy.api.encoder import Encoder
from proxy.api.native import (
    NO_COUNT_MEMO,
    Answer,
    count_chat,
    count_restored,
    forward_native,
    upstream_count,
)
from proxy.api.passthrough import PassthroughEndpoint, upstream_suffix
from proxy.api.relay import Progress
from proxy.api.trace import Trace, TracedEndpoint
from proxy.config import Route
from proxy.doors.responses.encoder import ResponsesEncoder
from proxy.doors.responses.items import (
    chain_items,
    items_by_id,
    page,
    page_params,
    prior_items,
    references,
    resolved,
    response_of,
)
from proxy.doors.responses.native import (
    InputTurn,
    NativeResponses,
    Opens,
    counted_payload,
    input_turns,
    native_request,
    stored_reasoning,
    with_reasoning,
    without_own_items,
)
from proxy.doors.responses.objects import Echo
from proxy.doors.responses.request import (
    ENCRYPTED_INCLUDE,
    Options,
    Translation,
    read_options,
    refuse_upstream_state,
    translate,
)
from proxy.errors import BadRequest, NotFound, ProxyError
from proxy.exchange import Exchange, parse_json_object
from proxy.history.context import EgressPlan
from proxy.history.egress import find_stored
from proxy.history.explain import native_notes, turn_input
from proxy.history.service import STORE_TIMEOUT
from proxy.reasoning.blocks import Turn
from proxy.runtime import Runtime
from proxy.sealing import Sealed
from proxy.settings import SETTINGS, header_overrides, request_conversation_id
from proxy.stores.base import StoreFailure

log = logging.getLogger("proxy.responses")

RESPONSES_PATH = "/v1/responses"
INPUT_TOKENS_PATH = RESPONSES_PATH + "/input_tokens"
COMPACT_PATH = RESPONSES_PATH + "/compact"
DROPPED_FIELDS = "x-proxy-dropped-fields"
DROPPED_TOOLS = "x-proxy-dropped-tools"
EFFORT_HEADER = "x-reasoning-effort"
IGNORED_HEADER = "x-reasoning-ignored"
ENABLED_HEADER = "x-reasoning-enabled"
# a Responses effort the settings do not have -> the nearest they do
_NEAREST_EFFORT = {"xhigh": "high", "max": "high"}
# the planner's response headers that hold for a Responses upstream too (its
# context tokens are counted again, on the body sent)
NATIVE_EXTRA = frozenset(("x-conversation-id", "x-context-limit"))
# the name a Responses upstream's requests go under in X-Reasoning-Dialect,
# the metrics and the inspector's notes: their reasoning goes as the API's
# own reasoning items, no chat dialect's
NATIVE_DIALECT = "responses"
_RESPONSE_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
MISSING = "No response with that id."
# a stored record's last write (epoch seconds): a chain in use is written
# again once this is older than a tenth of the store's TTL
WRITTEN = "written"
_REFRESH_FRACTION = 0.1


class _Keep:
    """What a stored response needs besides the Response itself."""

    __slots__ = ("input", "kept", "previous", "store", "tenant")

    def __init__(self, tenant: str, options: Options, items: list[Any]) -> None:
        self.tenant = tenant
        self.store = options.store
        self.previous = options.previous_response_id
        self.input = items
        self.kept = False


class _Encoder(ResponsesEncoder):
    """The encoder, with what storing its Response needs."""

    def __init__(self, *args: Any, keep: _Keep, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.keep = keep


class ResponsesEndpoint(Door):
    endpoint = "responses"

    async def plan(
        self, headers: list[tuple[str, str]], receive: Receive
    ) -> tuple[Exchange, Encoder | None]:
        rt = self.rt
        authorization = self.planner.authorize(headers)
        header_overrides(headers)  # a bad setting costs no upload
        body = parse_json_object(
            await read_plain_body(receive, headers, rt.config.limits.max_body_bytes)
        )
        options = read_options(body)
        route = self.planner.route(options.model)
        if route.api not in ("chat", "responses"):
            raise BadRequest(
                f"This route's upstream speaks the {route.api} API; the Responses door "
                "goes to chat and Responses upstreams only.",
                param="model",
                code="unsupported_upstream_api",
            )
        tenant = rt.tenant(authorization)
        if route.api == "responses":
            return await self._native(headers, body, tenant), None
        ex, translation = await self.planned(headers, body, options, tenant)
        ex.name_output_limit()  # (max_output_tokens became max_tokens)
        if translation.dropped_fields:
            ex.extra_headers.append((DROPPED_FIELDS, header_list(translation.dropped_fields)))
        if translation.dropped_tools:
            ex.extra_headers.append((DROPPED_TOOLS, header_list(translation.dropped_tools)))

        def seal(sealed: Sealed) -> str:
            return rt.sealer.seal(tenant, sealed)

        encoder = _Encoder(
            Echo.of(body, options),
            translation.names,
            seal,
            include_encrypted=options.include_encrypted,
            include_logprobs=options.include_logprobs,
            # no reasoning in the chat stream: the encoder reads it from the turn
            hidden=not ex.settings.include_in_response or ex.settings.output == "none",
            keep=_Keep(tenant, options, translation.input_items),
        )
        return ex, encoder

    async def planned(
        self,
        headers: list[tuple[str, str]],
        body: dict[str, Any],
        options: Options,
        tenant: str,
        *,
        counting: bool = False,
    ) -> tuple[Exchange, Translation]:
        """The request (its previous_response_id chain first) translated to
        chat and planned as a chat completion. `counting`: for its tokens only."""
        refuse_upstream_state(body)
        chain = await self._chain(tenant, options.previous_response_id, refresh=not counting)
        prior = prior_items(chain)
        wanted = references(body.get("input"))
        if wanted:
            found = await self._referenced(tenant, wanted, chain)
            body = {**body, "input": resolved(body["input"], found)}
        translation = translate(body, prior, lambda token: self._open(tenant, token))
        payload = orjson.dumps(translation.payload)

        async def chat_body() -> bytes:
            return payload

        planned = with_effort(headers, translation.effort)
        return await self.planner.chat(planned, chat_body, counting=counting), translation

    async def _native(
        self,
        headers: list[tuple[str, str]],
        body: dict[str, Any],
        tenant: str,
        *,
        counting: bool = False,
    ) -> Exchange:
        """An exchange for a Responses upstream: planned from the input as far
        as it translates (for the conversation and the settings), sent as it
        came, with the settings applied; its context tokens are those of that
        body, and the turns whose stored reasoning was restored or not are
        counted (`reinjected`, `stripped`, dialect `responses`). `counting`:
        for a token count (nothing is counted in the metrics)."""
        # The upstream judges its own input (its encrypted reasoning, outputs of
        # calls in a response it stored): what does not translate plans as one
        # empty user message, and no envelope is counted as rejected.
        try:
            translation = translate(body, [], lambda token: self.rt.sealer.open(tenant, token))
            payload, effort = translation.payload, translation.effort
        except BadRequest:
            payload = {"model": body.get("model"), "messages": [{"role": "user", "content": ""}]}
            effort = None
        planned = with_effort(headers, effort)
        encoded = orjson.dumps(payload)

        async def chat_body() -> bytes:
            return encoded

        # (the chat plan is not what is sent: what is sent is counted below,
        # and the metrics of what is sent move there)
        ex = await self.planner.chat(planned, chat_body, counting=True)
        if self.rt.config.ui.show_prompts and not counting:
            ex.request_input = turn_input(payload["messages"])
        if ownership.guarded(ex.route):
            await ownership.check_previous(self.rt, tenant, body.get("previous_response_id"))
        ours = self._ours(tenant)
        turns = input_turns(body.get("input"), ours)
        settings = ex.settings
        # (a request that continues one the upstream stored has its reasoning there)
        continued = body.get("previous_response_id") is not None or body.get("conversation")
        if settings.include_in_context is not False and not continued:
            scoped = request_conversation_id(headers) is not None
            # (with `store` on, the items the upstream stored go by id alone)
            by_id = body.get("store") is not False
            before = await self._restore_dropped(ex, scoped, turns, ours, by_id)
            if before:
                body = {**body, "input": with_reasoning(body["input"], before)}
        ex.payload, ignored = native_request(
            body, settings, header_overrides(planned), ours, ex.dialect
        )
        # what went upstream of each earlier turn's reasoning, and why (the
        # chat planning's notes speak of a chat dialect, which this is not)
        notes = native_notes(
            NATIVE_DIALECT,
            [t.note for t in turns],
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
            count_restored(self.rt.metrics, NATIVE_DIALECT, [t.note for t in turns])
        ex.stream = body.get("stream") is True
        # what the chat planning said about a chat dialect does not apply
        kept = [(k, v) for k, v in ex.extra_headers if k in NATIVE_EXTRA]
        ex.extra_headers = [
            ("x-context-tokens-effective", str(effective)),
            ("x-context-tokens-raw", str(raw)),
            *kept,
            ("x-reasoning-dialect", NATIVE_DIALECT),
        ]
        if ignored:
            ex.extra_headers.append((IGNORED_HEADER, ", ".join(ignored)))
        return ex

    async def _restore_dropped(
        self, ex: Exchange, scoped: bool, turns: list[InputTurn], ours: Opens, by_id: bool
    ) -> dict[int, list[dict[str, Any]]]:
        """The upstream's reasoning items of the turns whose function calls
        the client sent without them (a framework that keeps only messages
        and calls), from the stored turns that made those calls through a
        route to this upstream, found by call_id in the caller's tenant: by
        input position, to go before the turn's first item. `turns` note
        what was found. `by_id`: the request has `store` on, so the items
        the upstream stored go back by id alone."""
        wanted = [t.wanted for t in turns if t.wanted is not None]
        if not wanted:
            return {}
        # the upstream's items from routes to this same upstream only (another
        # one cannot read them)
        upstream = ex.route.upstream
        same = {
            r.name for r in self.rt.config.routes if r.api == "responses" and r.upstream == upstream
        }
        try:
            found = await find_stored(self.rt.store, ex.key, scoped, wanted)
        except StoreFailure as exc:
            self.rt.health.failed("lookup", exc)
            return {}
        before: dict[int, list[dict[str, Any]]] = {}
        for t in turns:
            turn = found.get(t.note.position)
            if turn is None:
                continue
            # another upstream's items are no use here (found, not restored)
            items = stored_reasoning(turn, ours, by_id=by_id) if turn.route in same else []
            t.note.stored = True
            t.note.restored = len(items)
            if items:
                before[t.note.position] = items
        return before

    async def forward(self, ex: Exchange, trace: Trace, state: Progress) -> None:
        if ex.route.api == "responses":
            reader = NativeResponses(
                ex.route.tags,
                hidden=not ex.settings.include_in_response or ex.settings.output == "none",
                max_line_bytes=self.rt.config.limits.max_sse_line_bytes,
                mask=self.rt.key_mask,
                kept_upstream=ex.payload.get("store") is not False,  # the API's default
            )
            await forward_native(self, ex, trace, state, reader, "/responses")
            return
        trace.dropped(ex.extra_headers)
        encoder = state.encoder
        if not isinstance(encoder, _Encoder):
            await super().forward(ex, trace, state)
            return
        encoder.turn = lambda: ex.turn if ex.turn is not None else state.turn()
        encoder.separation = self.normalize_options(ex, state)
        inner = trace.inner

        async def send(message: Message) -> None:
            # the Response is stored before the client gets its last byte
            if message["type"] == "http.response.body" and not message.get("more_body"):
                await self._keep(encoder, ex)
            await inner(message)

        trace.inner = send
        trace.fields["response_id"] = encoder.response_id
        try:
            await super().forward(ex, trace, state)
        finally:
            # the wrappers reach the state that holds them: unlinked, the
            # request's objects are freed as it ends, not by the collector
            trace.inner = inner
            encoder.turn = _no_turn

    async def _keep(self, encoder: _Encoder, ex: Exchange) -> None:
        keep = encoder.keep
        if keep.kept or not keep.store or encoder.final is None:
            return
        keep.kept = True
        record = orjson.dumps(
            {
                "response": encoder.final,
                "input": keep.input,
                "previous_response_id": keep.previous,
                "conversation": ex.key.conversation,
                WRITTEN: time.time(),
            }
        )
        if self.rt.key_mask is not None:  # a route key the upstream quoted is never stored
            record = self.rt.key_mask.data(record)
        try:
            await asyncio.wait_for(
                self.rt.store.put_response(keep.tenant, encoder.response_id, record),
                STORE_TIMEOUT,
            )
        except (TimeoutError, StoreFailure) as exc:
            self.rt.health.failed("responses", exc)

    async def _chain(
        self, tenant: str, previous: str | None, *, refresh: bool
    ) -> list[dict[str, Any]]:
        """The stored records a `previous_response_id` chain names, newest
        first: from the named one back to the first link that is no longer
        stored (evicted, expired, deleted), as `input_items` lists it. Only
        the named one missing is an error. `refresh`: the chain is in use,
        and its links are written again (`refresh_chain`)."""
        limit = self.rt.config.store.max_turns_per_conversation
        chain, broken = await load_chain(self.rt, tenant, previous, limit)
        if broken and chain:
            log.info(
                "a previous_response_id chain ends at a link no longer stored; "
                "continuing from the %d stored after it",
                len(chain),
            )
        if refresh:
            await refresh_chain(self.rt, tenant, chain)
        if previous is not None and not chain:
            raise BadRequest(
                "previous_response_id names no stored response (unknown, expired, "
                "deleted, or created with store: false).",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        return chain

    async def _referenced(
        self, tenant: str, wanted: list[str], chain: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """The stored items that `item_reference`s name, by id: the items of
        the request's chain, and the output items of the tenant's stored
        responses that the ids name."""
        found = items_by_id(chain)
        loaded: set[str] = set()
        for item_id in wanted:
            response_id = response_of(item_id)
            if item_id in found or response_id is None or response_id in loaded:
                continue
            loaded.add(response_id)
            record = await load_response(self.rt, tenant, response_id)
            if record is not None:
                found.update(items_by_id([record]))
        return found

    def _ours(self, tenant: str) -> Opens:
        """Whether an `encrypted_content` is an envelope this proxy sealed for
        `tenant` (not counted or logged when it is not: it goes upstream)."""
        sealer = self.rt.sealer

        def ours(token: str) -> bool:
            return sealer.open(tenant, token) is not None

        return ours

    def _open(self, tenant: str, token: Any) -> Sealed | None:
        sealed = self.rt.sealer.open(tenant, token)
        if sealed is None:
            metrics = self.rt.metrics
            metrics.child(metrics.sealed_rejected, "responses").inc()
            log.warning("a reasoning item's encrypted_content is not this proxy's; ignored")
        return sealed


class ResponsesAside(TracedEndpoint):
    """A Responses endpoint beside `POST /v1/responses` that takes the same
    body: routed by its model, passed through to a Responses upstream (which
    serves it itself), answered by `_chat` for a chat upstream."""

    # the body to a Responses upstream holds the reasoning items
    # /v1/responses restores (a turn's the client dropped)
    restores = False

    def __init__(self, door: ResponsesEndpoint, passthrough: PassthroughEndpoint) -> None:
        self.door = door
        self.rt = door.rt
        self.metrics = door.metrics
        self.passthrough = passthrough

    async def _handle(self, scope: Scope, receive: Receive, trace: Trace) -> None:
        rt, door = self.rt, self.door
        answer: Answer | None
        try:
            headers = request_headers(scope, rt.config.limits.max_header_bytes)
            authorization = door.planner.authorize(headers)
            header_overrides(headers)  # a bad setting costs no upload
            raw = await read_plain_body(receive, headers, rt.config.limits.max_body_bytes)
            scope, headers = plain_request(scope, headers)  # the body goes on decoded
            body = parse_json_object(raw)
            options = read_options(body)
            route = door.planner.route(options.model)
            trace.route = route.name
            if route.api == "responses":
                # as to /v1/responses: the proxy's own reasoning items stay home
                # (their envelopes mean nothing upstream)
                tenant = trace.tenant = rt.tenant(authorization)
                if ownership.guarded(route):
                    # (a compaction of another tenant's chain would give its items)
                    previous = body.get("previous_response_id")
                    await ownership.check_previous(rt, tenant, previous)
                foreign = without_own_items(body, door._ours(tenant))
                if foreign is not None:
                    raw = orjson.dumps(foreign)
                ex: Exchange | None = None
                if self.restores:
                    # and the reasoning items /v1/responses would restore go too
                    ex = await door._native(headers, body, tenant, counting=True)
                    if any(t["action"] == "reinjected" for t in ex.plan.notes["messages"]):
                        raw = orjson.dumps(ex.payload)
                answer = await self._upstream(scope, receive, trace, headers, raw, ex)
                if answer is None:  # the pass-through answered
                    return
            elif route.api != "chat":
                raise BadRequest(
                    f"This route's upstream speaks the {route.api} API; the Responses door "
                    "goes to chat and Responses upstreams only.",
                    param="model",
                    code="unsupported_upstream_api",
                )
            else:
                tenant = trace.tenant = rt.tenant(authorization)
                answer = 200, orjson.dumps(await self._chat(headers, body, options, tenant)), []
        except ProxyError as exc:
            trace.fields["error"] = exc.code
            await send_error(trace.send, exc)
            return
        except ClientGone:
            return
        status, data, extra = answer
        mask = rt.key_mask
        if mask is not None:  # an upstream may quote the route's key back (a 401)
            extra, data = mask.headers(extra), mask.data(data)
        typed = any(k.lower() == "content-type" for k, _ in extra)
        out = encode_headers(extra) if typed else [JSON_TYPE, *encode_headers(extra)]
        await send_bytes(trace.send, status, data, out)

    async def _upstream(
        self,
        scope: Scope,
        receive: Receive,
        trace: Trace,
        headers: list[tuple[str, str]],
        raw: bytes,
        ex: Exchange | None,
    ) -> Answer | None:
        """The request, with `raw` for its body, to the Responses upstream,
        which answers the client (None)."""
        await self.passthrough._handle(scope, _replay(raw, receive), trace)
        return None

    async def _chat(
        self, headers: list[tuple[str, str]], body: dict[str, Any], options: Options, tenant: str
    ) -> dict[str, Any]:
        raise NotImplementedError


class InputTokensEndpoint(ResponsesAside):
    """POST /v1/responses/input_tokens (`client.responses.input_tokens.count`):
    `{"object": "response.input_tokens", "input_tokens": N}`. To a chat
    upstream the request is counted as the Responses door would send it
    (translated, its previous_response_id chain included, planned with the
    route's dialect and the reasoning settings): the effective count, with
    nothing sent upstream. To a Responses upstream it goes as /v1/responses
    would send its input: with the reasoning items restored there."""

    endpoint = "responses.input_tokens"
    restores = True

    def __init__(self, door: ResponsesEndpoint, passthrough: PassthroughEndpoint) -> None:
        super().__init__(door, passthrough)
        # route name -> until when (monotonic) its upstream is known to count nothing
        self._uncounted: dict[str, float] = {}

    async def _upstream(
        self,
        scope: Scope,
        receive: Receive,
        trace: Trace,
        headers: list[tuple[str, str]],
        raw: bytes,
        ex: Exchange | None,
    ) -> Answer | None:
        """The Responses upstream's own count; one without that endpoint (a
        404, 405 or 501, or a 2xx without an `input_tokens` count: vLLM and
        most servers that serve /v1/responses) gets the proxy's count of the
        body as /v1/responses would send it, and for NO_COUNT_MEMO seconds
        after that the route's requests are counted without asking."""
        assert ex is not None  # (planned: this endpoint restores)
        route = ex.route
        if self._uncounted.get(route.name, 0.0) <= time.monotonic():
            answer = await self._upstream_count(scope, trace, headers, raw, route)
            if answer is not None:
                return answer
            self._uncounted[route.name] = time.monotonic() + NO_COUNT_MEMO
        trace.fields["counted_by"] = "proxy"
        counted = {"object": "response.input_tokens", "input_tokens": ex.plan.effective}
        return 200, orjson.dumps(counted), []

    async def _upstream_count(
        self,
        scope: Scope,
        trace: Trace,
        headers: list[tuple[str, str]],
        raw: bytes,
        route: Route,
    ) -> Answer | None:
        """The upstream's answer (an error as it came, with its status), or
        None when it has no input_tokens endpoint (`upstream_count`)."""
        suffix, out = self.passthrough.outgoing(route, upstream_suffix(scope), headers)
        return await upstream_count(self.rt, trace, route, suffix, out, raw)

    async def _chat(
        self, headers: list[tuple[str, str]], body: dict[str, Any], options: Options, tenant: str
    ) -> dict[str, Any]:
        ex, _ = await self.door.planned(headers, body, options, tenant, counting=True)
        return {"object": "response.input_tokens", "input_tokens": ex.plan.effective}


class CompactEndpoint(ResponsesAside):
    """POST /v1/responses/compact (OpenAI's remote compaction): a Responses
    upstream compacts; to a chat upstream it is a 404 `unsupported_endpoint`
    that says so (the compacted state is the upstream's own opaque item, which
    a chat upstream has no way to make or read). Clients compact locally
    instead, through the model."""

    endpoint = "responses.compact"

    async def _chat(
        self, headers: list[tuple[str, str]], body: dict[str, Any], options: Options, tenant: str
    ) -> dict[str, Any]:
        raise NotFound(
            "Remote compaction (/v1/responses/compact) needs an upstream that speaks the "
            "Responses API; this model's route goes to a Chat Completions upstream. Compact "
            "through the model instead (Codex does, with a model provider of its own).",
            code="unsupported_endpoint",
        )


def _replay(raw: bytes, receive: Receive) -> Receive:
    """A receive that gives the body read already, then the client's own."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": raw, "more_body": False}

    return replay


def _no_turn() -> Turn | None:
    return None


def with_effort(headers: list[tuple[str, str]], effort: str | None) -> list[tuple[str, str]]:
    """The request's headers with `reasoning.effort` as X-Reasoning-Effort
    (unless the client sent that header: it wins)."""
    if effort is None or any(k == EFFORT_HEADER for k, _ in headers):
        return headers
    setting = next(s for s in SETTINGS if s.field == "effort")
    try:
        value = setting.parse(effort)
    except ValueError:
        if effort == "none":  # no such effort here: reasoning off
            if any(k == ENABLED_HEADER for k, _ in headers):
                return headers
            return [*headers, (ENABLED_HEADER, "false")]
        if effort not in _NEAREST_EFFORT:
            # the Responses API's efforts, each once (the settings may have them all)
            allowed = ", ".join(dict.fromkeys(("none", *setting.choices, "xhigh")))
            raise BadRequest(
                f"reasoning.effort must be one of: {allowed}.",
                param="reasoning.effort",
                code="invalid_reasoning_setting",
            ) from None
        value = setting.parse(_NEAREST_EFFORT[effort])
    return [*headers, (EFFORT_HEADER, str(value))]


async def load_response(rt: Runtime, tenant: str, response_id: str) -> dict[str, Any] | None:
    """A stored response's record, or None (also for the record that only
    says who made a response a Responses upstream keeps: `ownership`)."""
    if not _RESPONSE_ID.fullmatch(response_id):
        return None
    with rt.health.errors("responses"):
        raw = await rt.store.get_response(tenant, response_id)
    if raw is None:
        return None
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("response"), dict):
        return None
    return record


async def load_chain(
    rt: Runtime, tenant: str, previous: str | None, limit: int
) -> tuple[list[dict[str, Any]], bool]:
    """The stored records a `previous_response_id` chain names from
    `previous` on, newest first (at most `limit`, a loop ends it), and
    whether it stopped at one that is not stored."""
    chain: list[dict[str, Any]] = []
    seen: set[str] = set()
    while previous is not None and previous not in seen and len(chain) < limit:
        seen.add(previous)
        record = await load_response(rt, tenant, previous)
        if record is None:
            return chain, True
        chain.append(record)
        nxt = record.get("previous_response_id")
        previous = nxt if isinstance(nxt, str) else None
    return chain, False


async def refresh_chain(rt: Runtime, tenant: str, chain: list[dict[str, Any]]) -> None:
    """Write again, oldest first, the links of a chain a request continues
    that were last written more than a tenth of the TTL ago: a conversation
    in use expires `ttl_seconds` after its last use, and moves up among the
    most recently written (`max_conversations`), as a chat conversation
    does, instead of losing its oldest links while it goes on. (A tenth:
    a long chain is not rewritten whole on every request.) A failed write
    costs the request nothing (counted and logged)."""
    now = time.time()
    stale = now - rt.config.store.ttl_seconds * _REFRESH_FRACTION
    for record in reversed(chain):
        response = record["response"]
        written = record.get(WRITTEN, response.get("created_at"))
        response_id = response.get("id")
        if isinstance(written, int | float) and written > stale:
            continue
        if not isinstance(response_id, str) or not _RESPONSE_ID.fullmatch(response_id):
            continue
        record[WRITTEN] = now
        try:
            await asyncio.wait_for(
                rt.store.put_response(tenant, response_id, orjson.dumps(record)), STORE_TIMEOUT
            )
        except (TimeoutError, StoreFailure) as exc:
            rt.health.failed("responses", exc)
            return


def _includes(request: Request) -> list[str]:
    params = request.query_params
    return params.getlist("include[]") + params.getlist("include")


def responses_router(rt: Runtime) -> APIRouter:
    router = APIRouter()

    async def stored(request: Request, response_id: str) -> tuple[str, dict[str, Any]]:
        """The caller's tenant and its stored record of `response_id`; a 404
        for an unknown id and for another tenant's alike."""
        tenant = caller_tenant(rt, request, allow_admin=False)
        assert tenant is not None
        record = await load_response(rt, tenant, response_id)
        if record is None or not isinstance(record.get("response"), dict):
            raise NotFound(MISSING, param="response_id", code="response_not_found")
        return tenant, record

    @router.get(RESPONSES_PATH + "/{response_id}")
    async def get_response(request: Request, response_id: str) -> Response:
        _, record = await stored(request, response_id)
        if request.query_params.get("stream", "").lower() in ("true", "1"):
            raise BadRequest(
                "stream is for responses created with background: true. This proxy "
                "answers every request in the foreground (background is dropped), so a "
                "stored response is read whole.",
                param="stream",
            )
        response = record["response"]
        if ENCRYPTED_INCLUDE not in _includes(request):
            response["output"] = [
                {k: v for k, v in item.items() if k != "encrypted_content"}
                for item in response.get("output") or []
                if isinstance(item, dict)
            ]
        return Response(orjson.dumps(response), media_type="application/json")

    @router.get(RESPONSES_PATH + "/{response_id}/input_items")
    async def list_input_items(request: Request, response_id: str) -> Response:
        order, limit, after, before = page_params(request.query_params)
        tenant, record = await stored(request, response_id)
        # a link of the chain deleted or expired since: the list ends there
        previous = record.get("previous_response_id")
        earlier, _ = await load_chain(
            rt,
            tenant,
            previous if isinstance(previous, str) else None,
            rt.config.store.max_turns_per_conversation,
        )
        listed = page(
            chain_items([record, *earlier]),
            order=order,
            limit=limit,
            after=after,
            before=before,
            encrypted=ENCRYPTED_INCLUDE in _includes(request),
        )
        return Response(orjson.dumps(listed), media_type="application/json")

    @router.post(RESPONSES_PATH + "/{response_id}/cancel")
    async def cancel_response(request: Request, response_id: str) -> Response:
        await stored(request, response_id)
        raise BadRequest(
            "Only a response created with background: true can be cancelled. This proxy "
            "answers every request in the foreground (background is dropped), so this "
            "response has already finished.",
            param="response_id",
        )

    @router.delete(RESPONSES_PATH + "/{response_id}")
    async def delete_response(request: Request, response_id: str) -> Response:
        tenant = caller_tenant(rt, request, allow_admin=False)
        assert tenant is not None
        deleted = False
        if _RESPONSE_ID.fullmatch(response_id):
            with rt.health.errors("responses"):
                deleted = await rt.store.delete_response(tenant, response_id)
        if not deleted:
            raise NotFound(MISSING, param="response_id", code="response_not_found")
        body = {"id": response_id, "object": "response.deleted", "deleted": True}
        return Response(orjson.dumps(body), media_type="application/json")

    return router
