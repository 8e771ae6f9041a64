"""Tool-call ids that two conversations share (Kimi numbers them
`functions.name:0` per conversation, other models `call_0` per turn): without
`X-Conversation-Id`, each conversation gets back its own reasoning, never the
other's, also when the client writes the call's arguments again."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.harness import FakeUpstream, Json, route_config, running_proxy

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
]
CALL_ID = "functions.get_weather:0"
HEADERS = {"Authorization": "Bearer sk-shared-ids"}


def answer(reasoning: str, content: str | None = None, args: str | None = None) -> Json:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "reasoning_content": reasoning,
    }
    if args is not None:
        message["tool_calls"] = [call(args)]
    return Json(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "kimi-k2",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if args is not None else "stop",
                }
            ],
        }
    )


def call(args: str) -> dict[str, Any]:
    return {
        "id": CALL_ID,
        "type": "function",
        "function": {"name": "get_weather", "arguments": args},
    }


def post(url: str, messages: list[Any]) -> httpx.Response:
    body = {"model": "kimi-k2", "messages": messages, "tools": TOOLS}
    return httpx.post(f"{url}/chat/completions", headers=HEADERS, json=body, timeout=30)


def two_conversations(url: str, upstream: FakeUpstream) -> tuple[str, str]:
    """Conversation A asks about Zürich, then B about Paris: both calls get
    the same id; B's is stored last."""
    upstream.script(answer("A plans Zürich", args='{"city": "Zürich"}'))
    a = post(url, [{"role": "user", "content": "Weather in Zürich?"}])
    upstream.script(answer("B plans Paris", args='{"city": "Paris"}'))
    b = post(url, [{"role": "user", "content": "Weather in Paris?"}])
    return a.headers["x-conversation-id"], b.headers["x-conversation-id"]


def test_arguments_written_again_with_escapes_find_their_own_turn(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream, dialect="kimi")) as proxy:
        first, _ = two_conversations(proxy.url, upstream)
        upstream.script(answer("A answers", content="Sunny."))
        # the client parsed the arguments and wrote them again: "Z\u00fcrich"
        again = json.dumps({"city": "Zürich"})
        reply = post(
            proxy.url,
            [
                {"role": "user", "content": "Weather in Zürich?"},
                {"role": "assistant", "content": None, "tool_calls": [call(again)]},
                {"role": "tool", "tool_call_id": CALL_ID, "content": "sunny"},
            ],
        )
    assert reply.status_code == 200
    sent = upstream.chat_requests()[-1].json["messages"][1]
    assert sent["tool_calls"][0]["function"]["arguments"] == again
    assert sent["reasoning_content"] == "A plans Zürich"
    assert reply.headers["x-conversation-id"] == first


def test_an_edited_call_gets_no_other_conversations_reasoning(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream, dialect="kimi")) as proxy:
        first, second = two_conversations(proxy.url, upstream)
        upstream.script(answer("A answers", content="Rainy."))
        # the client edited A's call: the reasoning stored under its id (B's,
        # written last) is not this call's
        reply = post(
            proxy.url,
            [
                {"role": "user", "content": "Weather in Zürich?"},
                {"role": "assistant", "content": None, "tool_calls": [call('{"city": "Bern"}')]},
                {"role": "tool", "tool_call_id": CALL_ID, "content": "rainy"},
            ],
        )
    assert reply.status_code == 200
    sent = upstream.chat_requests()[-1].json["messages"][1]
    assert sent["reasoning_content"] == " "  # Kimi's placeholder: none known
    assert reply.headers["x-conversation-id"] not in (first, second)


def test_same_calls_with_other_text_still_match_by_id(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream, dialect="kimi")) as proxy:
        upstream.script(answer("A plans Zürich", args='{"city": "Zürich"}'))
        first = post(proxy.url, [{"role": "user", "content": "Weather in Zürich?"}])
        upstream.script(answer("A answers", content="Sunny."))
        # the client added text beside A's call and spaced its arguments
        reply = post(
            proxy.url,
            [
                {"role": "user", "content": "Weather in Zürich?"},
                {
                    "role": "assistant",
                    "content": "Let me look.",
                    "tool_calls": [call('{ "city" :  "Zürich" }')],
                },
                {"role": "tool", "tool_call_id": CALL_ID, "content": "sunny"},
            ],
        )
    sent = upstream.chat_requests()[-1].json["messages"][1]
    assert sent["reasoning_content"] == "A plans Zürich"
    assert reply.headers["x-conversation-id"] == first.headers["x-conversation-id"]
