"""StreamNormalizer.seen_data / first_error: whether a stream's first data
event is an error object (so the endpoint can answer with a real status)."""

from __future__ import annotations

import pytest

from proxy.reasoning.normalizer import StreamFailure, StreamNormalizer, error_body

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
