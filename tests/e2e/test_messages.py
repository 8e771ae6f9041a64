"""The Messages door end to end, against a scripted Chat Completions upstream:
the anthropic SDK (create, streamed and not, the stream helper,
count_tokens), raw streams validated event by event, signatures, errors,
credentials and what a Chat upstream never sees."""

from __future__ import annotations

import itertools
import time
from typing import Any

import anthropic
import httpx
import orjson
import pytest

from tests.casefiles import chunk
from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy
from tests.messages_wire import accumulate, assert_blocks_in_order, parse_events, sdk_client

KEY = "sk-ant-test"


def client(base: str, api_key: str = KEY) -> anthropic.Anthropic:
    """An SDK client, closed when the test ends."""
    return sdk_client(base, api_key)


def completion(message: dict[str, Any], finish: str = "stop", **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "up-model",
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 8},
        **extra,
    }


def thinking_stream() -> Stream:
    return Stream(
        [
            chunk({"role": "assistant", "reasoning_content": "Seventeen times"}),
            chunk({"reasoning_content": " twenty-three."}),
            chunk({"content": "17 * 23 = "}),
            chunk({"content": "391."}),
            chunk({}, "stop"),
            {
                "id": "c",
                "model": "m",
                "choices": [],
                "usage": {"prompt_tokens": 9, "completion_tokens": 5},
            },
        ]
    )


def tool_stream(call_id: str = "call_w1") -> Stream:
    return Stream(
        [
            chunk({"reasoning_content": "I should call get_weather."}),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": '},
                        }
                    ]
                }
            ),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
            chunk({}, "tool_calls"),
        ]
    )


WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def test_create_not_streamed(upstream: FakeUpstream) -> None:
    upstream.script(Json(completion({"reasoning_content": "Easy.", "content": "391."})))
    with running_proxy(route_config(upstream, dialect="deepseek")) as proxy:
        message = client(proxy.base).messages.create(
            model="deepseek-chat",
            max_tokens=300,
            system="Be brief.",
            messages=[{"role": "user", "content": "What is 17 * 23?"}],
            thinking={"type": "enabled", "budget_tokens": 2048},
            output_config={"effort": "high"},
        )
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "Easy."  # type: ignore[union-attr]
    assert message.content[0].signature.startswith("rp1.")  # type: ignore[union-attr]
    assert message.content[1].text == "391."  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 12
    assert message.usage.output_tokens == 8
    sent = upstream.chat_requests()[0]
    assert sent.json["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 17 * 23?"},
    ]
    assert sent.json["max_tokens"] == 300
    # the reasoning controls, in the deepseek dialect
    assert sent.json["thinking"] == {"type": "enabled"}
    assert sent.json["reasoning_effort"] == "high"
    # credentials: x-api-key reached the chat upstream as a bearer token, and
    # no anthropic-* header went along
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert "x-api-key" not in sent.headers
    assert not [k for k in sent.headers if k.lower().startswith("anthropic-")]


