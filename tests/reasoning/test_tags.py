from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.reasoning.tags import (
    DEFAULT_TAG_SET,
    REASONING_END,
    Reasoning,
    ReasoningEnd,
    TagEvent,
    TagSet,
    TagSplitter,
    Visible,
)
from tests.casefiles import cut_at


def split(
    pieces: list[str], tags: TagSet = DEFAULT_TAG_SET, implicit: bool = False
) -> list[TagEvent]:
    splitter = TagSplitter(tags, implicit_open=implicit)
    events: list[TagEvent] = []
    for piece in pieces:
        events += splitter.feed(piece)
    return events + splitter.flush()


def channels(events: list[TagEvent]) -> tuple[str, list[str]]:
    """(visible text, reasoning blocks) from a list of events."""
    visible, blocks, current = [], [], []
    for ev in events:
        if isinstance(ev, Visible):
            visible.append(ev.text)
        elif isinstance(ev, Reasoning):
            current.append(ev.text)
        else:
            blocks.append("".join(current))
            current = []
    assert not current, "reasoning after the last ReasoningEnd"
    return "".join(visible), [b for b in blocks if b]


def run(text: str, implicit: bool = False) -> tuple[str, list[str]]:
    whole = channels(split([text], implicit=implicit))
    assert channels(split(list(text), implicit=implicit)) == whole, "char by char differs"
    return whole


@pytest.mark.parametrize(
    ("text", "visible", "blocks"),
    [
        ("plain answer", "plain answer", []),
        ("<think>plan</think>answer", "answer", ["plan"]),
        ("<think>\n  plan  \n</think>\n\nanswer", "answer", ["plan"]),
        ("<THINK>a</Think>b", "b", ["a"]),
        ("<thinking>a</thinking>b", "b", ["a"]),
        ("<reasoning>a</reasoning>b", "b", ["a"]),
        ("<think>a</thinking>b</think>c", "c", ["a</thinking>b"]),  # own close tag only
        ("<think>a <think> b</think>c", "c", ["a <think> b"]),  # no nesting
        ("<think>one</think>A<think>two</think>B", "AB", ["one", "two"]),
        ("<think></think>answer", "answer", []),  # no empty blocks
        ("<think>  \n </think>answer", "answer", []),
        ("x</think>y", "xy", []),  # stray close: removed, text stays visible
        ("<think>unclosed to the end", "", ["unclosed to the end"]),
        (
            "a <tag> and <memory>m</memory> and a <3 b",
            "a <tag> and <memory>m</memory> and a <3 b",
            [],
        ),
        ("a < b > c </ d", "a < b > c </ d", []),
        ("ends with <thi", "ends with <thi", []),  # a prefix at the end is visible text
        ("先算<think>🤔 想</think>答案", "先算答案", ["🤔 想"]),
    ],
)
def test_rules(text: str, visible: str, blocks: list[str]) -> None:
    assert run(text) == (visible, blocks)


@pytest.mark.parametrize(
    ("text", "visible", "blocks"),
    [
        ("plan</think>\n\nanswer", "answer", ["plan"]),
        ("<think>plan</think>answer", "answer", ["plan"]),  # leading open tag consumed
        ("  <think> plan</think>answer", "answer", ["plan"]),
        ("all reasoning, no close tag", "", ["all reasoning, no close tag"]),
        ("plan</think>a</think>b", "ab", ["plan"]),  # later strays are removed
        ("plan <think> more</think>x", "x", ["plan <think> more"]),
    ],
)
def test_implicit_open_tag(text: str, visible: str, blocks: list[str]) -> None:
    assert run(text, implicit=True) == (visible, blocks)


def test_events_in_order_with_block_ends() -> None:
    assert split(["<think>a</th", "ink>b<think>c</think>"]) == [
        Reasoning("a"),
        REASONING_END,
        Visible("b"),
        Reasoning("c"),
        ReasoningEnd(),
    ]


