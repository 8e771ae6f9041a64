"""The Responses door against the Responses API as the openai SDK's types
and the API reference describe it, through the real server: the fields a
Response repeats of its request, the status of items an answer cut short
leaves open, the function's name on `function_call_arguments.done`, and the
stream helper's final Response equal to a whole request's (ids aside)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseItem
from pydantic import TypeAdapter

from tests.casefiles import WEATHER_RESPONSES_TOOL, chunk
from tests.e2e.test_responses import raw_events
from tests.harness import FakeUpstream, Json, ProxyServer, Stream, route_config, running_proxy

KEY = "sk-test-alice"  # raw_events' key
WEATHER_TOOL: Any = WEATHER_RESPONSES_TOOL
ITEMS: TypeAdapter[Any] = TypeAdapter(ResponseItem)
USAGE = {"prompt_tokens": 9, "completion_tokens": 6, "total_tokens": 15}


@pytest.fixture
def proxy(upstream: FakeUpstream) -> Iterator[ProxyServer]:
    with running_proxy(route_config(upstream)) as server:
        yield server


@pytest.fixture
def sdk(proxy: ProxyServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0) as client:
        yield client


def calls_stream(finish: str = "tool_calls") -> Stream:
    """Some text, then two calls (the first in two pieces)."""
    first: dict[str, Any] = {"index": 0, "id": "call_a", "type": "function"}
    second: dict[str, Any] = {"index": 1, "id": "call_b", "type": "function"}
    return Stream(
        [
            chunk({"role": "assistant", "reasoning_content": "Two cities."}),
            chunk({"content": "Checking."}),
            chunk(
                {"tool_calls": [{**first, "function": {"name": "get_weather", "arguments": "{"}}]}
            ),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"city":"Paris"}'}}]}),
            chunk(
                {"tool_calls": [{**second, "function": {"name": "get_weather", "arguments": ""}}]}
            ),
            chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"city":"Rome"}'}}]}),
            chunk({}, finish),
            {"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": USAGE},
        ]
    )


def calls_completion(finish: str = "tool_calls") -> Json:
    """`calls_stream`'s answer, whole."""
    calls = [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": "get_weather", "arguments": f'{{"city":"{city}"}}'},
        }
        for call_id, city in (("call_a", "Paris"), ("call_b", "Rome"))
    ]
    message = {
        "role": "assistant",
        "content": "Checking.",
        "reasoning_content": "Two cities.",
        "tool_calls": calls,
    }
    return whole(message, finish, usage=USAGE)


def text_stream(finish: str) -> Stream:
    return Stream([chunk({"role": "assistant", "content": "It is sun"}), chunk({}, finish)])


def text_completion(finish: str) -> Json:
    return whole({"role": "assistant", "content": "It is sun"}, finish)


def whole(message: dict[str, Any], finish: str, **extra: Any) -> Json:
    """A whole chat completion of one choice."""
    choice = {"index": 0, "message": message, "finish_reason": finish}
    completion = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m"}
    return Json({**completion, "choices": [choice], **extra})


def comparable(response: Response) -> Any:
    """A Response as JSON with its ids and times left out (and what the SDK's
    stream helper adds: `parsed` on output_text parts, `parsed_arguments`)."""
    data = response.model_dump(mode="json")
    stem = response.id.removeprefix("resp_")
    for key in ("id", "created_at", "completed_at"):
        data.pop(key)
    for item in data["output"]:
        item["id"] = item["id"].replace(stem, "ID")
        item.pop("parsed_arguments", None)
        for part in item.get("content") or ():
            part.pop("parsed", None)
    return data


