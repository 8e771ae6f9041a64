"""Each reasoning item's envelope holds its own run of reasoning, however the
upstream's events arrive: when a turn that reasons, answers, calls a tool,
reasons again and calls another comes in one read (the normalized turn is
then ahead of the events), a client that sends the items back (`store:
false`, Codex, the Agents SDK) sends the upstream each thought once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.casefiles import chunk
from tests.harness import FakeUpstream, ProxyServer, Stream, route_config, running_proxy, sse

TOOL: Any = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def _call(index: int, call_id: str, city: str) -> dict[str, Any]:
    arguments = '{"city": "' + city + '"}'
    function = {"name": "get_weather", "arguments": arguments}
    return {"index": index, "id": call_id, "type": "function", "function": function}


def interleaved_in_one_read() -> Stream:
    chunks = [
        chunk({"role": "assistant", "reasoning_content": "Paris first."}),
        chunk({"content": "Checking."}),
        chunk({"tool_calls": [_call(0, "call_paris", "Paris")]}),
        chunk({"reasoning_content": "Now Rome."}),
        chunk({"tool_calls": [_call(1, "call_rome", "Rome")]}),
        chunk({}, "tool_calls"),
    ]
    # every event in one write: the proxy reads them at once
    return Stream([b"".join(sse(c) for c in chunks)])


def answer() -> Stream:
    return Stream([chunk({"role": "assistant", "content": "Both sunny."}), chunk({}, "stop")])


@pytest.fixture
def proxy(upstream: FakeUpstream) -> Iterator[ProxyServer]:
    config = route_config(upstream, reasoning={"include_in_context": True})
    with running_proxy(config) as server:
        yield server


def test_each_run_of_reasoning_goes_back_once(proxy: ProxyServer, upstream: FakeUpstream) -> None:
    upstream.script(interleaved_in_one_read(), answer())
    client = openai.OpenAI(base_url=proxy.url, api_key="sk-interleaved", max_retries=0)
    question = {"role": "user", "content": "Weather in Paris and Rome?"}
    with client:
        with client.responses.stream(
            model="m",
            input=[question],
            tools=[TOOL],
            store=False,
            include=["reasoning.encrypted_content"],
        ) as stream:
            first = stream.get_final_response()
        kinds = [i.type for i in first.output]
        assert kinds == [
            "reasoning",
            "message",
            "function_call",
            "reasoning",
            "function_call",
        ]
        items = [i.model_dump(exclude_none=True, warnings=False) for i in first.output]
        outputs = [
            {"type": "function_call_output", "call_id": call_id, "output": "sunny"}
            for call_id in ("call_paris", "call_rome")
        ]
        final = client.responses.create(
            model="m",
            input=[question, *items, *outputs],
            tools=[TOOL],
            store=False,
            include=["reasoning.encrypted_content"],
        )
    assert final.output_text == "Both sunny."
    sent = upstream.chat_requests()[1].json["messages"]
    (assistant,) = [m for m in sent if m["role"] == "assistant"]
    assert assistant["reasoning_content"] == "Paris first.\n\nNow Rome."
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_paris", "call_rome"]
