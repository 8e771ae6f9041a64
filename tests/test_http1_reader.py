"""The sans-IO response reader (proxy.http1.reader): every response fed whole,
one byte at a time, and with trailing data (`tr`), plus hypothesis splits
of generated responses."""

from __future__ import annotations

import gc
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.http1.errors import BadResponse, Disconnected, HTTPClientError
from proxy.http1.reader import (
    MAX_HEAD_BYTES,
    Body,
    End,
    Event,
    Head,
    Informational,
    ResponseReader,
)
from tests.casefiles import cut_at


def merged(events: Sequence[Event]) -> list[Event]:
    """Consecutive Body events joined (how many there are depends on the reads)."""
    out: list[Event] = []
    for event in events:
        if isinstance(event, Body) and out and isinstance(out[-1], Body):
            out[-1] = Body(out[-1].data + event.data)
        else:
            out.append(event)
    return out


def run(
    pieces: Sequence[bytes], *, head_only: bool = False, eof: bool = True
) -> tuple[list[Event], ResponseReader]:
    """Each piece fed in turn, then the end of input (when `eof`)."""
    reader = ResponseReader(head_only=head_only)
    events: list[Event] = []
    for piece in pieces:
        events += reader.feed(piece)
    if eof:
        events += reader.end_of_input()
    return merged(events), reader


def byte_by_byte(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def tr(data: bytes, expected: list[Event], *, head_only: bool = False, framed: bool = True) -> None:
    """`data` read whole, byte by byte, and (when its framing ends it, so that
    bytes after it are not part of it) with trailing data: the same events
    each time; trailing bytes other than CR and LF spoil the connection."""
    for pieces in ([data], byte_by_byte(data)):
        assert run(pieces, head_only=head_only)[0] == expected, pieces
    if not framed:
        return
    keep_alive = next(e.keep_alive for e in expected if isinstance(e, Head))
    for trailing, spoils in ((b"trailing", True), (b"\r\n", False)):
        for pieces in ([data + trailing], [data, trailing], [*byte_by_byte(data), trailing]):
            events, reader = run(pieces, head_only=head_only, eof=False)
            assert events == expected, pieces
            assert reader.reusable is (keep_alive and not spoils), pieces


def feed_to_the_end(reader: ResponseReader, pieces: Sequence[bytes]) -> None:
    for piece in pieces:
        reader.feed(piece)
    reader.end_of_input()


def tr_error(data: bytes, error: type[HTTPClientError], match: str | None = None) -> None:
    """`data` read whole and byte by byte: the same error, in feed() or at
    the end of input; and again from any later call."""
    for pieces in ([data], byte_by_byte(data)):
        reader = ResponseReader()
        with pytest.raises(error, match=match):
            feed_to_the_end(reader, pieces)
        with pytest.raises(error, match=match):
            reader.feed(b"HTTP/1.1 200 OK\r\n")
        with pytest.raises(error, match=match):
            reader.end_of_input()


def head(status: int = 200, *headers: tuple[str, str], keep_alive: bool = True) -> Head:
    return Head(status, tuple(headers), keep_alive)


# -- framing ---------------------------------------------------------------------------


def test_content_length_body() -> None:
    tr(
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhello",
        [head(200, ("Content-Length", "5"), ("X-A", "b")), Body(b"hello"), End()],
    )


def test_content_length_zero_has_no_body_event() -> None:
    tr(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", [head(200, ("Content-Length", "0")), End()])


def test_chunked_body_with_extensions_and_trailers() -> None:
    tr(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;name=value\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: t\r\n\r\n",
        [head(200, ("Transfer-Encoding", "chunked")), Body(b"hello world"), End()],
    )


def test_chunked_body_empty() -> None:
    tr(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        [head(200, ("Transfer-Encoding", "chunked")), End()],
    )


def test_chunked_as_the_last_of_several_codings() -> None:
    tr(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n",
        [head(200, ("Transfer-Encoding", "gzip, chunked")), Body(b"ab"), End()],
    )


@pytest.mark.parametrize(
    ("version", "extra"),
    [("1.1", ""), ("1.0", ""), ("1.1", "Transfer-Encoding: gzip\r\n")],
    ids=["1.1", "1.0", "transfer-coding-not-chunked"],
)
def test_body_delimited_by_the_close(version: str, extra: str) -> None:
    data = f"HTTP/{version} 200 OK\r\n{extra}\r\nuntil the end".encode()
    events, reader = run([data])
    assert events[1:] == [Body(b"until the end"), End()]
    assert events[0] == Head(200, events[0].headers, False)  # type: ignore[union-attr]
    assert not reader.reusable
    tr(data, events, framed=False)


def test_a_close_delimited_body_can_be_empty() -> None:
    tr(b"HTTP/1.1 200 OK\r\n\r\n", [head(200, keep_alive=False), End()], framed=False)


def test_one_body_event_per_feed_however_many_chunks() -> None:
    """The hot path: a read of many chunks is one Body event, not one per chunk."""
    chunks = b"".join(b"3\r\nabc\r\n" for _ in range(50))
    reader = ResponseReader()
    events = reader.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks)
    assert events == [head(200, ("Transfer-Encoding", "chunked")), Body(b"abc" * 50)]
    assert reader.feed(chunks + b"0\r\n\r\n") == [Body(b"abc" * 50), End()]


@pytest.mark.parametrize("status", [204, 304])
def test_statuses_without_a_body(status: int) -> None:
    data = f"HTTP/1.1 {status} X\r\nContent-Length: 10\r\n\r\n".encode()
    tr(data, [head(status, ("Content-Length", "10")), End()])


def test_a_status_line_without_a_reason() -> None:
    tr(b"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", [head(200, ("Content-Length", "0")), End()])


def test_header_bytes_are_latin_1() -> None:
    tr(
        b"HTTP/1.1 200 OK\r\nX-Name: caf\xe9\r\nContent-Length: 0\r\n\r\n",
        [head(200, ("X-Name", "caf\xe9"), ("Content-Length", "0")), End()],
    )


# -- keep-alive ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "connection", "keep_alive"),
    [
        ("1.1", None, True),
        ("1.1", "close", False),
        ("1.1", "keep-alive", True),
        ("1.0", None, False),
        ("1.0", "keep-alive", True),
    ],
)
def test_keep_alive_follows_the_version_and_connection(
    version: str, connection: str | None, keep_alive: bool
) -> None:
    headers = [("Content-Length", "2")] + ([("Connection", connection)] if connection else [])
    lines = "".join(f"{n}: {v}\r\n" for n, v in headers)
    data = f"HTTP/{version} 200 OK\r\n{lines}\r\nok".encode()
    tr(data, [Head(200, tuple(headers), keep_alive), Body(b"ok"), End()])
    assert run([data])[1].reusable is keep_alive


