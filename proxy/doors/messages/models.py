"""The model list in Anthropic's shape (pure).

An upstream that speaks Chat Completions (or Responses) lists its models in
OpenAI's shape, `{"object": "list", "data": [{"id", "object": "model",
"created", "owned_by"}]}`. An Anthropic client (the `anthropic` SDK's
`models.list()` and `models.retrieve(id)`) reads a page of ModelInfo
objects, `{"type": "model", "id", "display_name", "created_at"}` with
`created_at` an RFC 3339 time, as `{"data", "has_more", "first_id",
"last_id"}`, paged by `limit` (1 to 1,000, default 20) and one cursor,
`after_id` (the page after that model) or `before_id` (the page before it).

The list keeps the upstream's models in the upstream's order. A model
without a creation time gets the epoch, as Anthropic's own API does for an
unknown release date; its display name is the upstream's `display_name` or
`name` where it gives one (OpenRouter does), else its id.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

from proxy.errors import BadRequest, NotFound, UpstreamError

DEFAULT_LIMIT = 20
MAX_LIMIT = 1000
EPOCH = "1970-01-01T00:00:00Z"

Json = dict[str, Any]


def model_infos(listing: Any) -> list[Json]:
    """An upstream's OpenAI-shaped model list as ModelInfo objects, in its
    order. A list the proxy cannot read (not an object, no `data` array, an
    entry without a string `id`) is an UpstreamError: half a list would pass
    for the whole one."""
    data = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(data, list) or not all(
        isinstance(item, dict) and isinstance(item.get("id"), str) for item in data
    ):
        raise UpstreamError(
            "The upstream's model list is not a list of models with ids.",
            code="malformed_upstream_response",
        )
    return [model_info(item) for item in data]


def model_info(item: Json) -> Json:
    """One OpenAI model object as Anthropic's ModelInfo. Every model the
    upstream lists is in use, so `lifecycle` is `active`."""
    model_id: str = item["id"]
    name = next(
        (v for v in (item.get("display_name"), item.get("name")) if isinstance(v, str) and v),
        model_id,
    )
    return {
        "type": "model",
        "id": model_id,
        "display_name": name,
        "created_at": rfc3339(item.get("created")),
        "lifecycle": "active",
    }


def rfc3339(created: Any) -> str:
    """Unix seconds as an RFC 3339 UTC time; the epoch for anything else."""
    if isinstance(created, bool) or not isinstance(created, int | float):
        return EPOCH
    try:
        moment = datetime.fromtimestamp(created, UTC)
    except (OverflowError, OSError, ValueError):
        return EPOCH
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def page_params(query: str) -> tuple[int, str | None, str | None]:
    """`limit`, `after_id` and `before_id` from a query string (a repeated
    name: its last value). Other parameters are not the proxy's to judge and
    are ignored. A limit outside 1 to 1,000, or both cursors at once, is a
    BadRequest."""
    params = dict(parse_qsl(query, keep_blank_values=True))
    raw = params.get("limit", str(DEFAULT_LIMIT))
    # digits only (int() takes signs, spaces and underscores), and few of them
    limit = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 9 else 0
    if not 1 <= limit <= MAX_LIMIT:
        raise BadRequest(
            f"limit must be an integer from 1 to {MAX_LIMIT}.", param="limit", code="invalid_limit"
        )
    after, before = params.get("after_id"), params.get("before_id")
    if after is not None and before is not None:
        raise BadRequest(
            "Give after_id or before_id, not both.", param="before_id", code="invalid_cursor"
        )
    return limit, after, before


def page(models: list[Json], limit: int, after: str | None, before: str | None) -> Json:
    """One page of the list: the `limit` models after `after`, or before
    `before`, or from the start; `has_more` says whether more lie that way.
    A cursor that names no listed model is a BadRequest (an empty page would
    end a client's walk as if the list had ended)."""
    ids = [m["id"] for m in models]
    if after is not None:
        start = _position(ids, after, "after_id") + 1
        chosen, more = models[start : start + limit], start + limit < len(models)
    elif before is not None:
        end = _position(ids, before, "before_id")
        chosen, more = models[max(0, end - limit) : end], end - limit > 0
    else:
        chosen, more = models[:limit], limit < len(models)
    return {
        "data": chosen,
        "has_more": more,
        "first_id": chosen[0]["id"] if chosen else None,
        "last_id": chosen[-1]["id"] if chosen else None,
    }


def _position(ids: list[str], cursor: str, param: str) -> int:
    try:
        return ids.index(cursor)
    except ValueError:
        raise BadRequest(
            f"{param} names no model in the list.", param=param, code="invalid_cursor"
        ) from None


def find(models: list[Json], model_id: str) -> Json:
    """The listed model with that id; NotFound when none is."""
    for model in models:
        if model["id"] == model_id:
            return model
    raise NotFound("No model with that id.", param="model_id", code="model_not_found")
