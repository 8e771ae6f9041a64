"""The texts a request is counted by, listed ahead of counting
(`message_texts`, `request_texts`: what Count.warm counts off the loop)."""

from __future__ import annotations

from typing import Any

from proxy.history.context import message_texts, request_texts, tools_text

MESSAGE: dict[str, Any] = {
    "role": "assistant",
    "content": [{"type": "text", "text": "the answer"}],
    "reasoning_content": "the plan",
    "name": "helper",
    "tool_calls": [
        {"id": "c1", "function": {"name": "lookup", "arguments": '{"q": 1}'}},
        "not a call",
    ],
    "reasoning_details": [{"type": "reasoning.text", "text": "detail"}],
    "refusal": "not counted",
}


def test_a_message_lists_every_text_it_is_counted_by() -> None:
    assert message_texts(MESSAGE) == [
        "assistant",
        "the answer",
        "the plan",
        "helper",
        "lookup",
        '{"q": 1}',
        "detail",
    ]
    assert message_texts("not a message") == []


def test_a_request_lists_its_messages_then_its_tools() -> None:
    tools = [{"type": "function", "function": {"name": "lookup"}}]
    user = {"role": "user", "content": "hi"}
    texts = list(request_texts([user, MESSAGE], tools_text(tools)))
    assert texts == ["user", "hi", *message_texts(MESSAGE), tools_text(tools)]
    assert list(request_texts([user], tools_text(None))) == ["user", "hi"]
