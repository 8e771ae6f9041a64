"""Fingerprints ignore whitespace, whatever the text's alphabet."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from proxy.history.keys import fingerprint, without_whitespace

# ASCII and non-ASCII whitespace (NBSP, ideographic space, line separator)
# mixed into ordinary text
texts = st.text(
    alphabet=st.one_of(
        st.characters(max_codepoint=0x7F),
        st.sampled_from("\u00a0\u2028\u3000\u1680 \t\n\x0b\x0c\r\x1c\x1d\x1e\x1f\x85é漢"),
    )
)


@given(texts)
def test_without_whitespace_drops_exactly_what_split_splits_on(text: str) -> None:
    assert without_whitespace(text) == "".join(text.split())


@given(texts, texts)
def test_a_fingerprint_does_not_change_with_whitespace(content: str, args: str) -> None:
    spaced = " \n".join(content) + "\u3000"
    assert fingerprint(content, [("f", args)]) == fingerprint(spaced, [("f", " " + args)])


def test_ascii_and_unicode_whitespace_are_both_dropped() -> None:
    assert without_whitespace("a b\tc\u00a0d\u3000e\x1cf") == "abcdef"
    assert fingerprint("   ") is None


@given(texts, st.lists(st.tuples(texts, texts), max_size=3))
def test_fingerprints_stay_what_stores_hold(content: str, calls: list[tuple[str, str]]) -> None:
    """Stored index keys were written with this definition: it must not move."""

    def squeezed(text: str) -> str:
        return "".join(text.split())

    joined = "\x1f".join(name + "\x1e" + squeezed(args) for name, args in calls)
    expected = None
    if squeezed(content) or joined:
        text = squeezed(content) + "\x1d" + joined
        expected = hashlib.sha256(text.encode()).hexdigest()[:32]
    assert fingerprint(content, calls) == expected
