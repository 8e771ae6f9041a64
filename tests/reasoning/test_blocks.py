from __future__ import annotations

from dataclasses import FrozenInstanceError, fields, replace
from typing import Any

import pytest

from proxy.reasoning.blocks import (
    TextPart,
    ThinkingBlock,
    ToolCall,
    Turn,
    block_from_json,
    block_to_json,
    blocks_for_context,
    estimate_tokens_chars,
    extract_thinking_blocks,
    filter_for_context,
    join_reasoning,
    map_texts,
    tighter_policy,
    turn_from_record,
    turn_to_json,
    turn_to_record,
    with_token_counts,
)

NATIVE = ThinkingBlock("native plan", "reasoning_content")
SHADOW = ThinkingBlock("tagged copy", "think_tag", is_hidden=True)
HIDDEN = ThinkingBlock("hidden from client", "reasoning", is_hidden=True)
ENCRYPTED = ThinkingBlock(
    "",
    "reasoning_details",
    is_hidden=True,
    encrypted=({"type": "reasoning.encrypted", "data": "X", "index": 1},),
)
TURN = Turn(
    parts=(
        NATIVE,
        TextPart("Hello "),
        ToolCall("call_1", "f", "{}"),
        SHADOW,
        TextPart("world"),
        HIDDEN,
        ENCRYPTED,
    ),
    finish_reason="stop",
    usage={"completion_tokens_details": {"reasoning_tokens": 30}},
    model="m",
    route="r",
    created=1.5,
    response_id="id-1",
    reasoning_details=({"type": "reasoning.encrypted", "data": "X", "index": 1},),
)


def test_turn_views() -> None:
    assert TURN.content == "Hello world"
    assert extract_thinking_blocks(TURN) == [NATIVE, SHADOW, HIDDEN, ENCRYPTED]
    assert TURN.tool_call_ids == ["call_1"]
    assert TURN.tool_calls == [ToolCall("call_1", "f", "{}")]
    assert TURN.reasoning_tokens == 30
    assert Turn(usage={"completion_tokens_details": None}).reasoning_tokens is None
    assert (
        Turn(usage={"completion_tokens_details": {"reasoning_tokens": -1}}).reasoning_tokens is None
    )


def test_blocks_for_context_drops_shadow_copies_only_beside_native() -> None:
    assert blocks_for_context(TURN) == [NATIVE, HIDDEN, ENCRYPTED]
    tags_only = Turn(parts=(ThinkingBlock("t", "think_tag", is_hidden=True),))
    assert blocks_for_context(tags_only) == list(tags_only.parts)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("none", ["T1", "T2", "T3"]), ("allButLast", [None, None, "T3"]), ("all", [None] * 3)],
)
def test_filter_for_context(policy: Any, expected: list[str | None]) -> None:
    assert filter_for_context(["T1", "T2", "T3"], policy) == expected
    assert filter_for_context([], policy) == []


def test_tighter_policy_order() -> None:
    assert tighter_policy("none") == "allButLast"
    assert tighter_policy("allButLast") == "all"
    assert tighter_policy("all") is None


def test_join_reasoning_skips_empty_thoughts() -> None:
    assert join_reasoning([NATIVE, ENCRYPTED, HIDDEN]) == "native plan\n\nhidden from client"
    assert join_reasoning([NATIVE, HIDDEN], separator=" ") == "native plan hidden from client"
    assert join_reasoning([]) == ""


@pytest.mark.parametrize(("text", "tokens"), [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2)])
def test_chars_estimate_rounds_up(text: str, tokens: int) -> None:
    assert estimate_tokens_chars(text) == tokens


def test_token_counts_prefer_reported_reasoning_tokens() -> None:
    counted = with_token_counts(TURN, lambda text: len(text))
    tokens = [b.tokens for b in counted.thinking]
    assert sum(t for t in tokens if t) == 30
    assert tokens[-1] == 0  # the encrypted-only block has no text
    plain = with_token_counts(Turn(parts=(NATIVE,)), lambda text: 7)
    assert plain.thinking[0].tokens == 7
    assert with_token_counts(Turn(parts=(TextPart("x"),)), len).parts == (TextPart("x"),)


def test_one_block_with_a_reported_figure_is_not_counted() -> None:
    def refuse(text: str) -> int:
        raise AssertionError(f"counted {text!r}")

    usage = {"completion_tokens_details": {"reasoning_tokens": 41}}
    turn = with_token_counts(Turn(parts=(NATIVE, ENCRYPTED, TextPart("x")), usage=usage), refuse)
    assert [b.tokens for b in turn.thinking] == [41, 0]
    unreported = with_token_counts(Turn(parts=(NATIVE, ENCRYPTED)), lambda text: 9)
    assert [b.tokens for b in unreported.thinking] == [9, 0]


