"""The input items of a stored response, as `GET /v1/responses/{id}/input_items` lists them.

What a response was made from: the input and output items of every stored
response its `previous_response_id` chain names (oldest first), then its
own input. Each listed item has an id: its own when the client sent one,
else one made from the response that took it as input and its place there,
so the same item has the same id on every call (pagination depends on it).
A message whose content was a string shows it as one text part, as the API
does.

An `item_reference` input item names one of those items by id; `references`
and `resolved` put the stored item in its place (a reference to an output
item names its response: `msg_<stem>_<n>` is an item of `resp_<stem>`). No
I/O here: the door loads the records, this shapes and pages them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import Any

from proxy.errors import BadRequest

Json = dict[str, Any]

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
ORDERS = ("asc", "desc")  # the API's default is desc: the newest item first
_PREFIXES = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "custom_tool_call": "ctc",
    "custom_tool_call_output": "ctco",
    "reasoning": "rs",
}

# listed tool calls and outputs have a status (the client may have sent none)
_WITH_STATUS = frozenset(
    {"function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output"}
)


def chain_items(chain: Sequence[Json]) -> list[Json]:
    """The items the newest of `chain` (stored records, newest first) was
    made from, oldest first: every earlier record's input and output, then
    the newest one's input."""
    items: list[Json] = []
    for depth, record in enumerate(reversed(chain)):
        response = record.get("response")
        response = response if isinstance(response, dict) else {}
        response_id = str(response.get("id") or "")
        for index, item in enumerate(record.get("input") or []):
            if isinstance(item, dict):
                items.append(_listed(item, response_id, index))
        if depth < len(chain) - 1:
            items += [i for i in response.get("output") or [] if isinstance(i, dict)]
    return items


# tool calls, and the outputs that answer them (by call_id)
_CALLS = frozenset({"function_call", "custom_tool_call"})
_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})


def prior_items(chain: Sequence[Json]) -> list[Any]:
    """The history a request naming the newest of `chain` (stored records,
    newest first) continues: every record's input and output, oldest first.
    A chain cut short (its older links evicted, expired or deleted) can
    begin with the output of a call made in a link that is gone: such an
    output is left out, as the call it answers is (chat refuses a tool
    message without its call)."""
    items: list[Any] = []
    calls: set[Any] = set()
    for record in reversed(chain):
        response = record.get("response")
        output = response.get("output") if isinstance(response, dict) else None
        for item in [*(record.get("input") or []), *(output or [])]:
            kind = item.get("type") if isinstance(item, dict) else None
            if kind in _CALLS:
                calls.add(item.get("call_id"))
            elif kind in _OUTPUTS and item.get("call_id") not in calls:
                continue
            items.append(item)
    return items


def _listed(item: Json, response_id: str, index: int) -> Json:
    out = dict(item)
    if not isinstance(out.get("id"), str) or not out["id"]:
        kind = str(out.get("type") or "message")
        digest = hashlib.blake2b(f"{response_id}\0{index}".encode(), digest_size=16).hexdigest()
        out["id"] = f"{_PREFIXES.get(kind, 'item')}_{digest}"
    if out.get("type", "message") == "message":
        out["type"] = "message"
        content = out.get("content")
        if isinstance(content, str):
            part = "output_text" if out.get("role") == "assistant" else "input_text"
            text: Json = {"type": part, "text": content}
            if part == "output_text":
                text["annotations"] = []
            out["content"] = [text]
        out.setdefault("status", "completed")
    elif out.get("type") in _WITH_STATUS:  # the API lists them with one
        out.setdefault("status", "completed")
    return out


def page_params(params: Any) -> tuple[str, int, str | None, str | None]:
    """(order, limit, after, before) from the query parameters (a Starlette
    QueryParams or a mapping); a bad value is a 400 naming it."""
    order = params.get("order") or "desc"
    if order not in ORDERS:
        raise BadRequest("order must be asc or desc.", param="order")
    raw_limit = params.get("limit")
    try:
        limit = DEFAULT_LIMIT if raw_limit is None else int(raw_limit)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise BadRequest(f"limit must be an integer from 1 to {MAX_LIMIT}.", param="limit")
    return order, limit, params.get("after") or None, params.get("before") or None


def page(
    items: Sequence[Json],
    *,
    order: str = "desc",
    limit: int = DEFAULT_LIMIT,
    after: str | None = None,
    before: str | None = None,
    encrypted: bool = False,
) -> Json:
    """One page of `items` (oldest first) as the API's list object: in
    `order`, those after the item `after` and before the item `before`, at
    most `limit`. Reasoning items keep `encrypted_content` only when
    `encrypted` (the `reasoning.encrypted_content` include)."""
    ordered = list(items) if order == "asc" else list(reversed(items))
    ids = [item.get("id") for item in ordered]
    start, end = 0, len(ordered)
    if after is not None:
        start = _position(ids, after, "after") + 1
    if before is not None:
        end = _position(ids, before, "before")
    window = ordered[start:end]
    data = [_shown(item, encrypted) for item in window[:limit]]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(window) > limit,
    }


def _position(ids: list[Any], item_id: str, param: str) -> int:
    try:
        return ids.index(item_id)
    except ValueError:
        raise BadRequest(f"{param} names no input item of this response.", param=param) from None


def _shown(item: Json, encrypted: bool) -> Json:
    if encrypted or "encrypted_content" not in item:
        return item
    return {k: v for k, v in item.items() if k != "encrypted_content"}


# an output item's id, as the encoder writes it: <prefix>_<response id's stem>_<index>
_OUTPUT_ID = re.compile(r"(?:rs|msg|fc|ctc)_([A-Za-z0-9]{1,100})_\d{1,6}")


def references(items: Any) -> list[str]:
    """The ids the `item_reference` items of `input` name, in order."""
    if not isinstance(items, list):
        return []
    return [
        item["id"]
        for item in items
        if isinstance(item, dict) and item.get("type") == "item_reference"
        if isinstance(item.get("id"), str)
    ]


def response_of(item_id: str) -> str | None:
    """The response an output item's id says it came from (None: no such id)."""
    found = _OUTPUT_ID.fullmatch(item_id)
    return f"resp_{found.group(1)}" if found else None


def items_by_id(records: Iterable[Json]) -> dict[str, Json]:
    """Every item of stored records (input and output) by its listed id,
    as stored (not reshaped for listing)."""
    found: dict[str, Json] = {}
    for record in records:
        response = record.get("response")
        response = response if isinstance(response, dict) else {}
        response_id = str(response.get("id") or "")
        for index, item in enumerate(record.get("input") or []):
            if isinstance(item, dict):
                found[_listed(item, response_id, index)["id"]] = item
        for item in response.get("output") or []:
            if isinstance(item, dict) and isinstance(item.get("id"), str):
                found[item["id"]] = item
    return found


def resolved(items: list[Any], found: dict[str, Json]) -> list[Any]:
    """`items` with each `item_reference` replaced by the item it names; one
    that names no stored item is a 400, as the API answers it."""
    out: list[Any] = []
    for item in items:
        if isinstance(item, dict) and item.get("type") == "item_reference":
            item_id = item.get("id")
            if not isinstance(item_id, str) or item_id not in found:
                raise BadRequest(
                    f"Item with id {item_id!r} not found. Items are kept only by responses "
                    "stored with `store: true` (and for the store's TTL): send the item "
                    "itself, or leave it out.",
                    param="input",
                    code="item_not_found",
                )
            item = found[item_id]
        out.append(item)
    return out
