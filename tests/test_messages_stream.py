"""Normalized chat SSE -> Anthropic Messages events (proxy.doors.messages.stream):
fed whole, byte by byte and split at random points; each event validated
against the anthropic SDK's types and accumulated by the SDK's own helper."""

from __future__ import annotations

import itertools
import json
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.doors.messages.stream import MessagesEncoder, usage_of
from tests.casefiles import chunk, cut_at
from tests.harness import sse
from tests.messages_wire import accumulate, assert_blocks_in_order, parse_events, validated


def seal(text: str, artefacts: dict[str, Any]) -> str:
    return "sealed:" + orjson.dumps([text, artefacts]).decode()


# the cache counts a usage without any (Anthropic writes them, as 0)
NO_CACHE = {"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def encoder(**options: Any) -> MessagesEncoder:
    enc = MessagesEncoder(model="claude-test", seal=seal, input_tokens=42, **options)
    enc.id = "msg_test"
    return enc


def usage_chunk(prompt: int = 11, completion: int = 7) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
    }


TOOL_STREAM = b"".join(
    [
        sse(chunk({"role": "assistant", "reasoning_content": "The user asks"})),
        sse(chunk({"reasoning_content": " about weather."})),
        sse(chunk({"content": "Let me "})),
        b": keep-alive\n\n",
        sse(chunk({"content": "check."})),
        sse(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                }
            )
        ),
        sse(chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]})),
        sse(chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]})),
        sse(chunk({}, "tool_calls")),
        sse(usage_chunk()),
        b"data: [DONE]\n\n",
    ]
)


def encode(body: bytes, pieces: list[bytes] | None = None, **options: Any) -> bytes:
    enc = encoder(**options)
    return b"".join(enc.feed(p) for p in (pieces or [body])) + enc.flush()


def test_a_tool_call_stream_as_messages_events() -> None:
    events = parse_events(encode(TOOL_STREAM))
    names = [n for n, _ in events]
    assert names == [
        "message_start",
        "content_block_start",  # thinking
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",  # signature
        "content_block_stop",
        "content_block_start",  # text
        "content_block_delta",
        "ping",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",  # tool_use
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[0][1]["message"]["usage"] == {"input_tokens": 42, **NO_CACHE, "output_tokens": 0}
    assert events[4][1]["delta"] == {
        "type": "signature_delta",
        "signature": seal("The user asks about weather.", {}),
    }
    assert events[-2][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"input_tokens": 11, **NO_CACHE, "output_tokens": 7},
    }
    message = accumulate(events)
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]
    thinking, text, tool = message.content
    assert thinking.thinking == "The user asks about weather."  # type: ignore[union-attr]
    assert text.text == "Let me check."  # type: ignore[union-attr]
    assert (tool.id, tool.name, tool.input) == ("call_1", "get_weather", {"city": "Paris"})  # type: ignore[union-attr]
    assert message.stop_reason == "tool_use"


def test_whole_byte_by_byte_and_with_trailing_data_give_the_same_events() -> None:
    whole = encode(TOOL_STREAM)
    by_byte = encode(TOOL_STREAM, [TOOL_STREAM[i : i + 1] for i in range(len(TOOL_STREAM))])
    assert by_byte == whole
    trailing = encode(TOOL_STREAM, [TOOL_STREAM + sse(chunk({"content": "after done"}))])
    assert trailing == whole


@given(st.lists(st.integers(min_value=0, max_value=200), max_size=12))
def test_any_split_gives_the_same_events(sizes: list[int]) -> None:
    assert encode(TOOL_STREAM, cut_at(TOOL_STREAM, sizes)) == encode(TOOL_STREAM)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["reasoning_content", "content"]), st.text(min_size=1, max_size=8)
        ),
        min_size=1,
        max_size=12,
    )
)
def test_blocks_follow_the_order_the_model_produced(parts: list[tuple[str, str]]) -> None:
    body = b"".join(sse(chunk({k: v})) for k, v in parts) + sse(chunk({}, "stop"))
    body += b"data: [DONE]\n\n"
    message = accumulate(parse_events(encode(body)))
    runs: list[tuple[str, str]] = []
    for kind, text in parts:
        kind = "thinking" if kind == "reasoning_content" else "text"
        if runs and runs[-1][0] == kind:
            runs[-1] = (kind, runs[-1][1] + text)
        else:
            runs.append((kind, text))
    got = [
        (b.type, b.thinking if b.type == "thinking" else b.text)  # type: ignore[union-attr]
        for b in message.content
    ]
    assert got == runs
    for block in message.content:
        if block.type == "thinking":
            assert block.signature == seal(block.thinking, {})
    assert message.stop_reason == "end_turn"


