"""The Messages door against a Chat upstream, checked for what Anthropic's
API writes and its SDK reads: the stop reason of an answer with tool calls,
the usage counts (cache reads and writes), the model a streamed message
names, and request content a Chat upstream can take (plain-text documents,
a tool result's images). Answers are read through the anthropic SDK, whole
and streamed, and the streamed message (the SDK's accumulator) must equal
the whole one."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
from anthropic.types import Message

from tests.casefiles import chunk
from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy
from tests.messages_wire import accumulate, parse_events, sdk_client

KEY = "sk-ant-test"
UPSTREAM_MODEL = "up-model-2025"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ"  # the start of a PNG
WEATHER = {
    "name": "get_weather",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CALL = {
    "index": 0,
    "id": "call_w1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}


def client(base: str) -> anthropic.Anthropic:
    return sdk_client(base, KEY)


def completion(message: dict[str, Any], finish: str, usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": UPSTREAM_MODEL,
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
        ],
        "usage": usage,
    }


def stream(deltas: list[dict[str, Any]], finish: str, usage: dict[str, Any]) -> Stream:
    chunks = [chunk(d, model=UPSTREAM_MODEL) for d in deltas]
    chunks.append(chunk({}, finish, model=UPSTREAM_MODEL))
    chunks.append(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": UPSTREAM_MODEL,
            "choices": [],
            "usage": usage,
        }
    )
    return Stream(chunks)


def post(proxy_url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{proxy_url}/messages",
        headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
        json={"model": "claude-test", "max_tokens": 100, **body},
        timeout=30,
    )


def whole_and_streamed(
    upstream: FakeUpstream,
    message: dict[str, Any],
    deltas: list[dict[str, Any]],
    finish: str,
    usage: dict[str, Any],
    **request: Any,
) -> tuple[Message, Message, Message]:
    """The Message of a whole request (raw JSON validated by the SDK's
    type), of `create(stream=True)` (its events accumulated by the SDK) and
    of the SDK's stream helper, for the same answer."""
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    upstream.script(
        Json(completion(message, finish, usage)),
        stream(deltas, finish, usage),
        stream(deltas, finish, usage),
    )
    with running_proxy(route_config(upstream)) as proxy:
        r = post(proxy.url, {"messages": messages, **request})
        assert r.status_code == 200, r.text
        whole = Message.model_validate(r.json(), strict=True)
        events = parse_events(
            post(proxy.url, {"messages": messages, "stream": True, **request}).content
        )
        streamed = accumulate(events)
        with client(proxy.base).messages.stream(
            model="claude-test", max_tokens=100, messages=messages, **request
        ) as s:
            helper = s.get_final_message()
    return whole, streamed, helper


def same_message(a: Message, b: Message) -> None:
    """Two Messages alike but for their ids (and a tool_use block's parsed
    input, which the SDK's accumulator keeps)."""
    left = a.model_dump(exclude={"id"}, exclude_none=True)
    right = b.model_dump(exclude={"id"}, exclude_none=True)
    assert left == right


def test_tool_calls_that_end_with_stop_are_tool_use(upstream: FakeUpstream) -> None:
    # OpenAI answers a tool_choice that names the function with finish_reason
    # "stop"; an Anthropic client runs its tools only on stop_reason tool_use
    usage = {"prompt_tokens": 20, "completion_tokens": 9}
    whole, streamed, helper = whole_and_streamed(
        upstream,
        {"content": None, "tool_calls": [{k: v for k, v in CALL.items() if k != "index"}]},
        [{"role": "assistant", "tool_calls": [CALL]}],
        "stop",
        usage,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    for message in (whole, streamed, helper):
        assert message.stop_reason == "tool_use"
        assert [b.type for b in message.content] == ["tool_use"]
    same_message(whole, streamed)
    same_message(whole, helper)
    sent = upstream.chat_requests()[0].json
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}


def test_text_that_ends_with_stop_is_still_end_turn(upstream: FakeUpstream) -> None:
    usage = {"prompt_tokens": 20, "completion_tokens": 9}
    whole, streamed, _ = whole_and_streamed(
        upstream, {"content": "Sunny."}, [{"content": "Sunny."}], "stop", usage, tools=[WEATHER]
    )
    assert whole.stop_reason == streamed.stop_reason == "end_turn"


def test_usage_counts_the_cache_as_anthropic_does(upstream: FakeUpstream) -> None:
    # OpenRouter's usage: cache reads and writes, both within prompt_tokens
    usage = {
        "prompt_tokens": 194,
        "completion_tokens": 2,
        "prompt_tokens_details": {"cached_tokens": 50, "cache_write_tokens": 100},
    }
    whole, streamed, helper = whole_and_streamed(
        upstream, {"content": "Hi."}, [{"content": "Hi."}], "stop", usage
    )
    for message in (whole, streamed, helper):
        assert message.usage.input_tokens == 44
        assert message.usage.cache_creation_input_tokens == 100
        assert message.usage.cache_read_input_tokens == 50
        assert message.usage.output_tokens == 2
    same_message(whole, streamed)
    same_message(whole, helper)


def test_usage_without_a_cache_says_0_as_anthropic_does(upstream: FakeUpstream) -> None:
    # Anthropic writes both cache counts in every usage (and in message_start):
    # a client adding them up must not meet a None
    usage = {"prompt_tokens": 20, "completion_tokens": 9}
    upstream.script(Json(completion({"content": "Hi."}, "stop", usage)))
    upstream.script(stream([{"content": "Hi."}], "stop", usage))
    messages = [{"role": "user", "content": "Hi"}]
    with running_proxy(route_config(upstream)) as proxy:
        whole = post(proxy.url, {"messages": messages}).json()
        events = parse_events(post(proxy.url, {"messages": messages, "stream": True}).content)
    assert whole["usage"] == {
        "input_tokens": 20,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 9,
    }
    start = events[0][1]["message"]["usage"]
    assert start["cache_creation_input_tokens"] == start["cache_read_input_tokens"] == 0
    final = accumulate(events).usage
    assert final.cache_creation_input_tokens == final.cache_read_input_tokens == 0


