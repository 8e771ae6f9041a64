"""A Responses upstream's stream (`api: responses`) that the proxy ends
(the upstream closes, resets or goes quiet past `timeouts.idle` mid-answer)
ends with `response.failed` whose Response lists the items the client saw
begun, as far as it got them and `incomplete`, as on a chat route: the
answer text and reasoning summary so far, a function call's arguments so
far. (Its output was only the items already done: an SDK that reads the
final Response lost the text it had streamed.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.test_responses_native_cut_turn import BASE, event, started
from tests.harness import FakeUpstream, Stream, running_proxy

KEY = {"Authorization": "Bearer sk-native-failed"}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    up = FakeUpstream().start()
    yield up
    up.stop()


@pytest.fixture(scope="module")
def proxy_url(upstream: FakeUpstream) -> Iterator[str]:
    route = {
        "name": "native",
        "models": ["*"],
        "upstream": upstream.url,
        "api": "responses",
        "timeouts": {"idle": 1.0},
    }
    with running_proxy({"routes": [route]}) as proxy:
        yield proxy.base


def cut(events: list[bytes], how: str) -> Stream:
    if how == "stall":
        return Stream(events, done=False, hang_after=len(events))
    return Stream([*events, b"unsent"], done=False, cut_after=len(events), cut=how)


def events_of(body: bytes) -> list[dict[str, Any]]:
    return [
        json.loads(line[len("data: ") :])
        for line in body.decode().splitlines()
        if line.startswith("data: ")
    ]


def post(base: str) -> list[dict[str, Any]]:
    body = {"model": "m", "stream": True, "input": "hi"}
    r = httpx.post(base + "/v1/responses", json=body, headers=KEY, timeout=20)
    assert r.status_code == 200, r.text
    return events_of(r.content)


@pytest.mark.parametrize("how", ["close", "reset", "stall"])
def test_the_open_reasoning_and_message_are_listed_incomplete(
    upstream: FakeUpstream, proxy_url: str, how: str
) -> None:
    upstream.script(cut(started(["Let me ", "see."], ["Hel", "lo"]), how))
    events = post(proxy_url)
    last = events[-1]
    assert last["type"] == "response.failed", events
    sent = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    summary = "".join(
        e["delta"] for e in events if e["type"] == "response.reasoning_summary_text.delta"
    )
    reasoning, message = last["response"]["output"]
    assert reasoning["id"] == "rs_up1"
    assert reasoning["status"] == "incomplete"
    assert [p["text"] for p in reasoning["summary"]] == [summary] == ["Let me see."]
    assert message["id"] == "msg_up1"
    assert message["status"] == "incomplete"
    assert [p["text"] for p in message["content"]] == [sent] == ["Hello"]


def test_an_open_function_call_is_listed_with_its_arguments_so_far(
    upstream: FakeUpstream, proxy_url: str
) -> None:
    message = {"id": "msg_up1", "type": "message", "role": "assistant", "status": "completed"}
    done = {**message, "content": [{"type": "output_text", "text": "Hello", "annotations": []}]}
    call = {"id": "fc_up1", "type": "function_call", "call_id": "call_up1", "name": "lookup"}
    where = {"item_id": "fc_up1", "output_index": 1}
    events = [
        *started([], ["Hel", "lo"]),
        event("response.output_item.done", output_index=0, item=done),
        event("response.output_item.added", output_index=1, item={**call, "arguments": ""}),
        event("response.function_call_arguments.delta", **where, delta='{"q": '),
        event("response.function_call_arguments.delta", **where, delta='"ab'),
    ]
    upstream.script(cut(events, "close"))
    last = post(proxy_url)[-1]
    assert last["type"] == "response.failed"
    [kept, open_call] = last["response"]["output"]
    assert kept["id"] == "msg_up1"
    assert kept["status"] == "completed"
    assert open_call["id"] == "fc_up1"
    assert open_call["status"] == "incomplete"
    assert open_call["arguments"] == '{"q": "ab'


def test_the_openai_sdk_gets_the_text_it_streamed_in_the_failed_response(
    upstream: FakeUpstream, proxy_url: str
) -> None:
    upstream.script(cut(started([], ["Hel", "lo"]), "reset"))
    client = openai.OpenAI(base_url=proxy_url + "/v1", api_key="sk-native-failed", max_retries=0)
    try:
        events = list(client.responses.create(model="m", input="hi", stream=True))
    finally:
        client.close()
    assert events[-1].type == "response.failed"
    response = events[-1].response
    assert response.output_text == "Hello"
    assert response.error is not None
    assert "upstream_disconnected" in response.error.message


def test_a_response_failed_before_any_item_began_lists_none(
    upstream: FakeUpstream, proxy_url: str
) -> None:
    created = event("response.created", response={**BASE, "status": "in_progress"})
    upstream.script(cut([created], "close"))
    last = post(proxy_url)[-1]
    assert last["type"] == "response.failed"
    assert last["response"]["output"] == []