def test_function_call_arguments_done_names_the_function(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    # the API's event carries `name` (openai-python declares it required)
    upstream.script(calls_stream())
    events = raw_events(proxy, {"model": "m", "input": "Weather?", "tools": [WEATHER_TOOL]})
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert [(e.name, e.arguments) for e in done] == [
        ("get_weather", '{"city":"Paris"}'),
        ("get_weather", '{"city":"Rome"}'),
    ]


@pytest.mark.parametrize(
    ("finish", "reason"), [("length", "max_output_tokens"), ("content_filter", "content_filter")]
)
def test_an_answer_cut_short_leaves_what_it_was_writing_incomplete(
    sdk: openai.OpenAI, upstream: FakeUpstream, finish: str, reason: str
) -> None:
    upstream.script(text_stream(finish), text_completion(finish))
    with sdk.responses.stream(model="m", input="Weather?", max_output_tokens=3) as stream:
        events = list(stream)
    # (the SDK's helper has a final Response for response.completed only)
    assert events[-1].type == "response.incomplete"
    streamed = events[-1].response
    whole = sdk.responses.create(model="m", input="Weather?", max_output_tokens=3)
    for response in (streamed, whole):
        assert response.status == "incomplete"
        assert response.incomplete_details is not None
        assert response.incomplete_details.reason == reason
        assert [item.status for item in response.output] == ["incomplete"]  # type: ignore[union-attr]
        assert response.output_text == "It is sun"
        assert response.completed_at is None  # only a completed response has it
    done = [e for e in events if e.type == "response.output_item.done"]
    assert [e.item.status for e in done] == ["incomplete"]  # type: ignore[union-attr]


def test_calls_cut_short_are_incomplete_and_the_text_before_them_complete(
    sdk: openai.OpenAI, upstream: FakeUpstream
) -> None:
    upstream.script(calls_stream("length"), calls_completion("length"))
    kwargs: Any = {"model": "m", "input": "Weather?", "tools": [WEATHER_TOOL]}
    with sdk.responses.stream(**kwargs) as stream:
        events = list(stream)
    assert events[-1].type == "response.incomplete"
    streamed = events[-1].response
    whole = sdk.responses.create(**kwargs)
    for response in (streamed, whole):
        assert [(item.type, getattr(item, "status", None)) for item in response.output] == [
            ("reasoning", None),
            ("message", "completed"),
            ("function_call", "incomplete"),
            ("function_call", "incomplete"),
        ]
    assert comparable(streamed) == comparable(whole)


def test_the_stream_helpers_final_response_is_the_whole_requests(
    sdk: openai.OpenAI, upstream: FakeUpstream
) -> None:
    upstream.script(calls_stream(), calls_completion())
    kwargs: Any = {"model": "m", "input": "Weather?", "tools": [WEATHER_TOOL]}
    with sdk.responses.stream(**kwargs) as stream:
        completed = [e for e in stream if e.type == "response.completed"]
        streamed = stream.get_final_response()
    whole = sdk.responses.create(**kwargs)
    assert comparable(streamed) == comparable(whole)
    assert streamed.status == "completed"
    # a completed response says when; what the stream ended with is what is stored
    assert streamed.completed_at is not None
    assert streamed.completed_at >= streamed.created_at
    stored = sdk.responses.retrieve(streamed.id)
    ended = completed[0].response
    assert comparable(stored) == comparable(ended)
    assert (stored.id, stored.created_at, stored.completed_at) == (
        ended.id,
        ended.created_at,
        ended.completed_at,
    )
    Response.model_validate(stored.model_dump(mode="json"))


def test_a_response_repeats_what_its_request_set(
    sdk: openai.OpenAI, upstream: FakeUpstream
) -> None:
    upstream.script(text_completion("stop"), text_completion("stop"))
    response = sdk.responses.create(
        model="m",
        input="Weather?",
        user="user-1",
        safety_identifier="hashed-user",
        prompt_cache_key="conversation-7",
        text={"verbosity": "low"},
        background=True,  # dropped: the proxy answers in the foreground
    )
    assert (response.user, response.safety_identifier, response.prompt_cache_key) == (
        "user-1",
        "hashed-user",
        "conversation-7",
    )
    assert response.text is not None
    assert response.text.model_dump(mode="json") == {
        "format": {"type": "text"},
        "verbosity": "low",
    }
    assert response.background is False
    assert sdk.responses.retrieve(response.id).user == "user-1"
    # none of them goes to a chat upstream
    sent = upstream.chat_requests()[0].json
    for name in ("user", "safety_identifier", "prompt_cache_key", "verbosity", "background"):
        assert name not in sent
    # the API's defaults, when the request sets none
    plain = sdk.responses.create(model="m", input="Weather?")
    assert plain.text is not None
    assert plain.text.model_dump(mode="json") == {"format": {"type": "text"}, "verbosity": "medium"}
    assert (plain.user, plain.safety_identifier, plain.prompt_cache_key) == (None, None, None)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"user": 7}, "user"),
        ({"safety_identifier": ["a"]}, "safety_identifier"),
        ({"prompt_cache_key": {"k": 1}}, "prompt_cache_key"),
        ({"text": {"verbosity": "extreme"}}, "text.verbosity"),
    ],
)
def test_a_field_a_response_would_repeat_wrongly_is_a_400(
    sdk: openai.OpenAI, upstream: FakeUpstream, extra: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(model="m", input="Hi", extra_body=extra)
    assert caught.value.body is not None
    assert caught.value.body["param"] == param  # type: ignore[index]
    assert re.search(param.rpartition(".")[2], caught.value.message)
    assert upstream.chat_requests() == []


def test_listed_input_items_are_the_sdks_items(
    proxy: ProxyServer, sdk: openai.OpenAI, upstream: FakeUpstream
) -> None:
    # a tool loop continued by id, its outputs sent without a status (string
    # and array outputs, as the Agents SDK and Codex send them)
    upstream.script(calls_completion(), text_completion("stop"))
    tools: Any = [WEATHER_TOOL]
    first = sdk.responses.create(model="m", input="Weather?", tools=tools)
    outputs: Any = [
        {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
        {
            "type": "function_call_output",
            "call_id": "call_b",
            "output": [{"type": "input_text", "text": "rain"}],
        },
    ]
    second = sdk.responses.create(
        model="m", previous_response_id=first.id, input=outputs, tools=tools
    )
    listed = httpx.get(
        f"{proxy.url}/responses/{second.id}/input_items",
        params={"order": "asc"},
        headers={"Authorization": f"Bearer {KEY}"},
    ).json()["data"]
    items = [ITEMS.validate_python(item) for item in listed]
    assert [(i.type, getattr(i, "status", None)) for i in items] == [
        ("message", "completed"),
        ("reasoning", None),
        ("message", "completed"),
        ("function_call", "completed"),
        ("function_call", "completed"),
        ("function_call_output", "completed"),
        ("function_call_output", "completed"),
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_background_is_answered_in_the_foreground_and_named(
    proxy: ProxyServer, sdk: openai.OpenAI, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.script(text_stream("stop") if stream else text_completion("stop"))
    raw = sdk.responses.with_raw_response.create(
        model="m", input="Weather?", background=True, stream=stream
    )
    assert raw.headers["x-proxy-dropped-fields"] == "background"
    if stream:
        events = [e for e in raw.parse() if hasattr(e, "response")]
        assert [e.type for e in events] == [
            "response.created",
            "response.in_progress",
            "response.completed",
        ]
        shown = [e.response for e in events]
    else:
        shown = [raw.parse()]
    # every Response the client sees says so, streamed and whole, and the stored one
    assert [r.background for r in shown] == [False] * len(shown)
    assert sdk.responses.retrieve(shown[-1].id).background is False
    assert "background" not in upstream.chat_requests()[0].json


@pytest.mark.parametrize("stream", [False, True])
def test_a_user_message_whose_parts_were_all_dropped_goes_nowhere(
    proxy: ProxyServer, sdk: openai.OpenAI, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.script(text_stream("stop") if stream else text_completion("stop"))
    file_only: Any = {
        "role": "user",
        "content": [{"type": "input_file", "file_id": "file-abc"}],
    }
    raw = sdk.responses.with_raw_response.create(
        model="m",
        input=[{"role": "user", "content": "Weather?"}, file_only],
        stream=stream,
    )
    assert raw.headers["x-proxy-dropped-fields"] == "input.content.input_file"
    if stream:
        list(raw.parse())
    else:
        raw.parse()
    sent = upstream.chat_requests()[0].json["messages"]
    assert sent == [{"role": "user", "content": "Weather?"}]  # no empty user message


def test_input_that_is_all_dropped_parts_is_a_400_naming_them(
    sdk: openai.OpenAI, upstream: FakeUpstream
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(
            model="m",
            instructions="Be brief.",
            input=[
                {"role": "user", "content": [{"type": "input_file", "file_id": "file-abc"}]},
                {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {}},
            ],
        )
    body: Any = caught.value.body
    assert (body["param"], body["code"]) == ("input", "invalid_input")
    assert "input_file" in body["message"]
    assert "web_search_call" in body["message"]
    assert upstream.chat_requests() == []