def test_create_streamed_each_event_is_a_valid_sdk_event(upstream: FakeUpstream) -> None:
    upstream.script(thinking_stream())
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.post(
            f"{proxy.url}/messages",
            headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
            json={
                "model": "m",
                "max_tokens": 100,
                "stream": True,
                "messages": [{"role": "user", "content": "What is 17 * 23?"}],
            },
            timeout=30,
        )
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["x-accel-buffering"] == "no"
    events = parse_events(r.content)
    assert events[0][0] == "message_start"
    assert events[-1][0] == "message_stop"
    message = accumulate(events)  # validated against the SDK's event types
    assert [
        (b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in message.content
    ] == [
        ("thinking", "Seventeen times twenty-three."),
        ("text", "17 * 23 = 391."),
    ]
    assert message.usage.output_tokens == 5
    assert upstream.chat_requests()[0].json["stream_options"] == {"include_usage": True}


def test_the_sdk_stream_and_the_stream_helper(upstream: FakeUpstream) -> None:
    upstream.script(thinking_stream(), thinking_stream())
    with running_proxy(route_config(upstream)) as proxy:
        sdk = client(proxy.base)
        question = [{"role": "user", "content": "What is 17 * 23?"}]
        kinds = [
            e.type
            for e in sdk.messages.create(model="m", max_tokens=100, messages=question, stream=True)  # type: ignore[arg-type]
        ]
        with sdk.messages.stream(model="m", max_tokens=100, messages=question) as stream:  # type: ignore[arg-type]
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
    assert kinds[0] == "message_start"
    assert kinds.count("content_block_start") == 2
    assert kinds[-2:] == ["message_delta", "message_stop"]
    assert text == "17 * 23 = 391."
    assert final.content[0].type == "thinking"
    assert final.stop_reason == "end_turn"


def test_deltas_are_forwarded_as_they_arrive(upstream: FakeUpstream) -> None:
    parts = ["one ", "two ", "three ", "four"]
    upstream.script(Stream([chunk({"content": p}) for p in parts] + [chunk({}, "stop")], delay=0.2))
    arrivals: list[float] = []
    with running_proxy(route_config(upstream)) as proxy, httpx.Client(timeout=30) as http:
        start = time.monotonic()
        body = {
            "model": "m",
            "max_tokens": 10,
            "stream": True,
            "messages": [{"role": "user", "content": "x"}],
        }
        with http.stream(
            "POST", f"{proxy.url}/messages", json=body, headers={"x-api-key": KEY}
        ) as r:
            for raw in r.iter_raw():
                arrivals += [time.monotonic() - start for _ in range(raw.count(b"text_delta"))]
    assert len(arrivals) == 4
    # the upstream sends one event every 200 ms: each delta arrives on its
    # own, soon after it was sent, never held back for the next one
    for n, t in enumerate(arrivals):
        assert t >= 0.2 * (n + 1) - 0.05, arrivals
        assert t < 0.2 * (n + 1) + 0.15, arrivals
    assert all(b - a > 0.1 for a, b in itertools.pairwise(arrivals)), arrivals


def test_a_tool_loop_that_keeps_thinking_round_trips_the_signature(upstream: FakeUpstream) -> None:
    upstream.script(tool_stream(), Json(completion({"content": "Sunny in Paris."})))
    config = route_config(upstream, dialect="kimi", reasoning={"include_in_context": True})
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]
    with (
        running_proxy(config) as proxy,
        client(proxy.base).messages.stream(
            model="m",
            max_tokens=200,
            messages=messages,  # type: ignore[arg-type]
            tools=[WEATHER],  # type: ignore[list-item]
        ) as s,
    ):
        first = s.get_final_message()
    assert first.stop_reason == "tool_use"
    assert [b.type for b in first.content] == ["thinking", "tool_use"]
    tool = first.content[1]
    assert tool.type == "tool_use"
    assert tool.input == {"city": "Paris"}
    messages += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": tool.id, "content": "sunny"}],
        },
    ]
    # a new proxy process (same secret, empty store): the reasoning can only
    # come from the signature the client kept
    with running_proxy(config) as proxy:
        second = client(proxy.base).messages.create(
            model="m",
            max_tokens=200,
            messages=messages,  # type: ignore[arg-type]
            tools=[WEATHER],  # type: ignore[list-item]
        )
    assert second.content[-1].text == "Sunny in Paris."  # type: ignore[union-attr]
    sent = upstream.chat_requests()[1].json["messages"]
    assert sent[1]["role"] == "assistant"
    assert sent[1]["reasoning_content"] == "I should call get_weather."
    assert sent[1]["tool_calls"][0]["id"] == "call_w1"
    assert sent[2] == {"role": "tool", "tool_call_id": "call_w1", "content": "sunny"}


def test_a_tool_loop_that_drops_thinking_gets_it_from_the_store(upstream: FakeUpstream) -> None:
    call = {
        "id": "call_w2",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
    }
    first_answer = completion(
        {"reasoning_content": "I should call get_weather.", "tool_calls": [call]}, "tool_calls"
    )
    upstream.script(Json(first_answer), Json(completion({"content": "Sunny."})))
    config = route_config(upstream, dialect="kimi", reasoning={"include_in_context": True})
    with running_proxy(config) as proxy:
        sdk = client(proxy.base)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Rome?"}]
        first = sdk.messages.create(model="m", max_tokens=200, messages=messages, tools=[WEATHER])  # type: ignore[arg-type, list-item]
        assert first.stop_reason == "tool_use"
        kept = [b.model_dump() for b in first.content if b.type != "thinking"]
        messages += [
            {"role": "assistant", "content": kept},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "call_w2", "content": "sunny"}],
            },
        ]
        sdk.messages.create(model="m", max_tokens=200, messages=messages, tools=[WEATHER])  # type: ignore[arg-type, list-item]
    sent = upstream.chat_requests()[1].json["messages"]
    assert sent[1]["reasoning_content"] == "I should call get_weather."


