"""The Responses API door end to end: the real server on a real socket, a
fake chat completions upstream, and the openai SDK's `responses` client
(every streamed event also checked against the SDK's own event models)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.casefiles import WEATHER_RESPONSES_TOOL, chunk
from tests.harness import FakeUpstream, Json, ProxyServer, Stream, route_config, running_proxy

KEY = "sk-test-alice"
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
WEATHER_TOOL: Any = WEATHER_RESPONSES_TOOL
ENCRYPTED = ["reasoning.encrypted_content"]
# OpenRouter-style artefacts: what a native upstream must get back byte for byte
DETAILS = [
    {"type": "reasoning.text", "text": "I need the weather.", "index": 0, "signature": "sig-1=="},
    {"type": "reasoning.encrypted", "data": "b3BhcXVl", "index": 1},
]


@pytest.fixture
def proxy(upstream: FakeUpstream) -> Iterator[ProxyServer]:
    # re-injection switched on, so what goes back upstream shows what the proxy knew
    with running_proxy(route_config(upstream, reasoning={"include_in_context": True})) as server:
        yield server


_clients: list[openai.OpenAI] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _clients:
        _clients.pop().close()


def client(proxy: ProxyServer, key: str = KEY, **headers: str) -> openai.OpenAI:
    sdk = openai.OpenAI(
        base_url=proxy.url, api_key=key, max_retries=0, default_headers=headers or None
    )
    _clients.append(sdk)  # closed after the test
    return sdk


def answer_stream(reasoning: str = "The user greets me.", text: str = "Hello!") -> Stream:
    return Stream(
        [
            chunk({"role": "assistant", "reasoning_content": reasoning[:8]}),
            chunk({"reasoning_content": reasoning[8:]}),
            chunk({"content": text}),
            chunk({}, "stop"),
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "choices": [],
                "usage": {"prompt_tokens": 9, "completion_tokens": 6, "total_tokens": 15},
            },
        ]
    )


def tool_call_stream(details: list[Any] | None = None) -> Stream:
    first: dict[str, Any] = {"role": "assistant", "reasoning_content": "I need the weather."}
    if details is not None:
        first["reasoning_details"] = details
    call = {
        "index": 0,
        "id": "call_paris",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    return Stream([chunk(first), chunk({"tool_calls": [call]}), chunk({}, "tool_calls")])


def tool_call_completion(details: list[Any] | None = None) -> Json:
    """The same turn as `tool_call_stream`, whole."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": None,
        "reasoning_content": "I need the weather.",
        "tool_calls": [
            {
                "id": "call_paris",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    }
    if details is not None:
        message["reasoning_details"] = details
    return Json(
        {
            "id": "chatcmpl-0",
            "object": "chat.completion",
            "created": 1,
            "model": "upstream-model",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        }
    )


def completion(content: str, reasoning: str | None = None) -> Json:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return Json(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "upstream-model",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": 4,
                "completion_tokens": 3,
                "total_tokens": 7,
                "completion_tokens_details": {"reasoning_tokens": 2},
            },
        }
    )


def raw_events(proxy: ProxyServer, body: dict[str, Any], **headers: str) -> list[Any]:
    """POST a streamed request with httpx and validate every event with the
    SDK's ResponseStreamEvent model."""
    out = []
    with httpx.stream(
        "POST",
        f"{proxy.url}/responses",
        json={"stream": True, **body},
        headers={"Authorization": f"Bearer {KEY}", **headers},
        timeout=30,
    ) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = r.read()
    for block in raw.split(b"\n\n"):
        if not block or block.startswith(b":"):
            continue
        name, data = block.split(b"\n", 1)
        event = EVENTS.validate_json(data.removeprefix(b"data: "))
        assert name == b"event: " + event.type.encode()
        out.append(event)
    assert [e.sequence_number for e in out] == list(range(len(out)))
    return out


# -- create, streamed and not ---------------------------------------------------------------


