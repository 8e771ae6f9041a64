from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.reasoning.sse import (
    BOM,
    SSEComment,
    SSEDecoder,
    SSEEvent,
    SSELineTooLong,
    encode_comment,
    encode_event,
)


def decode(data: bytes, pieces: list[int] | None = None, **kw: int) -> list[object]:
    """Decode `data` whole, or cut at the given sizes."""
    decoder = SSEDecoder(**kw)
    out: list[object] = []
    if pieces is None:
        out += decoder.feed(data)
    else:
        pos = 0
        for size in pieces:
            out += decoder.feed(data[pos : pos + size])
            pos += size
        out += decoder.feed(data[pos:])
    return out + decoder.flush()


def byte_by_byte(data: bytes) -> list[object]:
    return decode(data, [1] * len(data))


STREAM = (
    b": ping\n"
    b'data: {"a": 1}\n\n'
    b"event: update\nid: 7\nretry: 1500\ndata: one\ndata: two\n\n"
    b"data:nospace\n\n"
    b"data: caf\xc3\xa9 \xf0\x9f\xa4\x94\n\n"
    b"data\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [
    SSEComment(b" ping"),
    SSEEvent(b'{"a": 1}'),
    SSEEvent(b"one\ntwo", "update", "7", 1500),
    SSEEvent(b"nospace", None, "7"),
    SSEEvent("café 🤔".encode(), None, "7"),
    SSEEvent(b"", None, "7"),
    SSEEvent(b"[DONE]", None, "7"),
]


@pytest.mark.parametrize("newline", [b"\n", b"\r", b"\r\n"])
def test_line_endings_whole_and_byte_by_byte(newline: bytes) -> None:
    data = STREAM.replace(b"\n", newline)
    assert decode(data) == EXPECTED
    assert byte_by_byte(data) == EXPECTED


def test_cr_at_end_of_read_then_lf_is_one_line_end() -> None:
    # "data: a\r" | "\ndata: b\r\n\r\n": a and b are one event, not two
    assert decode(b"data: a\r\ndata: b\r\n\r\n", [7 + 1]) == [SSEEvent(b"a\nb")]


def test_mixed_line_endings() -> None:
    assert decode(b"data: a\r\ndata: b\rdata: c\n\r\n") == [SSEEvent(b"a\nb\nc")]


def test_utf8_split_inside_character_across_reads() -> None:
    data = "data: 答案 🎉\n\n".encode()
    for cut in range(1, len(data)):
        assert decode(data, [cut]) == [SSEEvent("答案 🎉".encode())]


def test_unknown_fields_and_bad_retry_are_ignored() -> None:
    data = b"foo: bar\nretry: soon\nid: a\x00b\ndata: x\n\n"
    assert decode(data) == [SSEEvent(b"x")]


def test_blank_lines_without_data_dispatch_nothing() -> None:
    assert decode(b"\n\n\nevent: x\n\n\n") == []


def test_flush_dispatches_unterminated_last_event() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: tail") == []
    assert decoder.flush() == [SSEEvent(b"tail")]
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\n") == []
    assert decoder.flush() == [SSEEvent(b"x")]


def test_empty_feed_is_a_no_op() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"") == []
    assert decoder.flush() == []


def test_incomplete_line_over_the_bound_raises() -> None:
    decoder = SSEDecoder(max_line_bytes=16)
    decoder.feed(b"data: 0123456789")
    with pytest.raises(SSELineTooLong) as info:
        decoder.feed(b"abcdef")
    assert info.value.limit == 16
    assert "16 bytes" in str(info.value)


@pytest.mark.parametrize(
    "data",
    [
        b"data: " + b"x" * 40 + b"\n\n",  # one long line, fast path
        b"event: e\ndata: " + b"x" * 40 + b"\n\n",  # long line, general path
        b"data: " + b"x" * 12 + b"\ndata: " + b"y" * 12 + b"\n\n",  # event data grows past it
        b"data: " + b"x" * 40,  # no line end at all
        b"data: " + b"x" * 40 + b"\r",  # CR path
    ],
)
def test_every_over_long_shape_raises(data: bytes) -> None:
    with pytest.raises(SSELineTooLong):
        decode(data, max_line_bytes=20)


def test_long_line_within_bound_is_fine() -> None:
    assert decode(b"data: " + b"x" * 100 + b"\n\n", max_line_bytes=200) == [SSEEvent(b"x" * 100)]


def test_encoder_round_trip() -> None:
    assert encode_event(b'{"a":1}') == b'data: {"a":1}\n\n'
    assert encode_event(b"a\nb", "update") == b"event: update\ndata: a\ndata: b\n\n"
    assert encode_event(b"\n") == b"data: \ndata: \n\n"
    assert encode_comment(b" ping") == b": ping\n\n"
    encoded = encode_event(b"one\ntwo", "x") + encode_comment(b"c") + encode_event(b"z")
    assert decode(encoded) == [SSEEvent(b"one\ntwo", "x"), SSEComment(b"c"), SSEEvent(b"z")]


@given(
    st.lists(st.integers(min_value=0, max_value=12), max_size=40),
    st.sampled_from([b"\n", b"\r", b"\r\n"]),
)
def test_split_invariance(pieces: list[int], newline: bytes) -> None:
    data = STREAM.replace(b"\n", newline)
    assert decode(data, pieces) == EXPECTED


_text = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=["Cs"]), max_size=30
)


@given(
    st.lists(st.lists(_text, min_size=1, max_size=3), max_size=8),
    st.lists(st.integers(min_value=1, max_value=9), max_size=30),
)
def test_encode_then_decode_gives_the_data_back(events: list[list[str]], pieces: list[int]) -> None:
    payloads = ["\n".join(lines).encode() for lines in events]
    data = b"".join(encode_event(p) for p in payloads)
    assert decode(data, pieces) == [SSEEvent(p) for p in payloads]


