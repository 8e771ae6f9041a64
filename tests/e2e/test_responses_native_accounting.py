"""What a Responses route (`api: responses`) says about a request is about
the body it sends upstream: X-Context-Tokens-* count the reasoning items'
text that goes (an `encrypted_content` is opaque and counts nothing), the
reasoning metrics move under dialect `responses` (restored, or found and
not restored: a turn made through a route to another upstream, whose items
this one cannot read), and X-Reasoning-Dialect says `responses` on every
answer, as a Messages route says `messages`."""

from __future__ import annotations

from typing import Any

import httpx
import openai

from tests.harness import FakeUpstream, Json, Stream, running_proxy
from tests.metrics_samples import moved, scrape
from tests.test_responses_native import BASE, message, upstream_stream

KEY = {"Authorization": "Bearer sk-native", "X-Conversation-Id": "weather"}
THOUGHT = "The forecast service wants a city name, so I ask it for Oslo. " * 150
QUESTION = {"role": "user", "content": "Weather in Oslo?"}
CALL = {
    "id": "fc_1",
    "type": "function_call",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": '{"city":"Oslo"}',
    "status": "completed",
}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "-3 °C"}
ENCRYPTED = {"store": False, "include": ["reasoning.encrypted_content"]}


def called(summary: str = THOUGHT) -> dict[str, Any]:
    reasoning = {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": summary}],
        "encrypted_content": "gAAAA-upstream-opaque",
    }
    return {
        **BASE,
        "id": "resp_1",
        "status": "completed",
        "output": [reasoning, CALL],
        "usage": {"input_tokens": 11, "output_tokens": 7, "total_tokens": 18},
    }


ANSWERED = {
    **BASE,
    "id": "resp_2",
    "status": "completed",
    "output": [message("Cold.")],
    "usage": {"input_tokens": 30, "output_tokens": 2, "total_tokens": 32},
}


def config(first: FakeUpstream, second: FakeUpstream | None = None) -> dict[str, Any]:
    routes = [{"name": "a", "models": ["gpt-a"], "upstream": first.url, "api": "responses"}]
    if second is not None:
        routes.append(
            {"name": "b", "models": ["gpt-b"], "upstream": second.url, "api": "responses"}
        )
    return {"routes": routes}