def test_an_error_event_ends_the_stream_in_anthropics_shape() -> None:
    error = {
        "error": {
            "message": "The upstream closed the stream.",
            "type": "upstream_error",
            "param": None,
            "code": "upstream_closed",
        }
    }
    body = sse(chunk({"content": "par"})) + b"data: " + orjson.dumps(error) + b"\n\n"
    events = parse_events(encode(body + sse(chunk({"content": "ignored"}))))
    assert events[-1] == (
        "error",
        {
            "type": "error",
            "error": {"type": "api_error", "message": "The upstream closed the stream."},
        },
    )
    assert "message_stop" not in [n for n, _ in events]
    validated(events)


def test_a_timeout_error_keeps_its_type() -> None:
    error = {"error": {"message": "idle", "type": "timeout_error", "code": "upstream_timeout"}}
    events = parse_events(encode(b"data: " + orjson.dumps(error) + b"\n\n"))
    assert events[-1][1]["error"]["type"] == "timeout_error"


def test_omitted_display_sends_no_thinking_text_but_a_signature() -> None:
    body = sse(chunk({"reasoning_content": "secret"})) + sse(chunk({"content": "ok"}, "stop"))
    events = parse_events(encode(body + b"data: [DONE]\n\n", show_thinking=False))
    message = accumulate(events)
    thinking = message.content[0]
    assert thinking.type == "thinking"
    assert thinking.thinking == ""
    assert thinking.signature == seal("secret", {})


def test_upstream_artefacts_are_sealed_in_the_signature() -> None:
    details = [{"type": "reasoning.encrypted", "data": "blob", "index": 1}]
    pieces = [
        {"type": "thinking", "thinking": "thou"},
        {"type": "thinking", "thinking": "ght"},
        {"type": "thinking", "thinking": "", "signature": "up-sig"},
    ]
    body = (
        b"".join(
            sse(chunk({"reasoning_content": p["thinking"], "thinking_blocks": [p]})) for p in pieces
        )
        + sse(chunk({"reasoning_details": details}))
        + sse(chunk({"content": "answer"}, "stop"))
        + b"data: [DONE]\n\n"
    )
    message = accumulate(parse_events(encode(body)))
    whole = [{"type": "thinking", "thinking": "thought", "signature": "up-sig"}]
    assert message.content[0].signature == seal(  # type: ignore[union-attr]
        "thought", {"thinking_blocks": whole, "reasoning_details": details}
    )


def test_a_thinking_object_signature_is_sealed() -> None:
    body = (
        sse(chunk({"reasoning_content": "t", "thinking": {"signature": "s1"}}))
        + sse(chunk({"content": "a"}, "stop"))
        + b"data: [DONE]\n\n"
    )
    message = accumulate(parse_events(encode(body)))
    assert message.content[0].signature == seal("t", {"signature": "s1"})  # type: ignore[union-attr]


def test_a_stop_sequence_the_upstream_names() -> None:
    body = sse(
        {
            "id": "c",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": "x"},
                    "finish_reason": "stop",
                    "stop_reason": "END",
                }
            ],
        }
    )
    events = parse_events(encode(body + b"data: [DONE]\n\n", stop_sequences=("END",)))
    assert events[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}


def test_usage_is_estimated_when_the_upstream_reports_none() -> None:
    body = sse(chunk({"content": "x" * 40}, "length")) + b"data: [DONE]\n\n"
    events = parse_events(encode(body))
    assert events[-2][1]["delta"]["stop_reason"] == "max_tokens"
    assert events[-2][1]["usage"] == {"input_tokens": 42, **NO_CACHE, "output_tokens": 10}