def test_a_forged_signature_is_dropped_not_refused(upstream: FakeUpstream) -> None:
    upstream.script(Json(completion({"content": "ok"})))
    config = route_config(upstream, reasoning={"include_in_context": True})
    messages = [
        {"role": "user", "content": "a"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "injected", "signature": "rp1.Zm9yZ2Vk"},
                {"type": "text", "text": "never stored"},
            ],
        },
        {"role": "user", "content": "b"},
    ]
    with running_proxy(config) as proxy:
        message = client(proxy.base).messages.create(model="m", max_tokens=10, messages=messages)  # type: ignore[arg-type]
        metrics = httpx.get(f"{proxy.base}/metrics").text
    assert message.content[0].text == "ok"  # type: ignore[union-attr]
    sent = upstream.chat_requests()[0].json["messages"]
    assert sent[1] == {"role": "assistant", "content": "never stored"}
    if "reasoning_proxy_sealed_rejected" in metrics:  # the counter the doors share
        assert 'reasoning_proxy_sealed_rejected_total{door="messages"} 1.0' in metrics


def test_another_tenants_signature_does_not_open(upstream: FakeUpstream) -> None:
    upstream.script(Json(completion({"reasoning_content": "private thought", "content": "A."})))
    upstream.script(Json(completion({"content": "B."})))
    config = route_config(upstream, reasoning={"include_in_context": True})
    with running_proxy(config) as proxy:
        first = client(proxy.base).messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "q"}]
        )
        messages = [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [first.content[0].model_dump()]},
            {"role": "user", "content": "again"},
        ]
        other = client(proxy.base, "sk-other")
        other.messages.create(model="m", max_tokens=10, messages=messages)  # type: ignore[arg-type]
    sent = upstream.chat_requests()[1].json["messages"]
    assert "reasoning_content" not in sent[1]


def test_x_api_key_and_authorization_are_one_tenant(upstream: FakeUpstream) -> None:
    upstream.script(Json(completion({"reasoning_content": "r", "content": "c"})))
    body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "tenant check"}],
    }
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.post(f"{proxy.url}/messages", json=body, headers={"x-api-key": KEY}, timeout=30)
        conversation = r.headers["x-conversation-id"]
        bearer = httpx.get(
            f"{proxy.url}/conversations/{conversation}", headers={"Authorization": f"Bearer {KEY}"}
        )
        other = httpx.get(
            f"{proxy.url}/conversations/{conversation}",
            headers={"Authorization": "Bearer sk-other"},
        )
    assert bearer.status_code == 200
    assert bearer.json()["turns"][0]["content"] == "c"
    assert other.status_code == 404


def test_a_route_key_replaces_the_clients_key(upstream: FakeUpstream) -> None:
    upstream.script(Json(completion({"content": "c"})))
    with running_proxy(route_config(upstream, api_key="sk-route")) as proxy:
        client(proxy.base).messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    sent = upstream.chat_requests()[0]
    assert sent.headers["authorization"] == "Bearer sk-route"
    assert KEY not in str(dict(sent.headers))


def test_what_claude_code_sends_is_tolerated_dropped_and_named(upstream: FakeUpstream) -> None:
    upstream.script(Json(completion({"content": "done"})))
    body = {
        "model": "m",
        "max_tokens": 32000,
        "stream": False,
        "system": [
            {"type": "text", "text": "You are an agent.", "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
            }
        ],
        "tools": [WEATHER, {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}],
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "max"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "metadata": {"user_id": "user_1"},
    }
    headers = {
        "x-api-key": KEY,
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "interleaved-thinking-2025-05-14,context-management-2025-06-27",
    }
    with running_proxy(route_config(upstream, dialect="openrouter")) as proxy:
        r = httpx.post(f"{proxy.url}/messages", json=body, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    assert (
        r.headers["x-proxy-dropped-fields"]
        == "cache_control, metadata, context_management, anthropic-beta"
    )
    assert r.headers["x-proxy-dropped-tools"] == "web_search"
    sent = upstream.chat_requests()[0]
    assert [t["function"]["name"] for t in sent.json["tools"]] == ["get_weather"]
    assert sent.json["reasoning"]["effort"] in ("xhigh", "high")
    assert "context_management" not in sent.json
    assert "anthropic-beta" not in sent.headers


@pytest.mark.parametrize("stream", [False, True])
def test_names_outside_ascii_are_named_percent_encoded(
    upstream: FakeUpstream, stream: bool
) -> None:
    """Unknown field and server tool names are the client's own text: they
    reach the dropped-names headers percent-encoded, and the answer is served."""
    if stream:
        upstream.script(Stream([chunk({"content": "ok"}), chunk({}, "stop")]))
    else:
        upstream.script(Json(completion({"content": "ok"})))
    body = {
        "model": "m",
        "max_tokens": 5,
        "stream": stream,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [WEATHER, {"type": "web_search_20250305", "name": "w\u2713"}],
        "名前": 1,
        "x\r\ny": 2,
    }
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.post(f"{proxy.url}/messages", json=body, headers={"x-api-key": KEY}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["x-proxy-dropped-fields"] == "%E5%90%8D%E5%89%8D, x%0D%0Ay"
    assert r.headers["x-proxy-dropped-tools"] == "w%E2%9C%93"


def test_headers_the_client_sets_win_over_the_body(upstream: FakeUpstream) -> None:
    upstream.script(Json(completion({"content": "c"})))
    body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "x"}],
        "output_config": {"effort": "high"},
    }
    headers = {"x-api-key": KEY, "X-Reasoning-Effort": "low"}
    with running_proxy(route_config(upstream)) as proxy:
        httpx.post(f"{proxy.url}/messages", json=body, headers=headers, timeout=30)
    assert upstream.chat_requests()[0].json["reasoning_effort"] == "low"


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"max_tokens": 10, "messages": []}, "messages"),
        (
            {
                "max_tokens": 10,
                "messages": [
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}
                ],
            },
            "tool_use_id",
        ),
        ({"max_tokens": -1, "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
    ],
)
def test_bad_input_is_a_400_in_anthropics_shape_and_nothing_goes_upstream(
    upstream: FakeUpstream, body: dict[str, Any], where: str
) -> None:
    with (
        running_proxy(route_config(upstream)) as proxy,
        pytest.raises(anthropic.BadRequestError) as caught,
    ):
        client(proxy.base).messages.create(model="m", **body)
    assert caught.value.status_code == 400
    assert caught.value.body["type"] == "error"  # type: ignore[index]
    assert caught.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert where in caught.value.body["error"]["message"]  # type: ignore[index]
    assert upstream.chat_requests() == []