def respond(base: str, model: str, items: Any) -> httpx.Response:
    body = {"model": model, "input": items, **ENCRYPTED}
    response = httpx.post(f"{base}/v1/responses", headers=KEY, json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response


def notes(base: str) -> list[dict[str, Any]]:
    """The egress notes of the conversation's latest turn."""
    turns = httpx.get(f"{base}/v1/conversations/weather", headers=KEY, timeout=10).json()["turns"]
    out: list[dict[str, Any]] = turns[-1]["egress"]["messages"]
    return out


def test_reasoning_the_client_sends_back_is_counted_once_and_moves_no_metric(
    upstream: FakeUpstream,
) -> None:
    upstream.script(Json(called()), Json(ANSWERED))
    with running_proxy(config(upstream)) as proxy:
        first = respond(proxy.base, "gpt-a", [QUESTION]).json()
        before = scrape(proxy.base)
        sent = respond(proxy.base, "gpt-a", [QUESTION, *first["output"], OUTPUT])
        after = scrape(proxy.base)
        thought = proxy.runtime.count(THOUGHT)
    went = upstream.requests[-1].json["input"]
    assert [i.get("type") for i in went] == [None, "reasoning", "function_call", OUTPUT["type"]]
    effective = int(sent.headers["x-context-tokens-effective"])
    assert thought < effective < thought + 100  # the summary goes, and counts once
    assert int(sent.headers["x-context-tokens-raw"]) == effective
    assert sent.headers["x-reasoning-dialect"] == "responses"
    assert moved(before, after, "reasoning_proxy_turns_stripped_total") == {}
    assert moved(before, after, "reasoning_proxy_turns_reinjected_total") == {}


def test_restored_reasoning_counts_what_goes_and_moves_reinjected(upstream: FakeUpstream) -> None:
    upstream.script(Json(called()), Json(ANSWERED))
    with running_proxy(config(upstream)) as proxy:
        respond(proxy.base, "gpt-a", [QUESTION])
        before = scrape(proxy.base)
        sent = respond(proxy.base, "gpt-a", [QUESTION, CALL, OUTPUT])
        after = scrape(proxy.base)
        thought = proxy.runtime.count(THOUGHT)
    went = upstream.requests[-1].json["input"][1]
    # the upstream's own item, its envelope alone: opaque, it counts nothing
    assert went == {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [],
        "encrypted_content": "gAAAA-upstream-opaque",
    }
    effective = int(sent.headers["x-context-tokens-effective"])
    assert effective < 100
    assert int(sent.headers["x-context-tokens-raw"]) >= effective + thought
    assert sent.headers["x-reasoning-dialect"] == "responses"
    assert moved(before, after, "reasoning_proxy_turns_reinjected_total") == {"responses": 1.0}
    assert moved(before, after, "reasoning_proxy_turns_stripped_total") == {}


def test_another_upstreams_turn_is_noted_and_counted_as_stripped(
    upstream: FakeUpstream, other: FakeUpstream
) -> None:
    upstream.script(Json(called("Need the weather.")))
    other.script(Json(ANSWERED))
    with running_proxy(config(upstream, other)) as proxy:
        respond(proxy.base, "gpt-a", [QUESTION])
        before = scrape(proxy.base)
        respond(proxy.base, "gpt-b", [QUESTION, CALL, OUTPUT])
        after = scrape(proxy.base)
        (note,) = notes(proxy.base)
    assert [i.get("type") for i in other.requests[-1].json["input"]] == [
        None,
        "function_call",
        OUTPUT["type"],
    ]
    assert (note["action"], note["source"]) == ("stripped", "store")
    assert "another upstream" in note["why"]
    assert moved(before, after, "reasoning_proxy_turns_stripped_total") == {"responses": 1.0}
    assert moved(before, after, "reasoning_proxy_turns_reinjected_total") == {}


def test_every_answer_of_a_responses_route_names_its_dialect(upstream: FakeUpstream) -> None:
    error = {"error": {"message": "bad", "type": "invalid_request_error", "param": None}}
    upstream.script(
        Json({**ANSWERED, "output": [message("Hi.")]}),
        Stream([upstream_stream(["Hi."])], done=False),
        Json({**error, "code": None}, status=400),
    )
    with running_proxy(config(upstream)) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key="sk-native", max_retries=0)
        whole = client.responses.with_raw_response.create(model="gpt-a", input="Hi")
        with client.responses.with_streaming_response.create(
            model="gpt-a", input="Hi", stream=True
        ) as streamed:
            streamed.read()
        failed = httpx.post(
            f"{proxy.url}/responses", headers=KEY, json={"model": "gpt-a", "input": "Hi"}
        )
    assert failed.status_code == 400
    for headers in (whole.headers, streamed.headers, failed.headers):
        assert headers["x-reasoning-dialect"] == "responses"
        assert 0 < int(headers["x-context-tokens-effective"]) < 20


def test_input_tokens_counts_the_input_responses_would_send(upstream: FakeUpstream) -> None:
    upstream.script(
        Json(called()),
        Json({"object": "response.input_tokens", "input_tokens": 1234}),
        Json(ANSWERED),
    )
    with running_proxy(config(upstream)) as proxy:
        respond(proxy.base, "gpt-a", [QUESTION])
        before = scrape(proxy.base)
        counted = httpx.post(
            f"{proxy.url}/responses/input_tokens",
            headers=KEY,
            json={"model": "gpt-a", "input": [QUESTION, CALL, OUTPUT]},
            timeout=30,
        )
        after = scrape(proxy.base)
        respond(proxy.base, "gpt-a", [QUESTION, CALL, OUTPUT])
    assert counted.json() == {"object": "response.input_tokens", "input_tokens": 1234}
    count, sent = upstream.requests[1:]
    assert count.path == "/v1/responses/input_tokens"
    assert count.json["input"] == sent.json["input"]
    assert [i.get("type") for i in count.json["input"]][:2] == [None, "reasoning"]
    assert moved(before, after, "reasoning_proxy_turns_reinjected_total") == {}
