"""`previous_response_id` chains whose older links are gone, end to end
(the real server, a fake chat upstream, the openai SDK): a chain goes on
from the links still stored, back from the named one to the first that is
not (evicted by `max_conversations`, expired, deleted), as `input_items`
lists it; only the named response missing is a 400. A chain in use is
written again, so it lives `ttl_seconds` after its last use."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.harness import FakeUpstream, Json, ProxyServer, route_config, running_proxy

KEY = "sk-test-chains"


@pytest.fixture
def sdk() -> Iterator[Any]:
    clients: list[openai.OpenAI] = []

    def make(proxy: ProxyServer) -> openai.OpenAI:
        made = openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0)
        clients.append(made)
        return made

    yield make
    for made in clients:
        made.close()


def answer(text: str) -> Json:
    return Json(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "upstream-model",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
        }
    )


def call_answer() -> Json:
    call = {
        "id": "call_paris",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return Json(
        {
            "id": "chatcmpl-0",
            "object": "chat.completion",
            "created": 1,
            "model": "upstream-model",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        }
    )


WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def chain(sdk: openai.OpenAI, upstream: FakeUpstream, turns: int, pause: float = 0.0) -> list[str]:
    """`turns` responses, each continuing the one before; their ids."""
    ids: list[str] = []
    for n in range(turns):
        upstream.script(answer(f"answer {n}"))
        made = sdk.responses.create(
            model="m", input=f"turn {n}", previous_response_id=ids[-1] if ids else None
        )
        assert made.status == "completed"
        ids.append(made.id)
        if pause and n < turns - 1:
            time.sleep(pause)
    return ids


def last_sent(upstream: FakeUpstream) -> list[tuple[str, Any]]:
    return [(m["role"], m.get("content")) for m in upstream.chat_requests()[-1].json["messages"]]


def test_a_chain_whose_oldest_links_were_evicted_goes_on_from_those_left(
    upstream: FakeUpstream, sdk: Any
) -> None:
    """max_conversations: 3 keeps the 3 newest stored responses; the 4th
    turn used to be a 400 once the 1st was evicted, though the response it
    named was still there."""
    config = route_config(upstream, top={"store": {"max_conversations": 3}})
    with running_proxy(config) as proxy:
        client = sdk(proxy)
        ids = chain(client, upstream, 6)  # each turn from the 4th on lost a link first
        assert client.responses.retrieve(ids[-1]).id == ids[-1]
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(ids[0])
        upstream.script(answer("answer 6"))
        client.responses.create(model="m", input="turn 6", previous_response_id=ids[-1])
    # the history is what the store still holds: responses 3, 4 and 5
    assert last_sent(upstream) == [
        ("user", "turn 3"),
        ("assistant", "answer 3"),
        ("user", "turn 4"),
        ("assistant", "answer 4"),
        ("user", "turn 5"),
        ("assistant", "answer 5"),
        ("user", "turn 6"),
    ]


def test_a_deleted_link_ends_the_history_there_as_input_items_lists_it(
    upstream: FakeUpstream, sdk: Any
) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        client = sdk(proxy)
        ids = chain(client, upstream, 3)
        client.responses.delete(ids[1])
        upstream.script(answer("answer 3"))
        made = client.responses.create(model="m", input="turn 3", previous_response_id=ids[2])
        assert made.status == "completed"
        listed = httpx.get(
            f"{proxy.url}/responses/{made.id}/input_items?order=asc",
            headers={"Authorization": f"Bearer {KEY}"},
        ).json()["data"]
    sent = last_sent(upstream)
    assert sent == [
        ("user", "turn 2"),
        ("assistant", "answer 2"),
        ("user", "turn 3"),
    ]
    texts = [(i.get("role"), i["content"][0]["text"]) for i in listed]
    assert texts == sent


def test_the_named_response_missing_is_still_a_400(upstream: FakeUpstream, sdk: Any) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        client = sdk(proxy)
        ids = chain(client, upstream, 2)
        client.responses.delete(ids[1])
        before = len(upstream.requests)
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(model="m", input="again", previous_response_id=ids[1])
        assert len(upstream.requests) == before
    assert info.value.body["code"] == "previous_response_not_found"  # type: ignore[index]


def test_a_tool_output_whose_call_is_in_a_link_gone_is_left_out(
    upstream: FakeUpstream, sdk: Any
) -> None:
    """An Agents SDK tool loop: the call is in the first response, its
    output in the second's input. With the first gone, the output answers
    no call: it is left out (chat refuses it), not a 400."""
    with running_proxy(route_config(upstream)) as proxy:
        client = sdk(proxy)
        upstream.script(call_answer())
        first = client.responses.create(model="m", input="Weather?", tools=[WEATHER])
        upstream.script(answer("18 C."))
        output: Any = {"type": "function_call_output", "call_id": "call_paris", "output": "18"}
        second = client.responses.create(
            model="m", input=[output], tools=[WEATHER], previous_response_id=first.id
        )
        client.responses.delete(first.id)
        upstream.script(answer("You're welcome."))
        third = client.responses.create(model="m", input="Thanks!", previous_response_id=second.id)
        assert third.status == "completed"
    assert last_sent(upstream) == [("assistant", "18 C."), ("user", "Thanks!")]


def test_a_chain_in_use_outlives_the_ttl_of_its_first_link(
    upstream: FakeUpstream, sdk: Any
) -> None:
    """ttl_seconds counts from a conversation's last write: a chain used
    every 0.8 s under a 2 s TTL keeps its first link after 2.4 s (each
    response used to expire 2 s after it was made, whatever came after)."""
    config = route_config(upstream, top={"store": {"ttl_seconds": 2}})
    with running_proxy(config) as proxy:
        client = sdk(proxy)
        started = time.monotonic()
        ids = chain(client, upstream, 4, pause=0.8)
        assert time.monotonic() - started > 2.2
        upstream.script(answer("answer 4"))
        client.responses.create(model="m", input="turn 4", previous_response_id=ids[-1])
        first = client.responses.retrieve(ids[0])
    assert first.id == ids[0]
    assert last_sent(upstream)[0] == ("user", "turn 0")
    assert len(last_sent(upstream)) == 9
