"""What a Messages route (`api: messages`) says about a request is about the
body it sends upstream: X-Context-Tokens-* count the thinking that goes
(sent back by the client, or restored from the store), count_tokens'
own count equals that, the reasoning metrics move under dialect
`messages`, and X-Reasoning-Dialect says `messages` as on every door."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.harness import FakeUpstream, Json, Stream, running_proxy
from tests.messages_wire import sdk_client
from tests.metrics_samples import moved, scrape

KEY = "sk-ant-client"
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
THOUGHT = "The forecast service wants a city name, so I ask it for Oslo. " * 150
QUESTION = [{"role": "user", "content": "weather in Oslo?"}]
TOOLS = [
    {
        "name": "get_weather",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


def tool_use_message() -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-up",
        "content": [
            {"type": "thinking", "thinking": THOUGHT, "signature": "sig-up"},
            {"type": "tool_use", "id": "toolu_5", "name": "get_weather", "input": {"city": "Oslo"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 6},
    }


def done_message() -> dict[str, Any]:
    return {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "model": "claude-up",
        "content": [{"type": "text", "text": "Cold."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 9, "output_tokens": 2},
    }


def config(first: FakeUpstream, second: FakeUpstream | None = None) -> dict[str, Any]:
    routes = [{"name": "a", "models": ["claude-a"], "upstream": first.url, "api": "messages"}]
    if second is not None:
        routes.append(
            {"name": "b", "models": ["claude-b"], "upstream": second.url, "api": "messages"}
        )
    return {"routes": routes}


def history(first: dict[str, Any], keep_thinking: bool) -> list[dict[str, Any]]:
    content = [b for b in first["content"] if keep_thinking or b["type"] != "thinking"]
    return [
        *QUESTION,
        {"role": "assistant", "content": content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_5", "content": "cold"}],
        },
    ]


def first_turn(base: str, model: str = "claude-a") -> dict[str, Any]:
    response = httpx.post(
        f"{base}/v1/messages",
        headers=HEADERS,
        json={"model": model, "max_tokens": 100, "messages": QUESTION, "tools": TOOLS},
    )
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


@pytest.mark.parametrize("keep_thinking", [True, False], ids=["sent-back", "restored"])
def test_context_tokens_count_the_thinking_that_goes_upstream(
    upstream: FakeUpstream, keep_thinking: bool
) -> None:
    # the upstream has no count_tokens: the proxy's own count
    upstream.script(
        Json(tool_use_message()),
        Json({"type": "error", "error": {"type": "not_found_error", "message": "no"}}, status=404),
        Json(done_message()),
    )
    with running_proxy(config(upstream)) as proxy:
        first = first_turn(proxy.base)
        before = scrape(proxy.base)
        request = {"model": "claude-a", "messages": history(first, keep_thinking), "tools": TOOLS}
        counted = httpx.post(
            f"{proxy.base}/v1/messages/count_tokens", headers=HEADERS, json=request
        ).json()["input_tokens"]
        sent = httpx.post(
            f"{proxy.base}/v1/messages", headers=HEADERS, json={**request, "max_tokens": 100}
        )
        after = scrape(proxy.base)
        thought = proxy.runtime.count(THOUGHT)
    assert sent.status_code == 200
    went = upstream.requests[-1].json["messages"][1]["content"]
    assert went[0] == {"type": "thinking", "thinking": THOUGHT, "signature": "sig-up"}
    effective = int(sent.headers["x-context-tokens-effective"])
    assert thought < effective < thought + 100  # the thinking counts, once
    assert int(sent.headers["x-context-tokens-raw"]) == effective
    assert counted == effective
    assert sent.headers["x-reasoning-dialect"] == "messages"
    reinjected = moved(before, after, "reasoning_proxy_turns_reinjected_total")
    assert reinjected == ({} if keep_thinking else {"messages": 1.0})
    assert moved(before, after, "reasoning_proxy_turns_stripped_total") == {}


def test_another_upstreams_thinking_is_counted_as_stripped(
    upstream: FakeUpstream, other: FakeUpstream
) -> None:
    upstream.script(Json(tool_use_message()))
    other.script(Json(done_message()))
    with running_proxy(config(upstream, other)) as proxy:
        first = first_turn(proxy.base)
        before = scrape(proxy.base)
        request = {"model": "claude-b", "max_tokens": 100, "messages": history(first, False)}
        sent = httpx.post(f"{proxy.base}/v1/messages", headers=HEADERS, json=request)
        after = scrape(proxy.base)
        thought = proxy.runtime.count(THOUGHT)
    assert sent.status_code == 200
    assert [b["type"] for b in other.requests[-1].json["messages"][1]["content"]] == ["tool_use"]
    effective = int(sent.headers["x-context-tokens-effective"])
    assert effective < 100
    assert int(sent.headers["x-context-tokens-raw"]) >= effective + thought
    assert moved(before, after, "reasoning_proxy_turns_stripped_total") == {"messages": 1.0}
    assert moved(before, after, "reasoning_proxy_turns_reinjected_total") == {}


def test_every_answer_of_a_messages_route_names_its_dialect(upstream: FakeUpstream) -> None:
    error = {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}
    upstream.script(
        Json(done_message()),
        Stream(
            [
                b'event: message_start\ndata: {"type":"message_start","message":{"id":"m",'
                b'"type":"message","role":"assistant","model":"claude-up","content":[],'
                b'"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1,'
                b'"output_tokens":1}}}\n\n',
                b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":'
                b'"end_turn","stop_sequence":null},"usage":{"output_tokens":1}}\n\n',
                b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
            ],
            done=False,
        ),
        Json(error, status=400),
    )
    with running_proxy(config(upstream)) as proxy:
        sdk = sdk_client(proxy.base, KEY)
        request: dict[str, Any] = {"model": "claude-a", "max_tokens": 10, "messages": QUESTION}
        whole = sdk.messages.with_raw_response.create(**request)
        with sdk.messages.with_streaming_response.create(**request, stream=True) as streamed:
            streamed.read()
        failed = httpx.post(f"{proxy.base}/v1/messages", headers=HEADERS, json=request)
    assert failed.status_code == 400
    for headers in (whole.headers, streamed.headers, failed.headers):
        assert headers["x-reasoning-dialect"] == "messages"
        assert "x-context-tokens-effective" in headers
