"""A client sends back the reasoning in the shape it was given (the proxy's
`<think>` tags, `reasoning`, `reasoning_details`): the history reader finds
it on every route, and the stored turn that says the same lends it the
artefacts that shape lost (thinking-block signatures, details)."""

from __future__ import annotations

import pytest

from proxy.history.egress import Reasoning, known_reasoning, read_assistants
from proxy.reasoning.blocks import TextPart, ThinkingBlock, Turn
from proxy.reasoning.tags import DEFAULT_TAG_SET, TagSet

SIGNED = {"type": "thinking", "thinking": "Plan it.", "signature": "sig=="}
DETAILS = ({"type": "reasoning.text", "text": "Plan it.", "index": 0},)
STORED = Turn(
    parts=(ThinkingBlock("Plan it.", "thinking_blocks", False, "sig==", (SIGNED,)), TextPart("A")),
    reasoning_details=DETAILS,
)


def known(message: dict[str, object], turn: Turn | None = STORED) -> Reasoning | None:
    assistants = read_assistants([message], DEFAULT_TAG_SET)
    (reasoning,) = known_reasoning(assistants, {0: turn} if turn else {})
    return reasoning


@pytest.mark.parametrize(
    "message",
    [
        {"role": "assistant", "content": "<think>\nPlan it.\n</think>\n\nA"},
        {"role": "assistant", "content": "A", "reasoning": "Plan  it."},
        {"role": "assistant", "content": "A", "reasoning_content": "Plan it."},
    ],
    ids=["think_tags", "reasoning", "reasoning_content"],
)
def test_text_carried_back_gets_the_stored_artefacts(message: dict[str, object]) -> None:
    reasoning = known(message)
    assert reasoning is not None
    assert reasoning.blocks == (SIGNED,)
    assert reasoning.details == DETAILS
    assert not reasoning.from_store  # the client's own reasoning, completed


def test_details_carried_back_keep_theirs_and_get_the_blocks() -> None:
    own = ({"type": "reasoning.text", "text": "Plan it.", "signature": "sig==", "index": 0},)
    reasoning = known({"role": "assistant", "content": "A", "reasoning_details": list(own)})
    assert reasoning is not None
    assert (reasoning.details, reasoning.blocks) == (own, (SIGNED,))


def test_reasoning_that_differs_or_has_everything_stays_the_clients() -> None:
    edited = known({"role": "assistant", "content": "A", "reasoning": "Something else."})
    assert edited == Reasoning("Something else.")
    whole = {
        "role": "assistant",
        "content": "A",
        "reasoning_details": [{"type": "reasoning.text", "text": "x"}],
        "thinking_blocks": [{"type": "thinking", "thinking": "x", "signature": "s"}],
    }
    assert known(whole) == Reasoning(
        "x",
        ({"type": "reasoning.text", "text": "x"},),
        blocks=({"type": "thinking", "thinking": "x", "signature": "s"},),
    )
    plain_turn = Turn(parts=(ThinkingBlock("Plan it.", "reasoning_content"), TextPart("A")))
    assert known({"role": "assistant", "content": "A", "reasoning": "Plan it."}, plain_turn) == (
        Reasoning("Plan it.")
    )
    assert known({"role": "assistant", "content": "A", "reasoning": "Plan it."}, None) == (
        Reasoning("Plan it.")
    )


@pytest.mark.parametrize(
    ("tags", "content", "visible", "reasoning"),
    [
        (TagSet.of((), presets=["magistral"]), "<think>\nr\n</think>\n\nA", "A", "r"),
        (TagSet.of((), presets=["magistral"]), "[THINK]r[/THINK]A", "A", "r"),
        (TagSet.of(()), "<think>\nr\n</think>\n\nA <think> in code", "A <think> in code", "r"),
        (TagSet.of(()), "A <think>x</think>", "A <think>x</think>", None),
    ],
)
def test_the_proxys_own_think_tags_are_read_on_every_route(
    tags: TagSet, content: str, visible: str, reasoning: str | None
) -> None:
    (a,) = read_assistants([{"role": "assistant", "content": content}], tags)
    assert a.content == visible
    assert (a.own.text if a.own else None) == reasoning