def test_only_a_possible_prefix_is_held_back() -> None:
    splitter = TagSplitter()
    assert splitter.feed("Hello <th") == [Visible("Hello ")]
    assert splitter.carry_size == 3
    assert splitter.feed("ere") == [Visible("<there")]
    assert splitter.carry_size == 0


def test_trailing_whitespace_in_a_block_is_held_then_released() -> None:
    splitter = TagSplitter()
    assert splitter.feed("<think>a  ") == [Reasoning("a")]
    assert splitter.feed(" b") == [Reasoning("   b")]
    assert splitter.feed("\n</think>") == [REASONING_END]


def test_long_whitespace_run_is_not_held() -> None:
    splitter = TagSplitter()
    assert splitter.feed("<think>a" + " " * 100) == [Reasoning("a" + " " * 100)]
    assert splitter.carry_size == 0


def test_leave_implicit_before_anything_was_shown() -> None:
    splitter = TagSplitter(implicit_open=True)
    assert splitter.feed("\n") == []
    splitter.leave_implicit()
    assert splitter.feed("answer") == [Visible("answer")]
    # once reasoning was shown, the block stays a block
    splitter = TagSplitter(implicit_open=True)
    assert splitter.feed("plan") == [Reasoning("plan")]
    splitter.leave_implicit()
    assert splitter.feed("</think>x") == [REASONING_END, Visible("x")]


def test_delimiter_cannot_be_formed_by_removing_a_stray_tag() -> None:
    visible, blocks = run("<thi</think>nk>secret</think>after")
    assert "<think>" not in visible.lower()
    assert (visible, blocks) == ("after", ["secret"])


def test_delimiter_cannot_be_formed_across_a_block() -> None:
    visible, _ = run("<thi<think>x</think>nk>y")
    assert "<think>" not in visible


def test_custom_tag_set() -> None:
    tags = TagSet.of(["Analysis", " analysis ", "seed:think"])
    assert tags.names == ("analysis", "seed:think")
    assert channels(split(["<analysis>a</ANALYSIS><think>kept</think>"], tags)) == (
        "<think>kept</think>",
        ["a"],
    )
    assert "</seed:think>" in tags.delimiters()


@pytest.mark.parametrize("names", [["  "], ["a b"], ["x>"]])
def test_invalid_tag_sets(names: list[str]) -> None:
    with pytest.raises(ValueError, match="tag"):
        TagSet.of(names)


# -- property tests: the four invariants of the reasoning channels --------------

TOKENS = [
    "<think>",
    "</think>",
    "<THINK>",
    "</Think>",
    "<thinking>",
    "</thinking>",
    "<reasoning>",
    "</REASONING>",
    "<",
    ">",
    "/",
    "<th",
    "ink>",
    "</",
    "<tag>",
    "a",
    "b",
    "xyz",
    " ",
    "\n",
    "\n\n",
    "é",
    "🤔",
    "答",
]
texts = st.lists(st.sampled_from(TOKENS), max_size=30).map("".join)
DELIMITERS = DEFAULT_TAG_SET.delimiters()


@given(texts, st.booleans())
def test_invariant_1_no_delimiter_in_the_answer(text: str, implicit: bool) -> None:
    visible, _ = channels(split([text], implicit=implicit))
    assert not any(d in visible.lower() for d in DELIMITERS)


@given(texts, st.lists(st.integers(min_value=0, max_value=6), max_size=40), st.booleans())
def test_invariant_2_split_invariance(text: str, sizes: list[int], implicit: bool) -> None:
    assert channels(split(cut_at(text, sizes), implicit=implicit)) == channels(
        split([text], implicit=implicit)
    )


@given(
    st.lists(
        st.tuples(
            st.booleans(),
            st.sampled_from(["think", "THINKING", "Reasoning"]),
            st.text(alphabet="ab é🤔<>/\n", max_size=12),
        ),
        max_size=6,
    )
)
def test_invariant_3_nothing_lost_against_an_oracle(parts: list[tuple[bool, str, str]]) -> None:
    """Rendered from known parts (visible text, or a tagged block without
    tags inside), the channels give back exactly those parts, up to the
    trimmed whitespace."""
    rendered, visible, reasoning = [], [], []
    for is_block, name, body in parts:
        body = body.replace("<", "").replace(">", "")
        if is_block:
            rendered.append(f"<{name}>{body}</{name}>")
            reasoning.append(body)
        else:
            rendered.append(body)
            visible.append(body)
    got_visible, got_blocks = channels(split(["".join(rendered)]))
    assert "".join(got_visible.split()) == "".join("".join(visible).split())
    assert "".join("".join(got_blocks).split()) == "".join("".join(reasoning).split())
    assert got_blocks == [b.strip() for b in reasoning if b.strip()]


