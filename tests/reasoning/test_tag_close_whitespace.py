"""Whitespace after a closed block: dropped when the block leads the answer
(templates write `</think>\\n\\n` before it) or when whitespace came just
before the block (one break, not two, where a block is cut out of the
answer), the answer's own when answer text came just before the block."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.reasoning.tags import DEFAULT_TAG_SET, TagSet, TagSplitter
from tests.casefiles import cut_at
from tests.reasoning.test_tags import channels, split

AT_START = TagSet.of(only_at_start=True)


@pytest.mark.parametrize(
    ("text", "visible"),
    [
        ("First part.<think>x</think> Second part.", "First part. Second part."),
        ("First part.<think>x</think>\n\nSecond part.", "First part.\n\nSecond part."),
        ("First part.\n<think>x</think>\n\nSecond part.", "First part.\nSecond part."),
        ("Intro.\n\n<think>x</think>\n\nOutro.", "Intro.\n\nOutro."),
        ("Intro.\n\n<think>x</think><think>y</think>\n\nOutro.", "Intro.\n\nOutro."),
        ("<think>x</think>\n\nAnswer <think>y</think> more", "Answer more"),
        ("A <thi<think>x</think> b", "A <thi b"),
        ("\n\n<think>x</think>\n\nAnswer", "\n\nAnswer"),  # whitespace is no answer yet
        ("<think>x</think> <think>y</think>\n Answer", "Answer"),
    ],
)
def test_whitespace_after_a_block(text: str, visible: str) -> None:
    assert channels(split([text]))[0] == visible
    assert channels(split(list(text)))[0] == visible


def test_plain_only_once_the_answer_began() -> None:
    """The callers pass plain text without the splitter while it is `plain`:
    before the answer's first character the splitter must see the text."""
    splitter = TagSplitter()
    assert not splitter.plain
    splitter.feed("\n")
    assert not splitter.plain
    splitter.feed("First.")
    assert splitter.plain
    at_start = TagSplitter(AT_START)
    at_start.feed("Answer")
    assert at_start.plain


def oracle(parts: list[tuple[bool, str]]) -> str:
    """The visible text of rendered parts (blocks hold no delimiter)."""
    out: list[str] = []
    skip = answered = False
    for is_block, body in parts:
        if is_block:
            # after whitespace, whitespace after the block goes too
            skip = not answered or (bool(out) and out[-1][-1].isspace())
            continue
        text = body.lstrip() if skip else body
        if text:
            skip = False
            answered = answered or not text.isspace()
            out.append(text)
    return "".join(out)


@given(
    st.lists(
        st.tuples(st.booleans(), st.text(alphabet="ab é🤔/\n", max_size=8)),
        max_size=8,
    ),
    st.lists(st.integers(min_value=0, max_value=6), max_size=40),
)
def test_the_visible_text_is_the_answer_around_its_blocks(
    parts: list[tuple[bool, str]], sizes: list[int]
) -> None:
    rendered = "".join(f"<think>{body}</think>" if block else body for block, body in parts)
    expected = oracle(parts)
    assert channels(split([rendered], DEFAULT_TAG_SET))[0] == expected
    assert channels(split(cut_at(rendered, sizes), DEFAULT_TAG_SET))[0] == expected