def test_not_json_is_a_400_in_anthropics_shape(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.post(f"{proxy.url}/messages", content=b"{", headers={"x-api-key": KEY})
    assert r.status_code == 400
    assert r.json() == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "The request body is not valid JSON: unexpected end of data "
            "(line 1, column 2).",
        },
    }


def test_upstream_errors_keep_their_status_in_anthropics_shape(upstream: FakeUpstream) -> None:
    error = {
        "error": {
            "message": "slow down",
            "type": "rate_limit_exceeded",
            "code": "rate_limit_exceeded",
        }
    }
    upstream.script(Json(error, status=429))
    with (
        running_proxy(route_config(upstream)) as proxy,
        pytest.raises(anthropic.RateLimitError) as caught,
    ):
        client(proxy.base).messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "slow down"},
    }


def test_a_stream_that_fails_midway_ends_with_an_error_event(upstream: FakeUpstream) -> None:
    upstream.script(Stream([chunk({"content": f"x{i}"}) for i in range(5)], cut_after=3))
    body = {
        "model": "m",
        "max_tokens": 10,
        "stream": True,
        "messages": [{"role": "user", "content": "x"}],
    }
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.post(f"{proxy.url}/messages", json=body, headers={"x-api-key": KEY}, timeout=30)
        upstream.script(Stream([chunk({"content": f"x{i}"}) for i in range(5)], cut_after=3))
        stream = client(proxy.base).messages.create(**body)
        with pytest.raises(anthropic.APIStatusError):
            list(stream)
    events = parse_events(r.content)
    assert events[-1][0] == "error"
    assert events[-1][1]["error"]["type"] == "api_error"
    assert "message_stop" not in [n for n, _ in events]
    assert (
        "".join(e[1]["delta"]["text"] for e in events if e[0] == "content_block_delta") == "x0x1x2"
    )


def test_an_upstream_that_is_down_is_an_anthropic_error(upstream: FakeUpstream) -> None:
    config = route_config(upstream)
    config["routes"][0]["upstream"] = "http://127.0.0.1:9/v1"
    with running_proxy(config) as proxy, pytest.raises(anthropic.APIStatusError) as caught:
        client(proxy.base).messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    assert caught.value.status_code == 502
    assert caught.value.body["error"]["type"] == "api_error"  # type: ignore[index]


