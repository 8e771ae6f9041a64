"""A tool_use `input` is a JSON object on the Messages door, streamed or not:
arguments a Chat upstream sends as another JSON value (an array, null, an
object written as a JSON string) or as text that is not JSON reach the
anthropic SDK's stream helper as the object a whole answer holds, and the
tool loop's next request goes through."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.casefiles import chunk
from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy
from tests.messages_wire import assert_blocks_in_order, parse_events, sdk_client

KEY = "sk-ant-test"
TOOLS: list[Any] = [{"name": "f", "input_schema": {"type": "object"}}]
ASK: list[Any] = [{"role": "user", "content": "x"}]


def call_stream(arguments: str) -> Stream:
    """One tool call whose arguments come in two pieces, then text."""
    cut = len(arguments) // 2
    first = {"index": 0, "id": "call_1", "type": "function"}
    return Stream(
        [
            chunk(
                {"tool_calls": [{**first, "function": {"name": "f", "arguments": arguments[:cut]}}]}
            ),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[cut:]}}]}),
            chunk({"content": "done"}),
            chunk({}, "tool_calls"),
        ]
    )


def call_completion(arguments: str) -> dict[str, Any]:
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                "finish_reason": "tool_calls",
            }
        ],
    }


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('"{\\"city\\": \\"Paris\\"}"', {"city": "Paris"}),
        ("[1, 2]", {"value": [1, 2]}),
        ("null", {"value": None}),
        ("city=Paris", {"arguments": "city=Paris"}),
        ("  \n", {}),
        ('  {"city": "Paris"}', {"city": "Paris"}),
    ],
)
def test_streamed_arguments_are_the_object_a_whole_answer_holds(
    upstream: FakeUpstream, arguments: str, expected: dict[str, Any]
) -> None:
    upstream.script(
        call_stream(arguments),
        Json(call_completion(arguments)),
        Json({"choices": [{"index": 0, "message": {"content": "ok"}, "finish_reason": "stop"}]}),
    )
    with running_proxy(route_config(upstream)) as proxy:
        sdk = sdk_client(proxy.base, KEY)
        with sdk.messages.stream(model="m", max_tokens=50, tools=TOOLS, messages=ASK) as stream:
            streamed = stream.get_final_message()
        whole = sdk.messages.create(model="m", max_tokens=50, tools=TOOLS, messages=ASK)
        # the tool loop goes on: the block sent back is a valid tool_use
        result = {"type": "tool_result", "tool_use_id": "call_1", "content": "r"}
        loop: list[Any] = [
            *ASK,
            {"role": "assistant", "content": [b.to_dict() for b in streamed.content]},
            {"role": "user", "content": [result]},
        ]
        sdk.messages.create(model="m", max_tokens=50, tools=TOOLS, messages=loop)
    assert [b.type for b in streamed.content] == ["tool_use", "text"]
    assert streamed.content[0].input == expected  # type: ignore[union-attr]
    assert whole.content[0].input == expected  # type: ignore[union-attr]
    assert streamed.stop_reason == "tool_use"
    sent = upstream.chat_requests()[2].json["messages"][1]["tool_calls"][0]
    assert sent["function"]["name"] == "f"


def test_an_object_streams_piece_by_piece_anything_else_in_one_piece(
    upstream: FakeUpstream,
) -> None:
    upstream.script(call_stream('{"city": "Paris"}'), call_stream("[1, 2]"))
    body = {"model": "m", "max_tokens": 50, "stream": True, "tools": TOOLS, "messages": ASK}
    pieces = []
    with running_proxy(route_config(upstream)) as proxy:
        for _ in range(2):
            r = httpx.post(f"{proxy.url}/messages", json=body, headers={"x-api-key": KEY})
            events = parse_events(r.content)
            assert_blocks_in_order(events)
            pieces.append(
                [
                    data["delta"]["partial_json"]
                    for name, data in events
                    if name == "content_block_delta" and data["delta"]["type"] == "input_json_delta"
                ]
            )
    assert pieces == [['{"city":', ' "Paris"}'], ['{"value":[1,2]}']]
