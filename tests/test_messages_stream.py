"""Normalized chat SSE -> Anthropic Messages events (proxy.doors.messages.stream):
fed whole, byte by byte and split at random points; each event validated
against the anthropic SDK's types and accumulated by the SDK's own helper."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.doors.messages.stream import MessagesEncoder
from tests.casefiles import chunk, cut_at
from tests.harness import sse
from tests.messages_wire import accumulate, parse_events, validated


def seal(text: str, artefacts: dict[str, Any]) -> str:
    return "sealed:" + orjson.dumps([text, artefacts]).decode()


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
    assert events[0][1]["message"]["usage"] == {"input_tokens": 42, "output_tokens": 0}
    assert events[4][1]["delta"] == {
        "type": "signature_delta",
        "signature": seal("The user asks about weather.", {}),
    }
    assert events[-2][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"input_tokens": 11, "output_tokens": 7},
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
    assert events[-2][1]["usage"] == {"input_tokens": 42, "output_tokens": 10}


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
        "cache_read_input_tokens": 60,
    }


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
        "usage": {"input_tokens": 3, "output_tokens": 4},
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
