"""Search results and documents a tool answers with reach a Chat upstream
as text: a `tool_result` whose content is `search_result` or plain-text
`document` blocks is the tool message's text (title, source or context,
then the text), as a user message's are, nothing dropped."""

from __future__ import annotations

from typing import Any

from tests.harness import FakeUpstream, Json, route_config, running_proxy
from tests.messages_wire import sdk_client

ANSWER = {"choices": [{"index": 0, "message": {"content": "ok"}, "finish_reason": "stop"}]}


def search_result(title: str, text: str) -> dict[str, Any]:
    return {
        "type": "search_result",
        "source": f"https://docs.example/{title}",
        "title": title,
        "content": [{"type": "text", "text": text}, {"type": "text", "text": "more"}],
    }


def test_a_tool_answering_with_search_results_and_documents(upstream: FakeUpstream) -> None:
    upstream.script(Json(ANSWER))
    document = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "The text."},
        "title": "Notes",
        "context": "From the wiki.",
    }
    result = {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [search_result("alpha", "First."), document],
    }
    messages: list[Any] = [
        {"role": "user", "content": "Find it."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "search", "input": {}}],
        },
        {"role": "user", "content": [result, search_result("beta", "Second.")]},
    ]
    with running_proxy(route_config(upstream)) as proxy:
        raw = sdk_client(proxy.base, "sk-ant-test").messages.with_raw_response.create(
            model="m",
            max_tokens=50,
            tools=[{"name": "search", "input_schema": {"type": "object"}}],
            messages=messages,
        )
    assert raw.headers.get("x-proxy-dropped-fields") is None
    sent = upstream.chat_requests()[0].json["messages"]
    assert sent[2] == {
        "role": "tool",
        "tool_call_id": "t1",
        "content": "alpha\n\nhttps://docs.example/alpha\n\nFirst.\n\nmore\n\n"
        "Notes\n\nFrom the wiki.\n\nThe text.",
    }
    assert sent[3] == {
        "role": "user",
        "content": "beta\n\nhttps://docs.example/beta\n\nSecond.\n\nmore",
    }