def test_a_streamed_message_names_the_model_a_whole_one_names(upstream: FakeUpstream) -> None:
    usage = {"prompt_tokens": 20, "completion_tokens": 9}
    whole, streamed, helper = whole_and_streamed(
        upstream, {"content": "Hi."}, [{"role": "assistant", "content": "Hi."}], "stop", usage
    )
    assert whole.model == streamed.model == helper.model == UPSTREAM_MODEL
    same_message(whole, streamed)


def test_a_plain_text_document_reaches_a_chat_upstream(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        message = client(proxy.base).messages.create(
            model="claude-test",
            max_tokens=100,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "document",
                            "title": "notes.txt",
                            "source": {
                                "type": "text",
                                "media_type": "text/plain",
                                "data": "The code is 4417.",
                            },
                        },
                        {
                            "type": "document",
                            "source": {
                                "type": "content",
                                "content": [{"type": "text", "text": "Second page."}],
                            },
                        },
                        {
                            "type": "document",
                            "source": {
                                "type": "base64",
                                "media_type": "application/pdf",
                                "data": "JVBERi0xLjQK",
                            },
                        },
                        {"type": "text", "text": "What is the code?"},
                    ],
                }
            ],
        )
        raw = post(
            proxy.url,
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "document",
                                "source": {"type": "url", "url": "https://example.com/a.pdf"},
                            },
                            {"type": "text", "text": "Summarize."},
                        ],
                    }
                ]
            },
        )
    assert message.content
    sent = upstream.chat_requests()[0].json["messages"]
    assert sent == [
        {
            "role": "user",
            "content": "notes.txt\n\nThe code is 4417.\n\nSecond page.\n\nWhat is the code?",
        }
    ]
    # what a Chat upstream cannot read is left out and named
    assert raw.status_code == 200
    assert raw.headers["x-proxy-dropped-fields"] == "content.document.url"
    assert upstream.chat_requests()[1].json["messages"] == [
        {"role": "user", "content": "Summarize."}
    ]


def test_a_tool_results_image_reaches_a_chat_upstream(upstream: FakeUpstream) -> None:
    # Claude Code reads an image file as a tool_result with an image block; a
    # chat tool message holds text only, so the image follows it as user content
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    with running_proxy(route_config(upstream)) as proxy:
        r = post(
            proxy.url,
            {
                "tools": [WEATHER],
                "messages": [
                    {"role": "user", "content": "Show me the map."},
                    {
                        "role": "assistant",
                        "content": [
                            {
                                "type": "tool_use",
                                "id": "toolu_1",
                                "name": "get_weather",
                                "input": {},
                            },
                            {
                                "type": "tool_use",
                                "id": "toolu_2",
                                "name": "get_weather",
                                "input": {},
                            },
                        ],
                    },
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [image]},
                            {
                                "type": "tool_result",
                                "tool_use_id": "toolu_2",
                                "content": [{"type": "text", "text": "Rain."}, image],
                            },
                            {"type": "text", "text": "What do you see?"},
                        ],
                    },
                ],
            },
        )
    assert r.status_code == 200, r.text
    assert "x-proxy-dropped-fields" not in r.headers
    sent = upstream.chat_requests()[0].json["messages"]
    url = {"url": f"data:image/png;base64,{PNG}"}
    assert sent[2:] == [
        {"role": "tool", "tool_call_id": "toolu_1", "content": "[image]"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Rain."},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": url},
                {"type": "image_url", "image_url": url},
                {"type": "text", "text": "What do you see?"},
            ],
        },
    ]


USAGE_ALONE = {
    "id": "c",
    "object": "chat.completion.chunk",
    "created": 1,
    "model": UPSTREAM_MODEL,
    "choices": [],
    "usage": {"prompt_tokens": 3, "completion_tokens": 0},
}


def test_a_stream_with_no_answer_ends_in_an_error_not_an_empty_message(
    upstream: FakeUpstream,
) -> None:
    """A usage chunk or a role alone, then [DONE]: no answer (the Responses
    door fails it, the chat door's [DONE]-only stream is a 502), where an
    empty `end_turn` message would be a silent empty answer."""
    role = chunk({"role": "assistant"}, model=UPSTREAM_MODEL)
    finished = chunk({"role": "assistant", "content": ""}, "stop", model=UPSTREAM_MODEL)
    upstream.script(Stream([USAGE_ALONE]), Stream([role]), Stream([finished]))
    messages: Any = [{"role": "user", "content": "Hi"}]
    with running_proxy(route_config(upstream)) as proxy:
        failed = [
            parse_events(post(proxy.url, {"messages": messages, "stream": True}).content)
            for _ in range(2)
        ]
        with client(proxy.base).messages.stream(
            model="claude-test", max_tokens=100, messages=messages
        ) as s:
            empty = s.get_final_message()
    for events in failed:
        assert [name for name, _ in events] == ["message_start", "error"]
        assert events[-1][1]["error"] == {
            "type": "api_error",
            "message": "The upstream ended the stream without sending an answer.",
        }
    # an empty answer the upstream finished is an answer
    assert (empty.content, empty.stop_reason) == ([], "end_turn")
