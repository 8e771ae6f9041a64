"""Who made which stored answer, where the upstream cannot tell: a route
with its own key (`api_key`, or a credential header such as `Authorization`
or `api-key` in its `headers:`; `Route.keyed`) sends every client's request
with the one route key, so the upstream sees one caller and would serve any
stored id to anyone.
The proxy keeps a small record per answer it relayed there that the
upstream stores (tenant, id): every response of an `api: responses` route,
and the chat completions sent with `store: true` (OpenAI's stored
completions). A tenant may read, delete, cancel, list the items or messages
of, or continue (`previous_response_id`) only its own; another tenant's id
and an unknown one are the same 404 (400 as a previous id). Without a route
key each client's own key goes upstream, which keeps its callers apart
itself: nothing is recorded or checked."""

from __future__ import annotations

import asyncio
import re
from typing import Any
from urllib.parse import unquote

from proxy.config import Route
from proxy.errors import BadRequest, Forbidden, NotFound
from proxy.history.service import STORE_TIMEOUT
from proxy.runtime import Runtime
from proxy.stores.base import StoreFailure

RECORD = b'{"relayed":true}'
MISSING = "No response with that id."
_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
# /responses/<name> paths that are endpoints of their own, not a response's
_COLLECTION = frozenset(("input_tokens", "compact"))


def guarded(route: Route) -> bool:
    return route.keyed and route.api in ("responses", "chat")


def kept_upstream(route: Route, payload: dict[str, Any]) -> bool:
    """The upstream keeps this answer where any holder of the route key could
    read it: a Responses request (stored unless `store: false`), a chat
    completion sent with `store: true`."""
    if not route.keyed:
        return False
    if route.api == "responses":
        return payload.get("store") is not False
    return route.api == "chat" and payload.get("store") is True


def stored_id_of(suffix: str) -> str | None:
    """The stored answer's id a pass-through path names (`/responses/{id}`
    and its `/input_items` and `/cancel`, `/chat/completions/{id}` and its
    `/messages`), whichever API the route speaks: routes with different
    APIs may share one upstream account, and the route is the one the
    body's `model` (or the default) selects, so an id of either kind may
    reach that account through any keyed route. Read as an upstream would:
    escapes decoded and empty segments dropped (`/responses//{id}` is the
    same response to a server that merges slashes), its endpoint's names in
    any case (`/Chat/Completions/{id}` is the same completion to a server
    that routes without case, as ASP.NET-based ones such as Azure's do)."""
    segments = path_segments(suffix)
    names = [s.lower() for s in segments[:2]]
    if len(segments) >= 3 and names == ["chat", "completions"]:
        return segments[2]
    if len(segments) < 2 or names[0] != "responses" or names[1] in _COLLECTION:
        return None
    return segments[1]


def path_segments(suffix: str) -> list[str]:
    """A pass-through path's segments as an upstream may read them: escapes
    decoded (up to three times: a server before it may decode again), each
    segment's path parameters (`;...`, which servers such as Tomcat strip)
    and surrounding whitespace dropped, the query and empty segments too
    (`/files//x` is `/files/x` to a server that merges slashes)."""
    path = suffix.partition("?")[0]
    for _ in range(3):
        decoded = unquote(path)
        if decoded == path:
            break
        path = decoded
    return [s for s in (p.split(";", 1)[0].strip() for p in path.split("/")) if s]


async def owns(rt: Runtime, tenant: str, response_id: str) -> bool:
    if not _ID.fullmatch(response_id):
        return False
    with rt.health.errors("responses"):
        try:
            found = await asyncio.wait_for(
                rt.store.get_response(tenant, response_id), STORE_TIMEOUT
            )
        except TimeoutError:
            raise StoreFailure("the store did not answer in time") from None
    return found is not None


async def check(rt: Runtime, tenant: str, response_id: str) -> None:
    """A 404 unless the tenant made that response."""
    if not await owns(rt, tenant, response_id):
        raise NotFound(MISSING, param="response_id", code="response_not_found")


async def check_previous(rt: Runtime, tenant: str, previous: object) -> None:
    """A 400 unless the tenant made the response it continues."""
    if isinstance(previous, str) and not await owns(rt, tenant, previous):
        raise BadRequest(
            "previous_response_id names no response of this caller.",
            param="previous_response_id",
            code="previous_response_not_found",
        )


async def record(rt: Runtime, tenant: str, response_id: str | None) -> None:
    """Note that the tenant made the response; a store that fails is counted,
    and the answer goes on (its id then reads as unknown)."""
    if response_id and _ID.fullmatch(response_id):
        try:
            await asyncio.wait_for(
                rt.store.put_response(tenant, response_id, RECORD), STORE_TIMEOUT
            )
        except (TimeoutError, StoreFailure) as exc:
            rt.health.failed("responses", exc)


async def forget(rt: Runtime, tenant: str, response_id: str) -> None:
    """Drop the record of a response the upstream deleted (the answer has
    gone out: a store that fails is counted, not raised)."""
    try:
        await asyncio.wait_for(rt.store.delete_response(tenant, response_id), STORE_TIMEOUT)
    except (TimeoutError, StoreFailure) as exc:
        rt.health.failed("responses", exc)


# The upstream account's stored objects that no caller owns (paths below the
# route's base, as segments): every client of a keyed route would share them
ACCOUNT_OBJECTS = frozenset(
    (
        "files",
        "uploads",
        "batches",
        "vector_stores",
        "fine_tuning",
        "assistants",
        "threads",
        "containers",
        "evals",
        "skills",
        "videos",
        "chatkit",
        # OpenAI's Conversations API: /v1/conversations is this proxy's own,
        # but a server that routes without case reads /v1/Conversations as it
        "conversations",
    )
)
SHARED_OBJECTS = (
    "This route sends its own key, so the upstream account's stored objects "
    "(files, batches, vector stores, fine-tuning, assistants, ...) would be "
    "shared by every client: set shared_objects: true on the route to allow that."
)


def check_account_object(route: Route, method: str, suffix: str) -> None:
    """A 403 for a pass-through path to the upstream account's own stored
    objects on a keyed route that does not share them (`shared_objects`):
    any client could list, read or delete what another made. Read as an
    upstream would (escapes decoded, empty segments dropped)."""
    if not route.keyed or route.shared_objects:
        return
    segments = path_segments(suffix)
    if not segments:
        return
    first = segments[0].lower()
    if (
        first in ACCOUNT_OBJECTS
        or (first == "messages" and len(segments) > 1 and segments[1].lower() == "batches")
        or (first == "models" and method == "DELETE")  # an account's fine-tuned model
    ):
        raise Forbidden(SHARED_OBJECTS, code="shared_objects_refused")
