"""The output shapes through the sans-IO normalizer: every input shape of
tests/shapecases.py, streamed (whole and in reads of 1-3 bytes) and
non-streamed, read back as a client of each output shape reads it; the
stored turn is the same whatever the shape."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.reasoning.normalizer import NormalizeOptions, StreamNormalizer, normalize_completion
from proxy.reasoning.output import unescape_inner_close
from tests.casefiles import chunk, cut_at, no_ws, render_stream
from tests.outputshapes import SHAPES, deltas, read
from tests.shapecases import CASES, InputCase

# think_tags wraps reasoning in <think> inside content: an answer that holds a
# literal <think> (tags off, or only at the start) cannot be told apart there
CASES_FOR = {
    shape: [c for c in CASES if not (shape == "think_tags" and c.literal_tags)] for shape in SHAPES
}
PAIRS = [(shape, case) for shape in SHAPES for case in CASES_FOR[shape]]
PAIR_IDS = [f"{shape}-{case.id}" for shape, case in PAIRS]
# reasoning fields a client of each shape may see
ALLOWED = {
    "reasoning_content": {"reasoning_content", "reasoning_details", "thinking_blocks"},
    "reasoning": {"reasoning", "reasoning_details", "thinking_blocks"},
    "think_tags": {"reasoning_details", "thinking_blocks"},
    "reasoning_details": {"reasoning_details"},
    "none": set(),
}


def options(case: InputCase, shape: str, **kw: Any) -> NormalizeOptions:
    if case.max_reasoning_bytes is not None:
        kw.setdefault("max_reasoning_bytes", case.max_reasoning_bytes)
    return NormalizeOptions(tags=case.tags(), implicit_open_tag=case.implicit, output=shape, **kw)  # type: ignore[arg-type]


def streamed(case: InputCase, shape: str, pieces: list[bytes] | None = None) -> tuple[Any, Any]:
    body = render_stream(case.chunks)
    normalizer = StreamNormalizer(options(case, shape))
    out = b"".join(normalizer.feed(p) for p in (pieces if pieces is not None else [body]))
    out += normalizer.finish()
    assert out.endswith(b"data: [DONE]\n\n")
    return deltas(out), normalizer.turn()


def check(case: InputCase, shape: str, parts: list[dict[str, Any]], turn: Any) -> None:
    got = read(parts, shape)
    assert got["content"].strip() == case.content
    assert no_ws(got["reasoning"]) == ("" if shape == "none" else case.client_reasoning)
    assert set(got["fields"]) <= ALLOWED[shape], got["fields"]
    assert [b.thought.strip() for b in turn.thinking if b.thought] == case.thinking
    assert all(b.is_hidden for b in turn.thinking) if shape == "none" else True
    if shape == "think_tags":
        # the tags are never split across deltas
        whole = "".join(p.get("content") or "" for p in parts)
        for tag in ("<think>", "</think>"):
            assert whole.count(tag) == sum((p.get("content") or "").count(tag) for p in parts)


@pytest.mark.parametrize(("shape", "case"), PAIRS, ids=PAIR_IDS)
def test_streamed(shape: str, case: InputCase) -> None:
    parts, turn = streamed(case, shape)
    check(case, shape, parts, turn)
    _, default = streamed(case, "reasoning_content")
    if shape != "none":
        assert turn == default  # the store keeps the same, whatever the client's shape


@pytest.mark.parametrize(("shape", "case"), PAIRS, ids=PAIR_IDS)
def test_streamed_in_reads_of_1_to_3_bytes(shape: str, case: InputCase) -> None:
    body = render_stream(case.chunks)
    rng = random.Random(3)
    parts, turn = streamed(case, shape, cut_at(body, [rng.randint(1, 3) for _ in body]))
    check(case, shape, parts, turn)
    whole, _ = streamed(case, shape)
    assert read(parts, shape) == read(whole, shape)


@pytest.mark.parametrize(("shape", "case"), PAIRS, ids=PAIR_IDS)
def test_non_streamed(shape: str, case: InputCase) -> None:
    body = copy.deepcopy(case.completion)
    _, turn = normalize_completion(body, options(case, shape))
    check(case, shape, [body["choices"][0]["message"]], turn)


def test_think_tags_streamed_look_like_a_model_that_writes_them() -> None:
    chunks = [
        chunk({"role": "assistant", "content": "", "reasoning_content": "Let me"}),
        chunk({"reasoning_content": " think."}),
        chunk({"content": "Four."}),
        chunk({}, "stop"),
    ]
    parts, _ = streamed_chunks(chunks, "think_tags")
    assert [p.get("content") for p in parts] == [
        "<think>\nLet me",
        " think.",
        "\n</think>\n\nFour.",
        None,
    ]
    assert parts[0]["role"] == "assistant"


def test_think_tags_close_before_a_tool_call_and_at_the_end() -> None:
    call = {
        "index": 0,
        "id": "c1",
        "type": "function",
        "function": {"name": "f", "arguments": "{}"},
    }
    chunks = [
        chunk({"reasoning_content": "plan"}),
        chunk({"tool_calls": [call]}),
        chunk({"reasoning_content": "more"}),
        chunk({}, "tool_calls"),
    ]
    parts, _ = streamed_chunks(chunks, "think_tags")
    assert [p.get("content") for p in parts] == [
        "<think>\nplan",
        "\n</think>",
        "<think>\nmore",
        "\n</think>",
    ]
    assert parts[1]["tool_calls"] == [call]


def test_think_tags_close_when_the_stream_ends_without_a_finish_reason() -> None:
    body = render_stream([chunk({"reasoning_content": "cut"})])
    normalizer = StreamNormalizer(NormalizeOptions(output="think_tags"))
    parts = deltas(normalizer.feed(body))
    assert "".join(p.get("content") or "" for p in parts) == "<think>\ncut\n</think>"
    finish_only = render_stream(
        [chunk({"reasoning_content": "r"}), {"choices": [{"index": 0, "finish_reason": "stop"}]}]
    )
    normalizer = StreamNormalizer(NormalizeOptions(output="think_tags"))
    parts = deltas(normalizer.feed(finish_only))
    assert "".join(p.get("content") or "" for p in parts) == "<think>\nr\n</think>"


def test_think_tags_whole_message() -> None:
    body = {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "A", "reasoning": "R"},
                "finish_reason": "stop",
            }
        ]
    }
    normalize_completion(body, NormalizeOptions(output="think_tags"))
    assert body["choices"][0]["message"] == {
        "role": "assistant",
        "content": "<think>\nR\n</think>\n\nA",
    }


def test_reasoning_details_from_thinking_blocks_keep_signatures_and_redactions() -> None:
    (case,) = [c for c in CASES if c.id == "litellm-thinking-blocks"]
    parts, _ = streamed(case, "reasoning_details")
    got = read(parts, "reasoning_details")
    assert got["details"] == [
        {
            "type": "reasoning.text",
            "text": "Let me think.",
            "index": 0,
            "signature": case.blocks[0][1],
        },  # type: ignore[index]
        {"type": "reasoning.encrypted", "data": "ENCRYPTED-BLOB", "index": 1},
    ]
    (interleaved,) = [c for c in CASES if c.id == "thinking-blocks-around-tool-calls"]
    parts, _ = streamed(interleaved, "reasoning_details")
    assert [(d["index"], d["text"]) for d in read(parts, "reasoning_details")["details"]] == [
        (0, "First look up a."),
        (1, "Then b."),
    ]


def test_reasoning_details_from_the_upstream_pass_as_they_came() -> None:
    items = [{"type": "reasoning.text", "text": "Step", "index": 0, "format": "x"}]
    chunks = [chunk({"reasoning": "Step", "reasoning_details": items}), chunk({}, "stop")]
    parts, _ = streamed_chunks(chunks, "reasoning_details")
    assert parts[0] == {"reasoning_details": items}


def test_reasoning_details_number_the_blocks_of_tagged_reasoning() -> None:
    chunks = [chunk({"content": "<think>one</think>A<think>two</think>B"}), chunk({}, "stop")]
    parts, _ = streamed_chunks(chunks, "reasoning_details")
    got = read(parts, "reasoning_details")
    assert got["content"] == "AB"
    assert [(d["index"], no_ws(d["text"])) for d in got["details"]] == [(0, "one"), (1, "two")]


def test_reasoning_shape_leaves_a_vllm_stream_as_it_came() -> None:
    body = render_stream([chunk({"reasoning": "r"}), chunk({"content": "a"}, "stop")])
    normalizer = StreamNormalizer(NormalizeOptions(output="reasoning"))
    assert normalizer.feed(body) == body


def streamed_chunks(chunks: list[dict[str, Any]], shape: str) -> tuple[Any, Any]:
    normalizer = StreamNormalizer(NormalizeOptions(output=shape))  # type: ignore[arg-type]
    out = normalizer.feed(render_stream(chunks)) + normalizer.finish()
    return deltas(out), normalizer.turn()


# -- generated streams: every shape says what the default says ---------------------

TOKENS = ["<think>", "</think>", "<th", "ink>", "a", "b c", "\n", " ", "é", "<", "</"]
pieces = st.lists(st.lists(st.sampled_from(TOKENS), max_size=5).map("".join), max_size=10)


@given(
    pieces,
    st.lists(st.sampled_from(["rc", "reasoning", "call", "blocks"]), max_size=3),
    st.sampled_from([s for s in SHAPES if s != "reasoning_content"]),
    st.lists(st.integers(min_value=0, max_value=9), max_size=60),
)
def test_every_shape_carries_what_the_default_carries(
    contents: list[str], natives: list[str], shape: str, sizes: list[int]
) -> None:
    chunks = []
    for n, kind in enumerate(natives):
        if kind == "rc":
            chunks.append(chunk({"reasoning_content": f"native{n} "}))
        elif kind == "reasoning":
            chunks.append(chunk({"reasoning": f"vllm{n} "}))
        elif kind == "blocks":
            block = {"type": "thinking", "thinking": f"block{n}", "signature": f"s{n}"}
            chunks.append(chunk({"thinking_blocks": [block]}))
        else:
            call = {"index": n, "id": f"c{n}", "function": {"name": "f", "arguments": "{}"}}
            chunks.append(chunk({"tool_calls": [call]}))
    chunks += [chunk({"content": c}) for c in contents]
    chunks.append(chunk({}, "stop"))
    body = render_stream(chunks)
    default = StreamNormalizer()
    expected = read(deltas(default.feed(body) + default.finish()), "reasoning_content")
    normalizer = StreamNormalizer(NormalizeOptions(output=shape))  # type: ignore[arg-type]
    out = b"".join(normalizer.feed(p) for p in cut_at(body, sizes)) + normalizer.finish()
    got = read(deltas(out), shape)
    assert no_ws(got["content"]) == no_ws(expected["content"])
    assert no_ws(got["reasoning"]) == ("" if shape == "none" else no_ws(expected["reasoning"]))
    turn = normalizer.turn()
    if shape == "none":  # the same turn, its blocks hidden
        assert [b.thought for b in turn.thinking] == [b.thought for b in default.turn().thinking]
        assert turn.content == default.turn().content
        assert all(b.is_hidden for b in turn.thinking)
    else:
        assert turn == default.turn()


ZWSP = "\u200b"


def test_think_tags_escape_a_close_tag_the_reasoning_holds() -> None:
    """A model reasoning about `</think>` itself: written as it is, a client's
    tag parser would end the block there. Its `<` gets a zero-width space
    after it, also when the tag is split across deltas; the stored
    reasoning keeps the text as the model wrote it."""
    thought = 'The user asks what "</think>" means; a </THINK> closes a block.'
    pieces = ['The user asks what "</thi', 'nk>" means; a <', "/THINK> closes a block."]
    chunks = [
        *(chunk({"reasoning_content": p}) for p in pieces),
        chunk({"content": "It closes the reasoning."}),
        chunk({}, "stop"),
    ]
    parts, turn = streamed_chunks(chunks, "think_tags")
    content = "".join(p.get("content") or "" for p in parts)
    assert content.count("</think>") == 1  # the real close, before the answer
    assert content.replace(ZWSP, "") == f"<think>\n{thought}\n</think>\n\nIt closes the reasoning."
    assert [b.thought for b in turn.thinking] == [thought]
    # read back (a client that sends the content again): as the model wrote it
    written = content.removeprefix("<think>\n").split("\n</think>")[0]
    assert written != thought
    assert unescape_inner_close(written) == thought
    assert unescape_inner_close(thought) == thought


def test_think_tags_release_a_held_lt_that_begins_no_tag() -> None:
    chunks = [
        chunk({"reasoning_content": "a <"}),
        chunk({"reasoning_content": " b"}),
        chunk({}, "stop"),
    ]
    parts, _ = streamed_chunks(chunks, "think_tags")
    assert [p.get("content") for p in parts] == ["<think>\na ", "< b", "\n</think>"]
    whole = {
        "choices": [
            {
                "index": 0,
                "message": {"content": "A", "reasoning": "x </think"},
                "finish_reason": "stop",
            }
        ]
    }
    normalize_completion(whole, NormalizeOptions(output="think_tags"))
    assert whole["choices"][0]["message"]["content"] == "<think>\nx </think\n</think>\n\nA"