def test_cached_tokens_are_reported_apart() -> None:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 60},
    }
    completion = {
        "id": "c",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
        "usage": usage,
    }
    message = orjson.loads(encoder().whole(200, orjson.dumps(completion)))
    assert message["usage"] == {
        "input_tokens": 40,
        "output_tokens": 5,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 60,
    }


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        # OpenRouter: cache reads and writes, both within prompt_tokens
        (
            {
                "prompt_tokens": 194,
                "completion_tokens": 2,
                "prompt_tokens_details": {"cached_tokens": 50, "cache_write_tokens": 100},
            },
            (44, 100, 50),
        ),
        # DeepSeek: prompt_cache_hit_tokens beside prompt_cache_miss_tokens
        (
            {
                "prompt_tokens": 80,
                "completion_tokens": 2,
                "prompt_cache_hit_tokens": 64,
                "prompt_cache_miss_tokens": 16,
            },
            (16, 0, 64),
        ),
        # a count larger than the prompt is not believed
        (
            {
                "prompt_tokens": 10,
                "completion_tokens": 2,
                "prompt_tokens_details": {"cached_tokens": 11},
            },
            (10, 0, 0),
        ),
    ],
)
def test_cache_reads_and_writes_as_anthropic_counts_them(
    usage: dict[str, Any], expected: tuple[int, int, int]
) -> None:
    out = usage_of(usage, 1, 1)
    assert (
        out["input_tokens"],
        out["cache_creation_input_tokens"],
        out["cache_read_input_tokens"],
    ) == expected
    assert out["output_tokens"] == 2


def test_a_whole_completion_as_a_message() -> None:
    completion = {
        "id": "c",
        "object": "chat.completion",
        "model": "upstream-model",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "reasoning_content": "think",
                    "content": "Let me check.",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "f", "arguments": '{"a":1}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4},
    }
    message = orjson.loads(encoder().whole(200, orjson.dumps(completion)))
    assert message == {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": "upstream-model",
        "content": [
            {"type": "thinking", "thinking": "think", "signature": seal("think", {})},
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "call_1", "name": "f", "input": {"a": 1}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 3, **NO_CACHE, "output_tokens": 4},
    }


def test_error_bodies_in_anthropics_shape() -> None:
    enc = encoder()
    openai = b'{"error": {"message": "bad model", "type": "invalid_request_error", "code": "x"}}'
    assert orjson.loads(enc.whole(404, openai)) == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "bad model"},
    }
    anthropic = b'{"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}'
    assert orjson.loads(enc.whole(529, anthropic))["error"] == {
        "type": "overloaded_error",
        "message": "busy",
    }
    assert orjson.loads(enc.whole(502, b"<html>bad gateway</html>")) == {
        "type": "error",
        "error": {"type": "api_error", "message": "<html>bad gateway</html>"},
    }


def test_start_headers() -> None:
    enc = encoder(headers=[("x-proxy-dropped-fields", "context_management")])
    stream = enc.start_headers([("content-type", "text/event-stream"), ("x-request-id", "r")])
    assert stream == [
        ("content-type", "text/event-stream; charset=utf-8"),
        ("x-request-id", "r"),
        ("x-proxy-dropped-fields", "context_management"),
    ]
    whole = enc.start_headers([("content-type", "text/plain"), ("content-length", "3")])
    assert whole == [
        ("content-type", "application/json"),
        ("x-proxy-dropped-fields", "context_management"),
    ]


def test_an_error_beside_a_choice_ended_by_it_ends_the_stream() -> None:
    """OpenRouter's mid-stream failure: what the chunk carried goes out, then
    the error; no message_stop, so the SDK raises."""
    failed = chunk({"content": "lo"}, "error")
    failed["error"] = {"code": "server_error", "message": "Provider disconnected"}
    body = sse(chunk({"content": "Hel"})) + sse(failed) + b"data: [DONE]\n\n"
    events = parse_events(encode(body))
    texts = [d["delta"]["text"] for n, d in events if n == "content_block_delta"]
    assert texts == ["Hel", "lo"]
    assert events[-1] == (
        "error",
        {"type": "error", "error": {"type": "api_error", "message": "Provider disconnected"}},
    )


REFUSED = b"".join(
    [
        sse(chunk({"role": "assistant", "content": None, "refusal": ""})),
        sse(chunk({"refusal": "I can't "})),
        sse(chunk({"refusal": "help with that."})),
        sse(chunk({}, "stop")),
        b"data: [DONE]\n\n",
    ]
)


def test_a_refusal_is_text_that_stops_with_refusal() -> None:
    whole = encode(REFUSED)
    assert encode(REFUSED, [REFUSED[n : n + 1] for n in range(len(REFUSED))]) == whole
    message = accumulate(parse_events(whole))
    assert [(b.type, getattr(b, "text", None)) for b in message.content] == [
        ("text", "I can't help with that.")
    ]
    assert message.stop_reason == "refusal"
    completion = {
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "refusal": "No."},
                "finish_reason": "stop",
            }
        ],
    }
    whole_message = encoder().message(completion)
    assert whole_message["content"] == [{"type": "text", "text": "No."}]
    assert whole_message["stop_reason"] == "refusal"


# -- parallel tool calls whose pieces interleave ------------------------------------


