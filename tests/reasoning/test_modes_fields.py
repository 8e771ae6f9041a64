"""proxy.reasoning.modes: what a conversion keeps beside the message: each
choice's `logprobs`, `system_fingerprint` and `service_tier`, and where the
usage goes (a chunk of its own only when the request asked for it)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.reasoning.modes import asks_usage, completion_as_stream, stream_as_completion

LIMIT = 1 << 20
USAGE = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}


def token(text: str) -> dict[str, Any]:
    return {"token": text, "logprob": -0.5, "bytes": None, "top_logprobs": []}


COMPLETION: dict[str, Any] = {
    "id": "c",
    "object": "chat.completion",
    "created": 2,
    "model": "m",
    "system_fingerprint": "fp_1",
    "service_tier": "flex",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "ab"},
            "logprobs": {"content": [token("a"), token("b")], "refusal": None},
            "finish_reason": "stop",
        },
        {"index": 1, "message": {"role": "assistant", "content": "c"}, "finish_reason": "stop"},
    ],
    "usage": USAGE,
}


def events(body: bytes) -> list[Any]:
    return [
        orjson.loads(line[6:]) if line != b"data: [DONE]" else "[DONE]"
        for line in body.split(b"\n\n")
        if line
    ]


@pytest.mark.parametrize(
    ("payload", "asked"),
    [
        ({"stream_options": {"include_usage": True}}, True),
        ({"stream_options": {"include_usage": False}}, False),
        ({"stream_options": {"include_usage": "true"}}, False),
        ({"stream_options": None}, False),
        ({"stream_options": ["include_usage"]}, False),
        ({}, False),
    ],
)
def test_asks_usage_reads_stream_options(payload: dict[str, Any], asked: bool) -> None:
    assert asks_usage(payload) is asked


def test_the_usage_chunk_only_when_asked() -> None:
    first, second, usage, done = events(completion_as_stream(COMPLETION, usage_chunk=True))
    assert (usage["choices"], usage["usage"], done) == ([], USAGE, "[DONE]")
    assert "usage" not in first
    assert "usage" not in second
    first, second, done = events(completion_as_stream(COMPLETION, usage_chunk=False))
    assert "usage" not in first
    assert second["usage"] == USAGE
    assert [c["index"] for c in second["choices"]] == [1]


def test_usage_without_a_choice_still_comes_on_its_own() -> None:
    only = {"choices": ["x"], "usage": USAGE}
    usage, done = events(completion_as_stream(only, usage_chunk=False))
    assert (usage["choices"], usage["usage"], done) == ([], USAGE, "[DONE]")


def test_a_completion_streamed_keeps_its_fields() -> None:
    first, second, _ = events(completion_as_stream(COMPLETION, usage_chunk=False))
    for chunk in (first, second):
        assert (chunk["system_fingerprint"], chunk["service_tier"]) == ("fp_1", "flex")
    assert first["choices"][0]["logprobs"] == COMPLETION["choices"][0]["logprobs"]
    assert "logprobs" not in second["choices"][0]


def sse(*chunks: Any) -> bytes:
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def chunk(index: int, content: str, logprobs: Any, finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "c",
        "model": "m",
        "system_fingerprint": "fp_1",
        "service_tier": "flex",
        "choices": [
            {
                "index": index,
                "delta": {"content": content},
                "logprobs": logprobs,
                "finish_reason": finish,
            }
        ],
    }


def test_a_stream_made_whole_joins_each_choices_logprobs() -> None:
    body = sse(
        chunk(0, "a", {"content": [token("a")], "refusal": None}),
        chunk(1, "", {"content": None, "refusal": [token("no")]}),
        chunk(0, "b", {"content": [token("b")], "refusal": None}),
        chunk(1, "", {"content": None, "refusal": [token("pe")]}),
        chunk(0, "", None, "stop"),
        chunk(1, "", "not an object", "stop"),
    )
    completion = stream_as_completion(body, LIMIT)
    assert completion is not None
    assert (completion["system_fingerprint"], completion["service_tier"]) == ("fp_1", "flex")
    first, second = completion["choices"]
    assert first["logprobs"] == {"content": [token("a"), token("b")], "refusal": None}
    assert second["logprobs"] == {"content": None, "refusal": [token("no"), token("pe")]}


def test_a_stream_without_logprobs_has_none() -> None:
    completion = stream_as_completion(sse(chunk(0, "a", None, "stop")), LIMIT)
    assert completion is not None
    assert completion["choices"][0]["logprobs"] is None


def test_a_completion_round_trips_with_its_logprobs() -> None:
    back = stream_as_completion(completion_as_stream(COMPLETION, usage_chunk=False), LIMIT)
    assert back is not None
    assert back["usage"] == USAGE
    assert [c["logprobs"] for c in back["choices"]] == [COMPLETION["choices"][0]["logprobs"], None]
    assert (back["system_fingerprint"], back["service_tier"]) == ("fp_1", "flex")


def delta_chunk(**delta: Any) -> dict[str, Any]:
    return {"id": "c", "model": "m", "choices": [{"index": 0, "delta": delta}]}


def test_streamed_reasoning_items_are_put_together() -> None:
    body = sse(
        delta_chunk(reasoning_details=[{"type": "reasoning.text", "text": "a", "index": 0}, "x"]),
        delta_chunk(reasoning_details=[{"type": "reasoning.text", "text": "b", "index": 0}]),
        delta_chunk(reasoning_details="not a list"),
        delta_chunk(thinking_blocks=[{"type": "thinking", "thinking": "c"}, "x"]),
        delta_chunk(thinking_blocks=[{"type": "thinking", "thinking": "d", "signature": "S"}]),
        delta_chunk(thinking_blocks=[{"type": "thinking", "thinking": "e"}]),
        delta_chunk(thinking_blocks=[{"type": "redacted_thinking", "data": "R"}]),
        delta_chunk(thinking_blocks=[{"type": "thinking", "thinking": "f"}]),
        delta_chunk(thinking_blocks=[{"type": "thinking", "thinking": "g", "index": 5}]),
        delta_chunk(thinking_blocks=[{"type": "thinking", "thinking": "h", "index": 5}]),
        delta_chunk(thinking_blocks=[{"type": "thinking", "thinking": "i"}]),
        delta_chunk(thinking_blocks="not a list"),
        delta_chunk(annotations=[{"type": "url_citation", "n": 1}]),
        delta_chunk(annotations=[{"type": "url_citation", "n": 2}]),
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    )
    completion = stream_as_completion(body, LIMIT)
    assert completion is not None
    message = completion["choices"][0]["message"]
    assert message["reasoning_details"] == [{"type": "reasoning.text", "text": "ab", "index": 0}]
    assert [a["n"] for a in message["annotations"]] == [1, 2]  # other lists: joined
    assert message["thinking_blocks"] == [
        {"type": "thinking", "thinking": "cd", "signature": "S"},
        {"type": "thinking", "thinking": "e"},
        {"type": "redacted_thinking", "data": "R"},
        {"type": "thinking", "thinking": "f"},
        {"type": "thinking", "thinking": "gh", "index": 5},
        {"type": "thinking", "thinking": "i"},
    ]