def test_block_json_is_camel_case_and_round_trips() -> None:
    data = block_to_json(ENCRYPTED)
    assert data == {
        "type": "thinking",
        "thought": "",
        "sourceField": "reasoning_details",
        "isHidden": True,
        "signature": None,
        "encrypted": [{"type": "reasoning.encrypted", "data": "X", "index": 1}],
        "tokens": None,
    }
    assert block_from_json(data) == ENCRYPTED
    assert block_from_json(block_to_json(NATIVE)) == NATIVE
    with pytest.raises(ValueError, match="sourceField"):
        block_from_json({"sourceField": "bogus"})


def test_turn_json_for_the_api() -> None:
    data = turn_to_json(TURN, 3)
    assert data["index"] == 3
    assert data["finishReason"] == "stop"
    assert data["content"] == "Hello world"
    assert data["toolCallIds"] == ["call_1"]
    assert [b["thought"] for b in data["blocks"]] == [
        "native plan",
        "tagged copy",
        "hidden from client",
        "",
    ]
    assert data["complete"] is True
    assert data["route"] == "r"
    assert data["model"] == "m"


def test_turn_record_round_trip_is_lossless() -> None:
    assert turn_from_record(turn_to_record(TURN)) == TURN
    empty = Turn()
    assert turn_from_record(turn_to_record(empty)) == empty
    with pytest.raises(ValueError, match="kind"):
        turn_from_record({"parts": [{"kind": "video"}]})


def test_map_texts_reaches_every_text_and_keeps_what_is_opaque() -> None:
    turn = Turn(
        parts=(
            ThinkingBlock("think KEY", "reasoning_content", signature="sig KEY"),
            TextPart("say KEY"),
            ToolCall("call_1", "tool_KEY", '{"a": "KEY"}'),
        ),
        reasoning_details=({"type": "reasoning.text", "text": "KEY", "n": [1, "KEY"]},),
        usage={"completion_tokens": 3},
    )
    out = map_texts(turn, lambda text: text.replace("KEY", "***"))
    block, text, call = out.parts
    assert isinstance(block, ThinkingBlock)
    assert block.thought == "think ***"
    assert block.signature == "sig KEY"  # opaque: an upstream's signature is kept as issued
    assert isinstance(text, TextPart)
    assert text.text == "say ***"
    assert isinstance(call, ToolCall)
    assert (call.name, call.arguments) == (
        "tool_***",
        '{"a": "***"}',
    )
    assert out.reasoning_details == ({"type": "reasoning.text", "text": "***", "n": [1, "***"]},)
    assert out.usage == turn.usage


def test_map_texts_returns_the_same_turn_when_nothing_changes() -> None:
    turn = Turn(parts=(TextPart("plain"),), reasoning_details=({"text": "x"},))
    assert map_texts(turn, lambda text: text) is turn
    assert map_texts(Turn(), str.upper) == Turn()


def test_token_counts_change_the_other_fields_as_replace_does() -> None:
    changes: dict[str, Any] = {"route": "r2", "created": 2.5, "extra": {"k": 1}, "persisted": False}
    for turn in (TURN, Turn(parts=(TextPart("x"),)), Turn(parts=(NATIVE,), model="m")):
        counted = with_token_counts(turn, len, **changes)
        assert counted == replace(with_token_counts(turn, len), **changes)
        assert {f.name: getattr(counted, f.name) for f in fields(Turn) if f.name in changes} == (
            changes
        )
    with pytest.raises(TypeError, match="colour"):
        with_token_counts(TURN, len, colour="red")


# -- the frozen values (their __init__ is written out) -----------------------


def test_values_stay_frozen_and_compare_by_fields() -> None:
    block = ThinkingBlock("why", "reasoning_content", tokens=3)
    turn = Turn(parts=(block, TextPart("hi"), ToolCall("c1", "f", "{}")), finish_reason="stop")
    with pytest.raises(FrozenInstanceError):
        turn.finish_reason = "length"  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        block.thought = "other"  # type: ignore[misc]
    assert Turn().extra == {}
    assert Turn().extra is not Turn().extra
    assert turn == Turn((block, TextPart("hi"), ToolCall("c1", "f", "{}")), "stop")
    assert hash(block) == hash(ThinkingBlock("why", "reasoning_content", False, None, None, 3))
    assert replace(turn, route="r").route == "r"
    assert replace(turn, route="r").parts == turn.parts
    assert repr(TextPart("hi")) == "TextPart(text='hi')"
