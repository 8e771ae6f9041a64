"""`message_tokens` counts in place exactly the texts `message_texts` lists
for counting ahead (Count.warm): the two name the same fields, for any
message shape, well formed or not."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.history.context import (
    PER_MESSAGE,
    PER_REQUEST,
    message_texts,
    message_tokens,
    request_texts,
    request_tokens_of,
    tools_text,
)

json_values = st.recursive(
    # (orjson.loads gives no integer beyond 64 bits)
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
KEYS = [
    "role",
    "content",
    "reasoning_content",
    "reasoning",
    "thinking",
    "name",
    "tool_call_id",
    "reasoning_details",
    "thinking_blocks",
    "tool_calls",
    "refusal",
]
parts = st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=12)})
calls = st.lists(
    st.fixed_dictionaries(
        {"function": st.fixed_dictionaries({"name": st.text(max_size=8), "arguments": json_values})}
    )
    | json_values,
    max_size=3,
)
details = st.lists(
    st.fixed_dictionaries({"type": st.just("reasoning.text"), "text": st.text(max_size=12)})
    | json_values,
    max_size=3,
)
messages = st.dictionaries(st.sampled_from(KEYS), json_values, max_size=6) | st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool"])},
    optional={
        "content": st.text(max_size=12) | st.lists(parts, max_size=3),
        "reasoning_content": st.text(max_size=12),
        "tool_calls": calls,
        "reasoning_details": details,
        "thinking_blocks": details,
        "tool_call_id": st.text(max_size=8),
    },
)


def chars(text: str) -> int:
    return len(text) + 1  # an empty text counts too, so a missed one shows


@given(messages | json_values)
def test_a_message_counts_the_texts_it_lists(message: Any) -> None:
    texts = list(message_texts(message))
    expected = PER_MESSAGE + sum(map(chars, texts)) if isinstance(message, dict) else 0
    assert message_tokens(message, chars) == expected


@given(st.lists(messages, max_size=4), json_values)
def test_a_request_counts_the_texts_it_lists(listed: list[Any], tools: Any) -> None:
    tools_json = tools_text(tools)
    texts = list(request_texts(listed, tools_json))
    per_message = PER_MESSAGE * len(listed)
    assert request_tokens_of(listed, tools_json, chars) == PER_REQUEST + per_message + sum(
        map(chars, texts)
    )
