"""Tool calls from chat servers that bend OpenAI's stream shape, through
each front door and the official SDKs (real sockets):

- Ollama streams each of several parallel calls whole, all at `index` 0;
- Gemini's compatible API and older Ollama builds send no `index`;
- llama.cpp's server (some versions) sends `arguments` as an object;
- some servers send a call's name after its first piece.

Each door must give its client every call, whole, with its name (OpenAI's
stream accumulator, Anthropic's `tool_use` blocks, Responses'
`function_call` items), and the stored turn must hold every call by its id
(the next turn's reasoning is found by them)."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest

from tests.casefiles import chunk
from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy
from tests.messages_wire import sdk_client

KEY = "sk-test-alice"
REASONING = "Two lookups, then the answer."
PARIS = ("call_a", "get_weather", {"city": "Paris"})
UTC = ("call_b", "get_time", {"tz": "UTC"})


def call(index: Any, call_id: str | None, name: str | None, arguments: Any) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    if name is not None:
        function["name"] = name
    out: dict[str, Any] = {"type": "function", "function": function}
    if index is not None:
        out["index"] = index
    if call_id is not None:
        out["id"] = call_id
    return out


def pieces(shape: str) -> list[dict[str, Any]]:
    """The tool-call pieces of each chunk, in the shape's way."""
    if shape == "ollama":
        return [
            call(0, "call_a", "get_weather", '{"city":"Paris"}'),
            call(0, "call_b", "get_time", '{"tz":"UTC"}'),
        ]
    if shape == "no_index":
        return [
            call(None, "call_a", "get_weather", '{"city":"Paris"}'),
            call(None, "call_b", "get_time", '{"tz":"UTC"}'),
        ]
    if shape == "object_arguments":
        return [
            call(0, "call_a", "get_weather", {"city": "Paris"}),
            call(1, "call_b", "get_time", {"tz": "UTC"}),
        ]
    assert shape == "late_name"
    return [
        call(0, "call_a", None, ""),
        {"index": 0, "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}},
        call(1, "call_b", None, ""),
        {"index": 1, "function": {"name": "get_time", "arguments": '{"tz":"UTC"}'}},
    ]


SHAPES = ["ollama", "no_index", "object_arguments", "late_name"]
CALLS = [PARIS, UTC]


def stream(shape: str) -> Stream:
    chunks = [chunk({"role": "assistant", "reasoning_content": REASONING})]
    chunks += [chunk({"tool_calls": [p]}) for p in pieces(shape)]
    chunks.append(chunk({}, "tool_calls"))
    return Stream(chunks)


def whole(arguments_as_object: bool) -> Json:
    calls = [
        call(None, i, n, a if arguments_as_object else json.dumps(a, separators=(",", ":")))
        for i, n, a in CALLS
    ]
    message = {"role": "assistant", "content": None, "reasoning_content": REASONING}
    choice = {
        "index": 0,
        "message": {**message, "tool_calls": calls},
        "finish_reason": "tool_calls",
    }
    completion = {"id": "chatcmpl-1", "object": "chat.completion", "model": "m"}
    return Json({**completion, "choices": [choice]})


CHAT_TOOLS: Any = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("get_weather", "get_time")
]
USER = [{"role": "user", "content": "Weather and time in Paris?"}]


@pytest.mark.parametrize("shape", SHAPES)
def test_chat_clients_get_every_call_and_the_turn_holds_them(
    upstream: FakeUpstream, shape: str
) -> None:
    upstream.script(stream(shape), whole(False))
    with running_proxy(route_config(upstream, dialect="kimi")) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0)
        with client.chat.completions.stream(model="m", messages=USER, tools=CHAT_TOOLS) as s:
            final = s.get_final_completion()
        message = final.choices[0].message
        got = [
            (c.id, c.function.name, json.loads(c.function.arguments))
            for c in message.tool_calls or []
            if c.type == "function"
        ]
        assert got == CALLS
        # the next turn: the client sends the calls back without the
        # reasoning; Kimi gets it back on them (found by the calls' ids)
        back: Any = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                for i, n, a in CALLS
            ],
        }
        results: Any = [{"role": "tool", "tool_call_id": i, "content": "ok"} for i, _, _ in CALLS]
        client.chat.completions.create(
            model="m", messages=[*USER, back, *results], tools=CHAT_TOOLS
        )
        client.close()
    sent = upstream.chat_requests()[1].json["messages"][1]
    assert sent["reasoning_content"] == REASONING


@pytest.mark.parametrize("shape", SHAPES)
def test_messages_clients_get_every_call(upstream: FakeUpstream, shape: str) -> None:
    upstream.script(stream(shape), whole(shape == "object_arguments"))
    tools: Any = [
        {"name": n, "input_schema": {"type": "object"}} for n in ("get_weather", "get_time")
    ]
    with running_proxy(route_config(upstream)) as proxy:
        client: anthropic.Anthropic = sdk_client(proxy.base, KEY)
        with client.messages.stream(model="m", max_tokens=100, messages=USER, tools=tools) as s:
            streamed = s.get_final_message()
        created = client.messages.create(model="m", max_tokens=100, messages=USER, tools=tools)
    for message in (streamed, created):
        assert [b.type for b in message.content] == ["thinking", "tool_use", "tool_use"]
        got = [(b.id, b.name, b.input) for b in message.content if b.type == "tool_use"]
        assert got == CALLS
        assert message.stop_reason == "tool_use"


@pytest.mark.parametrize("shape", SHAPES)
def test_responses_clients_get_every_call(upstream: FakeUpstream, shape: str) -> None:
    upstream.script(stream(shape), whole(shape == "object_arguments"))
    tools: Any = [
        {"type": "function", "name": n, "parameters": {"type": "object"}}
        for n in ("get_weather", "get_time")
    ]
    with running_proxy(route_config(upstream)) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0)
        with client.responses.stream(model="m", input="Weather?", tools=tools) as s:
            events = list(s)
            streamed = s.get_final_response()
        created = client.responses.create(model="m", input="Weather?", tools=tools)
        client.close()
    # every item's events name it at its own output_index, in order
    added = [e.output_index for e in events if e.type == "response.output_item.added"]
    assert added == sorted(added) == list(range(len(added)))
    for response in (streamed, created):
        calls = [item for item in response.output if item.type == "function_call"]
        got = [(c.call_id, c.name, json.loads(c.arguments)) for c in calls]
        assert got == CALLS