@given(texts, st.booleans())
def test_invariant_3_only_delimiters_and_whitespace_are_dropped(text: str, implicit: bool) -> None:
    events = split([text], implicit=implicit)
    out = "".join(e.text for e in events if not isinstance(e, ReasoningEnd))
    dropped = Counter("".join(text.split())) - Counter("".join(out.split()))
    assert set(dropped) <= set("<>/thinkgreasoTHINKGREASO")
    assert dropped["<"] == dropped[">"]
    added = Counter("".join(out.split())) - Counter("".join(text.split()))
    assert not added


@given(st.lists(st.sampled_from(TOKENS), max_size=200), st.booleans())
def test_invariant_4_bounded_carry(tokens: list[str], implicit: bool) -> None:
    splitter = TagSplitter(implicit_open=implicit)
    for token in tokens:
        splitter.feed(token)
        assert splitter.carry_size <= 64 + 2 * DEFAULT_TAG_SET.longest


def test_removed_delimiters_are_counted() -> None:
    splitter = TagSplitter()
    splitter.feed("<think>a <thinking> b</think>c</think>d")
    splitter.flush()
    assert splitter.delimiters == 3  # open, its close, one stray; the nested tag is text
    implicit = TagSplitter(implicit_open=True)
    implicit.feed("<think>x</think>y")
    assert implicit.delimiters == 2


# -- delimiters that are not <name> tags, presets and per-route options -----------

MAGISTRAL = TagSet.of((), presets=["magistral"])
KIMI_VL = TagSet.of((), pairs=[("◁think▷", "◁/think▷")])
HARMONY = TagSet.of((), presets=["harmony"])
AT_START = TagSet.of(only_at_start=True)
WRAPPED = TagSet.of(answer_tags=["answer", "response"])
TOOL_MARKERS = TagSet.of(
    tool_call_markers=["<tool_call>", "<tool_calls>", "<|tool_calls_section_begin|>"]
)
OFF = TagSet.of(())


def run_with(tags: TagSet, text: str, implicit: bool = False) -> tuple[str, list[str]]:
    """Whole, character by character, and at every single cut: all the same."""
    whole = channels(split([text], tags, implicit))
    assert channels(split(list(text), tags, implicit)) == whole, "char by char differs"
    for cut in range(1, len(text)):
        assert channels(split([text[:cut], text[cut:]], tags, implicit)) == whole, cut
    return whole


