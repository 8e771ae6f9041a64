"""Mistral's `content` as a list of thinking and text chunks, read as chat's
fields (proxy.reasoning.native.content_parts_as_fields), through the
normalizer streamed (the chunks in pieces, cut anywhere) and whole."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.reasoning.channels import NormalizeOptions
from proxy.reasoning.modes import stream_as_completion
from proxy.reasoning.native import content_parts_as_fields
from proxy.reasoning.normalizer import StreamNormalizer, normalize_completion


def thinking(*texts: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": [{"type": "text", "text": t} for t in texts]}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def test_the_chunks_become_fields() -> None:
    message: dict[str, Any] = {"content": [thinking("a", "b"), text("The answer"), text(" is 4.")]}
    assert content_parts_as_fields(message)
    assert message == {"content": "The answer is 4.", "reasoning_content": "ab"}


def test_odd_chunks_are_left_out_and_strings_are_left_alone() -> None:
    message: dict[str, Any] = {
        "reasoning_content": "before ",
        "content": [
            "loose",
            {"type": "thinking", "thinking": "plain"},
            {"type": "thinking", "thinking": [7, {"text": 1}, {"type": "text", "text": "x"}]},
            {"type": "thinking", "thinking": None},
            {"type": "image_url", "image_url": {"url": "u"}},
            {"type": "text", "text": None},
        ],
    }
    assert content_parts_as_fields(message)
    assert message == {"content": "", "reasoning_content": "before plainx"}
    only_text: dict[str, Any] = {"content": [text("hi")]}
    assert content_parts_as_fields(only_text)
    assert only_text == {"content": "hi"}
    plain = {"content": "hi"}
    assert not content_parts_as_fields(plain)
    assert plain == {"content": "hi"}


DELTAS: list[Any] = [
    {"role": "assistant", "content": [thinking("Add two ")]},
    {"content": [thinking("and two.")]},
    {"content": [text("It is ")]},
    {"content": "4."},  # a string among them, as Mistral sends the answer too
]


def sse(deltas: list[Any]) -> bytes:
    chunks = [
        {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
        for choice in [{"index": 0, "delta": d, "finish_reason": None} for d in deltas]
        + [{"index": 0, "delta": {}, "finish_reason": "stop"}]
    ]
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


@given(st.lists(st.integers(1, 400), max_size=6))
def test_a_stream_of_chunks_is_separated_wherever_it_is_cut(cuts: list[int]) -> None:
    body = sse(DELTAS)
    normalizer = StreamNormalizer()
    out = b""
    start = 0
    for cut in sorted(set(cuts)):
        out += normalizer.feed(body[start:cut])
        start = max(start, cut)
    out += normalizer.feed(body[start:]) + normalizer.finish()
    message = stream_as_completion(out, 1 << 20)["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == ("Add two and two.", "It is 4.")
    turn = normalizer.turn()
    assert turn.content == "It is 4."
    assert [b.thought for b in turn.thinking] == ["Add two and two."]


def test_a_whole_answer_and_reasoning_kept_from_the_client() -> None:
    body: dict[str, Any] = {
        "choices": [{"index": 0, "message": {"content": [thinking("Sum."), text("4")]}}]
    }
    changed, turn = normalize_completion(body, NormalizeOptions(include_in_response=False))
    assert changed
    assert body["choices"][0]["message"] == {"content": "4"}
    assert turn is not None
    assert [b.thought for b in turn.thinking] == ["Sum."]
