"""Egress and dialects as pure functions: what each dialect sends back."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.dialects import DIALECTS, apply_params, dialect_for, request_params
from proxy.history.context import plan_egress, request_tokens
from proxy.history.egress import (
    Reasoning,
    build_upstream_messages,
    known_reasoning,
    place_of,
    read_assistants,
    read_history,
    split_tags,
)
from proxy.reasoning.blocks import TextPart, ThinkingBlock, ToolCall, Turn
from proxy.reasoning.tags import DEFAULT_TAG_SET
from proxy.settings import ReasoningSettings

CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
MESSAGES: list[Any] = [
    {"role": "user", "content": "q1"},
    {"role": "assistant", "content": "a1"},
    {"role": "user", "content": "q2"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "r"},
]
DETAILS = (
    {"type": "reasoning.text", "text": "T1", "format": "f", "index": 0},
    {"type": "reasoning.encrypted", "data": "ENC", "index": 1},
)


def build(
    dialect: str,
    known: list[Reasoning | None],
    *,
    include: bool | str = True,
    native: bool = False,
    strip: Any = "none",
    messages: list[Any] = MESSAGES,
) -> list[Any]:
    assistants = read_assistants(messages, DEFAULT_TAG_SET)
    result = build_upstream_messages(
        messages,
        assistants,
        known,
        dialect=DIALECTS[dialect],
        include=include,  # type: ignore[arg-type]
        strip=strip,
        native_format=native,
    )
    return [m for m in result.messages if m["role"] == "assistant"]


KNOWN = [Reasoning("T1", DETAILS, from_store=True), Reasoning("T2", None, from_store=True)]


@pytest.mark.parametrize(
    ("dialect", "native", "first", "second"),
    [
        ("openai", False, {"reasoning_content": "T1"}, {"reasoning_content": "T2"}),
        ("openai", True, {"reasoning_content": "T1"}, {"reasoning_content": "T2"}),
        ("deepseek", True, {"reasoning_content": "T1"}, {"reasoning_content": "T2"}),
        ("kimi", False, {"reasoning_content": "T1"}, {"reasoning_content": "T2"}),
        ("vllm", True, {"reasoning": "T1"}, {"reasoning": "T2"}),
        ("vllm", False, {"reasoning_content": "T1"}, {"reasoning_content": "T2"}),
        (
            "openrouter",
            True,
            {"reasoning_details": [dict(d) for d in DETAILS]},
            {"reasoning": "T2"},
        ),
        ("groq", True, {}, {}),
        ("groq", False, {}, {}),
    ],
)
def test_each_dialect_writes_reasoning_its_way(
    dialect: str, native: bool, first: dict[str, Any], second: dict[str, Any]
) -> None:
    a1, a2 = build(dialect, list(KNOWN), native=native)
    fields = ("reasoning_content", "reasoning", "reasoning_details", "thinking")
    assert {k: v for k, v in a1.items() if k in fields} == first
    assert {k: v for k, v in a2.items() if k in fields} == second


def test_minimax_native_puts_think_tags_back_in_content() -> None:
    a1, a2 = build("minimax", [Reasoning("T1", None, from_store=True), KNOWN[1]], native=True)
    assert a1["content"].replace("\n", "") == "<think>T1</think>a1"
    assert "reasoning_content" not in a1
    assert a2["content"] == "<think>\nT2\n</think>\n\n"


def test_minimax_native_sends_reasoning_split_details_back_as_details() -> None:
    # reasoning that came in reasoning_details (reasoning_split: true) goes
    # back there, verbatim, and the visible text stays as it was
    a1, _ = build("minimax", list(KNOWN), native=True)
    assert a1["reasoning_details"] == [dict(d) for d in DETAILS]
    assert a1["content"] == "a1"
    assert "reasoning_content" not in a1


@pytest.mark.parametrize(("dialect", "placeholder"), [("deepseek", ""), ("kimi", " ")])
@pytest.mark.parametrize("include", [True, False])
def test_tool_turn_keeps_the_key_where_required(
    dialect: str, placeholder: str, include: bool
) -> None:
    a1, a2 = build(dialect, [None, None], include=include)
    assert "reasoning_content" not in a1  # not a tool-call turn
    assert a2["reasoning_content"] == placeholder
    # stripped by policy: still the placeholder on the tool-call turn
    a1, a2 = build(dialect, list(KNOWN), strip="all")
    assert a2["reasoning_content"] == placeholder
    assert "reasoning_content" not in a1


def test_groq_never_gets_the_clients_own_reasoning_either() -> None:
    messages = [
        {
            "role": "assistant",
            "content": "x",
            "reasoning_content": "mine",
            "reasoning": "mine",
            "reasoning_details": [{"type": "reasoning.text"}],
        }
    ]
    assistants = read_assistants(messages, DEFAULT_TAG_SET)
    known = known_reasoning(assistants, {})
    (sent,) = build("groq", known, messages=messages)
    assert sent == {"role": "assistant", "content": "x"}


def test_strip_policies_follow_the_readme_example() -> None:
    messages: list[Any] = []
    for n in (1, 2, 3):
        messages += [
            {"role": "user", "content": f"q{n}"},
            {"role": "assistant", "content": f"R{n}"},
        ]
    known: list[Reasoning | None] = [Reasoning(f"T{n}") for n in (1, 2, 3)]

    def sent(strip: Any, include: bool) -> list[str | None]:
        return [
            m.get("reasoning_content")
            for m in build("openai", known, include=include, strip=strip, messages=messages)
        ]

    assert sent("allButLast", True) == [None, None, "T3"]
    assert sent("allButLast", False) == [None, None, None]
    assert sent("none", True) == ["T1", "T2", "T3"]
    assert sent("all", True) == [None, None, None]


def test_inline_tags_in_history_are_always_removed_from_content() -> None:
    messages = [{"role": "assistant", "content": "<think>plan</think>\n\nanswer"}]
    assistants = read_assistants(messages, DEFAULT_TAG_SET)
    assert assistants[0].own == Reasoning("plan")
    (excluded,) = build("openai", known_reasoning(assistants, {}), include=False, messages=messages)
    assert excluded == {"role": "assistant", "content": "answer"}
    assert messages[0]["content"] == "<think>plan</think>\n\nanswer"  # the input is untouched


def test_split_tags_joins_several_blocks() -> None:
    assert split_tags("<think>a</think>x<think>b</think>y", DEFAULT_TAG_SET) == ("xy", "a\n\nb")


def test_stored_turn_reasoning_leaves_out_shadow_copies() -> None:
    turn = Turn(
        parts=(
            ThinkingBlock("native", "reasoning_content"),
            ThinkingBlock("copy", "think_tag", is_hidden=True),
            TextPart("a1"),
        )
    )
    messages = [{"role": "assistant", "content": "a1"}]
    assistants = read_assistants(messages, DEFAULT_TAG_SET)
    (known,) = known_reasoning(assistants, {0: turn})
    assert known == Reasoning("native", None, from_store=True)
    _ = ToolCall  # (tool-call turns are matched in the end-to-end tests)


def test_client_params_win_unless_from_a_header() -> None:
    params = request_params(DIALECTS["vllm"], ReasoningSettings(max_tokens=10))
    body: dict[str, Any] = {"chat_template_kwargs": {"enable_thinking": False, "x": 1}}
    apply_params(body, params, frozenset())
    assert body == {
        "chat_template_kwargs": {"enable_thinking": False, "x": 1},
        "thinking_token_budget": 10,
    }
    apply_params(body, params, frozenset({"max_tokens"}))
    assert body["chat_template_kwargs"] == {"enable_thinking": True, "x": 1}


def test_tokens_count_what_is_sent() -> None:
    def count(text: str) -> int:
        return len(text.split())

    messages = [
        {"role": "user", "content": "one two"},
        {"role": "assistant", "content": "three", "reasoning_content": "four five six"},
    ]
    assert request_tokens(messages, None, count) == 3 + (4 + 1 + 2) + (4 + 1 + 1 + 3)
    assistants = read_assistants(messages, DEFAULT_TAG_SET)
    known = known_reasoning(assistants, {})
    plan = plan_egress(
        messages,
        None,
        assistants,
        known,
        dialect=DIALECTS["openai"],
        include=False,
        strip="none",
        native_format=False,
        context_limit=None,
        threshold=0.85,
        count=count,
    )
    assert (plan.raw - plan.effective, plan.compressed) == (3, None)


@pytest.mark.parametrize(
    ("dialect", "expected"),
    [
        # the tool-call turn gets its reasoning back in the dialect's own form
        ("kimi", {"reasoning_content": "T2"}),
        ("deepseek", {"reasoning_content": "T2"}),
        ("glm", {"reasoning_content": "T2"}),
        ("fireworks", {"reasoning_content": "T2"}),
        ("openrouter", {"reasoning": "T2"}),
        ("minimax", {"content": "<think>\nT2\n</think>\n\n"}),
        # dialects that do not want it: nothing (deepseek's key stays above)
        ("openai", {}),
        ("vllm", {}),
        ("groq", {}),
        ("gemini", {}),
    ],
)
def test_auto_sends_reasoning_back_on_tool_call_turns_only(
    dialect: str, expected: dict[str, Any]
) -> None:
    plain, tool_turn = build(dialect, KNOWN, include="auto")
    assert plain == {"role": "assistant", "content": "a1"}  # no reasoning on other turns
    reasoning = {k: v for k, v in tool_turn.items() if k not in ("role", "tool_calls")}
    if dialect != "minimax":
        assert reasoning.pop("content") is None
    if dialect == "gemini":
        assert tool_turn["tool_calls"][0]["extra_content"] == {
            "google": {"thought_signature": "skip_thought_signature_validator"}
        }
    else:
        assert tool_turn["tool_calls"] == [CALL]
    assert reasoning == expected


def test_auto_on_a_tool_turn_without_reasoning_keeps_the_required_key() -> None:
    (_, kimi) = build("kimi", [None, None], include="auto")
    assert kimi["reasoning_content"] == " "
    (_, deepseek) = build("deepseek", [None, None], include="auto")
    assert deepseek["reasoning_content"] == ""


def test_auto_borrows_the_makers_need_on_multi_vendor_upstreams() -> None:
    together = DIALECTS["together"]
    assert not together.auto_include
    for_kimi = dialect_for(together, "config", "moonshotai/Kimi-K2-Thinking")
    assert for_kimi.auto_include
    assert for_kimi.name == "together"
    assert dialect_for(together, "config", "Qwen/Qwen3-8B") is together
    assistants = read_assistants(MESSAGES, DEFAULT_TAG_SET)
    result = build_upstream_messages(
        MESSAGES,
        assistants,
        KNOWN,
        dialect=for_kimi,
        include="auto",
        strip="none",
        native_format=False,
    )
    assert result.messages[3]["reasoning"] == "T2"  # together's own field
    assert "reasoning" not in result.messages[1]


def test_a_signature_the_client_sent_is_kept() -> None:
    signed = {**CALL, "extra_content": {"google": {"thought_signature": "REAL"}}}
    second = {**CALL, "id": "call_2"}
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [signed, second]},
    ]
    (out,) = build("gemini", [None], include=False, messages=messages)
    assert out["tool_calls"] == [signed, second]
    unsigned = [{"role": "assistant", "content": None, "tool_calls": [dict(CALL), second]}]
    (out,) = build("gemini", [None], include=False, messages=unsigned)
    first = out["tool_calls"][0]
    assert (
        first["extra_content"]["google"]["thought_signature"] == "skip_thought_signature_validator"
    )
    assert out["tool_calls"][1] == second  # only the first call of a step carries one
    assert "extra_content" not in unsigned[0]["tool_calls"][0]  # the client's object is untouched


@pytest.mark.parametrize("cut", range(len(MESSAGES) + 1))
def test_read_history_place_is_place_of(cut: int) -> None:
    """The place read along with the assistant messages is the one
    `place_of` computes from them, for every prefix of a history; and a
    branch that says something else before the answer is another place."""
    messages = MESSAGES[:cut]
    assistants, place = read_history(messages, DEFAULT_TAG_SET)
    assert place == place_of(messages, assistants)
    assert assistants == read_assistants(messages, DEFAULT_TAG_SET)
    other = [{"role": "user", "content": "another question"}, *messages[1:]]
    assert read_history(other, DEFAULT_TAG_SET)[1] != place