def test_another_upstream_api_is_unsupported(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream, api="responses")) as proxy:
        r = httpx.post(
            f"{proxy.url}/messages",
            json={"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]},
            headers={"x-api-key": KEY},
        )
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert "responses" in r.json()["error"]["message"]
    assert upstream.requests == []


def test_count_tokens(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        sdk = client(proxy.base)
        short = sdk.messages.count_tokens(model="m", messages=[{"role": "user", "content": "hi"}])
        long = sdk.messages.count_tokens(
            model="m",
            system="You are a careful assistant.",
            messages=[{"role": "user", "content": "hi " * 200}],
            tools=[WEATHER],  # type: ignore[list-item]
        )
        bad = httpx.post(
            f"{proxy.url}/messages/count_tokens", json={"model": "m"}, headers={"x-api-key": KEY}
        )
    assert 0 < short.input_tokens < 20
    assert long.input_tokens > short.input_tokens + 200
    assert bad.status_code == 400
    assert bad.json()["type"] == "error"
    assert upstream.requests == []


def reinjected_counts(base: str) -> list[str]:
    metrics = httpx.get(base + "/metrics").text.splitlines()
    return [line for line in metrics if line.startswith("reasoning_proxy_turns_reinjected_total{")]


LONG_THOUGHT = "Which city, which units, which day: Paris, Celsius, today. " * 40


@pytest.mark.parametrize("keeps_thinking", [True, False], ids=["thinking-kept", "thinking-dropped"])
@pytest.mark.parametrize(("dialect", "sent_back"), [("kimi", True), ("groq", False)])
def test_count_tokens_counts_what_the_route_would_send(
    upstream: FakeUpstream, dialect: str, sent_back: bool, keeps_thinking: bool
) -> None:
    """A tool loop's history, counted: kimi gets the tool-use turn's
    reasoning back (from the client, or from the store when the client
    dropped it), groq never does, so the counts differ by the reasoning, and
    each equals the effective count of the same request sent."""
    with running_proxy(route_config(upstream, dialect=dialect)) as proxy:
        sdk = client(proxy.base)
        first = [{"role": "user", "content": "Weather in Paris?"}]
        upstream.script(
            Stream(
                [
                    chunk({"reasoning_content": LONG_THOUGHT}),
                    *tool_stream().chunks[1:],
                ]
            )
        )
        turn = sdk.messages.create(
            model="m",
            max_tokens=100,
            messages=first,
            tools=[WEATHER],  # type: ignore[arg-type, list-item]
        )
        assert [b.type for b in turn.content] == ["thinking", "tool_use"]
        history = [
            *first,
            {
                "role": "assistant",
                "content": [b.model_dump() for b in turn.content[0 if keeps_thinking else 1 :]],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": turn.content[1].id, "content": "21 C"}  # type: ignore[union-attr]
                ],
            },
        ]
        before = reinjected_counts(proxy.base)
        counted = sdk.messages.count_tokens(
            model="m",
            messages=history,
            tools=[WEATHER],  # type: ignore[arg-type, list-item]
        ).input_tokens
        assert reinjected_counts(proxy.base) == before  # a count sends nothing
        upstream.script(Json(completion({"role": "assistant", "content": "21 C in Paris."})))
        sent = sdk.messages.with_raw_response.create(
            model="m",
            max_tokens=100,
            messages=history,
            tools=[WEATHER],  # type: ignore[arg-type, list-item]
        )
        effective = int(sent.headers["x-context-tokens-effective"])
        reinjected = upstream.chat_requests()[-1].json["messages"][1]
    assert ("reasoning_content" in reinjected) is sent_back
    assert counted == effective
    thought_tokens = len(LONG_THOUGHT) // 8  # far fewer than it has, far more than noise
    if sent_back:
        assert counted > thought_tokens
    else:
        assert counted < thought_tokens


def test_get_is_not_allowed(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.get(f"{proxy.url}/messages")
    assert r.status_code == 405
    assert r.json()["type"] == "error"


def test_the_turn_is_stored_with_its_thinking(upstream: FakeUpstream) -> None:
    upstream.script(thinking_stream())
    with running_proxy(route_config(upstream)) as proxy:
        with client(proxy.base).messages.stream(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "store me"}]
        ) as s:
            s.until_done()
            conversation = s.response.headers["x-conversation-id"]
        stored = httpx.get(
            f"{proxy.url}/conversations/{conversation}", headers={"Authorization": f"Bearer {KEY}"}
        ).json()
    turn = stored["turns"][0]
    assert turn["blocks"][0]["thought"] == "Seventeen times twenty-three."
    assert turn["content"] == "17 * 23 = 391."
    assert turn["complete"] is True


def test_client_disconnect_cancels_the_upstream(upstream: FakeUpstream) -> None:
    upstream.script(Stream([chunk({"content": f"part {i} "}) for i in range(100)], delay=0.2))
    body = {
        "model": "m",
        "max_tokens": 10,
        "stream": True,
        "messages": [{"role": "user", "content": "x"}],
    }
    with running_proxy(route_config(upstream)) as proxy, httpx.Client(timeout=30) as http:
        with http.stream(
            "POST", f"{proxy.url}/messages", json=body, headers={"x-api-key": KEY}
        ) as r:
            for raw in r.iter_raw():
                if b"part 1" in raw:
                    break
        dropped = time.monotonic()
        assert upstream.disconnected.wait(5)
        assert time.monotonic() - dropped < 1.5


