"""Native reasoning shapes in detail: thinking blocks and `thinking` objects
(their edges), and that nothing of them reaches a client that asked for no
reasoning."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from proxy.reasoning.builder import TurnBuilder
from proxy.reasoning.native import native_text, thinking_signature, thinking_text
from proxy.reasoning.normalizer import NormalizeOptions, StreamNormalizer, normalize_completion
from tests.casefiles import chunk, read_stream, render_stream
from tests.shapecases import CASES

HIDDEN = NormalizeOptions(include_in_response=False)
SECRETS = (b"thinking_blocks", b"redacted", b"ENCRYPTED", b"EqoB", b"Eo8D", b"think.", b"sig-part")
WITH_THINKING = [c for c in CASES if c.id.startswith(("litellm", "thinking"))]


@pytest.mark.parametrize("case", WITH_THINKING, ids=[c.id for c in WITH_THINKING])
def test_nothing_of_the_reasoning_reaches_a_client_that_asked_for_none(case: Any) -> None:
    """Thinking blocks, their signatures and `thinking` objects are removed
    (also where LiteLLM repeats them in `provider_specific_fields`); the
    store still keeps everything, hidden."""
    chunks = copy.deepcopy(case.chunks)
    for c in chunks:
        delta = c["choices"][0]["delta"]
        if "thinking_blocks" in delta:
            delta["provider_specific_fields"] = {"thinking_blocks": delta["thinking_blocks"]}
    normalizer = StreamNormalizer(HIDDEN)
    out = normalizer.feed(render_stream(chunks)) + normalizer.finish()
    for secret in SECRETS:
        assert secret not in out, secret
    assert read_stream(out)["content"].strip() == case.content
    turn = normalizer.turn()
    assert [b.thought.strip() for b in turn.thinking if b.thought] == case.thinking
    assert all(b.is_hidden for b in turn.thinking)
    body = copy.deepcopy(case.completion)
    body["choices"][0]["message"]["provider_specific_fields"] = {"thinking_blocks": [], "x": 1}
    changed, whole = normalize_completion(body, HIDDEN)
    assert changed
    for secret in SECRETS:
        assert secret not in orjson.dumps(body), secret
    assert body["choices"][0]["message"]["provider_specific_fields"] == {"x": 1}
    assert whole is not None
    assert [b.signature for b in whole.thinking] == [b.signature for b in turn.thinking]


def test_thinking_block_items_are_kept_whole_for_round_trips() -> None:
    (case,) = [c for c in CASES if c.id == "litellm-thinking-blocks"]
    normalizer = StreamNormalizer()
    normalizer.feed(render_stream(case.chunks))
    normalizer.finish()
    blocks = normalizer.turn().thinking
    assert [b.encrypted for b in blocks] == [
        ({"type": "thinking", "thinking": "Let me think.", "signature": case.blocks[0][1]},),
        ({"type": "redacted_thinking", "data": "ENCRYPTED-BLOB"},),
    ]


def test_several_thinking_blocks_in_one_delta_are_separate_blocks() -> None:
    blocks = [
        {"type": "thinking", "thinking": "a", "signature": "s1"},
        "junk",
        {"type": "thinking", "thinking": "b", "signature": "s2"},
    ]
    chunks = [chunk({"content": "x"}), chunk({"thinking_blocks": blocks}), chunk({}, "stop")]
    normalizer = StreamNormalizer()
    out = normalizer.feed(render_stream(chunks)) + normalizer.finish()
    # a block after the answer's text: the client gets it on its own, in order
    assert read_stream(out)["reasoning"] == "a\n\nb"
    assert [(b.thought, b.signature) for b in normalizer.turn().thinking] == [
        ("a", "s1"),
        ("b", "s2"),
    ]


def test_a_new_thinking_block_after_earlier_reasoning_is_separated() -> None:
    chunks = [
        chunk({"thinking_blocks": [{"type": "thinking", "thinking": "a", "signature": "s"}]}),
        chunk({"thinking_blocks": [{"type": "thinking", "thinking": "b"}]}),
        chunk({}, "stop"),
    ]
    (out,) = [StreamNormalizer().feed(render_stream(chunks))]
    assert read_stream(out)["reasoning"] == "a\n\nb"


def test_thinking_blocks_beyond_the_bound_are_cut() -> None:
    builder = TurnBuilder(max_reasoning_bytes=5)
    builder.thinking_blocks([{"type": "thinking", "thinking": "abcdefgh", "signature": "s"}])
    turn = builder.build()
    assert turn.reasoning_truncated
    assert turn.thinking[0].thought == "abcde"
    assert turn.thinking[0].encrypted == (
        {"type": "thinking", "thinking": "abcdefgh", "signature": "s"},
    )


def test_a_signature_without_text_is_a_block_of_its_own() -> None:
    chunks = [
        chunk({"content": "A"}),
        chunk({"thinking": {"signature": "withheld"}}),
        chunk({}, "stop"),
    ]
    normalizer = StreamNormalizer()
    normalizer.feed(render_stream(chunks))
    (block,) = normalizer.turn().thinking
    assert (block.thought, block.signature, block.is_hidden) == ("", "withheld", True)


def test_native_text_of_odd_values() -> None:
    assert thinking_text({"x": 1}) == ""
    assert thinking_text(42) == ""
    assert thinking_text([{"text": "a"}, "b", {"content": [{"text": "c"}]}]) == "abc"
    assert thinking_signature({"signature": 7}) is None
    assert thinking_signature("text") is None
    assert native_text({"thinking": {"text": ""}, "reasoning": "r"}) == ("r", "reasoning")
    assert native_text({"thinking_blocks": [{"type": "thinking", "thinking": "t"}]}) == (
        "t",
        "thinking_blocks",
    )
    assert native_text({"thinking_blocks": [{"type": "redacted_thinking", "data": "x"}]}) is None