def tool_piece(index: int, arguments: str, first: bool = False) -> dict[str, Any]:
    """A `tool_calls` delta item: the call's first piece names it."""
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if first:
        call.update(id=f"call_{index}", type="function")
        call["function"]["name"] = f"fn_{index}"
    return call


def tools_delta(*calls: dict[str, Any]) -> bytes:
    return sse(chunk({"tool_calls": list(calls)}))


INTERLEAVED = b"".join(
    [
        sse(chunk({"reasoning_content": "Two cities."})),
        tools_delta(tool_piece(0, '{"city":', first=True)),
        tools_delta(tool_piece(1, '{"city": "Ro', first=True)),
        tools_delta(tool_piece(0, ' "Paris"')),
        tools_delta(tool_piece(1, 'me"}')),
        tools_delta(tool_piece(0, "}")),
        sse(chunk({}, "tool_calls")),
        sse(usage_chunk()),
        b"data: [DONE]\n\n",
    ]
)


def test_interleaved_tool_calls_go_out_one_block_after_another() -> None:
    # the regression: block 0's later arguments went out after block 1 had
    # started (a delta for a block the client had seen stop, or never stop)
    events = parse_events(encode(INTERLEAVED))
    assert_blocks_in_order(events)
    shown = [
        (n, d["index"], d.get("delta", {}).get("partial_json"))
        for n, d in events
        if n.startswith("content_block") and d["index"] > 0
    ]
    assert shown == [
        ("content_block_start", 1, None),  # fn_0, live
        ("content_block_delta", 1, '{"city":'),
        ("content_block_delta", 1, ' "Paris"'),
        ("content_block_delta", 1, "}"),
        ("content_block_stop", 1, None),
        ("content_block_start", 2, None),  # fn_1, held until fn_0 was whole
        ("content_block_delta", 2, '{"city": "Rome"}'),
        ("content_block_stop", 2, None),
    ]
    message = accumulate(events)
    assert [(b.id, b.name, b.input) for b in message.content[1:]] == [  # type: ignore[union-attr]
        ("call_0", "fn_0", {"city": "Paris"}),
        ("call_1", "fn_1", {"city": "Rome"}),
    ]
    assert message.stop_reason == "tool_use"
    by_byte = [INTERLEAVED[n : n + 1] for n in range(len(INTERLEAVED))]
    assert encode(INTERLEAVED, by_byte) == encode(INTERLEAVED)


def test_a_call_that_starts_after_the_last_is_whole_streams_live() -> None:
    body = (
        tools_delta(tool_piece(0, '{"a": 1}', first=True))
        + tools_delta(tool_piece(1, '{"b":', first=True))
        + tools_delta(tool_piece(1, " 2}"))
    )
    events = parse_events(encode(body))  # no finish_reason yet: nothing waits for it
    assert [(n, d["index"]) for n, d in events if n.startswith("content_block")] == [
        ("content_block_start", 0),
        ("content_block_delta", 0),
        ("content_block_stop", 0),
        ("content_block_start", 1),
        ("content_block_delta", 1),
        ("content_block_delta", 1),
    ]


def test_text_while_a_call_is_unfinished_follows_it() -> None:
    body = (
        tools_delta(tool_piece(0, '{"a":', first=True))
        + sse(chunk({"content": "Checking"}))
        + sse(chunk({"content": "..."}))
        + tools_delta(tool_piece(0, " 1}"))
        + sse(chunk({"content": " done."}))
        + sse(chunk({}, "tool_calls"))
        + b"data: [DONE]\n\n"
    )
    events = parse_events(encode(body))
    assert_blocks_in_order(events)
    message = accumulate(events)
    assert [b.type for b in message.content] == ["tool_use", "text"]
    assert message.content[0].input == {"a": 1}  # type: ignore[union-attr]
    assert message.content[1].text == "Checking... done."  # type: ignore[union-attr]
    # once the call closed, the text it held went out, and streams live again
    texts = [
        d["delta"]["text"] for n, d in events if d.get("delta", {}).get("type") == "text_delta"
    ]
    assert texts == ["Checking...", " done."]


def test_an_error_amid_interleaved_calls_sends_what_came_in_order_once() -> None:
    error = {"error": {"message": "cut", "type": "upstream_error", "code": "upstream_closed"}}
    body = (
        tools_delta(tool_piece(0, '{"city":', first=True))
        + tools_delta(tool_piece(1, '{"city": "Ro', first=True))
        + tools_delta(tool_piece(0, ' "Paris"'))
        + b"data: "
        + orjson.dumps(error)
        + b"\n\n"
    )
    events = parse_events(encode(body))
    assert_blocks_in_order(events)
    assert events[-1][0] == "error"
    arguments: dict[int, str] = {}
    for name, data in events:
        if name == "content_block_delta":
            arguments[data["index"]] = (
                arguments.get(data["index"], "") + data["delta"]["partial_json"]
            )
    assert arguments == {0: '{"city": "Paris"', 1: '{"city": "Ro'}


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