@pytest.mark.parametrize(
    ("tags", "text", "visible", "blocks"),
    [
        (MAGISTRAL, "[THINK]plan[/THINK]answer", "answer", ["plan"]),
        (MAGISTRAL, "[think]\nplan\n[/Think]\n\nanswer", "answer", ["plan"]),
        (MAGISTRAL, "a [link] and <think>x</think>", "a [link] and <think>x</think>", []),
        (MAGISTRAL, "x[/THINK]y", "xy", []),
        (KIMI_VL, "◁think▷看图◁/think▷答案", "答案", ["看图"]),
        (KIMI_VL, "◁think▷unclosed", "", ["unclosed"]),
        (
            HARMONY,
            "<|channel|>analysis<|message|>User says hi.<|end|>"
            "<|start|>assistant<|channel|>final<|message|>Hello!<|return|>",
            "Hello!",
            ["User says hi."],
        ),
        (  # llama.cpp drops <|end|>: the next message's start ends the analysis
            HARMONY,
            "<|channel|>analysis<|message|>Think.<|start|>assistant<|channel|>final<|message|>Hi",
            "Hi",
            ["Think."],
        ),
        (
            HARMONY,
            "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis"
            "<|message|>b<|end|><|start|>assistant<|channel|>final<|message|>c",
            "c",
            ["a", "b"],
        ),
        (
            HARMONY,
            "<|channel|>analysis<|message|>call a tool<|end|><|start|>assistant<|channel|>"
            'commentary to=functions.f <|constrain|>json<|message|>{"x":1}<|call|>',
            'commentary to=functions.f json{"x":1}',
            ["call a tool"],
        ),
        (HARMONY, "plain <|start|", "plain <|start|", []),
        (OFF, "<think>not parsed</think>", "<think>not parsed</think>", []),
        (
            AT_START,
            "<think>plan</think>Use `<think>` in code</think>",
            "Use `<think>` in code</think>",
            ["plan"],
        ),
        (
            AT_START,
            "\n<think>a</think> <think>b</think>x<think>c</think>",
            "\nx<think>c</think>",
            ["a", "b"],
        ),
        (AT_START, "answer first <think>kept</think>", "answer first <think>kept</think>", []),
        (AT_START, "x</think>y", "x</think>y", []),
        (WRAPPED, "<think>r</think>\n<answer>\nHello\n</answer>", "Hello\n", ["r"]),
        (WRAPPED, "<think>r</think><response>Hi</response>", "Hi", ["r"]),
        (WRAPPED, "<think>a <answer> b</think>c", "c", ["a <answer> b"]),
        (WRAPPED, "<ans<answer>wer>x", "x", []),  # removing one cannot form another
        (
            TOOL_MARKERS,
            "<think>plan<tool_call>{}</tool_call>",
            "<tool_call>{}</tool_call>",
            ["plan"],
        ),
        (
            TOOL_MARKERS,
            "<think>plan <|tool_calls_section_begin|>x",
            "<|tool_calls_section_begin|>x",
            ["plan"],
        ),
        (TOOL_MARKERS, "text <tool_call>{}</tool_call>", "text <tool_call>{}</tool_call>", []),
        (TOOL_MARKERS, "<think>a</think>b<tool_calls>", "b<tool_calls>", ["a"]),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_other_delimiters_and_options(
    tags: TagSet, text: str, visible: str, blocks: list[str]
) -> None:
    assert run_with(tags, text) == (visible, blocks)


def test_a_tool_call_marker_ends_an_implicit_block() -> None:
    assert run_with(TOOL_MARKERS, "plan <tool_call>{}", implicit=True) == (
        "<tool_call>{}",
        ["plan"],
    )
    assert run_with(TOOL_MARKERS, "<tool_call>{}", implicit=True) == ("<tool_call>{}", [])


def test_the_longer_delimiter_wins_and_is_waited_for() -> None:
    splitter = TagSplitter(HARMONY)
    assert splitter.feed("x<|channel|>") == [Visible("x")]  # could grow into the analysis open
    assert splitter.carry_size == len("<|channel|>")
    assert splitter.feed("analysis<|message|>r") == [Reasoning("r")]
    assert splitter.flush() == [REASONING_END]
    ended = TagSplitter(HARMONY)
    assert ended.feed("y<|start|>") == [Visible("y")]
    assert ended.flush() == []  # at the end it is only the shorter marker: removed


def test_only_at_start_switches_to_the_answer_set_once() -> None:
    splitter = TagSplitter(AT_START)
    assert not splitter.plain  # watching for the answer's first character
    assert splitter.feed("  ") == [Visible("  ")]
    assert not splitter.plain
    assert splitter.feed("x") == [Visible("x")]
    assert splitter.plain
    assert splitter.feed("<think>") == [Visible("<think>")]


def test_tag_set_config_views() -> None:
    tags = TagSet.of(
        ["think"], pairs=[("[THINK]", "[/THINK]")], presets=["harmony"], answer_tags=["answer"]
    )
    assert tags.describe() == [
        "think",
        {"open": "[THINK]", "close": "[/THINK]"},
        {"preset": "harmony"},
    ]
    assert tags.mark is None  # `<` and `[`
    assert {"<answer>", "</answer>", "[think]", "<|return|>"} <= set(tags.delimiters())
    # tool-call markers stay in the answer: they are no delimiter it must lack
    assert set(TOOL_MARKERS.delimiters()) == set(DEFAULT_TAG_SET.delimiters())
    assert OFF.with_pair("think").only_at_start
    assert DEFAULT_TAG_SET.with_pair("think") is DEFAULT_TAG_SET
    assert MAGISTRAL.with_pair("think").names == ("think",)
    letters = TagSet.of((), pairs=[("Thought:", "Answer:")])
    assert letters.mark is None  # `t` and `T`, and `a` and `A`
    assert run_with(letters, "thought: x ANSWER: y") == ("y", ["x"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pairs": [("", "x")]}, "must not be empty"),
        ({"pairs": [("[T]", "  ")]}, "must not be empty"),
        ({"pairs": [("[T]", "[t]")]}, "must differ"),
        ({"pairs": [("x" * 65, "y")]}, "longer than"),
        ({"pairs": [("<think>", "[/T]")]}, "two roles"),
        ({"pairs": [("</think>", "[/T]")]}, "two roles"),
        ({"answer_tags": ["think"]}, "two roles"),
        ({"tool_call_markers": ["</think>"]}, "two roles"),
        ({"presets": ["nope"]}, "unknown tag preset"),
        ({"answer_tags": ["a b"]}, "invalid reasoning tag name"),
    ],
)
def test_invalid_delimiters(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TagSet.of(**kwargs)


SETS = {
    "default": DEFAULT_TAG_SET,
    "magistral+default": TagSet.of(presets=["magistral"]),
    "harmony": HARMONY,
    "at-start": AT_START,
    "wrapped": WRAPPED,
    "tool-markers": TOOL_MARKERS,
    "off": OFF,
}
MORE_TOKENS = [
    *TOKENS,
    "[THINK]",
    "[/think]",
    "[",
    "<|channel|>analysis<|message|>",
    "<|channel|>",
    "<|end|>",
    "<|start|>assistant",
    "<|channel|>final<|message|>",
    "<|return|>",
    "<|",
    "|>",
    "<answer>",
    "</answer>",
    "<ans",
    "<tool_call>",
]
more_texts = st.lists(st.sampled_from(MORE_TOKENS), max_size=30).map("".join)


@given(st.sampled_from(sorted(SETS)), more_texts, st.booleans())
def test_other_sets_keep_no_delimiter_in_the_answer(name: str, text: str, implicit: bool) -> None:
    tags = SETS[name]
    events = split([text], tags, implicit)
    visible, _ = channels(events)
    if tags.only_at_start:
        # the one exception: once the answer began, reasoning delimiters are text
        start = next(
            (i for i, e in enumerate(events) if isinstance(e, Visible) and e.text.strip()), None
        )
        before = "".join(e.text for e in events[:start] if isinstance(e, Visible)) if start else ""
        assert not any(d in before.lower() for d in tags.delimiters())
        assert not any(d in visible.lower() for d in tags.after_start.delimiters())  # type: ignore[union-attr]
    else:
        assert not any(d in visible.lower() for d in tags.delimiters())


@given(
    st.sampled_from(sorted(SETS)),
    more_texts,
    st.lists(st.integers(min_value=0, max_value=6), max_size=40),
    st.booleans(),
)
def test_other_sets_split_invariance(
    name: str, text: str, sizes: list[int], implicit: bool
) -> None:
    tags = SETS[name]
    assert channels(split(cut_at(text, sizes), tags, implicit)) == channels(
        split([text], tags, implicit)
    )


@given(st.sampled_from(sorted(SETS)), st.lists(st.sampled_from(MORE_TOKENS), max_size=200))
def test_other_sets_bounded_carry(name: str, tokens: list[str]) -> None:
    tags = SETS[name]
    splitter = TagSplitter(tags)
    for token in tokens:
        splitter.feed(token)
        assert splitter.carry_size <= 64 + 2 * tags.longest