def test_not_reusable_before_the_end() -> None:
    reader = ResponseReader()
    reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\no")
    assert not reader.reusable
    reader.feed(b"k")
    assert reader.reusable


# -- informational responses, HEAD, 101 --------------------------------------------------


def test_informational_responses_then_the_final_one() -> None:
    tr(
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        [
            Informational(100, ()),
            Informational(103, (("Link", "</a.css>; rel=preload"),)),
            head(200, ("Content-Length", "2")),
            Body(b"ok"),
            End(),
        ],
    )


@pytest.mark.parametrize(
    "headers",
    [b"Content-Length: 1234\r\n", b"Transfer-Encoding: chunked\r\n", b""],
    ids=["content-length", "chunked", "no-framing"],
)
def test_a_head_only_response_ends_with_its_head(headers: bytes) -> None:
    """The answer to HEAD: whatever its headers announce, no body follows;
    bytes after it are never read as one, and the connection is not reused."""
    data = b"HTTP/1.1 200 OK\r\n" + headers + b"X-A: b\r\n\r\n"
    events, reader = run([data + b"stray body"], head_only=True)
    assert events[1:] == [End()]
    assert isinstance(events[0], Head)
    assert events[0].keep_alive is False
    assert not reader.reusable
    tr(data, events, head_only=True)


def test_a_head_only_response_after_an_informational_one() -> None:
    tr(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n",
        [Informational(100, ()), head(200, ("Content-Length", "9"), keep_alive=False), End()],
        head_only=True,
    )


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
    ],
)
def test_switching_protocols_is_refused(data: bytes) -> None:
    tr_error(data, BadResponse, "switched protocols")


# -- bytes after the end -------------------------------------------------------------------


def test_a_second_response_after_the_first_is_not_read() -> None:
    first = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
    stray = b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\n\r\nextra"
    events, reader = run([first + stray], eof=False)
    assert events == [head(200, ("Content-Length", "5")), Body(b"hello"), End()]
    assert not reader.reusable
    assert reader.end_of_input() == []


def test_bytes_after_a_response_that_closes_the_connection() -> None:
    data = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    events, reader = run([data + b"junk"], eof=False)
    assert events == [
        head(200, ("Content-Length", "2"), ("Connection", "close"), keep_alive=False),
        Body(b"ok"),
        End(),
    ]
    assert not reader.reusable


def test_an_idle_reader_spoiled_later_stays_spoiled() -> None:
    reader = ResponseReader()
    reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    assert reader.reusable
    assert reader.feed(b"\r\n") == []
    assert reader.reusable
    assert reader.feed(b"x") == []
    assert not reader.reusable
    assert reader.feed(b"\r\n") == []
    assert not reader.reusable


# -- faults -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"garbage\r\n\r\n",
        b"HTTP/2 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 099 Low\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\nContent-Length: 0\n\n",  # bare LF
        b"HTTP/1.1 200 OK\r\nBad Header: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokXX0\r\n\r\n",
    ],
    ids=[
        "garbage",
        "http2",
        "long-status",
        "status-below-100",
        "bare-lf",
        "space-in-name",
        "folded-header",
        "two-lengths",
        "negative-length",
        "length-and-chunked",
        "bad-chunk-size",
        "chunk-without-crlf",
    ],
)
def test_malformed_responses(data: bytes) -> None:
    tr_error(data, BadResponse)


