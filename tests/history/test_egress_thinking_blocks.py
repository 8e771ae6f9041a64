"""Egress of thinking blocks as pure functions: read from a message, kept on
a stored turn, written back by the `litellm` dialect, counted in context."""

from __future__ import annotations

from typing import Any

from proxy.dialects import DIALECTS
from proxy.history.context import message_tokens
from proxy.history.egress import (
    Reasoning,
    build_upstream_messages,
    read_assistants,
    turn_reasoning,
)
from proxy.reasoning.blocks import TextPart, ThinkingBlock, Turn
from proxy.reasoning.tags import DEFAULT_TAG_SET

SIGNED = {"type": "thinking", "thinking": "Plan.", "signature": "sig=="}
REDACTED = {"type": "redacted_thinking", "data": "OPAQUE"}
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


def send(known: Reasoning | None, *, native: bool = True, include: Any = True) -> dict[str, Any]:
    messages: list[Any] = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
    ]
    result = build_upstream_messages(
        messages,
        read_assistants(messages, DEFAULT_TAG_SET),
        [known],
        dialect=DIALECTS["litellm"],
        include=include,
        strip="none",
        native_format=native,
    )
    out: dict[str, Any] = result.messages[1]
    return out


def test_a_message_carrying_thinking_blocks() -> None:
    (a,) = read_assistants(
        [{"role": "assistant", "content": "x", "thinking_blocks": [SIGNED, REDACTED, "junk"]}],
        DEFAULT_TAG_SET,
    )
    assert a.own == Reasoning("Plan.", None, blocks=(SIGNED, REDACTED))


def test_a_stored_turn_gives_its_thinking_blocks_back_in_order() -> None:
    turn = Turn(
        parts=(
            ThinkingBlock("", "thinking_blocks", True, None, (REDACTED,)),
            ThinkingBlock("Plan.", "thinking_blocks", False, "sig==", (SIGNED,)),
            ThinkingBlock("other", "reasoning_content"),
            TextPart("x"),
        )
    )
    reasoning = turn_reasoning(turn)
    assert reasoning.blocks == (REDACTED, SIGNED)
    assert reasoning.text == "Plan.\n\nother"
    assert turn_reasoning(Turn(parts=(ThinkingBlock("t", "reasoning_content"),))).blocks is None


def test_the_dialect_writes_thinking_blocks_or_else_the_text() -> None:
    assert send(Reasoning("Plan.", blocks=(SIGNED,)))["thinking_blocks"] == [SIGNED]
    text_only = send(Reasoning("Plan."))
    assert text_only["reasoning_content"] == "Plan."
    assert "thinking_blocks" not in text_only
    field = send(Reasoning("Plan.", blocks=(SIGNED,)), native=False)
    assert field["reasoning_content"] == "Plan."
    assert "thinking_blocks" not in field
    assert "reasoning_content" not in send(Reasoning("", details=({"type": "x"},)))
    # blocks alone (a redacted turn) are not empty reasoning
    assert send(Reasoning("", blocks=(REDACTED,)))["thinking_blocks"] == [REDACTED]


def test_thinking_blocks_count_in_the_context() -> None:
    def chars(text: str) -> int:
        return len(text)

    plain = message_tokens({"role": "assistant", "content": "x"}, chars)
    blocks = message_tokens(
        {"role": "assistant", "content": "x", "thinking_blocks": [SIGNED, REDACTED]}, chars
    )
    assert blocks - plain == len("Plan.")
