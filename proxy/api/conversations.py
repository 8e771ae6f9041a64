"""GET/DELETE /v1/conversations/{id}: the caller's stored turns.

Scoped by tenant: a conversation of another tenant answers exactly like an
unknown one (404). The admin token names a tenant with `?tenant=` (reading or
deleting one conversation without it is a 400: the admin sees every tenant).
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from proxy.errors import BadRequest, Forbidden, NotFound, Unauthorized
from proxy.exchange import client_authorization
from proxy.history.keys import ConversationKey
from proxy.reasoning.blocks import Turn, turn_to_json
from proxy.runtime import Runtime
from proxy.settings import parse_conversation_id


def is_admin(rt: Runtime, authorization: str | None) -> bool:
    token = rt.config.admin_token
    if token is None or not authorization:
        return False
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(value.strip().encode(), token.get().encode())


MAX_LISTED = 1000  # conversations one list returns at most


def caller_tenant(rt: Runtime, request: Request, *, allow_admin: bool = True) -> str | None:
    """The tenant a request may read; None means every tenant (admin)."""
    authorization = request.headers.get("authorization")
    if allow_admin and is_admin(rt, authorization):
        named = request.query_params.get("tenant")
        request.state.tenant = "admin"  # for the access log
        return named or None
    authorization = client_authorization(request.headers.items(), rt.config.server.require_auth)
    tenant = request.state.tenant = rt.tenant(authorization)
    return tenant


def conversation_tokens(turns: list[Turn]) -> dict[str, int]:
    """The context sizes of the conversation's latest request (as the proxy
    reported them in X-Context-Tokens-*), or zeros before any."""
    for turn in reversed(turns):
        context = turn.extra.get("context")
        if isinstance(context, dict):
            return {
                "raw": int(context.get("raw", 0)),
                "effective": int(context.get("effective", 0)),
            }
    return {"raw": 0, "effective": 0}


def conversation_json(conversation: str, turns: list[Turn]) -> dict[str, Any]:
    return {
        "id": conversation,
        "turns": [{**turn_to_json(t, i), **exchange_json(t)} for i, t in enumerate(turns)],
        "tokens": conversation_tokens(turns),
    }


def exchange_json(turn: Turn) -> dict[str, Any]:
    """The rest of the exchange a turn came from, for the inspector: its tool
    calls, what the proxy did with earlier reasoning on the way up (`egress`),
    and the request's input (stored only with `ui.show_prompts`)."""
    calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in turn.tool_calls]
    out: dict[str, Any] = {"toolCalls": calls}
    for key in ("egress", "input"):
        if key in turn.extra:
            out[key] = turn.extra[key]
    return out


def conversations_router(rt: Runtime) -> APIRouter:
    router = APIRouter()
    missing = "No conversation with that id."

    async def load(request: Request, conversation_id: str) -> tuple[ConversationKey, list[Turn]]:
        parse_conversation_id(conversation_id, "id")
        tenant = caller_tenant(rt, request)
        if tenant is None:  # the admin, who sees every tenant: say whose
            raise BadRequest(
                "With the admin token, name the conversation's tenant: ?tenant= and "
                "its `tenant` from GET /v1/conversations.",
                param="tenant",
                code="tenant_required",
            )
        key = ConversationKey(tenant, conversation_id)
        with rt.health.errors("read"):
            turns = await rt.store.turns(key)
        if not turns:
            raise NotFound(missing, param="id")
        return key, turns

    @router.get("/v1/conversations")
    async def list_conversations(request: Request, limit: int = 100) -> dict[str, Any]:
        """The most recently updated first, `limit` of them (1 to 1,000);
        `has_more` says whether older ones were left out."""
        tenant = caller_tenant(rt, request)
        limit = max(1, min(limit, MAX_LISTED))
        with rt.health.errors("list"):
            items = await rt.store.conversations(tenant, limit + 1)
        more = len(items) > limit
        items = items[:limit]
        data = [
            {
                "id": c.conversation,
                "turns": c.turns,
                "updated": c.updated,
                "model": c.model,
                **({"tenant": c.tenant} if tenant is None else {}),
            }
            for c in items
        ]
        return {"object": "list", "data": data, "has_more": more}

    @router.get("/v1/conversations/{conversation_id}")
    async def get_conversation(request: Request, conversation_id: str) -> dict[str, Any]:
        _, turns = await load(request, conversation_id)
        return conversation_json(conversation_id, turns)

    @router.delete("/v1/conversations/{conversation_id}")
    async def delete_conversation(request: Request, conversation_id: str) -> Response:
        key, _ = await load(request, conversation_id)
        with rt.health.errors("delete"):
            await rt.store.delete(key)
        # open inspectors drop it at once (ui/events)
        rt.live.publish(key.tenant, {"type": "deleted", "conversation": key.conversation})
        return Response(status_code=204)

    return router


def require_admin(rt: Runtime, request: Request) -> None:
    if rt.config.admin_token is None:
        raise Forbidden(
            "Writing profiles needs REASONING_PROXY_ADMIN_TOKEN, which this proxy does not set.",
            code="admin_disabled",
        )
    authorization = request.headers.get("authorization")
    if not authorization:
        raise Unauthorized(
            "Send the admin token as Authorization: Bearer <token>.", code="missing_admin_token"
        )
    if not is_admin(rt, authorization):
        raise Forbidden("That is not the admin token.", code="invalid_admin_token")
    request.state.tenant = "admin"  # for the access log
