"""Chat answers the Responses door translates beyond text and tool calls,
through the real server with the openai SDK: the legacy `function_call`
(older OpenAI-compatible servers answer a tools request with it) and the
tokens' logprobs a request includes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from tests.casefiles import WEATHER_RESPONSES_TOOL, chunk
from tests.harness import FakeUpstream, Json, ProxyServer, Stream, route_config, running_proxy

KEY = "sk-test-chat-fields"
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
WEATHER_TOOL: Any = WEATHER_RESPONSES_TOOL
LOGPROBS = ["message.output_text.logprobs"]
REASONING = "The user wants the weather."


@pytest.fixture
def proxy(upstream: FakeUpstream) -> Iterator[ProxyServer]:
    # re-injection on: what goes back upstream shows what the store knew
    with running_proxy(route_config(upstream, reasoning={"include_in_context": True})) as server:
        yield server


@pytest.fixture
def sdk(proxy: ProxyServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0) as client:
        yield client


def conversation(proxy: ProxyServer, conversation_id: str) -> Any:
    return httpx.get(
        f"{proxy.url}/conversations/{conversation_id}",
        headers={"Authorization": f"Bearer {KEY}"},
    ).json()


# -- the legacy function_call -----------------------------------------------------------


def legacy_call_stream() -> Stream:
    """vLLM/LocalAI-era chat: `delta.function_call` in pieces, no id, and
    `finish_reason: "function_call"`."""
    return Stream(
        [
            chunk({"role": "assistant", "reasoning_content": REASONING}),
            chunk({"function_call": {"name": "get_weather", "arguments": ""}}),
            chunk({"function_call": {"arguments": '{"city": '}}),
            chunk({"function_call": {"arguments": '"Paris"}'}}),
            chunk({}, "function_call"),
        ]
    )


def legacy_call_completion() -> Json:
    message = {
        "role": "assistant",
        "content": None,
        "reasoning_content": REASONING,
        "function_call": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    return Json(
        {
            "id": "chatcmpl-fc",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "function_call"}],
        }
    )


def answer(text: str, **choice: Any) -> Json:
    """A whole chat completion answering `text` (`choice`: more fields of its choice)."""
    return Json(
        {
            "id": "chatcmpl-a",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    **choice,
                    "finish_reason": "stop",
                }
            ],
        }
    )


@pytest.mark.parametrize("stream", [False, True])
def test_a_legacy_function_call_is_a_function_call_item(
    proxy: ProxyServer, sdk: openai.OpenAI, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.script(legacy_call_stream() if stream else legacy_call_completion())
    request: Any = {
        "model": "m",
        "input": "Weather in Paris?",
        "tools": [WEATHER_TOOL],
        "extra_headers": {"X-Conversation-Id": f"legacy-call-{stream}"},
    }
    if stream:
        with sdk.responses.stream(**request) as events:
            seen = list(events)
            response = events.get_final_response()
        kinds = [e.type for e in seen]
        added = [e.item for e in seen if e.type == "response.output_item.added"]
        assert [i.type for i in added] == ["reasoning", "function_call"]
        deltas = [e.delta for e in seen if e.type == "response.function_call_arguments.delta"]
        assert deltas == ['{"city": ', '"Paris"}']
        (done,) = [e for e in seen if e.type == "response.function_call_arguments.done"]
        assert done.arguments == '{"city": "Paris"}'
        assert kinds.index("response.function_call_arguments.done") < kinds.index(
            "response.completed"
        )
        call_done = [e.item for e in seen if e.type == "response.output_item.done"][-1]
        assert call_done.type == "function_call"
        assert call_done.call_id == added[1].call_id  # type: ignore[union-attr]
    else:
        response = sdk.responses.create(**request)
    assert response.status == "completed"
    assert [item.type for item in response.output] == ["reasoning", "function_call"]
    call = response.output[1]
    assert call.type == "function_call"
    assert (call.name, call.arguments) == ("get_weather", '{"city": "Paris"}')
    assert call.call_id.startswith("call_")
    # the stored response holds the same call, and its call id stays the one given
    stored = sdk.responses.retrieve(response.id).output[1]
    assert stored.type == "function_call"
    assert stored.call_id == call.call_id
    # the stored turn has the call, as a chat tool call (the upstream gave it no id)
    (turn,) = conversation(proxy, f"legacy-call-{stream}")["turns"]
    assert turn["toolCalls"] == [
        {"id": None, "name": "get_weather", "arguments": '{"city": "Paris"}'}
    ]
    assert turn["finishReason"] == "function_call"
    # the loop goes on: the call and its output go up as a chat tool call and its result
    upstream.script(answer("18 C."))
    second = sdk.responses.create(
        model="m",
        previous_response_id=response.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18 C"}],
        tools=[WEATHER_TOOL],
    )
    assert second.output_text == "18 C."
    sent = upstream.chat_requests()[1].json["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["tool_calls"] == [
        {
            "id": call.call_id,
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ]
    assert sent[1]["reasoning_content"] == REASONING
    assert sent[2]["tool_call_id"] == call.call_id


def test_a_client_that_drops_reasoning_gets_a_legacy_calls_reasoning_from_the_store(
    sdk: openai.OpenAI, upstream: FakeUpstream
) -> None:
    """The stored turn is found by its call (name and arguments): the call
    id the door made is not the upstream's, which had none."""
    upstream.script(legacy_call_completion())
    first = sdk.responses.create(model="m", input="Weather in Paris?", tools=[WEATHER_TOOL])
    call = first.output[1]
    assert call.type == "function_call"
    upstream.script(answer("18 C."))
    sdk.responses.create(
        model="m",
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "18 C"},
        ],
        tools=[WEATHER_TOOL],
    )
    sent = upstream.chat_requests()[1].json["messages"]
    assert sent[1]["reasoning_content"] == REASONING


