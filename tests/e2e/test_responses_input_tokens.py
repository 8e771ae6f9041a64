"""POST /v1/responses/input_tokens (`client.responses.input_tokens.count`)
through the real server with the openai SDK: to a chat upstream the proxy
counts the request as the Responses door would send it (nothing goes
upstream), so the count equals X-Context-Tokens-Effective of the same
request sent; to a Responses upstream the request is passed through. And
POST /v1/responses/compact: passed to a Responses upstream, a 404 that says
why to a chat upstream."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.casefiles import WEATHER_RESPONSES_TOOL, chunk
from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy

KEY = "sk-test-input-tokens"
TOOL: Any = WEATHER_RESPONSES_TOOL
THOUGHT = "Paris, so Celsius; the user wants today's weather, not a forecast. " * 40


def sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key=KEY, max_retries=0)


def answer(text: str) -> Json:
    message = {"role": "assistant", "content": text}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return Json({"id": "c", "object": "chat.completion", "model": "m", "choices": [choice]})


def tool_call_stream() -> Stream:
    call = {
        "index": 0,
        "id": "call_paris",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    return Stream(
        [
            chunk({"role": "assistant", "reasoning_content": THOUGHT}),
            chunk({"tool_calls": [call]}),
            chunk({}, "tool_calls"),
        ]
    )


def test_the_count_is_the_effective_count_of_the_request_sent(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream)) as proxy, sdk(proxy.url) as client:
        short = client.responses.input_tokens.count(model="m", input="Hi")
        request: Any = {
            "model": "m",
            "instructions": "Answer briefly.",
            "input": "What is the weather in Paris? " * 30,
            "tools": [TOOL],
        }
        counted = client.responses.input_tokens.count(**request)
        assert upstream.requests == []  # counting sends nothing
        upstream.script(answer("Sunny."))
        sent = client.responses.with_raw_response.create(**request)
    assert short.object == "response.input_tokens"
    assert 0 < short.input_tokens < 20
    assert counted.input_tokens == int(sent.headers["x-context-tokens-effective"])
    assert counted.input_tokens > short.input_tokens + 150


@pytest.mark.parametrize(("dialect", "sent_back"), [("kimi", True), ("groq", False)])
def test_a_tool_loop_is_counted_with_the_reasoning_the_route_sends_back(
    upstream: FakeUpstream, dialect: str, sent_back: bool
) -> None:
    """The client sends the function call back without its reasoning (as
    most do): kimi gets it back from the store, groq never gets it."""
    with running_proxy(route_config(upstream, dialect=dialect)) as proxy, sdk(proxy.url) as client:
        upstream.script(tool_call_stream())
        first = client.responses.create(model="m", input="Weather in Paris?", tools=[TOOL])
        (call,) = [item for item in first.output if item.type == "function_call"]
        request: Any = {
            "model": "m",
            "tools": [TOOL],
            "input": [
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "type": "function_call",
                    "call_id": call.call_id,
                    "name": call.name,
                    "arguments": call.arguments,
                },
                {"type": "function_call_output", "call_id": call.call_id, "output": "21 C"},
            ],
        }
        before = len(upstream.requests)
        counted = client.responses.input_tokens.count(**request).input_tokens
        assert len(upstream.requests) == before
        upstream.script(answer("21 C in Paris."))
        sent = client.responses.with_raw_response.create(**request)
        assistant = upstream.chat_requests()[-1].json["messages"][1]
    assert ("reasoning_content" in assistant) is sent_back
    assert counted == int(sent.headers["x-context-tokens-effective"])
    thought_tokens = len(THOUGHT) // 8  # far fewer than it has, far more than noise
    assert (counted > thought_tokens) is sent_back


def test_a_previous_response_is_counted(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream)) as proxy, sdk(proxy.url) as client:
        upstream.script(answer("A long answer. " * 100))
        first = client.responses.create(model="m", input="Tell me a story.", store=True)
        alone = client.responses.input_tokens.count(model="m", input="And then?")
        chained = client.responses.input_tokens.count(
            model="m", input="And then?", previous_response_id=first.id
        )
        missing = httpx.post(
            f"{proxy.url}/responses/input_tokens",
            json={"model": "m", "input": "x", "previous_response_id": "resp_unknown"},
            headers={"Authorization": f"Bearer {KEY}"},
        )
    assert chained.input_tokens > alone.input_tokens + 250
    assert missing.status_code == 400
    assert missing.json()["error"]["param"] == "previous_response_id"


def test_bad_requests_get_openai_errors_and_nothing_is_sent(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        auth = {"Authorization": f"Bearer {KEY}"}
        url = f"{proxy.url}/responses/input_tokens"
        not_json = httpx.post(url, content=b"{", headers=auth)
        bad_field = httpx.post(url, json={"model": "m", "input": "x", "store": "yes"}, headers=auth)
        bad_header = httpx.post(
            url, json={"model": "m", "input": "x"}, headers={**auth, "X-Reasoning-Format": "?"}
        )
        get = httpx.get(url, headers=auth)
    assert not_json.status_code == 400
    assert not_json.json()["error"]["type"] == "invalid_request_error"
    assert bad_field.status_code == 400
    assert bad_field.json()["error"]["param"] == "store"
    assert bad_header.status_code == 400
    assert bad_header.json()["error"]["param"] == "X-Reasoning-Format"
    assert get.status_code == 405
    assert upstream.requests == []


def test_a_responses_upstream_counts_its_own(upstream: FakeUpstream) -> None:
    upstream.script(Json({"object": "response.input_tokens", "input_tokens": 4242}))
    config = route_config(upstream, api="responses", api_key="sk-route-key")
    with running_proxy(config) as proxy, sdk(proxy.url) as client:
        counted = client.responses.input_tokens.count(model="m", input="Hi")
    assert counted.input_tokens == 4242
    (request,) = upstream.requests
    assert request.path.endswith("/responses/input_tokens")
    assert request.json == {"model": "m", "input": "Hi"}
    assert request.headers.get("authorization") == "Bearer sk-route-key"


def test_a_responses_route_beside_a_chat_default_counts_upstream(upstream: FakeUpstream) -> None:
    """The chat route is the default, so the proxy answers input_tokens itself,
    and passes the request of a model whose route speaks Responses on."""
    native = {"name": "native", "models": ["gpt-*"], "upstream": upstream.url, "api": "responses"}
    config = {"routes": [native, {"name": "chat", "models": ["*"], "upstream": upstream.url}]}
    upstream.script(Json({"object": "response.input_tokens", "input_tokens": 77}))
    with running_proxy(config) as proxy, sdk(proxy.url) as client:
        native_count = client.responses.input_tokens.count(model="gpt-5", input="Hi")
        chat_count = client.responses.input_tokens.count(model="kimi", input="Hi")
    assert native_count.input_tokens == 77
    assert 0 < chat_count.input_tokens < 20
    (request,) = upstream.requests
    assert request.path.endswith("/responses/input_tokens")
    assert request.json == {"model": "gpt-5", "input": "Hi"}


def test_remote_compaction_to_a_chat_upstream_says_why_it_cannot(upstream: FakeUpstream) -> None:
    native = {"name": "native", "models": ["gpt-*"], "upstream": upstream.url, "api": "responses"}
    config = {"routes": [native, {"name": "chat", "models": ["*"], "upstream": upstream.url}]}
    compacted = {
        "id": "resp_c",
        "object": "response.compaction",
        "created_at": 1,
        "output": [{"type": "compaction", "id": "cmp_1", "encrypted_content": "opaque"}],
        "usage": {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 2,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 12,
        },
    }
    upstream.script(Json(compacted))
    with running_proxy(config) as proxy, sdk(proxy.url) as client:
        native_answer = client.responses.compact(model="gpt-5", input="Hi")
        with pytest.raises(openai.NotFoundError) as refused:
            client.responses.compact(model="kimi", input="Hi")
        get = httpx.get(f"{proxy.url}/responses/compact")
    assert native_answer.output[0].type == "compaction"
    error = refused.value.body
    assert isinstance(error, dict)
    assert error["code"] == "unsupported_endpoint"
    assert "Chat Completions upstream" in error["message"]
    assert get.status_code == 405
    (request,) = upstream.requests  # the chat route's request went nowhere
    assert request.path.endswith("/responses/compact")