def test_headers_larger_than_max_head_bytes() -> None:
    line = b"X-Big: " + b"v" * 1000 + b"\r\n"
    data = b"HTTP/1.1 200 OK\r\n" + line * (MAX_HEAD_BYTES // 1000 + 1) + b"\r\n"
    tr_error(data, BadResponse, "too large")


def test_a_head_that_never_ends_is_bounded() -> None:
    pieces = [b"HTTP/1.1 200 OK\r\nX-Endless: "] + [b"v" * 4096] * (2 * MAX_HEAD_BYTES // 4096)
    with pytest.raises(BadResponse, match="too large"):
        feed_to_the_end(ResponseReader(), pieces)


def test_informational_heads_count_towards_the_bound() -> None:
    pieces = [b"HTTP/1.1 100 Continue\r\n\r\n"] * (2 * MAX_HEAD_BYTES // 25 + 1)
    with pytest.raises(BadResponse, match="too large"):
        feed_to_the_end(ResponseReader(), pieces)


def test_a_large_head_within_the_bound_is_read() -> None:
    line = b"X-Big: " + b"v" * 1000 + b"\r\n"
    count = MAX_HEAD_BYTES // 1100
    data = b"HTTP/1.1 200 OK\r\n" + line * count + b"Content-Length: 0\r\n\r\n"
    events, reader = run([data])
    assert len(events[0].headers) == count + 1  # type: ignore[union-attr]
    assert reader.reusable


# -- the connection closing -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "without a response"),
        (b"HTTP/1.1 200 OK\r\nContent-", "without a response"),
        (b"HTTP/1.1 100 Continue\r\n\r\n", "without a response"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "mid-response"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", "mid-response"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", "mid-response"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n", "mid-response"),
    ],
    ids=[
        "nothing",
        "half-a-head",
        "only-informational",
        "short-body",
        "mid-chunk",
        "before-the-last-chunk",
        "in-the-trailers",
    ],
)
def test_closing_before_the_end_is_disconnected(data: bytes, match: str) -> None:
    tr_error(data, Disconnected, match)


def test_the_body_before_a_disconnect_was_given() -> None:
    reader = ResponseReader()
    events = reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort")
    assert events[1:] == [Body(b"short")]
    with pytest.raises(Disconnected):
        reader.end_of_input()


# -- generated responses, split anywhere ------------------------------------------------------


@st.composite
def responses(draw: st.DrawFn) -> tuple[bytes, list[Event]]:
    """A valid response (maybe after informational ones) and its events."""
    data = b""
    events: list[Event] = []
    for _ in range(draw(st.integers(0, 2))):
        data += b"HTTP/1.1 100 Continue\r\n\r\n"
        events.append(Informational(100, ()))
    status = draw(st.sampled_from([200, 201, 400, 404, 429, 500, 503]))
    names = st.text("abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12).map(lambda s: "x" + s)
    visible = st.characters(min_codepoint=0x21, max_codepoint=0xFF, exclude_characters="\x7f")
    values = st.text(visible, max_size=20)
    headers = draw(st.lists(st.tuples(names, values), max_size=4))
    body = draw(st.binary(max_size=300))
    framing = draw(st.sampled_from(["content-length", "chunked", "close"]))
    if framing == "content-length":
        headers.append(("Content-Length", str(len(body))))
        framed = body
    elif framing == "chunked":
        headers.append(("Transfer-Encoding", "chunked"))
        sizes = draw(st.lists(st.integers(1, 50), max_size=10))
        framed = b"".join(
            b"%x\r\n%s\r\n" % (len(piece), piece) for piece in cut_at(body, sizes) if piece
        )
        framed += b"0\r\n\r\n"
    else:
        framed = body
    lines = "".join(f"{n}: {v}\r\n" for n, v in headers)
    data += f"HTTP/1.1 {status} Reason\r\n{lines}\r\n".encode("latin-1") + framed
    events.append(Head(status, tuple(headers), framing != "close"))
    if body:
        events.append(Body(body))
    events.append(End())
    return data, events


@given(responses(), st.lists(st.integers(min_value=0, max_value=60), max_size=40))
def test_generated_responses_split_anywhere(
    response: tuple[bytes, list[Event]], sizes: list[int]
) -> None:
    data, expected = response
    assert run([data])[0] == expected
    assert run(cut_at(data, sizes))[0] == expected


@pytest.mark.parametrize(
    ("data", "head_only"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", False),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", True),
        (b"HTTP/1.1 200 OK\r\n\r\nclose-delimited", False),
    ],
    ids=["complete", "head-only", "ended-by-the-close"],
)
def test_a_finished_reader_leaves_no_cycle_behind(data: bytes, head_only: bool) -> None:
    """The parser calls back into its reader (a reference cycle); a reader
    that ended or failed lets go of its parser, so it is freed at its last
    reference, not by the cycle collector (one per response otherwise: the
    hot path paid for it in collections)."""
    gc.collect()
    gc.disable()
    try:
        reader = ResponseReader(head_only=head_only)
        reader.feed(data)
        reader.end_of_input()
        del reader
        # (other threads may leave garbage of their own: look for readers only)
        assert not any(type(o) is ResponseReader for o in gc.get_objects())
    finally:
        gc.enable()
