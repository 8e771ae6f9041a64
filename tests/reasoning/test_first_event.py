"""StreamNormalizer.seen_data / first_error: whether a stream's first data
event is an error object (so the endpoint can answer with a real status)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.reasoning.normalizer import (
    StreamFailure,
    StreamNormalizer,
    answer_error,
    error_body,
    finished_with,
)
from tests.casefiles import cut_at

CHUNK = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'


def feed_all(*reads: bytes) -> StreamNormalizer:
    normalizer = StreamNormalizer()
    for data in reads:
        normalizer.feed(data)
    return normalizer


def test_comments_alone_are_not_data() -> None:
    normalizer = feed_all(b": keep-alive\n\n", b": again\n\n")
    assert normalizer.seen_data is False
    assert normalizer.first_error is None


def test_a_normal_first_event() -> None:
    normalizer = feed_all(b": keep-alive\n\n", CHUNK)
    assert normalizer.seen_data is True
    assert normalizer.first_error is None


@pytest.mark.parametrize(
    ("reads", "error"),
    [
        ((b'data: {"error": {"message": "m", "code": 429}}\n\n',), {"message": "m", "code": 429}),
        ((b": x\n\n", b'data: {"error": "plain"}\n\n'), "plain"),
        ((b'event: error\ndata: {"error": {"message": "m"}}\n\n',), {"message": "m"}),
        ((b'event: error\ndata: {"message": "bare"}\n\n',), {"message": "bare"}),
        ((b"event: error\ndata: not json\n\n",), "not json"),
        ((b'event: error\ndata: {"error": null}\n\n',), '{"error": null}'),
    ],
)
def test_an_error_first(reads: tuple[bytes, ...], error: object) -> None:
    normalizer = feed_all(*reads)
    assert normalizer.seen_data is True
    assert normalizer.first_error == error


def test_an_error_after_the_first_event_is_not_first() -> None:
    normalizer = feed_all(CHUNK, b'data: {"error": {"message": "late"}}\n\n')
    assert normalizer.first_error is None


def test_an_error_beside_choices_is_a_chunk_not_a_first_error() -> None:
    normalizer = feed_all(
        b'data: {"error": {"message": "m"}, "choices": [{"index": 0, "delta": {}}]}\n\n'
    )
    assert normalizer.first_error is None


def test_a_first_event_that_is_not_json() -> None:
    normalizer = feed_all(b"data: oops\n\n")
    assert normalizer.seen_data is True
    assert normalizer.first_error is None


def test_a_first_event_at_the_end_of_stream() -> None:
    normalizer = StreamNormalizer()
    normalizer.feed(b'data: {"error": {"message": "m"}}')  # no blank line yet
    assert normalizer.seen_data is False
    normalizer.finish()
    assert normalizer.first_error == {"message": "m"}


def test_error_body_is_the_openai_shape() -> None:
    assert error_body(StreamFailure("c", "m")) == (
        b'{"error":{"message":"m","type":"upstream_error","param":null,"code":"c"}}'
    )


@pytest.mark.parametrize(
    "reads",
    [
        (b"data: [DONE]\n\n",),
        (b": keep-alive\n\n", b"data: [DONE]\n\n"),
        (b"data: [DONE]\n\ndata: late\n\n",),  # [DONE] not last in its read
        (b"data: [DONE]",),  # at the end of the stream, without its blank line
    ],
)
def test_done_with_nothing_before_it_is_an_empty_answer(reads: tuple[bytes, ...]) -> None:
    normalizer = StreamNormalizer()
    out = b"".join(normalizer.feed(data) for data in reads) + normalizer.finish()
    assert normalizer.state == "failed"
    assert normalizer.failure is not None
    assert normalizer.failure.code == "upstream_empty_response"
    assert b"[DONE]" not in out
    assert b"upstream_empty_response" in out
    assert normalizer.turn().complete is False


@pytest.mark.parametrize(
    "before",
    [CHUNK, b'data: {"choices":[],"usage":{"total_tokens":1}}\n\n', b'data: {"id":"x"}\n\n'],
)
def test_done_after_any_chunk_is_the_end(before: bytes) -> None:
    normalizer = feed_all(before, b"data: [DONE]\n\n")
    assert normalizer.state == "done"
    assert normalizer.failure is None


# OpenRouter's error once a stream has begun: a chunk with an `error` at the
# top and its choice ended with finish_reason "error"
OPENROUTER_ERROR = (
    b'data: {"id": "gen-1", "object": "chat.completion.chunk", "model": "m", '
    b'"error": {"code": 429, "message": "Rate limited upstream"}, '
    b'"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]}\n\n'
)


@given(st.lists(st.integers(min_value=0, max_value=len(OPENROUTER_ERROR)), max_size=20))
def test_an_openrouter_error_first_is_the_first_error_split_anywhere(sizes: list[int]) -> None:
    normalizer = feed_all(b": OPENROUTER PROCESSING\n\n", *cut_at(OPENROUTER_ERROR, sizes))
    assert normalizer.first_error == {"code": 429, "message": "Rate limited upstream"}


@pytest.mark.parametrize(
    "error",
    [
        OPENROUTER_ERROR,
        b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "error"}]}\n\n',
    ],
)
def test_an_answer_ended_by_an_error_later_leaves_the_turn_incomplete(error: bytes) -> None:
    body = CHUNK + error
    for reads in ([body], [body[n : n + 1] for n in range(len(body))]):  # whole, byte by byte
        normalizer = feed_all(*reads)
        normalizer.finish()
        assert normalizer.first_error is None
        turn = normalizer.turn()
        assert (turn.content, turn.complete, turn.error) == ("hi", False, "upstream_error_event")


@pytest.mark.parametrize(
    ("obj", "error"),
    [
        ({"error": {"message": "m"}}, {"message": "m"}),
        ({"error": {"message": "m"}, "choices": []}, {"message": "m"}),
        ({"choices": [{"index": 0, "delta": {"content": "a"}}]}, None),
        ({"error": {"message": "m"}, "choices": [{"index": 0, "delta": {}}]}, None),
        ({"error": "m", "choices": {"not": "a list"}}, None),
        (
            {"error": {"message": "top"}, "choices": ["junk", {"finish_reason": "error"}]},
            {"message": "top"},
        ),
        (
            {"choices": [{"finish_reason": "error", "error": {"code": 502, "message": "busy"}}]},
            {"code": 502, "message": "busy"},
        ),
        (
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "error"}]},
            finished_with("error"),
        ),
        (
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "abort"}]},
            finished_with("abort"),
        ),
        ({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}, None),
    ],
)
def test_the_error_an_answer_carries(obj: dict[str, Any], error: object) -> None:
    assert answer_error(obj) == error