# -- a byte-order mark before the first event (the SSE specification drops one) --


@pytest.mark.parametrize("newline", [b"\n", b"\r", b"\r\n"])
def test_a_leading_bom_is_dropped_whole_and_byte_by_byte(newline: bytes) -> None:
    data = BOM + STREAM.replace(b"\n", newline)
    assert decode(data) == EXPECTED
    assert byte_by_byte(data) == EXPECTED


@pytest.mark.parametrize("pieces", [[1], [2], [3], [1, 1], [1, 1, 1], [2, 5], [1, 4]])
def test_a_bom_split_across_reads_is_dropped(pieces: list[int]) -> None:
    assert decode(BOM + b"data: first\n\n", pieces) == [SSEEvent(b"first")]


@given(
    st.lists(st.integers(min_value=0, max_value=12), max_size=40),
    st.sampled_from([b"\n", b"\r", b"\r\n"]),
)
def test_a_leading_bom_is_dropped_at_any_split(pieces: list[int], newline: bytes) -> None:
    data = BOM + STREAM.replace(b"\n", newline)
    assert decode(data, pieces) == EXPECTED


def test_the_hot_path_drops_the_bom_and_forwards_the_rest_verbatim() -> None:
    decoder = SSEDecoder()
    assert decoder.split(b"\xef\xbb") == []
    assert decoder.verbatim is None
    assert decoder.split(b'\xbfdata: {"a":1}\n\ndata: {"b":2}\n\n') == [b'{"a":1}', b'{"b":2}']
    assert decoder.verbatim == b'data: {"a":1}\n\ndata: {"b":2}\n\n'


def test_only_the_first_bytes_of_the_stream_can_be_a_bom() -> None:
    # later, a BOM is data: inside a value it stays, before a field name it
    # makes an unknown field (ignored); a second leading BOM is not dropped
    assert decode(b"data: " + BOM + b"x\n\n") == [SSEEvent(BOM + b"x")]
    assert decode(b"data: a\n\n" + BOM + b"data: b\n\n") == [SSEEvent(b"a")]
    assert decode(b"data: a\n\n" + BOM + b"data: b\n\n", [9]) == [SSEEvent(b"a")]
    assert decode(BOM + BOM + b"data: b\n\ndata: c\n\n") == [SSEEvent(b"c")]


def test_a_partial_bom_is_not_a_bom() -> None:
    assert decode(b"\xef\xbbdata: x\n\ndata: y\n\n") == [SSEEvent(b"y")]
    assert decode(b"\xef\xbbdata: x\n\ndata: y\n\n", [1, 1]) == [SSEEvent(b"y")]
    assert decode(b"\xef") == []  # the stream ended inside what could have been one
    assert decode(b"\xef\xbb", [1]) == []


def test_no_bom_then_a_bom_looking_start_of_a_later_read() -> None:
    # the first read decided (no BOM); a later read that starts with one keeps it
    assert decode(b"data: a\n\n" + BOM + b"data: b\n\n", [9, 2]) == [SSEEvent(b"a")]
    assert decode(b"data: " + BOM + b"b\n\n", [6]) == [SSEEvent(BOM + b"b")]


def _decode_to_failure(data: bytes, pieces: list[int], plain: bool) -> list[object]:
    """What a decoder with a 20-byte bound hands out, the events an
    SSELineTooLong carries included, cut into `pieces`; ends at the failure."""
    decoder = SSEDecoder(max_line_bytes=20)
    out: list[object] = []
    pos = 0
    try:
        for size in [*pieces, len(data)]:
            chunk = data[pos : pos + size]
            pos += size
            out += decoder.split(chunk) if plain else decoder.feed(chunk)
        out += decoder.flush()
    except SSELineTooLong as exc:
        assert decoder.verbatim is None
        out += exc.events
    return [SSEEvent(e) if isinstance(e, bytes) else e for e in out]


GOOD = [b"data: a\n\n", b": c\n\n", b"event: e\ndata: b\n\n", b"data: ccc\n\n", b"\r\n"]
LONG = [b"data: " + b"x" * 30 + b"\n\n", b"event: e\ndata: " + b"y" * 30 + b"\n\n", b"data: zz" * 9]


@given(
    st.lists(st.sampled_from(GOOD), max_size=6),
    st.sampled_from(LONG),
    st.lists(st.integers(1, 12), max_size=12),
    st.booleans(),
)
def test_the_events_before_an_over_long_line_are_never_lost(
    before: list[bytes], long: bytes, pieces: list[int], plain: bool
) -> None:
    head = b"".join(before)
    expected = decode(head + b"\n\n", max_line_bytes=1000)
    got = _decode_to_failure(head + long + b"data: after\n\n", pieces, plain)
    assert got == expected


def test_an_over_long_line_at_the_end_keeps_the_events_before_it() -> None:
    decoder = SSEDecoder(max_line_bytes=20)
    got = decoder.feed(b"data: a\n\n: note\ndata: 0123456789\n")
    assert got == [SSEEvent(b"a"), SSEComment(b" note")]
    assert decoder.feed(b"data: 0123456789abc") == []  # the event's data grows past the bound
    with pytest.raises(SSELineTooLong) as info:
        decoder.flush()
    assert info.value.events == []
    decoder = SSEDecoder(max_line_bytes=20)
    assert decoder.feed(b"data: a\n") == []
    with pytest.raises(SSELineTooLong) as info:
        decoder.feed(b"\n: note\ndata: " + b"x" * 30 + b"\n")
    assert info.value.events == [SSEEvent(b"a"), SSEComment(b" note")]
