"""`visible_tokens`: which tokens of a whole answer's logprobs are its
visible text's, told as a stream would tell them (each token one chunk)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.reasoning.channels import NormalizeOptions, visible_tokens

PLAIN = NormalizeOptions()
IMPLICIT = NormalizeOptions(implicit_open_tag=True)


def tokens(*texts: str) -> list[dict[str, object]]:
    return [{"token": t, "logprob": -0.5, "bytes": list(t.encode())} for t in texts]


def kept(texts: list[str], options: NormalizeOptions = PLAIN, native: bool = False) -> list[str]:
    return [str(t["token"]) for t in visible_tokens(tokens(*texts), options, native)]


def test_tag_and_reasoning_tokens_are_left_out() -> None:
    answer = ["<think>", "Let", " me", " see", "</think>", "\n\n", "Paris", " it", " is"]
    assert kept(answer) == ["Paris", " it", " is"]


def test_a_tag_split_over_tokens_is_still_a_tag() -> None:
    assert kept(["<th", "ink>", "hm", "</th", "ink>", "Yes"]) == ["Yes"]


def test_an_answer_without_tags_keeps_every_token() -> None:
    assert kept(["Hello", ",", " world"]) == ["Hello", ",", " world"]


def test_an_implicit_open_tag_makes_the_start_reasoning_unless_native() -> None:
    answer = ["hm", " ok", "</think>", "Done"]
    assert kept(answer, IMPLICIT) == ["Done"]
    # native reasoning switches the implicit mode off: the stray tag goes, the text stays
    assert kept(answer, IMPLICIT, native=True) == ["hm", " ok", "Done"]


def test_an_unclosed_tag_at_the_end_is_all_reasoning() -> None:
    assert kept(["Hi", "<think>", "still", " thinking"]) == ["Hi"]


def test_no_tokens() -> None:
    assert visible_tokens([], PLAIN, False) == []


@given(
    st.lists(st.sampled_from(["a", " b", "<think>", "</think>", "<th", "ink>", "\n"]), max_size=12)
)
def test_the_kept_tokens_are_the_given_ones_in_order(texts: list[str]) -> None:
    given = tokens(*texts)
    out = visible_tokens(given, PLAIN, False)
    positions = [next(i for i, t in enumerate(given) if t is k) for k in out]
    assert positions == sorted(set(positions))
