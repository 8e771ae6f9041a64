"""A reasoning block cut out of the middle of an answer, with a blank line
on each side (`Intro.\\n\\n<think>...</think>\\n\\nOutro.`), leaves one blank
line, not two: whitespace after the block goes when whitespace came just
before it, however the stream is cut (the text before the block passing by
the fast paths or not), and so in the stored turn. The real proxy, a fake
upstream, the `openai` SDK."""

from __future__ import annotations

import pytest

from tests.e2e.test_tag_close_keeps_answer_whitespace import answer, ask
from tests.harness import FakeUpstream

TEXT = "Intro.\n\n<think>\nA detour.\n</think>\n\nOutro."
SPLITS = {
    "whole": None,
    "one-piece": [TEXT],
    "break-alone": ["Intro.", "\n\n", "<think>\nA detour.\n</think>", "\n\n", "Outro."],
    "many-plain": ["Int", "ro", ".", "\n", "\n", "<think>\nA detour.\n</think>\n\nOutro."],
    "split-tag": ["Intro.\n\n<thi", "nk>\nA detour.\n</th", "ink>\n", "\nOutro."],
}


@pytest.mark.parametrize("pieces", list(SPLITS.values()), ids=list(SPLITS))
def test_one_blank_line_where_a_block_was_cut_out(
    upstream: FakeUpstream, pieces: list[str] | None
) -> None:
    upstream.script(answer(TEXT, pieces))
    content, reasoning, stored = ask(upstream, pieces is not None, "one-break")
    assert content == stored == "Intro.\n\nOutro."
    assert reasoning == "A detour."