def test_the_chat_door_passes_a_legacy_call_through_and_stores_it(
    proxy: ProxyServer, sdk: openai.OpenAI, upstream: FakeUpstream
) -> None:
    upstream.script(legacy_call_stream())
    headers = {"X-Conversation-Id": "legacy-chat"}
    with sdk.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        stream=True,
        extra_headers=headers,
    ) as chunks:
        pieces = [c.choices[0].delta.function_call for c in chunks if c.choices]
    calls = [p for p in pieces if p is not None]
    assert calls[0].name == "get_weather"
    assert "".join(p.arguments or "" for p in calls) == '{"city": "Paris"}'
    (turn,) = conversation(proxy, "legacy-chat")["turns"]
    assert turn["toolCalls"] == [
        {"id": None, "name": "get_weather", "arguments": '{"city": "Paris"}'}
    ]
    # a client sending the call back as it got it gets the reasoning from the store
    upstream.script(answer("18 C."))
    sdk.chat.completions.create(
        model="m",
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
            {"role": "function", "name": "get_weather", "content": "18 C"},
        ],
        extra_headers=headers,
    )
    sent = upstream.chat_requests()[1].json["messages"]
    assert sent[1]["reasoning_content"] == REASONING


# -- logprobs ---------------------------------------------------------------------------


def token(text: str, logprob: float, top: tuple[tuple[str, float], ...] = ()) -> dict[str, Any]:
    return {
        "token": text,
        "logprob": logprob,
        "bytes": list(text.encode()),
        "top_logprobs": [{"token": t, "logprob": p, "bytes": list(t.encode())} for t, p in top],
    }


HELLO = [token("Hel", -0.1, (("Hel", -0.1), ("Hi", -2.5))), token("lo", -0.2, (("lo", -0.2),))]
WORLD = [token(" world", -0.3, ((" world", -0.3), (" there", -1.5)))]


def with_logprobs(delta: dict[str, Any], tokens: list[Any] | None) -> dict[str, Any]:
    out = chunk(delta)
    out["choices"][0]["logprobs"] = {"content": tokens, "refusal": None}
    return out


def logprobs_stream() -> Stream:
    return Stream(
        [
            # the reasoning's tokens are not the answer's: they stay out of its logprobs
            with_logprobs({"role": "assistant", "reasoning_content": "Greet."}, [token("G", -1.0)]),
            with_logprobs({"content": "Hello"}, HELLO),
            with_logprobs({"content": " world"}, WORLD),
            chunk({}, "stop"),
        ]
    )


def logprobs_completion() -> Json:
    return Json(
        {
            "id": "chatcmpl-lp",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "Hello world"},
                    "logprobs": {"content": HELLO + WORLD, "refusal": None},
                    "finish_reason": "stop",
                }
            ],
        }
    )


def expected_part_logprobs() -> list[dict[str, Any]]:
    return HELLO + WORLD  # chat's token objects are the Responses API's, bytes and all


