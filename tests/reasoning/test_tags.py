from __future__ import annotations

from collections import Counter

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


@pytest.mark.parametrize("names", [[], ["  "], ["a b"], ["x>"]])
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