def test_message_json_is_orjson_clean(upstream: FakeUpstream) -> None:
    upstream.script(Json(completion({"content": "ünïcödé ✓"})))
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.post(
            f"{proxy.url}/messages",
            json={"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]},
            headers={"x-api-key": KEY},
        )
    assert orjson.loads(r.content)["content"] == [{"type": "text", "text": "ünïcödé ✓"}]
    assert r.headers["content-type"] == "application/json"


# -- parallel tool calls whose argument pieces interleave ---------------------------


def call_piece(index: int, arguments: str, city: str | None = None) -> dict[str, Any]:
    """A chunk with one `tool_calls` piece; `city` marks the call's first one."""
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if city is not None:
        call.update(id=f"call_{city}", type="function")
        call["function"]["name"] = "get_weather"
    return chunk({"tool_calls": [call]})


# three calls; the pieces of the first two alternate, as some upstreams send them
INTERLEAVED_CALLS = [
    chunk({"role": "assistant", "reasoning_content": "Three cities."}),
    chunk({"content": "Checking."}),
    call_piece(0, '{"city":', "paris"),
    call_piece(1, '{"city": "Ro', "rome"),
    call_piece(0, ' "Paris"'),
    call_piece(2, '{"city": "Oslo"}', "oslo"),
    call_piece(1, 'me"}'),
    call_piece(0, "}"),
    chunk({}, "tool_calls"),
    {"id": "c", "model": "m", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 5}},
]
STORED_CALLS = [
    {"id": "call_paris", "name": "get_weather", "arguments": '{"city": "Paris"}'},
    {"id": "call_rome", "name": "get_weather", "arguments": '{"city": "Rome"}'},
    {"id": "call_oslo", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
]


def stored_turns(proxy_url: str, conversation: str) -> list[dict[str, Any]]:
    stored = httpx.get(
        f"{proxy_url}/conversations/{conversation}", headers={"Authorization": f"Bearer {KEY}"}
    ).json()
    turns: list[dict[str, Any]] = stored["turns"]
    return turns


def stored_turn_when_done(http: httpx.Client, proxy_url: str, conversation: str) -> dict[str, Any]:
    for _ in range(1000):
        r = http.get(
            f"{proxy_url}/conversations/{conversation}", headers={"Authorization": f"Bearer {KEY}"}
        )
        if r.status_code == 200:
            turn: dict[str, Any] = r.json()["turns"][0]
            return turn
        time.sleep(0.01)
    raise AssertionError("the turn was never stored")


def test_interleaved_tool_calls_come_out_one_block_after_another(upstream: FakeUpstream) -> None:
    upstream.script(Stream(INTERLEAVED_CALLS), Stream(INTERLEAVED_CALLS))
    body = {
        "model": "m",
        "max_tokens": 100,
        "stream": True,
        "messages": [{"role": "user", "content": "Weather in Paris, Rome and Oslo?"}],
        "tools": [WEATHER],
    }
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.post(f"{proxy.url}/messages", json=body, headers={"x-api-key": KEY}, timeout=30)
        del body["stream"]
        with client(proxy.base).messages.stream(**body) as s:  # type: ignore[arg-type]
            seen = [(e.type, getattr(e, "index", None)) for e in s]
            final = s.get_final_message()
            conversation = s.response.headers["x-conversation-id"]
        turns = stored_turns(proxy.url, r.headers["x-conversation-id"])
        turns += stored_turns(proxy.url, conversation)
    events = parse_events(r.content)
    assert_blocks_in_order(events)  # block 0's pieces went out after block 1 had started
    starts = [d["content_block"]["type"] for n, d in events if n == "content_block_start"]
    assert starts == ["thinking", "text", "tool_use", "tool_use", "tool_use"]
    # the SDK's own events, in the same order
    raw = [(t, i) for t, i in seen if t.startswith("content_block")]
    assert_blocks_in_order([(t, {"index": i}) for t, i in raw])
    assert [b.type for b in final.content] == starts
    assert [(b.id, b.input) for b in final.content if b.type == "tool_use"] == [
        ("call_paris", {"city": "Paris"}),
        ("call_rome", {"city": "Rome"}),
        ("call_oslo", {"city": "Oslo"}),
    ]
    assert final.stop_reason == "tool_use"
    streamed = accumulate(events).content
    assert [(b.id, b.input) for b in streamed if b.type == "tool_use"] == [
        (b.id, b.input) for b in final.content if b.type == "tool_use"
    ]
    # the stored turns hold the calls as the upstream sent them
    for turn in turns:
        assert turn["toolCalls"] == STORED_CALLS
        assert turn["complete"] is True


def test_a_stream_cut_amid_interleaved_calls_loses_and_repeats_nothing(
    upstream: FakeUpstream,
) -> None:
    upstream.script(Stream(INTERLEAVED_CALLS, cut_after=6))  # before rome's last piece
    body = {
        "model": "m",
        "max_tokens": 100,
        "stream": True,
        "messages": [{"role": "user", "content": "Weather?"}],
        "tools": [WEATHER],
    }
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.post(f"{proxy.url}/messages", json=body, headers={"x-api-key": KEY}, timeout=30)
        turn = stored_turns(proxy.url, r.headers["x-conversation-id"])[0]
    events = parse_events(r.content)
    assert_blocks_in_order(events)
    assert events[-1][0] == "error"
    arguments: dict[int, str] = {}
    for _, data in events:
        if data.get("delta", {}).get("type") == "input_json_delta":
            arguments[data["index"]] = (
                arguments.get(data["index"], "") + data["delta"]["partial_json"]
            )
    sent = {2: '{"city": "Paris"', 3: '{"city": "Ro', 4: '{"city": "Oslo"}'}
    assert arguments == sent  # each piece the upstream sent before the cut, once
    assert turn["complete"] is False
    assert [c["arguments"] for c in turn["toolCalls"]] == list(sent.values())


def test_a_client_gone_amid_interleaved_calls_leaves_the_turn_as_the_upstream_sent_it(
    upstream: FakeUpstream,
) -> None:
    # the upstream waits after oslo's call (the client has seen paris's start)
    stream = Stream(INTERLEAVED_CALLS, gate_after=6)
    upstream.script(stream)
    body = {
        "model": "m",
        "max_tokens": 100,
        "stream": True,
        "messages": [{"role": "user", "content": "Weather?"}],
        "tools": [WEATHER],
    }
    with running_proxy(route_config(upstream)) as proxy, httpx.Client(timeout=30) as http:
        with http.stream(
            "POST", f"{proxy.url}/messages", json=body, headers={"x-api-key": KEY}
        ) as r:
            for raw in r.iter_raw():
                if b"call_paris" in raw:
                    break
        try:
            # stored once the proxy saw the client go: what the upstream sent
            # until then, nothing the gate holds back
            turn = stored_turn_when_done(http, proxy.url, r.headers["x-conversation-id"])
        finally:
            stream.gate.set()
        assert upstream.disconnected.wait(5)  # and the upstream was let go
    assert turn["complete"] is False
    assert turn["toolCalls"] == [
        {"id": "call_paris", "name": "get_weather", "arguments": '{"city": "Paris"'},
        {"id": "call_rome", "name": "get_weather", "arguments": '{"city": "Ro'},
        {"id": "call_oslo", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
    ]


# -- an upstream that answers with the legacy function_call -------------------------


def legacy_stream() -> Stream:
    return Stream(
        [
            chunk(
                {
                    "role": "assistant",
                    "content": None,
                    "function_call": {"name": "get_weather", "arguments": ""},
                }
            ),
            chunk({"function_call": {"arguments": '{"city":'}}),
            chunk({"function_call": {"arguments": ' "Paris"}'}}),
            chunk({}, "function_call"),
        ]
    )


def test_a_legacy_function_call_is_a_tool_use_block(upstream: FakeUpstream) -> None:
    call = {"name": "get_weather", "arguments": '{"city": "Rome"}'}
    upstream.script(
        legacy_stream(),
        Json(completion({"content": None, "function_call": call}, "function_call")),
        Json(completion({"content": "Sunny."})),
    )
    question: list[dict[str, Any]] = [{"role": "user", "content": "Weather?"}]
    with running_proxy(route_config(upstream)) as proxy:
        sdk = client(proxy.base)
        with sdk.messages.stream(
            model="m",
            max_tokens=100,
            messages=question,  # type: ignore[arg-type]
            tools=[WEATHER],  # type: ignore[list-item]
        ) as s:
            streamed = s.get_final_message()
        whole = sdk.messages.create(model="m", max_tokens=100, messages=question, tools=[WEATHER])  # type: ignore[arg-type, list-item]
        tool = whole.content[0]
        assert tool.type == "tool_use"
        # the call's result goes back as a tool result for the id the proxy gave
        question += [
            {"role": "assistant", "content": [tool.model_dump()]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool.id, "content": "sunny"}],
            },
        ]
        sdk.messages.create(model="m", max_tokens=100, messages=question, tools=[WEATHER])  # type: ignore[arg-type, list-item]
    for message, city in ((streamed, "Paris"), (whole, "Rome")):
        assert [b.type for b in message.content] == ["tool_use"]
        block = message.content[0]
        assert block.type == "tool_use"
        assert (block.name, block.input) == ("get_weather", {"city": city})
        assert block.id.startswith("toolu_")
        assert message.stop_reason == "tool_use"
    assert streamed.content[0].id != whole.content[0].id  # type: ignore[union-attr]
    sent = upstream.chat_requests()[2].json["messages"]
    assert sent[1]["tool_calls"][0]["id"] == tool.id
    assert sent[2] == {"role": "tool", "tool_call_id": tool.id, "content": "sunny"}