def test_a_streamed_response_with_the_sdk(proxy: ProxyServer, upstream: FakeUpstream) -> None:
    upstream.script(answer_stream())
    with client(proxy).responses.stream(model="m", input="Hi") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert deltas == ["Hello!"]
    assert final.status == "completed"
    assert final.output_text == "Hello!"
    reasoning = final.output[0]
    assert reasoning.type == "reasoning"
    assert [s.text for s in reasoning.summary] == ["The user greets me."]
    assert reasoning.encrypted_content is None  # not asked for
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (9, 6)
    # the upstream got a chat request: the input as a user message, usage asked for
    sent = upstream.chat_requests()[0].json
    assert sent["messages"] == [{"role": "user", "content": "Hi"}]
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}


def test_every_streamed_event_matches_the_sdks_models(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    upstream.script(tool_call_stream())
    evs = raw_events(proxy, {"model": "m", "input": "Weather?", "tools": [WEATHER_TOOL]})
    assert [e.type for e in evs][:2] == ["response.created", "response.in_progress"]
    assert evs[-1].type == "response.completed"
    call = evs[-1].response.output[1]
    assert (call.type, call.name, call.call_id) == ("function_call", "get_weather", "call_paris")


def test_a_whole_response_with_the_sdk(proxy: ProxyServer, upstream: FakeUpstream) -> None:
    upstream.script(completion("4", reasoning="2 + 2 = 4."))
    response = client(proxy).responses.create(
        model="m", instructions="Be brief.", input="2 + 2?", include=ENCRYPTED
    )
    assert response.output_text == "4"
    assert response.output[0].type == "reasoning"
    assert response.output[0].summary[0].text == "2 + 2 = 4."
    assert (response.output[0].encrypted_content or "").startswith("rp1.")
    assert response.usage is not None
    assert response.usage.output_tokens_details.reasoning_tokens == 2
    assert response.instructions == "Be brief."
    sent = upstream.chat_requests()[0].json
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert "stream" not in sent


def test_each_delta_goes_out_before_the_upstream_sends_the_next(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    # the upstream stops after two events and holds the connection: the
    # client must see their deltas anyway
    upstream.script(
        Stream([chunk({"content": "one"}), chunk({"content": " two"})], hang_after=2, done=False)
    )
    seen: list[str] = []
    got_both = threading.Event()

    def read() -> None:
        with httpx.stream(
            "POST",
            f"{proxy.url}/responses",
            json={"model": "m", "input": "x", "stream": True},
            headers={"Authorization": f"Bearer {KEY}"},
            timeout=30,
        ) as r:
            for line in r.iter_lines():
                if line.startswith("data: ") and '"response.output_text.delta"' in line:
                    seen.append(orjson.loads(line[6:])["delta"])
                    if len(seen) == 2:
                        got_both.set()
                        return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert got_both.wait(10), seen
    assert seen == ["one", " two"]
    reader.join(10)


@pytest.mark.parametrize(
    ("content", "first_args", "order"),
    [
        # `<` might begin `<think>`, so the answer holds it back: it goes out
        # before the call, in a message ahead of it
        ("<", "", ["message", "function_call"]),
        # text before an unclosed block is held until the answer ends, so it
        # comes between the call's argument pieces: it waits for the call to end
        ("<<think>x", '{"city": ', ["reasoning", "function_call", "message"]),
    ],
    ids=["held-tag-start", "held-before-a-block"],
)
def test_held_text_never_cuts_the_call_that_follows_it(
    proxy: ProxyServer, upstream: FakeUpstream, content: str, first_args: str, order: list[str]
) -> None:
    start = {
        "index": 0,
        "id": "call_paris",
        "type": "function",
        "function": {"name": "get_weather", "arguments": first_args},
    }
    rest = '{"city": "Paris"}'.removeprefix(first_args)
    more = {"index": 0, "function": {"arguments": rest}}
    upstream.script(
        Stream(
            [
                chunk({"role": "assistant", "content": content}),
                chunk({"tool_calls": [start]}),
                chunk({"tool_calls": [more]}, "tool_calls"),
            ]
        )
    )
    evs = raw_events(proxy, {"model": "m", "input": "Weather?", "tools": [WEATHER_TOOL]})
    output = evs[-1].response.output
    assert [item.type for item in output] == order
    (call,) = [item for item in output if item.type == "function_call"]
    assert (call.call_id, call.name, call.arguments) == (
        "call_paris",
        "get_weather",
        '{"city": "Paris"}',
    )
    (message,) = [item for item in output if item.type == "message"]
    assert message.content[0].text == "<"


# -- reasoning across turns ---------------------------------------------------------------


def weather_loop(
    proxy: ProxyServer, upstream: FakeUpstream, *, keep_reasoning: bool, **create: Any
) -> dict[str, Any]:
    """A function-tool loop with the SDK, store off (the client keeps its
    items, as Codex does); returns the chat request of the second turn."""
    upstream.script(tool_call_stream(DETAILS), completion("18 C in Paris."))
    sdk = client(proxy)
    with sdk.responses.stream(
        model="m",
        input=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_TOOL],
        store=False,
        include=ENCRYPTED,
        **create,
    ) as stream:
        first = stream.get_final_response()
    items: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    for item in first.output:
        if item.type == "reasoning" and not keep_reasoning:
            continue
        items.append(item.model_dump(exclude_none=True))
    call = next(i for i in first.output if i.type == "function_call")
    items.append({"type": "function_call_output", "call_id": call.call_id, "output": "18 C"})
    second = sdk.responses.create(
        model="m", input=items, tools=[WEATHER_TOOL], store=False, include=ENCRYPTED
    )
    assert second.output_text == "18 C in Paris."
    return upstream.chat_requests()[1].json


def test_a_tool_loop_that_keeps_its_items_sends_the_upstream_its_own_reasoning_back(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    sent = weather_loop(proxy, upstream, keep_reasoning=True)
    assistant = sent["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["tool_calls"][0]["id"] == "call_paris"
    assert assistant["reasoning_content"] == "I need the weather."
    assert sent["messages"][2] == {"role": "tool", "tool_call_id": "call_paris", "content": "18 C"}


def test_the_envelope_brings_back_the_upstreams_artefacts_unchanged(
    upstream: FakeUpstream,
) -> None:
    config = route_config(
        upstream, dialect="openrouter", reasoning={"include_in_context": True, "format": "native"}
    )
    with running_proxy(config) as proxy:
        sent = weather_loop(proxy, upstream, keep_reasoning=True)
    assert sent["messages"][1]["reasoning_details"] == DETAILS


def test_a_tool_loop_that_drops_reasoning_items_gets_it_from_the_store(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    sent = weather_loop(proxy, upstream, keep_reasoning=False)
    assert sent["messages"][1]["reasoning_content"] == "I need the weather."


def test_another_tenants_envelope_is_ignored_and_counted(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    upstream.script(completion("Hello.", reasoning="Alice's private reasoning."))
    alice = client(proxy).responses.create(model="m", input="Hi", store=False, include=ENCRYPTED)
    envelope = alice.output[0].encrypted_content  # type: ignore[union-attr]
    assert envelope
    items: list[Any] = [
        {"role": "user", "content": "Hi"},
        {"type": "reasoning", "summary": [], "encrypted_content": envelope},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "x"}]},
        {"type": "reasoning", "summary": [], "encrypted_content": "rp1.forged-AAAAAAAAAAAAAAAA"},
        {"role": "user", "content": "and?"},
    ]
    upstream.reset()
    upstream.script(completion("fine"))
    bob = client(proxy, key="sk-test-bob").responses.create(model="m", input=items, store=False)
    assert bob.output_text == "fine"
    sent = upstream.chat_requests()[0].json
    assert "Alice" not in orjson.dumps(sent).decode()
    assert "reasoning_content" not in sent["messages"][1]
    metrics = httpx.get(f"{proxy.base}/metrics").text
    assert 'reasoning_proxy_sealed_rejected_total{door="responses"} 2.0' in metrics


def test_hidden_reasoning_still_round_trips_in_the_envelope(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    sdk = client(proxy, **{"X-Reasoning-Include-In-Response": "false"})
    upstream.script(tool_call_completion(), completion("done"))
    first = sdk.responses.create(
        model="m", input="Weather?", tools=[WEATHER_TOOL], store=False, include=ENCRYPTED
    )
    reasoning = first.output[0]
    assert reasoning.type == "reasoning"
    assert reasoning.summary == []
    assert "I need the weather" not in first.model_dump_json().replace(
        reasoning.encrypted_content or "", ""
    )
    items: list[Any] = [
        {"role": "user", "content": "Weather?"},
        reasoning.model_dump(exclude_none=True),
        first.output[1].model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": "call_paris", "output": "18 C"},
    ]
    sdk.responses.create(model="m", input=items, tools=[WEATHER_TOOL], store=False)
    assert upstream.chat_requests()[1].json["messages"][1]["reasoning_content"] == (
        "I need the weather."
    )


# -- stored responses ---------------------------------------------------------------------


def call_then_continue(sdk: openai.OpenAI, upstream: FakeUpstream) -> tuple[Response, Response]:
    """A weather call, and a second response continuing it by id with the
    call's output."""
    upstream.script(tool_call_completion(), completion("18 C."))
    first = sdk.responses.create(
        model="m", instructions="Use tools.", input="Weather in Paris?", tools=[WEATHER_TOOL]
    )
    call = first.output[1]
    assert call.type == "function_call"
    second = sdk.responses.create(
        model="m",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18 C"}],
        tools=[WEATHER_TOOL],
    )
    return first, second


def test_previous_response_id_continues_from_the_stored_response(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    sdk = client(proxy)
    first, second = call_then_continue(sdk, upstream)
    assert second.output_text == "18 C."
    assert second.previous_response_id == first.id
    sent = upstream.chat_requests()[1].json["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]  # instructions not inherited
    assert sent[1]["reasoning_content"] == "I need the weather."
    assert sent[1]["tool_calls"][0]["id"] == "call_paris"
    # and a third turn continues from the second, through the chain
    upstream.script(completion("You're welcome."))
    sdk.responses.create(model="m", previous_response_id=second.id, input="Thanks!")
    roles = [m["role"] for m in upstream.chat_requests()[2].json["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]


def test_get_and_delete_a_stored_response(proxy: ProxyServer, upstream: FakeUpstream) -> None:
    upstream.script(completion("Hi.", reasoning="A greeting."))
    sdk = client(proxy)
    created = sdk.responses.create(model="m", input="Hi", metadata={"k": "v"})
    got = sdk.responses.retrieve(created.id)
    assert got.id == created.id
    assert got.output_text == "Hi."
    assert got.metadata == {"k": "v"}
    assert got.output[0].encrypted_content is None  # type: ignore[union-attr]
    with_envelope = sdk.responses.retrieve(created.id, include=ENCRYPTED)
    assert (with_envelope.output[0].encrypted_content or "").startswith("rp1.")  # type: ignore[union-attr]
    # another tenant sees the same 404 as for an unknown id
    for key, response_id in (("sk-test-bob", created.id), (KEY, "resp_unknown")):
        with pytest.raises(openai.NotFoundError) as info:
            client(proxy, key=key).responses.retrieve(response_id)
        assert info.value.body["code"] == "response_not_found"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        client(proxy, key="sk-test-bob").responses.delete(created.id)
    # every response is answered in the foreground: nothing to cancel or to
    # stream again, and the error says so (another tenant's id stays a 404)
    for attempt in (
        lambda: sdk.responses.cancel(created.id),
        lambda: sdk.responses.retrieve(created.id, stream=True),
    ):
        with pytest.raises(openai.BadRequestError) as bad:
            attempt()
        assert "background" in bad.value.body["message"]  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        client(proxy, key="sk-test-bob").responses.cancel(created.id)
    sdk.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.delete(created.id)


def test_input_items_list_what_a_response_was_made_from(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    sdk = client(proxy)
    first, second = call_then_continue(sdk, upstream)
    # newest first (the API's default): its own input, then the first
    # response's output, then the first input
    listed = sdk.responses.input_items.list(second.id)
    kinds = [item.type for item in listed.data]
    assert kinds == ["function_call_output", "function_call", "reasoning", "message"]
    assert [item.id for item in listed.data[1:3]] == [first.output[1].id, first.output[0].id]
    question = listed.data[-1]
    assert question.type == "message"
    assert question.content[0].text == "Weather in Paris?"  # type: ignore[union-attr]
    assert listed.data[2].encrypted_content is None  # type: ignore[union-attr]
    shown = sdk.responses.input_items.list(second.id, include=ENCRYPTED, order="asc")
    assert [item.id for item in shown.data] == [item.id for item in reversed(listed.data)]
    assert (shown.data[1].encrypted_content or "").startswith("rp1.")  # type: ignore[union-attr]
    # the SDK's pages, one item each, follow `after` through the whole list
    paged = [item.id for item in sdk.responses.input_items.list(second.id, limit=1)]
    assert paged == [item.id for item in listed.data]
    for query, param in (({"limit": 0}, "limit"), ({"order": "up"}, "order")):
        with pytest.raises(openai.BadRequestError) as bad:
            sdk.responses.input_items.list(second.id, **query)  # type: ignore[arg-type]
        assert bad.value.body["param"] == param  # type: ignore[index]
    # another tenant's and an unknown id: the same 404
    for key, response_id in (("sk-test-bob", second.id), (KEY, "resp_unknown")):
        with pytest.raises(openai.NotFoundError) as info:
            client(proxy, key=key).responses.input_items.list(response_id)
        assert info.value.body["code"] == "response_not_found"  # type: ignore[index]
    # a deleted link ends the list there
    sdk.responses.delete(first.id)
    assert [i.type for i in sdk.responses.input_items.list(second.id).data] == [
        "function_call_output"
    ]


def test_item_references_bring_back_the_stored_items_they_name(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    """A client that keeps only ids (`item_reference`) gets the stored items
    in their place: a response's reasoning, call and answer by their output
    ids, and an item of the request's chain by the id its input list shows."""
    sdk = client(proxy)
    first, second = call_then_continue(sdk, upstream)
    question = sdk.responses.input_items.list(second.id, order="asc").data[0]
    reasoning, call = first.output[0], first.output[1]
    assert call.type == "function_call"
    upstream.script(completion("Still 18 C."))
    third = sdk.responses.create(
        model="m",
        previous_response_id=second.id,
        input=[
            {"type": "item_reference", "id": question.id},
            {"type": "item_reference", "id": reasoning.id},
            {"type": "item_reference", "id": call.id},
            {"type": "function_call_output", "call_id": call.call_id, "output": "18 C"},
            {"type": "item_reference", "id": second.output[-1].id},
            {"role": "user", "content": "And now?"},
        ],
        tools=[WEATHER_TOOL],
    )
    assert third.output_text == "Still 18 C."
    sent = upstream.chat_requests()[2].json["messages"]
    # the chain (user, assistant call, tool, assistant answer), then the referenced items
    assert [m["role"] for m in sent[4:]] == ["user", "assistant", "tool", "assistant", "user"]
    assert sent[4]["content"] == "Weather in Paris?"
    assert sent[5]["reasoning_content"] == "I need the weather."
    assert sent[5]["tool_calls"][0]["id"] == call.call_id
    assert sent[7]["content"] == "18 C."
    assert "x-proxy-dropped-fields" not in upstream.chat_requests()[2].headers
    # kept as sent: its input lists the items themselves
    listed = sdk.responses.input_items.list(third.id, order="asc").data
    assert [item.type for item in listed[-6:]] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "message",
        "message",
    ]


def test_an_item_reference_to_nothing_stored_is_a_400(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    upstream.script(completion("Hi.", reasoning="A greeting."), completion("Hi again."))
    sdk = client(proxy)
    kept = sdk.responses.create(model="m", input="Hi")
    unkept = sdk.responses.create(model="m", input="Hi", store=False)
    before = len(upstream.chat_requests())
    for key, item_id in (
        (KEY, "msg_unknown_0"),
        (KEY, unkept.output[-1].id),  # store: false keeps nothing to name
        ("sk-test-bob", kept.output[-1].id),  # another tenant's: the same
        (KEY, "not-an-id"),
    ):
        with pytest.raises(openai.BadRequestError) as bad:
            client(proxy, key=key).responses.create(
                model="m", input=[{"type": "item_reference", "id": item_id}]
            )
        body: Any = bad.value.body
        assert (body["param"], body["code"]) == ("input", "item_not_found")
        assert item_id in body["message"]
    assert len(upstream.chat_requests()) == before  # nothing went upstream


def test_store_false_keeps_no_response_but_keeps_the_turn(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    upstream.script(completion("Hi.", reasoning="A greeting."))
    sdk = client(proxy)
    raw = sdk.responses.with_raw_response.create(model="m", input="Hi", store=False)
    created = raw.parse()
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(created.id)
    with pytest.raises(openai.BadRequestError) as info:
        sdk.responses.create(model="m", input="again", previous_response_id=created.id)
    assert info.value.body["code"] == "previous_response_not_found"  # type: ignore[index]
    assert info.value.body["param"] == "previous_response_id"  # type: ignore[index]
    assert len(upstream.chat_requests()) == 1  # the refused one never went upstream
    # the turn itself is stored like any chat turn, and the conversation API shows it
    conversation = raw.headers["x-conversation-id"]
    stored = httpx.get(
        f"{proxy.url}/conversations/{conversation}", headers={"Authorization": f"Bearer {KEY}"}
    ).json()
    (turn,) = stored["turns"]
    assert turn["content"] == "Hi."
    assert [b["thought"] for b in turn["blocks"]] == ["A greeting."]


def test_a_stored_response_is_there_the_moment_the_stream_ends(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    for _ in range(5):
        upstream.script(answer_stream())
        evs = raw_events(proxy, {"model": "m", "input": "Hi"})
        response_id = evs[-1].response.id
        got = httpx.get(
            f"{proxy.url}/responses/{response_id}", headers={"Authorization": f"Bearer {KEY}"}
        )
        assert got.status_code == 200
        assert Response.model_validate_json(got.content).output_text == "Hello!"


# -- tolerant, and strict where it must be ------------------------------------------------


def test_hosted_tools_and_unknown_fields_are_dropped_and_named(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    upstream.script(completion("ok"))
    r = httpx.post(
        f"{proxy.url}/responses",
        json={
            "model": "m",
            "input": "x",
            "tools": [WEATHER_TOOL, {"type": "web_search"}, {"type": "code_interpreter"}],
            "client_metadata": {"x": "y"},
            "prompt_cache_key": "abc",
            "a_new_field": True,
        },
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-proxy-dropped-tools"] == "code_interpreter, web_search"
    assert r.headers["x-proxy-dropped-fields"] == "a_new_field, client_metadata, prompt_cache_key"
    sent = upstream.chat_requests()[0].json
    assert [t["function"]["name"] for t in sent["tools"]] == ["get_weather"]
    assert "client_metadata" not in sent


@pytest.mark.parametrize("stream", [False, True])
def test_names_outside_ascii_are_named_percent_encoded(
    proxy: ProxyServer, upstream: FakeUpstream, stream: bool
) -> None:
    """A dropped name is the client's own text: non-ASCII, `%`, `,`, CR and
    LF go into the header percent-encoded, and the answer is served."""
    answer = Stream([chunk({"content": "ok"}), chunk({}, "stop")])
    upstream.script(answer if stream else completion("ok"))
    r = httpx.post(
        f"{proxy.url}/responses",
        json={
            "model": "m",
            "input": "x",
            "stream": stream,
            "tools": [WEATHER_TOOL, {"type": "\U0001f4a5"}],
            "名前": 1,
            "a,b%\r\nX-Injected: 1": 2,
        },
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-proxy-dropped-tools"] == "%F0%9F%92%A5"
    assert r.headers["x-proxy-dropped-fields"] == (
        "a%2Cb%25%0D%0AX-Injected: 1, %E5%90%8D%E5%89%8D"
    )
    assert "x-injected" not in r.headers


@pytest.mark.parametrize(
    ("items", "param"),
    [
        (
            [{"type": "function_call_output", "call_id": "call_x", "output": "1"}],
            "input[0].call_id",
        ),
        ([{"role": "user"}], "input[0].content"),
        ([{"role": "user", "content": 42}], "input[0].content"),
    ],
)
def test_malformed_items_are_a_400_and_nothing_goes_upstream(
    proxy: ProxyServer, upstream: FakeUpstream, items: list[Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client(proxy).responses.create(model="m", input=items)
    assert info.value.status_code == 400
    assert info.value.body["param"] == param  # type: ignore[index]
    assert upstream.chat_requests() == []


def test_reasoning_effort_is_the_effort_control(proxy: ProxyServer, upstream: FakeUpstream) -> None:
    upstream.script(completion("ok"), completion("ok"))
    sdk = client(proxy)
    sdk.responses.create(model="m", input="x", reasoning={"effort": "low"})
    headers = {"X-Reasoning-Effort": "high"}
    client(proxy, **headers).responses.create(model="m", input="x", reasoning={"effort": "low"})
    first, second = (r.json for r in upstream.chat_requests())
    assert first["reasoning_effort"] == "low"
    assert second["reasoning_effort"] == "high"  # the header wins


def test_an_unknown_effort_lists_each_allowed_value_once(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    # it said "none, none, minimal, low, medium, high, xhigh, xhigh."
    body = {"model": "m", "input": "x", "reasoning": {"effort": "ultra"}}
    r = httpx.post(f"{proxy.url}/responses", json=body, headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 400
    assert r.json()["error"] == {
        "message": "reasoning.effort must be one of: none, minimal, low, medium, high, xhigh.",
        "type": "invalid_request_error",
        "param": "reasoning.effort",
        "code": "invalid_reasoning_setting",
    }
    assert upstream.requests == []


def test_an_upstream_error_keeps_its_status(proxy: ProxyServer, upstream: FakeUpstream) -> None:
    error = {"error": {"message": "Slow down", "type": "rate_limit_error", "code": "rate_limit"}}
    upstream.script(Json(error, status=429))
    with pytest.raises(openai.RateLimitError) as info:
        client(proxy).responses.create(model="m", input="x")
    assert info.value.status_code == 429
    assert info.value.body["message"] == "Slow down"  # type: ignore[index]


def test_a_stream_cut_midway_ends_with_response_failed(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    upstream.script(Stream([chunk({"content": f"part {i} "}) for i in range(5)], cut_after=3))
    evs = raw_events(proxy, {"model": "m", "input": "x"})
    assert evs[-1].type == "response.failed"
    assert evs[-1].response.status == "failed"
    assert evs[-1].response.error is not None
    assert [e.delta for e in evs if e.type == "response.output_text.delta"] == [
        "part 0 ",
        "part 1 ",
        "part 2 ",
    ]


def test_a_route_of_another_api_is_refused(upstream: FakeUpstream) -> None:
    with (
        running_proxy(route_config(upstream, api="messages")) as proxy,
        pytest.raises(openai.BadRequestError) as info,
    ):
        client(proxy).responses.create(model="m", input="x")
    assert info.value.body["code"] == "unsupported_upstream_api"  # type: ignore[index]
    assert upstream.requests == []


def test_only_post_creates(proxy: ProxyServer) -> None:
    r = httpx.get(f"{proxy.url}/responses", headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 405
    assert r.json()["error"]["code"] == "method_not_allowed"


def test_the_client_leaving_cancels_the_upstream_request(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    upstream.script(Stream([chunk({"content": f"part {i} "}) for i in range(100)], delay=0.2))
    with httpx.stream(
        "POST",
        f"{proxy.url}/responses",
        json={"model": "m", "input": "x", "stream": True},
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=30,
    ) as r:
        for line in r.iter_lines():
            if "part 1" in line:
                break
    left = time.monotonic()
    assert upstream.disconnected.wait(5)
    assert time.monotonic() - left < 1.5


def test_thinking_blocks_go_back_with_their_signatures_unchanged(upstream: FakeUpstream) -> None:
    block = {"type": "thinking", "thinking": "I need the weather.", "signature": "c2lnLUE="}
    call = {
        "index": 0,
        "id": "toolu_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    first = Stream(
        [
            chunk({"reasoning_content": block["thinking"], "thinking_blocks": [block]}),
            chunk({"tool_calls": [call]}),
            chunk({}, "tool_calls"),
        ]
    )
    upstream.script(first, completion("18 C."))
    reasoning = {"include_in_context": True, "format": "native"}
    config = route_config(upstream, dialect="litellm", reasoning=reasoning)
    with (
        running_proxy(config) as proxy,
        client(proxy).responses.stream(
            model="m", input="Weather?", tools=[WEATHER_TOOL], store=False, include=ENCRYPTED
        ) as stream,
    ):
        output = stream.get_final_response().output
        items: list[Any] = [{"role": "user", "content": "Weather?"}]
        items += [i.model_dump(exclude_none=True) for i in output]
        items.append({"type": "function_call_output", "call_id": "toolu_1", "output": "18 C"})
        client(proxy).responses.create(model="m", input=items, tools=[WEATHER_TOOL], store=False)
    assistant = upstream.chat_requests()[1].json["messages"][1]
    assert assistant["thinking_blocks"] == [block]
