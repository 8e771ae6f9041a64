"""proxy.reasoning.modes: a whole completion as a stream and back."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.reasoning.modes import completion_as_stream, stream_as_completion
from proxy.reasoning.normalizer import StreamNormalizer
from proxy.reasoning.sse import SSELineTooLong

LIMIT = 1 << 20

CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
COMPLETION: dict[str, Any] = {
    "id": "c1",
    "object": "chat.completion",
    "created": 7,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Hi.",
                "reasoning_content": "Think.",
                "tool_calls": [CALL],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
}


def events(body: bytes) -> list[Any]:
    return [
        orjson.loads(line[6:]) if line != b"data: [DONE]" else "[DONE]"
        for line in body.split(b"\n\n")
        if line
    ]


def test_a_completion_streams_as_one_chunk_a_usage_chunk_and_done() -> None:
    out = events(completion_as_stream(COMPLETION))
    chunk, usage, done = out
    assert chunk["object"] == "chat.completion.chunk"
    assert (chunk["id"], chunk["created"], chunk["model"]) == ("c1", 7, "m")
    (choice,) = chunk["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["delta"]["content"] == "Hi."
    assert choice["delta"]["tool_calls"] == [{**CALL, "index": 0}]
    assert usage["choices"] == []
    assert usage["usage"] == COMPLETION["usage"]
    assert done == "[DONE]"


def test_odd_completions_still_stream() -> None:
    odd = {"choices": ["x", {"message": "not a dict"}, {"message": {"content": None}}]}
    out = events(completion_as_stream(odd))
    assert [c["choices"][0]["delta"] for c in out[:-1]] == [{}, {}]
    assert out[-1] == "[DONE]"
    assert events(completion_as_stream({"choices": None})) == ["[DONE]"]


def test_the_stream_normalizes_as_the_completion_would() -> None:
    normalizer = StreamNormalizer()
    normalizer.feed(completion_as_stream(COMPLETION))
    turn = normalizer.turn()
    assert normalizer.state == "done"
    assert turn.content == "Hi."
    assert [b.thought for b in turn.thinking] == ["Think."]
    assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == [("call_1", "f", '{"a":1}')]


def sse(*chunks: Any) -> bytes:
    return b"".join(
        b"data: " + (c if isinstance(c, bytes) else orjson.dumps(c)) + b"\n\n" for c in chunks
    )


def test_a_stream_adds_up_to_its_completion() -> None:
    body = (
        b": keep-alive\n\n"
        + sse(
            {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
            {"choices": [{"index": 0, "delta": {"reasoning_content": "a", "content": None}}]},
            {"choices": [{"index": 0, "delta": {"reasoning_content": "b", "content": "X"}}]},
            {"choices": [{"delta": {"reasoning_details": [{"text": "d1"}]}}]},
            {"choices": [{"delta": {"reasoning_details": [{"text": "d2"}], "n": 1}}]},
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [
                                {"index": 0, "id": "call_1", "function": {"name": "f"}},
                                "junk",
                            ]
                        },
                    }
                ]
            },
            {
                "choices": [
                    {"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}
                ]
            },
            {"choices": [{"delta": {"tool_calls": "junk"}}, "junk"]},
            [1, 2],
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
            {"choices": [], "usage": {"total_tokens": 5}},
        )
        + b"data: [DONE]\n\ndata: {after}\n\n"
    )
    completion = stream_as_completion(body, LIMIT)
    assert completion is not None
    assert (completion["id"], completion["model"]) == ("c", "m")
    assert completion["object"] == "chat.completion"
    (choice,) = completion["choices"]
    message = choice["message"]
    assert message["content"] == "X"
    assert message["reasoning_content"] == "ab"
    assert message["reasoning_details"] == [{"text": "d1"}, {"text": "d2"}]
    assert message["n"] == 1
    assert message["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ]
    assert choice["finish_reason"] == "tool_calls"
    assert completion["usage"] == {"total_tokens": 5}


def test_a_stream_without_a_chunk_is_none_and_an_error_first_is_the_error() -> None:
    assert stream_as_completion(b"data: [DONE]\n\n", LIMIT) is None
    assert stream_as_completion(b"not a stream at all", LIMIT) is None
    assert stream_as_completion(sse(b"{not json"), LIMIT) is None
    assert stream_as_completion(sse({"error": {"message": "no"}}), LIMIT) == {
        "error": {"message": "no"}
    }
    usage_only = stream_as_completion(
        sse({"choices": [], "usage": {"total_tokens": 1}}, b"[DONE]"), LIMIT
    )
    assert usage_only == {"object": "chat.completion", "choices": [], "usage": {"total_tokens": 1}}
    plain = stream_as_completion(sse({"choices": [{"delta": {"content": "x"}}]}, b"[DONE]"), LIMIT)
    assert plain is not None
    assert plain["choices"][0]["message"] == {"role": "assistant", "content": "x"}


def test_a_stream_that_fails_or_stops_short_is_an_error() -> None:
    """Half an answer is not an answer: an error anywhere, or an end before
    [DONE] and before any finish_reason, gives the error to answer with."""
    part = {"choices": [{"delta": {"content": "half"}}]}
    closed = stream_as_completion(sse(part), LIMIT)
    assert closed is not None
    assert closed["error"]["code"] == "upstream_closed"
    finished = stream_as_completion(sse(part, {"choices": [{"finish_reason": "stop"}]}), LIMIT)
    assert finished is not None
    assert finished["choices"][0]["message"]["content"] == "half"  # a finish_reason ends it
    late = stream_as_completion(sse(part, {"error": {"message": "late", "code": 500}}), LIMIT)
    assert late == {"error": {"message": "late", "code": 500}}
    named = b"event: error\ndata: " + orjson.dumps({"error": {"message": "named"}}) + b"\n\n"
    assert stream_as_completion(sse(part) + named, LIMIT) == {"error": {"message": "named"}}
    bare = b"event: error\ndata: null\n\n"
    failed = stream_as_completion(sse(part) + bare, LIMIT)
    assert failed is not None
    assert failed["error"]["code"] == "upstream_closed"
    with pytest.raises(SSELineTooLong):
        stream_as_completion(sse({"choices": [{"delta": {"content": "x" * 200}}]}), 100)


def test_deltas_of_another_type_replace_rather_than_join() -> None:
    body = sse(
        {"choices": [{"delta": {"content": [{"type": "text", "text": "a"}]}}]},
        {"choices": [{"delta": {"content": "b", "extra": ["x"]}}]},
        {"choices": [{"delta": {"extra": "y"}, "finish_reason": "stop"}]},
    )
    completion = stream_as_completion(body, LIMIT)
    assert completion is not None
    assert completion["choices"][0]["message"]["content"] == "b"
    assert completion["choices"][0]["message"]["extra"] == "y"


texts = st.text(max_size=20)
messages = st.fixed_dictionaries(
    {"role": st.just("assistant"), "content": texts},
    optional={"reasoning_content": texts.filter(bool)},
)


@given(
    st.lists(st.tuples(messages, st.sampled_from(["stop", "length", None])), min_size=1, max_size=3)
)
def test_a_completion_round_trips_through_its_stream(
    choices: list[tuple[dict[str, Any], str | None]],
) -> None:
    completion = {
        "id": "c",
        "model": "m",
        "object": "chat.completion",
        "choices": [
            {"index": n, "message": message, "finish_reason": finish}
            for n, (message, finish) in enumerate(choices)
        ],
    }
    back = stream_as_completion(completion_as_stream(completion), LIMIT)
    assert back is not None
    for got, sent in zip(back["choices"], completion["choices"], strict=True):
        assert got["finish_reason"] == sent["finish_reason"]
        for key in ("content", "reasoning_content"):
            assert (got["message"].get(key) or "") == sent["message"].get(key, "")


def test_a_stream_whose_choice_ends_with_an_error_is_the_error() -> None:
    """OpenRouter's failure after the first chunk: the error at the top, the
    choice ended with finish_reason "error"; half an answer is not one."""
    body = sse(
        b'{"choices": [{"index": 0, "delta": {"content": "Hel"}}]}',
        b'{"error": {"code": "server_error", "message": "Provider disconnected"},'
        b' "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]}',
    )
    assert stream_as_completion(body + b"data: [DONE]\n\n", LIMIT) == {
        "error": {"code": "server_error", "message": "Provider disconnected"}
    }


def test_a_legacy_function_call_adds_up_from_its_pieces() -> None:
    # the regression: each piece replaced the one before (name "", the last arguments)
    body = sse(
        {"choices": [{"delta": {"function_call": {"name": "f", "arguments": ""}}}]},
        {"choices": [{"delta": {"function_call": {"arguments": '{"a":'}}}]},
        {"choices": [{"delta": {"function_call": {"arguments": "1}"}}}]},
        {"choices": [{"delta": {}, "finish_reason": "function_call"}]},
    )
    completion = stream_as_completion(body, LIMIT)
    assert completion is not None
    message = completion["choices"][0]["message"]
    assert message["function_call"] == {"name": "f", "arguments": '{"a":1}'}
    assert completion["choices"][0]["finish_reason"] == "function_call"