def test_a_legacy_function_call_streamed_to_a_whole_request_adds_up(
    upstream: FakeUpstream,
) -> None:
    upstream.script(legacy_stream())  # an upstream that streams though not asked to
    with running_proxy(route_config(upstream)) as proxy:
        message = client(proxy.base).messages.create(
            model="m",
            max_tokens=100,
            messages=[{"role": "user", "content": "Weather?"}],
            tools=[WEATHER],  # type: ignore[list-item]
        )
    assert upstream.chat_requests()[0].json.get("stream") is not True
    tool = message.content[0]
    assert tool.type == "tool_use"
    assert (tool.name, tool.input) == ("get_weather", {"city": "Paris"})
    assert message.stop_reason == "tool_use"


# -- top_k, tool errors, keep-alives ------------------------------------------------------


@pytest.mark.parametrize(
    ("dialect", "kept"), [("openai", True), ("deepseek", True), ("vllm", True), ("groq", False)]
)
def test_top_k_goes_to_every_upstream_but_the_strict_ones(
    upstream: FakeUpstream, dialect: str, kept: bool
) -> None:
    upstream.script(Json(completion({"content": "ok"})))
    with running_proxy(route_config(upstream, dialect=dialect)) as proxy:
        raw = client(proxy.base).messages.with_raw_response.create(
            model="m",
            max_tokens=50,
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"top_k": 40},  # (this SDK version has no top_k argument)
        )
    assert raw.parse().content[0].text == "ok"  # type: ignore[union-attr]
    sent = upstream.chat_requests()[0].json
    if kept:
        assert sent["top_k"] == 40
        assert "x-proxy-dropped-fields" not in raw.headers
    else:
        assert "top_k" not in sent  # Groq refuses a property it does not know
        assert raw.headers["x-proxy-dropped-fields"] == "top_k"