def pieces_of(data: st.DataObject, text: str) -> list[str]:
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(text)), max_size=5))))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


@given(st.data())
def test_any_interleaving_keeps_anthropics_block_order(data: st.DataObject) -> None:
    calls = data.draw(st.integers(1, 4))
    inputs = [
        data.draw(st.dictionaries(st.text(max_size=5), JSON_VALUES, max_size=4))
        for _ in range(calls)
    ]
    arguments = [
        json.dumps(obj, indent=data.draw(st.sampled_from([None, 1])))
        + data.draw(st.sampled_from(["", " ", "\n"]))
        for obj in inputs
    ]
    queues: list[list[dict[str, Any]]] = [
        [
            tool_piece(n, piece, first=m == 0)
            for m, piece in enumerate(pieces_of(data, text) or [""])
        ]
        for n, text in enumerate(arguments)
    ]
    texts = data.draw(st.lists(st.text(min_size=1, max_size=4), max_size=3))
    # the model's order: a call starts after the ones before it; once started,
    # its pieces (and the text's) come in any interleaving
    deltas: list[dict[str, Any]] = [{"reasoning_content": "plan"}]
    started = 0  # calls started so far
    text_queue = list(texts)
    while any(queues) or text_queue:
        ready = [n for n in range(started) if queues[n]]
        if started < calls:
            ready.append(started)
        choices = [("tool", n) for n in ready] + ([("text", 0)] if text_queue else [])
        kind, n = data.draw(st.sampled_from(choices))
        if kind == "text":
            deltas.append({"content": text_queue.pop(0)})
            continue
        started = max(started, n + 1)
        deltas.append({"tool_calls": [queues[n].pop(0)]})
    body = b"".join(sse(chunk(d)) for d in deltas)
    body += sse(chunk({}, "tool_calls")) + sse(usage_chunk()) + b"data: [DONE]\n\n"
    sizes = data.draw(st.lists(st.integers(min_value=0, max_value=120), max_size=10))
    events = parse_events(encode(body, cut_at(body, sizes)))
    assert_blocks_in_order(events)
    message = accumulate(events)
    tools = [b for b in message.content if b.type == "tool_use"]
    assert [(b.id, b.name, b.input) for b in tools] == [  # type: ignore[union-attr]
        (f"call_{n}", f"fn_{n}", obj) for n, obj in enumerate(inputs)
    ]
    assert "".join(b.text for b in message.content if b.type == "text") == "".join(texts)  # type: ignore[union-attr]
    assert message.content[0].type == "thinking"
    assert message.stop_reason == "tool_use"


# -- the legacy function_call --------------------------------------------------------

LEGACY = b"".join(
    [
        sse(
            chunk(
                {
                    "role": "assistant",
                    "content": None,
                    "function_call": {"name": "get_weather", "arguments": ""},
                }
            )
        ),
        sse(chunk({"function_call": {"arguments": '{"city":'}})),
        sse(chunk({"function_call": {"arguments": ' "Paris"}'}})),
        sse(chunk({}, "function_call")),
        b"data: [DONE]\n\n",
    ]
)


def test_a_legacy_function_call_streams_as_a_tool_use_block() -> None:
    # the regression: the call was dropped, the message ended empty
    events = parse_events(encode(LEGACY))
    assert_blocks_in_order(events)
    message = accumulate(events)
    assert [(b.type, b.id, b.name, b.input) for b in message.content] == [  # type: ignore[union-attr]
        ("tool_use", "toolu_test", "get_weather", {"city": "Paris"})
    ]
    assert message.stop_reason == "tool_use"
    assert encode(LEGACY, [LEGACY[n : n + 1] for n in range(len(LEGACY))]) == encode(LEGACY)


def test_a_whole_legacy_function_call_is_a_tool_use_block() -> None:
    completion = {
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "function_call": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                "finish_reason": "function_call",
            }
        ],
    }
    message = encoder().message(completion)
    assert message["content"] == [
        {"type": "tool_use", "id": "toolu_test", "name": "get_weather", "input": {"city": "Paris"}}
    ]
    assert message["stop_reason"] == "tool_use"