def event_logprobs(tokens: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "token": t["token"],
            "logprob": t["logprob"],
            "top_logprobs": [
                {"token": a["token"], "logprob": a["logprob"]} for a in t["top_logprobs"]
            ],
        }
        for t in tokens
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_included_logprobs_are_asked_for_and_answered(
    sdk: openai.OpenAI, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.script(logprobs_stream() if stream else logprobs_completion())
    request: Any = {"model": "m", "input": "Hi", "include": LOGPROBS, "top_logprobs": 2}
    if stream:
        with sdk.responses.stream(**request) as events:
            seen = list(events)
            response = events.get_final_response()
        deltas = [e for e in seen if e.type == "response.output_text.delta"]
        assert [(e.delta, e.model_dump()["logprobs"]) for e in deltas] == [
            ("Hello", event_logprobs(HELLO)),
            (" world", event_logprobs(WORLD)),
        ]
        (done,) = [e for e in seen if e.type == "response.output_text.done"]
        assert done.model_dump()["logprobs"] == event_logprobs(HELLO + WORLD)
    else:
        response = sdk.responses.create(**request)
    assert response.output_text == "Hello world"
    assert response.top_logprobs == 2
    part = response.output[-1].content[0]  # type: ignore[union-attr]
    assert part.type == "output_text"
    assert [lp.model_dump() for lp in part.logprobs or ()] == expected_part_logprobs()
    sent = upstream.chat_requests()[0].json
    assert (sent["logprobs"], sent["top_logprobs"]) == (True, 2)
    # the stored response keeps them
    stored = sdk.responses.retrieve(response.id).output[-1].content[0]  # type: ignore[union-attr]
    assert [lp.model_dump() for lp in stored.logprobs or ()] == expected_part_logprobs()  # type: ignore[union-attr]


# a model served raw: its reasoning inline in `content`, one token per chunk
TAGGED = [token("<think>", -0.01), token("Greet", -0.5), token(".", -0.4), token("</think>", -0.02)]
TAGGED += [token("\n\n", -0.03)]


def tagged_stream() -> Stream:
    tokens = [*TAGGED, *HELLO, *WORLD]
    first, *rest = tokens
    chunks = [with_logprobs({"role": "assistant", "content": first["token"]}, [first])]
    chunks += [with_logprobs({"content": t["token"]}, [t]) for t in rest]
    return Stream([*chunks, chunk({}, "stop")])


def tagged_completion() -> Json:
    tokens = [*TAGGED, *HELLO, *WORLD]
    text = "".join(t["token"] for t in tokens)
    return answer(text, logprobs={"content": tokens, "refusal": None})


@pytest.mark.parametrize("stream", [False, True])
def test_tagged_reasoning_tokens_stay_out_of_the_answers_logprobs(
    sdk: openai.OpenAI, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.script(tagged_stream() if stream else tagged_completion())
    request: Any = {"model": "m", "input": "Hi", "include": LOGPROBS}
    if stream:
        with sdk.responses.stream(**request) as events:
            list(events)
            response = events.get_final_response()
    else:
        response = sdk.responses.create(**request)
    reasoning, message = response.output
    assert reasoning.type == "reasoning"
    assert [s.text for s in reasoning.summary] == ["Greet."]
    assert response.output_text == "Hello world"
    part = message.content[0]  # type: ignore[union-attr]
    assert part.type == "output_text"
    # the visible answer's tokens alone, the same whole as streamed
    assert [lp.model_dump() for lp in part.logprobs or ()] == expected_part_logprobs()


@pytest.mark.parametrize("stream", [False, True])
def test_without_the_include_nothing_more_is_asked_and_logprobs_stay_empty(
    sdk: openai.OpenAI, upstream: FakeUpstream, stream: bool
) -> None:
    # an upstream that sends logprobs unasked: the answer still carries none
    upstream.script(logprobs_stream() if stream else logprobs_completion())
    request: Any = {"model": "m", "input": "Hi", "top_logprobs": 2}
    if stream:
        with sdk.responses.stream(**request) as events:
            seen = list(events)
            response = events.get_final_response()
        texts = [
            e for e in seen if e.type in ("response.output_text.delta", "response.output_text.done")
        ]
        assert texts
        assert all(e.logprobs == [] for e in texts)  # type: ignore[union-attr]
    else:
        raw = sdk.responses.with_raw_response.create(**request)
        assert raw.headers["x-proxy-dropped-fields"] == "top_logprobs"
        response = raw.parse()
    part = response.output[-1].content[0]  # type: ignore[union-attr]
    assert part.type == "output_text"
    assert part.logprobs == []  # as the Responses API writes it
    sent = upstream.chat_requests()[0].json
    assert "logprobs" not in sent
    assert "top_logprobs" not in sent


def test_top_logprobs_out_of_range_is_a_400_before_the_upstream(
    sdk: openai.OpenAI, upstream: FakeUpstream
) -> None:
    for value in (21, -1, "2", True):
        with pytest.raises(openai.BadRequestError) as info:
            sdk.responses.create(model="m", input="Hi", include=LOGPROBS, top_logprobs=value)  # type: ignore[arg-type]
        assert info.value.body["param"] == "top_logprobs"  # type: ignore[index]
    assert upstream.chat_requests() == []