def test_a_failed_tool_result_says_so_to_the_chat_upstream(upstream: FakeUpstream) -> None:
    upstream.script(Json(completion({"content": "That city does not exist."})))
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "X"}}
    call2 = {**call, "id": "toolu_2"}
    results = [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": "no such city: X",
            "is_error": True,
        },
        {
            "type": "tool_result",
            "tool_use_id": "toolu_2",
            "content": [{"type": "text", "text": "timed out"}],
            "is_error": True,
        },
    ]
    messages: Any = [
        {"role": "user", "content": "Weather in X?"},
        {"role": "assistant", "content": [call, call2]},
        {"role": "user", "content": results},
    ]
    with running_proxy(route_config(upstream)) as proxy:
        client(proxy.base).messages.create(
            model="m",
            max_tokens=50,
            messages=messages,
            tools=[WEATHER],  # type: ignore[list-item]
        )
    sent = upstream.chat_requests()[0].json["messages"]
    # chat's tool message has no is_error: the failure is in its text
    assert sent[2:] == [
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Error: no such city: X"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: timed out"},
    ]


def test_message_start_names_the_upstreams_model_after_a_keep_alive(
    upstream: FakeUpstream,
) -> None:
    answer = [
        b": keep-alive\n\n",  # before the first chunk (OpenRouter sends these)
        chunk({"role": "assistant", "content": "Hello"}, model="up-model"),
        chunk({}, "stop", model="up-model"),
    ]
    upstream.script(Stream(answer), Stream(answer))
    question: Any = [{"role": "user", "content": "hi"}]
    with running_proxy(route_config(upstream)) as proxy:
        with client(proxy.base).messages.stream(
            model="asked-model", max_tokens=50, messages=question
        ) as stream:
            message = stream.get_final_message()
        r = httpx.post(
            f"{proxy.url}/messages",
            headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
            json={"model": "asked-model", "max_tokens": 50, "stream": True, "messages": question},
            timeout=30,
        )
    assert message.model == "up-model"
    assert message.content[0].text == "Hello"  # type: ignore[union-attr]
    blocks = [b for b in r.content.split(b"\n\n") if b.strip()]
    # the keep-alive before message_start stays a comment: the stream begins with message_start
    assert blocks[0].startswith(b":")
    events = parse_events(b"\n\n".join(blocks[1:]))
    assert events[0][0] == "message_start"
    assert events[0][1]["message"]["model"] == "up-model"
    assert accumulate(events).content[0].text == "Hello"  # type: ignore[union-attr]
