"""`X-Reasoning-Output: reasoning_details` when the upstream sends items of
its own beside reasoning the proxy numbers (tagged text, thinking blocks,
`reasoning_content`): one choice's items never share an `index` unless they
are pieces of one item, so a client that merges pieces by `index` (as
OpenRouter's do) gets each item whole. Sans-IO, streamed in reads of 1-3
bytes and whole."""

from __future__ import annotations

import random
from typing import Any

import pytest

from proxy.reasoning.normalizer import NormalizeOptions, StreamNormalizer, normalize_completion
from tests.casefiles import chunk, render_stream
from tests.outputshapes import deltas, read
from tests.shapecases import completion

SHAPE = NormalizeOptions(output="reasoning_details")
SECRET = {"type": "reasoning.encrypted", "data": "gAAAA-blob", "index": 0}


def streamed(chunks: list[dict[str, Any]], seed: int | None) -> list[dict[str, Any]]:
    body = render_stream(chunks)
    normalizer = StreamNormalizer(SHAPE)
    if seed is None:
        out = normalizer.feed(body)
    else:
        rng = random.Random(seed)
        pieces, pos = [], 0
        while pos < len(body):
            size = rng.randint(1, 3)
            pieces.append(body[pos : pos + size])
            pos += size
        out = b"".join(normalizer.feed(p) for p in pieces)
    return read(deltas(out + normalizer.finish()), "reasoning_details")["details"]  # type: ignore[no-any-return]


def whole(message: dict[str, Any]) -> list[dict[str, Any]]:
    body = completion(message)
    normalize_completion(body, SHAPE)
    return body["choices"][0]["message"]["reasoning_details"]  # type: ignore[no-any-return]


STREAMS: dict[str, tuple[list[dict[str, Any]], list[tuple[int, str, str]]]] = {
    "upstream item, then tagged reasoning": (
        [chunk({"reasoning_details": [SECRET]}), chunk({"content": "<think>T</think>A"})],
        [(0, "reasoning.encrypted", ""), (1, "reasoning.text", "T")],
    ),
    "tagged reasoning, then an upstream item in pieces": (
        [
            chunk({"content": "<think>T</think>"}),
            chunk({"reasoning_details": [{"type": "reasoning.text", "text": "Up", "index": 0}]}),
            chunk({"reasoning_details": [{"type": "reasoning.text", "text": "per", "index": 0}]}),
            chunk({"content": "A"}),
        ],
        [(0, "reasoning.text", "T"), (1, "reasoning.text", "Upper")],
    ),
    "a signed thinking block, then an upstream item": (
        [
            chunk({"thinking_blocks": [{"type": "thinking", "thinking": "B", "signature": "s"}]}),
            chunk({"reasoning_details": [SECRET]}),
            chunk({"content": "A"}),
        ],
        [(0, "reasoning.text", "B"), (1, "reasoning.encrypted", "")],
    ),
    "an upstream item at 1, then reasoning_content": (
        [
            chunk({"reasoning_details": [{**SECRET, "index": 1}]}),
            chunk({"reasoning_content": "R"}),
            chunk({"content": "A"}),
        ],
        [(1, "reasoning.encrypted", ""), (2, "reasoning.text", "R")],
    ),
}


@pytest.mark.parametrize("seed", [None, 1, 2], ids=["whole-reads", "reads-1-3", "reads-1-3b"])
@pytest.mark.parametrize("name", list(STREAMS))
def test_streamed_items_keep_their_own_index(name: str, seed: int | None) -> None:
    chunks, want = STREAMS[name]
    got = streamed([*chunks, chunk({}, "stop")], seed)
    assert [(d["index"], d["type"], d.get("text", "")) for d in got] == want
    assert [d.get("data") for d in got if d["type"] == "reasoning.encrypted"] in (
        [],
        ["gAAAA-blob"],
    )


def test_upstream_items_without_a_clash_or_an_index_pass_as_they_came() -> None:
    items = [
        {"type": "reasoning.text", "text": "Step", "index": 0},
        {"type": "reasoning.encrypted", "data": "x"},
    ]
    normalizer = StreamNormalizer(SHAPE)
    out = normalizer.feed(render_stream([chunk({"reasoning_details": items}), chunk({}, "stop")]))
    assert deltas(out)[0] == {"reasoning_details": items}


def test_a_whole_message_numbers_its_items_apart() -> None:
    message = {
        "content": "A",
        "reasoning_content": "R",
        "reasoning_details": [SECRET],
    }
    assert [(d["index"], d["type"]) for d in whole(message)] == [
        (0, "reasoning.encrypted"),
        (1, "reasoning.text"),
    ]
    blocks = [{"type": "thinking", "thinking": "B", "signature": "s", "index": 0}]
    message = {"content": "A", "thinking_blocks": blocks, "reasoning_details": [SECRET]}
    assert [(d["index"], d["type"]) for d in whole(message)] == [
        (0, "reasoning.encrypted"),
        (1, "reasoning.text"),
    ]
